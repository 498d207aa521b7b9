"""The building blocks: GEMM (BF16, FP8 block-scaled), RMSNorm, YaRN RoPE, embedding, SiLU-mul, FP8
quantisation."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (numpy, the extension, placement and checks)


# ---- building blocks ---------------------------------------------------------------------------
def _linear_weights(w, w_scale):
    """The checked binding arguments of one GEMM's weights: (bits of w, w_scale, fp8)."""
    _arr("w", w, (BF16, FP8), 2)
    if w.dtype == FP8:
        if w_scale is None:
            raise ValueError("FP8 w needs w_scale")
        _arr("w_scale", w_scale, (F32,), 2)
    elif w_scale is not None:
        raise ValueError("w_scale applies to FP8 w only")
    return _bits(w), w_scale, w.dtype == FP8


class PackedWeights:
    """One GEMM's weights prepared once for this CPU's kernels: ``linear(x, PackedWeights(w))`` equals
    ``linear(x, w)``. Where the AMX kernels are usable, the weights are also packed into tile order
    (as oneDNN reorders weights for its AMX kernels), so that calls of many rows read the tiles
    instead of copying the weights into tiles every time; elsewhere nothing is packed and the calls
    read ``w`` itself. The packed copy takes ``nbytes_packed`` bytes (two per weight, FP8 included:
    its 128 x 128 blocks are dequantised as bf16(code x scale)). ``w`` and ``w_scale`` are held, not
    copied: do not modify them afterwards."""

    def __init__(self, w, w_scale=None):
        self.w, self.w_scale = w, w_scale
        self._args = _linear_weights(w, w_scale)
        self._tiles = _K.pack_linear(*self._args)

    @property
    def shape(self):
        return self.w.shape

    @property
    def nbytes_packed(self) -> int:
        return self._tiles.nbytes

    def __repr__(self):
        return (f"PackedWeights({self.w.dtype} {tuple(self.w.shape)}, "
                f"{'tiles ' + str(self.nbytes_packed) + ' bytes' if self.nbytes_packed else 'no tiles: ' + amx_status()})")


def linear(x, w, w_scale=None):
    """y = x @ w.T in FP32: x BF16 [M, K]; w BF16 [N, K], or FP8 [N, K] with w_scale FP32
    [ceil(N/128), ceil(K/128)] (dequantised to BF16 block by block, as DeepSeek-V3 does), or a
    PackedWeights made from them (its w_scale is its own)."""
    _arr("x", x, (BF16,), 2)
    if isinstance(w, PackedWeights):
        if w_scale is not None:
            raise ValueError("w_scale goes with the weights: PackedWeights(w, w_scale), not linear(x, packed, w_scale)")
        args, tiles, shape = w._args, w._tiles, w.shape
    else:
        args, tiles, shape = _linear_weights(w, w_scale), None, w.shape
    if x.shape[1] != shape[1]:
        raise ValueError(f"w must be [N, K] with K = x.shape[1] = {x.shape[1]}, got {tuple(shape)}")
    return _K.linear(_bits(x), *args, tiles)


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
