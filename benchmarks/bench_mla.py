"""Absorbed MLA decode on the paged latent cache: achieved GFLOPS against the probed VDPBF16PS peak.

    python benchmarks/bench_mla.py [--batch 32] [--heads 128] [--kv-len 4096] [--splits 1]

The heads fold into the GEMM M dimension (128 query rows per request share every key). FLOPs count
the score GEMM (576-wide keys) and the value GEMM (512-wide latent values); the cache is BF16.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from dsperf import _C
from dsperf import kernels as K
from dsperf.harness import l3_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
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
    run()
    t = min(_timed(run) for _ in range(a.repeats))
    flops = 2.0 * B * H * N * (L + R + L)
    peak = _C.kernels.probe_bf16_peak_gflops(1.0)
    fma_peak = _C.kernels.probe_fp32_fma_peak_gflops(1.0)
    cache_mb = (latent.nbytes + rope.nbytes + (0 if scale is None else scale.nbytes)) / 1e6
    print(f"isa {K.isa()}; batch {B}, heads {H}, kv_len {N}, splits {a.splits}; cache {cache_mb:.0f} MB "
          f"{'FP8 latent' if a.fp8 else 'BF16'} "
          f"(L3-resident: {'yes' if cache_mb * 1e6 < l3_bytes() else 'no'}, L3 {l3_bytes() >> 20} MiB)")
    print(f"mla_decode: {t * 1e3:.1f} ms, {flops / t / 1e9:.1f} GFLOPS = {flops / t / 1e9 / peak:.1%} of the probed "
          f"VDPBF16PS peak {peak:.1f} GFLOPS (target >= 50%; no AMX here), {flops / t / 1e9 / fma_peak:.1%} of the "
          f"FP32 FMA peak {fma_peak:.1f}; {cache_mb / 1e3 / t:.1f} GB/s of cache")


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
