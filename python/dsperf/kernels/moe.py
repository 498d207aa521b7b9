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


class PackedExperts:
    """Expert weights prepared once for this CPU's kernels (see PackedWeights): w13 [E, 2I, dim] and w2
    [E, dim, I], BF16 or FP8 with their block scales, checked once and, where the AMX kernels are
    usable, also packed into tile order per expert. Pass it as the ``w13`` of experts_contiguous,
    experts_masked or moe_layer (and a one-expert PackedExperts of the shared experts'
    ``[None]``-stacked weights as moe_layer's ``shared_w13``), with no w2 or scales beside it. The
    arrays are held, not copied: do not modify them afterwards."""

    def __init__(self, w13, w2, w13_scale=None, w2_scale=None):
        self.w13, self.w2, self.w13_scale, self.w2_scale = w13, w2, w13_scale, w2_scale
        self._args = _expert_weights(w13, w2, w13_scale, w2_scale)
        self._tiles = _K.pack_experts(*self._args)

    @property
    def n_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def nbytes_packed(self) -> int:
        return self._tiles.nbytes

    def __repr__(self):
        return (f"PackedExperts({self.n_experts} x {self.w13.dtype} {tuple(self.w13.shape[1:])} + "
                f"{tuple(self.w2.shape[1:])}, "
                f"{'tiles ' + str(self.nbytes_packed) + ' bytes' if self.nbytes_packed else 'no tiles: ' + amx_status()})")


def _experts(w13, w2, w13_scale, w2_scale, where=""):
    """(checked binding arguments, tiles or None) of expert weights given as arrays or as PackedExperts."""
    if isinstance(w13, PackedExperts):
        if w2 is not None or w13_scale is not None or w2_scale is not None:
            raise ValueError(f"{where}w13 is a PackedExperts: its w2 and scales are its own, pass none beside it")
        return w13._args, w13._tiles
    if w2 is None:
        raise ValueError(f"{where}w2 is required (or pass a PackedExperts as {where}w13)")
    return _expert_weights(w13, w2, w13_scale, w2_scale), None


def experts_contiguous(x, offsets, w13, w2=None, w13_scale=None, w2_scale=None):
    """Grouped expert FFN, contiguous layout: x BF16 [rows, dim] sorted by expert, expert e owning
    rows offsets[e]:offsets[e+1]; w13 [E, 2I, dim] (w1 then w3), w2 [E, dim, I], BF16 or FP8 with
    block scales, or w13 a PackedExperts. Returns FP32 [rows, dim]."""
    if _on_gpu(x, offsets, w13, w2, w13_scale, w2_scale):
        return _cuda().experts_contiguous(x, offsets, w13, w2, w13_scale, w2_scale)
    _arr("x", x, (BF16,), 2)
    offsets = _arr("offsets", offsets, (np.dtype(np.int64), np.dtype(np.int32)), 1).astype(np.int64, copy=False)
    w, tiles = _experts(w13, w2, w13_scale, w2_scale)
    _checks.expert_offsets(offsets, w[0].shape[0], x.shape[0])
    return _K.experts_contiguous(_bits(x), offsets, *w, tiles)


def experts_masked(x, counts, w13, w2=None, w13_scale=None, w2_scale=None):
    """Grouped expert FFN, masked layout: x BF16 [E, capacity, dim] with counts[e] valid rows per
    expert (weights as experts_contiguous takes them). Returns FP32 [E, capacity, dim], zero past
    each count."""
    if _on_gpu(x, counts, w13, w2, w13_scale, w2_scale):
        return _cuda().experts_masked(x, counts, w13, w2, w13_scale, w2_scale)
    _arr("x", x, (BF16,), 3)
    counts = _ids("counts", counts, 1)
    w, tiles = _experts(w13, w2, w13_scale, w2_scale)
    E, _, D = w[0].shape
    if x.shape[0] != E or x.shape[2] != D:
        raise ValueError(f"x must be [experts={E}, capacity, dim={D}], got {x.shape}")
    _checks.expert_counts(counts, x.shape[0], x.shape[1])
    return _K.experts_masked(_bits(x), counts, *w, tiles)


def moe_layer(x, gate_weight, w13, w2=None, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid",
              gate_bias=None, shared_w13=None, shared_w2=None, w13_scale=None, w2_scale=None,
              shared_w13_scale=None, shared_w2_scale=None):
    """The MoE layer in one call: gate -> route -> experts (contiguous) -> weighted combine
    + shared experts. x BF16 [T, dim], gate_weight BF16 [E, dim]; shared weights [2 * I_s, dim] and
    [dim, I_s] in the routed experts' dtype (or shared_w13 a one-expert PackedExperts; w13 may be a
    PackedExperts too). Returns FP32 [T, dim]."""
    _arr("x", x, (BF16,), 2)
    _arr("gate_weight", gate_weight, (BF16,), 2)
    if gate_bias is not None:
        _arr("gate_bias", gate_bias, (F32,), 1)
    w, tiles = _experts(w13, w2, w13_scale, w2_scale)
    dtype = (w13.w13 if isinstance(w13, PackedExperts) else w13).dtype
    if isinstance(shared_w13, PackedExperts):
        shared, shared_tiles = _experts(shared_w13, shared_w2, shared_w13_scale, shared_w2_scale, where="shared_")
        if shared_w13.n_experts != 1:
            raise ValueError(f"shared_w13 as a PackedExperts must hold one expert, got {shared_w13.n_experts}")
        if shared_w13.w13.dtype != dtype:
            raise TypeError(f"the shared experts must share the routed experts' dtype {dtype}, "
                            f"got {shared_w13.w13.dtype}")
        shared = shared[:4]
    else:
        shared = _shared_expert(dtype, shared_w13, shared_w2, shared_w13_scale, shared_w2_scale)
        shared_tiles = None
    args = _gate_args(n_group, topk_group, top_k, route_scale, score_func)
    return _K.moe_layer(_bits(x), _moe_binding_args(gate_weight, gate_bias, w, shared, args, tiles, shared_tiles))


def _moe_binding_args(gate_weight, gate_bias, routed, shared, gate, tiles=None, shared_tiles=None) -> dict:
    """The one dict the MoE bindings take: checked arrays (as bits), the gate's settings and the
    experts' tiles where packed (PackedExperts)."""
    out = dict(zip(("w13", "w2", "w13_scale", "w2_scale", "fp8"), routed))
    out.update(tiles=tiles, shared_tiles=shared_tiles)
    out.update(zip(("shared_w13", "shared_w2", "shared_w13_scale", "shared_w2_scale"), shared))
    out["gate"] = gate
    out.update(gate_weight=_bits(gate_weight), gate_bias=gate_bias)
    return out
