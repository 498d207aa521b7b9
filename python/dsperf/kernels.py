"""The CPU kernels on numpy arrays (BF16 and FP8 as ml_dtypes' bfloat16 and float8_e4m3fn).

Every function checks its arrays (type, dtype, shape, C-contiguity) and raises TypeError or
ValueError naming the argument; inputs are never modified; outputs are new arrays; the GIL is
released while the C++ kernels run. ``isa()`` says which micro-kernels this CPU uses
("avx512_bf16" or "portable"; set DSPERF_ISA=portable to force the portable ones, or
DSPERF_ISA=avx512_bf16 where a virtual machine's CPUID hides BF16 but the CPU runs it;
``cpu_features()["why"]`` says which rule chose).

The same calls run on the GPU when their arrays live there (dsperf.cuda DeviceArrays, or PyTorch /
CuPy tensors through __cuda_array_interface__ or DLPack): rmsnorm, apply_rope, silu_mul, act_quant,
moe_gate, moe_permute, moe_unpermute, experts_contiguous, experts_masked and mla_decode hand such
calls to their dsperf.cuda twins, whose results stay on the GPU; host and GPU arrays mixed in one
call raise TypeError naming the argument.
"""
from __future__ import annotations

import math

import numpy as np

from . import _C

from ._arrays import BF16, FP8

_K = _C.kernels
# The kernel path is chosen once, here on the importing thread: the ISA check (DSPERF_ISA) and the
# dot-product-or-FMA probe (DSPERF_GEMM) would otherwise first run inside a kernel's OpenMP region,
# where a bad setting cannot raise its ValueError and the other threads would skew the timing. The
# AMX verdict too: its self-check runs one tile product in a child process, then the driver here.
_K.gemm_products()
_K.amx_status()  # DSPERF_AMX other than 0 or 1 raises its ValueError here, at import
F32 = np.dtype(np.float32)


def isa() -> str:
    return _K.isa()


def amx_status() -> str:
    """"usable" where the BF16 GEMMs of 16 rows and more run on AMX tiles (the CPU has them, Linux
    granted the tile permission, DSPERF_AMX is not 0 and the hardware agreed with the emulated
    tiles at load time), else why not."""
    return _K.amx_status()


def cpu_features() -> dict:
    return dict(_K.cpu_features())


# ---- placement: numpy runs here, GPU arrays run on the GPU ---------------------------------------
def _on_gpu(*arrays) -> bool:
    """True where any argument lives on a GPU (a dsperf.cuda DeviceArray, or an object exposing
    __cuda_array_interface__ or DLPack on a CUDA device): the call then goes to its dsperf.cuda
    twin, which refuses host and GPU arrays mixed in one call (TypeError naming the argument)."""
    for a in arrays:
        if a is None or isinstance(a, np.ndarray):
            continue
        from .cuda.arrays import is_device_array_like
        if is_device_array_like(a):
            return True
    return False


def _cuda():
    from . import cuda
    return cuda


# ---- argument checks (shared with dsperf.cuda: dsperf._arrays) -------------------------------------
from ._arrays import (arr as _arr, bits as _bits, boolean as _bool, cache_array as _cache_array,  # noqa: E402
                      check_bytes as _check_bytes, gate_args as _gate_args, ids as _ids, integer as _int,
                      real as _real)


def _expert_weights(w13, w2, w13_scale, w2_scale):
    _arr("w13", w13, (BF16, FP8), 3)
    _arr("w2", w2, (BF16, FP8), 3)
    if w13.dtype != w2.dtype:
        raise TypeError(f"w13 and w2 must share a dtype, got {w13.dtype} and {w2.dtype}")
    fp8 = w13.dtype == FP8
    if fp8:
        if w13_scale is None or w2_scale is None:
            raise ValueError("FP8 expert weights need w13_scale and w2_scale (128x128 block scales)")
        _arr("w13_scale", w13_scale, (F32,), 3)
        _arr("w2_scale", w2_scale, (F32,), 3)
    elif w13_scale is not None or w2_scale is not None:
        raise ValueError("w13_scale and w2_scale apply to FP8 weights only")
    if w13.shape[1] % 2:
        raise ValueError(f"w13 must hold 2 * inter rows (w1 then w3), got {w13.shape[1]}")
    E, two_i, D = w13.shape
    if w2.shape != (E, D, two_i // 2):
        raise ValueError(f"w2 must have shape {(E, D, two_i // 2)} to match w13 {w13.shape}, got {w2.shape}")
    return _bits(w13), _bits(w2), w13_scale, w2_scale, fp8


def _shared_expert(dtype, shared_w13, shared_w2, shared_w13_scale, shared_w2_scale, where=""):
    """The shared experts as a one-expert ExpertWeights tuple (w13, w2, s13, s2), or four Nones."""
    if (shared_w13 is None) != (shared_w2 is None):
        raise ValueError(f"{where}shared_w13 and {where}shared_w2 go together")
    if shared_w13 is None:
        return (None, None, None, None)
    _arr(f"{where}shared_w13", shared_w13, (dtype,), 2)
    _arr(f"{where}shared_w2", shared_w2, (dtype,), 2)
    s13 = None if shared_w13_scale is None else _arr(f"{where}shared_w13_scale", shared_w13_scale, (F32,), 2)[None]
    s2 = None if shared_w2_scale is None else _arr(f"{where}shared_w2_scale", shared_w2_scale, (F32,), 2)[None]
    return _expert_weights(shared_w13[None], shared_w2[None], s13, s2)[:4]


# ---- building blocks ---------------------------------------------------------------------------
def linear(x, w, w_scale=None):
    """y = x @ w.T in FP32: x BF16 [M, K]; w BF16 [N, K], or FP8 [N, K] with w_scale FP32
    [ceil(N/128), ceil(K/128)] (dequantised to BF16 block by block, as DeepSeek-V3 does)."""
    _arr("x", x, (BF16,), 2)
    _arr("w", w, (BF16, FP8), 2)
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"w must be [N, K] with K = x.shape[1] = {x.shape[1]}, got {w.shape}")
    if w.dtype == FP8:
        if w_scale is None:
            raise ValueError("FP8 w needs w_scale")
        _arr("w_scale", w_scale, (F32,), 2)
    elif w_scale is not None:
        raise ValueError("w_scale applies to FP8 w only")
    return _K.linear(_bits(x), _bits(w), w_scale, w.dtype == FP8)


def rmsnorm(x, weight, eps=1e-6):
    """x / rms(x) * weight over the last dimension, in FP32; the output has x's dtype."""
    if _on_gpu(x, weight):
        return _cuda().rmsnorm(x, weight, eps)
    _arr("x", x, (F32, BF16), (1, 2, 3))
    _arr("weight", weight, (F32, BF16), 1)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have {x.shape[-1]} entries, got {weight.shape[0]}")
    eps = _real("eps", eps, minimum=0)
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: an empty last dimension leaves it ambiguous
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if x.dtype == F32:
        out = _K.rmsnorm_f32(x2, w, eps)
    else:
        out = _K.rmsnorm_bf16(_bits(x2), w, eps).view(BF16)
    return out.reshape(x.shape)


def rope_frequencies(dim=64, base=10000.0, factor=40.0, original_seq_len=4096, max_seq_len=16384, beta_fast=32.0,
                     beta_slow=1.0):
    """DeepSeek-V3's rotary frequencies with YaRN scaling (dim / 2 values, FP32)."""
    dim = _int("dim", dim, 2)
    _check_bytes("dim", dim // 2 * 4, "the frequencies")
    return _K.rope_frequencies(dim, _real("base", base), _real("factor", factor),
                               _int("original_seq_len", original_seq_len, 1), _int("max_seq_len", max_seq_len, 1),
                               _real("beta_fast", beta_fast), _real("beta_slow", beta_slow))


def rope_mscale(factor=40.0, mscale_all_dim=1.0, original_seq_len=4096, max_seq_len=16384) -> float:
    """YaRN's attention-scale correction: the softmax scale is multiplied by its square."""
    factor, mscale_all_dim = _real("factor", factor, positive=True), _real("mscale_all_dim", mscale_all_dim)
    original_seq_len, max_seq_len = _int("original_seq_len", original_seq_len, 1), _int("max_seq_len", max_seq_len, 1)
    if max_seq_len <= original_seq_len or factor <= 1:
        return 1.0
    return 0.1 * mscale_all_dim * float(np.log(factor)) + 1.0


def apply_rope(x, positions, freqs):
    """Rotary embedding of x [tokens, heads, rope_dim] (or [tokens, rope_dim]) at positions [tokens],
    pairs (2i, 2i+1) turned by positions * freqs[i]. Returns a new array of x's dtype."""
    if _on_gpu(x, positions, freqs):
        return _cuda().apply_rope(x, positions, freqs)
    _arr("x", x, (F32, BF16), (2, 3))
    positions = _ids("positions", positions, 1)
    _arr("freqs", freqs, (F32,), 1)
    x3 = x.reshape(x.shape[0], -1, x.shape[-1]) if x.ndim == 3 else x.reshape(x.shape[0], 1, x.shape[-1])
    if positions.shape[0] != x.shape[0]:
        raise ValueError(f"positions must have one entry per token of x ({x.shape[0]}), got {positions.shape[0]}")
    if x.shape[-1] % 2 or freqs.shape[0] != x.shape[-1] // 2:
        raise ValueError(f"freqs must have rope_dim / 2 = {x.shape[-1] // 2} entries, got {freqs.shape[0]}")
    out = x3.copy()
    if x.dtype == F32:
        _K.rope_inplace_f32(out, positions, freqs)
    else:
        _K.rope_inplace_bf16(out.view(np.uint16), positions, freqs)
    return out.reshape(x.shape)


def embedding(table, ids):
    """table[ids]: table BF16 [vocab, dim], ids int32/int64 [tokens]; ids outside the table raise."""
    _arr("table", table, (BF16,), 2)
    return _K.embedding(_bits(table), _ids("ids", ids, 1)).view(BF16)


def silu_mul(gate_up):
    """silu(gate) * up for a merged gate_up FP32 [tokens, 2 * inter] -> BF16 [tokens, inter]."""
    if _on_gpu(gate_up):
        return _cuda().silu_mul(gate_up)
    _arr("gate_up", gate_up, (F32,), 2)
    if gate_up.shape[1] % 2:
        raise ValueError(f"gate_up must have an even width, got {gate_up.shape[1]}")
    return _K.silu_mul(gate_up).view(BF16)


def act_quant(x):
    """1x128 FP8 quantisation: (q FP8 [T, D], scales FP32 [T, ceil(D/128)]), x ~= q * scale."""
    if _on_gpu(x):
        return _cuda().act_quant(x)
    _arr("x", x, (F32, BF16), 2)
    q, s = _K.act_quant_f32(x) if x.dtype == F32 else _K.act_quant_bf16(_bits(x))
    return q.view(FP8), s


def weight_dequant(w, scale):
    """BF16 weights from FP8 w [N, K] and FP32 128x128 block scales [ceil(N/128), ceil(K/128)]."""
    _arr("w", w, (FP8,), 2)
    _arr("scale", scale, (F32,), 2)
    return _K.weight_dequant(_bits(w), scale).view(BF16)


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
    args = _gate_args(n_group, topk_group, top_k, route_scale, score_func)
    logits = linear(x, weight) if x.dtype == BF16 else np.ascontiguousarray(x @ weight.T, dtype=np.float32)
    return _K.moe_gate(logits, bias, *args)


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
    if offsets.shape[0] != w13.shape[0] + 1:
        raise ValueError(f"offsets must have experts + 1 = {w13.shape[0] + 1} entries, got {offsets.shape[0]}")
    if offsets[0] != 0 or offsets[-1] != x.shape[0] or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must start at 0, not decrease, and end at the rows of x")
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
    if counts.shape[0] != x.shape[0] or np.any(counts < 0) or np.any(counts > x.shape[1]):
        raise ValueError(f"counts must have {x.shape[0]} entries in [0, capacity = x.shape[1] = {x.shape[1]}]")
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
    out.update(zip(("n_group", "topk_group", "top_k", "route_scale", "score_func"), gate))
    out.update(gate_weight=_bits(gate_weight), gate_bias=gate_bias)
    return out


# ---- MLA ---------------------------------------------------------------------------------------
class PagedMlaCache:
    """A paged latent cache shared by many requests: `num_blocks` blocks of `block_size` tokens
    holding each token's latent (BF16, or FP8 e4m3 with one FP32 scale per 128 values) and its
    rotated rope key (BF16). Requests address it through block tables (see paged_cache_write and
    mla_decode)."""

    def __init__(self, num_blocks, block_size=64, kv_lora=512, rope=64, *, dtype="bf16", decompressed=False,
                 heads=None, nope=128, v=128):
        if dtype not in ("bf16", "fp8"):
            raise ValueError(f"dtype must be 'bf16' or 'fp8', got {dtype!r}")
        nb, bs = _int("num_blocks", num_blocks, 1), _int("block_size", block_size, 1)
        kv_lora, rope = _int("kv_lora", kv_lora, 1), _int("rope", rope, 2)
        decompressed = _bool("decompressed", decompressed)
        if decompressed:
            heads, nope, v = _int("heads", heads, 1), _int("nope", nope, 1), _int("v", v, 1)
        per_token = kv_lora * 2 + -(-kv_lora // 128) * 4 + rope * 2 + (heads * (nope + rope + v) * 2 if decompressed else 0)
        _check_bytes("num_blocks", nb * bs * per_token, "the paged cache (num_blocks x block_size tokens of kv_lora + "
                     "rope values, and heads x (nope + rope + v) when decompressed)")
        self.latent = np.zeros((nb, bs, kv_lora), BF16 if dtype == "bf16" else FP8)
        self.latent_scale = None if dtype == "bf16" else np.zeros((nb, bs, -(-kv_lora // 128)), np.float32)
        self.rope = np.zeros((nb, bs, rope), BF16)
        # The CD variant's per-head decompressed keys and values, paged the same way.
        self.k_full = self.v_full = None
        if decompressed:
            self.k_full = np.zeros((nb, bs, heads, nope + rope), BF16)
            self.v_full = np.zeros((nb, bs, heads, v), BF16)

    @property
    def dtype(self):
        return "bf16" if self.latent_scale is None else "fp8"

    def _check(self):
        """The arrays the kernels write into (they are attributes a caller may have replaced)."""
        fp8 = isinstance(self.latent, np.ndarray) and self.latent.dtype == FP8
        _cache_array("cache.latent", self.latent, (FP8 if fp8 else BF16,), 3)
        if fp8:
            _cache_array("cache.latent_scale", self.latent_scale, (F32,), 3)
        elif self.latent_scale is not None:
            raise ValueError("cache.latent_scale goes with an FP8 cache.latent only")
        _cache_array("cache.rope", self.rope, (BF16,), 3)
        if (self.k_full is None) != (self.v_full is None):
            raise ValueError("cache.k_full and cache.v_full go together")
        if self.k_full is not None:
            _cache_array("cache.k_full", self.k_full, (BF16,), 4)
            _cache_array("cache.v_full", self.v_full, (BF16,), 4)


def paged_cache_write(cache, block_table, requests, positions, latent, k_pe):
    """Writes tokens into a PagedMlaCache in place: token t (latent BF16 [T, kv_lora], k_pe BF16
    [T, rope]) of request requests[t] at position positions[t]. An FP8 cache quantises the latent
    per 128 values. Ids outside the table or the cache raise ValueError."""
    if not isinstance(cache, PagedMlaCache):
        raise TypeError(f"cache must be a PagedMlaCache, got {type(cache).__name__}")
    cache._check()
    _arr("latent", latent, (BF16,), 2)
    _arr("k_pe", k_pe, (BF16,), 2)
    _K.paged_cache_write(_bits(cache.latent), cache.latent_scale, _bits(cache.rope), _ids("block_table", block_table, 2),
                         _ids("requests", requests, 1), _ids("positions", positions, 1), _bits(latent), _bits(k_pe))


def mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale, num_splits=1,
               latent_scale=None):
    """Absorbed MLA decode over a paged latent cache (FlashMLA's contract, on the CPU).

    q_nope BF16 [B, Q, H, kv_lora] (queries with W_UK folded in), q_rope BF16 [B, Q, H, rope_dim];
    latent_cache [blocks, block_size, kv_lora] BF16, or FP8 with latent_scale FP32
    [blocks, block_size, kv_lora / 128]; rope_cache BF16 [blocks, block_size, rope_dim] (a
    PagedMlaCache holds all three); block_table int32 [B, max_blocks]; seqlens int32 [B] (each
    request's tokens, the Q new ones last, causal among themselves). Keys split into num_splits
    ranges per request, merged by log-sum-exp. Returns (out FP32 [B, Q, H, kv_lora] in latent space --
    apply W_UV next -- and lse FP32 [B, Q, H]).
    """
    if _on_gpu(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, latent_scale):
        return _cuda().mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale,
                                  latent_scale=latent_scale, num_splits=num_splits)
    for name, a in (("q_nope", q_nope), ("q_rope", q_rope)):
        _arr(name, a, (BF16,), 4)
    _arr("latent_cache", latent_cache, (BF16, FP8), 3)
    _arr("rope_cache", rope_cache, (BF16,), 3)
    if (latent_cache.dtype == FP8) != (latent_scale is not None):
        raise ValueError("an FP8 latent_cache needs latent_scale, and a BF16 one takes none")
    if latent_scale is not None:
        _arr("latent_scale", latent_scale, (F32,), 3)
    block_table = _ids("block_table", block_table, 2)
    seqlens = _ids("seqlens", seqlens, 1)
    if q_nope.shape[:3] != q_rope.shape[:3]:
        raise ValueError(f"q_rope must match q_nope's [batch, q_len, heads] {q_nope.shape[:3]}, got {q_rope.shape[:3]}")
    if latent_cache.shape[:2] != rope_cache.shape[:2]:
        raise ValueError("latent_cache and rope_cache must have the same [blocks, block_size]")
    if q_nope.shape[3] != latent_cache.shape[2] or q_rope.shape[3] != rope_cache.shape[2]:
        raise ValueError("q_nope / q_rope widths must match latent_cache / rope_cache")
    if block_table.shape[0] != q_nope.shape[0] or seqlens.shape[0] != q_nope.shape[0]:
        raise ValueError(f"block_table and seqlens must have one row per request ({q_nope.shape[0]})")
    softmax_scale = _real("softmax_scale", softmax_scale, positive=True)
    num_splits = _int("num_splits", num_splits, 1)  # the binding bounds the split buffers by memory
    return _K.mla_decode_absorbed(_bits(q_nope), _bits(q_rope), _bits(latent_cache), latent_scale, _bits(rope_cache),
                                  block_table, seqlens, softmax_scale, num_splits)


MLA_VARIANTS = ("CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME")
_MLA_BF16 = ("wq_a", "wq_b", "wkv_a", "wkv_b", "wo")
_MLA_F32 = ("q_norm", "kv_norm")


class MlaCache:
    """One sequence's MLA cache, filled in place by mla_forward: the kv_norm'ed latent BF16
    [capacity, kv_lora] and the rotated rope key BF16 [capacity, rope]; with `decompressed=True`
    (the CD variant) also the per-head keys [capacity, heads, nope + rope] and values
    [capacity, heads, v]. `prefix` counts the tokens already in it."""

    def __init__(self, capacity, kv_lora=512, rope=64, *, decompressed=False, heads=None, nope=128, v=128):
        capacity = _int("capacity", capacity, 1)
        kv_lora, rope = _int("kv_lora", kv_lora, 1), _int("rope", rope, 2)
        decompressed = _bool("decompressed", decompressed)
        if decompressed:
            heads, nope, v = _int("heads", heads, 1), _int("nope", nope, 1), _int("v", v, 1)
        per_token = (kv_lora + rope + (heads * (nope + rope + v) if decompressed else 0)) * 2
        _check_bytes("capacity", capacity * per_token, "the cache (capacity tokens of kv_lora + rope values, and "
                     "heads x (nope + rope + v) when decompressed)")
        self.latent = np.zeros((capacity, kv_lora), BF16)
        self.k_pe = np.zeros((capacity, rope), BF16)
        self.k_full = self.v_full = None
        if decompressed:
            self.k_full = np.zeros((capacity, heads, nope + rope), BF16)
            self.v_full = np.zeros((capacity, heads, v), BF16)
        self.prefix = 0

    @property
    def capacity(self):
        return self.latent.shape[0]

    def _check(self):
        """The arrays the kernels write into and the fill mark (attributes a caller may have
        replaced): a strided or converted array would take the new rows in a temporary copy."""
        _cache_array("cache.latent", self.latent, (BF16,), 2)
        _cache_array("cache.k_pe", self.k_pe, (BF16,), 2)
        if (self.k_full is None) != (self.v_full is None):
            raise ValueError("cache.k_full and cache.v_full go together")
        if self.k_full is not None:
            _cache_array("cache.k_full", self.k_full, (BF16,), 3)
            _cache_array("cache.v_full", self.v_full, (BF16,), 3)
        return _int("cache.prefix", self.prefix, 0, self.capacity)


def _check_mla_call(variant, x, cache, weights):
    """The checks mla_forward and decode_layer share: variant, x, the cache's kind and room, and
    the materialised products AM_CC_ME needs."""
    if variant not in MLA_VARIANTS:
        raise ValueError(f"variant must be one of {MLA_VARIANTS}, got {variant!r}")
    _arr("x", x, (BF16,), 2)
    if x.shape[0] == 0:
        raise ValueError("x must hold at least one token")
    if not isinstance(cache, MlaCache):
        raise TypeError(f"cache must be an MlaCache, got {type(cache).__name__}")
    cache._check()
    if variant == "CD" and cache.k_full is None:
        raise ValueError("the CD variant needs MlaCache(..., decompressed=True)")
    if variant == "AM_CC_ME" and (not isinstance(weights, dict) or weights.get("q_absorb") is None):
        raise ValueError("AM_CC_ME needs weights['q_absorb'] and ['o_absorb'] (mla_absorb_weights)")
    if cache.prefix + x.shape[0] > cache.capacity:
        raise ValueError(f"cache has room for {cache.capacity - cache.prefix} more tokens, not {x.shape[0]}")


def _mla_weights(weights):
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a dict of arrays, got {type(weights).__name__}")
    out = {}
    for k in _MLA_BF16:
        if k not in weights:
            raise ValueError(f"weights is missing '{k}'")
        out[k] = _bits(_arr(f"weights['{k}']", weights[k], (BF16,), 2))
    for k in _MLA_F32:
        if k not in weights:
            raise ValueError(f"weights is missing '{k}'")
        out[k] = np.ascontiguousarray(_arr(f"weights['{k}']", weights[k], (F32, BF16), 1), dtype=np.float32)
    if (weights.get("q_absorb") is None) != (weights.get("o_absorb") is None):
        raise ValueError("weights['q_absorb'] and weights['o_absorb'] go together (mla_absorb_weights makes both)")
    for k in ("q_absorb", "o_absorb"):
        if weights.get(k) is not None:
            out[k] = _bits(_arr(f"weights['{k}']", weights[k], (BF16,), 2))
    return out


def mla_prolog(x, weights, positions, *, heads, freqs, nope=128, rope=64, v=128, eps=1e-6, cache=None,
               block_table=None, requests=None):
    """The fused MLA prolog (seed 003) in one call: x BF16 [T, dim] at positions int32 [T] ->
    dict(qa [T, q_lora] (the q_norm output), q_nope [T, heads, nope], q_pe [T, heads, rope] (RoPE'd),
    latent [T, kv_lora] (kv_norm'ed), k_pe [T, rope] (RoPE'd)), all BF16. With a PagedMlaCache,
    block_table and requests (int32 [T], each token's row of the table), the new latent and k_pe are
    also written into the cache at their positions."""
    _arr("x", x, (BF16,), 2)
    positions = _ids("positions", positions, 1)
    _arr("freqs", freqs, (F32,), 1)
    if positions.shape[0] != x.shape[0]:
        raise ValueError(f"positions must have one entry per token of x ({x.shape[0]}), got {positions.shape[0]}")
    if (cache is None) != (block_table is None) or (cache is None) != (requests is None):
        raise ValueError("cache, block_table and requests go together")
    qa, q, latent, k_pe = _K.mla_prolog(_bits(x), _mla_weights(weights), _int("heads", heads, 1), _int("nope", nope, 1),
                                        _int("rope", rope, 2), _int("v", v, 1), _real("eps", eps, minimum=0), positions,
                                        freqs)
    q = q.view(BF16)
    out = dict(qa=qa.view(BF16), q_nope=np.ascontiguousarray(q[..., :nope]), q_pe=np.ascontiguousarray(q[..., nope:]),
               latent=latent.view(BF16), k_pe=k_pe.view(BF16))
    if cache is not None:
        paged_cache_write(cache, block_table, requests, positions, out["latent"], out["k_pe"])
    return out


def mla_absorb_weights(weights, *, heads, nope=128, rope=64, v=128):
    """A copy of weights with the AM_CC_ME products added: q_absorb [heads * kv_lora, q_lora]
    (W_UK^T wq_b_nope per head) and o_absorb [dim, heads * kv_lora] (wo W_UV per head), BF16."""
    w = _mla_weights(weights)
    qa, oa = _K.mla_absorb_weights(w, _int("heads", heads, 1), _int("nope", nope, 1), _int("rope", rope, 2),
                                   _int("v", v, 1))
    return dict(weights, q_absorb=qa.view(BF16), o_absorb=oa.view(BF16))


def mla_forward(variant, x, weights, cache, *, heads, freqs, softmax_scale, nope=128, rope=64, v=128, eps=1e-6):
    """One MLA layer for the tokens x BF16 [T, dim] that follow cache.prefix tokens (prefill: T > 1,
    causal; decode: T = 1), in one of the five execution variants (MLA_VARIANTS). Runs the prolog
    (wq_a -> q_norm -> wq_b -> RoPE; wkv_a -> kv_norm, RoPE'd k_pe), appends the tokens to the
    cache (advancing cache.prefix), attends, and applies wo. weights: wq_a, q_norm, wq_b, wkv_a,
    kv_norm, wkv_b, wo (and q_absorb, o_absorb for AM_CC_ME: see mla_absorb_weights).
    Returns FP32 [T, dim]."""
    _check_mla_call(variant, x, cache, weights)
    _arr("freqs", freqs, (F32,), 1)
    softmax_scale = _real("softmax_scale", softmax_scale, positive=True)
    w = _mla_weights(weights)
    y = _K.mla_forward(variant, _bits(x), w, _int("heads", heads, 1), _int("nope", nope, 1), _int("rope", rope, 2),
                       _int("v", v, 1), _real("eps", eps, minimum=0), freqs, softmax_scale, _bits(cache.latent),
                       _bits(cache.k_pe), None if cache.k_full is None else _bits(cache.k_full),
                       None if cache.v_full is None else _bits(cache.v_full), cache.prefix)
    cache.prefix += x.shape[0]
    return y


def _paged_rows(pages, blocks, n):
    """The first n token rows of a request whose tokens live in `blocks` (a contiguous copy)."""
    return pages[blocks].reshape((-1,) + pages.shape[2:])[:n]


def mla_forward_paged(variant, x, weights, cache, block_table, seqlens, new_tokens, *, heads, freqs, softmax_scale,
                      nope=128, rope=64, v=128, eps=1e-6):
    """mla_forward over a PagedMlaCache for a batch of requests: request b has seqlens[b] tokens in
    the cache (in the blocks its row of block_table lists) and new_tokens[b] new ones, the rows of x
    in request order. Each request's cached rows are gathered into a contiguous MlaCache (an FP8
    latent dequantised to BF16), the variant runs on it, and its new tokens are written back into
    its pages (the FP8 latent quantised per 128 values). The gather copies the request's cache once
    per call - the cost of reusing the contiguous kernels; the absorbed decode path (mla_decode)
    reads the pages in place. CD needs PagedMlaCache(decompressed=True). Returns FP32 [rows, dim];
    the caller advances seqlens."""
    if not isinstance(cache, PagedMlaCache):
        raise TypeError(f"cache must be a PagedMlaCache, got {type(cache).__name__}")
    if variant not in MLA_VARIANTS:
        raise ValueError(f"variant must be one of {MLA_VARIANTS}, got {variant!r}")
    cache._check()
    if variant == "CD" and cache.k_full is None:
        raise ValueError("the CD variant needs PagedMlaCache(..., decompressed=True)")
    _arr("x", x, (BF16,), 2)
    block_table = _ids("block_table", block_table, 2)
    # Token counts in int64: seqlens + new_tokens must not wrap around in int32.
    seqlens = _ids("seqlens", seqlens, 1).astype(np.int64)
    new_tokens = _ids("new_tokens", new_tokens, 1).astype(np.int64)
    B, bs = block_table.shape[0], cache.latent.shape[1]
    if B == 0:
        raise ValueError("block_table must have a row for at least one request")
    if seqlens.shape[0] != B or new_tokens.shape[0] != B:
        raise ValueError(f"seqlens and new_tokens must have one entry per request ({B})")
    if np.any(seqlens < 0) or np.any(new_tokens < 1):
        raise ValueError("seqlens must be >= 0 and new_tokens >= 1")
    if int(new_tokens.sum()) != x.shape[0]:
        raise ValueError(f"x must have sum(new_tokens) = {int(new_tokens.sum())} rows, got {x.shape[0]}")
    need = -(-(seqlens + new_tokens) // bs)
    if np.any(need > block_table.shape[1]):
        raise ValueError(f"seqlens + new_tokens need up to {need.max()} blocks per request; block_table has "
                         f"{block_table.shape[1]}")
    # Each request's rows are gathered into a contiguous cache: a table naming one block many
    # times could ask for more than the paged cache holds.
    _check_bytes("seqlens", int((seqlens + new_tokens).max()) * cache.latent.shape[2] * 4, "a request's gathered cache")
    used = np.concatenate([block_table[b, :need[b]] for b in range(B)])
    if used.size and (used.min() < 0 or used.max() >= cache.latent.shape[0]):
        raise ValueError(f"block_table points outside the cache's {cache.latent.shape[0]} blocks")
    L = cache.latent.shape[2]
    outs, row = [], 0
    for b in range(B):
        P, T = int(seqlens[b]), int(new_tokens[b])
        blocks = block_table[b, :need[b]]
        seq = MlaCache(P + T, L, cache.rope.shape[2], decompressed=cache.k_full is not None,
                       heads=None if cache.k_full is None else cache.k_full.shape[2], nope=nope,
                       v=v if cache.v_full is None else cache.v_full.shape[3])
        if P:
            lat = _paged_rows(cache.latent, blocks, P)
            if cache.latent_scale is not None:
                sc = np.repeat(_paged_rows(cache.latent_scale, blocks, P), 128, axis=1)[:, :L]
                lat = (lat.astype(np.float32) * sc).astype(BF16)
            seq.latent[:P] = lat
            seq.k_pe[:P] = _paged_rows(cache.rope, blocks, P)
            if seq.k_full is not None:
                seq.k_full[:P] = _paged_rows(cache.k_full, blocks, P)
                seq.v_full[:P] = _paged_rows(cache.v_full, blocks, P)
        seq.prefix = P
        y = mla_forward(variant, x[row:row + T], weights, seq, heads=heads, freqs=freqs, softmax_scale=softmax_scale,
                        nope=nope, rope=rope, v=v, eps=eps)
        outs.append(y)
        # The new tokens back into the request's pages.
        pos = np.arange(P, P + T, dtype=np.int32)
        paged_cache_write(cache, block_table, np.full(T, b, np.int32), pos, seq.latent[P:P + T], seq.k_pe[P:P + T])
        if cache.k_full is not None:
            blk, off = block_table[b, pos // bs], pos % bs
            cache.k_full[blk, off] = seq.k_full[P:P + T]
            cache.v_full[blk, off] = seq.v_full[P:P + T]
        row += T
    return np.concatenate(outs)


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
