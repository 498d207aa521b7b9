"""The MPI all-to-all exchange (AlltoallvEpComm): EpComm's calls over the one dispatch/combine of
routed.py on the MPI transport (transport.MpiTransport: MPI_Allgather of the counts, MPI_Alltoallv
of the rows), so it plans, lays out and hands back exactly what the NCCL and simulated transports
and the window exchange do (plan.ExchangeHandle). EpComm picks it for nodes of unequal size, and the
bench compares the window exchange with it; raw_alltoallv is the bench's baseline.

A dispatch: every rank's argument verdict, call descriptor, top_k and fp8 flag are gathered
in the first words of routed.py's count allgather (on a private duplicate of the communicator), so
a bad argument raises the same ValueError on every rank naming the rank before any row moves (the
communicator stays usable), and ranks in different calls raise RuntimeError on every rank naming
each rank's call; then the alltoallv of the rows. FP8 payloads travel as byte rows (values | pad to 4 |
scales), BF16 ones as they are. Combine gathers the verdicts the same way, then routed.combine:
in the token layout each rank reduces its received tokens over its experts (FP32) and one row per
(token, rank) goes back; in the masked layout one row per pair. Every wait runs under the
watchdog (past timeout_s the job ends); creating it installs install_abort_on_error (an uncaught
exception on one rank ends the job). Calls are blocking; async_op=True returns an object whose
wait() gives the result, as the window exchange's does.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import kernels
from . import routed
from .guards import ABORT_CODE, _mpi, install_abort_on_error  # noqa: F401 (re-exported)
from .plan import ExchangeHandle
from .protocol import (BF16, CALLS, F32, FP8, DispatchOut, LowLatencyOut, _agree, _calls_out_of_order,  # noqa: F401
                       _displs, _Done, _header, _local_check, _parse_headers, open_ep_comm)
from .transport import MpiTransport
from .base import EpExchange

DispatchHandle = LowLatencyHandle = ExchangeHandle     # its former handle types' names: one type now
_VALUES = ("call", "seq", "top_k", "fp8")


def _pack(x, fp8, hidden):
    """(payload rows as routed moves them, value bytes, scales' column): BF16 rows as they are, or FP8
    values and FP32 scales side by side in byte rows (values | pad to 4 bytes | scales)."""
    if isinstance(x, tuple):
        vals, scales = x
    elif fp8 and x.shape[0] == 0:
        vals, scales = np.zeros((0, hidden), FP8), np.zeros((0, -(-hidden // 128)), F32)
    else:
        vals, scales = kernels.act_quant(x) if fp8 else (x, None)
    if scales is None:
        return np.ascontiguousarray(vals), 2 * vals.shape[1], 0
    vb = vals.shape[1]
    sc_col = vb + (-vb % 4)
    rows = np.zeros((vals.shape[0], sc_col + 4 * scales.shape[1]), np.uint8)
    rows[:, :vb] = vals.view(np.uint8)
    rows[:, sc_col:] = np.ascontiguousarray(scales).view(np.uint8)
    return rows, vb, sc_col


def _unpack(rows, vb, sc_col):
    """(values, scales or None) views of received payload rows (any leading shape)."""
    if not sc_col:
        return rows, None
    return rows[..., :vb].view(FP8), rows[..., sc_col:].view(F32)


class AlltoallvEpComm(EpExchange):
    """Dispatch and combine over an MPI communicator whose ranks each own num_experts / ranks
    consecutive experts, with the calls, arguments and results of exchange.WindowEpComm (one
    handle type, ExchangeHandle). Collective construction: the ranks must agree on num_experts,
    hidden and max_tokens (a difference raises on every rank naming it); max_tokens is needed by
    the low-latency mode only. timeout_s bounds every wait; abort_on_error installs
    install_abort_on_error(comm)."""

    exchange = "alltoallv"

    def __init__(self, num_experts, hidden, *, comm=None, max_tokens=None, timeout_s=60.0, abort_on_error=True):
        open_ep_comm(self, comm, num_experts, hidden, max_tokens, timeout_s, abort_on_error)
        # Verdicts, descriptors and rows travel on a private duplicate, apart from the caller's traffic.
        self._t = MpiTransport(self.comm.Dup(), timeout_s=self.timeout_s)
        self._call_seq = 0

    def _head(self, call, err, top_k=0, fp8=0):
        """This rank's verdict and call as header words, the check of every rank's, and the wait's name."""
        self._call_seq += 1
        head = _header(err, (CALLS.index(call), self._call_seq, top_k, fp8))
        return {self.rank: head}, self._check_heads, f"the other ranks to reach {call} (call {self._call_seq})"

    def _agree_call(self, call, err):
        """Every rank's verdict and call, gathered alone: raises the same error on every rank. The
        row has a dispatch's length (its head, then counts), so ranks in different calls still
        take part in one allgather of one size and are named."""
        head, check, what = self._head(call, err)
        words = head[self.rank].size
        row = np.zeros(words + self.size + self.num_experts, np.int64)
        row[:words] = head[self.rank]
        check(self._t.allgather({self.rank: row}, what)[:, :words])

    def _check_heads(self, rows):
        codes = rows[:, 2]
        if np.any(codes != codes[0]):
            raise _calls_out_of_order(codes, self._call_seq)
        values = _parse_headers(rows, _VALUES)
        _agree(values, _VALUES, {"top_k", "fp8"})

    def close(self):
        """Nothing to free: the buffers are ordinary arrays (WindowEpComm.close frees its windows)."""

    def barrier(self):
        self._agree_call("barrier", None)

    def _handle_fits(self, handle) -> bool:
        return isinstance(handle, ExchangeHandle) and handle.plan is not None   # a transport plan to read back

    # -- dispatch (the public calls and their checks: base.EpExchange) -------------------------------
    def _dispatch(self, call, check, fp8, layout, async_op):
        checked, err = _local_check(check)
        # The verdict and call ride in routed's count allgather; a bad rank takes part with no tokens.
        agree = self._head(call, err, checked[1].shape[1] if err is None else 0, int(bool(fp8)))
        xx, ids, w, T = checked if err is None else (np.zeros((0, self.hidden), BF16), np.zeros((0, 1), np.int64),
                                                      None, 0)
        rows, vb, sc_col = _pack(xx, bool(fp8), self.hidden)
        me = {self.rank: rows}, {self.rank: ids}, {self.rank: np.zeros(ids.shape, F32) if w is None else w}
        if layout == "masked":
            res = routed.low_latency_results(self._t, *me, self.num_experts, self.max_tokens or 1,
                                             out_dim=self.hidden, agree=agree)[self.rank]
            xv, xs = _unpack(res.x, vb, sc_col)
            out = LowLatencyOut(xv, xs, res.counts, res.handle)
        else:
            res = routed.dispatch_results(self._t, *me, self.num_experts, layout=layout, out_dim=self.hidden,
                                          agree=agree)[self.rank]
            xv, xs = _unpack(res.x, vb, sc_col)
            records = res.x.view(np.uint8).reshape(res.x.shape[0], res.x.shape[1] * res.x.itemsize) \
                if layout == "token" else None
            out = dataclasses.replace(res, x=xv, scales=xs, records=records, scale_col=sc_col)
        return _Done(lambda: out) if async_op else out

    # -- combine ---------------------------------------------------------------------------------
    def _combine(self, call, check, handle, rows, per_token, weights, async_op, out):
        yy, err = _local_check(check)
        self._agree_call(call, err)
        if weights is not None:
            handle = dataclasses.replace(handle, weights=np.ascontiguousarray(weights, F32))
        res = routed.combine(self._t, {self.rank: yy}, {self.rank: handle}, per_token=per_token)[self.rank]
        if out is not None:
            out[...] = res
            res = out
        return _Done(lambda: res) if async_op else res


def raw_alltoallv(comm, send, send_counts, recv, recv_counts):
    """The baseline: one blocking MPI_Alltoallv of bytes, buffers laid out by rank beforehand."""
    from mpi4py import MPI
    sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
    comm.Alltoallv([send, (sc, _displs(sc)), MPI.BYTE], [recv, (rc, _displs(rc)), MPI.BYTE])
