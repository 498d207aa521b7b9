"""Builds and loads the oneDNN matmul baseline (onednn_matmul.c) against Debian's oneDNN.

    apt-get install libdnnl-dev    # oneDNN 2.x with OpenMP threads (Debian 12: 2.6.3)

(PyPI's onednn-devel ships oneDNN 3.x, whose C API dropped the 2.x operation descriptors this
baseline uses.) `load()` returns a callable or raises RuntimeError saying what is missing; the
benchmarks print that as an error in their output."""
from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def load():
    if not Path("/usr/include/oneapi/dnnl/dnnl.h").exists():
        raise RuntimeError("oneDNN headers not found: apt-get install libdnnl-dev")
    out = Path(tempfile.mkdtemp(prefix="dsperf-onednn-")) / "libonednn_matmul.so"
    cmd = ["cc", "-O2", "-shared", "-fPIC", str(HERE / "onednn_matmul.c"), "-ldnnl", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building the oneDNN baseline failed: {r.stderr.strip()[:500]}")
    so = ctypes.CDLL(str(out))
    fn = so.onednn_matmul_bf16
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int, ctypes.c_int64]

    def matmul_bf16(x, w, reps=3, flush_bytes=0):
        """(y = x @ w.T in FP32, median of `reps` runs in seconds); flush_bytes > 0 evicts the caches
        before each timed run."""
        M, K = x.shape
        N = w.shape[0]
        y = np.empty((M, N), np.float32)
        t = fn(x.ctypes.data, w.ctypes.data, y.ctypes.data, M, N, K, reps, flush_bytes)
        if t < 0:
            raise RuntimeError("oneDNN matmul failed")
        return y, t

    return matmul_bf16
