"""Shared harness of seed 000's per-module baselines: token counts 1 to 2048, medians, a markdown
table with one column per backend. Run from the repository root, e.g.
    python -m benchmarks.deepseek_v3.baseline.embed_tokens [--max-tokens 2048] [--repeats 3]
Columns: this CPU through dsperf.kernels (and a numpy baseline where one exists); GPU columns
(baseline/gpu.py: the module composed from dsperf.cuda kernels on GPU arrays) for mlp and moe where
a GPU is present. embed_tokens, mla and dense_layer have CPU columns only."""
from __future__ import annotations

import argparse
import statistics

from benchmarks.timing import run_times
from dsperf import cuda as dsperf_cuda
from dsperf import kernels as K
from dsperf.harness import random_bf16  # noqa: F401  (re-exported to the baselines)

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


def median_ms(fn, repeats):
    return statistics.median(run_times(fn, repeats)) * 1e3


def print_table(title: str, columns: list[str], rows: list[list], gpu_note: str | None = None):
    """gpu_note: what the GPU columns are, where the module has them (None: CPU columns only)."""
    print(f"\n{title} (isa {K.isa()}; ms, median)\n")
    print("| tokens | " + " | ".join(columns) + " |")
    print("|--------|" + "|".join("-" * (len(c) + 2) for c in columns) + "|")
    for r in rows:
        print(f"| {r[0]:<6} | " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in r[1:]) + " |")
    ok, why = dsperf_cuda.available()
    if gpu_note is None:
        print("\nGPU columns: none for this module (dsperf.cuda composes mlp and moe only).")
    elif ok:
        print(f"\nGPU columns on {dsperf_cuda.device_name(0)}: {gpu_note}")
    else:
        print(f"\nGPU columns: none here ({why}).")
