"""Argument checks shared by the CPU kernels (dsperf.kernels) and their GPU twins (dsperf.cuda):
each raises TypeError or ValueError naming the argument."""
from __future__ import annotations

import math
import numbers
import os

import ml_dtypes
import numpy as np

from . import _C

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)


def arr(name, a, dtypes, ndim=None):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {allowed}, got {a.dtype}")
    if ndim is not None and a.ndim not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (np.ascontiguousarray makes a copy)")
    return a


def bits(a):
    """The raw bit pattern the C++ side reads: uint16 for BF16, uint8 for FP8."""
    if a.dtype == BF16:
        return a.view(np.uint16)
    if a.dtype == FP8:
        return a.view(np.uint8)
    return a


I32 = np.iinfo(np.int32)
I64_MAX = 2 ** 63 - 1
F32_MAX = float(np.finfo(np.float32).max)


def ids(name, a, ndim):
    """int32 indices: an int64 array is range-checked in 64 bits before it is narrowed, so that
    2**32 + 3 cannot alias index 3 (every valid index, position or count fits int32)."""
    a = arr(name, a, (np.dtype(np.int32), np.dtype(np.int64)), ndim)
    if a.dtype == np.int32:
        return a
    bad = np.flatnonzero((a < I32.min) | (a > I32.max))
    if bad.size:
        where = np.unravel_index(bad[0], a.shape)
        raise ValueError(f"{name}[{', '.join(map(str, where))}] = {a[where]} does not fit int32 (no index that large "
                         f"is valid)")
    return a.astype(np.int32)


def integer(name, v, minimum=None, maximum=I64_MAX):
    """A Python or numpy integer (not a bool, not a float with an integral value) in
    [minimum, maximum]; the default maximum is what the kernels' int64 arguments hold."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return int(v)


def real(name, v, *, minimum=None, positive=False):
    """A finite real number (not a bool, not a string) that FP32 holds, as the kernels take it:
    1e300 would become inf and a positive 1e-50 would become 0 on the way in."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) or abs(f) > F32_MAX:
        raise ValueError(f"{name} must be a finite FP32 number, got {v!r}")
    if positive and not np.float32(f) > 0:
        raise ValueError(f"{name} must be positive (a positive number), got {v!r}")
    if minimum is not None and f < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return f


def boolean(name, v):
    """True or False only: 'no' and 'false' are strings, not flags."""
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {v!r}")
    return bool(v)


def memory_bytes():
    """The memory this process may have (physical memory, or less under an address-space limit):
    an array larger than it cannot be allocated and filled, and with overcommit the allocation
    succeeds and the process dies filling it."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 2 ** 46
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            total = min(total, soft - mapped)
    except (ImportError, OSError, ValueError):
        pass
    return total


def check_bytes(name, nbytes, what):
    if nbytes > memory_bytes():
        raise ValueError(f"{name}: {what} would need {nbytes / 2**30:.3g} GiB, more than this machine's "
                         f"{memory_bytes() / 2**30:.3g} GiB of memory")


def cache_array(name, a, dtypes, ndim):
    """An array a kernel writes into: exactly the dtype, C-contiguous and writeable, because any
    conversion would write into a temporary copy and leave the cache without the new rows."""
    arr(name, a, dtypes, ndim)
    if not a.flags.writeable:
        raise ValueError(f"{name} must be writeable")
    return a


def gate_args(n_group, topk_group, top_k, route_scale, score_func):
    """The gate's settings, each checked, as the one object every gate binding takes
    (dsperf._C.kernels.GateConfig)."""
    if score_func not in ("sigmoid", "softmax"):
        raise ValueError(f"score_func must be 'sigmoid' or 'softmax', got {score_func!r}")
    return _C.kernels.GateConfig(n_group=integer("n_group", n_group, 1), topk_group=integer("topk_group", topk_group, 1),
                                 top_k=integer("top_k", top_k, 1),
                                 route_scale=real("route_scale", route_scale, positive=True), score_func=score_func)


def check_gate(n_experts, has_bias, n_group, topk_group, top_k, route_scale, score_func):
    """The gate's configuration (GateConfig) checked against the expert count: the C++ core's own
    rules, one home for the CPU and GPU gates."""
    config = gate_args(n_group, topk_group, top_k, route_scale, score_func)
    config.validate(int(n_experts), bool(has_bias))
    return config
