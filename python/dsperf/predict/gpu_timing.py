"""Timing kernels on a CUDA GPU through PyTorch, and the grounded model's price of the same call:
the pieces benchmarks/gpu_model_check.py and `dsperf measure-gpu` (predict/measure_gpu.py) share.

Nothing here imports PyTorch at module level; every function that times takes the `torch` module
as its first argument, so the module imports (and its pure parts are tested) on a machine without
a GPU. A kernel's time is its own GPU time from PyTorch's profiler (CUPTI), averaged over the
launches, each launch after an L2 flush (a write of a buffer four times the L2), as DeepGEMM's and
FlashMLA's benchmarks time the kernels whose numbers fill the shipped tables.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time

import numpy as np


def gpu_device_name(torch) -> str | None:
    """The device file matching the GPU's name (H100 / H200 / H800 / H20), None if unknown."""
    name = torch.cuda.get_device_name(0).upper()
    for known in ("H200", "H800", "H100", "H20"):
        if known in name:
            return known
    return None


def time_us(torch, fn, iters: int, flush) -> float:
    """Median CUDA-event time (us) around each of `iters` launches of fn, each after an L2 flush:
    the kernel plus the launch gap."""
    fn()  # warm-up: library heuristics, workspace
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _is_gpu_kernel(evt) -> bool:
    return str(getattr(evt, "device_type", "")).endswith("CUDA")


def _device_us(evt) -> float:
    for attr in ("device_time_total", "cuda_time_total"):  # the name changed across PyTorch versions
        if hasattr(evt, attr):
            return float(getattr(evt, attr))
    raise AttributeError("the profiler's events carry no device time")


def flush_kernel_names(torch, flush) -> set:
    """The names of the kernels that flushing the L2 (flush.zero_()) launches."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        torch.cuda.synchronize()
    return {e.key for e in prof.key_averages() if _is_gpu_kernel(e)}


def kernel_times(torch, fn, iters: int, flush, flush_kernels: set) -> tuple[float, list[str]]:
    """(mean GPU time per call of the kernels fn launches, us; their names, longest first), the
    flush's kernels (flush_kernel_names) left out, from PyTorch's profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    events = [(e.key, _device_us(e)) for e in prof.key_averages() if _is_gpu_kernel(e) and e.key not in flush_kernels]
    total = sum(us for _, us in events)
    if total <= 0:
        raise RuntimeError("the profiler recorded no kernel")
    return total / iters, [k for k, _ in sorted(events, key=lambda e: -e[1])]


def kernel_us(torch, fn, iters: int, flush, flush_kernels: set) -> float:
    """Mean GPU time per call of the kernels fn launches (kernel_times without the names)."""
    return kernel_times(torch, fn, iters, flush, flush_kernels)[0]


def model_price_us(SM, tables, spec, family: str, shape) -> tuple[float, bool]:
    """The grounded model's latency of one call (us, at the tables' clock: clock ratio 1, as a
    short benchmark loop runs) on the device `spec` from its kernel tables, and whether a table
    row gave its efficiency (False: the default efficiency)."""
    work = SM.table_work(family, shape)
    eff = tables.lookup(family, shape, spec, 1.0)
    return SM.datasheet_roofline_s(work, spec, 1.0) / eff["value"] * 1e6, bool(eff["found"])


def predicted_us(SM, tables, spec, family: str, m: float, n: float, k: float) -> tuple[float, bool]:
    """model_price_us of one dense GEMM (gemm_fp8 / gemm_bf16) of m x n x k."""
    return model_price_us(SM, tables, spec, family, SM.KernelShape(m=m, n=n, k=k, fp8=family == "gemm_fp8"))


# ---- the SM clock while a block runs -----------------------------------------------------------
def parse_smi_sample(line):
    """One line of `nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit
    --format=csv,noheader,nounits`: (SM MHz, max SM MHz, watts, power limit W); a field nvidia-smi
    cannot read ('[N/A]', '[Not Supported]') is NaN."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 4:
        raise ValueError(f"expected 4 comma-separated fields from nvidia-smi, got {line!r}")

    def num(text):
        try:
            return float(text)
        except ValueError:
            return float("nan")
    return tuple(num(f) for f in fields)


class ClockSampler:
    """nvidia-smi's SM clock, max clock, power and power limit of one GPU, sampled every 0.25 s on a
    thread while the block runs: `samples` holds (seconds since the start, parse_smi_sample tuple).
    Without nvidia-smi, `available` is False and nothing is sampled."""

    def __init__(self, device=0, period_s=0.25):
        self.device, self.period_s = device, period_s
        self.available = shutil.which("nvidia-smi") is not None
        self.samples = []
        self.t0 = time.perf_counter()

    def _run(self):
        cmd = ["nvidia-smi", "-i", str(self.device), "--query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit",
               "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
            if out:
                self.samples.append((time.perf_counter() - self.t0, parse_smi_sample(out.splitlines()[0])))
            self._stop.wait(self.period_s)

    def now(self) -> float:
        """Seconds since the block began (the samples' time axis)."""
        return time.perf_counter() - self.t0

    def __enter__(self):
        self._stop = threading.Event()
        self.t0 = time.perf_counter()
        if self.available:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.available:
            self._thread.join()
        return False

    def summary(self, after_s=0.0):
        """(median SM MHz, max SM MHz, median W, power limit W, samples) of the samples taken at least
        after_s into the block, or None without any."""
        late = [v for t, v in self.samples if t >= after_s]
        if not late:
            return None
        arr = np.array(late, dtype=float)
        return (float(np.nanmedian(arr[:, 0])), float(np.nanmax(arr[:, 1])), float(np.nanmedian(arr[:, 2])),
                float(np.nanmax(arr[:, 3])), len(late))

    def window(self, start_s: float, end_s: float):
        """(median, min, max SM MHz, samples) of the samples taken between start_s and end_s; where
        none fell inside (a window shorter than the sampling period), the one sample nearest to its
        middle (samples 1, or 0 and NaNs without any sample)."""
        inside = [v[0] for t, v in self.samples if start_s <= t <= end_s and not np.isnan(v[0])]
        if not inside:
            usable = [(abs(t - (start_s + end_s) / 2), v[0]) for t, v in self.samples if not np.isnan(v[0])]
            if not usable:
                return (float("nan"),) * 3 + (0,)
            inside = [min(usable)[1]]
        return float(np.median(inside)), float(min(inside)), float(max(inside)), len(inside)
