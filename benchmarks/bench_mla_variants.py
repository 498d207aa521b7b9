"""The five MLA execution variants on one decode step of DeepSeek-V3's MLA layer (128 heads, one new
token after kv_len cached ones), measured beside the time a roofline predicts from each variant's
FLOPs and bytes, using this machine's probed VDPBF16PS peak and streaming-read bandwidth.

    python benchmarks/bench_mla_variants.py [--kv-len 4096]

FLOPs and bytes per step (H heads, nope 128, rope 64, v 128, latent 512; the prolog and wo are the
same in every variant and included):
  CD       attention over cached per-head K/V: reads kv x H x (192 + 128) x 2 bytes
  CC       decompresses K/V for all kv tokens first: + 2 kv 512 H (128 + 128) FLOPs
  A_CC*    multi-query attention over the latent: 2 H kv (576 + 512) FLOPs + the absorption
  AM_CC_ME absorbed products materialised: the absorption folds into the q and o projections
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from dsperf import _C
from dsperf import kernels as K

D, H, QL, L, N, R, V = 7168, 128, 1536, 512, 128, 64, 128


def weights(rng):
    def rb(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(K.BF16)

    w = {"wq_a": rb(QL, D), "q_norm": np.ones(QL, np.float32), "wq_b": rb(H * (N + R), QL), "wkv_a": rb(L + R, D),
         "kv_norm": np.ones(L, np.float32), "wkv_b": rb(H * (N + V), L), "wo": rb(D, H * V)}
    return K.mla_absorb_weights(w, heads=H, nope=N, rope=R, v=V)


def step_costs(kv):
    """(FLOPs, bytes read) of one decode step per variant."""
    proj = 2 * (D * QL + QL * H * (N + R) + D * (L + R) + H * V * D)  # prolog + wo
    weights_bytes = 2 * (D * QL + QL * H * (N + R) + D * (L + R) + H * (N + V) * L + D * H * V)
    attn_mha = 2 * H * kv * ((N + R) + V)
    attn_mqa = 2 * H * kv * ((L + R) + L)
    absorb = 2 * H * (N * L + L * V)
    latent_bytes = kv * (L + R) * 2
    return {
        "CD": (proj + attn_mha, weights_bytes + kv * H * ((N + R) + V) * 2),
        "CC": (proj + attn_mha + 2 * kv * L * H * (N + V), weights_bytes + latent_bytes),
        "A_CC": (proj + attn_mqa + absorb, weights_bytes + latent_bytes),
        "A_CC_ME": (proj + attn_mqa + absorb, weights_bytes + latent_bytes),
        "AM_CC_ME": (2 * (D * QL + QL * H * R + QL * H * L + D * (L + R) + H * L * D) + attn_mqa,
                     2 * (D * QL + QL * H * (N + R) + H * L * QL + D * (L + R) + D * H * L) + latent_bytes),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    w = weights(rng)
    freqs = K.rope_frequencies()
    kv = a.kv_len
    # The kernels use FP32 FMAs for GEMMs of 32 rows and up and VDPBF16PS below: the roofline takes
    # the faster of the two peaks.
    peak = max(_C.kernels.probe_bf16_peak_gflops(1.0), _C.kernels.probe_fp32_fma_peak_gflops(1.0)) * 1e9
    bw = _C.kernels.probe_read_bandwidth_gbps(1 << 30, 3) * 1e9
    x = (rng.standard_normal((1, D), dtype=np.float32)).astype(K.BF16)
    print(f"isa {K.isa()}; one decode step, kv_len {kv}, {H} heads; peak {peak / 1e9:.1f} GFLOPS, "
          f"read {bw / 1e9:.1f} GB/s; roofline = max(FLOPs / peak, bytes / bandwidth)\n")
    print("| variant | measured ms | roofline ms | measured / roofline | GFLOP | MB read |")
    print("|---|---|---|---|---|---|")
    costs = step_costs(kv)
    measured = {}
    for variant in K.MLA_VARIANTS:
        cache = K.MlaCache(kv, L, R, decompressed=variant == "CD", heads=H, nope=N, v=V)
        cache.latent[:] = (rng.standard_normal(cache.latent.shape, dtype=np.float32)).astype(K.BF16)
        cache.k_pe[:] = (rng.standard_normal(cache.k_pe.shape, dtype=np.float32)).astype(K.BF16)
        if cache.k_full is not None:
            cache.k_full[:] = (rng.standard_normal(cache.k_full.shape, dtype=np.float32) * 0.1).astype(K.BF16)
            cache.v_full[:] = (rng.standard_normal(cache.v_full.shape, dtype=np.float32)).astype(K.BF16)
        times = []
        for _ in range(a.repeats):
            cache.prefix = kv - 1
            t0 = time.perf_counter()
            K.mla_forward(variant, x, w, cache, heads=H, nope=N, rope=R, v=V, freqs=freqs, softmax_scale=0.07)
            times.append(time.perf_counter() - t0)
        t = min(times)
        flops, nbytes = costs[variant]
        roof = max(flops / peak, nbytes / bw)
        measured[variant] = (t, roof)
        print(f"| {variant} | {t * 1e3:.1f} | {roof * 1e3:.1f} | {t / roof:.2f} | {flops / 1e9:.2f} | {nbytes / 1e6:.0f} |")
    print()
    for absorbed in ("A_CC_ME", "AM_CC_ME"):
        for base in ("CD", "CC"):
            got = measured[base][0] / measured[absorbed][0]
            pred = measured[base][1] / measured[absorbed][1]
            print(f"{absorbed} vs {base}: measured speed-up {got:.2f}x, roofline predicts {pred:.2f}x "
                  f"(measured / predicted {got / pred:.2f}; target within 0.7-1.3)")
    calibrated_ratios(measured, kv)


def calibrated_ratios(measured, kv):
    """The same ratios predicted by the calibrated kernel cost model (dsperf.kernel_cost with this
    machine's fitted efficiencies, fitted on 16-head layers at other context lengths: out of
    sample), where `dsperf calibrate` or `dsperf report` has run."""
    from dsperf import calibrate, kernel_cost

    path = calibrate.default_path()
    effs = kernel_cost.load_efficiencies(path) if path.exists() else {}
    if not effs:
        print("\n(no calibration with fitted efficiencies: run `dsperf report` for the calibrated prediction)")
        return
    spec = __import__("dsperf").load_device(str(path), "corrected")
    pred = {v: kernel_cost.predict_ms("mla_layer_step", dict(variant=v, tokens=1, prefix=kv - 1, heads=H, dim=D), spec, effs)
            for v in K.MLA_VARIANTS}
    print(f"\nCalibrated kernel cost model ({path}):")
    print("| variant | measured ms | predicted ms | error |")
    print("|---|---|---|---|")
    for v in K.MLA_VARIANTS:
        print(f"| {v} | {measured[v][0] * 1e3:.1f} | {pred[v]:.1f} | {pred[v] / (measured[v][0] * 1e3) - 1:+.0%} |")
    for absorbed in ("A_CC_ME", "AM_CC_ME"):
        for base in ("CD", "CC"):
            got = measured[base][0] / measured[absorbed][0]
            p = pred[base] / pred[absorbed]
            print(f"{absorbed} vs {base}: measured {got:.2f}x, calibrated model {p:.2f}x (measured / predicted "
                  f"{got / p:.2f}; target within 0.7-1.3)")


if __name__ == "__main__":
    main()
