"""Arrays that end (or begin) where readable memory ends: a copy of an array placed so that its
last byte is followed by an inaccessible page, or its first byte preceded by one. A kernel that
reads one element past that end of such an input faults instead of silently using a neighbour's
bytes, which AddressSanitizer does not see for masked vector loads. Linux only (mmap + mprotect)."""
import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
PROT_NONE = 0  # <sys/mman.h>; Python's mmap module does not export it


def guarded(a: np.ndarray, edge: str = "end") -> np.ndarray:
    """A C-contiguous copy of `a` whose bytes end (edge "end") or begin (edge "start") at a page
    that cannot be read or written; both neighbouring pages are inaccessible either way."""
    if edge not in ("end", "start"):
        raise ValueError(f"edge must be 'end' or 'start', got {edge!r}")
    a = np.ascontiguousarray(a)
    data_pages = max(1, -(-a.nbytes // PAGE))
    buf = mmap.mmap(-1, (data_pages + 2) * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    for page in (0, data_pages + 1):  # the page before the data and the page after it
        if _libc.mprotect(base + page * PAGE, PAGE, PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = (data_pages + 1) * PAGE - a.nbytes if edge == "end" else PAGE
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=offset).reshape(a.shape)
    out[...] = a
    return out
