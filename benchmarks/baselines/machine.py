"""What the benchmarks say about the machine and their timings: cache sizes read from the machine,
median timings, and whether a working set fits a cache level."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def cache_sizes() -> dict:
    """{'L1d': bytes, 'L2': bytes, 'L3': bytes} of cpu0, from sysfs, or from sysconf where sysfs is
    missing. A level that neither reports is left out (callers then say it is unknown)."""
    sizes = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        sizes[f"L{level}" + ("d" if level == "1" else "")] = int(text.rstrip("KMG")) * mult
    for name, key in (("L1d", "SC_LEVEL1_DCACHE_SIZE"), ("L2", "SC_LEVEL2_CACHE_SIZE"), ("L3", "SC_LEVEL3_CACHE_SIZE")):
        if name not in sizes and key in os.sysconf_names:
            v = os.sysconf(key)
            if v and v > 0:
                sizes[name] = v
    return sizes


def describe_caches(sizes: dict) -> str:
    return ", ".join(f"{k} {v >> 10} KiB" if v < (1 << 20) else f"{k} {v >> 20} MiB" for k, v in sizes.items())


def residency(nbytes: int, sizes: dict) -> str:
    """Where a working set of nbytes can live across repeated runs: the smallest level that holds it."""
    for level in ("L2", "L3"):
        if level in sizes and nbytes <= sizes[level]:
            return f"fits {level} ({nbytes / 2**20:.1f} MiB <= {sizes[level] >> 20} MiB): cache-resident across repeats"
    l3 = sizes.get("L3")
    if l3 is None:
        return f"{nbytes / 2**20:.0f} MiB; L3 size unknown"
    return f"{nbytes / 2**20:.0f} MiB > L3 {l3 >> 20} MiB: streamed from memory every run"


def median(fn, repeats: int) -> float:
    """Median seconds of `repeats` runs after one untimed warm-up (benchmarks.timing)."""
    from benchmarks.timing import run_times

    return float(np.median(run_times(fn, repeats)))


def median_with_read_probes(fn, repeats: int, kernels, probe_bytes: int = 512 << 20) -> tuple:
    """(median seconds of fn, median streaming-read GB/s) with a read probe between every two runs
    of fn: the memory rate of the same minutes. This machine's read rate drifts (probes of one
    minute here: 26-32 GB/s typical, 45-49 GB/s at times), so a memory-bound kernel is compared
    with both the best probe and the rate around it."""
    fn()  # warm-up, untimed
    import time

    times, rates = [], []
    for _ in range(repeats):
        rates.append(kernels.probe_read_bandwidth_gbps(probe_bytes, 1))
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    rates.append(kernels.probe_read_bandwidth_gbps(probe_bytes, 1))
    return float(np.median(times)), float(np.median(rates))


def probed_peaks(kernels, tries: int = 6, seconds: float = 0.25) -> tuple:
    """(VDPBF16PS GFLOPS, FP32 FMA GFLOPS, streaming-read GB/s) of this machine, each the best of
    `tries` short probes: a peak is a maximum, and on a shared machine a probe that another process
    interrupted reads low (a single one-second probe read 150-460 GFLOPS here)."""
    dot = max(kernels.probe_bf16_peak_gflops(seconds) for _ in range(tries))
    fma = max(kernels.probe_fp32_fma_peak_gflops(seconds) for _ in range(tries))
    bw = max(kernels.probe_read_bandwidth_gbps(1 << 30, 3) for _ in range(2))
    return dot, fma, bw


def probed_tile_peak(kernels, tries: int = 4, seconds: float = 0.25, operand_loads: bool = False) -> float:
    """The AMX TDPBF16PS peak on all threads (GFLOPS; 0 where AMX is not usable here). operand_loads:
    each 2 x 2 step's four operand tiles loaded first (two from L1, two from L2), the most a GEMM's
    tile loop can reach."""
    return max(kernels.probe_tile_peak_gflops(seconds, operand_loads) for _ in range(tries))


def gemm_units(kernels, rows: int, weights: str = "bf16") -> str:
    """The units a GEMM of `rows` rows of x with `weights` ("bf16" or "fp8") runs on in this process:
    AMX tiles (from amx_min_rows()[weights] rows where AMX is usable), else VDPBF16PS dot products or
    widened FP32 FMAs."""
    thresholds = kernels.amx_min_rows()
    if weights not in ("bf16", "fp8"):
        raise ValueError(f"weights must be 'bf16' or 'fp8', got {weights!r}")
    if kernels.amx_status() == "usable" and rows >= thresholds[weights]:
        return "AMX tiles (TDPBF16PS)"
    products = kernels.gemm_products()
    return {"dot": "VDPBF16PS", "fma": "FP32 FMA (BF16 widened)"}.get(products, products)


def gemm_peak(kernels) -> tuple:
    """(name, GFLOPS) of the peak of the units the GEMMs of many rows run on here: the AMX tiles where
    usable, else the faster of VDPBF16PS and widened FP32 FMAs (the one the GEMMs chose)."""
    tile = probed_tile_peak(kernels)
    if tile:
        return "AMX TDPBF16PS", tile
    dot, fma, _ = probed_peaks(kernels)
    return ("VDPBF16PS", dot) if kernels.gemm_products() != "fma" else ("FP32 FMA", fma)


def describe_isa(kernels) -> str:
    """The micro-kernel family in use and the rule that chose it (CPUID, or DSPERF_ISA)."""
    return f"isa {kernels.isa()} ({kernels.cpu_features()['why']})"
