"""decode_layer: RMSNorm -> MLA -> residual -> RMSNorm -> MoE -> residual in one C++ call.
Composite: priced as an MLA layer (mla_layer_step for one token, else mla_layer_prefill) and a moe_layer."""
from __future__ import annotations

import numpy as np

from .family import DIM, MOE_INTER as I, OpFamily
from .inputs import gate_groups, mla_cache, mla_weights
from .moe_layer import PARAMS as MOE_PARAMS, layer_inputs

PARAMS = ("variant", "tokens", "prefix", "heads", "dim", "inter", "experts", "top_k", "active", "shared_inter",
          "dtype")


def parts(p):
    mla = dict(variant=p["variant"], tokens=p["tokens"], prefix=p["prefix"], heads=p["heads"], dim=p["dim"])
    moe = {k: p[k] for k in MOE_PARAMS if k in p}
    return [("mla_layer_step" if p["tokens"] == 1 else "mla_layer_prefill", mla), ("moe_layer", moe)]


def build(p, pool):
    from .. import kernels as K

    x, moe, q = layer_inputs(p, pool)
    d, variant, t, prefix, h = p["dim"], p["variant"], p["tokens"], p["prefix"], p["heads"]
    layer = {"attn_norm": np.ones(d, np.float32), "ffn_norm": np.ones(d, np.float32),
             "mla": mla_weights(pool, h, d), "moe": dict(moe, **gate_groups(p["experts"], p["top_k"]))}
    cache = mla_cache(pool, variant, prefix, t, h)
    freqs = K.rope_frequencies()

    def call():
        cache.prefix = prefix
        return K.decode_layer(variant, x, layer, cache, heads=h, freqs=freqs, softmax_scale=192 ** -0.5)

    return call, q


def _default_points():
    layer = dict(dim=DIM, inter=I, shared_inter=I, dtype="bf16", experts=16, top_k=8, heads=16)
    return ([dict(layer, variant=v, tokens=1, prefix=2048) for v in ("CD", "A_CC_ME")]
            + [dict(layer, variant="AM_CC_ME", tokens=4, prefix=4096)])


FAMILY = OpFamily(
    name="decode_layer", params=PARAMS, token_params=("tokens", "prefix"),
    example=dict(variant="A_CC_ME", tokens=1, prefix=10, heads=1, dim=256, inter=128, experts=16,
                 top_k=4, shared_inter=128, dtype="bf16"),
    summary="a whole transformer block in one call (composite: an MLA layer and a moe_layer)",
    kernels=("decode_layer",), references=("kernels.decode_layer_by_ops",),
    parts=parts, build=build, default_points=_default_points,
    large=lambda p: p["tokens"] >= 128 or p.get("dtype") == "fp8",
)
