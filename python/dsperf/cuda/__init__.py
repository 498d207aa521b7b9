"""CUDA kernels with the semantics of their `dsperf.kernels` twins.

Every kernel takes either numpy arrays (copied to the GPU, run, results copied back as numpy) or
GPU arrays -- ``DeviceArray``, or any object exposing ``__cuda_array_interface__`` or DLPack, such
as PyTorch or CuPy tensors, taken without a copy -- in which case results stay on the GPU as
DeviceArray. Mixing host and GPU arrays in one call raises TypeError naming the argument; GPU
arrays on different devices raise ValueError.

Arguments are checked on the host first (dtype, shape, and for numpy inputs their values), so a
bad call raises ValueError/TypeError naming the argument on any machine; a good call on a machine
without a GPU raises RuntimeError saying why (``available()`` tells beforehand). Values held on
the GPU (ids, offsets, block tables) are checked there before the kernel proper.

Kernels run on the legacy default stream and wait for their work unless inside
``async_launches()`` (benchmarks), which ends by waiting for the device.
"""
from __future__ import annotations

import contextlib
import numbers
import os
import threading

import numpy as np

from .. import _C
from . import arrays as _CA
from .. import _arrays as A
from .arrays import (BF16, FP8, DeviceArray, as_device_array, from_cuda_array_interface, from_dlpack,
                         is_device_array_like)

_G = _C.cuda
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)

__all__ = ["DeviceArray", "available", "device_count", "device_name", "as_device_array", "from_dlpack",
           "from_cuda_array_interface", "synchronize", "async_launches", "rmsnorm", "silu_mul", "act_quant",
           "apply_rope", "moe_gate", "moe_permute", "moe_unpermute", "grouped_gemm", "experts_contiguous",
           "experts_masked", "cublas_gemm_bf16", "get_mla_metadata", "MlaMetadata", "mla_decode", "mla_prefill",
           "CudaGraph"]


def available() -> tuple[bool, str]:
    """(True, "") where a CUDA kernel can run, else (False, why)."""
    why = _G.why_unavailable()
    return (not why, why)


def device_count() -> int:
    return int(_G.device_count())


def device_name(device: int = 0) -> str:
    return _G.device_name(A.integer("device", device, 0))


def synchronize(device: int = 0) -> None:
    _G.synchronize(A.integer("device", device, 0))


@contextlib.contextmanager
def async_launches(device: int = 0):
    """Kernels launched inside return without waiting for the GPU (errors may then surface at a
    later call); the block ends by waiting for `device`."""
    before = _G.synchronous()
    _G.set_synchronous(False)
    try:
        yield
        _G.synchronize(device)
    finally:
        _G.set_synchronous(before)


class CudaGraph:
    """Captures a sequence of dsperf.cuda calls into a CUDA graph, replayed with one launch.

        g = CudaGraph()
        with g:                                   # captured, not run
            out, lse = mla_decode(..., metadata=meta, out=(o, l), validate=False)
            y = experts_masked(x, counts, w13, w2, validate=False)
        g.replay()                                # runs them; o, l and y hold the results
        x.set(new_x); g.replay()                  # new inputs, same buffers

    Inside the block only GPU arrays are allowed, nothing may synchronise or copy from or to the
    host, and value checks must be off (validate=False); calls that would do otherwise raise
    RuntimeError. Warm up once before capturing (a plan's device arrays are made on its first
    use). Outputs allocated inside live as long as the graph; the inputs are the caller's to keep.
    Kernels that need scratch memory or always check ids (moe_gate, moe_permute, moe_unpermute) and
    the NCCL exchanges cannot be captured."""

    def __init__(self, device: int = 0):
        self.device = A.integer("device", device, 0)
        self._exec = self._stream = 0
        self._keep = []

    def __enter__(self):
        ok, why = available()
        if not ok:
            raise RuntimeError(f"no CUDA device: {why}")
        if self._exec:
            raise RuntimeError("this CudaGraph holds a capture already; make a new one")
        if _CA._capture_keep is not None:
            raise RuntimeError("a CUDA graph is being captured already")
        self._sync_before = _G.synchronous()
        self._stream = _G.graph_begin_capture(self.device)
        _G.set_synchronous(False)
        _CA._capture_keep = self._keep
        _capturing.active = True
        return self

    def __exit__(self, exc_type, exc, tb):
        _CA._capture_keep = None
        _capturing.active = False
        _G.set_synchronous(self._sync_before)
        try:
            self._exec = _G.graph_end_capture(self._stream, exc_type is not None, self.device)
        except Exception:
            self._stream = 0  # a failed capture takes its stream with it
            raise
        if not self._exec:
            self._stream = 0  # discarded: the stream went with it
        return False

    def replay(self):
        """Runs the captured work (waits for it unless inside async_launches)."""
        if not self._exec:
            raise RuntimeError("nothing captured: use the CudaGraph as a `with` block first")
        _G.graph_launch(self._exec, self._stream, self.device)

    def __del__(self):
        if self._exec or self._stream:
            try:
                _G.graph_destroy(self._exec, self._stream, self.device)
            except Exception:  # interpreter shutdown: nothing left to report to
                pass


_capturing = threading.local()


# ---- placement and checks ----------------------------------------------------------------------
class _Call:
    """Where one kernel call's arrays live: all numpy (host mode: staged through device `device`)
    or all on one GPU (device mode). Construction does the mixing checks; `dev(name)` gives the
    argument on the GPU; `out(d)` returns a result the way the caller's inputs came."""

    def __init__(self, *named, device=None):
        self.args, host, gpu = {}, [], []
        for name, a in named:
            if a is None:
                self.args[name] = None
            elif isinstance(a, np.ndarray):
                host.append(name)
                self.args[name] = a
            elif is_device_array_like(a):
                d = as_device_array(a, name)
                gpu.append((name, d.device))
                self.args[name] = d
            else:
                raise TypeError(f"{name} must be a numpy array or a GPU array (DeviceArray, or an object with "
                                f"__cuda_array_interface__ or __dlpack__), got {type(a).__name__}")
        if host and gpu:
            raise TypeError(f"{host[0]} is a numpy (host) array but {gpu[0][0]} lives on GPU {gpu[0][1]}: pass "
                            f"every array on the host or every array on one GPU (DeviceArray.from_numpy copies "
                            f"one over)")
        devices = sorted({d for _, d in gpu})
        if len(devices) > 1:
            first = next(n for n, d in gpu if d == devices[0])
            other = next(n for n, d in gpu if d == devices[1])
            raise ValueError(f"{first} lives on GPU {devices[0]} but {other} on GPU {devices[1]}: one call runs "
                             f"on one GPU")
        if host and getattr(_capturing, "active", False):
            raise RuntimeError(f"{host[0]} is a numpy array: a CUDA graph capture takes GPU arrays only (copies "
                               f"from the host cannot be captured)")
        self.on_device = bool(gpu)
        self.device = devices[0] if gpu else (0 if device is None else A.integer("device", device, 0))
        self._staged = {}

    def __getitem__(self, name):
        return self.args[name]

    def dev(self, name, as_dtype=None):
        """The argument as a DeviceArray (numpy arguments copied over once)."""
        a = self.args[name]
        if a is None:
            return None
        if name not in self._staged:
            if isinstance(a, np.ndarray):
                self._staged[name] = DeviceArray.from_numpy(a, self.device)
            else:
                self._staged[name] = a
        d = self._staged[name]
        return d.view(as_dtype) if as_dtype is not None and d.dtype != as_dtype else d

    def new(self, shape, dtype, zero=False):
        return (DeviceArray.zeros if zero else DeviceArray)(shape, dtype, self.device)

    def out(self, d):
        return d if self.on_device else d.numpy()

    def require_gpu(self):
        ok, why = available()
        if not ok:
            raise RuntimeError(f"no CUDA device: {why}")


def _ptr(d):
    return 0 if d is None else d.ptr


def _out(c, out, shape, dtype, name):
    """A preallocated output (GPU calls only), checked; else a new one."""
    if out is None:
        c.require_gpu()
        return c.new(shape, dtype)
    if not c.on_device:
        raise TypeError(f"{name} applies to GPU arrays only (host calls return new numpy arrays)")
    d = as_device_array(out, name)
    if d.device != c.device:
        raise ValueError(f"{name} lives on GPU {d.device} but the inputs on GPU {c.device}")
    if d.shape != tuple(shape) or d.dtype != dtype:
        raise ValueError(f"{name} must be {dtype} {tuple(shape)}, got {d.dtype} {d.shape}")
    c.require_gpu()
    return d


def _check(name, a, dtypes, ndim=None):
    """A.arr's checks for numpy and GPU arrays alike (GPU arrays are always C-contiguous)."""
    if isinstance(a, np.ndarray):
        return A.arr(name, a, dtypes, ndim)
    if a.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {allowed}, got {a.dtype}")
    if ndim is not None and a.ndim not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    return a


def _ids(call, name, ndim):
    """int32 ids: numpy int64 converted (as A.ids does), GPU ids must already be int32."""
    a = call[name]
    if isinstance(a, np.ndarray):
        call.args[name] = A.ids(name, a, ndim)
    else:
        _check(name, a, (I32,), ndim)
    return call[name]


def _host_range(name, a, lo, hi):
    if isinstance(a, np.ndarray) and a.size and (a.min() < lo or a.max() >= hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}), got values in [{a.min()}, {a.max()}]")


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
    n_group, topk_group, top_k, route_scale, _ = A.check_gate(E, bias is not None, n_group, topk_group, top_k,
                                                              route_scale, score_func)
    if n_group > 64:
        raise ValueError(f"n_group: the CUDA gate handles at most 64 groups, got {n_group}")
    c.require_gpu()
    w, ids = c.new((T, top_k), F32), c.new((T, top_k), I32)
    _G.moe_gate(c.dev("logits").ptr, T, E, _ptr(c.dev("bias")), n_group, topk_group, top_k, route_scale,
                score_func == "sigmoid", w.ptr, ids.ptr, c.device)
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


# ---- grouped GEMM and experts ------------------------------------------------------------------
def _check_offsets(c, E, M):
    offs = c["offsets"]
    if isinstance(offs, np.ndarray):
        offs = A.arr("offsets", offs, (I64, I32), 1)
        if offs.dtype != I64:
            c.args["offsets"] = offs = offs.astype(np.int64)
    else:
        _check("offsets", offs, (I64,), 1)
    if offs.shape[0] != E + 1:
        raise ValueError(f"offsets must have experts + 1 = {E + 1} entries, got {offs.shape[0]}")
    if isinstance(offs, np.ndarray) and (offs[0] != 0 or offs[-1] != M or np.any(np.diff(offs) < 0)):
        raise ValueError(f"offsets must start at 0, not decrease, and end at the rows of x ({M})")


def _check_counts(c, E, capacity):
    _ids(c, "counts", 1)
    counts = c["counts"]
    if counts.shape[0] != E:
        raise ValueError(f"counts must have {E} entries (one per expert), got {counts.shape[0]}")
    if isinstance(counts, np.ndarray) and (np.any(counts < 0) or np.any(counts > capacity)):
        raise ValueError(f"counts must lie in [0, capacity = {capacity}]")


def grouped_gemm(a, b, *, offsets=None, counts=None, a_scale=None, b_scale=None, out=None, validate=True):
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
    out = _out(c, out, c["a"].shape[:-1] + (N,), F32, "out")
    check_values = bool(validate) or not c.on_device
    _G.grouped_gemm(c.dev("a").ptr, _ptr(c.dev("a_scale")), c.dev("b").ptr, _ptr(c.dev("b_scale")), out.ptr, M, N,
                    Kd, E, masked, _ptr(c.dev("offsets")), _ptr(c.dev("counts")), capacity, check_values, c.device)
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


# ---- MLA decode --------------------------------------------------------------------------------
class MlaMetadata:
    """The plan of a split-KV decode (FlashMLA's tile-scheduler metadata): work items
    (request, first block, end block, split) over blocks of `block_size` tokens, and each request's
    first partial slot. `items` and `split_offsets` are numpy; `on(device)` gives them on a GPU."""

    def __init__(self, items, split_offsets, rows_per_request, block_size):
        self.items, self.split_offsets = items, split_offsets
        self.rows_per_request, self.block_size = rows_per_request, block_size
        self._dev = {}

    @property
    def num_items(self) -> int:
        return int(self.items.shape[0])

    @property
    def num_partials(self) -> int:
        return int(self.split_offsets[-1])

    @property
    def batch(self) -> int:
        return int(self.split_offsets.shape[0] - 1)

    def splits(self) -> np.ndarray:
        return np.diff(self.split_offsets)

    def on(self, device, kv_lora):
        """(items, split_offsets, partial outputs, partial LSEs) on `device`: made once, reused by
        every call with this plan (no allocation, hence no synchronisation, per call)."""
        key = (device, kv_lora)
        if key not in self._dev:
            self._dev[key] = (DeviceArray.from_numpy(self.items, device),
                              DeviceArray.from_numpy(self.split_offsets, device),
                              DeviceArray((self.num_partials, self.rows_per_request, kv_lora), F32, device),
                              DeviceArray((self.num_partials, self.rows_per_request), F32, device))
        return self._dev[key]


def get_mla_metadata(seqlens, q_len, heads, *, num_splits=None, block_size=64, sm_count=None, device=0):
    """Plans mla_decode over requests of seqlens[b] tokens (q_len new ones each, heads query
    heads). num_splits: a fixed number of KV splits per request (at most its block count); None
    sizes them so that about two work items per SM exist (sm_count: the GPU's, asked when None)."""
    if isinstance(seqlens, np.ndarray):
        s = A.ids("seqlens", seqlens, 1)
    else:
        d = as_device_array(seqlens, "seqlens")
        _check("seqlens", d, (I32,), 1)
        s = d.numpy()  # planning is host work (FlashMLA's plan is a GPU kernel; here it is cheap)
    q_len, heads = A.integer("q_len", q_len, 1), A.integer("heads", heads, 1)
    block_size = A.integer("block_size", block_size, 1)
    if num_splits is not None:
        num_splits = A.integer("num_splits", num_splits, 1)
    if sm_count is None:
        sm_count = 1 if num_splits is not None else int(_G.sm_count(A.integer("device", device, 0)))
    sm_count = A.integer("sm_count", sm_count, 1)
    if s.size and s.min() < 0:
        raise ValueError(f"seqlens must be >= 0, got {s.min()}")
    # The 64-row decode kernel (the default; DSPERF_MLA_MMA=0 selects the 16-row one) needs more
    # splits to fill the GPU than the 16-row one.
    rows_per_block = 16 if os.environ.get("DSPERF_MLA_MMA") == "0" else 64
    items, offsets = _G.mla_plan(s, block_size, q_len * heads, num_splits or 0, sm_count, rows_per_block)
    return MlaMetadata(items, offsets, q_len * heads, block_size)


def mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale, metadata=None,
               latent_scale=None, num_splits=None, *, out=None, validate=True):
    """Absorbed MLA decode over a paged latent cache, with dsperf.kernels.mla_decode's arguments
    and semantics: q_nope BF16 [B, Q, H, kv_lora], q_rope BF16 [B, Q, H, rope]; latent_cache
    [blocks, block_size, kv_lora] BF16, or FP8 with latent_scale FP32 [blocks, block_size,
    kv_lora/128]; rope_cache BF16 [blocks, block_size, rope]; block_table int32 [B, max_blocks];
    seqlens int32 [B]. metadata: from get_mla_metadata (planned here when None, with num_splits);
    it also holds the partial-result workspace, so one plan serves one call at a time.
    Returns (out FP32 [B, Q, H, kv_lora], lse FP32 [B, Q, H]). GPU arrays only: out = (out, lse)
    preallocated, and validate=False skips the device-side check of seqlens and block ids (a
    synchronisation) -- bad values then read out of bounds instead of raising."""
    c = _Call(("q_nope", q_nope), ("q_rope", q_rope), ("latent_cache", latent_cache), ("rope_cache", rope_cache),
              ("block_table", block_table), ("seqlens", seqlens), ("latent_scale", latent_scale))
    for name in ("q_nope", "q_rope"):
        _check(name, c[name], (BF16,), 4)
    _check("latent_cache", c["latent_cache"], (BF16, FP8), 3)
    _check("rope_cache", c["rope_cache"], (BF16,), 3)
    fp8 = c["latent_cache"].dtype == FP8
    if fp8 != (latent_scale is not None):
        raise ValueError("an FP8 latent_cache needs latent_scale, and a BF16 one takes none")
    bt, sl = _ids(c, "block_table", 2), _ids(c, "seqlens", 1)
    B, Q, H, L = c["q_nope"].shape
    R = c["q_rope"].shape[3]
    nblocks, bs, _ = c["latent_cache"].shape
    if c["q_rope"].shape[:3] != (B, Q, H):
        raise ValueError(f"q_rope must match q_nope's [batch, q_len, heads] {(B, Q, H)}, got {c['q_rope'].shape[:3]}")
    if c["rope_cache"].shape[:2] != (nblocks, bs):
        raise ValueError("latent_cache and rope_cache must have the same [blocks, block_size]")
    if L != c["latent_cache"].shape[2] or R != c["rope_cache"].shape[2]:
        raise ValueError("q_nope / q_rope widths must match latent_cache / rope_cache")
    if fp8:
        _check("latent_scale", c["latent_scale"], (F32,), 3)
        if c["latent_scale"].shape != (nblocks, bs, -(-L // 128)):
            raise ValueError(f"latent_scale must have shape {(nblocks, bs, -(-L // 128))}, got "
                             f"{c['latent_scale'].shape}")
    if bt.shape[0] != B or sl.shape[0] != B:
        raise ValueError(f"block_table and seqlens must have one row per request ({B})")
    if L % 16 or not 16 <= L <= 512 or R % 16 or R < 16:
        raise ValueError(f"the GPU kernel needs kv_lora a multiple of 16 in [16, 512] and rope a positive multiple "
                         f"of 16, got {L} and {R}")
    if isinstance(softmax_scale, bool) or not (isinstance(softmax_scale, numbers.Real) and softmax_scale > 0):
        raise ValueError(f"softmax_scale must be a positive number, got {softmax_scale!r}")
    if isinstance(sl, np.ndarray):  # the CPU's value checks for host inputs (GPU inputs: checked there)
        for b in range(B):
            if not Q <= sl[b] <= bt.shape[1] * bs:
                raise ValueError(f"seqlens[{b}] = {sl[b]} must lie in [q_len = {Q}, the block table's "
                                 f"{bt.shape[1] * bs} tokens]")
            used = bt[b, :-(-int(sl[b]) // bs)]
            if used.size and (used.min() < 0 or used.max() >= nblocks):
                raise ValueError(f"block_table[{b}] holds blocks outside the cache's {nblocks}")
    if metadata is None:
        metadata = get_mla_metadata(sl if isinstance(sl, np.ndarray) else sl, Q, H, num_splits=num_splits,
                                    block_size=bs, device=c.device)
    elif not isinstance(metadata, MlaMetadata):
        raise TypeError(f"metadata must come from get_mla_metadata, got {type(metadata).__name__}")
    if metadata.batch != B or metadata.block_size != bs or metadata.rows_per_request != Q * H:
        raise ValueError("metadata was planned for another batch, block size or q_len x heads")
    if out is not None and not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError("out must be a tuple (out, lse)")
    o = _out(c, None if out is None else out[0], (B, Q, H, L), F32, "out[0]")
    lse = _out(c, None if out is None else out[1], (B, Q, H), F32, "out[1]")
    items, offs, part_o, part_lse = metadata.on(c.device, L)
    _G.mla_decode(c.dev("q_nope").ptr, c.dev("q_rope").ptr, c.dev("latent_cache").ptr, _ptr(c.dev("latent_scale")),
                  c.dev("rope_cache").ptr, c.dev("block_table").ptr, c.dev("seqlens").ptr, items.ptr, offs.ptr,
                  metadata.num_items, metadata.num_partials, B, Q, H, L, R, nblocks, bs, bt.shape[1],
                  float(softmax_scale), o.ptr, lse.ptr, part_o.ptr, part_lse.ptr, bool(validate) or not c.on_device,
                  c.device)
    return c.out(o), c.out(lse)


# ---- MLA prefill -------------------------------------------------------------------------------
def mla_prefill(q, k, v, softmax_scale):
    """Non-absorbed causal MLA attention of one sequence (prefill): q BF16 [q_len, heads, dqk]
    (nope | rope per head), k BF16 [kv_len, heads, dqk] (k_nope | the shared k_pe broadcast), v BF16
    [kv_len, heads, dv]; query t sits at position kv_len - q_len + t and sees keys up to it (a
    cached prefix of kv_len - q_len tokens comes first). Returns (out FP32 [q_len, heads, dv],
    lse FP32 [q_len, heads]). Probabilities are rounded to BF16 for the value product."""
    c = _Call(("q", q), ("k", k), ("v", v))
    for name in ("q", "k", "v"):
        _check(name, c[name], (BF16,), 3)
    T, H, dqk = c["q"].shape
    S = c["k"].shape[0]
    if c["k"].shape != (S, H, dqk):
        raise ValueError(f"k must be [kv_len, heads = {H}, {dqk}], got {c['k'].shape}")
    if c["v"].shape[:2] != (S, H):
        raise ValueError(f"v must be [kv_len = {S}, heads = {H}, dv], got {c['v'].shape}")
    dv = c["v"].shape[2]
    if S < T:
        raise ValueError(f"k must hold at least the {T} query tokens, got {S}")
    if dqk % 16 or not 16 <= dqk <= 256 or dv % 16 or not 16 <= dv <= 128:
        raise ValueError(f"the GPU kernel needs dqk a multiple of 16 in [16, 256] and dv a multiple of 16 in "
                         f"[16, 128], got {dqk} and {dv}")
    if isinstance(softmax_scale, bool) or not (isinstance(softmax_scale, numbers.Real) and softmax_scale > 0):
        raise ValueError(f"softmax_scale must be a positive number, got {softmax_scale!r}")
    c.require_gpu()
    out, lse = c.new((T, H, dv), F32), c.new((T, H), F32)
    _G.mla_prefill(c.dev("q").ptr, c.dev("k").ptr, c.dev("v").ptr, T, S, H, dqk, dv, float(softmax_scale), out.ptr,
                   lse.ptr, c.device)
    return c.out(out), c.out(lse)
