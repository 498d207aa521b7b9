"""The grouped GEMM (BF16, FP8 block-scaled) and the expert FFN in the contiguous and masked layouts;
the cuBLAS baseline."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (the binding, dtypes, placement and checks)
from .. import _checks
from .elementwise import silu_mul


# ---- grouped GEMM and experts ------------------------------------------------------------------
def _check_offsets(c, E, M):
    offs = c["offsets"]
    if isinstance(offs, np.ndarray):
        offs = A.arr("offsets", offs, (I64, I32), 1)
        if offs.dtype != I64:
            c.args["offsets"] = offs = offs.astype(np.int64)
    else:
        _check("offsets", offs, (I64,), 1)
    _checks.expert_offsets(offs, E, M)


def _check_counts(c, E, capacity):
    _ids(c, "counts", 1)
    _checks.expert_counts(c["counts"], E, capacity)


def _check_wgmma(c, Kd, fp8, asked):
    """variant='wgmma''s own limits, named as the caller asked for it (argument or environment)."""
    why = _G.grouped_gemm_wgmma_operands_reason(c["a"].dtype == FP8, c["b"].dtype == FP8)
    if why:
        raise TypeError(f"{asked} {why}")
    why = _G.grouped_gemm_wgmma_k_reason(fp8, Kd)
    if why:
        raise ValueError(f"{asked} {why}")
    _require_sm90(c, asked)


def grouped_gemm(a, b, *, offsets=None, counts=None, a_scale=None, b_scale=None, out=None, validate=True,
                 variant=None):
    """c = a @ b[e]^T per expert, FP32 out, on tensor cores.

    a: BF16 [M, K] (contiguous layout, with offsets int64 [E + 1]) or [E, capacity, K] (masked
    layout, with counts int32 [E]); or FP8 e4m3 with a_scale FP32 [..., ceil(K/128)] (1x128
    activation scales, from act_quant). b: BF16 [E, N, K], or FP8 with b_scale FP32
    [E, ceil(N/128), ceil(K/128)] (128x128 block scales). FP8 b with BF16 a is dequantised to BF16
    block by block (the CPU experts' semantics); FP8 a with FP8 b multiplies FP8 values and scales
    per 128-deep block in FP32 (DeepGEMM's). Masked outputs are zero past each count.

    GPU arrays only: out (FP32, the result's shape) is written in place of a new array, and
    validate=False skips the device-side check of offsets / counts (a synchronisation) for callers
    that checked them once already -- bad values then make wrong results, not errors.

    variant: "mma" (mma.sync kernels, every GPU), "wgmma" (Hopper's wgmma + TMA, sm_90 only; BF16 x
    BF16 with K % 8 == 0, or FP8 x FP8 with K % 16 == 0) or None (the default): "wgmma" on an sm_90
    GPU when the call fits it, else "mma" (DSPERF_CUDA_WGMMA=0 keeps "mma", =1 insists on "wgmma").
    On an H200 wgmma ran BF16 at 93-98% of cuBLAS and FP8 at 73-76% of DeepGEMM (docs/CUDA.md).
    """
    c = _Call(("a", a), ("b", b), ("offsets", offsets), ("counts", counts), ("a_scale", a_scale),
              ("b_scale", b_scale))
    if (offsets is None) == (counts is None):
        raise ValueError("give offsets (contiguous layout) or counts (masked layout), not both or neither")
    masked = counts is not None
    _check("a", c["a"], (BF16, FP8), 3 if masked else 2)
    _check("b", c["b"], (BF16, FP8), 3)
    E, N, Kd = c["b"].shape
    a_fp8, b_fp8 = c["a"].dtype == FP8, c["b"].dtype == FP8
    if a_fp8 != (a_scale is not None):
        raise ValueError("FP8 a needs a_scale (1x128 scales), and BF16 a takes none")
    if b_fp8 != (b_scale is not None):
        raise ValueError("FP8 b needs b_scale (128x128 block scales), and BF16 b takes none")
    if a_fp8 and not b_fp8:
        raise TypeError("FP8 a needs FP8 b (DeepGEMM's FP8 x FP8 GEMM); use BF16 a with BF16 b")
    if c["a"].shape[-1] != Kd:
        raise ValueError(f"a's last dimension must be b's K = {Kd}, got {c['a'].shape[-1]}")
    if masked:
        if c["a"].shape[0] != E:
            raise ValueError(f"a must be [experts = {E}, capacity, K], got {c['a'].shape}")
        capacity = c["a"].shape[1]
        M = E * capacity
        _check_counts(c, E, capacity)
    else:
        capacity = 0
        M = c["a"].shape[0]
        _check_offsets(c, E, M)
    kb = -(-Kd // 128)
    if a_fp8:
        _check("a_scale", c["a_scale"], (F32,), c["a"].ndim)
        if c["a_scale"].shape != c["a"].shape[:-1] + (kb,):
            raise ValueError(f"a_scale must have shape {c['a'].shape[:-1] + (kb,)}, got {c['a_scale'].shape}")
    if b_fp8:
        _check("b_scale", c["b_scale"], (F32,), 3)
        if c["b_scale"].shape != (E, -(-N // 128), kb):
            raise ValueError(f"b_scale must have shape {(E, -(-N // 128), kb)}, got {c['b_scale'].shape}")
    fits = not (_G.grouped_gemm_wgmma_operands_reason(a_fp8, b_fp8) or _G.grouped_gemm_wgmma_k_reason(a_fp8, Kd))
    chosen, asked = _kernel_variant(variant, a_fp8 == b_fp8, fits, c.device)
    if chosen == "wgmma":
        _check_wgmma(c, Kd, a_fp8, asked)
    out = _out(c, out, c["a"].shape[:-1] + (N,), F32, "out")
    args = _G.GroupedGemmArgs(
        a=c.dev("a").ptr, a_scale=_ptr(c.dev("a_scale")), b=c.dev("b").ptr, b_scale=_ptr(c.dev("b_scale")), c=out.ptr,
        M=M, N=N, K=Kd, E=E, layout=_G.GemmLayout.Masked if masked else _G.GemmLayout.Contiguous,
        offsets=_ptr(c.dev("offsets")), counts=_ptr(c.dev("counts")), capacity=capacity,
        check_values=bool(validate) or not c.on_device)
    (_G.grouped_gemm_wgmma if chosen == "wgmma" else _G.grouped_gemm)(args, c.device)
    return c.out(out)


def _experts(x, layout, w13, w2, w13_scale, w2_scale, validate=True):
    c = _Call(("x", x), (layout[0], layout[1]), ("w13", w13), ("w2", w2), ("w13_scale", w13_scale),
              ("w2_scale", w2_scale))
    # The CPU's weight checks, on the shapes and dtypes alone.
    for name in ("w13", "w2"):
        _check(name, c[name], (BF16, FP8), 3)
    if c["w13"].dtype != c["w2"].dtype:
        raise TypeError(f"w13 and w2 must share a dtype, got {c['w13'].dtype} and {c['w2'].dtype}")
    fp8 = c["w13"].dtype == FP8
    if fp8 and (w13_scale is None or w2_scale is None):
        raise ValueError("FP8 expert weights need w13_scale and w2_scale (128x128 block scales)")
    if not fp8 and (w13_scale is not None or w2_scale is not None):
        raise ValueError("w13_scale and w2_scale apply to FP8 weights only")
    E, two_i, D = c["w13"].shape
    if two_i % 2:
        raise ValueError(f"w13 must hold 2 * inter rows (w1 then w3), got {two_i}")
    if c["w2"].shape != (E, D, two_i // 2):
        raise ValueError(f"w2 must have shape {(E, D, two_i // 2)} to match w13 {c['w13'].shape}, got {c['w2'].shape}")
    _check("x", c["x"], (BF16,), 2 if layout[0] == "offsets" else 3)
    if c["x"].shape[-1] != D:
        raise ValueError(f"x's last dimension must be the experts' dim = {D}, got {c['x'].shape[-1]}")
    if layout[0] == "offsets":
        _check_offsets(c, E, c["x"].shape[0])
    else:
        if c["x"].shape[0] != E:
            raise ValueError(f"x must be [experts = {E}, capacity, dim = {D}], got {c['x'].shape}")
        _check_counts(c, E, c["x"].shape[1])
    scale_shapes = (("w13_scale", (E, -(-two_i // 128), -(-D // 128))),
                    ("w2_scale", (E, -(-D // 128), -(-two_i // 2 // 128))))
    for name, want in scale_shapes:
        if fp8:
            _check(name, c[name], (F32,), 3)
            if c[name].shape != want:
                raise ValueError(f"{name} must have shape {want}, got {c[name].shape}")
    c.require_gpu()
    # Stage everything once, then two grouped GEMMs around SiLU-and-multiply, all on the device.
    dev = {name: c.dev(name) for name in ("x", layout[0], "w13", "w2", "w13_scale", "w2_scale")}
    kw = {layout[0]: dev[layout[0]]}
    gu = grouped_gemm(dev["x"], dev["w13"], b_scale=dev["w13_scale"], validate=validate, **kw)
    h = silu_mul(gu.reshape(-1, two_i)).reshape(gu.shape[:-1] + (two_i // 2,))
    y = grouped_gemm(h, dev["w2"], b_scale=dev["w2_scale"], validate=validate, **kw)
    return c.out(y)


def experts_contiguous(x, offsets, w13, w2, w13_scale=None, w2_scale=None, *, validate=True):
    """Grouped expert FFN, contiguous layout (as dsperf.kernels.experts_contiguous): x BF16
    [rows, dim] sorted by expert, expert e owning rows offsets[e]:offsets[e+1]; w13 [E, 2I, dim]
    (w1 then w3), w2 [E, dim, I], BF16 or FP8 with block scales. Returns FP32 [rows, dim]."""
    return _experts(x, ("offsets", offsets), w13, w2, w13_scale, w2_scale, validate)


def experts_masked(x, counts, w13, w2, w13_scale=None, w2_scale=None, *, validate=True):
    """Grouped expert FFN, masked layout: x BF16 [E, capacity, dim] with counts[e] valid rows per
    expert. Returns FP32 [E, capacity, dim], zero past each count."""
    return _experts(x, ("counts", counts), w13, w2, w13_scale, w2_scale, validate)


def cublas_gemm_bf16(a, b):
    """The baseline: c[i] = a[i] @ b[i]^T through cuBLAS (cublasGemmStridedBatchedEx), a BF16
    [batch, M, K], b BF16 [batch, N, K] -> FP32 [batch, M, N]."""
    c = _Call(("a", a), ("b", b))
    _check("a", c["a"], (BF16,), 3)
    _check("b", c["b"], (BF16,), 3)
    B, M, Kd = c["a"].shape
    if c["b"].shape[0] != B or c["b"].shape[2] != Kd:
        raise ValueError(f"b must be [batch = {B}, N, K = {Kd}], got {c['b'].shape}")
    N = c["b"].shape[1]
    c.require_gpu()
    why = _G.cublas_why_unavailable()
    if why:
        raise RuntimeError(why)
    out = c.new((B, M, N), F32)
    _G.cublas_gemm_bf16(c.dev("a").ptr, c.dev("b").ptr, out.ptr, M, N, Kd, B, M * Kd, N * Kd, M * N, c.device)
    return c.out(out)
