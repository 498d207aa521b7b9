"""A serving simulation's outcome: per-request records, latency percentiles, throughput, goodput
under an SLA, and time series of queues, running batch and KV use."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._checks import number

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def counted_percentile(values, counts, q: float) -> float:
    """np.percentile(np.repeat(values, counts), q) (its default, linear method) without the repeat:
    values sorted ascending and distinct (NaN in gives NaN out), counts how often each occurs (integers
    >= 1); q in [0, 100]. An empty sample gives NaN."""
    q = number("q", q, lo=0, hi=100)
    values, counts = np.asarray(values), np.asarray(counts)
    if values.ndim != 1 or counts.shape != values.shape:
        raise ValueError(f"values and counts must be 1-D and of one length, got shapes {values.shape} and "
                         f"{counts.shape}")
    if not np.issubdtype(values.dtype, np.floating):
        raise TypeError(f"values must hold floats, got dtype {values.dtype}")
    if not np.issubdtype(counts.dtype, np.integer) or (counts < 1).any():
        raise ValueError("counts must be integers >= 1")
    if np.isnan(values).any():
        return math.nan
    if (np.diff(values) <= 0).any():
        raise ValueError("values must be distinct and ascending")
    n = int(counts.sum())
    if n == 0:
        return math.nan
    h = (n - 1) * q / 100
    lo = math.floor(h)
    ends = np.cumsum(counts)  # the sorted sample's element i is values[first end > i]
    below, above = values[np.searchsorted(ends, [lo, min(lo + 1, n - 1)], side="right")].astype(float)
    return float(below + (h - lo) * (above - below))


@dataclass
class Sla:
    """Per-request limits (ms; None: no limit) and the percentile a deployment must meet them at."""
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    percentile: float = 90.0

    def percentile_values(self, records: pd.DataFrame) -> dict:
        """TTFT and TPOT (ms) at the SLA's percentile over the finished records."""
        done = records[records["finished"]]
        out = {}
        for name in ("ttft_ms", "tpot_ms"):
            v = done[name].dropna().to_numpy()
            out[name] = float(np.percentile(v, self.percentile)) if len(v) else math.nan
        return out

    def met_at_percentile(self, records: pd.DataFrame) -> bool:
        """Whether TTFT and TPOT at the percentile lie within the limits (NaN: no value to judge)."""
        got = self.percentile_values(records)
        return all(limit is None or not got[name] > limit
                   for name, limit in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms)))

    def met_by(self, records: pd.DataFrame) -> np.ndarray:
        """Which finished requests meet every limit."""
        ok = records["finished"].to_numpy().copy()
        if self.ttft_ms is not None:
            ok &= records["ttft_ms"].to_numpy() <= self.ttft_ms
        if self.tpot_ms is not None:
            tpot = records["tpot_ms"].to_numpy()
            ok &= np.isnan(tpot) | (tpot <= self.tpot_ms)  # a one-token answer has no TPOT
        return ok


@dataclass
class ServingResult:
    records: pd.DataFrame     # one row per request issued
    series: pd.DataFrame      # one row per arrival and group step
    itl_values_ms: np.ndarray  # every distinct gap between two emissions of a request, ascending (float32)
    itl_counts: np.ndarray     # how often each of them occurs (int64)
    info: dict                # the run: ranks, KV blocks, steps, stop reason, overload
    sla: Sla = field(default_factory=Sla)
    gpus: int = 1

    @property
    def itl_ms(self) -> np.ndarray:
        """Every gap between two emissions, ascending (one float each: long runs hold 10^8 and more;
        itl_values_ms and itl_counts hold the same in a few MB)."""
        return np.repeat(self.itl_values_ms, self.itl_counts)

    def percentiles(self) -> pd.DataFrame:
        """P50, P90 and P99 of TTFT, TPOT, ITL and E2E (ms) over the finished requests."""
        done = self.records[self.records["finished"]]
        rows = {}
        for name in LATENCIES:
            if name == "itl_ms":
                rows[name] = [counted_percentile(self.itl_values_ms, self.itl_counts, p) for p in PERCENTILES]
                continue
            v = done[name].dropna().to_numpy()
            rows[name] = [float(np.percentile(v, p)) if len(v) else math.nan for p in PERCENTILES]
        return pd.DataFrame(rows, index=[f"p{p}" for p in PERCENTILES]).T

    def summary(self) -> dict:
        """One flat dict: counts, percentiles, throughput, goodput, overload, and the error bands of its
        regime (band_regime, ttft_band, tpot_band: the latency section's, set by simulate)."""
        r = self.records
        done = r[r["finished"]]
        out = {"requests": len(r), "finished": len(done)}
        span_s = (done["finish_ms"].max() - r["arrival_ms"].min()) / 1e3 if len(done) else math.nan
        for name, row in self.percentiles().iterrows():
            for p, v in row.items():
                out[f"{name[:-3]}_{p}_ms"] = v
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            out[f"{name[:-3]}_mean_ms"] = float(done[name].mean()) if len(done) else math.nan
        out["request_throughput"] = len(done) / span_s if len(done) else 0.0
        out["output_tokens_per_s"] = float(done["output_tokens"].sum()) / span_s if len(done) else 0.0
        out["output_tokens_per_gpu_s"] = out["output_tokens_per_s"] / self.gpus
        met = self.sla.met_by(r)
        out["goodput"] = float(met.sum()) / span_s if len(done) else 0.0
        out["sla_met_share"] = float(met.sum()) / len(r) if len(r) else math.nan
        out["cached_token_share"] = float(r["cached_tokens"].sum()) / max(1, int(r["input_tokens"].sum()))
        out["preemptions"] = int(r["preemptions"].sum())
        # From the last arrival to the last answer: a queue that grew during the run but drained
        # after the arrivals stopped shows here (the overload flag is for runs stopped at a bound).
        out["drain_s"] = (done["finish_ms"].max() - r["arrival_ms"].max()) / 1e3 if len(done) else math.nan
        out.update({k: self.info[k] for k in ("overloaded", "overload_since_s", "overload_rate", "stop_reason")})
        # The latency section's leave-one-out bands for this device's kind of table (simulate sets them).
        out.update({k: v for k, v in self.info.items() if k == "band_regime" or k.endswith("_band")})
        return out

    def meets(self, sla: Sla | None = None) -> bool:
        """Whether the run meets the SLA at its percentile (an overloaded run never does)."""
        sla = sla or self.sla
        if self.info["overloaded"] or not self.records["finished"].all():
            return False
        return sla.met_at_percentile(self.records)

    def to_csv(self, path=None, **kw):
        """The per-request records as CSV (a path, or the text when path is None)."""
        return self.records.to_csv(path, index=False, **kw)


def build_result(raw: dict, sla: Sla, gpus: int) -> ServingResult:
    rec = pd.DataFrame(raw["records"])
    rec["finished"] = rec["finish_ms"] >= 0
    started = rec["first_token_ms"] >= 0
    rec["ttft_ms"] = np.where(started, rec["first_token_ms"] - rec["arrival_ms"], np.nan)
    rec["e2e_ms"] = np.where(rec["finished"], rec["finish_ms"] - rec["arrival_ms"], np.nan)
    many = rec["finished"] & (rec["output_tokens"] > 1)
    rec["tpot_ms"] = np.where(many, (rec["finish_ms"] - rec["first_token_ms"]) / np.maximum(1, rec["output_tokens"] - 1),
                              np.nan)
    for c in ("first_token_ms", "finish_ms"):
        rec[c] = rec[c].where(rec[c] >= 0)
    series = pd.DataFrame(raw["series"])
    blocks = raw["kv_blocks_per_rank"] * raw["ranks"] + raw["prefill_kv_blocks_per_rank"] * raw["prefill_ranks"]
    series["kv_use"] = series["kv_blocks"] / max(1, blocks)
    info = {k: v for k, v in raw.items() if k not in ("records", "series", "itl_values_ms", "itl_counts")}
    info["overload_since_s"] = raw["overload_since_ms"] / 1e3 if raw["overloaded"] else math.nan
    # The arrival rate from the overload's start to the stop: the load the deployment could not hold.
    if raw["overloaded"]:
        since, end = raw["overload_since_ms"], raw["end_ms"]
        n = int(((rec["arrival_ms"] >= since) & (rec["arrival_ms"] <= end)).sum())
        info["overload_rate"] = n / ((end - since) / 1e3) if end > since else math.nan
    else:
        info["overload_rate"] = math.nan
    return ServingResult(rec, series, np.asarray(raw["itl_values_ms"]), np.asarray(raw["itl_counts"]), info, sla, gpus)
