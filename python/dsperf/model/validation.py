"""The grounded model against published DeepSeek-V3/R1 deployments: one row per published figure
(data/validation/points.csv), with the settings it was measured with, the inputs its source did
not publish and the value taken for them, and what the model lacks for it.

error = predicted / published - 1. Daily averages (DeepSeek's production figures) are not peaks:
they are shown as the utilisation published / predicted and kept out of the error statistics.
"""
from __future__ import annotations

import csv
import datetime
import math
from importlib import resources
from typing import Callable, NamedTuple

import pandas as pd

from . import bands, grounded
from .devices import load_device

GPUS_PER_NODE = 8


class PeakMetric(NamedTuple):
    label: str      # as the docs' tables print it
    read: Callable  # (tokens/s per GPU, tokens/s per user, device) -> the published quantity
    unit: str = "tokens/s"  # what the figure counts (the input guard compares ratios within one unit)


# The metrics a peak point may quote, each from the model's tokens/s per GPU and per user on the
# point's device: a node is the sources' 8 GPUs; a chip is the part as its vendor counts it
# (gpus_per_chip: two dies of an Ascend 910C, each one GPU here).
# A point missed by more than this must name what the model lacks for it (its `missing` field), or
# the summaries list it as unexplained.
BEYOND = 0.30

PEAK_METRICS = {
    "tokens_per_gpu_s": PeakMetric("tokens/s/GPU", lambda per_gpu, per_user, device: per_gpu),
    "tokens_per_node_s": PeakMetric("tokens/s/node", lambda per_gpu, per_user, device: per_gpu * GPUS_PER_NODE),
    "tokens_per_chip_s": PeakMetric("tokens/s/chip",
                                    lambda per_gpu, per_user, device: per_gpu * load_device(device).gpus_per_chip),
    "tps_user": PeakMetric("tokens/s/user", lambda per_gpu, per_user, device: per_user),
}
COLUMNS = ("point", "source", "device", "phase", "metric", "published", "predicted", "error", "kind",
           "assumed", "missing")
# design: a model term was shaped while looking at the point (in-sample); check: no term was.
ROLES = ("design", "check")


def _points_path():
    return resources.files("dsperf") / "data" / "validation" / "points.csv"


TEXT_FIELDS = ("point", "source", "device", "phase", "metric", "kind", "overlap", "weight_dtype", "assumed", "missing")
BOOL_FIELDS = ("kv_fp8", "attn_fp8")


def load_points() -> list[dict]:
    """The published points as dicts (numbers parsed, blanks dropped)."""
    return load_table(_points_path(), TEXT_FIELDS, BOOL_FIELDS)


def load_table(path, text_fields, bool_fields) -> list[dict]:
    """Rows of a published-points CSV (lines starting with # are comments) as dicts: the text
    fields as text, the boolean ones true/false, role one of ROLES, added a date, every other field
    a number; blanks dropped. Errors name the file, the row and the field."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out = []
    for i, raw in enumerate(rows, start=1):
        p = {}
        for k, v in raw.items():
            v = (v or "").strip()
            if v == "":
                continue
            if k in bool_fields:
                if v not in ("true", "false"):
                    raise ValueError(f"{path}, row {i}: field '{k}' must be true or false, got {v!r}")
                p[k] = v == "true"
            elif k in text_fields:
                p[k] = v
            elif k == "role":
                if v not in ROLES:
                    raise ValueError(f"{path}, row {i}: field 'role' must be one of {', '.join(ROLES)}, "
                                     f"got {v!r}")
                p[k] = v
            elif k == "added":
                try:
                    p[k] = datetime.date.fromisoformat(v).isoformat()
                except ValueError:
                    raise ValueError(f"{path}, row {i}: field 'added' must be a date YYYY-MM-DD, "
                                     f"got {v!r}") from None
            else:
                try:
                    p[k] = float(v)
                except ValueError:
                    raise ValueError(f"{path}, row {i}: field '{k}' must be a number, got {v!r}") from None
        for k in ("role", "added"):
            if k not in p:
                raise ValueError(f"{path}, row {i}: field '{k}' is required")
        out.append(p)
    return out


def _int(p, k, default=0):
    return int(p.get(k, default))


def _decode(p):
    return grounded.decode("DeepSeek-V3", p["device"], batch=p["batch"], kv_len=p["kv_len"], ep=_int(p, "ep"),
                           attn_tp=_int(p, "attn_tp", 1), moe_tp=_int(p, "moe_tp", 1),
                           redundant_experts=_int(p, "redundant_experts"), overlap=p.get("overlap", "two_batch"),
                           mtp=_int(p, "mtp"),
                           mtp_accepted=p.get("mtp_accepted", 0.0), kv_fp8=p.get("kv_fp8", False),
                           attn_fp8=p.get("attn_fp8", False), imbalance=p.get("imbalance", 1.0),
                           weight_dtype=p.get("weight_dtype", "fp8"))


def _prefill(p, prompt_len=None):
    return grounded.prefill("DeepSeek-V3", p["device"], tokens=p["tokens"],
                            prompt_len=prompt_len or p["prompt_len"], cached_prefix=p.get("cached_prefix", 0.0),
                            ep=_int(p, "ep"), attn_tp=1, redundant_experts=_int(p, "redundant_experts"),
                            overlap=p.get("overlap", "two_batch"), imbalance=p.get("imbalance", 1.0),
                            weight_dtype=p.get("weight_dtype", "fp8"))


def _aggregated(p):
    return grounded.aggregated("DeepSeek-V3", p["device"], isl=p["isl"], osl=p["osl"], batch=p["batch"],
                               kv_len=p.get("kv_len"), max_num_tokens=p.get("max_num_tokens"), ep=_int(p, "ep"),
                               attn_tp=_int(p, "attn_tp", 1), moe_tp=_int(p, "moe_tp", 1),
                               redundant_experts=_int(p, "redundant_experts"), overlap=p.get("overlap", "none"),
                               mtp=_int(p, "mtp"), mtp_accepted=p.get("mtp_accepted", 0.0),
                               kv_fp8=p.get("kv_fp8", False), attn_fp8=p.get("attn_fp8", False),
                               imbalance=p.get("imbalance", 1.0),
                               weight_dtype=p.get("weight_dtype", "fp8"))


class PointPhase(NamedTuple):
    label: str      # as the docs' tables print it
    price: Callable  # (point) -> (tokens/s per GPU, tokens/s per user) from the grounded model


def _decode_figures(p):
    r = _decode(p)
    return r["tokens_per_gpu_s"], r["tps_user"]


def _prefill_figures(p):
    # Prompt tokens per second, cached ones included (computed ones x prompt / new).
    r = _prefill(p)
    new = p["prompt_len"] - p.get("cached_prefix", 0.0)
    return r["tokens_per_gpu_s"] * p["prompt_len"] / new, math.nan


def _aggregated_figures(p):
    # Prefill and decode share the GPUs (aggregated serving, DP attention lock-stepped by the MoE).
    r = _aggregated(p)
    return r["tokens_per_gpu_s"], r["tps_user"]


# The phases a published point may measure, each priced once, here (the band regimes read them: bands.phases).
POINT_PHASES = {
    "decode": PointPhase("decode", _decode_figures),
    "prefill": PointPhase("prefill", _prefill_figures),
    "e2e": PointPhase("prefill + decode", _aggregated_figures),
}


def predict_point(p: dict) -> float:
    """The model's figure for a published point, in the point's metric."""
    phase = POINT_PHASES.get(p["phase"])
    if phase is None:
        raise ValueError(f"point {p['point']}: phase must be one of {', '.join(POINT_PHASES)}, got {p['phase']!r}")
    metric = PEAK_METRICS.get(p["metric"])
    if metric is None:
        raise ValueError(f"point {p['point']}: unknown metric {p['metric']!r}; one of {', '.join(PEAK_METRICS)}")
    per_gpu, per_user = phase.price(p)
    return metric.read(per_gpu, per_user, p["device"])


def point_regime(p: dict) -> tuple[str, str, str]:
    """(table kind, phase, bound) of a published point: the regime its error band is measured in."""
    return (grounded.table_kind(p["device"]), p["phase"], bands.bound_of(p["phase"], p.get("batch")))


def validate() -> pd.DataFrame:
    """Predicted against published for every point: error = predicted / published - 1 for peaks;
    for daily averages the column `utilisation` = published / predicted instead. Each point also
    carries its role, regime and leave-one-out band (dsperf.model.bands)."""
    rows = []
    for p in load_points():
        pred = predict_point(p)
        peak = p["kind"] == "peak"
        table, phase, bound = point_regime(p)
        rows.append({"point": p["point"], "source": p["source"], "device": p["device"], "phase": p["phase"],
                     "metric": p["metric"], "published": p["published"], "predicted": pred,
                     "error": pred / p["published"] - 1 if peak else math.nan,
                     "utilisation": math.nan if peak else p["published"] / pred, "kind": p["kind"],
                     "role": p["role"], "added": p["added"], "table": table, "bound": bound,
                     "assumed": p.get("assumed", ""), "missing": p.get("missing", "")})
    return bands.leave_one_out(pd.DataFrame(rows))


def summary(df: pd.DataFrame | None = None) -> dict:
    """Median and worst |error| over the peak points, overall, per phase and over the `check`
    points alone; the share of check points inside their leave-one-out band; and the points beyond
    30% with and without a named missing input."""
    df = validate() if df is None else df
    peaks = df[df["kind"] == "peak"]
    err = peaks["error"].abs()
    check = peaks[peaks["role"] == "check"]
    out = {"points": int(len(peaks)), "median_abs_error": float(err.median()), "max_abs_error": float(err.max()),
           "check_points": int(len(check)), "median_abs_error_check": float(check["error"].abs().median()),
           "inside_band_check": float(check["inside_band"].astype(bool).mean()) if len(check) else math.nan,
           "beyond_30pct": peaks.loc[err > BEYOND, "point"].tolist(),
           "beyond_30pct_unexplained": peaks.loc[(err > BEYOND) & (peaks["missing"] == ""), "point"].tolist()}
    for phase, g in peaks.groupby("phase"):
        out[f"median_abs_error_{phase}"] = float(g["error"].abs().median())
    return out


def error_band(phase: str, df: pd.DataFrame | None = None) -> float:
    """The median |error| of the peak points of a phase (prefill, decode, e2e)."""
    df = validate() if df is None else df
    g = df[(df["kind"] == "peak") & (df["phase"] == phase)]
    if g.empty:
        raise ValueError(f"phase must be one of {', '.join(sorted(df['phase'].unique()))}, got {phase!r}")
    return float(g["error"].abs().median())
