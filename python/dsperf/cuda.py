"""CUDA kernels, first slice: RMSNorm, SiLU-and-multiply, DeepSeek-V3 gating, permute and
un-permute on the GPU, with the semantics of their `dsperf.kernels` twins.

They take and return numpy arrays (copied to the device and back, synchronously); device-resident
arrays come next. Arguments are checked on the host first, the same way as the CPU kernels, so a
bad call raises ValueError/TypeError naming the argument on any machine; a good call on a machine
without a GPU raises RuntimeError saying why (`available()` tells beforehand).
"""
from __future__ import annotations

import numpy as np

from . import _C
from . import kernels as K

_G = _C.cuda


def available() -> tuple[bool, str]:
    """(True, "") where a CUDA kernel can run, else (False, why)."""
    why = _G.why_unavailable()
    return (not why, why)


def device_count() -> int:
    return int(_G.device_count())


def device_name(device: int = 0) -> str:
    return _G.device_name(K._int("device", device, 0))


def rmsnorm(x, weight, eps=1e-6):
    """x / rms(x) * weight over the last dimension: x FP32 [rows, dim], weight FP32 [dim]."""
    K._arr("x", x, (K.F32,), 2)
    K._arr("weight", weight, (K.F32,), 1)
    if weight.shape[0] != x.shape[1]:
        raise ValueError(f"weight must have x's last dimension {x.shape[1]}, got {weight.shape[0]}")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    return _G.rmsnorm(x, weight, float(eps))


def silu_mul(gate_up):
    """silu(gate) * up for gate_up FP32 [rows, 2 * inter] -> BF16 [rows, inter]."""
    K._arr("gate_up", gate_up, (K.F32,), 2)
    if gate_up.shape[1] == 0 or gate_up.shape[1] % 2:
        raise ValueError(f"gate_up must have an even, non-zero width, got {gate_up.shape[1]}")
    return _G.silu_mul(gate_up).view(K.BF16)


def moe_gate(logits, bias=None, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid"):
    """DeepSeek-V3 routing of FP32 logits [T, E] (x @ weight.T computed by the caller):
    (weights FP32 [T, top_k], ids int32 [T, top_k]), as dsperf.kernels.moe_gate."""
    K._arr("logits", logits, (K.F32,), 2)
    if bias is not None:
        K._arr("bias", bias, (K.F32,), 1)
        if bias.shape[0] != logits.shape[1]:
            raise ValueError(f"bias must have {logits.shape[1]} entries (one per expert), got {bias.shape[0]}")
    args = K._gate_args(n_group, topk_group, top_k, route_scale, score_func)
    # The CPU's checks of the configuration against the expert count, before any GPU work.
    K._K.moe_gate(np.zeros((0, logits.shape[1]), np.float32), bias, *args)
    n_group, topk_group, top_k, route_scale, score = args
    return _G.moe_gate(logits, bias, n_group, topk_group, top_k, route_scale, score_func == "sigmoid")


def moe_permute(x, source):
    """x[source]: BF16 rows in expert order (source from dsperf.kernels.moe_route)."""
    K._arr("x", x, (K.BF16,), 2)
    source = K._ids("source", source, 1)
    if source.size and (source.min() < 0 or source.max() >= x.shape[0]):
        raise ValueError(f"source must lie in [0, {x.shape[0]}), got values in [{source.min()}, {source.max()}]")
    return _G.moe_permute(K._bits(x), source).view(K.BF16)


def moe_unpermute(y_perm, position, weights):
    """y[t] = sum_k weights[t, k] * y_perm[position[t, k]] (FP32), as dsperf.kernels.moe_unpermute."""
    K._arr("y_perm", y_perm, (K.F32,), 2)
    position = K._ids("position", position, 2)
    K._arr("weights", weights, (K.F32,), 2)
    if weights.shape != position.shape:
        raise ValueError(f"weights must match position's shape {position.shape}, got {weights.shape}")
    if position.size and (position.min() < 0 or position.max() >= y_perm.shape[0]):
        raise ValueError(f"position must lie in [0, {y_perm.shape[0]}), got values in "
                         f"[{position.min()}, {position.max()}]")
    return _G.moe_unpermute(y_perm, position, weights)
