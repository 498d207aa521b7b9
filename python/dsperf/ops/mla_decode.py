"""mla_decode: absorbed MLA attention over a paged latent cache (FlashMLA's contract), heads
folded into the GEMM M dimension, split-KV merged by log-sum-exp."""
from __future__ import annotations

import math

import numpy as np

from .. import _C
from .family import KV_LORA, ROPE, OpFamily, is_fp8
from .inputs import even_split


def work(p):
    return _C.kernel_cost.mla_decode_work(p["keys"], p["batch"], p["q_len"], p["heads"], p.get("kv_lora", 512),
                                          p.get("rope", 64), is_fp8(p))


def build(p, pool):
    from .. import kernels as K

    b, q, h, dt = p["batch"], p["q_len"], p["heads"], p.get("dtype", "bf16")
    seqlens = even_split(p["keys"], b).astype(np.int32)
    if seqlens.min() < q:
        raise ValueError("mla_decode: every request needs at least q_len keys")
    blocks_per = [math.ceil(s / 64) for s in seqlens]
    cache = K.PagedMlaCache(sum(blocks_per), 64, KV_LORA, ROPE, dtype=dt)
    cache.latent[:] = pool.get("paged_latent", cache.latent.shape, dt)
    cache.rope[:] = pool.get("paged_rope", cache.rope.shape)
    if cache.latent_scale is not None:
        cache.latent_scale[:] = pool.get("paged_scale", cache.latent_scale.shape, "scale")
    table = np.zeros((b, max(blocks_per)), np.int32)
    start = 0
    for r, n in enumerate(blocks_per):
        table[r, :n] = np.arange(start, start + n)
        start += n
    qn = pool.get("q_nope", (b, q, h, KV_LORA))
    qr = pool.get("q_rope", (b, q, h, ROPE))
    splits = max(1, min(8, int(seqlens.max()) // 1024))
    return (lambda: K.mla_decode(qn, qr, cache.latent, cache.rope, table, seqlens, 192 ** -0.5, splits,
                                 latent_scale=cache.latent_scale)), dict(p)


def table_rows(p, us):
    """One attention call: an mla_decode row (keys per request as kv_len; the cache dtype)."""
    return [dict(family="mla_decode", batch=p["batch"], kv_len=p["keys"] / p["batch"], heads=p["heads"],
                 q_len=p["q_len"], dtype=p.get("dtype", "bf16"), latency_us=us)]


def _points(shapes, dtype):
    return [dict(keys=k, batch=b, q_len=1, heads=h, dtype=dtype) for k, b, h in shapes]


FAMILY = OpFamily(
    name="mla_decode", params=("keys", "batch", "q_len", "heads", "dtype"), token_params=("keys",),
    example=dict(keys=300, batch=2, q_len=1, heads=2, dtype="fp8"),
    summary="absorbed MLA decode over a paged latent cache (BF16 or FP8 latent)",
    kernels=("mla_decode",), references=("reference.mla_decode",), runs_on=("host", "gpu"),
    work=work, build=build, key_by_dtype=True, table_rows=table_rows,
    fit_points=lambda: (_points([(4096, 1, 16), (16384, 4, 16), (65536, 16, 16), (2048, 1, 128)], "bf16")
                        + _points([(4096, 1, 16), (16384, 4, 16), (65536, 16, 16)], "fp8")),
    default_points=lambda: (_points([(8192, 2, 16), (32768, 8, 16), (131072, 32, 16), (4096, 1, 128)], "bf16")
                            + _points([(8192, 2, 16), (131072, 32, 16)], "fp8")),
    large=lambda p: p["keys"] >= 131072,
)
