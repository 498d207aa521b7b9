"""Deployment-explorer configurations per second: `dsperf.explore.search` over a grid of at least
10^6 decode configurations, against a plain-Python loop over the same grid that calls the grounded
model one configuration at a time (`dsperf.grounded.decode`), measured in the same run.

    python benchmarks/bench_explore.py [--batches 512] [--python-points 300] [--repeats 3]

The plain loop is timed on a random sample of the grid's points (it would take minutes over all
of them) and its rate extrapolated; before any timing is reported, the sampled points' tokens/s
per GPU are checked against the search's rows for the same configurations. Ends with the line
`explore configs/s: N (R x plain Python)`.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.timing, run as a script

from benchmarks.timing import timed  # noqa: E402
from dsperf import explore, grounded  # noqa: E402

DEVICES = ("H800", "H20", "H200", "B200")
EP = (8, 16, 32, 64, 72, 128, 144, 256)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=512, help="batch values per GPU, spread over 1 .. 512")
    ap.add_argument("--python-points", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    batch = tuple(float(b) for b in np.unique(np.linspace(1, 512, args.batches).round()))
    grid = dict(devices=DEVICES, isl=4096, osl=1024, ep=EP, batch=batch)

    explore.search(**{**grid, "batch": batch[:2]})  # warm: tables loaded, prefill priced once
    search = timed(lambda: explore.search(**grid), args.repeats, warm_up=False)
    df = search.result
    n = len(df)

    # The plain loop over a sample of the same grid, each point checked against the search's row.
    rng = random.Random(0)
    rows = df[df["feasible"]]
    sample = rows.iloc[[rng.randrange(len(rows)) for _ in range(args.python_points)]]

    def plain_loop() -> float:
        worst = 0.0
        for r in sample.itertuples():
            g = grounded.decode("DeepSeek-V3", str(r.device), batch=r.batch, kv_len=4096 + 1024 / 2, ep=int(r.ep),
                                attn_tp=int(r.attn_tp), redundant_experts=int(r.redundant_experts),
                                overlap=str(r.overlap), mtp=int(r.mtp), mtp_accepted=float(r.mtp_accepted),
                                kv_fp8=bool(r.kv_fp8))
            worst = max(worst, abs(g["tokens_per_gpu_s"] / r.tokens_per_gpu_s - 1))
        return worst

    plain = timed(plain_loop, 1, warm_up=False)
    worst, t_plain = plain.result, plain.median
    if worst > 1e-9:
        raise SystemExit(f"the search and the per-point model disagree by {worst:.2e}")
    plain_rate = len(sample) / t_plain
    rate = n / search.median

    print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'all')} of {os.cpu_count()} cores")
    print(f"grid: {n} configurations ({len(DEVICES)} devices x {len(EP)} EP x 4 attention TP x 3 MTP x 2 KV dtypes "
          f"x 3 overlaps x {len(batch)} batches)")
    print(f"search (C++ grid + pandas columns, SLA-ready frame): {search.spread()}")
    print(f"plain Python loop (grounded.decode per point), {len(sample)} sampled points: {t_plain:.2f} s, "
          f"{plain_rate:.0f} configs/s; agreement with the search: worst {worst:.1e}")
    print(f"explore configs/s: {rate:.0f} ({rate / plain_rate:.0f} x plain Python)")


if __name__ == "__main__":
    main()
