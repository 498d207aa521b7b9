"""Figures of a serving simulation (matplotlib): latency CDFs, latency against request rate, and
the queues over time. Each returns a matplotlib Figure with labelled axes and units."""
from __future__ import annotations

import numpy as np

from ..predict.plots import _plt

_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}


def latency_cdf(results: dict, metric: str = "ttft_ms", title: str | None = None):
    """CDF of one latency (ttft_ms, tpot_ms, itl_ms or e2e_ms) for each labelled ServingResult."""
    if metric not in _LABELS:
        raise ValueError(f"metric must be one of {', '.join(_LABELS)}, got {metric!r}")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, r in results.items():
        if metric == "itl_ms":  # distinct gaps, ascending, with their counts
            v, n = np.asarray(r.itl_values_ms, dtype=float), r.itl_counts
        else:
            v = np.sort(r.records.loc[r.records["finished"], metric].dropna().to_numpy(dtype=float))
            n = np.ones(len(v), np.int64)
        if len(v):
            ax.plot(v, np.cumsum(n) / n.sum(), label=label)
    ax.set_xscale("log")
    ax.set_xlabel(f"{_LABELS[metric]} (ms)")
    ax.set_ylabel("fraction of requests" if metric != "itl_ms" else "fraction of gaps")
    for p in (0.5, 0.9, 0.99):
        ax.axhline(p, color="grey", lw=0.5, ls=":")
    ax.set_title(title or f"{_LABELS[metric]} distribution")
    ax.legend()
    fig.tight_layout()
    return fig


def latency_vs_rate(sweep, metrics=("ttft_ms", "tpot_ms"), percentile: str = "p90", title: str | None = None):
    """Latency percentile against request rate from rate_sweep()'s frame (one line per metric,
    overloaded rates marked with an x)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        col = f"{metric[:-3]}_{percentile}_ms"
        frames = sweep.groupby("label") if "label" in sweep else [(None, sweep)]
        for label, df in frames:
            ax.plot(df["rate"], df[col], marker="o", label=label)
            bad = df[df["overloaded"]]
            ax.scatter(bad["rate"], bad[col], marker="x", color="red", zorder=3)
        ax.set_yscale("log")
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(f"{percentile.upper()} {_LABELS[metric]} (ms)")
        if "label" in sweep:
            ax.legend()
    fig.suptitle(title or f"{percentile.upper()} latency against request rate")
    fig.tight_layout()
    return fig


def queues(result, title: str = "Queues over time"):
    """Requests waiting and running, and KV-cache use, against simulated time."""
    plt = _plt()
    s = result.series
    fig, ax = plt.subplots(figsize=(8, 4))
    t = s["time_ms"] / 1e3
    ax.step(t, s["waiting"], where="post", label="waiting")
    ax.step(t, s["running"], where="post", label="running")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests")
    ax2 = ax.twinx()
    ax2.plot(t, 100 * s["kv_use"], color="grey", lw=0.8, label="KV use")
    ax2.set_ylabel("KV cache in use (%)")
    ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    return fig
