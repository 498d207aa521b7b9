"""Runs every CPU kernel on inputs that end at an inaccessible page (guard_pages.guarded), with
widths whose tails the vector kernels load under masks, and checks that each result equals the
same call on ordinary arrays bit for bit. A read past an input's end kills this process with
SIGSEGV; the last line it printed names the case. Run by test_kernels_guard_pages.py, once per
kernel path (DSPERF_ISA, DSPERF_GEMM)."""
import sys

import numpy as np

from dsperf import kernels as K
from guard_pages import guarded
from kernel_helpers import rand_bf16, rand_fp8_weight

GATE = dict(n_group=2, topk_group=1, top_k=2, route_scale=2.5)


def cases(rng):
    """(name, inputs, call): call(*inputs) runs the kernel; inputs are numpy arrays or plain values."""
    out = []
    # linear: the stream kernel (few rows: 1, a 2-row FMA tile, a full tile, a tile and one more)
    # and the prefill kernels (40 rows: past linear_fma_min_rows on both products), K and N with
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
    x = rand_bf16(rng, 9, 100)
    out.append(("moe_gate", (x, rand_bf16(rng, 6, 100), np.zeros(6, np.float32)),
                lambda a, w, b: K.moe_gate(a, w, b, **GATE)))
    out.append(("rmsnorm", (x, rand_bf16(rng, 100)), K.rmsnorm))
    out.append(("silu_mul", (rng.standard_normal((5, 2 * 37)).astype(np.float32),), K.silu_mul))
    out.append(("act_quant", (rand_bf16(rng, 3, 200),), K.act_quant))
    wq, s = rand_fp8_weight(rng, 130, 70)
    out.append(("weight_dequant", (wq, s), K.weight_dequant))
    out.append(("apply_rope", (rand_bf16(rng, 5, 3, 22), np.arange(5, dtype=np.int32), K.rope_frequencies(22)),
                K.apply_rope))
    out.append(("embedding", (rand_bf16(rng, 11, 70), np.array([10, 0, 3], np.int32)), K.embedding))
    return out


def same(a, b) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def main() -> int:
    failed = []
    for name, inputs, call in cases(np.random.default_rng(0)):
        print(name, flush=True)  # the last name printed is the case a fault interrupted
        want = call(*inputs)
        got = call(*(guarded(a) if isinstance(a, np.ndarray) and a.size else a for a in inputs))
        if not same(want, got):
            failed.append(name)
    print(f"{K.isa()} done; differing results: {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
