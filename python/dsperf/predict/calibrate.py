"""`dsperf calibrate`: measure this machine and write it as a device spec the cost model can use.

Two steps. The probes: the VDPBF16PS (BF16 dot) and FP32 FMA peaks of all threads, the streaming-
read and STREAM-triad bandwidths by thread count, the read bandwidth of cache-resident data, the
cost of one call from Python into a C++ kernel, and (where MPI is installed) the latency and
bandwidth between two processes. Each probe is repeated, in rounds with the others of its group,
until its SPREAD_WINDOW best rounds agree within SPREAD_BOUND (or a cap on rounds and time is hit);
its figure is its best round and the spread of its best rounds is recorded, named when above the bound
(unsteady_probes) and carried into predictions as their band (probe_bands). Then the fit: the
kernels of the calibration sweep (dsperf.sweeps.fit_points) are timed and the per-family
efficiencies of the kernel cost model fitted to them (dsperf.predict.fit_efficiencies; at most 1,
values at a bound of the search named). The result is a device TOML (the GPU specs'
fields, each with its source, a [calibration] table of the raw measurements and an [efficiency]
table per kernel family)
under ~/.cache/dsperf (cpu-<host>-<kernels>.toml, or --out), with the fit sweep's CSV beside it,
reused until asked to re-measure or until the process runs other kernels (kernel_path: DSPERF_ISA
and DSPERF_GEMM pick them).
"""
from __future__ import annotations

import csv
import datetime
import functools
import io
import os
import platform
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path

from .. import _C
from ..model.devices import DeviceSpec
from .. import kernels as K
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


def kernel_path() -> str:
    """The CPU kernels this process runs: the ISA and, on AVX-512, the GEMMs' products, and AMX
    where its tiles are in use ("portable", "avx512_bf16-dot", "avx512_bf16-fma-amx"). A
    calibration holds for these only: DSPERF_ISA, DSPERF_GEMM and DSPERF_AMX pick others, which run
    at other speeds."""
    products = _C.kernels.gemm_products()
    if products == "portable":
        return K.isa()
    return f"{K.isa()}-{products}" + ("-amx" if K.amx_status() == "usable" else "")


@functools.cache
def kernels_build() -> str:
    """This build of dsperf's compiled module (the first 16 hex digits of its SHA-256): a
    calibration measured on another build (an upgrade, a rebuild with changed kernels) prices the
    kernels at speeds they no longer have, so it is measured again rather than reused."""
    import hashlib

    digest = hashlib.sha256()
    with open(_C.__file__, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def default_path() -> Path:
    return CACHE_DIR / f"cpu-{socket.gethostname()}-{kernel_path()}.toml"


# A probe's figure is its best round: another process taking a core only ever slows a probe (here
# the cache-resident read gave 116, 0.7, 1.1, 116 GB/s in consecutive rounds on 2 loaded cores).
# It is steady when that best is reproduced: its SPREAD_WINDOW best rounds agree within
# SPREAD_BOUND (max / min - 1). This shared machine gave 37 and 47 GB/s in consecutive runs, so
# one lucky or unlucky pass is not a measurement.
SPREAD_BOUND = 0.10
SPREAD_WINDOW = 3


def _spread(values) -> float:
    """max / min - 1 of the SPREAD_WINDOW best values."""
    top = sorted(values)[-SPREAD_WINDOW:]
    return top[-1] / top[0] - 1 if top[0] > 0 else float("inf")


def _rounds(probes: dict, max_rounds: int, budget_s: float, clock=time.perf_counter) -> dict:
    """{name: (best, spread, rounds)} of a group of probes, run in rounds (each unsteady probe once
    per round, so that a probe's passes spread over the group's time rather than back to back). A
    probe is repeated until it is steady (see SPREAD_BOUND), or the group has run max_rounds rounds
    or budget_s seconds (never fewer than SPREAD_WINDOW rounds). spread, above SPREAD_BOUND for a
    probe that did not settle, is reported and becomes the band of predictions priced on that probe."""
    values = {name: [] for name in probes}
    t0 = clock()
    for r in range(max_rounds):
        pending = [n for n, v in values.items() if len(v) < SPREAD_WINDOW or _spread(v) > SPREAD_BOUND]
        if not pending or (r >= SPREAD_WINDOW and clock() - t0 > budget_s):
            break
        for name in pending:
            values[name].append(probes[name]())
    return {name: (max(v), _spread(v), len(v)) for name, v in values.items()}


def _say(progress, text):
    """One progress line on stderr (calibration is silent for a minute otherwise)."""
    if progress:
        sys.stderr.write(f"calibrate: {text}\n")
        sys.stderr.flush()


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


def measure(quick=False, progress=False) -> dict:
    """Run every probe; quick uses smaller buffers, shorter loops and fewer rounds (seconds instead
    of tens). progress: one line per probe group on stderr."""
    k = _C.kernels
    seconds, max_rounds, budget_s = (0.2, 5, 8.0) if quick else (0.6, 8, 30.0)
    buf = (512 << 20) if quick else (1 << 30)  # beyond the L3 either way
    threads = k.max_threads()
    m = {"cpu_model": _cpu_model(), "isa": K.isa(), "kernels": kernel_path(), "kernels_build": kernels_build(),
         "threads": threads,
         "amx_usable": K.amx_status() == "usable"}
    llc = min(64 << 20, max(4 << 20, l3_bytes() // 4))  # inside the last-level cache, beyond L2
    groups = {
        "compute peaks": {"bf16_dot_peak": lambda: k.probe_bf16_peak_gflops(seconds),
                          "fp32_fma_peak": lambda: k.probe_fp32_fma_peak_gflops(seconds)},
        "memory bandwidth": {},
        "cache-resident read": {"cache_read": lambda: k.probe_read_bandwidth_gbps(llc, 20, threads)},
    }
    if m["amx_usable"]:  # the GEMMs of a few rows and more run on the tiles: their peak is the roof
        groups["compute peaks"]["amx_tile_peak"] = lambda: k.probe_tile_peak_gflops(seconds)
    for t in range(1, threads + 1):
        groups["memory bandwidth"][f"read_{t}t"] = lambda t=t: k.probe_read_bandwidth_gbps(buf, 2, t)
        groups["memory bandwidth"][f"triad_{t}t"] = lambda t=t: k.probe_triad_bandwidth_gbps(buf, 2, t)
    _say(progress, f"probing {threads} threads ({m['isa']}); each probe repeated until its {SPREAD_WINDOW} best "
                   f"rounds agree within {SPREAD_BOUND:.0%}")
    k.probe_fp32_fma_peak_gflops(0.1)  # start the thread pool and wake the cores first, untimed
    r = {}
    for group, probes in groups.items():
        got = _rounds(probes, max_rounds, budget_s)
        r.update(got)
        _say(progress, f"{group}: " + ", ".join(f"{n} {b:.1f} ({s:.0%} over {n_r} rounds)"
                                                 for n, (b, s, n_r) in got.items()))
    m["probe_spread_bound"] = SPREAD_BOUND
    m["bf16_dot_peak_gflops"], m["bf16_dot_peak_spread"], _ = r["bf16_dot_peak"]
    m["fp32_fma_peak_gflops"], m["fp32_fma_peak_spread"], _ = r["fp32_fma_peak"]
    if "amx_tile_peak" in r:
        m["amx_tile_peak_gflops"], m["amx_tile_peak_spread"], _ = r["amx_tile_peak"]
    for t in range(1, threads + 1):
        m[f"read_gbps_{t}t"], m[f"read_spread_{t}t"], _ = r[f"read_{t}t"]
        m[f"triad_gbps_{t}t"], m[f"triad_spread_{t}t"], _ = r[f"triad_{t}t"]
    m["cache_read_gbps"], m["cache_read_spread"], _ = r["cache_read"]
    # Named in the file and the output: their figures carry their spread, not the bound.
    m["unsteady_probes"] = ", ".join(n for n, (_, s, _) in r.items() if s > SPREAD_BOUND)
    m["call_overhead_us"] = _call_overhead_us(500 if quick else 5000)
    _say(progress, f"call overhead: {m['call_overhead_us']:.2f} us")
    m.update(_mpi_loopback())
    if "mpi_latency_us" in m:
        _say(progress, f"MPI loopback: {m['mpi_latency_us']:.1f} us, {m['mpi_bandwidth_gbps']:.1f} GB/s")
    m["mem_gb"] = _mem_gb()
    m["measured_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return m


class RoofSampler:
    """The streaming read of all threads, probed again between the kernel calls of a sweep
    (run_sweep's `between`). This shared machine's read rate drifts by 10-60% over minutes (33 to
    47 GB/s in four consecutive probes on the 2-core AMD EPYC VM; 121 probes during one sweep ranged
    up to 78.5 with a median of 47.1); a roof probed only before the
    sweep sat below rates the expert FFN then streamed at (46.4 GB/s against a 43.9 GB/s roof),
    and the fit had to call those kernels more than 100% efficient. Sampled beside the kernels, the
    roof is at least the rate the machine typically gave in the same minutes (with_roof_samples)."""

    def __init__(self, m: dict, quick: bool = False):
        self.threads = int(m["threads"])
        self.buf = (512 << 20) if quick else (1 << 30)  # as measure's probe: beyond the L3
        self.samples: list[float] = []

    def __call__(self) -> None:
        self.samples.append(_C.kernels.probe_read_bandwidth_gbps(self.buf, 2, self.threads))


def with_roof_samples(m: dict, samples) -> dict:
    """The measurements with the memory roof (read_gbps_<threads>t) the better of the calibration's
    own probe (its best round, kept as read_gbps_probe so that a reused calibration does not
    ratchet) and the median of the samples taken during this sweep; the spec is rebuilt from it.
    The median, not the best sample: the kernels' times are medians too, and the best of a hundred
    samples is a rate few kernel calls saw. The samples' median, best and count are recorded."""
    samples = [float(x) for x in samples]
    if not samples:
        return m
    key = f"read_gbps_{m['threads']}t"
    probe = float(m.get("read_gbps_probe", m[key]))
    out = dict(m, read_gbps_probe=probe, read_sweep_samples=len(samples), read_sweep_best_gbps=max(samples),
               read_sweep_median_gbps=statistics.median(samples))
    out[key] = max(probe, statistics.median(samples))
    if "spec" in m:
        out["spec"] = spec_of(out, m["name"])
    return out


# The compute peaks a calibration probes, by the key prefix of their figures: the GEMMs' products
# (VDPBF16PS dot products or widened FP32 FMAs, whichever is faster) and, where usable, the AMX tiles.
COMPUTE_PEAKS = ("bf16_dot_peak", "fp32_fma_peak", "amx_tile_peak")


def compute_peak(m: dict) -> str | None:
    """The key prefix of the fastest compute peak measured (the one the spec's roof uses); None for
    a file that records none."""
    measured = [p for p in COMPUTE_PEAKS if f"{p}_gflops" in m]
    return max(measured, key=lambda p: m[f"{p}_gflops"]) if measured else None


def _missing_probes(calibration: dict) -> str:
    """The probes this machine runs that a saved calibration lacks (a file from before they existed)."""
    return "amx_tile_peak" if calibration.get("amx_usable") and "amx_tile_peak_gflops" not in calibration else ""


def probe_bands(m: dict) -> dict:
    """The relative band of the roofs a prediction is priced on: the spread of the probe behind
    each (compute: the fastest peak, which the spec uses; memory: the streaming read of all threads;
    cache: the cache-resident read). NaN for a calibration file written before spreads existed."""
    nan = float("nan")
    threads = m.get("threads", 1)
    return {"compute": float(m.get(f"{compute_peak(m)}_spread", nan)), "memory": float(m.get(f"read_spread_{threads}t", nan)),
            "cache": float(m.get("cache_read_spread", nan))}


def _spec_lines(values: dict) -> list[str]:
    """The spec's fields as TOML lines, in DeviceSpec.FIELDS order (the one list of fields): a
    field the list requires and the measurements do not give is an error, not a silent default."""
    lines = []
    for field, kind, required in DeviceSpec.FIELDS:
        if field not in values:
            if required:
                raise ValueError(f"calibration gives no value for the device field {field!r}")
            continue
        v = values[field]
        lines.append(f'{field} = "{v}"' if kind == "str" else f"{field} = {int(v)}" if kind == "int"
                     else f"{field} = {float(v):.6f}")
    unknown = set(values) - {f for f, _, _ in DeviceSpec.FIELDS}
    if unknown:
        raise ValueError(f"not a device field: {sorted(unknown)[0]!r}")
    return lines


def _spec_values(m: dict, name: str) -> dict:
    """The spec of this CPU from its measurements: rates are achieved rates, so derate and
    discount are 1. Between processes: the MPI loopback where it was measured, else the triad
    bandwidth."""
    threads = m["threads"]
    link = m.get("mpi_bandwidth_gbps") or m[f"triad_gbps_{threads}t"]
    return dict(name=name, sm_count=threads, comm_sms_prefill=0, comm_sms_decode=0,
                fp16_tflops=m[f"{compute_peak(m)}_gflops"] / 1000, fp8_tflops=0.0,
                compute_derate=1.0, mem_gb=m["mem_gb"], mem_bw_gbps=m[f"read_gbps_{threads}t"], nvlink_gbps=link,
                scaleout_gbps=link, discount=1.0, gpus_per_node=1, cache_bw_gbps=m["cache_read_gbps"],
                call_overhead_us=m["call_overhead_us"])


def _spec_sources(m: dict) -> dict:
    """The source of each field _spec_values writes (every numeric field of a device file carries
    one: dsperf.model.devices.check_sources): the probe it was measured by, on this CPU at this
    time, or why a CPU has that value."""
    on = f"measured by dsperf calibrate on {m['cpu_model']}, {m['measured_at']}"
    link = ("MPI loopback between two processes" if m.get("mpi_bandwidth_gbps")
            else f"STREAM triad of {m['threads']} threads (no MPI loopback)")
    return dict(
        sm_count=f"{on}: the threads the kernels run on",
        comm_sms_prefill="dsperf calibrate: a CPU keeps no cores for communication",
        comm_sms_decode="dsperf calibrate: a CPU keeps no cores for communication",
        fp16_tflops=f"{on}: the best of the VDPBF16PS, FP32 FMA and (where usable) AMX TDPBF16PS peaks of all threads",
        fp8_tflops="dsperf calibrate: no FP8 path on a CPU",
        compute_derate="dsperf calibrate: the rates are achieved rates, so no derate",
        mem_gb=f"{on}: physical memory (sysconf)",
        mem_bw_gbps=f"{on}: streaming read of all threads" + (
            f", the better of its probe and the median of {m['read_sweep_samples']} probes between the fit sweep's kernel calls"
            if m.get("read_sweep_samples") else ""),
        nvlink_gbps=f"{on}: {link}",
        scaleout_gbps=f"{on}: {link}",
        discount="dsperf calibrate: the rates are achieved rates, so no discount",
        gpus_per_node="dsperf calibrate: one machine",
        cache_bw_gbps=f"{on}: read of cache-resident data, all threads",
        call_overhead_us=f"{on}: median time of the smallest kernel call from Python",
    )


def _source_lines(lines: list[str], sources: dict) -> list[str]:
    """The spec's lines with each numeric field's source beside it (sources.<field> = "...")."""
    out = []
    for line in lines:
        out.append(line)
        field = line.split(" = ", 1)[0]
        if field in sources and not line.endswith('"'):
            text = sources[field].replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'sources.{field} = "{text}"')
    return out


def spec_of(m: dict, name: str) -> DeviceSpec:
    """The DeviceSpec of the measurements, in memory (the values the file records, rounded alike)."""
    spec = DeviceSpec()
    for line in _spec_lines(_spec_values(m, name)):
        field, text = line.split(" = ", 1)
        kind = next(k for f, k, _ in DeviceSpec.FIELDS if f == field)
        setattr(spec, field, text.strip('"') if kind == "str" else int(text) if kind == "int" else float(text))
    spec.validate()
    return spec


def _efficiency_lines(efficiencies) -> list[str]:
    lines = []
    for key, e in sorted(efficiencies.items()):
        lines += ["", f'[efficiency."{key}"]', f"compute = {e.compute:.6g}", f"memory = {e.memory:.6g}",
                  f"overhead_us = {e.overhead_us:.6g}", f"serial = {e.serial:.6g}",
                  f'roof = "{getattr(e, "roof", "memory")}"',
                  f"at_bound = [{', '.join(repr(b) for b in getattr(e, 'at_bound', ()))}]"]
    return lines


def to_toml(m: dict, name: str, efficiencies=None, kernel_table: str | None = None) -> str:
    """The calibration file: the spec, the measurements ([calibration]) and the fitted
    efficiencies ([efficiency."key"] tables), written whole; kernel_table names the efficiency
    table written beside it (the grounded model prices this machine's calls with it)."""
    lines = [
        f"# {name}: measured by `dsperf calibrate` on {m['measured_at']} ({m['cpu_model']}, isa {m['isa']}).",
        "# Compute: the best of the VDPBF16PS, FP32 FMA and (where usable) AMX tile peaks of all threads",
        "# (BF16 work can run on any); memory: the streaming read of all threads; links: MPI loopback between two",
        "# processes where MPI is installed, else the triad bandwidth.",
        *_source_lines(_spec_lines(_spec_values(m, name)), _spec_sources(m)),
        *([f'kernel_table = "{kernel_table}"'] if kernel_table else []),
        "",
        "[calibration]",
    ]
    for key, value in m.items():
        if key in IN_MEMORY_KEYS:
            continue
        if isinstance(value, bool):
            lines.append(f"{key} = {str(value).lower()}")
        elif isinstance(value, str):
            lines.append(f'{key} = "{value}"')
        else:
            lines.append(f"{key} = {value!r}")
    return "\n".join(lines + _efficiency_lines(efficiencies or {})) + "\n"


# Keys of the measurements dict that are not measurements (calibrate adds them for its callers).
IN_MEMORY_KEYS = ("efficiency", "reused", "spec", "name")


def fit_csv_path(path) -> Path:
    """Where the fit sweep of a calibration file is kept."""
    path = Path(path)
    return path.with_name(path.stem + ".fit.csv")


def kernel_table_path(path) -> Path:
    """Where the efficiency table of a calibration file is kept (the grounded model's format)."""
    path = Path(path)
    return path.with_name(path.stem + ".kernels.csv")


# The columns of an efficiency table (python/dsperf/data/efficiency/*.csv) a CPU table fills.
TABLE_COLUMNS = ("family", "m", "n", "k", "batch", "kv_len", "heads", "q_len", "dtype", "latency_us", "source")


def kernel_table_text(m: dict, fit_sweep) -> str:
    """The measured calls of a fit sweep as efficiency-table rows, through each family's
    table_rows (dsperf.ops): the median time of each point, its data streamed from memory when
    the sweep flushed the caches. Families without a table counterpart (the expert FFN, whose
    GEMMs are timed together with their activation) give no rows."""
    from .. import ops
    from .fit import points_of

    cold = bool(fit_sweep["cold"].all()) if "cold" in fit_sweep.columns else True
    source = (f"dsperf calibrate on {m['cpu_model']} ({m['threads']} threads, isa {m['isa']}), {m['measured_at']}: "
              f"median of repeated calls, {'caches flushed before each' if cold else 'cache-resident'}")
    out = io.StringIO()
    out.write("# This machine's kernel times in the grounded model's table format (docs/VALIDATION.md), written by\n"
              "# dsperf calibrate from its fit sweep.\n")
    writer = csv.DictWriter(out, TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for (family, params), ms in zip(points_of(fit_sweep), fit_sweep["measured_ms"]):
        rows = ops.get(family).table_rows
        for row in rows(params, float(ms) * 1e3) if rows else []:
            writer.writerow(dict(row, source=source))
    return out.getvalue()


def save(path, m: dict, efficiencies, fit_sweep=None) -> None:
    """Writes a calibration whole: the file (spec, measurements, efficiencies) and, when given,
    the fit sweep it was fitted on beside it (fit_csv_path) and its calls as an efficiency table
    (kernel_table_path), which the file names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = None
    if fit_sweep is not None:
        fit_sweep.dropna(axis=1, how="all").to_csv(fit_csv_path(path), index=False)
        kernel_table_path(path).write_text(kernel_table_text(m, fit_sweep))
        table = kernel_table_path(path).name
    elif m.get("reused") and kernel_table_path(path).is_file():
        table = kernel_table_path(path).name  # the table of the fit this file already had
    path.write_text(to_toml(m, m["name"], efficiencies, table))


def calibrate(force=False, quick=False, path=None, points=None, repeats=None, progress=False, fit=True):
    """(path, measurements): reuses the file at path unless force; else probes, times the fit
    sweep (`points`, default sweeps.fit_points(quick)), fits and writes the file once (save).
    fit=False leaves the fit and the writing to the caller (`dsperf report` times the fit sweep
    with its own and saves through the same save). The measurements include 'spec' (the
    DeviceSpec, in memory), 'name', 'efficiency' ({key: KernelEfficiency}) and 'reused'."""
    from ..model.devices import _read_toml, load_device
    from .kernel_cost import efficiencies_from_dict
    from .harness import run_sweep
    from .fit import fit_efficiencies
    from .sweeps import fit_points

    path = Path(path) if path else default_path()
    if path.is_dir():
        raise ValueError(f"out: '{path}' is a directory; give the path of a .toml file")
    if path.exists() and not force:
        data = _read_toml(path)
        measured_on = data.get("calibration", {}).get("kernels")
        build = data.get("calibration", {}).get("kernels_build")
        from ..model.devices import check_sources

        try:
            check_sources(data, f"'{path}'")
            sourced = True
        except ValueError:
            sourced = False
        missing = _missing_probes(data.get("calibration", {}))
        if measured_on == kernel_path() and build == kernels_build() and sourced and not missing:
            return path, dict(data.get("calibration", {}),
                              efficiency=efficiencies_from_dict(data.get("efficiency", {})),
                              spec=load_device(str(path), "corrected"), name=data.get("name"), reused=True)
        # Another kernel path's speeds, another build's (or a file from before they were recorded)
        # would price this one's calls wrongly: measure again, and say so whether or not progress
        # is shown.
        if missing and measured_on == kernel_path() and build == kernels_build():
            why = f"lacks the {missing} probe, whose peak is this machine's compute roof"
        elif not sourced and measured_on == kernel_path() and build == kernels_build():
            why = "was written before device files named the source of each field"
        elif measured_on != kernel_path():
            why = f"was measured on the {measured_on or 'unrecorded'} kernels; this process runs {kernel_path()}"
        else:
            why = f"was measured on build {build or 'unrecorded'} of dsperf's kernels; this is build {kernels_build()}"
        warnings.warn(f"{path} {why}: measuring again and rewriting it", stacklevel=2)
    m = measure(quick=quick, progress=progress)
    name = f"CPU-{socket.gethostname()}"
    m = dict(m, spec=spec_of(m, name), name=name, efficiency={}, reused=False)
    if not fit:
        return path, m
    pts = fit_points(quick) if points is None else list(points)
    _say(progress, f"fit sweep: {len(pts)} kernel calls")
    sampler = RoofSampler(m, quick)
    sweep = run_sweep(pts, repeats=repeats or (3 if quick else 5), progress=progress, between=sampler)
    m = with_roof_samples(m, sampler.samples)
    if sampler.samples:
        _say(progress, f"memory roof {m['spec'].mem_bw_gbps:.1f} GB/s: the better of the probe ({m['read_gbps_probe']:.1f}) "
                       f"and the median of {len(sampler.samples)} probes between the kernel calls "
                       f"({m['read_sweep_median_gbps']:.1f})")
    effs = fit_efficiencies(sweep, m["spec"])
    stuck = [k for k, e in effs.items() if e.at_bound]
    _say(progress, f"fitted {len(effs)} efficiencies" + (f"; at a bound of the search: {', '.join(stuck)}" if stuck else ""))
    save(path, m, effs, sweep)
    return path, dict(m, efficiency=effs)
