"""Arrays that end where readable memory ends: a copy of an array placed so that its last byte is
followed by an inaccessible page (and its first byte preceded by one). A kernel that reads one
element past either end of such an input faults instead of silently using a neighbour's bytes,
which AddressSanitizer does not see for masked vector loads. Linux only (mmap + mprotect)."""
import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
PROT_NONE = 0  # <sys/mman.h>; Python's mmap module does not export it


def guarded(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `a` whose bytes end at a page that cannot be read or written."""
    a = np.ascontiguousarray(a)
    data_pages = max(1, -(-a.nbytes // PAGE))
    buf = mmap.mmap(-1, (data_pages + 2) * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    for page in (0, data_pages + 1):  # the page before the data and the page after it
        if _libc.mprotect(base + page * PAGE, PAGE, PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = (data_pages + 1) * PAGE - a.nbytes
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=offset).reshape(a.shape)
    out[...] = a
    return out
