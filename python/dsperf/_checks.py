"""Argument checks shared by the cost-model API, the loaders, EPLB and the CLI.

Every public entry point checks each argument here, once, before the C++ core sees it (the core
trusts its callers). The rules: bool is not a number and strings are not bools; floats are not
integers; every value is finite and lies between sane bounds, so that no C++ int is narrowed, no
size overflows and no result becomes inf or NaN; errors name the argument.
"""
from __future__ import annotations

import numbers

import numpy as np

# Upper bounds on the cost model's inputs (docs/ARCHITECTURE.md, "Input bounds"). They are far above
# any real deployment and low enough that every product the model forms stays finite in doubles and
# every count fits the C++ ints it is passed as.
MAX_TOKENS = 2 ** 30        # seq_len, decode_len, batch, kv_len_avg, kernel token counts
MAX_COUNT = 2 ** 20         # tp, dp, ep, redundant experts, dispatch nodes, GPUs


def number(name: str, value, *, integer: bool = False, lo=None, hi=None, lo_open: bool = False):
    """value as an int (integer=True: int or numpy integer, never a float or bool) or a float
    (any real but bool), finite, in [lo, hi] (lo excluded with lo_open). Raises TypeError for a wrong
    type, ValueError for a bad value; both name the argument."""
    if integer:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        value = int(value)
    else:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:  # an int beyond a double's range
            raise ValueError(f"{name} must be finite, got {value!r}") from None
        if not np.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {_bound(lo)}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {_bound(hi)}, got {value!r}")
    return value


def _bound(x) -> str:
    """A bound as written in the docs: 2**30 rather than 1.07374e+09."""
    if isinstance(x, int) and x > 1024 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    return f"{x:g}"


def number_list(name: str, values, *, integer: bool = False, lo=None, hi=None, lo_open: bool = False,
                max_len: int | None = None) -> list:
    """A scalar or a non-empty sequence of numbers as a list, each checked as by number()."""
    if isinstance(values, (numbers.Real, np.generic)) and not isinstance(values, (str, bytes)):
        values = [values]
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a number or a sequence of numbers, got {values!r}")
    if len(values) == 0:
        raise ValueError(f"{name} must not be empty")
    if max_len is not None and len(values) > max_len:
        raise ValueError(f"{name} has {len(values)} values, more than the {max_len} allowed")
    arr = values if isinstance(values, np.ndarray) else None
    if isinstance(values, range):
        arr = np.arange(values.start, values.stop, values.step, dtype=np.int64) if values else None
    elif isinstance(values, (list, tuple)) and set(map(type, values)) <= ({int} if integer else {int, float}):
        # Plain Python numbers (no bools, whose type is bool): safe to convert in one go. Ints beyond
        # int64 make numpy raise OverflowError or give an object array; those go element by element.
        try:
            arr = np.asarray(values)
        except OverflowError:
            arr = None
    if arr is not None and arr.ndim == 1 and (np.issubdtype(arr.dtype, np.integer) or
                                              (not integer and np.issubdtype(arr.dtype, np.floating))):
        # A numeric array: checked in one vectorised pass (sweeps pass thousands of values).
        a = arr.astype(np.float64)
        bad = ~np.isfinite(a)
        if lo is not None:
            bad |= (a <= lo) if lo_open else (a < lo)
        if hi is not None:
            bad |= a > hi
        if bad.any():
            number(name, arr[np.argmax(bad)].item(), integer=integer, lo=lo, hi=hi, lo_open=lo_open)
        return arr.astype(np.int64).tolist() if integer else a.tolist()
    return [number(name, v.item() if isinstance(v, np.generic) else v, integer=integer, lo=lo, hi=hi,
                   lo_open=lo_open) for v in values]


def flag(name: str, value) -> bool:
    """A bool argument: True/False (numpy's too), nothing else (the string 'no' is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def text(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    return value


def finite_results(what: str, columns, rows=None) -> None:
    """Raise ValueError when a result holds inf or NaN: the inputs lie beyond what the model's
    arithmetic represents, and a silent inf would read as a real answer. Every public result of
    the grounded model, the explorer and the seed model passes here before it is returned.
    columns: a mapping name -> scalar or array (other values, such as strings or lists of calls,
    are not results and are skipped); rows: a boolean mask of the rows that must be finite (the
    explorer's feasible rows; its infeasible ones carry NaN on purpose)."""
    for key, v in columns.items():
        if isinstance(v, (list, dict, str)):
            continue
        a = np.asarray(v)
        if a.dtype.kind != "f":
            continue
        if rows is not None and a.ndim == 1 and len(a) == len(rows):
            a = a[np.asarray(rows, dtype=bool)]
        if not np.isfinite(a).all():
            bad = a.ravel()[~np.isfinite(a.ravel())][0]
            raise ValueError(f"{what}: the result '{key}' is {bad} for these inputs (they lie beyond the "
                             "range the model's arithmetic represents)")


def read_small_file(path, max_bytes: int, what: str) -> str:
    """A small text file's contents; unreadable, larger than max_bytes or not UTF-8 is a ValueError
    naming the file as `what` ("device file", "model file")."""
    import os

    try:
        with (open(path, "rb") if isinstance(path, (str, os.PathLike)) else path.open("rb")) as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"{what} '{path}' cannot be read: {e.strerror or e}") from None
    if len(raw) > max_bytes:
        raise ValueError(f"{what} '{path}' is larger than {max_bytes} bytes; not a {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} '{path}' is not UTF-8 text: {e}") from None


# ---- the expert layouts: one check for the CPU kernels (dsperf.kernels) and the CUDA ones (dsperf.cuda)
def expert_offsets(offsets, experts: int, rows: int) -> None:
    """The contiguous layout's offsets (int64 [experts + 1]; expert e owns rows offsets[e]:offsets[e+1]
    of x): their length always, their values where they live on the host (a device array's values
    are checked on the device, by the kernel's own validation)."""
    if offsets.shape[0] != experts + 1:
        raise ValueError(f"offsets must have experts + 1 = {experts + 1} entries, got {offsets.shape[0]}")
    if isinstance(offsets, np.ndarray) and (offsets[0] != 0 or offsets[-1] != rows or np.any(np.diff(offsets) < 0)):
        raise ValueError(f"offsets must start at 0, not decrease, and end at the rows of x ({rows})")


def expert_counts(counts, experts: int, capacity: int) -> None:
    """The masked layout's counts (valid rows per expert, [experts]): length always, values on the host."""
    if counts.shape[0] != experts:
        raise ValueError(f"counts must have {experts} entries (one per expert), got {counts.shape[0]}")
    if isinstance(counts, np.ndarray) and (np.any(counts < 0) or np.any(counts > capacity)):
        raise ValueError(f"counts must lie in [0, capacity = {capacity}]")
