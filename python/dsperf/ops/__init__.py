"""dsperf.ops: one home per kernel family.

Each module here declares its families (dsperf.ops.family.OpFamily): parameters, work for the
cost model, efficiency key, harness inputs, sweep points, kernel and reference. kernel_cost,
harness, sweeps, calibration and the report iterate FAMILIES; none of them names a family.
Adding a family: docs/ADDING_A_KERNEL.md.
"""
from __future__ import annotations

from . import decode_layer, dispatch_combine, experts, gate, linear, mla_decode, mla_layer, moe_layer
from .family import OpFamily

# The family modules, in the order listings and sweeps follow.
MODULES = (linear, gate, dispatch_combine, experts, mla_decode, mla_layer, moe_layer, decode_layer)


def _families_of(module) -> tuple[OpFamily, ...]:
    return getattr(module, "FAMILIES", None) or (module.FAMILY,)


FAMILIES: dict[str, OpFamily] = {f.name: f for m in MODULES for f in _families_of(m)}


def get(name) -> OpFamily:
    """The family of that name; ValueError naming the known ones otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"family must be a string, got {name!r}")
    fam = FAMILIES.get(name)
    if fam is None:
        raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}")
    return fam


def base() -> dict[str, OpFamily]:
    """Families with work of their own (calibration fits them)."""
    return {n: f for n, f in FAMILIES.items() if not f.composite}


def composite() -> dict[str, OpFamily]:
    """Families priced only as their parts (predicted, never fitted)."""
    return {n: f for n, f in FAMILIES.items() if f.composite}


def _sweep(which: str, quick: bool) -> list[tuple[str, dict]]:
    return [(f.name, p) for f in FAMILIES.values() for p in getattr(f, which)() if not (quick and f.large(p))]


def fit_points(quick: bool = False) -> list[tuple[str, dict]]:
    """The calibration sweep (quick: without the longest-running points)."""
    return _sweep("fit_points", quick)


def default_points(quick: bool = False) -> list[tuple[str, dict]]:
    """The report's sweep: other shapes than the fit, plus the composite families."""
    return _sweep("default_points", quick)


__all__ = ["FAMILIES", "MODULES", "OpFamily", "base", "composite", "default_points", "fit_points", "get"]
