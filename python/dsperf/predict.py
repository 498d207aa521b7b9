"""Predicted against measured: fit per-family efficiencies to measured kernel times, predict a
sweep with them, and summarise the errors.

The fit is a grid search per efficiency key (family, or family/dtype) over the compute and memory
efficiencies and a fixed per-call overhead, minimising the absolute log error of
kernel_cost.predict_ms; it sees only the calibration sweep, so errors on the report's sweep are
out of sample. Composite families are never fitted.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from . import _C
from .kernel_cost import BASE_FAMILIES, FAMILIES, KernelEfficiency, efficiency_key, lookup_efficiency, parts

# Search grid: efficiencies from 1% to 300% (above 1 where the probes under-read what a kernel's
# access pattern gets, e.g. partly cache-resident data), overheads from 0 to 2 ms.
COMPUTE_GRID = np.geomspace(0.01, 3.0, 90)
MEMORY_GRID = np.geomspace(0.01, 3.0, 90)
OVERHEAD_GRID_US = np.concatenate([[0.0], np.geomspace(1.0, 300.0, 25)])


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


def fit_efficiencies(df: pd.DataFrame, spec, cache_resident=False) -> dict[str, KernelEfficiency]:
    """Fits one KernelEfficiency per efficiency key from a measured sweep of base families.

    A point whose parts belong to other families (an MLA layer's GEMMs are `linear` parts) is
    fitted on what is left of its time once those parts are priced with their own fitted
    efficiencies, so those families are fitted first."""
    kc = _C.kernel_cost
    _check_sweep(df)
    rows = [(f, parts(f, p), m * 1e-3) for (f, p), m in zip(points_of(df), df["measured_ms"]) if f in BASE_FAMILIES]
    out: dict[str, KernelEfficiency] = {}
    # Families that are whole kernels first, then those with parts priced by the others.
    for stage in (False, True):
        groups: dict[str, list[tuple[float, float, bool, float]]] = {}
        for family, ps, measured in rows:
            if (len(ps) > 1) != stage:
                continue
            own = [(q, w) for f, q, w in ps if f == family]
            others = sum(kc.kernel_seconds(w, spec, lookup_efficiency(out, f, q), cache_resident)
                         - spec.call_overhead_us * 1e-6 for f, q, w in ps if f != family)
            target = max(measured - others, 0.05 * measured)  # never below 5% of the measurement
            flops = sum(w.flops for _, w in own)
            nbytes = sum(w.bytes for _, w in own)
            groups.setdefault(efficiency_key(family, own[0][0]), []).append(
                (flops, nbytes, any(w.fp8 for _, w in own), target))
        for key, pts in groups.items():
            out[key] = _fit_one(pts, spec, cache_resident)
    return out


def _fit_one(pts, spec, cache_resident) -> KernelEfficiency:
    """Grid search of one efficiency over (flops, bytes, fp8, seconds) points."""
    kc = _C.kernel_cost
    ideal = np.array([kc.roofline_times(kc.KernelWork(f, b, fp8), spec, cache_resident) for f, b, fp8, _ in pts])
    meas = np.array([p[3] for p in pts])
    tc = ideal[:, 0][None, None, None, :] / COMPUTE_GRID[:, None, None, None]
    tm = ideal[:, 1][None, None, None, :] / MEMORY_GRID[None, :, None, None]
    oh = ((spec.call_overhead_us + OVERHEAD_GRID_US) * 1e-6)[None, None, :, None]
    best = None
    for overlap in (True, False):
        err = np.log((oh + (np.maximum(tc, tm) if overlap else tc + tm)) / meas)
        # Absolute log error (one disturbed point of a small group pulls less than under squares),
        # plus a small pull towards efficiencies of 1 and no overhead, which only decides between
        # fits the data cannot tell apart.
        loss = np.abs(err).sum(-1)
        loss = loss + 1e-3 * (np.log(COMPUTE_GRID)[:, None, None] ** 2 + np.log(MEMORY_GRID)[None, :, None] ** 2)
        loss = loss + 1e-3 * np.log1p(OVERHEAD_GRID_US)[None, None, :]
        i, j, k = np.unravel_index(np.argmin(loss), loss.shape)
        if best is None or loss[i, j, k] < best[0]:
            best = (loss[i, j, k], kc.KernelEfficiency(float(COMPUTE_GRID[i]), float(MEMORY_GRID[j]),
                                                       float(OVERHEAD_GRID_US[k]), overlap))
    return best[1]


def predict_frame(df: pd.DataFrame, spec, efficiencies: Mapping[str, KernelEfficiency],
                  cache_resident=False) -> pd.DataFrame:
    """The sweep with predicted_ms, the work (GFLOP, MB), the bound the roofline picks, and the
    relative error (predicted - measured) / measured."""
    from .kernel_cost import predict_ms, work

    _check_sweep(df)
    out = df.copy()
    pred, gflop, mb, bound, eff_keys = [], [], [], [], []
    for family, p in points_of(df):
        pred.append(predict_ms(family, p, spec, efficiencies, cache_resident))
        w = work(family, p)
        gflop.append(w.flops / 1e9)
        mb.append(w.bytes / 1e6)
        compute_s, memory_s = _C.kernel_cost.roofline_times(w, spec, cache_resident)
        bound.append("compute" if compute_s > memory_s else "memory")
        eff_keys.append(efficiency_key(family, p) if family in BASE_FAMILIES else "(parts)")
    out["predicted_ms"] = pred
    out["gflop"] = gflop
    out["mbytes"] = mb
    out["bound"] = bound
    out["efficiency_key"] = eff_keys
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
                          "overlap": e.overlap}
                         for k, e in sorted(effs.items())])
