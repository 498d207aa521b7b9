"""`dsperf calibrate`: measure this machine and write it as a device spec the cost model can use.

Measures the VDPBF16PS (BF16 dot) and FP32 FMA peaks of all threads, the streaming-read and STREAM-
triad bandwidths by thread count, and the cost of one call from Python into a C++ kernel. Each
figure is the best of several passes, with the spread between passes reported as its noise. The
result is written as a device TOML (same fields as the GPU specs, plus a [calibration] table of the
raw measurements) under ~/.cache/dsperf (or --out), and reused until asked to re-measure.
"""
from __future__ import annotations

import datetime
import os
import platform
import socket
import statistics
import time
from pathlib import Path

from . import _C
from . import kernels as K

CACHE_DIR = Path(os.environ.get("DSPERF_CACHE", Path.home() / ".cache" / "dsperf"))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError, AttributeError):
        return 0.0


def default_path() -> Path:
    return CACHE_DIR / f"cpu-{socket.gethostname()}.toml"


def _best_and_spread(fn, passes):
    values = [fn() for _ in range(passes)]
    best = max(values)
    return best, (best - min(values)) / best if best > 0 else 0.0


def _call_overhead_us(calls=2000):
    """Median wall time of the smallest kernel call (SiLU-mul of one 2-wide row), Python to C++ and back."""
    import numpy as np

    gu = np.ones((1, 2), np.float32)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        K.silu_mul(gu)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(quick=False) -> dict:
    """Run every probe; quick uses smaller buffers and shorter loops (seconds instead of tens)."""
    k = _C.kernels
    seconds, passes = (0.2, 2) if quick else (1.0, 3)
    buf = (512 << 20) if quick else (1 << 30)  # beyond the L3 either way
    threads = k.max_threads()
    m = {"cpu_model": _cpu_model(), "isa": K.isa(), "threads": threads, "amx_usable": K.cpu_features()["amx_bf16"]}
    m["bf16_dot_peak_gflops"], m["bf16_dot_peak_spread"] = _best_and_spread(lambda: k.probe_bf16_peak_gflops(seconds), passes)
    m["fp32_fma_peak_gflops"], m["fp32_fma_peak_spread"] = _best_and_spread(
        lambda: k.probe_fp32_fma_peak_gflops(seconds), passes)
    for t in range(1, threads + 1):
        m[f"read_gbps_{t}t"], m[f"read_spread_{t}t"] = _best_and_spread(lambda: k.probe_read_bandwidth_gbps(buf, 2, t), passes)
        m[f"triad_gbps_{t}t"], m[f"triad_spread_{t}t"] = _best_and_spread(
            lambda: k.probe_triad_bandwidth_gbps(buf, 2, t), passes)
    m["call_overhead_us"] = _call_overhead_us(500 if quick else 5000)
    m["mem_gb"] = _mem_gb()
    m["measured_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return m


def to_toml(m: dict, name: str) -> str:
    """The measurements as a device file: rates are achieved rates, so derate and discount are 1."""
    threads = m["threads"]
    lines = [
        f"# {name}: measured by `dsperf calibrate` on {m['measured_at']} ({m['cpu_model']}, isa {m['isa']}).",
        "# Compute: the better of the VDPBF16PS and FP32 FMA peaks of all threads (BF16 work can run on",
        "# either); memory: the streaming read of all threads; links: loopback through memory.",
        f'name = "{name}"',
        f"sm_count = {threads}",
        "comm_sms_prefill = 0",
        "comm_sms_decode = 0",
        f"fp16_tflops = {max(m['bf16_dot_peak_gflops'], m['fp32_fma_peak_gflops']) / 1000:.6f}",
        "fp8_tflops = 0.0",
        "compute_derate = 1.0",
        f"mem_gb = {m['mem_gb']:.2f}",
        f"mem_bw_gbps = {m[f'read_gbps_{threads}t']:.3f}",
        f"nvlink_gbps = {m[f'triad_gbps_{threads}t']:.3f}",
        f"scaleout_gbps = {m[f'triad_gbps_{threads}t']:.3f}",
        "discount = 1.0",
        "gpus_per_node = 1",
        "",
        "[calibration]",
    ]
    for key, value in m.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    return "\n".join(lines).replace("True", "true").replace("False", "false") + "\n"


def calibrate(force=False, quick=False, path=None):
    """(path, measurements): reuses the file at path unless force; else measures and writes it."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    path = Path(path) if path else default_path()
    if path.is_dir():
        raise ValueError(f"out: '{path}' is a directory; give the path of a .toml file")
    if path.exists() and not force:
        with open(path, "rb") as f:
            return path, dict(tomllib.load(f).get("calibration", {}), reused=True)
    m = measure(quick=quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_toml(m, f"CPU-{socket.gethostname()}"))
    return path, dict(m, reused=False)
