"""Expert FFN, MoE layer and gating throughput on this CPU, against baselines measured in the same run.

    python benchmarks/bench_experts.py [--quick] [--repeats 5] [--moe-experts 32]

Baselines (each missing one is printed as an ERROR line saying how to install it):
    apt-get install libdnnl-dev      # oneDNN 2.x BF16 matmul (benchmarks/baselines/onednn.py)
    pip install torch                # PyTorch on the CPU (benchmarks/baselines/torch_moe.py)
    numpy                            # FP32 matmul

Prints, for DeepSeek-V3's expert shapes (dim 7168, inter 2048, 8 local experts):
- the probed peaks of this machine (VDPBF16PS and FP32 FMA on all threads, streaming read of a
  1 GiB buffer) and its cache sizes read from sysfs; every working set is said to be
  cache-resident or streamed by comparing it with those sizes;
- prefill (contiguous layout, 256 tokens per expert): dsperf's grouped FFN in BF16 and FP8 against
  oneDNN's BF16 matmul (weights reordered once, untimed; its two GEMMs per expert only), PyTorch's
  per-expert loop (DeepSeek-V3's Expert.forward in BF16) and numpy's FP32 matmul on one expert;
  then one expert's call repeated, its weights cache-resident, against the probed tile peak;
- decode (masked layout, 8 tokens per expert; 704 MB of BF16 / 352 MB of FP8 weights): weight
  bytes per second against the streaming read, and FP8 against BF16 in tokens per second;
- the one-call MoE layer against PyTorch's per-expert loop (the reference model code's MoE.forward)
  at 1, 8, 64 and 512 tokens;
- gating 4096 tokens over 256 experts, against the expert time of the same tokens.
Every timing is the median of --repeats runs after a warm-up, and every ratio compares figures from
this one run (the machine is shared and noisy between runs).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.baselines, run as a script

from benchmarks.baselines.machine import (cache_sizes, describe_caches, describe_isa, gemm_units,  # noqa: E402
                                         median, median_with_read_probes, probed_peaks, probed_tile_peak,
                                         residency)
from benchmarks.deepseek_v3.baseline.common import random_bf16  # noqa: E402
from dsperf import _C  # noqa: E402
from dsperf import kernels as K  # noqa: E402
from dsperf.harness import random_fp8  # noqa: E402

D, I = 7168, 2048


def error(what, e):
    print(f"  ERROR: {what} baseline unavailable: {e}")


def load_torch():
    from benchmarks.baselines import torch_moe

    torch = torch_moe.load()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    return torch, torch_moe


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 experts, 64 tokens: a smoke run, not the figures")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--moe-experts", type=int, default=32,
                    help="routed experts of the MoE-layer comparison (DeepSeek-V3 has 256; 32 keep it in memory)")
    a = ap.parse_args()
    experts, tokens = (2, 64) if a.quick else (8, 256)
    reps = a.repeats
    rng = np.random.default_rng(0)
    caches = cache_sizes()

    peak, fma_peak, bw = probed_peaks(_C.kernels)
    split = _C.kernels.linear_prefill_min_rows()
    print(f"{describe_isa(K)}; AMX usable: {K.cpu_features()['amx_bf16']}; caches (sysfs): {describe_caches(caches)}")
    print(f"probed peaks (all threads): VDPBF16PS {peak:.1f} GFLOPS, FP32 FMA {fma_peak:.1f} GFLOPS; "
          f"streaming read: {bw:.1f} GB/s (1 GiB buffer); each the best of several probes")
    print(f"dsperf GEMMs change kernel at {split} rows (linear_prefill_min_rows); probed VDPBF16PS / FMA peaks "
          f"{peak / fma_peak:.2f}; products: {_C.kernels.gemm_products()}")
    tile_peak = probed_tile_peak(_C.kernels)
    # What a GEMM can reach on the tiles: the same products with each step's operand tiles loaded, as
    # every 2 x 2 tile step must load them (A from L1, B from L2, as the driver's blocking has them).
    tile_loop = probed_tile_peak(_C.kernels, operand_loads=True)
    print("probed AMX tile peak (TDPBF16PS, all threads): " + (
        f"{tile_peak:.1f} GFLOPS; with each step's 4 operand tiles loaded (2 from L1, 2 from L2: a GEMM's tile loop): "
        f"{tile_loop:.1f} GFLOPS = {tile_loop / tile_peak:.0%} of it" if tile_peak else f"none here ({K.amx_status()})"))
    try:
        torch, torch_moe = load_torch()
    except RuntimeError as e:
        torch = torch_moe = None
        torch_error = e

    w13 = random_bf16(rng, (experts, 2 * I, D))
    w2 = random_bf16(rng, (experts, D, I))
    wbytes = w13.nbytes + w2.nbytes
    flops_per_token = 2 * (2 * I * D + D * I)

    # ---- prefill, contiguous layout ------------------------------------------------------------
    x = random_bf16(rng, (experts * tokens, D))
    offsets = np.arange(experts + 1, dtype=np.int64) * tokens
    flops = flops_per_token * experts * tokens
    print(f"\nprefill, {experts} experts x {tokens} tokens; weights {wbytes >> 20} MiB BF16: {residency(wbytes, caches)}")
    t_ours = median(lambda: K.experts_contiguous(x, offsets, w13, w2), reps)
    print(f"  dsperf experts_contiguous BF16: {t_ours * 1e3:.1f} ms, {flops / t_ours / 1e12:.3f} TFLOPS = "
          f"{flops / t_ours / 1e9 / peak:.1%} of the VDPBF16PS peak (target >= 70%), "
          f"{flops / t_ours / 1e9 / fma_peak:.1%} of the FP32 FMA peak"
          + (f", {flops / t_ours / 1e9 / tile_peak:.1%} of the AMX tile peak" if tile_peak else "")
          + f"; units: {gemm_units(_C.kernels, tokens)}")
    packed = K.PackedExperts(w13, w2)  # once, untimed (as oneDNN's reorder below)
    t_packed = median(lambda: K.experts_contiguous(x, offsets, packed), reps)
    print(f"  dsperf experts_contiguous BF16 on PackedExperts (weights packed once, untimed: {packed!r}): "
          f"{t_packed * 1e3:.1f} ms, {flops / t_packed / 1e12:.3f} TFLOPS"
          + (f" = {flops / t_packed / 1e9 / tile_peak:.1%} of the AMX tile peak" if tile_peak else "")
          + f"; {t_ours / t_packed:.2f} x the plain call")
    del packed
    # The tile-peak target is for weights in cache: one expert's call repeated, its weights kept.
    x1, off1, w13h, w2h = x[:tokens], offsets[:2], w13[:1], w2[:1]
    flops1 = flops_per_token * tokens
    t_hot = median(lambda: K.experts_contiguous(x1, off1, w13h, w2h), reps)
    packed1 = K.PackedExperts(w13h, w2h)
    t_hot_packed = median(lambda: K.experts_contiguous(x1, off1, packed1), reps)
    del packed1
    print(f"  one expert's call repeated ({tokens} tokens; weights {(w13h.nbytes + w2h.nbytes) >> 20} MiB: "
          f"{residency(w13h.nbytes + w2h.nbytes, caches)}): {flops1 / t_hot / 1e12:.3f} TFLOPS, on PackedExperts "
          f"{flops1 / t_hot_packed / 1e12:.3f}"
          + (f" = {flops1 / t_hot / 1e9 / tile_peak:.1%} / {flops1 / t_hot_packed / 1e9 / tile_peak:.1%} of the AMX "
             f"tile peak (target >= 60% with the weights cache-resident), {flops1 / t_hot / 1e9 / tile_loop:.1%} / "
             f"{flops1 / t_hot_packed / 1e9 / tile_loop:.1%} of the tile loop with operand loads" if tile_peak else ""))
    w13q, w2q = random_fp8(rng, w13.shape), random_fp8(rng, w2.shape)
    s13 = np.full((experts, 2 * I // 128, D // 128), 1e-3, np.float32)
    s2 = np.full((experts, D // 128, I // 128), 1e-3, np.float32)
    t_fp8 = median(lambda: K.experts_contiguous(x, offsets, w13q, w2q, s13, s2), reps)
    print(f"  dsperf experts_contiguous FP8 128x128 blocks: "
          f"{t_fp8 * 1e3:.1f} ms, {flops / t_fp8 / 1e12:.3f} TFLOPS = {flops / t_fp8 / 1e9 / peak:.1%} of the peak; "
          f"{t_ours / t_fp8:.2f} x the BF16 throughput")
    packed8 = K.PackedExperts(w13q, w2q, s13, s2)
    t_fp8p = median(lambda: K.experts_contiguous(x, offsets, packed8), reps)
    print(f"  dsperf experts_contiguous FP8 on PackedExperts (blocks dequantised once, untimed): {t_fp8p * 1e3:.1f} ms, "
          f"{flops / t_fp8p / 1e12:.3f} TFLOPS; {t_fp8 / t_fp8p:.2f} x the plain FP8 call")
    del packed8
    try:
        from benchmarks.baselines import onednn

        mm = onednn.load()
        h = random_bf16(rng, (tokens, I))
        for label, flush in (("weights from memory (caches flushed before each GEMM, as a pass over all experts "
                              "sees them)", 512 << 20), ("weights hot in cache (the same GEMM repeated)", 0)):
            t_dnnl = 0.0
            for e in range(experts):
                xe = np.ascontiguousarray(x[e * tokens:(e + 1) * tokens])
                t_dnnl += mm(xe, w13[e], reps, flush)[1] + mm(h, w2[e], reps, flush)[1]
            print(f"  oneDNN BF16 matmul, its 2 GEMMs per expert only, {label}: {t_dnnl * 1e3:.1f} ms, "
                  f"{flops / t_dnnl / 1e12:.3f} TFLOPS = {flops / t_dnnl / 1e9 / peak:.1%} of the peak; "
                  f"dsperf / oneDNN throughput {t_dnnl / t_ours:.2f} (target >= 1.0), on PackedExperts "
                  f"{t_dnnl / t_packed:.2f}")
    except RuntimeError as e:
        error("oneDNN", e)
    if torch is not None:
        tx, t13, t2 = (torch_moe.as_torch(torch, v) for v in (x, w13, w2))
        with torch.inference_mode():
            t_torch = median(lambda: torch_moe.expert_ffns(torch, tx, offsets, t13, t2), reps)
        print(f"  PyTorch {torch.__version__} per-expert loop (Expert.forward, BF16 F.linear): {t_torch * 1e3:.1f} ms, "
              f"{flops / t_torch / 1e12:.3f} TFLOPS; dsperf / PyTorch throughput {t_torch / t_ours:.2f} (target >= 1.0), "
              f"on PackedExperts {t_torch / t_packed:.2f}")
    else:
        error("PyTorch", torch_error)
    xf = x[:tokens].astype(np.float32)
    w1f, w2f = w13[0].astype(np.float32), w2[0].astype(np.float32)
    one = lambda: (xf @ w1f.T)[:, :I] @ w2f.T  # noqa: E731  (the FLOPs of one expert's FFN)
    t_np = median(one, max(1, reps // 2))
    np_flops = flops_per_token * tokens
    print(f"  numpy {np.__version__} FP32 matmul, one expert's two GEMMs: {np_flops / t_np / 1e9:.1f} GFLOPS; "
          f"dsperf / numpy throughput {(flops / t_ours) / (np_flops / t_np):.2f}")

    # ---- decode, masked layout ------------------------------------------------------------------
    cap = 8
    xm = random_bf16(rng, (experts, cap, D))
    counts = np.full(experts, cap, np.int32)
    print(f"\ndecode, {experts} experts x {cap} tokens, masked layout; BF16 weights {residency(wbytes, caches)}; "
          f"FP8 weights {residency(wbytes // 2, caches)}")
    t_dec, bw_dec = median_with_read_probes(lambda: K.experts_masked(xm, counts, w13, w2), reps, _C.kernels)
    gbytes = wbytes / 1e9
    # At `cap` tokens per expert every weight element takes cap multiply-adds: 2 * cap FLOPs per
    # element, so the peak of the units the GEMMs run on caps the weight rate whatever the memory does.
    products = _C.kernels.gemm_products()
    stream_peak, stream_name = (fma_peak, "FP32 FMA") if products == "fma" else (peak, "VDPBF16PS")

    def units_peak(weights):  # (name, GFLOPS) of the units a decode GEMM of these weights runs on
        amx = gemm_units(_C.kernels, cap, weights).startswith("AMX")
        return ("AMX tile", tile_peak) if amx else (stream_name, stream_peak)
    (name16, peak16), (name8, used_peak) = units_peak("bf16"), units_peak("fp8")
    peak_name = name8
    bound16, bound8 = peak16 / cap, used_peak / (2 * cap)
    print(f"  BF16: {t_dec * 1e3:.1f} ms, {gbytes / t_dec:.1f} GB/s of weights = {gbytes / t_dec / bw:.1%} of the "
          f"best streaming read, {gbytes / t_dec / bw_dec:.1%} of the median read probed between its runs "
          f"({bw_dec:.1f} GB/s) (target >= 80%); the {name16} peak (the units its GEMMs run on) caps BF16 weights "
          f"at {bound16:.0f} GB/s here")
    t_dec8, bw_dec8 = median_with_read_probes(lambda: K.experts_masked(xm, counts, w13q, w2q, s13, s2), reps,
                                              _C.kernels)
    g8 = (w13q.nbytes + w2q.nbytes) / 1e9
    print(f"  FP8: {t_dec8 * 1e3:.1f} ms, {g8 / t_dec8:.1f} GB/s of FP8 weights = {g8 / t_dec8 / bw:.1%} of the "
          f"best streaming read, {g8 / t_dec8 / bw_dec8:.1%} of the median read probed between its runs "
          f"({bw_dec8:.1f} GB/s) (target >= 80%); the {peak_name} peak caps FP8 weights at {bound8:.0f} GB/s here "
          f"({g8 / t_dec8 / bound8:.0%} of that cap); tokens/s {t_dec / t_dec8:.2f} x the BF16 decode (target >= 1.6)")
    # The same GEMM kernels with their weights in cache: how fast they turn weights into products
    # when memory is not the limit. Below the read, this (not the memory) bounds decode.
    rows = 512
    xc = random_bf16(rng, (cap, D))
    wc16, wc8 = random_bf16(rng, (rows, D)), random_fp8(rng, (rows, D))
    sc = np.full((rows // 128, D // 128), 1e-3, np.float32)
    tc16 = median(lambda: K.linear(xc, wc16), 3 * reps)
    tc8 = median(lambda: K.linear(xc, wc8, sc), 3 * reps)
    c16, c8 = wc16.nbytes / tc16 / 1e9, wc8.nbytes / tc8 / 1e9
    print(f"  the decode GEMM ({cap} x {rows} x {D}) with its weights in cache (BF16 "
          f"{residency(wc16.nbytes, caches)}; FP8 {residency(wc8.nbytes, caches)}): BF16 {c16:.1f} GB/s, FP8 "
          f"{c8:.1f} GB/s of weights ({2 * cap * rows * D / tc8 / 1e9:.0f} GFLOPS = "
          f"{2 * cap * rows * D / tc8 / 1e9 / used_peak:.0%} of the {peak_name} peak): their rate at {cap} tokens "
          f"when memory is not the limit; FP8 at 80% of the best read needs {0.8 * bw:.1f} GB/s")
    for name, cached, streamed in (("BF16", c16, gbytes / t_dec), ("FP8", c8, g8 / t_dec8)):
        bound = "the products, not the memory" if cached < 1.25 * streamed else "the memory"
        print(f"  {name} decode streams at {streamed / cached:.0%} of its in-cache rate: bound by {bound} here")
    if torch is not None:
        txm = torch_moe.as_torch(torch, xm.reshape(-1, D))
        off_m = np.arange(experts + 1, dtype=np.int64) * cap
        with torch.inference_mode():
            t_tdec = median(lambda: torch_moe.expert_ffns(torch, txm, off_m, t13, t2), reps)
        print(f"  PyTorch per-expert loop, BF16: {t_tdec * 1e3:.1f} ms, {gbytes / t_tdec:.1f} GB/s of weights; "
              f"dsperf BF16 / PyTorch tokens/s {t_tdec / t_dec:.2f}, dsperf FP8 / PyTorch {t_tdec / t_dec8:.2f}")
    del w13q, w2q

    # ---- the MoE layer in one call ---------------------------------------------------------------
    E = 16 if a.quick else a.moe_experts  # 16: the smallest count whose 4 kept groups hold top-8
    print(f"\nMoE layer: {E} routed experts (8 groups, 4 kept, top-8, sigmoid gate with bias) + 1 shared expert, "
          f"BF16; dsperf moe_layer (one call) vs PyTorch's MoE.forward loop")
    lw13 = random_bf16(rng, (E, 2 * I, D))
    lw2 = random_bf16(rng, (E, D, I))
    gate_w = random_bf16(rng, (E, D))
    bias = (0.01 * rng.standard_normal(E)).astype(np.float32)
    sw13, sw2 = random_bf16(rng, (2 * I, D)), random_bf16(rng, (D, I))
    print(f"  routed weights {(lw13.nbytes + lw2.nbytes) >> 20} MiB: {residency(lw13.nbytes + lw2.nbytes, caches)}")
    cfg = dict(n_group=8, topk_group=4, top_k=8, route_scale=2.5)
    packed_routed, packed_shared = K.PackedExperts(lw13, lw2), K.PackedExperts(sw13[None], sw2[None])
    if torch is not None:
        tl13, tl2, tgw, tsw13, tsw2 = (torch_moe.as_torch(torch, v) for v in (lw13, lw2, gate_w, sw13, sw2))
        tbias = torch.from_numpy(bias)
    for T in (1, 8, 64, 512):
        xt = random_bf16(rng, (T, D))
        r = max(3, reps) if T <= 64 else reps
        t_d = median(lambda: K.moe_layer(xt, gate_w, lw13, lw2, gate_bias=bias, shared_w13=sw13, shared_w2=sw2,
                                         **cfg), r)
        t_p = median(lambda: K.moe_layer(xt, gate_w, packed_routed, gate_bias=bias, shared_w13=packed_shared,
                                         **cfg), r)
        line = f"  {T:4d} tokens: dsperf {t_d * 1e3:8.1f} ms, on PackedExperts {t_p * 1e3:8.1f} ms"
        if torch is not None:
            txt = torch_moe.as_torch(torch, xt)
            with torch.inference_mode():
                t_t = median(lambda: torch_moe.moe_layer(torch, txt, tgw, tbias, tl13, tl2, tsw13, tsw2, **cfg), r)
            line += (f", PyTorch {t_t * 1e3:8.1f} ms: dsperf {t_t / t_d:.2f} x faster (target > 1), on PackedExperts "
                     f"{t_t / t_p:.2f} x")
        else:
            line += " (PyTorch: unavailable, see the ERROR above)"
        print(line)
    del lw13, lw2, packed_routed, packed_shared

    # ---- gating ----------------------------------------------------------------------------------
    gt = 512 if a.quick else 4096
    xg = random_bf16(rng, (gt, D))
    gw = random_bf16(rng, (256, D))
    gbias = np.zeros(256, np.float32)
    t_gate = median(lambda: K.moe_gate(xg, gw, gbias, n_group=8, topk_group=4, top_k=8, route_scale=2.5), reps)
    t_experts_same = flops_per_token * gt * 8 / (flops / t_ours)  # at the measured prefill rate
    print(f"\ngating {gt} tokens over 256 experts: {t_gate * 1e3:.2f} ms; the experts of the same tokens "
          f"(8 per token, at the measured prefill rate): {t_experts_same * 1e3:.0f} ms; "
          f"ratio {t_gate / t_experts_same:.2%} (target < 5%)")


if __name__ == "__main__":
    main()
