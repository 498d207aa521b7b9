"""dsperf.prefill, dsperf.decode and dsperf.decode_sweep: one call, either model.

mode "grounded" (the default) prices each step kernel by kernel from published kernel benchmarks,
validated against published deployments (model/grounded.py, laid out in these frames by
model/grounded_frames.py; docs/VALIDATION.md), and its frames carry the error band of their regime.
mode "corrected" or "as_published" (optionally +fix/-fix) runs the seed analysis' formulas
(dsperf/seed/formulas.py; docs/DEVIATIONS.md).
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..seed import formulas as seed
from . import grounded_frames
from .._checks import MAX_TOKENS, number_list, text
from .configs import load_model

DEFAULT_MODE = "grounded"


def _is_grounded(mode) -> bool:
    return text("mode", mode) == "grounded"


def prefill(model="DeepSeek-V3", devices=("H800", "H20"), seq_len=4383, kv_cache_hit=0.563, tp=4, dp=8,
            dispatch_nodes=4, mode=DEFAULT_MODE, gpus=None) -> pd.DataFrame:
    """Prefill per-layer times (ms), layer sums, tokens/s per node and KV transfer per device.

    One row per device; ``gpus``, when given, must equal tp * dp."""
    if not _is_grounded(mode):
        return seed.prefill(model, devices, seq_len, kv_cache_hit, tp, dp, dispatch_nodes, mode, gpus)
    m = load_model(model)
    args = seed.prefill_args(seq_len, kv_cache_hit, tp, dp, dispatch_nodes, gpus)
    return grounded_frames.grounded_prefill(m, devices, *args)


def decode(model="DeepSeek-V3", devices=("H800", "H20", "H20_3e"), seq_len=4383, decode_len=1210,
           batch_sizes: Iterable[float] = (32, 64, 128, 256), tp=0, ep=144, redundant_experts=32,
           absorbed=True, kv_fp8=True, group_gemm_discount=0.7, mode=DEFAULT_MODE) -> pd.DataFrame:
    """Decode step breakdown per (device, batch): per-layer times (ms), TPOT, TPS per user,
    tokens/s per GPU, and the memory-limited batch (the seed's modes add the overlap time budget).
    tp=0 applies the mode's choice (grounded: DP attention; the seed's: its best-TP rule)."""
    if not _is_grounded(mode):
        return seed.decode(model, devices, seq_len, decode_len, batch_sizes, tp, ep, redundant_experts, absorbed,
                           kv_fp8, group_gemm_discount, mode)
    m = load_model(model)
    batches = number_list("batch_sizes", batch_sizes, lo=0, lo_open=True, hi=MAX_TOKENS)
    return grounded_frames.grounded_decode(m, devices, seq_len, decode_len, batches, tp, ep, redundant_experts,
                                           absorbed, kv_fp8, group_gemm_discount)


def decode_sweep(model="DeepSeek-V3", devices=("H800",), batch=(32,), seq_len=(4383,), decode_len=(1210,),
                 tp=(0,), ep=(144,), redundant_experts=None, kv_fp8=(True,), absorbed=True,
                 group_gemm_discount=0.7, mode=DEFAULT_MODE) -> pd.DataFrame:
    """Evaluate the Cartesian product of the axes in one C++ call; one row per point.

    ``redundant_experts`` pairs element-wise with ``ep`` (default: 32 each). ``tp`` is the attention
    TP; 0 asks the mode for its choice: the grounded model takes DP attention (TP1), the seed's
    modes their best-TP rule, whose rows then equal those of the TP it picked (``mla_tp`` says
    which). Row order (seed modes): device > tp > ep > kv_fp8 > seq_len > decode_len > batch
    (innermost); grounded: seq_len > decode_len > device > ep > tp > kv_fp8 > batch. Columns include
    ``fits_memory`` (the batch fits beside the weights)."""
    if not _is_grounded(mode):
        return seed.decode_sweep(model, devices, batch, seq_len, decode_len, tp, ep, redundant_experts, kv_fp8,
                                 absorbed, group_gemm_discount, mode)
    return grounded_frames.grounded_sweep(load_model(model), devices, batch, seq_len, decode_len, tp, ep,
                                          redundant_experts, kv_fp8, absorbed, group_gemm_discount)
