"""The transport interface of the expert-parallel exchange: the few collective primitives that
dispatch and combine (routed.py) need, and two of its implementations (the third, NCCL, is
dsperf.cuda.nccl.NcclTransport).

A transport connects `nranks` ranks, of which this process drives `ranks` (every rank for the
simulated transport and a single-controller NCCL communicator; one for MPI and for NCCL with one
process per GPU). Arguments and results are dicts keyed by the local ranks.

    allgather(rows, what=None)           {rank: int64 [words]} -> int64 [nranks, words] on the host
                                         (what: the wait, as a timeout names it)
    alltoallv(sends, send_counts, recv_counts, pad_rows=0)
                                         sends[rank]: rows grouped by destination rank; returns
                                         {rank: rows from rank 0, then 1, ..., then pad_rows zero rows}
    barrier(), abort(why)                every rank waits; end every rank with an error
    to_rank(rank, a), host(a)            an array on the rank's memory, and back on the host
    gather(rank, x, idx)                 x[idx] on the rank
    place(rank, rows, idx, n)            [n, ...] zero rows with rows[i] at row idx[i] (rows ends in a
                                         zero pad row: alltoallv's pad_rows=1)
    weighted_sum(rank, y, position, w)   FP32 [T, dim] = sum_k w[t, k] * y[position[t, k]], slot order
    wire(rank, rows)                     combine's rows as they cross: BF16 on the host transports (as
                                         DeepEP's combine and the window exchange), FP32 on NCCL

The shared-memory window exchange (exchange.WindowEpComm) is the tuned intranode transport: it
writes rows straight into their final place at the peers instead of calling alltoallv, with the
same rows (its plan worked out in C++) and handle (plan.ExchangeHandle).
"""
from __future__ import annotations

import sys

import numpy as np

from .. import kernels as K


class Transport:
    """What every transport has; allgather defaults to an alltoallv of the row to every rank."""

    nranks: int
    ranks: list
    combine_dtype = np.dtype(np.float32)   # combine's rows as they cross (wire)

    def wire(self, rank, rows):
        return rows

    def allgather(self, rows, what=None):
        n = self.nranks
        sends = {r: self.to_rank(r, np.tile(np.asarray(rows[r], np.int64), (n, 1))) for r in self.ranks}
        ones = {r: np.ones(n, np.int64) for r in self.ranks}
        got = self.alltoallv(sends, ones, ones)
        return self.host(got[self.ranks[0]])

    def barrier(self):
        self.allgather({r: np.zeros(1, np.int64) for r in self.ranks})

    def abort(self, why):
        raise RuntimeError(f"dsperf.ep: {why}")

    def place(self, rank, rows, idx, n):
        src = np.full(n, len(idx), np.int64)       # the pad row: zero
        src[np.asarray(idx, np.int64)] = np.arange(len(idx))
        return self.gather(rank, rows, src.astype(np.int32))


class HostRows:
    """Rows in host memory (numpy): the row operations of the simulated and MPI transports."""

    combine_dtype = np.dtype(K.BF16)   # combine's partials cross in BF16: half the bytes of FP32

    def wire(self, rank, rows):
        return rows if rows.dtype == self.combine_dtype else rows.astype(self.combine_dtype)

    def to_rank(self, rank, a):
        return np.ascontiguousarray(a)

    def host(self, a):
        return np.asarray(a)

    def gather(self, rank, x, idx):
        return x[np.asarray(idx, np.int64)]

    def place(self, rank, rows, idx, n):
        out = np.zeros((n,) + tuple(rows.shape[1:]), rows.dtype)   # pages untouched stay unmapped
        out[np.asarray(idx, np.int64)] = rows[:len(idx)]
        return out

    def weighted_sum(self, rank, y, position, weights):
        return K.moe_unpermute(np.ascontiguousarray(y, np.float32), np.ascontiguousarray(position, np.int32),
                               np.ascontiguousarray(weights, np.float32))


def _receive_buffer(like, rows, pad_rows):
    return np.zeros((int(rows) + pad_rows,) + tuple(like.shape[1:]), like.dtype)


class SimulatedTransport(HostRows, Transport):
    """Every rank in this process with numpy arrays, rows moved by slicing: the stand-in for NCCL
    and MPI in tests (the same dispatch/combine code runs over it)."""

    def __init__(self, nranks, combine_dtype=K.BF16):
        from .._arrays import integer

        # A count of ranks: 2.5 or True is not one, and 0 ranks have no exchange to simulate.
        nranks = integer("nranks", nranks, 1, 1 << 12)
        self.nranks, self.ranks = nranks, list(range(nranks))
        self.combine_dtype = np.dtype(combine_dtype)  # FP32: as NCCL's transport, for comparing with it
        if self.combine_dtype not in (np.dtype(np.float32), np.dtype(K.BF16)):
            raise ValueError(f"combine_dtype must be float32 or bfloat16, got {self.combine_dtype}")

    def alltoallv(self, sends, send_counts, recv_counts, pad_rows=0):
        n = self.nranks
        pieces = {}
        for s in range(n):
            off = np.concatenate([[0], np.cumsum(send_counts[s])]).astype(np.int64)
            for d in range(n):
                pieces[s, d] = sends[s][off[d]:off[d + 1]]
        out = {}
        for d in range(n):
            for s in range(n):
                if len(pieces[s, d]) != recv_counts[d][s]:
                    raise AssertionError(f"rank {d} expected {recv_counts[d][s]} rows from {s}, "
                                         f"got {len(pieces[s, d])}")
            out[d] = _receive_buffer(sends[d], np.sum(recv_counts[d]), pad_rows)
            out[d][:int(np.sum(recv_counts[d]))] = np.concatenate([pieces[s, d] for s in range(n)])
        return out


class MpiTransport(HostRows, Transport):
    """One rank per process over an MPI communicator (mpi4py): MPI_Allgather and MPI_Alltoallv of
    byte rows, every wait under the watchdog (past timeout_s the job ends, naming the wait)."""

    def __init__(self, comm=None, *, timeout_s=60.0):
        from .guards import _mpi, _Watchdog
        self._MPI = _mpi()
        self.comm = self._MPI.COMM_WORLD if comm is None else comm
        self.nranks, self.ranks = self.comm.Get_size(), [self.comm.Get_rank()]
        self._watchdog = _Watchdog(self.comm, float(timeout_s))

    def allgather(self, rows, what=None):
        mine = np.ascontiguousarray(rows[self.ranks[0]], np.int64)
        got = np.empty((self.nranks, mine.size), np.int64)
        with self._watchdog.guard(what or "the count exchange"):
            self.comm.Allgather(mine, got)
        return got

    def alltoallv(self, sends, send_counts, recv_counts, pad_rows=0):
        from .protocol import _displs
        MPI, me = self._MPI, self.ranks[0]
        send = np.ascontiguousarray(sends[me])
        row = int(np.prod(send.shape[1:], dtype=np.int64)) * send.dtype.itemsize
        rc = np.asarray(recv_counts[me], np.int64)
        recv = _receive_buffer(send, rc.sum(), pad_rows)
        sc, rcb = np.asarray(send_counts[me], np.int64) * row, rc * row
        with self._watchdog.guard("an all-to-all exchange"):
            self.comm.Alltoallv([send.reshape(-1).view(np.uint8), (sc, _displs(sc)), MPI.BYTE],
                                [recv.reshape(-1).view(np.uint8), (rcb, _displs(rcb)), MPI.BYTE])
        return {me: recv}

    def barrier(self):
        with self._watchdog.guard("a barrier"):
            self.comm.Barrier()

    def abort(self, why):
        from .guards import ABORT_CODE
        sys.stderr.write(f"dsperf.ep: rank {self.ranks[0]}: {why}; aborting the job\n")
        sys.stderr.flush()
        self._MPI.COMM_WORLD.Abort(ABORT_CODE)
