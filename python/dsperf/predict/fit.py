"""Predicted against measured: fit per-family efficiencies to measured kernel times, predict a
sweep with them, and summarise the errors.

The fit is a grid search per efficiency key (family, or family/dtype) over the compute and memory
efficiencies, a fixed per-call overhead and how far the memory traffic overlaps the arithmetic,
minimising the absolute log error of
kernel_cost.predict_ms; it sees only the calibration sweep, so errors on the report's sweep are
out of sample. Composite families are never fitted. Efficiencies are kept physical (at most 1 of
the roof they are priced on, the cache roof where data fit in the cache), and values the data push
against an edge of the search are named, not silently used.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from .. import _C
from .kernel_cost import (BASE_FAMILIES, FAMILIES, FittedEfficiency, KernelEfficiency, efficiency_key,
                          lookup_efficiency, part_seconds, parts)

# Search grid: compute efficiencies from 0.1% and memory ones from 1% up to EFFICIENCY_CAP (the
# compute roof is the fastest unit probed: on an AMX CPU the tile peak, 15-30x the FMA and
# VDPBF16PS peaks, so a kernel running on those units sits at 1-5% of it, and MLA's CC prefill
# layer, mostly outside the tiles, wanted less than 1% and was fitted at the old 1% edge),
# overheads from 0 to 3 ms, and the serial
# share of the shorter roofline term from 0 (overlapped) to 1 (in series) in tenths. An
# efficiency is a fraction of a measured roof: above 1 the roof is wrong, not the kernel fast, so
# the grid stops at 1. The overheads reach 3 ms because a whole MLA layer's fixed cost on a CPU
# (its norms, RoPE and a dozen thread fork/joins around its GEMMs) measured 0.3-1.4 ms; a 300 us
# edge held those families' fits at the bound. The serial share was a yes/no until 2026-11-26:
# packed BF16 GEMMs hide part of their weight stream, and neither end fitted them. A memory-bound family whose data fit in the last-level cache and that would
# need more than the memory roof is fitted on the cache roof instead (the probe `cache_read`).
EFFICIENCY_CAP = 1.0
COMPUTE_GRID = np.geomspace(0.001, EFFICIENCY_CAP, 100)
MEMORY_GRID = np.geomspace(0.01, EFFICIENCY_CAP, 80)
OVERHEAD_GRID_US = np.concatenate([[0.0], np.geomspace(1.0, 3000.0, 31)])
SERIAL_GRID = np.linspace(0.0, 1.0, 11)


def _params(row: Mapping, family: str) -> dict:
    """A point's parameters from a sweep row (NaN-free, ints where they were ints)."""
    out = {}
    for k in FAMILIES[family]:
        v = row.get(k)
        if v is None or (isinstance(v, float) and np.isnan(v)):
            continue
        out[k] = int(v) if isinstance(v, (float, np.floating)) and float(v).is_integer() else v
        if isinstance(out[k], np.integer):
            out[k] = int(out[k])
    return out


def points_of(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """(family, params) of every row of a sweep DataFrame."""
    return [(r["kernel"], _params(r, r["kernel"])) for r in df.to_dict("records")]


def _check_sweep(df) -> None:
    """A measured sweep: a DataFrame with 'kernel' and 'measured_ms', every time finite and > 0 (the
    fit takes logs and the errors divide by it: a zero or NaN would turn into a silent inf)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a pandas DataFrame (a harness sweep), got {type(df).__name__}")
    missing = [c for c in ("kernel", "measured_ms") if c not in df.columns]
    if missing:
        raise ValueError(f"df must have the columns 'kernel' and 'measured_ms' (a harness sweep); '{missing[0]}' is missing")
    try:
        ms = df["measured_ms"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("df column 'measured_ms' must hold numbers") from None
    bad = ~(np.isfinite(ms) & (ms > 0))
    if bad.any():
        raise ValueError(f"df column 'measured_ms' must be finite and > 0; row {int(np.argmax(bad))} has {ms[bad][0]!r}")
    unknown = set(df["kernel"]) - set(FAMILIES)
    if unknown:
        raise ValueError(f"df column 'kernel' names an unknown kernel family {sorted(map(str, unknown))[0]!r}")


def fit_efficiencies(df: pd.DataFrame, spec, cache_resident=False, llc_bytes=None) -> dict[str, FittedEfficiency]:
    """Fits one efficiency per efficiency key from a measured sweep of base families.

    A point whose parts belong to other families (an MLA layer's GEMMs are `linear` parts) is
    fitted on what is left of its time once those parts are priced with their own fitted
    efficiencies, so those families are fitted first.

    Efficiencies stay within (0, EFFICIENCY_CAP]. A family that would need a memory efficiency
    above the cap, and whose every point's data fit in llc_bytes (default: this machine's
    last-level cache), is fitted on the cache roof instead (roof="cache"). Values the data push
    against an edge of the search are named in each result's at_bound."""
    _check_sweep(df)
    if llc_bytes is None:
        from .harness import l3_bytes

        llc_bytes = l3_bytes()
    rows = [(f, parts(f, p), m * 1e-3) for (f, p), m in zip(points_of(df), df["measured_ms"]) if f in BASE_FAMILIES]
    out: dict[str, FittedEfficiency] = {}
    # Families that are whole kernels first, then those with parts priced by the others.
    for stage in (False, True):
        groups: dict[str, list[tuple[float, float, bool, float]]] = {}
        for family, ps, measured in rows:
            if (len(ps) > 1) != stage:
                continue
            own = [(q, w) for f, q, w in ps if f == family]
            others = sum(part_seconds(w, spec, lookup_efficiency(out, f, q), cache_resident)
                         - spec.call_overhead_us * 1e-6 for f, q, w in ps if f != family)
            target = max(measured - others, 0.05 * measured)  # never below 5% of the measurement
            flops = sum(w.flops for _, w in own)
            nbytes = sum(w.bytes for _, w in own)
            groups.setdefault(efficiency_key(family, own[0][0]), []).append(
                (flops, nbytes, any(w.fp8 for _, w in own), target))
        for key, pts in groups.items():
            out[key] = _fit_one(pts, spec, cache_resident, llc_bytes)
    return out


def _data_loss(ideal, meas, spec, c, m, o, serial) -> float:
    """Sum of |log(predicted / measured)| of one efficiency's points."""
    tc, tm = ideal[:, 0] / c, ideal[:, 1] / m
    t = (spec.call_overhead_us + o) * 1e-6 + np.maximum(tc, tm) + serial * np.minimum(tc, tm)
    return float(np.abs(np.log(t / meas)).sum())


def _search(ideal, meas, spec) -> tuple[float, tuple]:
    """(loss, (compute, memory, overhead_us, serial)) of the best point of the grid."""
    tc = ideal[:, 0][None, None, None, :] / COMPUTE_GRID[:, None, None, None]
    tm = ideal[:, 1][None, None, None, :] / MEMORY_GRID[None, :, None, None]
    oh = ((spec.call_overhead_us + OVERHEAD_GRID_US) * 1e-6)[None, None, :, None]
    best = None
    longer, shorter = np.maximum(tc, tm), np.minimum(tc, tm)
    for serial in SERIAL_GRID:
        err = np.log((oh + longer + serial * shorter) / meas)
        # Absolute log error (one disturbed point of a small group pulls less than under squares),
        # plus a small pull towards efficiencies of 1 and no overhead, which only decides between
        # fits the data cannot tell apart.
        loss = np.abs(err).sum(-1)
        loss = loss + 1e-3 * (np.log(COMPUTE_GRID)[:, None, None] ** 2 + np.log(MEMORY_GRID)[None, :, None] ** 2)
        loss = loss + 1e-3 * np.log1p(OVERHEAD_GRID_US)[None, None, :]
        i, j, k = np.unravel_index(np.argmin(loss), loss.shape)
        if best is None or loss[i, j, k] < best[0]:
            best = (float(loss[i, j, k]), (float(COMPUTE_GRID[i]), float(MEMORY_GRID[j]), float(OVERHEAD_GRID_US[k]),
                                           float(serial)))
    return best


def _at_bound(ideal, meas, spec, fit) -> list[str]:
    """The values of a fit that the data push past an edge of the search: its error falls when
    the value steps 10% beyond the edge. A value resting at an edge the data do not care about
    (the compute efficiency of a memory-bound family, held at 1 by the pull towards 1) is not
    named, nor an overhead of 0, which is a real value."""
    c, m, o, serial = fit
    base = _data_loss(ideal, meas, spec, c, m, o, serial)
    out = []
    for i, (name, grid) in enumerate((("compute", COMPUTE_GRID), ("memory", MEMORY_GRID),
                                      ("overhead_us", OVERHEAD_GRID_US))):
        edges = [(grid[-1], 1.1, ">=")] + ([(grid[0], 1 / 1.1, "<=")] if name != "overhead_us" else [])
        for edge, step, sign in edges:
            if fit[i] == edge:
                trial = list(fit)
                trial[i] = edge * step
                # More than 0.1% of error per point: a pull the data really exert.
                if _data_loss(ideal, meas, spec, *trial) < base - 1e-3 * len(meas):
                    out.append(f"{name}{sign}{edge:g}")
    return out


def _fit_one(pts, spec, cache_resident, llc_bytes) -> FittedEfficiency:
    """Grid search of one efficiency over (flops, bytes, fp8, seconds) points: on the memory roof
    first, then on the cache roof where that one binds (see fit_efficiencies)."""
    kc = _C.kernel_cost
    meas = np.array([p[3] for p in pts])

    def fit_on(cache_roof):
        ideal = np.array([kc.roofline_times(kc.KernelWork(f, b, fp8), spec, cache_roof) for f, b, fp8, _ in pts])
        loss, fit = _search(ideal, meas, spec)
        return loss, fit, _at_bound(ideal, meas, spec, fit)

    loss, fit, bound = fit_on(cache_resident)
    roof = "cache" if cache_resident else "memory"
    wants_more = f"memory>={MEMORY_GRID[-1]:g}" in bound
    if (wants_more and not cache_resident and spec.cache_bw_gbps > spec.mem_bw_gbps
            and all(b <= llc_bytes for _, b, _, _ in pts)):
        c_loss, c_fit, c_bound = fit_on(True)
        if c_loss <= loss:
            fit, bound, roof = c_fit, c_bound, "cache"
    return FittedEfficiency(*fit, roof=roof, at_bound=bound)


def predict_frame(df: pd.DataFrame, spec, efficiencies: Mapping[str, KernelEfficiency],
                  cache_resident=False, bands: Mapping[str, float] | None = None) -> pd.DataFrame:
    """The sweep with predicted_ms, the work (GFLOP, MB), the bound the roofline picks, and the
    relative error (predicted - measured) / measured. bands ({"compute", "memory", "cache"}:
    calibrate.probe_bands) adds probe_band, the relative spread of the probe behind the roof that
    bounds each point: the part of its error the machine's own noise accounts for."""
    from .kernel_cost import predict_ms, work

    _check_sweep(df)
    out = df.copy()
    pred, gflop, mb, bound, eff_keys, band = [], [], [], [], [], []
    for family, p in points_of(df):
        pred.append(predict_ms(family, p, spec, efficiencies, cache_resident))
        w = work(family, p)
        gflop.append(w.flops / 1e9)
        mb.append(w.bytes / 1e6)
        compute_s, memory_s = _C.kernel_cost.roofline_times(w, spec, cache_resident)
        bound.append("compute" if compute_s > memory_s else "memory")
        eff_keys.append(efficiency_key(family, p) if family in BASE_FAMILIES else "(parts)")
        if bands is not None:
            cached = cache_resident or (family in BASE_FAMILIES and
                                        getattr(lookup_efficiency(efficiencies, family, p), "roof", "") == "cache")
            band.append(bands["compute"] if bound[-1] == "compute" else bands["cache" if cached else "memory"])
    out["predicted_ms"] = pred
    out["gflop"] = gflop
    out["mbytes"] = mb
    out["bound"] = bound
    out["efficiency_key"] = eff_keys
    if bands is not None:
        out["probe_band"] = band
    out["rel_error"] = (out["predicted_ms"] - out["measured_ms"]) / out["measured_ms"]
    return out


def error_summary(pred: pd.DataFrame) -> pd.DataFrame:
    """Median and 90th-percentile |relative error| per kernel family and overall."""
    rows = []
    for name, g in list(pred.groupby("kernel", sort=False)) + [("overall", pred)]:
        e = g["rel_error"].abs()
        rows.append({"kernel": name, "points": len(g), "median_abs_error": float(e.median()),
                     "p90_abs_error": float(np.percentile(e, 90)), "worst_error": float(g["rel_error"].iloc[e.argmax()])})
    return pd.DataFrame(rows)


def efficiencies_table(effs: Mapping[str, KernelEfficiency]) -> pd.DataFrame:
    return pd.DataFrame([{"key": k, "compute": e.compute, "memory": e.memory, "overhead_us": e.overhead_us,
                          "serial": e.serial, "roof": getattr(e, "roof", "memory"),
                          "at_bound": ", ".join(getattr(e, "at_bound", ()))}
                         for k, e in sorted(effs.items())])
