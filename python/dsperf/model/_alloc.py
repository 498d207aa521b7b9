"""Allocation advice for the large arrays the explorer builds (a million rows, dozens of columns)."""
from __future__ import annotations

import contextlib
import importlib


def _hugepage_switch():
    """numpy's switch for its huge-page advice (private; numpy 2 and 1 name its module differently),
    or None where this numpy has none."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        switch = getattr(module, "_set_madvise_hugepage", None)
        if switch is not None:
            return switch
    return None


@contextlib.contextmanager
def small_pages():
    """Within the block, numpy's new arrays get no transparent-huge-page advice; the setting is put
    back after.

    numpy advises the kernel to back every large array with huge pages (madvise). Where the kernel
    then defragments memory at the page fault (THP defrag "madvise", as on the 2-core VMs dsperf is
    measured on), the explorer's first sweeps in a process took 0.4-0.5 s longer: 1.58-1.79 s
    against 1.20-1.30 s for 1,179,648 configurations (benchmarks/bench_explore.py's grid, Intel Xeon
    with AMX, 2026-11-27); once the process has its memory, both take 1.1-1.2 s."""
    switch = _hugepage_switch()
    if switch is None:
        yield
        return
    previous = switch(False)
    try:
        yield
    finally:
        switch(previous)
