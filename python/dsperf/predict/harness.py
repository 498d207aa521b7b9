"""The benchmark harness: builds the inputs of a kernel point, times its calls, and sweeps.

A point is (family, params) as dsperf.ops names them. `build(family, params, pool)` makes the
kernel's inputs through the family's own builder (random BF16/FP8 data from a shared pool, so a
sweep generates each weight tensor once) and returns a zero-argument callable that makes one call,
plus the parameters only a run can tell (how many experts the gate's routing activates).
`measure` times it: warm-up calls, then repeats, each after flushing the last-level cache when
cold=True (the weights stream from memory, as in a real decode step) or back to back when
cold=False (cache-resident). A cold call then finds its data in memory but the code that runs it
(the interpreter, the bindings, the kernels) warm, as a step's kernels do: after the flush the
family's tiny example point runs once, untimed (`ColdStart`). `run_sweep` does a list of points,
with a progress line, and returns a DataFrame (CSV-ready).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from .. import ops
from .kernel_cost import work
# The input pool lives with the families (dsperf.ops.inputs); its generators are public here too.
from ..ops.inputs import Pool, random_bf16, random_fp8  # noqa: F401


def l3_bytes() -> int:
    """The last-level cache size, as the kernels read it (sysfs, then sysconf, then 32 MiB:
    kernels/common/cache.hpp)."""
    from .. import _C

    return int(_C.kernels.last_level_cache_bytes())


def build(family: str, params: Mapping, pool: Pool) -> tuple[Callable[[], object], dict]:
    """(call, measured_params): a zero-argument callable making one kernel call, and the params
    with what only the inputs decide filled in (moe_layer / decode_layer: `active`)."""
    fam = ops.get(family)
    if not fam.composite:
        work(family, params)  # the cost model's checks of the sizes, before any array is made
    return fam.build(dict(params), pool)


class CacheFlusher:
    """Evicts the last-level cache by reading a buffer 1.5x its size."""

    def __init__(self):
        self.buf = np.ones(int(l3_bytes() * 1.5) // 8, np.int64)

    def __call__(self):
        return int(self.buf.sum())


class ColdStart:
    """Before a cold call: the cache flushed, then one call of the family's example point (tiny
    arrays of its own) to bring the code path back. Without it every cold call also paid for
    fetching the interpreter's, the bindings' and the kernels' code from memory: measured on a
    1 x 512 x 128 BF16 GEMV 977 us after the flush against 130 us with this and 18 us with only
    its own arrays evicted; 1 x 4,096 x 7,168: 2.94 / 2.20 / 2.16 ms (docs/PREDICTION.md)."""

    def __init__(self, flusher: CacheFlusher | None = None):
        self.flusher = flusher or CacheFlusher()
        self.pool = Pool()
        self.examples: dict[str, Callable[[], object]] = {}

    def before(self, family: str) -> Callable[[], object]:
        """What runs, untimed, before each cold call of `family`."""
        if family not in self.examples:
            fam = ops.get(family)
            self.examples[family] = build(family, fam.example, self.pool)[0]
        example = self.examples[family]

        def flush_then_warm():
            self.flusher()
            example()
        return flush_then_warm


def _cpu_jiffies():
    """(busy jiffies of the whole machine, jiffies of this process), or None where /proc is absent."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        total = [int(v) for v in fields]
        busy = sum(total) - total[3] - (total[4] if len(total) > 4 else 0)  # minus idle and iowait
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return busy, int(own[11]) + int(own[12])  # utime + stime of all threads
    except (OSError, ValueError, IndexError):
        return None


def _foreign_cores(before, after, seconds):
    """Cores other processes kept busy on average between two _cpu_jiffies readings."""
    if before is None or after is None or seconds <= 0:
        return 0.0
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / hz / seconds)


def measure(call: Callable[[], object], repeats=5, warmup=1, flush: Callable[[], object] | None = None,
            max_foreign_cores=0.3, attempts=4, min_seconds=0.4) -> dict:
    """Times `repeats` calls after `warmup` untimed ones; flush (if given) runs before each timed
    call, untimed. Returns median, min and spread ((p75 - p25) / median) in ms, and the cores other
    processes used meanwhile: on a shared machine the point is measured again (up to `attempts`
    times) while they use more than max_foreign_cores, and the least disturbed attempt is kept."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    best = None
    for attempt in range(attempts):
        for _ in range(warmup):
            call()
        times = []
        j0, w0 = _cpu_jiffies(), time.perf_counter()
        # Short calls repeat more (up to 4x `repeats`, within about min_seconds): their medians are
        # the noisiest.
        while len(times) < repeats or (len(times) < 4 * repeats and sum(times) < min_seconds * 1e3):
            if flush is not None:
                flush()
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        foreign = _foreign_cores(j0, _cpu_jiffies(), time.perf_counter() - w0)
        if best is None or foreign < best[1]:
            best = (times, foreign)
        if foreign <= max_foreign_cores:
            break
        time.sleep(1.0 * (attempt + 1))
    times, foreign = best
    times.sort()
    med = statistics.median(times)
    q1, q3 = np.percentile(times, [25, 75])
    return {"measured_ms": med, "min_ms": times[0], "spread": float((q3 - q1) / med) if med > 0 else 0.0,
            "repeats": len(times), "foreign_cores": round(foreign, 3)}


def _progress(i, n, label, stream):
    if stream is None:
        return
    width = 24
    done = int(width * i / n) if n else width
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:60]:<60}")
    if i == n:
        stream.write("\n")
    stream.flush()


def run_sweep(points: Iterable[tuple[str, Mapping]], repeats=5, warmup=1, cold=True, progress=True,
              pool: Pool | None = None, between: Callable[[], object] | None = None):
    """Measures every (family, params) point: one row per point with the family, its params
    (one column each), measured_ms, min_ms, spread, repeats and cold. between, if given, is
    called after each point, untimed (calibrate.RoofSampler probes the memory roof there)."""
    import pandas as pd

    points = list(points)
    pool = pool or Pool()
    cold_start = ColdStart() if cold else None
    stream = sys.stderr if progress else None
    rows = []
    for n, (family, params) in enumerate(points):
        label = f"{family} " + " ".join(f"{k}={v}" for k, v in params.items())
        _progress(n, len(points), label, stream)
        call, p = build(family, params, pool)
        flush = cold_start.before(family) if cold_start else None
        rows.append({"kernel": family, **p, **measure(call, repeats, warmup, flush), "cold": cold})
        if between is not None:
            between()
    _progress(len(points), len(points), "done", stream)
    return pd.DataFrame(rows)

