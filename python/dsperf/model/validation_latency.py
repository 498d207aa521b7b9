"""The serving simulator against published DeepSeek-V3/R1 latencies: one row per published figure
(data/validation/latency_points.csv) measured at a stated concurrency, with the settings it was
measured with, the inputs its source did not publish and the value taken for them, and what the
model lacks for it (docs/VALIDATION_LATENCY.md).

Each row is predicted by dsperf.serving.simulate run at the row's concurrency (a closed loop of
that many clients), layout, lengths and MTP, with a fixed seed; rows with the same settings share
one run. error = predicted / published - 1. The rows come out with the columns of the peak section
(dsperf.model.validation.validate), phase ``serving``, bound ``ttft`` or ``tpot`` (TPOT, ITL and
tokens/s per user), and a leave-one-out band over the other latency check points.
"""
from __future__ import annotations

import math
from importlib import resources
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from . import bands, grounded
from .validation import BEYOND, load_table

SEED = 0

# Each run's percentile table by run key, kept for the process: the simulations are deterministic
# (fixed seed) and their inputs are read once per process (devices.py caches them too), so a second
# validate_latency() in one process -- the CLI's sections, the docs, the bands, the tests -- reuses the
# runs instead of simulating up to 10^5 requests again. validate_latency(fresh=True) runs them anew.
_PERCENTILES: dict[tuple, pd.DataFrame] = {}


class MetricRead(NamedTuple):
    label: str          # as the docs' tables print it
    row: str            # the simulation's percentile row read (P50)
    convert: Callable   # that value -> the published quantity
    bound: str          # the summary's group: a key of BOUND_LABELS
    unit: str           # what the figure counts (the input guard compares ratios within one unit)


# The summary's two groups of metrics: the first token's wait, and the time between tokens.
BOUND_LABELS = {"ttft": "TTFT", "tpot": "TPOT / ITL / tokens per user"}


# Each metric a point may publish: the simulation's percentile row it reads (P50), and how that
# value becomes the published quantity.
METRIC_READS = {
    "ttft_p50_ms": MetricRead("median TTFT (ms)", "ttft_ms", lambda v: v, "ttft", "ms"),
    "tpot_p50_ms": MetricRead("median TPOT (ms)", "tpot_ms", lambda v: v, "tpot", "ms"),
    "itl_p50_ms": MetricRead("median ITL (ms)", "itl_ms", lambda v: v, "tpot", "ms"),
    "tps_user": MetricRead("tokens/s per user", "tpot_ms", lambda v: 1000.0 / v, "tpot", "tokens/s"),  # from the median TPOT
}
METRICS = tuple(METRIC_READS)
TEXT_FIELDS = ("point", "source", "device", "metric", "kind", "mode", "overlap", "prefill_overlap", "weight_dtype",
               "assumed", "missing")
BOOL_FIELDS = ("kv_fp8", "dispatch_fp4")
# The fields of a row that set its simulation (rows equal in all of them share one run).
RUN_FIELDS = ("device", "mode", "concurrency", "input_len", "output_len", "duration_s", "range_ratio", "num_prompts",
              "ep", "attn_tp", "moe_tp", "redundant_experts", "replicas", "max_running", "overlap", "mtp", "mtp_accepted",
              "kv_fp8", "dispatch_fp4", "weight_dtype", "prefill_ep", "prefill_attn_tp", "prefill_redundant_experts",
              "prefill_replicas", "prefill_moe_tp", "prefill_overlap", "prefill_max_num_tokens", "prefill_max_running", "mem_fraction",
              "recv_interval")
# Numeric settings passed to the simulator as ints; a blank one takes the simulator's default
# (prefill_max_num_tokens: serving.simulate's DEFAULT_PREFILL_TOKENS per rank per step).
_INT_FIELDS = ("concurrency", "input_len", "output_len", "num_prompts", "ep", "attn_tp", "moe_tp", "redundant_experts", "replicas",
               "max_running", "mtp", "prefill_ep", "prefill_attn_tp", "prefill_redundant_experts", "prefill_replicas",
               "prefill_moe_tp", "prefill_max_num_tokens", "prefill_max_running", "recv_interval")


def _latency_points_path():
    return resources.files("dsperf") / "data" / "validation" / "latency_points.csv"


def load_latency_points() -> list[dict]:
    """The published latency points as dicts (numbers parsed, blanks dropped)."""
    points = load_table(_latency_points_path(), TEXT_FIELDS, BOOL_FIELDS)
    for p in points:
        if p.get("metric") not in METRICS:
            raise ValueError(f"{_latency_points_path()}, point {p.get('point')}: metric must be one of "
                             f"{', '.join(METRICS)}, got {p.get('metric')!r}")
    return points


def run_key(p: dict) -> tuple:
    return tuple(p.get(k) for k in RUN_FIELDS)


def simulate_point(p: dict):
    """The simulation a point's settings describe (dsperf.serving.simulate, closed loop, fixed seed)."""
    from .. import serving
    from ..serving.simulate import DEFAULT_MAX_WAITING

    kw = {k: int(p[k]) for k in _INT_FIELDS if k in p}
    for k in ("mtp_accepted", "duration_s", "range_ratio", "mem_fraction"):
        if k in p:
            kw[k] = float(p[k])
    for k in ("mode", "overlap", "prefill_overlap", "weight_dtype") + BOOL_FIELDS:
        if k in p:
            kw[k] = p[k]
    # A closed loop never holds more than its clients: the overload guard is set above them.
    kw["max_waiting"] = max(DEFAULT_MAX_WAITING, 2 * kw["concurrency"])
    return serving.simulate("DeepSeek-V3", p["device"], seed=SEED, **kw)


def metric_of(percentiles: pd.DataFrame, metric: str) -> float:
    """A point's metric read from a simulation's percentiles (ServingResult.percentiles(): P50 over
    finished requests, or over every emission gap for ITL)."""
    if metric not in METRIC_READS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    read = METRIC_READS[metric]
    return float(read.convert(float(percentiles.loc[read.row, "p50"])))


def validate_latency(*, fresh: bool = False) -> pd.DataFrame:
    """Predicted against published for every latency point, with the peak section's columns
    (dsperf.model.validation.validate): error = predicted / published - 1, phase ``serving``,
    bound ``ttft`` or ``tpot``, and each point's leave-one-out band over the other latency points.
    fresh: simulate every run again instead of reusing this process's earlier runs (_PERCENTILES)."""
    runs = {} if fresh else _PERCENTILES
    rows = []
    for p in load_latency_points():
        key = run_key(p)
        if key not in runs:
            runs[key] = simulate_point(p).percentiles()
        pred = metric_of(runs[key], p["metric"])
        peak = p["kind"] == "peak"
        rows.append({"point": p["point"], "source": p["source"], "device": p["device"], "phase": "serving",
                     "metric": p["metric"], "published": p["published"], "predicted": pred,
                     "error": pred / p["published"] - 1 if peak else math.nan, "utilisation": math.nan,
                     "kind": p["kind"], "role": p["role"], "added": p["added"],
                     "table": grounded.table_kind(p["device"]), "bound": METRIC_READS[p["metric"]].bound,
                     "assumed": p.get("assumed", ""), "missing": p.get("missing", "")})
    return bands.leave_one_out(pd.DataFrame(rows))


def latency_summary(df: pd.DataFrame | None = None) -> dict:
    """Median and worst |error| over the peak latency points, by TTFT and TPOT-like metrics
    (BOUND_LABELS) and over the `check` points alone, and the share of check points inside their
    leave-one-out band."""
    df = validate_latency() if df is None else df
    peaks = df[df["kind"] == "peak"]
    err = peaks["error"].abs()
    check = peaks[peaks["role"] == "check"]
    out = {"points": int(len(peaks)), "median_abs_error": float(err.median()), "max_abs_error": float(err.max()),
           "check_points": int(len(check)),
           "median_abs_error_check": float(check["error"].abs().median()) if len(check) else math.nan,
           "inside_band_check": float(check["inside_band"].astype(bool).mean()) if len(check) else math.nan,
           "beyond_30pct": peaks.loc[err > BEYOND, "point"].tolist(),
           "beyond_30pct_unexplained": peaks.loc[(err > BEYOND) & (peaks["missing"] == ""), "point"].tolist()}
    for bound, g in peaks.groupby("bound"):
        out[f"median_abs_error_{bound}"] = float(np.median(g["error"].abs()))
    return out
