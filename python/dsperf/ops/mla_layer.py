"""mla_layer_prefill / mla_layer_step: one MLA layer (fused prolog, attention in one of the five execution
variants, wo) over a contiguous cache: causal prefill of `tokens` after `prefix`, or a decode step.

The layer's GEMMs are priced as GEMMs (the linear family's efficiencies); the family's own
efficiency covers the attention core, the norms and the cache traffic, so each variant's core is
fitted on its own."""
from __future__ import annotations

from .. import _C
from ..kernels import MLA_VARIANTS
from .family import DIM, OpFamily
from .inputs import mla_cache, mla_weights

KC = _C.kernel_cost
PARAMS = ("variant", "tokens", "prefix", "heads")


def variant_index(p) -> int:
    v = p.get("variant")
    if v not in MLA_VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(MLA_VARIANTS)}, got {v!r}")
    return MLA_VARIANTS.index(v)


def mla_shape(p) -> "KC.MlaShape":
    return KC.MlaShape(dim=p.get("dim", 7168), heads=p["heads"], q_lora=p.get("q_lora", 1536),
                       kv_lora=p.get("kv_lora", 512), nope=p.get("nope", 128), rope=p.get("rope", 64),
                       v=p.get("v", 128))


def work(p):
    return KC.mla_attention_work(variant_index(p), p["tokens"], p["prefix"], mla_shape(p))


def gemm_parts(p):
    return [("linear", dict(m=g.m, n=g.n, k=g.k, dtype="bf16", count=g.count))
            for g in KC.mla_gemms(variant_index(p), p["tokens"], p["prefix"], mla_shape(p))]


def build(p, pool):
    from .. import kernels as K

    variant, t, prefix, h = p["variant"], p["tokens"], p["prefix"], p["heads"]
    variant_index(p)
    w = mla_weights(pool, h, p.get("dim", DIM))
    cache = mla_cache(pool, variant, prefix, t, h)
    x = pool.get("x", (t, p.get("dim", DIM)))
    freqs = K.rope_frequencies()

    def call():
        cache.prefix = prefix
        return K.mla_forward(variant, x, w, cache, heads=h, freqs=freqs, softmax_scale=192 ** -0.5)

    return call, dict(p)


def _points(variants, tokens, prefix, heads=16):
    return [dict(variant=v, tokens=tokens, prefix=prefix, heads=heads) for v in variants]


def _large_prefill(p):
    return p["tokens"] >= 512 or (p["tokens"] >= 256 and p["variant"] in ("CC", "A_CC"))


_COMMON = dict(params=PARAMS, token_params=("tokens", "prefix"), kernels=("mla_forward",),
               references=("reference.mla_forward",), work=work, parts=gemm_parts, build=build, key_by_variant=True)

PREFILL = OpFamily(
    name="mla_layer_prefill", summary="MLA layer, causal prefill of a chunk after a cached prefix", **_COMMON,
    example=dict(variant="CD", tokens=4, prefix=0, heads=1, dim=256),
    # Six points per variant: each variant's attention core is fitted on its own, and its three
    # values (compute, memory, overhead) need more than two points to be determined. The last two
    # reach past the report's points (256 tokens; 64 after 1,024) in chunk and context: fitted on
    # 128 tokens or fewer, the quadratic core of the larger chunks was extrapolated (the A_CC and
    # A_CC_ME points -34..-47% and +84..+136% in four full reports on an AMX Xeon).
    fit_points=lambda: [p for t, prefix in ((128, 0), (64, 0), (32, 256), (16, 1024), (320, 0), (96, 2048))
                        for p in _points(MLA_VARIANTS, t, prefix)],
    default_points=lambda: _points(MLA_VARIANTS, 256, 0) + _points(("CC", "A_CC_ME"), 64, 1024),
    large=_large_prefill,
)

STEP = OpFamily(
    name="mla_layer_step", summary="MLA layer, one decode step over a cached context", **_COMMON,
    example=dict(variant="AM_CC_ME", tokens=1, prefix=70, heads=1, dim=256),
    # Four contexts per variant for the core's three values (compute, memory, overhead): with two,
    # any one of them could absorb the gap and the fit pinned the overhead at its bound.
    fit_points=lambda: [p for prefix in (128, 512, 2048, 8192) for p in _points(MLA_VARIANTS, 1, prefix)],
    default_points=lambda: _points(MLA_VARIANTS, 1, 4096) + _points(("CD", "A_CC"), 1, 1024),
    large=lambda p: False,
)

FAMILIES = (PREFILL, STEP)
