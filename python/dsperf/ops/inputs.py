"""The inputs the harness gives a kernel call: random BF16/FP8 data from a shared pool (a sweep
generates each weight tensor once), and the DeepSeek-V3-shaped weights and caches built from it."""
from __future__ import annotations

import math

import numpy as np

from .. import kernels as K
from .family import KV_LORA, NOPE, Q_LORA, ROPE, V


def random_bf16(rng, shape, scale_exp=118):
    """BF16 values of magnitude 2^(scale_exp-127) .. 2^(scale_exp-119), made from random bits: fast
    for gigabytes, no NaN or Inf."""
    sign = rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
    exp = rng.integers(scale_exp, scale_exp + 8, size=shape, dtype=np.uint16) << 7
    return (sign | exp | rng.integers(0, 128, size=shape, dtype=np.uint16)).view(K.BF16)


def random_fp8(rng, shape):
    """FP8 e4m3 bit patterns, every code but NaN."""
    bits = rng.integers(0, 256, size=shape, dtype=np.uint8)
    bits[(bits & 0x7F) == 0x7F] = 0x7E
    return bits.view(K.FP8)


class Pool:
    """Random arrays by (name, shape, dtype), generated once and reused; a request for a smaller
    leading dimension gets a view of the bigger array (so 2 of 8 experts costs nothing new)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self._arrays: dict[tuple, object] = {}

    def _make(self, shape, kind):
        if kind == "bf16":
            return random_bf16(self.rng, shape)
        if kind == "fp8":
            return random_fp8(self.rng, shape)
        if kind == "scale":
            return self.rng.uniform(1e-4, 2e-3, size=shape).astype(np.float32)
        if kind == "f32":
            return self.rng.standard_normal(shape, dtype=np.float32)
        raise ValueError(kind)

    def get(self, name, shape, kind="bf16"):
        shape = tuple(int(s) for s in shape)
        key = (name, shape[1:], kind)
        have = self._arrays.get(key)
        if have is None or have.shape[0] < shape[0]:
            have = self._arrays[key] = self._make(shape, kind)
        return have[: shape[0]]

    def weight(self, name, shape, dtype):
        """A weight [.., n, k] in BF16, or FP8 with its 128x128 block scales: (w, scale or None)."""
        if dtype == "bf16":
            return self.get(name, shape, "bf16"), None
        scale_shape = tuple(shape[:-2]) + (math.ceil(shape[-2] / 128), math.ceil(shape[-1] / 128))
        return self.get(name, shape, "fp8"), self.get(name + ".scale", scale_shape, "scale")

    def memo(self, key, make):
        """A derived object (absorbed weights) made once per key."""
        if key not in self._arrays:
            self._arrays[key] = make()
        return self._arrays[key]


def even_split(rows, parts):
    """rows spread as evenly as possible over parts (the first ones get the remainder)."""
    base, extra = divmod(rows, parts)
    return np.array([base + (i < extra) for i in range(parts)], np.int64)


def mla_weights(pool, heads, dim):
    """One MLA layer's weights for `heads` heads, with the absorbed products (all five variants)."""
    def make():
        w = {"wq_a": pool.get("wq_a", (Q_LORA, dim)), "q_norm": np.ones(Q_LORA, np.float32),
             "wq_b": pool.get(f"wq_b{heads}", (heads * (NOPE + ROPE), Q_LORA)),
             "wkv_a": pool.get("wkv_a", (KV_LORA + ROPE, dim)), "kv_norm": np.ones(KV_LORA, np.float32),
             "wkv_b": pool.get(f"wkv_b{heads}", (heads * (NOPE + V), KV_LORA)),
             "wo": pool.get(f"wo{heads}", (dim, heads * V))}
        return K.mla_absorb_weights(w, heads=heads, nope=NOPE, rope=ROPE, v=V)

    return pool.memo(("absorbed", heads, dim), make)


def mla_cache(pool, variant, prefix, tokens, heads):
    """A contiguous MLA cache holding `prefix` random tokens, room for `tokens` more."""
    cache = K.MlaCache(prefix + tokens, KV_LORA, ROPE, decompressed=variant == "CD", heads=heads, nope=NOPE, v=V)
    cache.latent[:] = pool.get("latent", cache.latent.shape)
    cache.k_pe[:] = pool.get("k_pe", cache.k_pe.shape)
    if cache.k_full is not None:
        cache.k_full[:] = pool.get(f"k_full{heads}", cache.k_full.shape)
        cache.v_full[:] = pool.get(f"v_full{heads}", cache.v_full.shape)
    return cache


def moe_weights(pool, experts, dim, inter, shared_inter, dtype):
    """A MoE layer's gate, routed experts (merged gate_up w13, down w2) and shared expert."""
    w13, s13 = pool.weight("w13", (experts, 2 * inter, dim), dtype)
    w2, s2 = pool.weight("w2", (experts, dim, inter), dtype)
    out = {"gate_weight": pool.get("gate_w", (experts, dim)), "gate_bias": np.zeros(experts, np.float32),
           "w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}
    if shared_inter:
        sw13, ss13 = pool.weight("shared_w13", (2 * shared_inter, dim), dtype)
        sw2, ss2 = pool.weight("shared_w2", (dim, shared_inter), dtype)
        out.update(shared_w13=sw13, shared_w2=sw2, shared_w13_scale=ss13, shared_w2_scale=ss2)
    return out


def gate_groups(experts, top_k):
    """DeepSeek-V3's grouping where it fits (8 groups, keep 4), else one group."""
    groups = 8 if experts % 8 == 0 and experts >= 16 and experts // 8 * 4 >= top_k else 1
    return dict(n_group=groups, topk_group=min(4, groups), top_k=top_k, route_scale=2.5)


def active_experts(moe, x, experts, top_k):
    """How many experts the gate's routing of x reaches."""
    _, ids = K.moe_gate(x, moe["gate_weight"], moe["gate_bias"], **gate_groups(experts, top_k))
    return int(np.unique(ids).size)
