"""Expert-parallel dispatch and combine across GPUs over NCCL: the NCCL transport of the one
exchange (dsperf.ep.routed over the interface of dsperf.ep.transport).

Communicator: one process may drive every GPU (``Communicator.local``, ncclCommInitAll), or each
process one GPU (``Communicator.from_unique_id`` with an id shared by e.g. mpi4py).
NcclTransport: the interface's primitives on the GPUs: alltoallv of rows as grouped ncclSend /
ncclRecv (``alltoall_nccl.cu``), the count allgather as an alltoallv of the count rows, gather and
weighted_sum as dsperf's permute kernels (``moe_permute`` / ``moe_unpermute``).

dispatch / dispatch_low_latency / combine / alltoall_baseline, DispatchHandle (= ExchangeHandle)
and SimulatedTransport are the ones of dsperf.ep (routed.py, plan.py, transport.py), re-exported
here: the same code, layouts ("expert", "token", masked) and handle over NCCL, MPI and the
simulated transport, so the tests on machines without GPUs run the NCCL path's code.
"""
from __future__ import annotations

import numpy as np

from .. import _C
from .. import _arrays as A
from ..ep.routed import (DispatchHandle, alltoall_baseline, combine, dispatch, dispatch_low_latency,  # noqa: F401
                         dispatch_results, low_latency_results)
from ..ep.transport import SimulatedTransport, Transport  # noqa: F401 (SimulatedTransport re-exported)
from .arrays import DeviceArray

_G = _C.cuda


# ---- communicators -----------------------------------------------------------------------------
def available() -> tuple[bool, str]:
    why = _G.why_unavailable()
    if not why:
        why = _G.nccl_why_unavailable()
    return (not why, why)


def unique_id() -> bytes:
    """An NCCL id for Communicator.from_unique_id (make it on one rank, share it with the others)."""
    return _G.nccl_unique_id()


class Communicator:
    """NCCL communicators of the ranks this process drives."""

    def __init__(self, comms, ranks, devices, nranks):
        self.comms, self.ranks, self.devices, self.nranks = list(comms), list(ranks), list(devices), int(nranks)

    @classmethod
    def local(cls, devices=None) -> "Communicator":
        """Every rank in this process, one per GPU (ncclCommInitAll)."""
        if devices is None:
            devices = list(range(_G.device_count()))
        devices = [A.integer("device", d, 0) for d in devices]
        if len(set(devices)) != len(devices) or not devices:
            raise ValueError(f"devices must be distinct and non-empty, got {devices}")
        return cls(_G.nccl_init_all(devices), range(len(devices)), devices, len(devices))

    @classmethod
    def from_unique_id(cls, uid: bytes, nranks: int, rank: int, device: int) -> "Communicator":
        """This process's rank of an nranks-wide communicator (ncclCommInitRank)."""
        if not isinstance(uid, bytes):
            raise TypeError(f"uid must be bytes from unique_id(), got {type(uid).__name__}")
        nranks, rank, device = A.integer("nranks", nranks, 1), A.integer("rank", rank, 0), A.integer("device", device, 0)
        if rank >= nranks:
            raise ValueError(f"rank must lie in [0, nranks = {nranks}), got {rank}")
        return cls([_G.nccl_init_rank(uid, nranks, rank, device)], [rank], [device], nranks)

    def close(self):
        for c in self.comms:
            _G.nccl_destroy(c)
        self.comms = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the transport ------------------------------------------------------------------------------
class NcclTransport(Transport):
    """Rows on the GPUs (DeviceArray), moved by NCCL; the ranks of `comm` this process drives."""

    def __init__(self, comm: Communicator):
        self.comm, self.nranks, self.ranks = comm, comm.nranks, comm.ranks
        self._device = dict(zip(comm.ranks, comm.devices))

    def to_rank(self, rank, a):
        return a if isinstance(a, DeviceArray) else DeviceArray.from_numpy(np.ascontiguousarray(a), self._device[rank])

    def host(self, a):
        return a.numpy() if isinstance(a, DeviceArray) else np.asarray(a)

    def gather(self, rank, x, idx):
        from .. import cuda
        return cuda.moe_permute(self.to_rank(rank, x), self.to_rank(rank, np.ascontiguousarray(idx, np.int32)))

    def weighted_sum(self, rank, y, position, weights):
        from .. import cuda
        return cuda.moe_unpermute(self.to_rank(rank, y), self.to_rank(rank, position), self.to_rank(rank, weights))

    def alltoallv(self, sends, send_counts, recv_counts, pad_rows=0):
        """sends[rank]: [rows, ...] grouped by destination; counts [nranks] per local rank; each
        receive buffer ends in pad_rows zero rows."""
        first = sends[self.ranks[0]]
        row_shape, dtype = tuple(first.shape[1:]), first.dtype
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        recvs, parts = {}, []
        for comm, rank in zip(self.comm.comms, self.ranks):
            sc, rc = np.asarray(send_counts[rank], np.int64), np.asarray(recv_counts[rank], np.int64)
            make = DeviceArray.zeros if pad_rows else DeviceArray
            recv = make((int(rc.sum()) + pad_rows,) + row_shape, dtype, self._device[rank])
            so = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64)
            ro = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64)
            send = self.to_rank(rank, sends[rank])
            parts.append(_G.AllToAllPart(comm=comm, device=self._device[rank], send=send.ptr, recv=recv.ptr,
                                         send_offsets=so.tolist(), send_counts=sc.tolist(), recv_offsets=ro.tolist(),
                                         recv_counts=rc.tolist()))
            recvs[rank] = recv
        _G.nccl_alltoallv(parts, max(row_bytes, 1))
        return recvs

    def abort(self, why):
        """Destroy this process's communicators (peers' NCCL calls fail) and raise."""
        self.comm.close()
        super().abort(why)
