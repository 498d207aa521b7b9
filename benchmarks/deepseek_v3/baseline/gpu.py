"""GPU columns of seed 000's baselines: the modules composed from dsperf.cuda kernels on GPU arrays
(weights uploaded once, inputs on the GPU, outputs left there), timed where a GPU is present.

`moe_layer` follows dsperf.kernels.moe_layer's semantics with the kernels dsperf.cuda has: the gate
logits through cuBLAS, DeepSeek-V3 routing on the GPU, the grouping of (token, expert) pairs on
the host (ids copied back, dsperf.kernels.moe_route, the layout copied up: the synchronisation a
naive engine pays), permute, the grouped expert FFN and the weighted un-permute. The shared expert
rides along as one more expert that every token takes with weight 1 and last in its slot order,
so the un-permute adds it exactly where moe_layer does.
"""
from __future__ import annotations

import numpy as np

from dsperf import cuda as C
from dsperf import kernels as K


def status() -> tuple[bool, str]:
    """(True, "") where the GPU columns can run, else (False, why)."""
    return C.available()


def up(a):
    """A numpy array on the GPU (a DeviceArray)."""
    return C.DeviceArray.from_numpy(np.ascontiguousarray(a))


class MoeOnGpu:
    """The MoE layer's weights on the GPU: routed experts w13 [E, 2I, D] / w2 [E, D, I] (BF16, or FP8
    with 128x128 scales) and the shared expert of the same width, stacked as expert E."""

    def __init__(self, gate, w13, w2, shared_w13, shared_w2, *, n_group, topk_group, top_k, route_scale,
                 w13_scale=None, w2_scale=None, shared_w13_scale=None, shared_w2_scale=None):
        if shared_w13.shape != w13.shape[1:] or shared_w2.shape != w2.shape[1:]:
            raise ValueError("the shared expert must have the routed experts' width to ride along as one of them")
        self.experts = w13.shape[0]
        self.gate = up(gate[None])                                   # [1, E, D] for the batched cuBLAS call
        self.w13 = up(np.concatenate([w13, shared_w13[None]]))
        self.w2 = up(np.concatenate([w2, shared_w2[None]]))
        fp8 = w13_scale is not None
        self.s13 = up(np.concatenate([w13_scale, shared_w13_scale[None]])) if fp8 else None
        self.s2 = up(np.concatenate([w2_scale, shared_w2_scale[None]])) if fp8 else None
        self.routing = dict(n_group=n_group, topk_group=topk_group, top_k=top_k, route_scale=route_scale)

    def __call__(self, x):
        """FP32 [T, D] on the GPU for x BF16 [T, D] on the GPU."""
        T, D = x.shape
        E = self.experts
        logits = C.cublas_gemm_bf16(x.reshape(1, T, D), self.gate).reshape(T, E)
        weights, ids = C.moe_gate(logits, **self.routing)
        # Every token also takes the shared expert (index E), weight 1, in the last slot.
        ids_all = np.concatenate([ids.numpy(), np.full((T, 1), E, np.int32)], axis=1)
        w_all = np.concatenate([weights.numpy(), np.ones((T, 1), np.float32)], axis=1)
        offsets, position, source = K.moe_route(ids_all, E + 1)
        xp = C.moe_permute(x, up(source))
        y = C.experts_contiguous(xp, up(offsets), self.w13, self.w2, self.s13, self.s2, validate=False)
        return C.moe_unpermute(y, up(position), up(w_all))


def dense_mlp(x, w13, w2, w13_scale=None, w2_scale=None):
    """The dense MLP as one expert of the grouped FFN: FP32 [T, D] on the GPU."""
    offsets = up(np.array([0, x.shape[0]], np.int64))
    return C.experts_contiguous(x, offsets, w13, w2, w13_scale, w2_scale, validate=False)
