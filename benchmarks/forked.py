"""Running one call in a forked child, so that a crash or a hang is seen instead of suffered: the
fuzz censuses (benchmarks/fuzz_*_census.py) and the fuzz tests (tests/test_fuzz_*.py) share it, and
the censuses share the way they print their counts (print_census)."""
from __future__ import annotations

import os
import pickle
import resource
import signal
import time


def _limit_address_space(extra_bytes: int) -> None:
    """At most extra_bytes more address space than the child has now."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra_bytes, vm + extra_bytes))


def run_forked(fn, timeout: float, mem_bytes: int | None = None, poll_s: float = 0.002):
    """fn() in a forked child, under `timeout` seconds and, when given, `mem_bytes` more address
    space. Returns ("ok", value) with fn's (picklable) value, ("error", type name, message),
    ("crash", signal number or exit status) or ("hang", None)."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(rd)
        try:
            if mem_bytes is not None:
                _limit_address_space(mem_bytes)
            out = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = ("error", type(e).__name__, str(e))
        try:
            data = pickle.dumps(out)
        except Exception as e:  # noqa: BLE001
            data = pickle.dumps(("error", "PicklingError", str(e)))
        with os.fdopen(wr, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(wr)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rd)
            return ("hang", None)
        time.sleep(poll_s)
    with os.fdopen(rd, "rb") as f:
        data = f.read()
    if os.WIFSIGNALED(status) or not data:
        return ("crash", os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    return pickle.loads(data)


def print_census(header: str, classes, counts, by_api, shown) -> None:
    """A census's counts: the header, each class's total, the classes per API, then the cases asked
    to be shown."""
    print(header)
    for cls in classes:
        print(f"  {cls:16s} {counts[cls]}")
    print("\nper API:")
    for api, c in by_api.items():
        print(f"  {api:36s} " + ", ".join(f"{k} {c[k]}" for k in classes if c[k]))
    for line in shown:
        print(line)
