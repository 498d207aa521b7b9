"""What every kernel family module shares: the extension, the CPU features, placement (numpy here,
GPU arrays on the GPU) and the argument checks (dsperf._arrays, shared with dsperf.cuda)."""
from __future__ import annotations

import math

import numpy as np

from .. import _C

from .._arrays import BF16, FP8

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
    """"usable" where the GEMMs of a few rows and more (``_C.kernels.amx_min_rows()``) run on AMX
    tiles (the CPU has them, Linux granted the tile permission, DSPERF_AMX is not 0 and the hardware
    agreed with the emulated tiles at load time), else why not."""
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
        from ..cuda.arrays import is_device_array_like
        if is_device_array_like(a):
            return True
    return False


def _cuda():
    from .. import cuda
    return cuda


# ---- argument checks (shared with dsperf.cuda: dsperf._arrays) -------------------------------------
from .._arrays import (arr as _arr, bits as _bits, boolean as _bool, cache_array as _cache_array,  # noqa: E402
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


__all__ = ['BF16', 'F32', 'FP8', '_C', '_K', '_arr', '_bits', '_bool', '_cache_array', '_check_bytes', '_cuda', '_expert_weights', '_gate_args', '_ids', '_int', '_on_gpu', '_real', '_shared_expert', 'amx_status', 'cpu_features', 'isa', 'math', 'np']
