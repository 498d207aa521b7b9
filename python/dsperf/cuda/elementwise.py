"""Elementwise kernels (RMSNorm, SiLU-mul, FP8 quantisation, RoPE) and MoE routing (gate, permute,
unpermute) on the GPU."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (the binding, dtypes, placement and checks)


# ---- elementwise -------------------------------------------------------------------------------
def rmsnorm(x, weight, eps=1e-6):
    """x / rms(x) * weight over the last dimension: x FP32 [rows, dim], weight FP32 [dim]."""
    c = _Call(("x", x), ("weight", weight))
    _check("x", c["x"], (F32,), 2)
    _check("weight", c["weight"], (F32,), 1)
    rows, dim = c["x"].shape
    if c["weight"].shape[0] != dim:
        raise ValueError(f"weight must have x's last dimension {dim}, got {c['weight'].shape[0]}")
    if isinstance(eps, bool) or not (isinstance(eps, numbers.Real) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    c.require_gpu()
    y = c.new((rows, dim), F32)
    _G.rmsnorm(c.dev("x").ptr, c.dev("weight").ptr, y.ptr, rows, dim, float(eps), c.device)
    return c.out(y)


def silu_mul(gate_up):
    """silu(gate) * up for gate_up FP32 [rows, 2 * inter] -> BF16 [rows, inter]."""
    c = _Call(("gate_up", gate_up))
    _check("gate_up", c["gate_up"], (F32,), 2)
    rows, width = c["gate_up"].shape
    if width == 0 or width % 2:
        raise ValueError(f"gate_up must have an even, non-zero width, got {width}")
    c.require_gpu()
    out = c.new((rows, width // 2), BF16)
    _G.silu_mul(c.dev("gate_up").ptr, out.ptr, rows, width // 2, c.device)
    return c.out(out)


def act_quant(x):
    """1x128 FP8 quantisation of BF16 x [T, D]: (q FP8 [T, D], scales FP32 [T, ceil(D/128)]),
    as dsperf.kernels.act_quant (scale = amax / 448)."""
    c = _Call(("x", x))
    _check("x", c["x"], (BF16,), 2)
    rows, dim = c["x"].shape
    if dim == 0:
        raise ValueError("x must have a non-zero width")
    c.require_gpu()
    q, s = c.new((rows, dim), FP8), c.new((rows, -(-dim // 128)), F32)
    _G.act_quant(c.dev("x").ptr, rows, dim, q.ptr, s.ptr, c.device)
    return c.out(q), c.out(s)


def apply_rope(x, positions, freqs):
    """Rotary embedding of BF16 x [tokens, heads, rope_dim] (or [tokens, rope_dim]) at positions
    [tokens], pairs (2i, 2i+1) turned by positions * freqs[i] (DeepSeek's interleaved convention, as
    dsperf.kernels.apply_rope). Returns a new array."""
    c = _Call(("x", x), ("positions", positions), ("freqs", freqs))
    _check("x", c["x"], (BF16,), (2, 3))
    _ids(c, "positions", 1)
    _check("freqs", c["freqs"], (F32,), 1)
    shape = c["x"].shape
    tokens, rope_dim = shape[0], shape[-1]
    heads = shape[1] if len(shape) == 3 else 1
    if c["positions"].shape[0] != tokens:
        raise ValueError(f"positions must have one entry per token ({tokens}), got {c['positions'].shape[0]}")
    if rope_dim % 2 or c["freqs"].shape[0] != rope_dim // 2:
        raise ValueError(f"freqs must have rope_dim / 2 = {rope_dim // 2} entries, got {c['freqs'].shape[0]}")
    c.require_gpu()
    out = c.dev("x").copy()
    _G.rope_bf16(out.ptr, tokens, heads, heads * rope_dim, rope_dim, c.dev("positions").ptr, c.dev("freqs").ptr,
                 rope_dim, c.device)
    return c.out(out)


# ---- MoE routing -------------------------------------------------------------------------------
def moe_gate(logits, bias=None, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid"):
    """DeepSeek-V3 routing of FP32 logits [T, E] (x @ weight.T computed by the caller):
    (weights FP32 [T, top_k], ids int32 [T, top_k]), as dsperf.kernels.moe_gate."""
    c = _Call(("logits", logits), ("bias", bias))
    _check("logits", c["logits"], (F32,), 2)
    T, E = c["logits"].shape
    if bias is not None:
        _check("bias", c["bias"], (F32,), 1)
        if c["bias"].shape[0] != E:
            raise ValueError(f"bias must have {E} entries (one per expert), got {c['bias'].shape[0]}")
    # The configuration against the expert count, before any GPU work.
    config = A.check_gate(E, bias is not None, n_group, topk_group, top_k, route_scale, score_func)
    if config.n_group > 64:
        raise ValueError(f"n_group: the CUDA gate handles at most 64 groups, got {config.n_group}")
    c.require_gpu()
    w, ids = c.new((T, config.top_k), F32), c.new((T, config.top_k), I32)
    _G.moe_gate(c.dev("logits").ptr, T, E, _ptr(c.dev("bias")), config, w.ptr, ids.ptr, c.device)
    return c.out(w), c.out(ids)


def moe_permute(x, source):
    """x[source]: rows in expert order (source from dsperf.kernels.moe_route). x BF16 [tokens, dim]
    (any dtype works on the GPU: rows are moved as bytes)."""
    c = _Call(("x", x), ("source", source))
    _check("x", c["x"], (BF16, F32, FP8), 2)
    _ids(c, "source", 1)
    _host_range("source", c["source"], 0, c["x"].shape[0])
    tokens, dim = c["x"].shape
    rows = c["source"].shape[0]
    if dim == 0:
        raise ValueError("x must have a non-zero width")
    c.require_gpu()
    out = c.new((rows, dim), c["x"].dtype)
    _G.moe_permute(c.dev("x").ptr, tokens, dim * c["x"].dtype.itemsize, c.dev("source").ptr, rows, out.ptr, c.device)
    return c.out(out)


def moe_unpermute(y_perm, position, weights):
    """y[t] = sum_k weights[t, k] * y_perm[position[t, k]] (FP32), as dsperf.kernels.moe_unpermute."""
    c = _Call(("y_perm", y_perm), ("position", position), ("weights", weights))
    _check("y_perm", c["y_perm"], (F32,), 2)
    _ids(c, "position", 2)
    _check("weights", c["weights"], (F32,), 2)
    if c["weights"].shape != c["position"].shape:
        raise ValueError(f"weights must match position's shape {c['position'].shape}, got {c['weights'].shape}")
    _host_range("position", c["position"], 0, c["y_perm"].shape[0])
    rows, dim = c["y_perm"].shape
    T, Kk = c["position"].shape
    c.require_gpu()
    out = c.new((T, dim), F32)
    _G.moe_unpermute(c.dev("y_perm").ptr, rows, dim, c.dev("position").ptr, c.dev("weights").ptr, T, Kk, out.ptr,
                     c.device)
    return c.out(out)
