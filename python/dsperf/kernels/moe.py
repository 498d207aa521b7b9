"""Mixture of experts: gating, routing, permute/unpermute, the grouped expert FFN (contiguous and
masked layouts) and the whole MoE layer."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (numpy, the extension, placement and checks)
from .. import _checks
from .blocks import linear


# ---- mixture of experts ------------------------------------------------------------------------
def moe_gate(x, weight, bias=None, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid"):
    """DeepSeek-V3 routing: (weights FP32 [T, top_k], ids int32 [T, top_k]), best first.

    logits = x @ weight.T (x, weight both BF16 through dsperf's GEMM, or both FP32 through numpy);
    scores = sigmoid (V3) or softmax (V2) of the logits; bias (FP32 [E], the correction bias) is
    added for selection only; with n_group > 1 a group scores the sum of its two best biased scores
    (its best without a bias) and the topk_group best groups are kept; then the top_k experts;
    weights = the chosen unbiased scores, normalised to sum 1 for sigmoid, times route_scale.
    """
    if _on_gpu(x, weight, bias):
        # On the GPU: the logits through cuBLAS (BF16), then the routing kernel.
        cuda = _cuda()
        if not (cuda.is_device_array_like(x) and cuda.is_device_array_like(weight)):
            raise TypeError("x and weight must both be GPU arrays (or both numpy arrays)")
        xa, wa = cuda.as_device_array(x, "x"), cuda.as_device_array(weight, "weight")
        if xa.ndim != 2 or wa.ndim != 2 or wa.shape[1] != xa.shape[1]:
            raise ValueError(f"x must be [T, D] and weight [experts, D], got {xa.shape} and {wa.shape}")
        logits = cuda.cublas_gemm_bf16(xa.reshape(1, *xa.shape), wa.reshape(1, *wa.shape)).reshape(xa.shape[0], wa.shape[0])
        return cuda.moe_gate(logits, bias, n_group=n_group, topk_group=topk_group, top_k=top_k,
                             route_scale=route_scale, score_func=score_func)
    _arr("x", x, (F32, BF16), 2)
    _arr("weight", weight, (F32, BF16), 2)
    if x.dtype != weight.dtype:
        raise TypeError(f"x and weight must share a dtype, got {x.dtype} and {weight.dtype}")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"weight must be [experts, {x.shape[1]}], got {weight.shape}")
    if bias is not None:
        _arr("bias", bias, (F32,), 1)
    config = _gate_args(n_group, topk_group, top_k, route_scale, score_func)
    logits = linear(x, weight) if x.dtype == BF16 else np.ascontiguousarray(x @ weight.T, dtype=np.float32)
    return _K.moe_gate(logits, bias, config)


def moe_route(ids, n_experts):
    """Group (token, slot) pairs by expert, stable in token order: (offsets int64 [E + 1],
    position int32 [T, K] = each pair's row in the permuted order, source int32 [T * K] = each
    row's token)."""
    return _K.moe_route(_ids("ids", ids, 2), _int("n_experts", n_experts, 1))  # the binding bounds the offsets


def moe_permute(x, source):
    """x[source]: BF16 rows in expert order."""
    if _on_gpu(x, source):
        return _cuda().moe_permute(x, source)
    _arr("x", x, (BF16,), 2)
    return _K.moe_permute(_bits(x), _ids("source", source, 1)).view(BF16)


def moe_unpermute(y_perm, position, weights):
    """y[t] = sum_k weights[t, k] * y_perm[position[t, k]] (FP32), in slot order."""
    if _on_gpu(y_perm, position, weights):
        return _cuda().moe_unpermute(y_perm, position, weights)
    _arr("y_perm", y_perm, (F32,), 2)
    _arr("weights", weights, (F32,), 2)
    return _K.moe_unpermute(y_perm, _ids("position", position, 2), weights)


def experts_contiguous(x, offsets, w13, w2, w13_scale=None, w2_scale=None):
    """Grouped expert FFN, contiguous layout: x BF16 [rows, dim] sorted by expert, expert e owning
    rows offsets[e]:offsets[e+1]; w13 [E, 2I, dim] (w1 then w3), w2 [E, dim, I], BF16 or FP8 with
    block scales. Returns FP32 [rows, dim]."""
    if _on_gpu(x, offsets, w13, w2, w13_scale, w2_scale):
        return _cuda().experts_contiguous(x, offsets, w13, w2, w13_scale, w2_scale)
    _arr("x", x, (BF16,), 2)
    offsets = _arr("offsets", offsets, (np.dtype(np.int64), np.dtype(np.int32)), 1).astype(np.int64, copy=False)
    w = _expert_weights(w13, w2, w13_scale, w2_scale)
    _checks.expert_offsets(offsets, w13.shape[0], x.shape[0])
    return _K.experts_contiguous(_bits(x), offsets, *w)


def experts_masked(x, counts, w13, w2, w13_scale=None, w2_scale=None):
    """Grouped expert FFN, masked layout: x BF16 [E, capacity, dim] with counts[e] valid rows per
    expert. Returns FP32 [E, capacity, dim], zero past each count."""
    if _on_gpu(x, counts, w13, w2, w13_scale, w2_scale):
        return _cuda().experts_masked(x, counts, w13, w2, w13_scale, w2_scale)
    _arr("x", x, (BF16,), 3)
    counts = _ids("counts", counts, 1)
    w = _expert_weights(w13, w2, w13_scale, w2_scale)
    if x.shape[0] != w13.shape[0] or x.shape[2] != w13.shape[2]:
        raise ValueError(f"x must be [experts={w13.shape[0]}, capacity, dim={w13.shape[2]}], got {x.shape}")
    _checks.expert_counts(counts, x.shape[0], x.shape[1])
    return _K.experts_masked(_bits(x), counts, *w)


def moe_layer(x, gate_weight, w13, w2, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid",
              gate_bias=None, shared_w13=None, shared_w2=None, w13_scale=None, w2_scale=None,
              shared_w13_scale=None, shared_w2_scale=None):
    """The MoE layer in one call: gate -> route -> experts (contiguous) -> weighted combine
    + shared experts. x BF16 [T, dim], gate_weight BF16 [E, dim]; shared weights [2 * I_s, dim] and
    [dim, I_s] in the routed experts' dtype. Returns FP32 [T, dim]."""
    _arr("x", x, (BF16,), 2)
    _arr("gate_weight", gate_weight, (BF16,), 2)
    if gate_bias is not None:
        _arr("gate_bias", gate_bias, (F32,), 1)
    w = _expert_weights(w13, w2, w13_scale, w2_scale)
    shared = _shared_expert(w13.dtype, shared_w13, shared_w2, shared_w13_scale, shared_w2_scale)
    args = _gate_args(n_group, topk_group, top_k, route_scale, score_func)
    return _K.moe_layer(_bits(x), _moe_binding_args(gate_weight, gate_bias, w, shared, args))


def _moe_binding_args(gate_weight, gate_bias, routed, shared, gate) -> dict:
    """The one dict the MoE bindings take: checked arrays (as bits) and the gate's settings."""
    out = dict(zip(("w13", "w2", "w13_scale", "w2_scale", "fp8"), routed))
    out.update(zip(("shared_w13", "shared_w2", "shared_w13_scale", "shared_w2_scale"), shared))
    out["gate"] = gate
    out.update(gate_weight=_bits(gate_weight), gate_bias=gate_bias)
    return out
