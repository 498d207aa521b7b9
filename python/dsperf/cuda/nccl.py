"""Expert-parallel dispatch and combine across GPUs over NCCL (grouped ncclSend / ncclRecv).

Experts are split evenly and contiguously over `nranks` ranks (rank r owns experts
[r * E / n, (r + 1) * E / n)). Two layouts, as DeepEP's two modes:

* **normal** (prefill): a small all-to-all of per-expert counts, then an all-to-all of exactly the
  routed rows; each rank receives its tokens contiguous per local expert (the contiguous layout
  of ``experts_contiguous`` / ``grouped_gemm(offsets=...)``).
* **low latency** (decode): one all-to-all of fixed-size slabs, [local experts, max_tokens] rows per
  peer (no wait for counts before the data moves; the counts travel in a second, tiny exchange),
  compacted on arrival into the masked layout [local experts, nranks * max_tokens, dim] with
  per-expert counts (``experts_masked`` / ``grouped_gemm(counts=...)``).

Combine sends expert outputs back the same way and sums them per token with the gate weights.

The routing plan (which row goes where) is host work on the token ids, in numpy; the rows move on
the GPU. Unlike DeepEP, nothing here is a custom communication kernel: it is NCCL point-to-point
plus dsperf's permute kernels, and the low-latency mode sends its padding rows too.

One process may drive every GPU (``Communicator.local``), or each process one GPU
(``Communicator.from_unique_id`` with an id shared by e.g. mpi4py). The same dispatch/combine code
also runs over ``SimulatedTransport`` (numpy, every rank in one process), which is how the routing
logic is tested on machines without GPUs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _C
from .. import _arrays as A
from .. import kernels as K
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


# ---- transports: how rows move -----------------------------------------------------------------
class NcclTransport:
    """Rows on the GPUs (DeviceArray), moved by NCCL."""

    def __init__(self, comm: Communicator):
        self.comm, self.nranks, self.ranks = comm, comm.nranks, comm.ranks
        self._device = dict(zip(comm.ranks, comm.devices))

    def to_rank(self, rank, a):
        return a if isinstance(a, DeviceArray) else DeviceArray.from_numpy(np.ascontiguousarray(a), self._device[rank])

    def host(self, a):
        return a.numpy() if isinstance(a, DeviceArray) else np.asarray(a)

    def permute(self, rank, x, idx):
        from .. import cuda
        return cuda.moe_permute(x, self.to_rank(rank, np.ascontiguousarray(idx, np.int32)))

    def unpermute(self, rank, y, position, weights):
        from .. import cuda
        if isinstance(position, np.ndarray):
            position = np.ascontiguousarray(position, np.int32)
        return cuda.moe_unpermute(y, self.to_rank(rank, position), self.to_rank(rank, weights))

    def alltoallv(self, sends, send_counts, recv_counts):
        """sends[rank]: [rows, ...] grouped by destination; counts [nranks] per local rank."""
        first = sends[self.ranks[0]]
        row_shape, dtype = first.shape[1:], first.dtype
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        recvs, parts = {}, []
        for comm, rank in zip(self.comm.comms, self.ranks):
            sc, rc = np.asarray(send_counts[rank], np.int64), np.asarray(recv_counts[rank], np.int64)
            recv = DeviceArray((int(rc.sum()),) + tuple(row_shape), dtype, self._device[rank])
            so = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64)
            ro = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64)
            parts.append((comm, self._device[rank], sends[rank].ptr, recv.ptr, so.tolist(), sc.tolist(), ro.tolist(),
                          rc.tolist()))
            recvs[rank] = recv
        _G.nccl_alltoallv(parts, max(row_bytes, 1))
        return recvs


class SimulatedTransport:
    """Every rank in this process with numpy arrays: the same plan, rows moved by slicing. The
    stand-in for NCCL in tests on machines without GPUs."""

    def __init__(self, nranks):
        self.nranks, self.ranks = int(nranks), list(range(int(nranks)))

    def to_rank(self, rank, a):
        return np.ascontiguousarray(a)

    def host(self, a):
        return np.asarray(a)

    def permute(self, rank, x, idx):
        return x[np.asarray(idx, np.int64)]

    def unpermute(self, rank, y, position, weights):
        return np.einsum("tk,tkd->td", weights, y[position]).astype(np.float32)

    def alltoallv(self, sends, send_counts, recv_counts):
        n = self.nranks
        pieces = {}
        for s in range(n):
            off = np.concatenate([[0], np.cumsum(send_counts[s])])
            for d in range(n):
                pieces[s, d] = sends[s][off[d]:off[d + 1]]
        out = {}
        for d in range(n):
            for s in range(n):
                if len(pieces[s, d]) != recv_counts[d][s]:
                    raise AssertionError(f"rank {d} expected {recv_counts[d][s]} rows from {s}, "
                                         f"got {len(pieces[s, d])}")
            out[d] = np.concatenate([pieces[s, d] for s in range(n)])
        return out


# ---- the plan ------------------------------------------------------------------------------------
@dataclass
class DispatchHandle:
    """What combine needs to send a rank's expert outputs back (host plan arrays)."""
    layout: str
    position: np.ndarray        # [T, K]: each (token, slot)'s row in what combine receives back
    weights: object             # [T, K] gate weights (on the rank)
    send_counts: np.ndarray     # rows sent to each peer at dispatch (combine receives these)
    recv_counts: np.ndarray     # rows received from each peer at dispatch (combine sends these)
    arrange: np.ndarray         # received-order row of each row in the expert layout
    n_back: int = 0             # rows of the combine receive buffer
    extra: dict = field(default_factory=dict)


def _check_dispatch(transport, xs, ids, weights, n_experts):
    n = transport.nranks
    n_experts = A.integer("n_experts", n_experts, 1)
    if n_experts % n:
        raise ValueError(f"n_experts ({n_experts}) must split evenly over the {n} ranks")
    for name, d in (("xs", xs), ("ids", ids), ("weights", weights)):
        if not isinstance(d, dict) or sorted(d) != sorted(transport.ranks):
            raise ValueError(f"{name} must map each local rank {transport.ranks} to its array")
    hids = {}
    for r in transport.ranks:
        h = A.ids(f"ids[{r}]", np.ascontiguousarray(transport.host(ids[r])), 2)
        if h.size and (h.min() < 0 or h.max() >= n_experts):
            raise ValueError(f"ids[{r}] must lie in [0, {n_experts}), got [{h.min()}, {h.max()}]")
        if xs[r].shape[0] != h.shape[0] or tuple(weights[r].shape) != h.shape:
            raise ValueError(f"rank {r}: xs must have one row per token and weights the shape of ids {h.shape}")
        hids[r] = h
    return hids, n_experts // n


def _exchange_counts(transport, per_expert, epr):
    """Each rank's per-expert row counts for every peer's experts -> [nranks, epr] received counts."""
    n = transport.nranks
    sends = {r: transport.to_rank(r, per_expert[r].reshape(n, epr).astype(np.int64)) for r in transport.ranks}
    ones = {r: np.ones(n, np.int64) for r in transport.ranks}
    got = transport.alltoallv(sends, ones, ones)
    return {r: transport.host(got[r]).reshape(n, epr) for r in transport.ranks}


def dispatch(transport, xs, ids, weights, n_experts):
    """Normal dispatch: xs[rank] [T, dim] (BF16 on the GPU), ids[rank] int32 [T, K] global expert
    ids, weights[rank] FP32 [T, K]. Returns ({rank: x_local [rows, dim] contiguous per local
    expert}, {rank: offsets int64 [epr + 1]}, {rank: handle})."""
    hids, epr = _check_dispatch(transport, xs, ids, weights, n_experts)
    n = transport.nranks
    per_expert, plans = {}, {}
    for r in transport.ranks:
        offsets, position, source = K.moe_route(hids[r], n_experts)
        per_expert[r] = np.diff(offsets)
        plans[r] = (offsets, position, source)
    cnt = _exchange_counts(transport, per_expert, epr)  # cnt[r][s, e]: rows rank r gets from s for expert e
    sends, send_counts, recv_counts = {}, {}, {}
    for r in transport.ranks:
        sends[r] = transport.permute(r, xs[r], plans[r][2])
        send_counts[r] = per_expert[r].reshape(n, epr).sum(1)
        recv_counts[r] = cnt[r].sum(1)
    recv = transport.alltoallv(sends, send_counts, recv_counts)
    out, offs, handles = {}, {}, {}
    for r in transport.ranks:
        c = cnt[r]
        # Received order is (source, expert, token); the expert layout wants (expert, source, token).
        base = np.concatenate([[0], np.cumsum(c.ravel())[:-1]]).reshape(n, epr)
        arrange = np.concatenate([np.arange(base[s, e], base[s, e] + c[s, e]) for e in range(epr)
                                  for s in range(n)] + [np.zeros(0, np.int64)]).astype(np.int32)
        out[r] = transport.permute(r, recv[r], arrange)
        offs[r] = np.concatenate([[0], np.cumsum(c.sum(0))]).astype(np.int64)
        handles[r] = DispatchHandle("normal", plans[r][1], weights[r], send_counts[r], recv_counts[r], arrange,
                                    n_back=int(send_counts[r].sum()))
    return out, offs, handles


def combine(transport, ys, handles):
    """ys[rank]: FP32 expert outputs in the layout dispatch returned. Returns {rank: y [T, dim]}
    = sum over a token's slots of weight x its expert's output."""
    sends, send_counts, recv_counts = {}, {}, {}
    for r in transport.ranks:
        h = handles[r]
        y = ys[r] if h.layout == "normal" else ys[r].reshape(-1, ys[r].shape[-1])
        sends[r] = transport.permute(r, y, h.extra.get("inverse", np.argsort(h.arrange, kind="stable")))
        send_counts[r], recv_counts[r] = h.recv_counts, h.send_counts
    back = transport.alltoallv(sends, send_counts, recv_counts)
    return {r: transport.unpermute(r, back[r], handles[r].position, handles[r].weights) for r in transport.ranks}


def dispatch_low_latency(transport, xs, ids, weights, n_experts, max_tokens):
    """Low-latency dispatch: as dispatch, but rows travel in fixed slabs of max_tokens per (peer,
    local expert), and arrive in the masked layout. Returns ({rank: x [epr, nranks * max_tokens,
    dim]}, {rank: counts int32 [epr]}, {rank: handle})."""
    hids, epr = _check_dispatch(transport, xs, ids, weights, n_experts)
    n = transport.nranks
    cap = A.integer("max_tokens", max_tokens, 1)
    per_expert, plans, sends = {}, {}, {}
    for r in transport.ranks:
        T = hids[r].shape[0]
        if T > cap:
            raise ValueError(f"rank {r} has {T} tokens, more than max_tokens = {cap}")
        offsets, position, source = K.moe_route(hids[r], n_experts)
        per_expert[r] = np.diff(offsets)
        # Slab row (expert g, j) holds the j-th token routed to g; padding rows repeat token 0.
        slab = np.zeros((n_experts, cap), np.int32)
        slot_pos = np.zeros(hids[r].shape, np.int64)
        for g in range(n_experts):
            k = per_expert[r][g]
            slab[g, :k] = source[offsets[g]:offsets[g] + k]
        g_of = hids[r].astype(np.int64)
        slot_pos = g_of * cap + (position - offsets[g_of])  # (dest, expert, j) row of each (token, slot)
        plans[r] = slot_pos.astype(np.int32)
        if T == 0:
            sends[r] = transport.to_rank(r, np.zeros((n_experts * cap,) + tuple(xs[r].shape[1:]), xs[r].dtype))
        else:
            sends[r] = transport.permute(r, xs[r], slab.ravel())
    cnt = _exchange_counts(transport, per_expert, epr)
    equal = {r: np.full(n, epr * cap, np.int64) for r in transport.ranks}
    recv = transport.alltoallv(sends, equal, equal)  # [(source, expert, j)]
    out, counts, handles = {}, {}, {}
    for r in transport.ranks:
        c = cnt[r]
        # Compact: expert e's rows from every source, in source order, then padding (row 0).
        idx = np.zeros((epr, n * cap), np.int32)
        inverse = np.zeros(n * epr * cap, np.int32)
        for e in range(epr):
            k = 0
            for s in range(n):
                rows = (s * epr + e) * cap + np.arange(c[s, e])
                idx[e, k:k + c[s, e]] = rows
                inverse[rows] = e * n * cap + k + np.arange(c[s, e])
                k += c[s, e]
        x = transport.permute(r, recv[r], idx.ravel())
        out[r] = x.reshape((epr, n * cap) + tuple(x.shape[1:]))
        counts[r] = c.sum(0).astype(np.int32)
        handles[r] = DispatchHandle("low_latency", plans[r], weights[r], equal[r], equal[r], idx.ravel(),
                                    n_back=n * epr * cap, extra={"inverse": inverse})
    return out, counts, handles


def alltoall_baseline(transport, sends):
    """The raw exchange for the benchmark: every rank sends an equal share of its rows to every
    peer (one grouped send/recv round). sends[rank]: [nranks * rows, ...]."""
    n = transport.nranks
    counts = {}
    for r in transport.ranks:
        if sends[r].shape[0] % n:
            raise ValueError(f"sends[{r}] must hold a multiple of nranks = {n} rows")
        counts[r] = np.full(n, sends[r].shape[0] // n, np.int64)
    return transport.alltoallv(sends, counts, counts)
