"""`dsperf calibrate`: measure this machine and write it as a device spec the cost model can use.

Two steps. The probes: the VDPBF16PS (BF16 dot) and FP32 FMA peaks of all threads, the streaming-
read and STREAM-triad bandwidths by thread count, the read bandwidth of cache-resident data, the
cost of one call from Python into a C++ kernel, and (where MPI is installed) the latency and
bandwidth between two processes; each figure is the best of several passes, taken in
rounds over the whole calibration, with the spread between passes reported as its noise. Then the fit: the kernels of the calibration
sweep (dsperf.sweeps.fit_points) are timed and the per-family efficiencies of the kernel cost model
fitted to them (dsperf.predict.fit_efficiencies). The result is a device TOML (the GPU specs'
fields, a [calibration] table of the raw measurements and an [efficiency] table per kernel family)
under ~/.cache/dsperf (or --out), with the fit sweep's CSV beside it, reused until asked to
re-measure.
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
from .harness import l3_bytes

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


def _rounds(probes: dict, passes: int) -> dict:
    """{name: (best, spread)} of every probe, run in rounds (each probe once per round) so that a
    probe's passes spread over the whole calibration: its spread then shows the machine's drift
    over that time, not only the noise of back-to-back runs."""
    values = {name: [] for name in probes}
    for _ in range(passes):
        for name, fn in probes.items():
            values[name].append(fn())
    out = {}
    for name, v in values.items():
        best = max(v)
        out[name] = (best, (best - min(v)) / best if best > 0 else 0.0)
    return out


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


_LOOPBACK = ("import json; from dsperf.ep.bench import loopback; r = loopback(); "
             "from mpi4py import MPI; MPI.COMM_WORLD.Get_rank() == 0 and print('LOOPBACK ' + json.dumps(r))")


def _mpi_loopback(timeout=120) -> dict:
    """Latency and bandwidth between two MPI processes on this machine (dsperf.ep.loopback under
    mpirun -np 2: ping-pong latency and bandwidth, the all-ranks MPI_Alltoall bandwidth and each
    rank's row-copy rate), or {} where mpirun or mpi4py is missing or the run fails."""
    import json
    import shutil
    import subprocess
    import sys

    mpirun = shutil.which("mpirun")
    if not mpirun:
        return {}
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    try:
        r = subprocess.run([mpirun, "-np", "2", "--oversubscribe", sys.executable, "-c", _LOOPBACK], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    for line in r.stdout.splitlines():
        if line.startswith("LOOPBACK "):
            d = json.loads(line[len("LOOPBACK "):])
            return {"mpi_latency_us": float(d["latency_us"]), "mpi_bandwidth_gbps": float(d["bandwidth_gbps"]),
                    "mpi_alltoall_gbps": float(d["alltoall_gbps"]), "mpi_copy_gbps": float(d["copy_gbps"])}
    return {}


def measure(quick=False) -> dict:
    """Run every probe; quick uses smaller buffers and shorter loops (seconds instead of tens)."""
    k = _C.kernels
    seconds, passes = (0.2, 2) if quick else (0.6, 5)
    buf = (512 << 20) if quick else (1 << 30)  # beyond the L3 either way
    threads = k.max_threads()
    m = {"cpu_model": _cpu_model(), "isa": K.isa(), "threads": threads, "amx_usable": K.cpu_features()["amx_bf16"]}
    llc = min(64 << 20, max(4 << 20, l3_bytes() // 4))  # inside the last-level cache, beyond L2
    probes = {"bf16_dot_peak": lambda: k.probe_bf16_peak_gflops(seconds),
              "fp32_fma_peak": lambda: k.probe_fp32_fma_peak_gflops(seconds)}
    for t in range(1, threads + 1):
        probes[f"read_{t}t"] = lambda t=t: k.probe_read_bandwidth_gbps(buf, 2, t)
        probes[f"triad_{t}t"] = lambda t=t: k.probe_triad_bandwidth_gbps(buf, 2, t)
    probes["cache_read"] = lambda: k.probe_read_bandwidth_gbps(llc, 20, threads)
    k.probe_fp32_fma_peak_gflops(0.1)  # start the thread pool and wake the cores first, untimed
    r = _rounds(probes, passes)
    m["bf16_dot_peak_gflops"], m["bf16_dot_peak_spread"] = r["bf16_dot_peak"]
    m["fp32_fma_peak_gflops"], m["fp32_fma_peak_spread"] = r["fp32_fma_peak"]
    for t in range(1, threads + 1):
        m[f"read_gbps_{t}t"], m[f"read_spread_{t}t"] = r[f"read_{t}t"]
        m[f"triad_gbps_{t}t"], m[f"triad_spread_{t}t"] = r[f"triad_{t}t"]
    m["cache_read_gbps"], m["cache_read_spread"] = r["cache_read"]
    m["call_overhead_us"] = _call_overhead_us(500 if quick else 5000)
    m.update(_mpi_loopback())
    m["mem_gb"] = _mem_gb()
    m["measured_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return m


def to_toml(m: dict, name: str) -> str:
    """The measurements as a device file: rates are achieved rates, so derate and discount are 1.
    save_efficiencies adds the fitted [efficiency] tables."""
    threads = m["threads"]
    # Between processes: the MPI loopback where it was measured, else the triad bandwidth.
    link = m.get("mpi_bandwidth_gbps") or m[f"triad_gbps_{threads}t"]
    lines = [
        f"# {name}: measured by `dsperf calibrate` on {m['measured_at']} ({m['cpu_model']}, isa {m['isa']}).",
        "# Compute: the better of the VDPBF16PS and FP32 FMA peaks of all threads (BF16 work can run on",
        "# either); memory: the streaming read of all threads; links: MPI loopback between two",
        "# processes where MPI is installed, else the triad bandwidth.",
        f'name = "{name}"',
        f"sm_count = {threads}",
        "comm_sms_prefill = 0",
        "comm_sms_decode = 0",
        f"fp16_tflops = {max(m['bf16_dot_peak_gflops'], m['fp32_fma_peak_gflops']) / 1000:.6f}",
        "fp8_tflops = 0.0",
        "compute_derate = 1.0",
        f"mem_gb = {m['mem_gb']:.2f}",
        f"mem_bw_gbps = {m[f'read_gbps_{threads}t']:.3f}",
        f"nvlink_gbps = {link:.3f}",
        f"scaleout_gbps = {link:.3f}",
        "discount = 1.0",
        "gpus_per_node = 1",
        f"cache_bw_gbps = {m['cache_read_gbps']:.3f}",
        f"call_overhead_us = {m['call_overhead_us']:.3f}",
        "",
        "[calibration]",
    ]
    for key, value in m.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        elif isinstance(value, str):
            lines.append(f'{key} = "{value}"')
        else:
            lines.append(f"{key} = {value!r}")
    return "\n".join(lines) + "\n"


def fit_csv_path(path) -> Path:
    """Where the fit sweep of a calibration file is kept."""
    path = Path(path)
    return path.with_name(path.stem + ".fit.csv")


def save_efficiencies(path, efficiencies) -> None:
    """Replaces the [efficiency] tables of a calibration file (the probes stay as they are)."""
    path = Path(path)
    text = path.read_text()
    cut = text.find('\n[efficiency."')
    text = (text if cut < 0 else text[:cut + 1]).rstrip("\n") + "\n"
    for key, e in sorted(efficiencies.items()):
        text += (f'\n[efficiency."{key}"]\ncompute = {e.compute:.6g}\nmemory = {e.memory:.6g}\n'
                 f"overhead_us = {e.overhead_us:.6g}\noverlap = {str(e.overlap).lower()}\n")
    path.write_text(text)


def calibrate(force=False, quick=False, path=None, points=None, repeats=None, progress=False, fit=True):
    """(path, measurements): reuses the file at path unless force; else probes, times the fit
    sweep (`points`, default sweeps.fit_points(quick)) and writes the file. fit=False writes the
    probes alone (the caller fits, as `dsperf report` does). The measurements include
    'efficiency', {key: KernelEfficiency}."""
    from .hardware import _read_toml, load_device
    from .kernel_cost import efficiencies_from_dict
    from .harness import run_sweep
    from .predict import fit_efficiencies
    from .sweeps import fit_points

    path = Path(path) if path else default_path()
    if path.is_dir():
        raise ValueError(f"out: '{path}' is a directory; give the path of a .toml file")
    if path.exists() and not force:
        data = _read_toml(path)
        return path, dict(data.get("calibration", {}), efficiency=efficiencies_from_dict(data.get("efficiency", {})),
                          reused=True)
    m = measure(quick=quick)
    name = f"CPU-{socket.gethostname()}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_toml(m, name))  # the probes alone, so the fit can price against them
    if not fit:
        return path, dict(m, efficiency={}, reused=False)
    spec = load_device(str(path), "corrected")
    pts = fit_points(quick) if points is None else list(points)
    sweep = run_sweep(pts, repeats=repeats or (3 if quick else 5), progress=progress)
    effs = fit_efficiencies(sweep, spec)
    sweep.to_csv(fit_csv_path(path), index=False)
    save_efficiencies(path, effs)
    return path, dict(m, efficiency=effs, reused=False)
