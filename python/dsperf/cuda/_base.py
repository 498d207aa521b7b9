"""What every dsperf.cuda family module shares: the binding, dtypes, and the placement and argument
checks of a call (host or GPU arrays, one device, outputs)."""
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


def available() -> tuple[bool, str]:
    """(True, "") where a CUDA kernel can run, else (False, why)."""
    why = _G.why_unavailable()
    return (not why, why)



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



__all__ = ['available', '_capturing', 'KERNEL_VARIANTS', 'KERNEL_SWITCHES', 'MLA_MMA_ENV', 'WGMMA_ENV', '_kernel_variant', '_require_sm90', 'A', 'BF16', 'DeviceArray', 'F32', 'FP8', 'I32', 'I64', '_C', '_CA', '_Call', '_G', '_check', '_host_range', '_ids', '_out', '_ptr', 'as_device_array', 'contextlib', 'from_cuda_array_interface', 'from_dlpack', 'is_device_array_like', 'np', 'numbers', 'os', 'threading']


# ---- kernel variants: the mma.sync kernels (every GPU) and the Hopper ones (sm_90a) ---------------
KERNEL_VARIANTS = ("mma", "wgmma")
WGMMA_ENV = "DSPERF_CUDA_WGMMA"
MLA_MMA_ENV = "DSPERF_MLA_MMA"  # "0": the 16-row mma.sync MLA decode kernel (read here and by mla_decode_mma.cu)
# Every environment switch that picks a CUDA kernel: this one, and those the .cu files read with
# getenv (grouped_gemm.cu: DSPERF_BF16_MMA, DSPERF_FP8_MMA; mla_decode_mma.cu: DSPERF_MLA_MMA).
# tests/test_cuda_hopper.py checks that each name is read where this says.
KERNEL_SWITCHES = (WGMMA_ENV, "DSPERF_BF16_MMA", "DSPERF_FP8_MMA", MLA_MMA_ENV)


def _kernel_variant(variant, hopper_inputs, fits, device):
    """The kernel a call takes. variant=None: "wgmma" where the GPU is sm_90 and the call's inputs fit
    a Hopper kernel (fits: its shape and dtype rules hold), else "mma" -- on an H200 the wgmma kernels
    ran faster at every one of the 102 shapes measure-gpu timed both at (1.5x to 4.8x; docs/CUDA.md).
    DSPERF_CUDA_WGMMA=0 keeps every call on mma.sync; =1 insists on wgmma for the calls a Hopper kernel
    serves (hopper_inputs), so that a call it cannot run is an error rather than a quiet fallback.
    Returns (variant, how it was asked for)."""
    if variant is None:
        env = os.environ.get(WGMMA_ENV)
        if env == "1" and hopper_inputs:
            return "wgmma", f"{WGMMA_ENV}=1 (variant='wgmma')"
        # Without a usable GPU the mma.sync path is taken, and its own checks say why it cannot run.
        auto = env != "0" and fits and not _G.why_unavailable() and not _G.wgmma_unsupported_reason(device)
        return ("wgmma" if auto else "mma"), "variant=None on an sm_90 GPU (variant='wgmma')"
    if variant not in KERNEL_VARIANTS:
        raise ValueError(f"variant must be one of {KERNEL_VARIANTS} or None, got {variant!r}")
    return variant, "variant='wgmma'"


def _require_sm90(c, asked):
    """A Hopper kernel's device check, the C++ rule's (hopper_api.hpp's wgmma_unsupported_reason),
    named as the caller asked for the kernel."""
    c.require_gpu()
    why = _G.wgmma_unsupported_reason(c.device)
    if why:
        raise ValueError(f"{asked} needs an sm_90 GPU (H100 / H200): {why}. Use variant='mma'")
