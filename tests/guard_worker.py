"""Runs the CPU kernels on inputs that end, and then on inputs that begin, at an inaccessible page
(guard_pages.guarded), with widths whose tails the vector kernels load under masks, and checks
that each result equals the same call on ordinary arrays bit for bit. A read past an input's edge
kills this process with SIGSEGV; the last line it printed names the case. Run by
test_kernels_guard_pages.py, once per kernel path (DSPERF_ISA, DSPERF_GEMM).

Covered: linear (stream and prefill kernels, BF16 and FP8), the experts (masked and contiguous,
BF16 and FP8), MLA decode (BF16 cache, odd widths, split-KV), paged cache writes (BF16 and FP8),
gating, routing, permute / unpermute, RMSNorm, SiLU-mul, RoPE, FP8 quantisation and
dequantisation, embedding. The composed layers (mla_forward, decode_layer, moe_layer) call these.
Where an adapter copies an input before the kernel sees it (RoPE works in place on a copy), the
kernel is called directly on the guarded buffer."""
import sys

import numpy as np

from dsperf import _C
from dsperf import kernels as K
from guard_pages import guarded
from kernel_helpers import BF16, rand_bf16, rand_fp8_weight

GATE = dict(n_group=2, topk_group=1, top_k=2, route_scale=2.5)


def cases(rng):
    """(name, inputs, call): call(*inputs) runs the kernel; inputs are numpy arrays or plain values."""
    out = []
    # linear: the stream kernel (few rows: 1, a 2-row FMA tile, a full tile, a tile and one more)
    # and the prefill kernels (40 rows: past linear_prefill_min_rows on both products), K and N with
    # tails past every vector width.
    for M in (1, 2, 8, 9, 40):
        for N, Kd in ((3, 7), (130, 70), (17, 200)):
            x, w = rand_bf16(rng, M, Kd), rand_bf16(rng, N, Kd, scale=0.1)
            wq, s = rand_fp8_weight(rng, N, Kd)
            out.append((f"linear BF16 M={M} N={N} K={Kd}", (x, w), K.linear))
            out.append((f"linear FP8 M={M} N={N} K={Kd}", (x, wq, s), K.linear))
    # Experts: masked (decode) and contiguous (prefill), BF16 and FP8, dim and inter off the widths.
    E, D, inter = 2, 200, 72
    w13, w2 = rand_bf16(rng, E, 2 * inter, D, scale=0.1), rand_bf16(rng, E, D, inter, scale=0.1)
    q13 = [rand_fp8_weight(rng, 2 * inter, D) for _ in range(E)]
    q2 = [rand_fp8_weight(rng, D, inter) for _ in range(E)]
    w13q, s13 = np.stack([q for q, _ in q13]), np.stack([s for _, s in q13])
    w2q, s2 = np.stack([q for q, _ in q2]), np.stack([s for _, s in q2])
    xm, counts = rand_bf16(rng, E, 5, D), np.array([5, 3], np.int32)
    xc, offsets = rand_bf16(rng, 37, D), np.array([0, 20, 37], np.int64)
    out.append(("experts_masked BF16", (xm, counts, w13, w2), K.experts_masked))
    out.append(("experts_masked FP8", (xm, counts, w13q, w2q, s13, s2), K.experts_masked))
    out.append(("experts_contiguous BF16", (xc, offsets, w13, w2), K.experts_contiguous))
    out.append(("experts_contiguous FP8", (xc, offsets, w13q, w2q, s13, s2), K.experts_contiguous))
    # MLA decode: odd latent and rope widths (the key pair layout's partial paths), kv lengths off
    # the block size, split-KV.
    for L, rope in ((41, 8), (512, 64)):
        blocks, bs = 6, 64
        lat, rop = rand_bf16(rng, blocks, bs, L), rand_bf16(rng, blocks, bs, rope)
        qn, qr = rand_bf16(rng, 2, 1, 4, L, scale=0.05), rand_bf16(rng, 2, 1, 4, rope, scale=0.05)
        table, lens = np.array([[5, 1, 3], [0, 2, 4]], np.int32), np.array([150, 67], np.int32)
        out.append((f"mla_decode L={L} rope={rope}", (qn, qr, lat, rop, table, lens, L ** -0.5, 3), K.mla_decode))
    # Gating, norms, activations, quantisation: widths off 16 and 64.
    # Paged cache writes, BF16 and FP8 latent (one scale per 128 values: 200 leaves a tail).
    for fp8 in (False, True):
        blocks, bs, L, rope = 3, 16, 200, 22
        lat = rand_bf16(rng, blocks, bs, L) if not fp8 else rand_fp8_weight(rng, blocks * bs, L)[0].reshape(blocks, bs, L)
        args = (lat, rand_bf16(rng, blocks, bs, rope), np.array([[2, 0]], np.int32), np.zeros(3, np.int32),
                np.array([0, 17, 31], np.int32), rand_bf16(rng, 3, L), rand_bf16(rng, 3, rope))
        args += (np.ones((blocks, bs, 2), np.float32),) if fp8 else ()  # one scale per 128 latent values

        def write(lat, rop, table, req, pos, new_lat, new_rope, *scale):
            _C.kernels.paged_cache_write(lat.view(np.uint8 if lat.dtype.itemsize == 1 else np.uint16),
                                         scale[0] if scale else None, rop.view(np.uint16), table, req, pos,
                                         new_lat.view(np.uint16), new_rope.view(np.uint16))
            return (lat, rop) + scale
        out.append((f"paged_cache_write {'FP8' if fp8 else 'BF16'}", args, write))
    # Gating, routing, norms, activations, quantisation: widths off 16 and 64.
    x = rand_bf16(rng, 9, 100)
    out.append(("moe_gate", (x, rand_bf16(rng, 6, 100), np.zeros(6, np.float32)),
                lambda a, w, b: K.moe_gate(a, w, b, **GATE)))
    ids = rng.integers(0, 7, size=(9, 3)).astype(np.int32)
    out.append(("moe_route", (ids,), lambda i: K.moe_route(i, 7)))
    _, position, source = K.moe_route(ids, 7)
    out.append(("moe_permute", (rand_bf16(rng, 9, 70), source), K.moe_permute))
    out.append(("moe_unpermute", (rng.standard_normal((27, 70)).astype(np.float32), position,
                                  rng.random((9, 3)).astype(np.float32)), K.moe_unpermute))
    for dt in (np.float32, BF16):
        w = rng.standard_normal(100).astype(np.float32)  # FP32: a BF16 weight is converted (copied) first
        out.append((f"rmsnorm {np.dtype(dt).name}", (x.astype(dt), w), K.rmsnorm))
        out.append((f"act_quant {np.dtype(dt).name}", (rand_bf16(rng, 3, 200).astype(dt),), K.act_quant))
    out.append(("silu_mul", (rng.standard_normal((5, 2 * 37)).astype(np.float32),), K.silu_mul))
    wq, s = rand_fp8_weight(rng, 130, 70)
    out.append(("weight_dequant", (wq, s), K.weight_dequant))
    # RoPE in place (apply_rope rotates a copy of x, so the kernels are called on the guarded rows).
    pos, freqs = np.arange(5, dtype=np.int32), K.rope_frequencies(22)
    out.append(("rope BF16", (rand_bf16(rng, 5, 3, 22), pos, freqs),
                lambda a, p, f: (_C.kernels.rope_inplace_bf16(a.view(np.uint16), p, f), a)[1]))
    out.append(("rope FP32", (rng.standard_normal((5, 3, 22)).astype(np.float32), pos, freqs),
                lambda a, p, f: (_C.kernels.rope_inplace_f32(a, p, f), a)[1]))
    out.append(("embedding", (rand_bf16(rng, 11, 70), np.array([10, 0, 3], np.int32)), K.embedding))
    return out


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def main() -> int:
    # The path this process runs, for the caller to check that its DSPERF_ISA / DSPERF_GEMM took.
    print(f"kernels: {K.isa()} {_C.kernels.gemm_products()}", flush=True)
    failed = []
    every = cases(np.random.default_rng(0))  # no call changes its inputs: each gets copies
    for edge in ("end", "start"):
        for name, inputs, call in every:
            print(f"{name}, inputs {'ending' if edge == 'end' else 'starting'} at a guard page", flush=True)
            # Each call gets fresh copies: some kernels write into their inputs.
            want = call(*(a.copy() if isinstance(a, np.ndarray) else a for a in inputs))
            got = call(*(guarded(a, edge) if isinstance(a, np.ndarray) and a.size else a for a in inputs))
            if not same(want, got):
                failed.append(f"{name} ({edge})")
    print(f"done; differing results: {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
