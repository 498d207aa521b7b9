"""Shared harness of seed 000's per-module baselines: token counts 1 to 2048, medians, a markdown
table with one column per backend. Run from the repository root, e.g.
    python -m benchmarks.deepseek_v3.baseline.embed_tokens [--max-tokens 2048] [--repeats 3]
Columns: this CPU through dsperf.kernels (and a numpy baseline where one exists); a GPU column
appears once dsperf has CUDA kernels and a GPU is present (not in this build)."""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dsperf import kernels as K

# DeepSeek-V3's shapes (the seed's ModelArgs).
DIM, INTER, MOE_INTER, VOCAB = 7168, 18432, 2048, 129280
HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V = 128, 1536, 512, 128, 64, 128


def parse(description: str):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--max-tokens", type=int, default=2048, help="largest token count (powers of 2 from 1)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per point (median)")
    a = ap.parse_args()
    if a.max_tokens < 1 or a.repeats < 1:
        ap.error("--max-tokens and --repeats must be >= 1")
    a.tokens = [t for t in (2 ** i for i in range(12)) if t <= a.max_tokens]
    return a


def random_bf16(rng, shape, scale_exp=118):
    """BF16 values of magnitude about 2^(scale_exp-127)..2^(scale_exp-119), made from bits (fast for GBs)."""
    sign = rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
    exp = rng.integers(scale_exp, scale_exp + 8, size=shape, dtype=np.uint16) << 7
    man = rng.integers(0, 128, size=shape, dtype=np.uint16)
    return (sign | exp | man).view(K.BF16)


def run_times(fn, repeats):
    """Seconds of `repeats` runs of fn after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_ms(fn, repeats):
    return statistics.median(run_times(fn, repeats)) * 1e3


def print_table(title: str, columns: list[str], rows: list[list]):
    print(f"\n{title} (isa {K.isa()}; ms, median)\n")
    print("| tokens | " + " | ".join(columns) + " |")
    print("|--------|" + "|".join("-" * (len(c) + 2) for c in columns) + "|")
    for r in rows:
        print(f"| {r[0]:<6} | " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r[1:]) + " |")
    print("\nGPU column: dsperf has no CUDA kernels in this build yet.")
