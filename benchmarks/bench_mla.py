"""Absorbed MLA decode on the paged latent cache: achieved GFLOPS against the probed peak of the units
its GEMMs run on (AMX tiles where usable, else VDPBF16PS or FP32 FMAs).

    python benchmarks/bench_mla.py [--batch 32] [--heads 128] [--kv-len 4096] [--splits 1] [--repeats 5]

The heads fold into the GEMM M dimension (128 query rows per request share every key). FLOPs count
the score GEMM (576-wide keys) and the value GEMM (512-wide latent values); bytes count the cache
read once per step. Which of the two bounds the step on this machine (FLOPs at the probed
GEMM peak, or bytes at the probed streaming read) is printed, with the cache size read from
sysfs to say whether the cache stays resident across repeats. Timings: the median of --repeats
runs after a warm-up.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.baselines, run as a script

from benchmarks.baselines.machine import (cache_sizes, describe_caches, describe_isa, median,  # noqa: E402
                                         gemm_peak, probed_peaks, residency)
from dsperf import _C  # noqa: E402
from dsperf import kernels as K  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fp8", action="store_true", help="FP8 latent cache (1x128 scales) instead of BF16")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    B, H, N, L, R, BS = a.batch, a.heads, a.kv_len, 512, 64, 64
    blocks = B * (-(-N // BS))
    latent = (rng.standard_normal((blocks, BS, L), dtype=np.float32)).astype(K.BF16)
    scale = None
    if a.fp8:
        q, s = K.act_quant(latent.reshape(-1, L))
        latent, scale = q.reshape(blocks, BS, L), s.reshape(blocks, BS, -1)
    rope = (rng.standard_normal((blocks, BS, R), dtype=np.float32)).astype(K.BF16)
    table = rng.permutation(blocks).astype(np.int32).reshape(B, -1)
    qn = (0.05 * rng.standard_normal((B, 1, H, L), dtype=np.float32)).astype(K.BF16)
    qr = (0.05 * rng.standard_normal((B, 1, H, R), dtype=np.float32)).astype(K.BF16)
    lens = np.full(B, N, np.int32)
    run = lambda: K.mla_decode(qn, qr, latent, rope, table, lens, 192 ** -0.5, num_splits=a.splits,  # noqa: E731
                               latent_scale=scale)
    caches = cache_sizes()
    dot_peak, fma_peak, bw = probed_peaks(_C.kernels)
    peak_name, peak = gemm_peak(_C.kernels)
    t = median(run, a.repeats)
    flops = 2.0 * B * H * N * (L + R + L)
    cache_bytes = latent.nbytes + rope.nbytes + (0 if scale is None else scale.nbytes)
    t_flops, t_bytes = flops / (peak * 1e9), cache_bytes / (bw * 1e9)
    bound = "FLOPs" if t_flops >= t_bytes else "bytes"
    print(f"{describe_isa(K)}; caches (sysfs): {describe_caches(caches)}; probed VDPBF16PS {dot_peak:.1f} GFLOPS, "
          f"FP32 FMA {fma_peak:.1f} GFLOPS, the GEMMs' units ({peak_name}) {peak:.1f} GFLOPS, streaming read "
          f"{bw:.1f} GB/s")
    print(f"batch {B}, heads {H}, kv_len {N}, splits {a.splits}; cache {cache_bytes / 1e6:.0f} MB "
          f"{'FP8 latent' if a.fp8 else 'BF16'}: {residency(cache_bytes, caches)}")
    print(f"at the probed peaks the step needs {t_flops * 1e3:.1f} ms of {peak_name} and {t_bytes * 1e3:.1f} ms of "
          f"streaming read: {bound} bound it")
    print(f"mla_decode: {t * 1e3:.1f} ms (median of {a.repeats}), {flops / t / 1e9:.1f} GFLOPS = "
          f"{flops / t / 1e9 / peak:.1%} of the probed {peak_name} peak"
          f"{' (target >= 75%)' if peak_name != 'AMX TDPBF16PS' else ' (no target set for the tiles)'}, "
          f"{cache_bytes / 1e9 / t:.1f} GB/s of cache = {cache_bytes / 1e9 / t / bw:.1%} of the streaming read")


if __name__ == "__main__":
    main()
