"""The kernel points dsperf measures: the fit sweep calibration learns the efficiencies from, and
the default sweep the report predicts. Each family declares its own points (dsperf.ops); the two
sweeps use different shapes, so the report's errors are out of sample; the composite layers
(moe_layer, decode_layer) appear only in the default sweep, predicted from their parts.

Shapes are DeepSeek-V3's (dim 7168, expert inter 2048, q_lora 1536, latent 512) on one rank of a
deployment: 16 attention heads (TP8) or 128 (TP1), a handful of local experts.
"""
from __future__ import annotations

from .. import ops


def fit_points(quick=False):
    """The calibration sweep (quick: the smallest set that still fits every efficiency)."""
    return ops.fit_points(quick)


def default_points(quick=False):
    """The report's sweep: other shapes than the fit, plus the composite layers."""
    return ops.default_points(quick)
