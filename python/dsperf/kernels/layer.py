"""The one-call decode layer (MLA + MoE) and the same layer by separate calls."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (numpy, the extension, placement and checks)
from .moe import _moe_binding_args, moe_layer  # noqa: F401
from .mla import _check_mla_call, _mla_weights, mla_forward  # noqa: F401
from .blocks import rmsnorm  # noqa: F401

# ---- one-call decode layer ------------------------------------------------------------------------
def _moe_args(moe):
    if not isinstance(moe, dict):
        raise TypeError(f"layer['moe'] must be a dict, got {type(moe).__name__}")
    for k in ("gate_weight", "w13", "w2", "n_group", "topk_group", "top_k", "route_scale"):
        if k not in moe:
            raise ValueError(f"layer['moe'] is missing '{k}'")
    return moe


def decode_layer(variant, x, layer, cache, *, heads, freqs, softmax_scale, nope=128, rope=64, v=128, eps=1e-6):
    """A whole DeepSeek-V3 MoE block in one C++ call: x + MLA(RMSNorm(x)) -> + MoE(RMSNorm(.)).

    x BF16 [T, dim] (the residual stream, T new tokens after cache.prefix); layer = {"attn_norm",
    "ffn_norm" (FP32 [dim]), "mla": MLA weights as for mla_forward, "moe": {"gate_weight",
    "gate_bias" (optional), "w13", "w2", "w13_scale"/"w2_scale" (FP8), "shared_w13"/"shared_w2"
    (optional), "n_group", "topk_group", "top_k", "route_scale", "score_func"}}. Returns BF16 [T, dim]
    and advances cache.prefix. decode_layer_by_ops is the same layer one kernel call at a time."""
    out = _K.decode_layer(**_decode_layer_args(variant, x, layer, cache, heads, freqs, softmax_scale, nope, rope, v, eps))
    cache.prefix += x.shape[0]
    return out.view(BF16)


def _decode_layer_args(variant, x, layer, cache, heads, freqs, softmax_scale, nope, rope, v, eps):
    """decode_layer's checks (decode_layer_by_ops makes them too) and its binding's arguments."""
    if not isinstance(layer, dict):
        raise TypeError(f"layer must be a dict, got {type(layer).__name__}")
    _check_mla_call(variant, x, cache, layer.get("mla"))
    moe = _moe_args(layer.get("moe"))
    mla = _mla_weights(layer.get("mla"))
    norms = [np.ascontiguousarray(_arr(f"layer['{k}']", layer.get(k), (F32,), 1)) for k in ("attn_norm", "ffn_norm")]
    if x.shape[1] != norms[0].shape[0] or norms[1].shape != norms[0].shape:
        raise ValueError(f"x, layer['attn_norm'] and layer['ffn_norm'] must share dim, got {x.shape[1]}, "
                         f"{norms[0].shape[0]} and {norms[1].shape[0]}")
    _arr("moe['gate_weight']", moe["gate_weight"], (BF16,), 2)
    w = _expert_weights(moe["w13"], moe["w2"], moe.get("w13_scale"), moe.get("w2_scale"))
    shared = _shared_expert(moe["w13"].dtype, moe.get("shared_w13"), moe.get("shared_w2"), moe.get("shared_w13_scale"),
                            moe.get("shared_w2_scale"), where="moe: ")
    bias = moe.get("gate_bias")
    if bias is not None:
        _arr("moe['gate_bias']", bias, (F32,), 1)
    gate = _gate_args(moe["n_group"], moe["topk_group"], moe["top_k"], moe["route_scale"], moe.get("score_func", "sigmoid"))
    _arr("freqs", freqs, (F32,), 1)
    cache_args = dict(latent=_bits(cache.latent), k_pe=_bits(cache.k_pe), prefix=cache.prefix,
                      k_full=None if cache.k_full is None else _bits(cache.k_full),
                      v_full=None if cache.v_full is None else _bits(cache.v_full))
    return dict(variant=variant, x=_bits(x), attn_norm=norms[0], ffn_norm=norms[1], mla=mla,
                heads=_int("heads", heads, 1), nope=_int("nope", nope, 1), rope=_int("rope", rope, 2), v=_int("v", v, 1),
                eps=_real("eps", eps, minimum=0), freqs=freqs, softmax_scale=_real("softmax_scale", softmax_scale, positive=True),
                cache=cache_args, moe=_moe_binding_args(moe["gate_weight"], bias, w, shared, gate))


def decode_layer_by_ops(variant, x, layer, cache, *, heads, freqs, softmax_scale, nope=128, rope=64, v=128, eps=1e-6):
    """decode_layer composed from the public kernels, one Python call per op: the baseline that
    shows the per-op overhead the one-call layer removes."""
    _decode_layer_args(variant, x, layer, cache, heads, freqs, softmax_scale, nope, rope, v, eps)
    moe = layer["moe"]
    h = rmsnorm(x, layer["attn_norm"], eps)
    a = mla_forward(variant, h, layer["mla"], cache, heads=heads, freqs=freqs, softmax_scale=softmax_scale, nope=nope,
                    rope=rope, v=v, eps=eps)
    x1 = (x.astype(np.float32) + a).astype(BF16)
    h2 = rmsnorm(x1, layer["ffn_norm"], eps)
    m = moe_layer(h2, moe["gate_weight"], moe["w13"], moe["w2"], n_group=moe["n_group"], topk_group=moe["topk_group"],
                  top_k=moe["top_k"], route_scale=moe["route_scale"], score_func=moe.get("score_func", "sigmoid"),
                  gate_bias=moe.get("gate_bias"), shared_w13=moe.get("shared_w13"), shared_w2=moe.get("shared_w2"),
                  w13_scale=moe.get("w13_scale"), w2_scale=moe.get("w2_scale"),
                  shared_w13_scale=moe.get("shared_w13_scale"), shared_w2_scale=moe.get("shared_w2_scale"))
    return (x1.astype(np.float32) + m).astype(BF16)
