"""Expert FFN, gating and GEMM throughput on this CPU, against baselines measured in the same run.

    python benchmarks/bench_experts.py [--quick]

Prints, for DeepSeek-V3's expert shapes (dim 7168, inter 2048, 8 local experts):
- prefill (contiguous layout, 256 tokens per expert): dsperf's grouped FFN in BF16 and FP8 against
  oneDNN's BF16 matmul (Debian libdnnl-dev, weights reordered once, untimed) doing the same two
  GEMMs expert by expert, in TFLOPS and as fractions of the probed VDPBF16PS peak;
- decode (masked layout, 8 tokens per expert; 704 MB of BF16 / 352 MB of FP8 weights, larger than
  the L3 cache, so every step streams them from memory): weight bytes per second against a
  streaming-read loop;
- gating 4096 tokens over 256 experts, against the expert time of the same tokens;
- numpy's FP32 matmul on one expert's gate_up GEMM, for scale.
Timings are the fastest of --repeats runs (the machine is shared and noisy).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.baselines, run as a script

from benchmarks.deepseek_v3.baseline.common import random_bf16, run_times  # noqa: E402
from dsperf import _C  # noqa: E402
from dsperf import kernels as K  # noqa: E402
from dsperf.harness import random_fp8  # noqa: E402

D, I = 7168, 2048


def best(fn, repeats):
    """Fastest of `repeats` runs, seconds (the machine is shared: the minimum is the least disturbed)."""
    return min(run_times(fn, repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 experts, 64 tokens: a smoke run, not the figures")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    experts, tokens = (2, 64) if a.quick else (8, 256)
    rng = np.random.default_rng(0)

    peak = _C.kernels.probe_bf16_peak_gflops(1.0)
    fma_peak = _C.kernels.probe_fp32_fma_peak_gflops(1.0)
    bw = _C.kernels.probe_read_bandwidth_gbps(1 << 30, 3)
    print(f"isa {K.isa()}; AMX usable: {K.cpu_features()['amx_bf16']}")
    print(f"probed peaks (all threads): VDPBF16PS {peak:.1f} GFLOPS, FP32 FMA {fma_peak:.1f} GFLOPS; "
          f"streaming read: {bw:.1f} GB/s (1 GiB buffer)")
    print("(dsperf's prefill GEMMs widen BF16 to FP32 and use FMAs; its decode GEMMs use VDPBF16PS)")

    w13 = random_bf16(rng, (experts, 2 * I, D))
    w2 = random_bf16(rng, (experts, D, I))
    flops_per_token = 2 * (2 * I * D + D * I)

    # ---- prefill, contiguous layout ------------------------------------------------------------
    x = random_bf16(rng, (experts * tokens, D))
    offsets = np.arange(experts + 1, dtype=np.int64) * tokens
    t_ours = best(lambda: K.experts_contiguous(x, offsets, w13, w2), a.repeats)
    flops = flops_per_token * experts * tokens
    print(f"\nprefill, {experts} experts x {tokens} tokens (weights {w13.nbytes + w2.nbytes >> 20} MB BF16, "
          f"L3-resident across repeats only in part)")
    print(f"  dsperf experts_contiguous BF16: {t_ours * 1e3:.1f} ms, {flops / t_ours / 1e12:.3f} TFLOPS, "
          f"{flops / t_ours / 1e9 / fma_peak:.1%} of the FP32 FMA peak")
    try:
        from benchmarks.baselines import onednn

        mm = onednn.load()
        h = random_bf16(rng, (tokens, I))
        for label, flush in (("weights from memory (caches flushed before each GEMM, as dsperf's pass "
                              "over all experts sees them)", 512 << 20), ("weights hot in L3 (repeated GEMM)", 0)):
            t_dnnl = 0.0
            for e in range(experts):
                xe = np.ascontiguousarray(x[e * tokens:(e + 1) * tokens])
                t_dnnl += mm(xe, w13[e], a.repeats, flush)[1] + mm(h, w2[e], a.repeats, flush)[1]
            print(f"  oneDNN BF16 matmul, expert by expert, GEMMs only, {label}: {t_dnnl * 1e3:.1f} ms, "
                  f"{flops / t_dnnl / 1e12:.3f} TFLOPS, {flops / t_dnnl / 1e9 / peak:.1%} of the VDPBF16PS peak; "
                  f"dsperf / oneDNN throughput {t_dnnl / t_ours:.2f} (target >= 0.90)")
    except RuntimeError as e:
        print(f"  oneDNN baseline unavailable: {e}")

    w13q, w2q = random_fp8(rng, w13.shape), random_fp8(rng, w2.shape)
    s13 = np.full((experts, 2 * I // 128, D // 128), 1e-3, np.float32)
    s2 = np.full((experts, D // 128, I // 128), 1e-3, np.float32)
    t_fp8 = best(lambda: K.experts_contiguous(x, offsets, w13q, w2q, s13, s2), a.repeats)
    print(f"  dsperf experts_contiguous FP8 128x128 (dequantised per block): {t_fp8 * 1e3:.1f} ms, "
          f"{flops / t_fp8 / 1e12:.3f} TFLOPS, {t_ours / t_fp8:.2f} x the speed of the BF16 weights")

    # ---- decode, masked layout ------------------------------------------------------------------
    cap = 8
    xm = random_bf16(rng, (experts, cap, D))
    counts = np.full(experts, cap, np.int32)
    t_dec = best(lambda: K.experts_masked(xm, counts, w13, w2), a.repeats)
    gbytes = (w13.nbytes + w2.nbytes) / 1e9
    print(f"\ndecode, {experts} experts x {cap} tokens, masked layout (weights streamed from memory)")
    print(f"  BF16: {t_dec * 1e3:.1f} ms, {gbytes / t_dec:.1f} GB/s of weights = {gbytes / t_dec / bw:.1%} of the "
          f"streaming read (target >= 80%)")
    t_dec8 = best(lambda: K.experts_masked(xm, counts, w13q, w2q, s13, s2), a.repeats)
    g8 = (w13q.nbytes + w2q.nbytes) / 1e9
    print(f"  FP8: {t_dec8 * 1e3:.1f} ms, {g8 / t_dec8:.1f} GB/s of weights = {g8 / t_dec8 / bw:.1%} of the "
          f"streaming read; {t_dec / t_dec8:.2f} x faster than BF16")

    # ---- gating ----------------------------------------------------------------------------------
    gt = 512 if a.quick else 4096
    xg = random_bf16(rng, (gt, D))
    gw = random_bf16(rng, (256, D))
    bias = np.zeros(256, np.float32)
    t_gate = best(lambda: K.moe_gate(xg, gw, bias, n_group=8, topk_group=4, top_k=8, route_scale=2.5), a.repeats)
    t_experts_same = flops_per_token * gt * 8 / (flops / t_ours)  # at the measured prefill throughput
    print(f"\ngating {gt} tokens over 256 experts: {t_gate * 1e3:.2f} ms; the experts of the same tokens "
          f"(8 per token, at the measured prefill rate): {t_experts_same * 1e3:.0f} ms; "
          f"ratio {t_gate / t_experts_same:.2%} (target < 5%)")

    # ---- numpy, for scale --------------------------------------------------------------------
    xf = x[:tokens].astype(np.float32)
    wf = w13[0].astype(np.float32)
    t_np = best(lambda: xf @ wf.T, 1)
    print(f"\nnumpy FP32 matmul, one expert's gate_up ({tokens} x {D} x {2 * I}): "
          f"{2 * tokens * D * 2 * I / t_np / 1e9:.1f} GFLOPS")


if __name__ == "__main__":
    main()
