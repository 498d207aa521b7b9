"""How the benchmarks time a call, in one place: one untimed warm-up run (tables loaded, memory
touched, caches filled), then `repeats` timed runs; the benchmarks report the median and the
spread. Timed assertions never live here or in the tests: a benchmark prints, a reader judges."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


def run_times(fn, repeats: int, warm_up: bool = True) -> list[float]:
    """Seconds of `repeats` runs of fn, after one untimed run unless warm_up is False."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


@dataclass
class Timing:
    """The timed runs of one call: median, fastest and slowest seconds, and the last run's result."""
    times: list
    result: object

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def low(self) -> float:
        return min(self.times)

    @property
    def high(self) -> float:
        return max(self.times)

    def spread(self) -> str:
        """'median s of n (runs...)' as the benchmarks print it."""
        runs = ", ".join(f"{t:.3f}" for t in self.times)
        return f"median {self.median:.3f} s of {len(self.times)} ({runs})"


def timed(fn, repeats: int, warm_up: bool = True) -> Timing:
    """fn timed as run_times does, keeping the last run's result (a frame, a summary)."""
    last = []

    def run():
        last[:] = [fn()]

    times = run_times(run, repeats, warm_up)
    return Timing(times, last[0])
