"""Plain numpy versions of every kernel, written for clarity: the oracle of the kernel tests.

They follow DeepSeek-V3's reference inference code (model.py, kernel.py): FP32 arithmetic, BF16
where that code keeps BF16 activations (the SiLU-and-multiply output that feeds w2, dequantised
weights), FP8 e4m3 with 1x128 activation and 128x128 weight scales.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn
FP8_MAX = 448.0


def f32(a):
    return np.asarray(a).astype(np.float32)


def block_expand(scale, rows, cols, block=128):
    """A [ceil(rows/block), ceil(cols/block)] scale grid spread over every element."""
    return np.repeat(np.repeat(scale, block, axis=0), block, axis=1)[:rows, :cols]


def weight_dequant(w, scale):
    return (f32(w) * block_expand(f32(scale), *w.shape)).astype(BF16)


def act_quant(x, group=128):
    x = f32(x)
    T, D = x.shape
    groups = -(-D // group)
    q = np.zeros((T, D), np.float32)
    s = np.zeros((T, groups), np.float32)
    for g in range(groups):
        part = x[:, g * group:(g + 1) * group]
        s[:, g] = np.abs(part).max(axis=1) / FP8_MAX
        safe = np.where(s[:, g] > 0, s[:, g], 1)[:, None]
        q[:, g * group:(g + 1) * group] = np.where(s[:, g:g + 1] > 0, part / safe, 0)
    return np.clip(q, -FP8_MAX, FP8_MAX).astype(FP8), s


def linear(x, w, w_scale=None, block=128):
    """y = x w^T in FP32. FP8 weights with 128x128 block scales follow DeepGEMM's definition: the
    e4m3 codes are exact in BF16 and are multiplied unscaled, and each block's scale multiplies the
    partial sum over its 128-deep K block (computed here in float64, then summed over the blocks).
    Kernels that dequantise a block to BF16 first (bf16(code x scale), as DeepSeek-V3's
    weight_dequant) differ from this by that rounding: at most one BF16 unit roundoff of each
    product, which the tests' tolerances allow."""
    if w_scale is None:
        return f32(x) @ f32(w).T
    xd, wd, scale = np.asarray(x).astype(np.float64), np.asarray(w).astype(np.float64), f32(w_scale)
    N, K = wd.shape
    y = np.zeros((xd.shape[0], N))
    for kb in range(-(-K // block)):
        ks = slice(kb * block, (kb + 1) * block)
        per_row = np.repeat(scale[:, kb], block)[:N].astype(np.float64)
        y += (xd[:, ks] @ wd[:, ks].T) * per_row
    return y.astype(np.float32)


def rmsnorm(x, weight, eps=1e-6):
    xf = f32(x)
    out = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + eps) * f32(weight)
    return out.astype(np.asarray(x).dtype)


def rope_frequencies(dim=64, base=10000.0, factor=40.0, original_seq_len=4096, max_seq_len=16384, beta_fast=32.0,
                     beta_slow=1.0):
    freqs = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if max_seq_len > original_seq_len:
        def correction_dim(rotations):
            return dim * math.log(original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        keep = 1 - ramp
        freqs = freqs / factor * (1 - keep) + freqs * keep
    return freqs.astype(np.float32)


def apply_rope(x, positions, freqs):
    xf = f32(x)
    shape = xf.shape
    pairs = xf.reshape(*shape[:-1], -1, 2)
    z = pairs[..., 0] + 1j * pairs[..., 1]
    angle = np.outer(np.asarray(positions, np.float32), freqs).astype(np.float32)
    rot = np.exp(1j * angle.astype(np.float64))
    if xf.ndim == 3:
        rot = rot[:, None, :]
    z = z * rot
    out = np.stack([z.real, z.imag], axis=-1).reshape(shape).astype(np.float32)
    return out.astype(np.asarray(x).dtype)


def embedding(table, ids):
    return np.asarray(table)[np.asarray(ids)]


def silu_mul(gate_up):
    g, u = np.split(f32(gate_up), 2, axis=-1)
    return (g / (1 + np.exp(-g)) * u).astype(BF16)


def moe_gate(x, weight, bias=None, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid"):
    logits = f32(x) @ f32(weight).T
    if score_func == "sigmoid":
        scores = 1 / (1 + np.exp(-logits))
    else:
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores = e / e.sum(axis=1, keepdims=True)
    select = scores + (f32(bias) if bias is not None else 0)
    T, E = scores.shape
    if n_group > 1:
        grouped = select.reshape(T, n_group, E // n_group)
        if bias is None:
            group_scores = grouped.max(axis=2)
        else:
            group_scores = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)
        keep = np.argsort(-group_scores, axis=1, kind="stable")[:, :topk_group]
        mask = np.ones((T, n_group), bool)
        np.put_along_axis(mask, keep, False, axis=1)
        select = np.where(np.repeat(mask, E // n_group, axis=1), -np.inf, select)
    ids = np.argsort(-select, axis=1, kind="stable")[:, :top_k].astype(np.int32)
    weights = np.take_along_axis(scores, ids, axis=1)
    if score_func == "sigmoid":
        weights = weights / weights.sum(axis=1, keepdims=True)
    return (weights * route_scale).astype(np.float32), ids


def moe_route(ids, n_experts):
    ids = np.asarray(ids)
    T, K = ids.shape
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")  # by expert, then token, then slot
    offsets = np.zeros(n_experts + 1, np.int64)
    offsets[1:] = np.cumsum(np.bincount(flat, minlength=n_experts))
    position = np.empty(T * K, np.int32)
    position[order] = np.arange(T * K)
    return offsets, position.reshape(T, K), (order // K).astype(np.int32)


def moe_permute(x, source):
    return np.asarray(x)[np.asarray(source)]


def moe_unpermute(y_perm, position, weights):
    return np.einsum("tk,tkd->td", f32(weights), f32(y_perm)[np.asarray(position)]).astype(np.float32)


def expert_ffn(x, w13, w2, w13_scale=None, w2_scale=None):
    gu = linear(x, w13, w13_scale)
    h = silu_mul(gu)
    return linear(h, w2, w2_scale)


def experts_contiguous(x, offsets, w13, w2, w13_scale=None, w2_scale=None):
    y = np.zeros((x.shape[0], x.shape[1]), np.float32)
    for e in range(w13.shape[0]):
        a, b = offsets[e], offsets[e + 1]
        if b > a:
            y[a:b] = expert_ffn(x[a:b], w13[e], w2[e], None if w13_scale is None else w13_scale[e],
                                None if w2_scale is None else w2_scale[e])
    return y


def experts_masked(x, counts, w13, w2, w13_scale=None, w2_scale=None):
    y = np.zeros(x.shape, np.float32)
    for e in range(w13.shape[0]):
        c = counts[e]
        if c:
            y[e, :c] = expert_ffn(x[e, :c], w13[e], w2[e], None if w13_scale is None else w13_scale[e],
                                  None if w2_scale is None else w2_scale[e])
    return y


def moe_layer(x, gate_weight, w13, w2, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid",
              gate_bias=None, shared_w13=None, shared_w2=None, w13_scale=None, w2_scale=None,
              shared_w13_scale=None, shared_w2_scale=None):
    weights, ids = moe_gate(x, gate_weight, gate_bias, n_group=n_group, topk_group=topk_group, top_k=top_k,
                            route_scale=route_scale, score_func=score_func)
    y = np.zeros(x.shape, np.float32)
    for t in range(x.shape[0]):
        for k in range(top_k):
            e = ids[t, k]
            y[t] += weights[t, k] * expert_ffn(x[t:t + 1], w13[e], w2[e], None if w13_scale is None else w13_scale[e],
                                               None if w2_scale is None else w2_scale[e])[0]
    if shared_w13 is not None:
        y += expert_ffn(x, shared_w13, shared_w2, shared_w13_scale, shared_w2_scale)
    return y


def mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale, num_splits=1,
               latent_scale=None):
    """Absorbed MLA decode, one query token at a time over the gathered cache (num_splits does not
    change the result). An FP8 latent is dequantised to BF16 first (value x its 128-group scale)."""
    if latent_scale is not None:
        latent_cache = (f32(latent_cache) * np.repeat(latent_scale, 128, axis=2)[..., :latent_cache.shape[2]]).astype(BF16)
    B, Q, H, L = q_nope.shape
    BS = latent_cache.shape[1]
    out = np.zeros((B, Q, H, L), np.float32)
    lse = np.zeros((B, Q, H), np.float32)
    for b in range(B):
        n = int(seqlens[b])
        blocks = block_table[b, :-(-n // BS)]
        lat = f32(latent_cache[blocks].reshape(-1, L)[:n])
        rop = f32(rope_cache[blocks].reshape(-1, rope_cache.shape[2])[:n])
        for i in range(Q):
            seen = n - Q + i + 1
            s = (f32(q_nope[b, i]) @ lat[:seen].T + f32(q_rope[b, i]) @ rop[:seen].T) * softmax_scale
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l_sum = p.sum(axis=1, keepdims=True)
            out[b, i] = (p @ lat[:seen]) / l_sum
            lse[b, i] = (m + np.log(l_sum))[:, 0]
    return out, lse


def bf16(a):
    return f32(np.asarray(a, np.float32).astype(BF16))


def mla_forward(x, w, *, heads, freqs, softmax_scale, nope=128, rope=64, v=128, eps=1e-6):
    """MLA over a whole sequence x [T, dim], causal, following DeepSeek-V3's model.py in its
    non-absorbed form: BF16 activations after every projection and norm, FP32 attention."""
    T = x.shape[0]
    pos = np.arange(T, dtype=np.int32)
    qa = bf16(rmsnorm(bf16(f32(x) @ f32(w["wq_a"]).T), w["q_norm"], eps))
    q = bf16(qa @ f32(w["wq_b"]).T).reshape(T, heads, nope + rope)
    q[..., nope:] = bf16(apply_rope(q[..., nope:], pos, freqs))
    kv = bf16(f32(x) @ f32(w["wkv_a"]).T)
    kv_lora = kv.shape[1] - rope
    latent = bf16(rmsnorm(kv[:, :kv_lora], w["kv_norm"], eps))
    k_pe = bf16(apply_rope(kv[:, kv_lora:], pos, freqs))
    wkv_b = f32(w["wkv_b"]).reshape(heads, nope + v, kv_lora)
    k_nope = bf16(np.einsum("tc,hdc->thd", latent, wkv_b[:, :nope]))
    values = bf16(np.einsum("tc,hdc->thd", latent, wkv_b[:, nope:]))
    keys = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], (T, heads, rope))], axis=-1)
    scores = np.einsum("thd,shd->hts", q, keys) * softmax_scale
    scores = np.where(np.tril(np.ones((T, T), bool))[None], scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = bf16(np.einsum("hts,shd->thd", p, values)).reshape(T, heads * v)
    return o @ f32(w["wo"]).T
