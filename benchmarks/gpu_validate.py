"""Validate and measure dsperf's CUDA kernels on a GPU machine.

    python benchmarks/gpu_validate.py [--size full|quick|tiny] [--skip-tests] [--iters N] [--clock-seconds S]

1. Runs the GPU tests (tests/test_cuda*.py) and prints their outcome.
2. Times the kernels at DeepSeek-V3 shapes and prints achieved TFLOPS and GB/s beside
   - the published records (measured by their authors on H800 SXM5, not here):
     FlashMLA decode 3000 GB/s (memory-bound) / 660 TFLOPS (compute-bound); DeepGEMM grouped
     contiguous FP8 1088-1297 TFLOPS; DeepEP low-latency dispatch 77 us / combine 114 us at EP8;
   - baselines measured in the same run on the same GPU: cuBLAS (cublasGemmStridedBatchedEx,
     BF16) for the grouped GEMMs, a device-to-device copy of the same bytes for MLA decode, and a
     raw NCCL all-to-all of the same bytes for dispatch/combine.
   The issue's targets are printed as ratios: MLA decode >= 50% of FlashMLA's figure, grouped GEMM
   BF16 >= 60% of cuBLAS, dispatch/combine <= 1.5x the raw all-to-all.

3. Holds GPU 0 under back-to-back cuBLAS BF16 GEMMs for --clock-seconds (default 20; 0: skip)
   while nvidia-smi samples its SM clock and power, and prints the median SM clock under that
   sustained load over the GPU's maximum SM clock: the device file's `sustained_clock_ratio`
   (docs/VALIDATION.md), which the shipped H800/H100/H200 files take from one published reading.

Without a GPU it says why and exits 0 (there is nothing to measure).
Times are means over --iters back-to-back launches after a warm-up, with launches asynchronous
(dsperf.cuda.async_launches) and outputs preallocated.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import dsperf  # noqa: F401
except ImportError:  # run from a checkout without an install: dsperf from its python/ folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from dsperf.predict.gpu_timing import ClockSampler, parse_smi_sample  # noqa: E402,F401  (shared with measure-gpu)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from kernel_helpers import shuffled_block_table  # noqa: E402  (the tests' paged-cache allocator)

# Shapes per --size: full (DeepSeek-V3's, the published records' shapes), quick (a smoke run on a
# GPU), tiny (the plumbing check tests/test_cuda_fake.py runs over a fake device).
SIZES = {
    "full": dict(mla=(128, 4096, 128), mla_graph=(4, 1024, 128), gemm=(4, 8192, 4096, 7168), masked=(32, 128),
                 ep=(256, 7168, 8, 128), prefill=(4096, 128)),
    "quick": dict(mla=(16, 2048, 128), mla_graph=(4, 1024, 128), gemm=(4, 1024, 4096, 7168), masked=(8, 64),
                  ep=(256, 7168, 8, 128), prefill=(1024, 32)),
    "tiny": dict(mla=(2, 128, 16), mla_graph=(2, 128, 16), gemm=(2, 64, 128, 256), masked=(2, 16), ep=(16, 64, 2, 8),
                 prefill=(64, 4)),
}


def rand_like(shape, dtype, rng, scale=1.0):
    """Random values without generating every one: a 1M-value random block tiled over the shape
    (the kernels' speed does not depend on the values; generating GBs of normals would take minutes)."""
    block = (rng.standard_normal(1 << 20) * scale).astype(np.float32)
    if np.dtype(dtype).itemsize == 1:   # FP8 e4m3: values past 448 would become NaN, not saturate
        block = np.clip(block, -448.0, 448.0)
    block = block.astype(dtype)
    return np.resize(block, shape)


def timed_us(fn, iters, device=0):
    from dsperf import cuda
    fn()  # warm-up: first-call work (plans, attribute set-up) and the value checks
    cuda.synchronize(device)
    t0 = time.perf_counter()
    with cuda.async_launches(device):
        for _ in range(iters):
            fn()
    return (time.perf_counter() - t0) / iters * 1e6


def run_tests():
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", str(ROOT / "tests/test_cuda.py"),
           str(ROOT / "tests/test_cuda_array.py"), str(ROOT / "tests/test_cuda_nccl.py")]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print("\n".join(r.stdout.strip().splitlines()[-25:]))
    return r.returncode


def bench_mla(rows, iters, size, rng):
    from dsperf import cuda
    from dsperf.cuda_array import BF16, FP8, DeviceArray
    B, S, H = SIZES[size]["mla"]
    L, R, bs = 512, 64, 64
    # One paged cache (blocks in order) serves every decode row below.
    nb = B * (S // bs)
    latent = DeviceArray.from_numpy(rand_like((nb, bs, L), BF16, rng))
    rope = DeviceArray.from_numpy(rand_like((nb, bs, R), BF16, rng))
    table = DeviceArray.from_numpy(np.arange(nb, dtype=np.int32).reshape(B, S // bs))
    lens = DeviceArray.from_numpy(np.full(B, S, np.int32))
    # Baseline: copying the cache's latent bytes on the device (the memory system's practical rate).
    src = latent.reshape(-1).view(np.uint16)
    dst = DeviceArray(src.shape, src.dtype)
    copy_us = timed_us(lambda: cuda._G.copy_on_device(dst.ptr, src.ptr, src.nbytes, 0), iters)
    copy_gbps = 2 * src.nbytes / copy_us / 1e3  # read + write

    def queries(q_len):
        return (DeviceArray.from_numpy(rand_like((B, q_len, H, L), BF16, rng, 0.05)),
                DeviceArray.from_numpy(rand_like((B, q_len, H, R), BF16, rng, 0.05)))

    def outputs(q_len):
        return DeviceArray((B, q_len, H, L), np.float32), DeviceArray((B, q_len, H), np.float32)

    for q_len in (1, 2):
        q, out = queries(q_len), outputs(q_len)
        flops = 2.0 * B * q_len * H * S * (L + R + L)
        kv_bytes = B * S * (L + R) * 2
        for mma in ("0", "1"):  # the 16-row WMMA kernel, and the 64-row mma.sync one: a row each
            os.environ["DSPERF_MLA_MMA"] = mma
            meta = cuda.get_mla_metadata(lens, q_len, H, variant="mma")
            us = timed_us(lambda: cuda.mla_decode(*q, latent, rope, table, lens, 0.1, meta, out=out, validate=False,
                                                  variant="mma"), iters)
            variant = "64-row mma" if mma == "1" else "16-row wmma"
            gbps, tflops = kv_bytes / us / 1e3, flops / us / 1e6
            rows.append(dict(kernel=f"MLA decode B={B} s={S} q_len={q_len} h={H} ({variant})", time_us=us,
                             tflops=tflops, gbps=gbps, baseline="D2D copy", baseline_value=f"{copy_gbps:.0f} GB/s",
                             record="FlashMLA 3000 GB/s, 660 TFLOPS (H800)",
                             vs_record=f"{gbps / 3000:.0%} of GB/s, {tflops / 660:.0%} of TFLOPS",
                             target="MLA >= 50% of FlashMLA"))
        os.environ.pop("DSPERF_MLA_MMA", None)
    # The same decode over an FP8 latent cache (one FP32 scale per 128 values), the default kernel.
    lat8 = DeviceArray.from_numpy(rand_like((nb, bs, L), FP8, rng, 100.0))
    lat8_s = DeviceArray.from_numpy(np.full((nb, bs, L // 128), 1e-2, np.float32))
    meta = cuda.get_mla_metadata(lens, 1, H, variant="mma")
    q, out = queries(1), outputs(1)
    us = timed_us(lambda: cuda.mla_decode(*q, lat8, rope, table, lens, 0.1, meta, latent_scale=lat8_s, out=out,
                                          validate=False, variant="mma"), iters)
    flops, kv_bytes = 2.0 * B * H * S * (L + R + L), B * S * (L + 2 * R + L // 128 * 4)
    rows.append(dict(kernel=f"MLA decode B={B} s={S} q_len=1 h={H}, FP8 cache", time_us=us, tflops=flops / us / 1e6,
                     gbps=kv_bytes / us / 1e3, baseline="-", baseline_value="-",
                     record="FlashMLA FP8 (not published at this shape)", vs_record=f"{flops / us / 1e6 / 660:.0%} of 660 TFLOPS",
                     target="-"))
    # Prefill attention of one sequence (non-absorbed, causal; q/k 192 wide, v 128). The call
    # allocates its outputs (no out=), which the time includes.
    T, Hp = SIZES[size]["prefill"]
    qp = DeviceArray.from_numpy(rand_like((T, Hp, 192), BF16, rng, 0.3))
    kp = DeviceArray.from_numpy(rand_like((T, Hp, 192), BF16, rng, 0.3))
    vp = DeviceArray.from_numpy(rand_like((T, Hp, 128), BF16, rng))
    us = timed_us(lambda: cuda.mla_prefill(qp, kp, vp, 192 ** -0.5), iters)
    flops = 2.0 * Hp * (T * (T + 1) / 2) * (192 + 128)  # the causal half of the score and value products
    rows.append(dict(kernel=f"MLA prefill T={T} h={Hp} (causal, 192/128)", time_us=us, tflops=flops / us / 1e6,
                     gbps=None, baseline="-", baseline_value="-", record="-", vs_record="-", target="-"))
    # Small-batch decode is launch-bound: the same call replayed from a CUDA graph.
    B, S, heads = SIZES[size]["mla_graph"]
    q_len = 1
    nb = B * (S // bs)
    arrs = [DeviceArray.from_numpy(a) for a in (rand_like((B, q_len, heads, L), BF16, rng, 0.05),
                                                 rand_like((B, q_len, heads, R), BF16, rng, 0.05),
                                                 rand_like((nb, bs, L), BF16, rng), rand_like((nb, bs, R), BF16, rng),
                                                 np.arange(nb, dtype=np.int32).reshape(B, -1),
                                                 np.full(B, S, np.int32))]
    meta = cuda.get_mla_metadata(arrs[5], q_len, heads, variant="mma")
    out = (DeviceArray((B, q_len, heads, L), np.float32), DeviceArray((B, q_len, heads), np.float32))
    eager_us = timed_us(lambda: cuda.mla_decode(*arrs, 0.1, meta, out=out, validate=False, variant="mma"), iters)
    g = cuda.CudaGraph()
    with g:
        cuda.mla_decode(*arrs, 0.1, meta, out=out, validate=False, variant="mma")
    graph_us = timed_us(g.replay, iters)
    rows.append(dict(kernel=f"MLA decode B={B} s={S} h={heads}, CUDA graph replay", time_us=graph_us, tflops=None,
                     gbps=B * S * (L + R) * 2 / graph_us / 1e3, baseline="the same call launched eagerly",
                     baseline_value=f"{eager_us:.1f} us", record="-", vs_record=f"{eager_us / graph_us:.2f}x faster",
                     target="-"))


def bench_gemm(rows, iters, size, rng):
    from dsperf import cuda
    from dsperf.cuda_array import BF16, FP8, DeviceArray
    E, m, N, Kd = SIZES[size]["gemm"]
    M = E * m
    a = DeviceArray.from_numpy(rand_like((M, Kd), BF16, rng))
    b = DeviceArray.from_numpy(rand_like((E, N, Kd), BF16, rng, 0.05))
    offs = DeviceArray.from_numpy(np.arange(0, M + 1, m, dtype=np.int64))
    c = DeviceArray((M, N), np.float32)
    flops = 2.0 * M * N * Kd
    us = timed_us(lambda: cuda.grouped_gemm(a, b, offsets=offs, out=c, validate=False, variant="mma"), iters)
    a3, c3 = a.reshape(E, m, Kd), DeviceArray((E, m, N), np.float32)
    cub_us = timed_us(lambda: cuda._G.cublas_gemm_bf16(a3.ptr, b.ptr, c3.ptr, m, N, Kd, E, m * Kd, N * Kd, m * N, 0),
                      iters)
    rows.append(dict(kernel=f"grouped GEMM BF16 contiguous E={E} m={m} n={N} k={Kd}", time_us=us,
                     tflops=flops / us / 1e6, gbps=None, baseline="cuBLAS BF16 batched",
                     baseline_value=f"{flops / cub_us / 1e6:.0f} TFLOPS", record="-",
                     vs_record=f"{cub_us / us:.0%} of cuBLAS", target="BF16 >= 60% of cuBLAS"))
    # Masked (decode-like): many experts, few rows each.
    Em, cap = SIZES[size]["masked"]
    am = DeviceArray.from_numpy(rand_like((Em, cap, Kd), BF16, rng))
    bm = DeviceArray.from_numpy(rand_like((Em, N, Kd), BF16, rng, 0.05))
    cnt = DeviceArray.from_numpy(np.full(Em, cap, np.int32))
    cm = DeviceArray((Em, cap, N), np.float32)
    us = timed_us(lambda: cuda.grouped_gemm(am, bm, counts=cnt, out=cm, validate=False, variant="mma"), iters)
    cub_us = timed_us(lambda: cuda._G.cublas_gemm_bf16(am.ptr, bm.ptr, cm.ptr, cap, N, Kd, Em, cap * Kd, N * Kd,
                                                       cap * N, 0), iters)
    fm, wbytes = 2.0 * Em * cap * N * Kd, Em * N * Kd * 2
    rows.append(dict(kernel=f"grouped GEMM BF16 masked E={Em} cap={cap} n={N} k={Kd}", time_us=us,
                     tflops=fm / us / 1e6, gbps=wbytes / us / 1e3, baseline="cuBLAS BF16 batched",
                     baseline_value=f"{fm / cub_us / 1e6:.0f} TFLOPS", record="-",
                     vs_record=f"{cub_us / us:.0%} of cuBLAS", target="BF16 >= 60% of cuBLAS"))
    # BF16 activations x FP8 weights with 128x128 scales, dequantised while staged (the CPU experts' semantics).
    bw8 = DeviceArray.from_numpy(rand_like((E, N, Kd), FP8, rng, 100.0))
    bw8_s = DeviceArray.from_numpy(np.full((E, N // 128, Kd // 128), 1e-3, np.float32))
    us = timed_us(lambda: cuda.grouped_gemm(a, bw8, offsets=offs, b_scale=bw8_s, out=c, validate=False,
                                            variant="mma"), iters)
    rows.append(dict(kernel=f"grouped GEMM BF16 x FP8 weights contiguous E={E} m={m} n={N} k={Kd}", time_us=us,
                     tflops=flops / us / 1e6, gbps=None, baseline="cuBLAS BF16 (above)", baseline_value="-",
                     record="-", vs_record="-", target="-"))
    # FP8 x FP8 with 1x128 / 128x128 scales (DeepGEMM's contiguous grouped GEMM).
    aq = DeviceArray.from_numpy(rand_like((M, Kd), FP8, rng, 100.0))
    as_ = DeviceArray.from_numpy(np.full((M, Kd // 128), 1e-2, np.float32))
    bq = DeviceArray.from_numpy(rand_like((E, N, Kd), FP8, rng, 100.0))
    bs_ = DeviceArray.from_numpy(np.full((E, N // 128, Kd // 128), 1e-3, np.float32))
    us = timed_us(lambda: cuda.grouped_gemm(aq, bq, offsets=offs, a_scale=as_, b_scale=bs_, out=c, validate=False,
                                            variant="mma"), iters)
    rows.append(dict(kernel=f"grouped GEMM FP8 contiguous E={E} m={m} n={N} k={Kd}", time_us=us,
                     tflops=flops / us / 1e6, gbps=None, baseline="cuBLAS BF16 (above)", baseline_value="-",
                     record="DeepGEMM 1088-1297 TFLOPS (H800)", vs_record=f"{flops / us / 1e6 / 1297:.0%} of 1297",
                     target="-"))


def _max_errors(got, want):
    """(max |got - want|, that over max |want|) of two FP32 arrays."""
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return diff, diff / scale if scale else diff


def error_pattern(got, want, tol):
    """Where a wrong result is wrong, in words, so that one run on a lent GPU says enough to find the
    bug offline: non-finite and zero counts, then the wrong share per 64-row and per 64-column block
    of the last two axes (a block pattern points at a tile, swizzle or stage index) and the median
    ratio got / want over the wrong cells (a constant ratio points at a scale)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    scale = float(np.max(np.abs(want))) or 1.0
    bad = ~(np.abs(got - want) <= tol * scale)
    g2, b2 = got.reshape(-1, got.shape[-1]), bad.reshape(-1, bad.shape[-1])
    rows, cols = b2.shape
    row_share = [f"{b2[r:r + 64].mean():.2f}" for r in range(0, rows, 64)]
    col_share = [f"{b2[:, c:c + 64].mean():.2f}" for c in range(0, cols, 64)]
    first = np.argwhere(b2)[:3].tolist()
    ratio = np.nanmedian(g2[b2] / np.where(want.reshape(g2.shape)[b2] == 0, np.nan, want.reshape(g2.shape)[b2])) \
        if b2.any() else float("nan")
    return (f"wrong {int(bad.sum())} of {bad.size}; non-finite {int((~np.isfinite(got)).sum())}; "
            f"exact zeros {int((got == 0).sum())} (want {int((want == 0).sum())}); wrong share per 64 rows "
            f"[{' '.join(row_share[:16])}{' ...' if len(row_share) > 16 else ''}] per 64 columns "
            f"[{' '.join(col_share[:16])}{' ...' if len(col_share) > 16 else ''}]; first wrong (row, col) "
            f"{first}; median got/want there {ratio:.3g}")


def announce(what):
    """A line before each kernel call, flushed, so that a hang's last line names the call."""
    print(f"hopper check: running {what}", flush=True)


def bench_gemm_hopper(rows, iters, size, rng):
    """The Hopper (wgmma + TMA) grouped GEMMs beside the mma.sync ones and cuBLAS: first their results
    against the mma.sync kernels' (and float64 on small ragged cases) -- they had never run on a GPU
    before -- then their times at the issue's shapes. BF16: both sides accumulate exact products in
    FP32, so they differ by summation order only; FP8: scaled per 128-deep block on both, but the
    wgmma accumulator is narrower within a block (tol_fp8 below)."""
    from dsperf import cuda
    from dsperf.cuda_array import BF16, FP8, DeviceArray
    why = cuda._G.wgmma_unsupported_reason(0)
    if why:
        rows.append(dict(kernel="grouped GEMM (wgmma, sm_90a)", time_us=None, tflops=None, gbps=None,
                         baseline=f"skipped: {why}", baseline_value="-", record="-", vs_record="-", target="-"))
        return
    tol_bf16 = 1e-4  # relative to the largest |c|: FP32 summation-order differences over K <= 7168
    # Hopper's FP8 wgmma (QGMMA) keeps about 14 significant bits in its accumulator between the
    # per-128-block promotions to FP32 (DeepSeek-V3 technical report, section 3.3.2), as
    # tests/test_cuda.py's FP8 bound says: the first H200 run saw 2.5e-4 against float64, where the
    # mma.sync kernel was within 1e-7.
    tol_fp8 = 2e-3
    wrong = []

    def verdict(what, got, want):
        tol = tol_fp8 if what.startswith("FP8") else tol_bf16
        err, rel = _max_errors(got, want)
        print(f"hopper check: {what}: max abs error {err:.3g} (relative {rel:.2g}) -> "
              f"{'ok' if rel < tol else 'WRONG: ' + error_pattern(got, want, tol)}", flush=True)
        wrong.extend([] if rel < tol else [what])
        return rel < tol

    def fp8_operands(shape_a, E, N, Kd):
        kb = -(-Kd // 128)
        return (rand_like(shape_a, FP8, rng, 100.0), (rng.random(shape_a[:-1] + (kb,)) * 1e-2).astype(np.float32),
                rand_like((E, N, Kd), FP8, rng, 100.0), (rng.random((E, -(-N // 128), kb)) * 1e-3).astype(np.float32))

    def dequant(q, s):
        # FP8 values times their scales in float64; s has q's rows and one scale per 128 of K.
        return q.astype(np.float64) * np.repeat(s.astype(np.float64), 128, -1)[..., :q.shape[-1]]

    # Ragged experts (an empty one, one row, tile edges), N and K off the tile and scale blocks.
    sizes, N = [0, 1, 127, 129, 300], 320
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    M = int(offs[-1])
    a, b = rand_like((M, 200), BF16, rng), rand_like((len(sizes), N, 200), BF16, rng, 0.05)
    want = np.concatenate([a[offs[e]:offs[e + 1]].astype(np.float64) @ b[e].astype(np.float64).T
                           for e in range(len(sizes))])
    for v in ("mma", "wgmma"):
        announce(f"BF16 ragged contiguous, {v}")
        verdict(f"BF16 ragged contiguous M={M} N={N} K=200, {v} vs float64",
                cuda.grouped_gemm(a, b, offsets=offs, variant=v), want)
    aq, as_, bq, bs = fp8_operands((M, 208), len(sizes), N, 208)
    a64 = dequant(aq, as_)
    want = np.concatenate([a64[offs[e]:offs[e + 1]] @ dequant(bq[e], np.repeat(bs[e], 128, 0)[:N]).T
                           for e in range(len(sizes))])
    for v in ("mma", "wgmma"):
        announce(f"FP8 ragged contiguous, {v}")
        verdict(f"FP8 ragged contiguous M={M} N={N} K=208, {v} vs float64",
                cuda.grouped_gemm(aq, bq, offsets=offs, a_scale=as_, b_scale=bs, variant=v), want)
    cap, counts = 200, np.array([0, 1, 128, 200], np.int32)
    am, bm = rand_like((len(counts), cap, 200), BF16, rng), rand_like((len(counts), N, 200), BF16, rng, 0.05)
    announce("BF16 masked, wgmma and mma")
    verdict(f"BF16 masked cap={cap} counts={counts.tolist()}, wgmma vs mma",
            cuda.grouped_gemm(am, bm, counts=counts, variant="wgmma"),
            cuda.grouped_gemm(am, bm, counts=counts, variant="mma"))
    # The shapes: results compared on the full problem, then the kernels timed.
    E, m, N, Kd = SIZES[size]["gemm"]
    Em, capm = SIZES[size]["masked"]
    for dtype, layout, E, m in (("BF16", "contiguous", E, m), ("BF16", "masked", Em, capm),
                                ("FP8", "contiguous", E, m)):
        M = E * m
        if dtype == "BF16":
            a = DeviceArray.from_numpy(rand_like((M, Kd), BF16, rng))
            b = DeviceArray.from_numpy(rand_like((E, N, Kd), BF16, rng, 0.05))
            scales = {}
        else:
            aq, as_, bq, bs = fp8_operands((M, Kd), E, N, Kd)
            a, b = DeviceArray.from_numpy(aq), DeviceArray.from_numpy(bq)
            scales = dict(a_scale=DeviceArray.from_numpy(as_), b_scale=DeviceArray.from_numpy(bs))
        if layout == "contiguous":
            kw = dict(offsets=DeviceArray.from_numpy(np.arange(0, M + 1, m, dtype=np.int64)), **scales)
        else:
            a = a.reshape(E, m, Kd)
            kw = dict(counts=DeviceArray.from_numpy(np.full(E, m, np.int32)), **scales)
        outs = {v: DeviceArray(a.shape[:-1] + (N,), np.float32) for v in ("mma", "wgmma")}
        for v, out in outs.items():
            announce(f"{dtype} {layout} E={E} m={m} n={N} k={Kd}, {v}")
            cuda.grouped_gemm(a, b, out=out, variant=v, **kw)
        shape = f"E={E} {'m' if layout == 'contiguous' else 'cap'}={m} n={N} k={Kd}"
        ok = verdict(f"{dtype} {layout} {shape}, wgmma vs mma", outs["wgmma"].numpy(), outs["mma"].numpy())
        us = {v: timed_us(lambda v=v: cuda.grouped_gemm(a, b, out=outs[v], variant=v, validate=False, **kw), iters)
              for v in ("mma", "wgmma")}
        flops = 2.0 * M * N * Kd
        tf = {v: flops / t / 1e6 for v, t in us.items()}
        if dtype == "BF16":
            c3 = outs["mma"].reshape(E, m, N)
            cub_us = timed_us(lambda: cuda._G.cublas_gemm_bf16(a.ptr, b.ptr, c3.ptr, m, N, Kd, E, m * Kd, N * Kd,
                                                               m * N, 0), iters)
            base, base_value = "cuBLAS BF16 batched", f"{flops / cub_us / 1e6:.0f} TFLOPS"
            vs, target = f"{cub_us / us['wgmma']:.0%} of cuBLAS", "BF16 >= 70% of cuBLAS"
        else:  # no FP8 block-scaled library here: DeepGEMM's published H800 figure
            base, base_value = "DeepGEMM (published, H800)", "1297 TFLOPS"
            vs, target = f"{tf['wgmma'] / 1297:.0%} of 1297", "FP8 >= 50% of DeepGEMM"
        print(f"hopper check: {dtype} {layout} {shape}: wgmma {us['wgmma']:.0f} us = {tf['wgmma']:.0f} TFLOPS, "
              f"mma.sync {us['mma']:.0f} us = {tf['mma']:.0f}, {base} {base_value}: wgmma at {vs}, "
              f"{us['mma'] / us['wgmma']:.2f}x mma.sync", flush=True)
        rows.append(dict(kernel=f"grouped GEMM {dtype} {layout} {shape} (wgmma, sm_90a)"
                         + ("" if ok else " RESULTS WRONG"), time_us=us["wgmma"], tflops=tf["wgmma"], gbps=None,
                         baseline=base, baseline_value=base_value, record=f"mma.sync {tf['mma']:.0f} TFLOPS",
                         vs_record=vs, target=target))
    if wrong:
        raise RuntimeError("the wgmma grouped GEMM's results are wrong: " + "; ".join(wrong))


def bench_mla_hopper(rows, iters, size, rng):
    """The Hopper (wgmma + TMA) MLA decode beside the 64-row mma.sync one: first its results against
    the CPU's and the mma.sync kernel's on ragged requests (q_len 1 and 2, fewer and more than 64 rows,
    fixed and automatic splits, BF16 and FP8 caches) -- it had never run on a GPU before -- then both
    timed at the issue's shape (B=128, s=4096, h=128 on --size full; BF16 cache, the target's, and
    FP8), with TFLOPS and the ratio to FlashMLA's published 660 (the issue's target: >= 50%). Both
    round probabilities to BF16 but take row maxima over different key chunks (64 against 32), so
    they differ by BF16 rounding, not by FP32 order."""
    from dsperf import cuda, kernels as K
    from dsperf.cuda_array import BF16, FP8, DeviceArray
    why = cuda._G.wgmma_unsupported_reason(0)
    if why:
        rows.append(dict(kernel="MLA decode (wgmma, sm_90a)", time_us=None, tflops=None, gbps=None,
                         baseline=f"skipped: {why}", baseline_value="-", record="-", vs_record="-", target="-"))
        return
    L, R, bs = 512, 64, 64
    tol = 1e-2  # relative to the largest |out|
    wrong = []
    for seqlens, q_len, heads, splits, fp8 in (([300, 70, 5, 64, 129], 1, 16, None, False),
                                               ([300, 70, 5, 64, 129], 2, 16, 2, False),
                                               ([1000, 65], 1, 128, None, False), ([257, 33], 2, 64, 3, False),
                                               ([300, 70, 5], 1, 128, None, True)):
        table, nb = shuffled_block_table(rng, seqlens, bs, 2)
        B = len(seqlens)
        args = (rand_like((B, q_len, heads, L), BF16, rng, 0.05), rand_like((B, q_len, heads, R), BF16, rng, 0.05),
                rand_like((nb, bs, L), BF16, rng), rand_like((nb, bs, R), BF16, rng), table,
                np.array(seqlens, np.int32))
        scale = None
        if fp8:  # the cache written by the CPU's quantiser: FP8 latents with one scale per 128 values
            cache = K.PagedMlaCache(nb, bs, L, R, dtype="fp8")
            requests = np.concatenate([np.full(n, b) for b, n in enumerate(seqlens)]).astype(np.int32)
            positions = np.concatenate([np.arange(n) for n in seqlens]).astype(np.int32)
            K.paged_cache_write(cache, table, requests, positions, rand_like((len(requests), L), BF16, rng),
                                rand_like((len(requests), R), BF16, rng))
            args, scale = args[:2] + (cache.latent, cache.rope) + args[4:], cache.latent_scale
        want, _ = K.mla_decode(*args, 0.1, latent_scale=scale)
        got = {}
        for v in ("mma", "wgmma"):
            announce(f"MLA seqlens={seqlens} q_len={q_len} h={heads} splits={splits} fp8={fp8}, {v}")
            got[v] = cuda.mla_decode(*args, 0.1, latent_scale=scale, num_splits=splits, variant=v)
        for name, ref in (("CPU", want), ("mma.sync", got["mma"][0])):
            err, rel = _max_errors(got["wgmma"][0], ref)
            what = (f"MLA seqlens={seqlens} q_len={q_len} h={heads} splits={splits}{' FP8 cache' if fp8 else ''}, "
                    f"wgmma vs {name}")
            print(f"hopper check: {what}: max abs error {err:.3g} (relative {rel:.2g}) -> "
                  f"{'ok' if rel < tol else 'WRONG: ' + error_pattern(got['wgmma'][0], ref, tol)}", flush=True)
            wrong.extend([] if rel < tol else [what])
    B, S, H = SIZES[size]["mla"]
    nb = B * (S // bs)
    dev = [DeviceArray.from_numpy(a) for a in (rand_like((B, 1, H, L), BF16, rng, 0.05),
                                                rand_like((B, 1, H, R), BF16, rng, 0.05),
                                                rand_like((nb, bs, L), BF16, rng), rand_like((nb, bs, R), BF16, rng),
                                                np.arange(nb, dtype=np.int32).reshape(B, S // bs),
                                                np.full(B, S, np.int32))]
    meta = {v: cuda.get_mla_metadata(dev[5], 1, H, variant=v) for v in ("mma", "wgmma")}  # each kernel's plan
    out = (DeviceArray((B, 1, H, L), np.float32), DeviceArray((B, 1, H), np.float32))
    flops = 2.0 * B * H * S * (L + R + L)
    # The same decode over an FP8 latent cache (one FP32 scale per 128 values), as bench_mla's row.
    lat8 = DeviceArray.from_numpy(rand_like((nb, bs, L), FP8, rng, 100.0))
    lat8_s = DeviceArray.from_numpy(np.full((nb, bs, L // 128), 1e-2, np.float32))
    for cache, kv, lat_s, kv_bytes in (("BF16", dev[2], None, B * S * (L + R) * 2),
                                       ("FP8", lat8, lat8_s, B * S * (L + 2 * R + L // 128 * 4))):
        mla = dev[:2] + [kv] + dev[3:]
        us, res = {}, {}
        for v in ("mma", "wgmma"):
            announce(f"MLA decode B={B} s={S} h={H} {cache} cache, {v} (timed)")
            us[v] = timed_us(lambda: cuda.mla_decode(*mla, 0.1, meta[v], latent_scale=lat_s, out=out, validate=False,
                                                     variant=v), iters)
            res[v] = out[0].numpy()
        err, rel = _max_errors(res["wgmma"], res["mma"])
        ok = rel < tol
        wrong.extend([] if ok else [f"MLA B={B} s={S} h={H} {cache} cache"])
        tf = {v: flops / us[v] / 1e6 for v in us}
        if not ok:
            print(f"hopper check: MLA B={B} s={S} {cache} cache: {error_pattern(res['wgmma'], res['mma'], tol)}")
        print(f"hopper check: MLA decode B={B} s={S} q_len=1 h={H} {cache} cache: wgmma {us['wgmma']:.0f} us = "
              f"{tf['wgmma']:.0f} TFLOPS ({tf['wgmma'] / 660:.0%} of FlashMLA's 660), mma.sync {us['mma']:.0f} us = "
              f"{tf['mma']:.0f} TFLOPS, {us['mma'] / us['wgmma']:.2f}x mma.sync; max abs error vs mma.sync "
              f"{err:.3g} -> {'ok' if ok else 'WRONG'}", flush=True)
        rows.append(dict(kernel=f"MLA decode B={B} s={S} q_len=1 h={H}, {cache} cache (wgmma, sm_90a)"
                         + ("" if ok else " RESULTS WRONG"), time_us=us["wgmma"], tflops=tf["wgmma"],
                         gbps=kv_bytes / us["wgmma"] / 1e3, baseline="64-row mma.sync",
                         baseline_value=f"{us['mma']:.0f} us", record="FlashMLA 660 TFLOPS (H800)",
                         vs_record=f"{tf['wgmma'] / 660:.0%} of 660 TFLOPS",
                         target="MLA >= 50% of FlashMLA" if cache == "BF16" else "-"))
    # Where the wgmma kernel's time goes at this shape: the split plan (the automatic one above; fixed
    # splits here, 1 = no merge) and two query tokens per request (MTP: twice the rows per page read).
    for q_len, splits in ((1, 1), (1, 2), (1, 4), (2, None)):
        q = dev[:2] if q_len == 1 else [DeviceArray.from_numpy(rand_like((B, q_len, H, w), BF16, rng, 0.05))
                                        for w in (L, R)]
        o = out if q_len == 1 else (DeviceArray((B, q_len, H, L), np.float32), DeviceArray((B, q_len, H), np.float32))
        m = cuda.get_mla_metadata(dev[5], q_len, H, num_splits=splits, variant="wgmma")
        announce(f"MLA decode B={B} s={S} q_len={q_len} h={H} splits={splits}, wgmma (timed)")
        t = timed_us(lambda: cuda.mla_decode(*q, *dev[2:], 0.1, m, out=o, validate=False, variant="wgmma"), iters)
        print(f"hopper check: MLA decode B={B} s={S} q_len={q_len} h={H} BF16 cache, "
              f"{'automatic splits' if splits is None else f'{splits} split(s)'}: wgmma {t:.0f} us = "
              f"{q_len * flops / t / 1e6:.0f} TFLOPS", flush=True)
    if wrong:
        raise RuntimeError("the wgmma MLA decode's results are wrong: " + "; ".join(wrong))


def bench_ep(rows, iters, size, rng):
    from dsperf import cuda, cuda_nccl as N
    from dsperf.cuda_array import BF16, DeviceArray
    n = min(cuda.device_count(), 8)
    ok, why = N.available()
    if n < 2 or not ok:
        rows.append(dict(kernel="dispatch/combine (NCCL)", time_us=None, tflops=None, gbps=None,
                         baseline=f"skipped: {why or f'{n} GPU(s)'}", baseline_value="-",
                         record="DeepEP LL 77 / 114 us (EP8)", vs_record="-", target="<= 1.5x raw all-to-all"))
        return
    E, D, topk, T = SIZES[size]["ep"]
    with N.Communicator.local(list(range(n))) as comm:
        t = N.NcclTransport(comm)
        xs = {r: DeviceArray.from_numpy(rand_like((T, D), BF16, rng), r) for r in range(n)}
        ids = {r: np.argsort(rng.random((T, E)), axis=1)[:, :topk].astype(np.int32) for r in range(n)}
        ws = {r: DeviceArray.from_numpy(rng.random((T, topk)).astype(np.float32), r) for r in range(n)}
        state = {}

        def dispatch():
            state["x"], state["c"], state["h"] = N.dispatch_low_latency(t, xs, ids, ws, E, T)

        d_us = timed_us(dispatch, iters)
        ys = {r: DeviceArray.zeros(state["x"][r].shape, np.float32, r) for r in range(n)}
        c_us = timed_us(lambda: N.combine(t, ys, state["h"]), iters)
        # About the bytes the low-latency dispatch moves (its pairs, spread evenly over the peers),
        # one raw grouped send/recv round.
        slab = -(-T * topk // n)
        raw = {r: DeviceArray((n * slab, D), BF16, r) for r in range(n)}
        raw_us = timed_us(lambda: N.alltoall_baseline(t, raw), iters)
    rows.append(dict(kernel=f"LL dispatch EP{n} T={T} top{topk} d={D}", time_us=d_us, tflops=None,
                     gbps=None, baseline="raw NCCL all-to-all, same bytes", baseline_value=f"{raw_us:.0f} us",
                     record="DeepEP LL dispatch 77 us (EP8)", vs_record=f"{d_us / raw_us:.2f}x raw",
                     target="<= 1.5x raw all-to-all"))
    rows.append(dict(kernel=f"LL combine EP{n} T={T} top{topk} d={D} (FP32)", time_us=c_us, tflops=None, gbps=None,
                     baseline="raw NCCL all-to-all, BF16 bytes", baseline_value=f"{raw_us:.0f} us",
                     record="DeepEP LL combine 114 us (EP8)", vs_record=f"{c_us / raw_us:.2f}x raw",
                     target="<= 1.5x raw all-to-all"))


def bench_clock(seconds, size, rng, device=0):
    """The SM clock under a sustained compute-bound load: (median MHz over the load's second half,
    max SM MHz, median watts, power limit W, samples), or None where nvidia-smi is missing."""
    from dsperf import cuda
    from dsperf.cuda_array import BF16, DeviceArray
    sampler = ClockSampler(device)
    if not sampler.available:
        print("clock: nvidia-smi not found; the sustained clock is not measured")
        return None
    E, m, N, Kd = SIZES[size]["gemm"]
    a = DeviceArray.from_numpy(rand_like((E, m, Kd), BF16, rng))
    b = DeviceArray.from_numpy(rand_like((E, N, Kd), BF16, rng, 0.05))
    c = DeviceArray((E, m, N), np.float32)
    gemm = lambda: cuda._G.cublas_gemm_bf16(a.ptr, b.ptr, c.ptr, m, N, Kd, E, m * Kd, N * Kd, m * N, 0)  # noqa: E731
    gemm()
    cuda.synchronize(device)
    with sampler:
        while time.perf_counter() - sampler.t0 < seconds:
            with cuda.async_launches(device):
                for _ in range(20):
                    gemm()
            cuda.synchronize(device)
    result = sampler.summary(after_s=seconds / 2)  # the clock after it has settled
    if result is None:
        print("clock: nvidia-smi gave no samples during the load")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--quick", action="store_true", help="the same as --size quick")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--hopper", action="store_true",
                    help="only the Hopper (wgmma) kernels, grouped GEMM and MLA decode: their results against "
                         "the mma.sync kernels (and the CPU), and their times beside mma.sync (and cuBLAS) (no "
                         "tests, no clock reading; about a minute)")
    ap.add_argument("--only", choices=("gemm", "mla"),
                    help="with --hopper: only that family (the device script runs each in its own process, so "
                         "that a hang in one cannot hide the other)")
    ap.add_argument("--clock-seconds", type=float, default=20.0,
                    help="seconds of sustained GEMMs for the SM-clock reading (0: skip)")
    args = ap.parse_args(argv)
    if not args.clock_seconds >= 0:
        ap.error(f"--clock-seconds must be >= 0, got {args.clock_seconds}")
    size = "quick" if args.quick else args.size
    from dsperf import cuda
    ok, why = cuda.available()
    if not ok:
        print(f"gpu_validate needs a CUDA GPU; none is usable here: {why}. Nothing measured.")
        return 0
    print(f"GPU 0: {cuda.device_name(0)} (sm_{cuda._G.compute_capability(0)}, {cuda._G.sm_count(0)} SMs), "
          f"{cuda.device_count()} GPU(s)")
    if args.hopper:
        args.skip_tests, args.clock_seconds = True, 0.0
    status = 0 if args.skip_tests else run_tests()
    rng = np.random.default_rng(0)
    rows = []
    hopper = {"gemm": (bench_gemm_hopper,), "mla": (bench_mla_hopper,)}.get(args.only,
                                                                          (bench_gemm_hopper, bench_mla_hopper))
    for bench in (hopper if args.hopper
                  else (bench_mla, bench_gemm, bench_gemm_hopper, bench_mla_hopper, bench_ep)):
        try:
            bench(rows, args.iters, size, rng)
        except Exception as e:  # report and go on: one failing family must not hide the others
            print(f"{bench.__name__} failed: {type(e).__name__}: {e}", flush=True)
            status = 1
    import pandas as pd
    df = pd.DataFrame(rows)
    print(df.to_markdown(index=False, floatfmt=".1f"))
    print("Records are their authors' H800 figures; compare ratios with care on other GPUs "
          "(H100 SXM: 3.35 TB/s, 989 dense BF16 TFLOPS).")
    if args.clock_seconds > 0:
        clock = bench_clock(args.clock_seconds, size, rng)
        if clock is not None:
            mhz, max_mhz, watts, limit, n = clock
            print(f"clock: {args.clock_seconds:g} s of back-to-back cuBLAS BF16 GEMMs: SM clock {mhz:.0f} MHz "
                  f"(median of {n} samples over the second half) against {max_mhz:.0f} MHz maximum, "
                  f"{watts:.0f} W of {limit:.0f} W: sustained_clock_ratio {mhz / max_mhz:.4f} on this GPU "
                  "(GEMMs alone; overlapped communication adds HBM and NVLink power; the shipped "
                  "H800/H100/H200 files assume 1600 / 1980 = 0.8081)")
    return status


if __name__ == "__main__":
    sys.exit(main())
