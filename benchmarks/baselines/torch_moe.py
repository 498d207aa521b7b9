"""PyTorch on the CPU as DeepSeek-V3's reference model code (inference/model.py) writes the MoE
layer: per-expert BF16 nn.Linear products in a Python loop over the experts that received tokens.

    pip install torch      # from PyPI (the default Linux wheel also carries CUDA libraries)

`load()` returns the torch module or raises RuntimeError saying what is missing. Weights are shared
with the numpy arrays (no copies): BF16 bits viewed as torch.bfloat16."""
from __future__ import annotations

import numpy as np


def load():
    try:
        import torch
    except Exception as e:  # ImportError, or a missing shared library of the wheel
        raise RuntimeError(f"PyTorch is not importable ({type(e).__name__}: {e}); install it with "
                           f"`pip install torch`") from None
    return torch


def as_torch(torch, a):
    """A BF16 (ml_dtypes) or FP32 numpy array as a torch tensor sharing its memory."""
    if a.dtype == np.float32:
        return torch.from_numpy(a)
    return torch.from_numpy(a.view(np.uint16).view(np.int16)).view(torch.bfloat16)


def expert(torch, x, w1, w3, w2):
    """DeepSeek-V3's Expert.forward: w2(silu(w1(x)) * w3(x)), BF16 in and out."""
    F = torch.nn.functional
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


def expert_ffns(torch, x, offsets, w13, w2):
    """experts_contiguous as a loop over experts: rows offsets[e]:offsets[e+1] through expert e."""
    inter = w13.shape[1] // 2
    out = torch.empty_like(x)
    for e in range(w13.shape[0]):
        a, b = int(offsets[e]), int(offsets[e + 1])
        if b > a:
            out[a:b] = expert(torch, x[a:b], w13[e, :inter], w13[e, inter:], w2[e])
    return out


def moe_layer(torch, x, gate_w, gate_bias, w13, w2, shared_w13, shared_w2, *, n_group, topk_group, top_k,
              route_scale):
    """DeepSeek-V3's Gate + MoE.forward (sigmoid scores, correction bias for selection, group
    scores = sum of the best two, top-k, weights normalised and scaled), then the loop over the
    experts that received tokens, plus the shared expert."""
    F = torch.nn.functional
    n_experts, inter = w13.shape[0], w13.shape[1] // 2
    scores = F.linear(x, gate_w).float().sigmoid()
    original = scores
    scores = scores + gate_bias
    groups = scores.view(x.size(0), n_group, -1)
    group_scores = groups.topk(2, dim=-1)[0].sum(dim=-1)
    keep = group_scores.topk(topk_group, dim=-1)[1]
    mask = torch.ones(x.size(0), n_group, dtype=torch.bool).scatter_(1, keep, False)
    scores = groups.masked_fill(mask.unsqueeze(-1), float("-inf")).flatten(1)
    indices = scores.topk(top_k, dim=-1)[1]
    weights = original.gather(1, indices)
    weights = (weights / weights.sum(dim=-1, keepdim=True) * route_scale).type_as(x)
    y = torch.zeros_like(x)
    counts = torch.bincount(indices.flatten(), minlength=n_experts).tolist()
    for i in range(n_experts):
        if counts[i] == 0:
            continue
        idx, top = torch.where(indices == i)
        y[idx] += expert(torch, x[idx], w13[i, :inter], w13[i, inter:], w2[i]) * weights[idx, top, None]
    s_inter = shared_w13.shape[0] // 2
    return y + expert(torch, x, shared_w13[:s_inter], shared_w13[s_inter:], shared_w2)
