"""Per-op host overhead the one-call decode layer removes: the same DeepSeek-V3 block (RMSNorm ->
MLA -> residual -> RMSNorm -> MoE -> residual) run as one C++ call and as the individual kernel
calls from Python, one token per step, medians over many steps.

    python benchmarks/bench_decode_layer.py [--steps 200]

A small layer (dim 256, 4 heads, 8 experts) keeps the kernels' own time short, so the difference
is mostly the per-call cost: argument checks, Python dispatch, array allocation, numpy residuals.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_kernels_decode_layer import make_layer  # noqa: E402
from test_kernels_mla_variants import D, DIMS, KVL  # noqa: E402

from dsperf import kernels as K  # noqa: E402


def per_step(layer, steps, variant, freqs):
    """Median microseconds per layer for (one call, op by op), the two interleaved step by step so
    that machine noise hits both alike."""
    rng = np.random.default_rng(0)
    fns = (K.decode_layer, K.decode_layer_by_ops)
    caches = [K.MlaCache(64 + steps + 1, KVL, DIMS["rope"], decompressed=variant == "CD", heads=DIMS["heads"],
                         nope=DIMS["nope"], v=DIMS["v"]) for _ in fns]
    prefix = rng.standard_normal((64, D)).astype(K.BF16)
    for fn, cache in zip(fns, caches):
        fn(variant, prefix, layer, cache, freqs=freqs, softmax_scale=0.15, **DIMS)
    times = ([], [])
    for x in rng.standard_normal((steps, 1, D)).astype(K.BF16):
        for i, (fn, cache) in enumerate(zip(fns, caches)):
            t0 = time.perf_counter()
            fn(variant, x, layer, cache, freqs=freqs, softmax_scale=0.15, **DIMS)
            times[i].append(time.perf_counter() - t0)
    return statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    layer = make_layer(np.random.default_rng(1))
    freqs = K.rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)
    print(f"isa {K.isa()}; dim {D}, heads {DIMS['heads']}, 8 experts (top-2) + shared; one token per step, "
          f"{a.steps} steps, medians")
    for variant in ("A_CC_ME", "AM_CC_ME"):
        one, ops = per_step(layer, a.steps, variant, freqs)
        print(f"{variant}: one call {one:.0f} us/layer, op by op {ops:.0f} us/layer: the one-call layer removes "
              f"{ops - one:.0f} us per layer ({ops / one:.2f}x)")


if __name__ == "__main__":
    main()
