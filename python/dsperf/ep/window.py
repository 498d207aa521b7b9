"""MPI-3 shared-memory windows for the ranks of one node: the intranode transport of the exchange.

Each rank owns segments of windows allocated with MPI_Win_allocate_shared on a communicator whose
ranks share memory; every rank maps every peer's segment, so a rank writes straight into a peer's
receive buffer and reads straight from a peer's outputs (DeepEP's NVLink-buffer design, with the
node's memory in place of NVLink).

Synchronisation is a sequence number per rank in a small control window: sync(row) stores this
rank's row of small integers (counts, an error verdict, the call it is in), publishes the next
sequence number (release), and waits until every peer has published it (acquire), so every
store a rank made before its sync is visible to every peer after theirs. The wait is bounded: past
timeout_s the rank names the peer it was waiting for and ends the job (MPI_Abort), so a dead or
stuck peer never hangs the others.

Data windows are allocated once per name and kept; when a call needs more room on any rank (every
rank sees the same counts, so every rank decides the same), all ranks reallocate that window
together (collective), a quarter larger than asked so that slowly growing batches do not
reallocate each time. After an error inside an exchange the transport is invalidated: every later
call raises instead of touching a window whose contents are no longer agreed.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import _C

_C_EP = _C.ep

_FLAG_WORDS = 8              # the sequence number, alone on its 64-byte line
_PAGE = 4096
ABORT_CODE = 3               # exit status of a job ended by a timed-out wait


def _round_up(n, unit):
    return -(-int(n) // unit) * unit


class WindowBroken(RuntimeError):
    """Raised by every call on a transport invalidated by an earlier error."""


class ShmTransport:
    """The ranks of `comm` (all on one node) exchanging through shared-memory windows.

    comm: an MPI communicator whose ranks share memory (the caller checks with
    node_layout). row_words: int64 words of a sync row. label(r): how errors name local rank r
    (its rank in the user's communicator). Collective construction."""

    kind = "window"

    def __init__(self, comm, row_words, *, timeout_s, label=str):
        from mpi4py import MPI
        self._MPI = MPI
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout_s = float(timeout_s)
        self._label = label
        self.row_words = int(row_words)
        self._info = MPI.Info.Create()
        self._info.Set("alloc_shared_noncontig", "true")   # each segment near its owner (NUMA)
        words = _FLAG_WORDS + 2 * self.row_words             # two row slots: see sync
        self._ctrl_win, ctrl = self._allocate(8 * words)
        self._ctrl = [np.frombuffer(v, np.int64, count=words) for v in ctrl]
        self._ctrl[self.rank][:] = 0
        self._flags = [c[:1] for c in self._ctrl]
        self._ctrl_words = words
        self._ctrl_addr = np.array([c.ctypes.data for c in self._ctrl], np.int64)   # for ctrl_sync
        self._seq = 0
        # Spin on the flags (keep the core) while this machine has a core per rank of the node;
        # with more ranks than cores, offer the core at once: the peer may be waiting for it.
        import os
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.spin_s = 1e-3 if self.size <= cores else 0.0
        self._windows = {}      # name -> (win, sizes [ranks], views [ranks] uint8)
        self._retired = []      # replaced windows, freed one reallocation later (views may linger)
        self._broken = None
        comm.Barrier()          # every control segment zeroed before anyone syncs

    # -- windows ---------------------------------------------------------------------------------
    def _allocate(self, nbytes):
        MPI = self._MPI
        win = MPI.Win.Allocate_shared(max(_PAGE, _round_up(nbytes, _PAGE)), 1, info=self._info, comm=self.comm)
        views = []
        for r in range(self.size):
            buf, _ = win.Shared_query(r)
            views.append(np.frombuffer(buf, np.uint8))
        return win, views

    def regions(self, name, sizes):
        """The W segments of window `name` as uint8 arrays, each at least sizes[r] bytes (rank r's
        segment). Collective when it has to grow: every rank must call it with the same sizes."""
        self._check()
        sizes = np.asarray(sizes, np.int64)
        have = self._windows.get(name)
        if have is not None and (have[1] >= sizes).all():
            return have[2]
        old = have[1] if have is not None else np.zeros(self.size, np.int64)
        grown = np.maximum(old, np.array([_round_up(s * 5 // 4, _PAGE) if s > o else o
                                          for s, o in zip(sizes, old)], np.int64))
        try:
            # Every rank allocates its own segment's size: rank r passes grown[r].
            win, views = self._allocate(int(grown[self.rank]))
        except Exception as exc:
            self.invalidate(f"allocating window {name!r} failed: {exc}")
            raise
        for w in self._retired:
            w.Free()
        self._retired = [have[0]] if have is not None else []
        addr = np.array([v.ctypes.data for v in views], np.int64)
        self._windows[name] = (win, grown, views, addr, np.array([v.size for v in views], np.int64))
        return views

    def views(self, name):
        """The segments of window `name` as they are (it must exist: regions made it)."""
        self._check()
        return self._windows[name][2]

    def segments(self, name):
        """(addresses int64 [ranks], bytes int64 [ranks]) of the segments of window `name` (after
        regions), for the C++ copies that write into them (which check every row against the bytes)."""
        self._check()
        have = self._windows[name]
        return have[3], have[4]

    def zero_own(self, name, nbytes=None):
        """Zero this rank's segment of window `name` (before peers write into it: call sync after)."""
        seg = self._windows[name][2][self.rank]
        seg[:seg.size if nbytes is None else nbytes] = 0

    # -- synchronisation -------------------------------------------------------------------------
    def sync(self, row, what, same_words=0):
        """Publish row (int64 [<= row_words]) and wait for every rank's; returns [ranks, row_words]
        (and, with same_words > 0, (rows, whether every rank's first same_words words equal row's)).
        A peer that does not arrive within timeout_s ends the job, named."""
        self._check()
        self._seq += 1
        # Two row slots, alternating: a peer may still read our previous row until it reaches this
        # sync, and we only reuse a slot after the sync that follows it.
        base = _FLAG_WORDS + (self._seq & 1) * self.row_words
        out = np.empty((self.size, self.row_words), np.int64)
        # Store the row, publish the sequence number, wait for every rank's, copy their rows: one call.
        late = _C_EP.ctrl_sync(self._ctrl_addr, self._ctrl_words, self.rank, self._seq, base,
                               np.ascontiguousarray(row, np.int64), self.timeout_s, self.spin_s, out, same_words)
        if late >= 0:
            self._abort(f"no progress for {self.timeout_s:g} s while waiting for rank {self._label(late)} "
                        f"to reach {what} (it may have died, raised or be stuck)")
        return (out, late == -1) if same_words else out

    def _abort(self, why):
        sys.stderr.write(f"dsperf.ep: rank {self._label(self.rank)}: {why}; aborting the job\n")
        sys.stderr.flush()
        self.invalidate(why)
        self._MPI.COMM_WORLD.Abort(ABORT_CODE)

    # -- errors ----------------------------------------------------------------------------------
    def invalidate(self, why):
        """Never touch the windows again (their contents are not agreed after an error)."""
        if self._broken is None:
            self._broken = why
        self._windows = {}
        self._ctrl = self._flags = None

    def _check(self):
        if self._broken is not None:
            raise WindowBroken(f"dsperf.ep: the exchange's shared-memory windows were invalidated by an earlier "
                               f"error ({self._broken}); create a new EpComm")

    def free(self):
        """Free every window (collective; a no-op after invalidate, where peers may not take part)."""
        if self._broken is not None:
            return
        for w in self._retired:
            w.Free()
        for have in self._windows.values():
            have[0].Free()
        self._ctrl_win.Free()
        self._retired, self._windows = [], {}
        self._broken = "freed"


def node_layout(comm, nodes=None):
    """(node index of each rank [ranks], how it was found) for comm: ranks that share memory form a
    node (MPI_Comm_split_type SHARED), or, with nodes=n (or DSPERF_EP_NODES=n), n pretend nodes of
    consecutive ranks, so one machine can exercise the internode path. Collective."""
    import os
    from mpi4py import MPI
    size = comm.Get_size()
    if nodes is None and os.environ.get("DSPERF_EP_NODES"):
        text = os.environ["DSPERF_EP_NODES"]
        try:
            nodes = int(text)
        except ValueError:
            raise ValueError(f"DSPERF_EP_NODES must be an integer, got {text!r}") from None
    if nodes is not None:
        if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or not 1 <= nodes <= size \
                or size % nodes:
            raise ValueError(f"nodes must be an integer in [1, {size}] dividing the {size} ranks, got {nodes!r}")
        return np.repeat(np.arange(nodes), size // nodes), f"{nodes} pretend nodes"
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    first = shared.allreduce(comm.Get_rank(), op=MPI.MIN)             # a node's lowest rank names it
    shared.Free()
    firsts = np.array(comm.allgather(first), np.int64)
    _, node = np.unique(firsts, return_inverse=True)
    return node.astype(np.int64), "MPI_COMM_TYPE_SHARED"
