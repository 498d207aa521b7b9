"""What keeps a multi-rank job from hanging: a watchdog that ends the job when a guarded wait
outlives its deadline (a dead or stuck peer), and a sys.excepthook that ends the whole job when one
rank raises (install_abort_on_error). Both exchanges use them."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

ABORT_CODE = 3              # exit status of a job ended by the watchdog


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - exercised only without mpi4py
        raise ImportError("dsperf.ep needs mpi4py (pip install mpi4py, with an MPI library such as "
                          "OpenMPI: apt-get install libopenmpi-dev openmpi-bin)") from exc
    return MPI


# ---- watchdog ----------------------------------------------------------------------------------
class _Watchdog:
    """Aborts the MPI job when a guarded wait outlives its deadline (a dead or stuck peer)."""

    def __init__(self, comm, timeout_s):
        self.comm = comm
        self.timeout_s = timeout_s
        self._deadline = None
        self._what = ""
        self._lock = threading.Lock()
        self._thread = None

    def _run(self):
        while True:
            time.sleep(0.2)
            with self._lock:
                late = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if late:
                sys.stderr.write(f"dsperf.ep: rank {self.comm.Get_rank()}: no progress for {self.timeout_s:g} s "
                                 f"while waiting for {what} (a peer rank may have died or be stuck); "
                                 "aborting the job\n")
                sys.stderr.flush()
                self.comm.Abort(ABORT_CODE)

    @contextmanager
    def guard(self, what):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dsperf-ep-watchdog", daemon=True)
            self._thread.start()
        with self._lock:
            self._deadline = time.monotonic() + self.timeout_s
            self._what = what
        try:
            yield
        finally:
            with self._lock:
                self._deadline = None


# ---- abort on an uncaught exception --------------------------------------------------------------
_hook_comms = []   # communicators the installed hook aborts (the first one created wins)


def install_abort_on_error(comm=None):
    """Make an uncaught exception on this rank end the whole MPI job: a sys.excepthook that prints
    the traceback as usual, then calls comm.Abort(1). Without it the other ranks wait in their next
    exchange (for the watchdog's timeout_s) and this one in MPI_Finalize. EpComm installs it (unless
    abort_on_error=False); idempotent. It does nothing on a one-rank communicator or in an
    interactive session. `python -m mpi4py` does the same for a whole script."""
    if comm is None:
        comm = _mpi().COMM_WORLD
    if _hook_comms:
        return
    _hook_comms.append(comm)
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        # A single rank has nobody waiting on it, and an interactive session (where the REPL hands
        # every failed statement to sys.excepthook) must survive a typo.
        if comm.Get_size() < 2 or hasattr(sys, "ps1"):
            return
        sys.stderr.write(f"dsperf.ep: rank {comm.Get_rank()}: uncaught {kind.__name__}; aborting the MPI job\n")
        sys.stderr.flush()
        comm.Abort(1)  # ends every rank of the job (sys.excepthook never sees SystemExit)

    sys.excepthook = hook
