"""Figures of predicted against measured kernel latency (matplotlib, Agg-safe).

Each function takes the DataFrame of predict.predict_frame and returns a matplotlib Figure with
labelled axes and units; `save_all` writes the three as PNG files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        try:
            matplotlib.use("Agg")
        except Exception:  # pragma: no cover - a backend already in use stays
            pass
    import matplotlib.pyplot as plt

    return plt


def _markers(families):
    cycle = "osD^v<>pPX*h"
    return {f: cycle[i % len(cycle)] for i, f in enumerate(families)}


def scatter(pred, band=0.20, title="Predicted vs measured kernel latency"):
    """Log-log scatter of predicted against measured ms, with the identity line and a +-band."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 6))
    families = list(dict.fromkeys(pred["kernel"]))
    marks = _markers(families)
    for f in families:
        g = pred[pred["kernel"] == f]
        ax.scatter(g["measured_ms"], g["predicted_ms"], marker=marks[f], label=f, alpha=0.8)
    lo = min(pred["measured_ms"].min(), pred["predicted_ms"].min()) / 1.5
    hi = max(pred["measured_ms"].max(), pred["predicted_ms"].max()) * 1.5
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=1, label="predicted = measured")
    ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="gray", alpha=0.2, label=f"+-{band:.0%}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def errors_by_family(summary, title="Relative error of the prediction by kernel family"):
    """Bars of the median and 90th-percentile |relative error| per family (predict.error_summary)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = np.arange(len(summary))
    ax.bar(x - 0.2, summary["median_abs_error"] * 100, 0.4, label="median")
    ax.bar(x + 0.2, summary["p90_abs_error"] * 100, 0.4, label="90th percentile")
    ax.axhline(15, color="C0", ls="--", lw=1, label="median target 15%")
    ax.axhline(35, color="C1", ls="--", lw=1, label="p90 target 35%")
    ax.set_xticks(x)
    ax.set_xticklabels(summary["kernel"], rotation=30, ha="right")
    ax.set_xlabel("kernel family")
    ax.set_ylabel("|predicted - measured| / measured (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline(pred, spec, title=None):
    """Every measured kernel at its arithmetic intensity (FLOP/byte) and achieved GFLOPS, under the
    device's compute peak and memory-bandwidth roof."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    ai = pred["gflop"] * 1e3 / pred["mbytes"]  # FLOP per byte
    achieved = pred["gflop"] / (pred["measured_ms"] * 1e-3)
    families = list(dict.fromkeys(pred["kernel"]))
    marks = _markers(families)
    for f in families:
        m = (pred["kernel"] == f).to_numpy()
        ax.scatter(ai[m], achieved[m], marker=marks[f], label=f, alpha=0.8)
    peak = spec.fp16_tflops * spec.compute_derate * 1e3
    xs = np.geomspace(max(ai.min() / 2, 1e-2), ai.max() * 2, 100)
    ax.plot(xs, np.minimum(peak, xs * spec.mem_bw_gbps), "k-", lw=1.5,
            label=f"roof: {peak:.0f} GFLOPS, {spec.mem_bw_gbps:.1f} GB/s")
    if getattr(spec, "cache_bw_gbps", 0) > 0:
        ax.plot(xs, np.minimum(peak, xs * spec.cache_bw_gbps), "k:", lw=1,
                label=f"cache-resident roof: {spec.cache_bw_gbps:.1f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved (GFLOP/s)")
    ax.set_title(title or f"Roofline of {spec.name}")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def save_all(pred, summary, spec, out_dir) -> list[Path]:
    """Writes predicted_vs_measured.png, errors_by_family.png and roofline.png; returns the paths."""
    plt = _plt()
    out_dir = Path(out_dir)
    paths = []
    for name, fig in (("predicted_vs_measured.png", scatter(pred)), ("errors_by_family.png", errors_by_family(summary)),
                      ("roofline.png", roofline(pred, spec))):
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
