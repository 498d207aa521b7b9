"""The report's expert-parallel section: `python -m dsperf.ep.bench` under `mpirun -np 2` (the
layer check and the dispatch + combine table, no overlap timing), its cost-model term against the
measured exchange, as a markdown section, ep/ep_comm.csv and ep_predicted_vs_measured.png.

Skipped, with the reason in the report, where mpirun or mpi4py is missing or the run fails: the
rest of the report does not depend on it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

RANKS = 2


def _why_not() -> str:
    if shutil.which("mpirun") is None:
        return "no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "no mpi4py (pip install mpi4py; `pip install .` installs it)"
    # MPI itself is loaded in a child: initialising it here would make this process an MPI
    # singleton, whose environment confuses the mpirun started below.
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI; MPI.Get_library_version()"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return f"mpi4py cannot load an MPI library ({last})"
    return ""


def run(out: Path, quick: bool, stream, timeout_s: float = 900.0) -> list[str]:
    """Runs the EP bench into out/ep and returns the report's markdown lines."""
    lines = ["## Expert-parallel all-to-all (dsperf.ep over MPI)", ""]
    why = _why_not()
    if why:
        stream.write(f"EP section skipped: {why}\n")
        return lines + [f"Skipped: {why}.", ""]
    tokens = "16,256,1024" if quick else "16,256,1024,4096"
    ep_dir = Path(out) / "ep"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(RANKS), "--oversubscribe", sys.executable, "-m", "dsperf.ep.bench", "--tokens", tokens,
           "--repeats", "3" if quick else "5", "--no-overlap", "--out", str(ep_dir)]
    stream.write(f"EP all-to-all: {' '.join(cmd[:4])} python -m dsperf.ep.bench --tokens {tokens}\n")
    stream.flush()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stream.write("EP section skipped: the bench timed out\n")
        return lines + [f"Skipped: the EP bench did not finish in {timeout_s:.0f} s.", ""]
    if r.returncode != 0 or not (ep_dir / "ep_comm.csv").exists():
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        stream.write("EP section skipped: the bench failed\n")
        return lines + ["Skipped: the EP bench failed (" + " / ".join(tail) + ").", ""]
    return lines + _section(ep_dir, out, stream)


def _section(ep_dir: Path, out: Path, stream) -> list[str]:
    import json

    import pandas as pd

    comm = pd.read_csv(ep_dir / "ep_comm.csv")
    probes = json.loads((ep_dir / "ep_loopback.json").read_text())
    checks = pd.read_csv(ep_dir / "ep_layer_check.csv")
    big = comm[comm["remote_mb_per_rank"] >= 1.0]
    med = float(comm["model_err"].abs().median())
    within = int((comm["model_err"].abs() <= 0.25).sum())
    figure = _figure(comm, Path(out) / "ep_predicted_vs_measured.png")
    stream.write(f"EP all-to-all: model within 25% at {within} of {len(comm)} points (median |error| "
                 f"{med * 100:.1f}%); dispatch + combine {big['ratio'].min():.1f}-{big['ratio'].max():.1f}x a raw "
                 "MPI_Alltoallv from 1 MB per rank\n" if len(big) else "")
    cols = [c for c in ("exchange", "mode", "tokens", "remote_mb_per_rank", "ours_ms", "raw_alltoallv_ms", "ratio",
                        "dispatch_passes", "combine_passes", "model_ms", "model_err") if c in comm.columns]
    return [
        f"{RANKS} ranks on this machine: dispatch (FP8 + scales) + combine (BF16) of DeepSeek-V3's hidden 7168, "
        "256 experts, top-8, against a raw MPI_Alltoallv of the same bytes and the cost model's EP term "
        "(`dsperf.kernel_cost.ep_exchange_ms`) fed with the probes of the same run: ping-pong latency "
        f"{probes['latency_us']:.1f} us, all-ranks bandwidth {probes['alltoall_gbps']:.2f} GB/s per rank, "
        f"row-copy rate {probes['copy_gbps']:.2f} GB/s per rank. The EP layer matched the one-process layer in "
        f"{int(checks['ok'].sum())} of {len(checks)} checks.",
        "",
        comm[cols].to_markdown(index=False, floatfmt=".3g"),
        "",
        f"Model within 25% at {within} of {len(comm)} points, median |error| {med * 100:.1f}%. docs/EP.md says "
        "where the exchange's overhead over the raw one comes from.",
        "",
        f"![ep_predicted_vs_measured]({figure.name})",
        "",
    ]


def _figure(comm, path: Path) -> Path:
    from .plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    lo = min(comm.ours_ms.min(), comm.model_ms.min()) * 0.7
    hi = max(comm.ours_ms.max(), comm.model_ms.max()) * 1.4
    ax.fill_between([lo, hi], [lo / 1.25, hi / 1.25], [lo * 1.25, hi * 1.25], color="0.9", label="+-25%")
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="model = measured")
    for mode, g in comm.groupby("mode"):
        ax.loglog(g.ours_ms, g.model_ms, "o", label=mode)
    ax.set_xlabel("measured dispatch + combine (ms)")
    ax.set_ylabel("cost model (ms)")
    ax.set_title(f"EP all-to-all, {RANKS} ranks")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
