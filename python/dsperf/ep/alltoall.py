"""All-to-all dispatch and combine of MoE tokens over MPI, in DeepEP's two layouts: the previous
exchange (AlltoallvEpComm), kept for nodes of unequal size and as the bench's comparison, and the
argument checks, headers, watchdog and abort-on-error hook that the window exchange
(exchange.WindowEpComm, the default through comm.EpComm) shares with it.

Normal mode (prefill): the ranks first exchange how many tokens each sends to each (and per
expert), then one variable-size exchange (MPI_Ialltoallv) carries each token once per destination
rank, with its top-k ids local to that rank and its weights. The receiver returns the tokens as
they arrived (layout="token", DeepEP's layout, views of the receive buffer) or copied into the
contiguous per-expert layout (layout="expert"; a token with two experts on the rank appears twice).
Combine takes per-token partials, or reduces the experts' outputs over each received token (FP32,
weighted), sends them back in BF16, and the source sums the partials over ranks (FP32) in rank
order, in the tokens' original order.

Low-latency mode (decode): every rank may send at most ``max_tokens`` tokens; each (token, expert)
pair travels once, in one exchange of point-to-point messages received into buffers of the maximum
size (no count exchange first), and lands in the masked layout [local_experts, ranks * max_tokens,
hidden] with per-expert counts. Combine sends each pair's expert output back in BF16 and the source
forms sum_k weight_k * y_k in slot order, as the single-process layer does.

Dispatch payloads are FP8 (e4m3, one FP32 scale per 128 values, dsperf.kernels.act_quant) or BF16.

Errors: every call first checks its arguments locally and carries the verdict in the first
message it exchanges (normal-mode combine: a small exchange of status blocks beside the data), so a bad argument on one rank raises the same ValueError on every rank
(naming the rank and the argument) instead of leaving the others waiting. Every wait runs under a
watchdog: past ``timeout_s`` (default 60 s) without progress, as when a peer died, the rank prints
why and calls MPI_Abort, which ends the whole job with an error.

Calls out of order: every call (dispatch, combine, low-latency dispatch and combine, barrier) also
gathers a small call descriptor on a private duplicate of the communicator, posted beside its first
exchange, and checks it before waiting for the data: ranks in different calls raise RuntimeError on
every rank naming them ("calls out of order: rank 0 called dispatch(normal), rank 1 called
dispatch(low_latency)") within milliseconds instead of waiting for the watchdog. The communicator is
unusable after that error (the mismatched exchanges stay posted).

Uncaught exceptions: creating an EpComm installs a sys.excepthook (install_abort_on_error) that
prints the traceback and calls MPI_Abort, so an exception on one rank ends the whole job in seconds
in a plain `python script.py` under mpirun, as `python -m mpi4py script.py` would.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _C, kernels
from .guards import ABORT_CODE, _mpi, _Watchdog, install_abort_on_error  # noqa: F401 (re-exported)
from .protocol import (BF16, CALLS, F32, FP8, _CALL_MAGIC, DispatchOut, LowLatencyOut, _agree,  # noqa: F401
                       _byte_rows, _calls_out_of_order, _check_array, _displs, _header, _header_words,
                       _local_check, _parse_headers, check_tokens, open_ep_comm)

_C_EP = _C.ep


_DTYPES = {"bf16": 0, "fp8": 1}
_STATUS_BYTES = 256         # a combine status block: int32 ok, then the error text




# ---- results and handles -----------------------------------------------------------------------
@dataclass
class DispatchHandle:
    """What normal-mode combine needs: who sent what, and how received rows map to experts."""
    num_tokens: int            # tokens of this rank (combine's output rows)
    send_counts: np.ndarray    # [ranks] tokens sent to each rank
    token_rows: np.ndarray     # [tokens, ranks] row of each token's partial in combine's receive buffer, -1: none
    recv_counts: np.ndarray    # [ranks] tokens received from each rank
    position: np.ndarray       # [received, top_k] row of each (token, local slot) in the expert layout (0 if not local)
    weights: np.ndarray        # [received, top_k] FP32 weights, 0 where the slot's expert is on another rank
    hidden: int
    wire_bytes: dict           # bytes per peer: dispatch_send, dispatch_recv, combine_send, combine_recv


@dataclass
class LowLatencyHandle:
    num_tokens: int
    top_k: int
    send_rows: np.ndarray      # [ranks] (token, expert) pairs sent to each rank
    pair_order: np.ndarray     # [tokens * top_k] flat pair index of each sent row, grouped by rank
    recv_rows: np.ndarray      # [ranks] pairs received from each rank
    recv_slot: np.ndarray      # [sum(recv_rows)] flat index into [local_experts * capacity] of each received row
    hidden: int
    wire_bytes: dict           # bytes per peer: dispatch_send, dispatch_recv, combine_send, combine_recv


class Pending:
    """An exchange in flight: wait() completes it (under the watchdog) and returns its result.
    test() drives MPI progress without blocking and says whether the requests are done."""

    def __init__(self, ep, requests, finish, what, call=None):
        self._ep, self._reqs, self._finish, self._what = ep, requests, finish, what
        self._call = call           # the call descriptor exchange to check first (None: checked already)
        self._done = False
        self._result = None

    def test(self):
        return self._done or self._ep._mpi.Request.Testall(self._reqs)

    def _check_call(self):
        call, self._call = self._call, None
        if call is not None:
            self._ep._check_call(call)

    def wait(self):
        if not self._done:
            self._check_call()
            self._ep._waitall(self._reqs, self._what)
            self._result = self._finish()
            self._done = True
        return self._result


def _row_layout(hidden, fp8):
    """Bytes of a payload row: FP8 values + FP32 scales, or BF16 values."""
    if fp8:
        return hidden + 4 * -(-hidden // 128)
    return 2 * hidden


def _payload(x, fp8):
    """(values, scales or None) of x, quantising a BF16 x when fp8 is asked for."""
    if isinstance(x, tuple):
        return x
    if fp8:
        return kernels.act_quant(x)
    return x, None


def _parts(values, scales):
    """The payload as byte matrices laid side by side in a row: values, then scales (FP8 only)."""
    v = np.ascontiguousarray(values).view(np.uint8).reshape(values.shape[0], values.shape[1] * values.itemsize)
    if scales is None:
        return [v]
    return [v, np.ascontiguousarray(scales).view(np.uint8).reshape(scales.shape[0], 4 * scales.shape[1])]


def _copy_parts(parts, src_index, dst, dst_index, n):
    col = 0
    for part in parts:
        _C_EP.copy_rows(part, 0, src_index, dst, col, dst_index, n, part.shape[1])
        col += part.shape[1]


class AlltoallvEpComm:
    """Dispatch and combine over an MPI communicator whose ranks each own num_experts / ranks
    consecutive experts (rank r: experts [r * E / R, (r + 1) * E / R)).

    Collective: every rank constructs it with the same num_experts, hidden and max_tokens; a
    difference raises ValueError on every rank naming the argument. max_tokens (tokens per rank
    per call) is needed by the low-latency mode only. timeout_s bounds every wait (watchdog).
    abort_on_error (default True) installs install_abort_on_error(comm): an uncaught exception on a
    rank ends the whole job. Every rank must make the same calls in the same order; a rank in another
    call raises RuntimeError naming the calls on every rank ("calls out of order: ...").
    """

    exchange = "alltoallv"

    def __init__(self, num_experts, hidden, *, comm=None, max_tokens=None, timeout_s=60.0, abort_on_error=True):
        open_ep_comm(self, comm, num_experts, hidden, max_tokens, timeout_s, abort_on_error)
        # Exchange buffers live as long as the communicator (fresh pages cost more than the copies),
        # two of each kind so that two micro-batches can be in flight (two-batch overlap).
        self._buffers = {}
        self._turn = {}
        self._ll_dirty = {}
        # Call descriptors travel on a private duplicate, so they never match the exchanges' messages.
        self._calls = self.comm.Dup()
        self._call_seq = 0

    def _announce(self, call):
        """Post this rank's descriptor of its next call (an Iallgather on the private communicator);
        _check_call waits for every rank's and compares them."""
        self._call_seq += 1
        mine = np.array([_CALL_MAGIC, self._call_seq, CALLS.index(call)], np.int64)
        got = np.empty((self.size, 3), np.int64)
        return self._calls.Iallgather(mine, got), got, mine

    def _check_call(self, call):
        req, got, mine = call
        self._waitall([req], f"the other ranks to reach {CALLS[int(mine[2])]} (call {int(mine[1])})")
        if np.any(got[:, 0] != _CALL_MAGIC) or np.any(got[:, 2] != mine[2]):
            raise _calls_out_of_order(got[:, 2], int(mine[1]))

    def _next_turn(self, kind):
        t = self._turn.get(kind, 1) ^ 1
        self._turn[kind] = t
        return t

    def _buffer(self, key, shape, dtype):
        """A persistent array of at least this size for key, viewed as shape/dtype (contents kept)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = self._buffers.get(key)
        if buf is None or buf.nbytes < nbytes:
            buf = np.zeros(max(nbytes, 64), np.uint8)
            self._buffers[key] = buf
        return buf[:nbytes].view(dtype).reshape(shape)

    # -- waiting -------------------------------------------------------------------------------
    def _waitall(self, reqs, what):
        with self._watchdog.guard(what):
            self._mpi.Request.Waitall(reqs)

    def close(self):
        """Nothing to free: the buffers are ordinary arrays (WindowEpComm.close frees its windows)."""

    def barrier(self):
        call = self._announce("barrier")
        req = self.comm.Ibarrier()
        self._check_call(call)
        self._waitall([req], "a barrier")

    # -- argument checks shared by both modes ----------------------------------------------------
    def _check_tokens(self, x, topk_ids, topk_weights, fp8, need_weights):
        return check_tokens(x, topk_ids, topk_weights, fp8, need_weights, self.hidden, self.num_experts)

    # -- normal mode -----------------------------------------------------------------------------
    def dispatch(self, x, topk_ids, topk_weights, *, fp8=True, layout="expert", async_op=False):
        """Normal-mode dispatch. x: BF16 [tokens, hidden] (quantised here when fp8) or an FP8
        (values, scales) pair from kernels.act_quant; topk_ids int [tokens, top_k] in
        [0, num_experts); topk_weights FP32 [tokens, top_k]. layout: "expert" (rows copied into the
        contiguous per-expert layout) or "token" (each received token once, no copy; DeepEP's
        layout). Returns a DispatchOut (or a Pending whose wait() returns it, with async_op=True;
        the count exchange completes before return)."""
        MPI = self._mpi
        W, E_loc = self.size, self.local_experts

        def check():
            if layout not in ("expert", "token"):
                raise ValueError(f"layout must be 'expert' or 'token', got {layout!r}")
            return self._check_tokens(x, topk_ids, topk_weights, fp8, True)

        checked, err = _local_check(check)
        if err is None:
            xx, ids, w, T = checked
            K = ids.shape[1]
            dest = ids // E_loc                                       # [T, K]
            to_rank = np.zeros((T, W), bool)
            to_rank[np.arange(T)[:, None], dest] = True
            send_counts = to_rank.sum(axis=0).astype(np.int64)       # tokens per destination
            per_expert = np.bincount(ids.ravel(), minlength=self.num_experts).reshape(W, E_loc)
        else:
            T, K = 0, 0
            send_counts = np.zeros(W, np.int64)
            per_expert = np.zeros((W, E_loc), np.int64)
        names = ("top_k", "fp8")
        head = _header(err, (K, int(bool(fp8))))
        block = np.concatenate([np.broadcast_to(head, (W, head.size)), send_counts[:, None], per_expert], axis=1)
        block = np.ascontiguousarray(block, np.int64)
        got = np.empty_like(block)
        call = self._announce("dispatch(normal)")
        req = self.comm.Ialltoall(block, got)
        self._check_call(call)
        self._waitall([req], "the dispatch count exchange")
        values = _parse_headers(got[:, :head.size], names)
        _agree(values, names, set(names))
        recv_counts = got[:, head.size].copy()
        recv_per_expert = got[:, head.size + 1:].sum(axis=0)

        # One record per (token, destination): payload values, their scales (FP8), K local ids (-1:
        # not on that rank) and K weights, each 4-byte aligned so the receiver can view them in place.
        hidden = self.hidden
        vals, scales = _payload(xx, fp8)
        vb = hidden * (1 if fp8 else 2)
        sc_col = vb + (-vb % 4)
        id_col = sc_col + (4 * -(-hidden // 128) if fp8 else 0)
        w_col = id_col + 4 * K
        rec = w_col + 4 * K
        order_rank, order_tok = np.nonzero(to_rank.T)                # grouped by rank, tokens ascending
        order_tok = order_tok.astype(np.int64)
        turn = self._next_turn("dispatch")
        send = self._buffer(("dispatch_send", turn), (order_tok.size, rec), np.uint8)
        n_send = order_tok.size
        _C_EP.copy_rows(_byte_rows(vals), 0, order_tok, send, 0, None, n_send, vb)
        if fp8:
            _C_EP.copy_rows(_byte_rows(scales), 0, order_tok, send, sc_col, None, n_send, id_col - sc_col)
        lid = np.where(dest[order_tok] == order_rank[:, None], ids[order_tok] % E_loc, -1).astype(np.int32)
        send[:, id_col:w_col] = lid.view(np.uint8).reshape(-1, 4 * K)
        send[:, w_col:] = w[order_tok].view(np.uint8).reshape(-1, 4 * K)
        # Combine brings the partials back in the order they were sent: rank r's block, tokens ascending.
        token_rows = np.full((T, W), -1, np.int64)
        token_rows[order_tok, order_rank] = np.arange(n_send)
        n_recv = int(recv_counts.sum())
        recv = self._buffer(("dispatch_recv", turn), (n_recv, rec), np.uint8)
        sc, rc = send_counts * rec, recv_counts * rec
        req = self.comm.Ialltoallv([send, (sc, _displs(sc)), MPI.BYTE], [recv, (rc, _displs(rc)), MPI.BYTE])

        def finish():
            lid_r = recv[:, id_col:w_col].view(np.int32)
            w_r = recv[:, w_col:].view(F32)
            mine = lid_r >= 0
            offsets, position, source = kernels.moe_route(np.where(mine, lid_r, E_loc).astype(np.int32), E_loc + 1)
            rows = int(offsets[E_loc])
            if rows != int(recv_per_expert.sum()):
                raise RuntimeError(f"dsperf.ep: rank {self.rank} received {rows} expert rows, "
                                   f"the count exchange announced {int(recv_per_expert.sum())}")
            pick = source[:rows].astype(np.int64)
            xs = None
            if layout == "token":
                xv = recv[:, :vb].view(FP8 if fp8 else BF16)
                if fp8:
                    xs = recv[:, sc_col:id_col].view(F32)
            elif fp8:
                xv = self._buffer(("dispatch_x", turn), (rows, hidden), FP8)
                xs = self._buffer(("dispatch_scales", turn), (rows, id_col - sc_col), np.uint8)
                _C_EP.copy_rows(recv, 0, pick, xv.view(np.uint8), 0, None, rows, hidden)
                _C_EP.copy_rows(recv, sc_col, pick, xs, 0, None, rows, id_col - sc_col)
                xs = xs.view(F32)
            else:
                xv = self._buffer(("dispatch_x", turn), (rows, hidden), BF16)
                _C_EP.copy_rows(recv, 0, pick, xv.view(np.uint8), 0, None, rows, vb)
            wire = dict(dispatch_send=send_counts * rec, dispatch_recv=recv_counts * rec,
                        combine_send=recv_counts * 2 * hidden + _STATUS_BYTES,
                        combine_recv=send_counts * 2 * hidden + _STATUS_BYTES)
            weights = np.where(mine, w_r, 0).astype(F32)
            handle = DispatchHandle(T, send_counts, token_rows, recv_counts,
                                    np.where(mine, position, 0).astype(np.int32), weights, hidden, wire)
            return DispatchOut(xv, xs, offsets[:E_loc + 1].copy(), n_recv, handle, layout=layout, topk_ids=lid_r,
                               topk_weights=w_r, source=pick, records=recv if layout == "token" else None,
                               scale_col=sc_col)

        pending = Pending(self, [req], finish, "the dispatch payload exchange")
        return pending if async_op else pending.wait()

    def combine(self, y, handle: DispatchHandle, *, per_token=False, async_op=False):
        """Normal-mode combine. y: FP32 [rows, hidden], the experts' outputs in the per-expert layout
        (reduced here over each token's local experts, weighted, into the send buffer); or, with
        per_token=True, BF16 or FP32 [received tokens, hidden] already reduced per received token in
        arrival order (DeepEP's combine: a contiguous BF16 y is sent without a copy, so with
        async_op=True it must not change until wait() returns). Returns FP32
        [tokens, hidden]: each token's partials summed over ranks in rank order, on the rank and in
        the order the tokens came from."""
        MPI = self._mpi
        W, h = self.size, handle.hidden
        n_recv = int(handle.recv_counts.sum())

        def check():
            if per_token:
                yy = _check_array("y", y, (BF16, F32), (n_recv, h))
                return yy
            rows_needed = int(handle.position.max()) + 1 if handle.position.size else 0
            yy = _check_array("y", y, (F32,), (None, h))
            if yy.shape[0] < rows_needed:
                raise ValueError(f"y must have the {rows_needed} rows dispatch returned, got {yy.shape[0]}")
            return yy

        yy, err = _local_check(check)
        turn = self._next_turn("combine")
        # The verdict travels in its own small exchange beside the data, so a bad y on one rank is
        # reported on every rank and the data can be sent straight from y.
        status = np.zeros((W, _STATUS_BYTES), np.uint8)
        status[:] = _status_row(err)
        status_got = np.zeros_like(status)
        if err is None and per_token and yy.dtype == BF16:
            send = yy.view(np.uint16)
        else:
            send = self._buffer(("combine_send", turn), (n_recv, h), np.uint16)
            if err is not None:
                send[:] = 0
            elif per_token:
                _C_EP.gather_rows_to_bf16(yy, None, send)
            else:
                _C_EP.weighted_rows_to_bf16(yy, handle.position, handle.weights, send)
        n_back = int(handle.send_counts.sum())
        recv = self._buffer(("combine_recv", turn), (n_back, h), np.uint16)
        row = 2 * h
        sc, rc = handle.recv_counts * row, handle.send_counts * row
        call = self._announce("combine(normal)")
        reqs = [self.comm.Ialltoall(status, status_got),
                self.comm.Ialltoallv([send, (sc, _displs(sc)), MPI.BYTE], [recv, (rc, _displs(rc)), MPI.BYTE])]

        def finish():
            _raise_status_blocks(status_got)
            out = np.empty((handle.num_tokens, h), F32)
            _C_EP.combine_reduce(recv, handle.token_rows, out)   # partials summed in rank order
            return out

        pending = Pending(self, reqs, finish, "the combine exchange", call)
        return pending if async_op else pending.wait()

    # -- low-latency mode ------------------------------------------------------------------------
    def low_latency_dispatch(self, x, topk_ids, *, fp8=True, async_op=False):
        """Low-latency dispatch: at most max_tokens tokens per rank, each (token, expert) pair sent
        once, one exchange. Returns a LowLatencyOut (masked layout), or a Pending with async_op."""
        MPI = self._mpi
        W, E_loc, h = self.size, self.local_experts, self.hidden

        def check():
            if self.max_tokens is None:
                raise ValueError("the low-latency mode needs EpComm(max_tokens=...)")
            out = self._check_tokens(x, topk_ids, None, fp8, False)
            if out[3] > self.max_tokens:
                raise ValueError(f"x has {out[3]} tokens, more than max_tokens = {self.max_tokens}")
            return out

        checked, err = _local_check(check)
        max_tokens = self.max_tokens or 1
        row_b = _row_layout(h, bool(fp8))
        names = ("fp8", "row_bytes") + tuple(f"count{e}" for e in range(E_loc))
        hwords = _header_words(len(names))
        hslots = -(-hwords * 8 // row_b)                              # header rows per message
        if err is None:
            xx, ids, _, T = checked
            K = ids.shape[1]
            flat = ids.ravel()
            pair_order = np.argsort(flat, kind="stable")              # by expert, then token
            sorted_e = flat[pair_order]
            send_rows = np.bincount(sorted_e // E_loc, minlength=W).astype(np.int64)
            per_expert = np.bincount(flat, minlength=self.num_experts).reshape(W, E_loc)
            parts = _parts(*_payload(xx, fp8))
        else:
            T, K = 0, 0
            pair_order = np.zeros(0, np.int64)
            send_rows = np.zeros(W, np.int64)
            per_expert = np.zeros((W, E_loc), np.int64)
            parts = []
        # Send buffer: per destination, header rows then its pairs' payload rows.
        msg_rows = hslots + send_rows
        msg_start = _displs(msg_rows)
        turn = self._next_turn("ll_dispatch")
        send = self._buffer(("ll_send", turn), (int(msg_rows.sum()), row_b), np.uint8)
        for r in range(W):
            head = _header(err, (int(bool(fp8)), row_b, *per_expert[r]))
            hv = send[msg_start[r]:msg_start[r] + hslots].reshape(-1)
            hv[:head.size * 8] = head.view(np.uint8)
        dest_slot = np.repeat(msg_start + hslots, send_rows) + (np.arange(pair_order.size) - np.repeat(_displs(send_rows), send_rows))
        if pair_order.size:
            _copy_parts(parts, (pair_order // K).astype(np.int64), send, dest_slot.astype(np.int64), pair_order.size)
        # Receive buffers of the maximum size: a peer sends each of its tokens at most once per expert.
        # A peer with BF16 rows is larger than FP8 ones; size for the larger so a mismatch is reported,
        # not truncated.
        cap_rows = max_tokens * E_loc
        big_b = max(row_b, _row_layout(h, False))
        recv_bytes = hslots * row_b + (cap_rows + 1) * big_b
        recv = self._buffer(("ll_recv", turn), (W, recv_bytes), np.uint8)
        tag = 0x4c4c
        call = self._announce("dispatch(low_latency)")
        reqs = [self.comm.Irecv([recv[s], MPI.BYTE], source=s, tag=tag) for s in range(W)]
        for r in range(W):
            reqs.append(self.comm.Isend([send[msg_start[r]:msg_start[r] + msg_rows[r]], MPI.BYTE], dest=r, tag=tag))
        statuses = [MPI.Status() for _ in reqs]
        cap = W * max_tokens
        fp8b = bool(fp8)

        def finish():
            nbytes = [statuses[s].Get_count(MPI.BYTE) for s in range(W)]
            heads = np.stack([recv[s, :hwords * 8].view(np.int64) for s in range(W)])
            values = _parse_headers(heads, names)
            _agree(values, names, {"fp8", "row_bytes"})
            counts_se = values[:, 2:].astype(np.int64)                 # [source, local expert]
            recv_rows = counts_se.sum(axis=1)
            for s in range(W):
                if nbytes[s] != hslots * row_b + recv_rows[s] * row_b:
                    raise RuntimeError(f"dsperf.ep: rank {self.rank} got {nbytes[s]} bytes from rank {s}, "
                                       f"its header announced {recv_rows[s]} rows")
            # Masked layout: expert e's rows from source 0, then 1, ...
            base = np.cumsum(counts_se, axis=0) - counts_se            # [source, expert] first row
            nsc = -(-h // 128)
            xv = self._buffer(("ll_x", turn, fp8b), (E_loc * cap, h), FP8 if fp8b else BF16)
            xs = self._buffer(("ll_scales", turn), (E_loc * cap, nsc), F32) if fp8b else None
            dirty = self._ll_dirty.pop(("ll_x", turn, fp8b), None)   # rows the last use wrote: zero again
            if dirty is not None and dirty.size:
                xv.view(np.uint8)[dirty] = 0
                if xs is not None:
                    xs[dirty] = 0
            slots = []
            for s in range(W):
                e_s = np.repeat(np.arange(E_loc), counts_se[s])
                j_s = np.arange(e_s.size) - np.repeat(_displs(counts_se[s]), counts_se[s])
                slot_s = (e_s * cap + base[s, e_s] + j_s).astype(np.int64)
                slots.append(slot_s)
                rows_s = recv[s, hslots * row_b:(hslots + recv_rows[s]) * row_b].reshape(-1, row_b)
                if fp8b:
                    _C_EP.copy_rows(rows_s, 0, None, xv.view(np.uint8), 0, slot_s, slot_s.size, h)
                    _C_EP.copy_rows(rows_s, h, None, xs.view(np.uint8).reshape(E_loc * cap, 4 * nsc), 0, slot_s,
                                    slot_s.size, 4 * nsc)
                else:
                    _C_EP.copy_rows(rows_s, 0, None, xv.view(np.uint8), 0, slot_s, slot_s.size, row_b)
            recv_slot = np.concatenate(slots).astype(np.int64)
            self._ll_dirty[("ll_x", turn, fp8b)] = recv_slot
            xv = xv.reshape(E_loc, cap, h)
            xs = None if xs is None else xs.reshape(E_loc, cap, nsc)
            counts = counts_se.sum(axis=0).astype(np.int32)
            wire = dict(dispatch_send=msg_rows * row_b, dispatch_recv=np.array(nbytes, np.int64),
                        combine_send=(recv_rows + 1) * 2 * h, combine_recv=(send_rows + 1) * 2 * h)
            handle = LowLatencyHandle(T, K, send_rows, pair_order.astype(np.int64), recv_rows,
                                      recv_slot.astype(np.int64), h, wire)
            return LowLatencyOut(xv, xs, counts, handle)

        pending = _StatusPending(self, reqs, statuses, finish, "the low-latency dispatch exchange", call)
        return pending if async_op else pending.wait()

    def low_latency_combine(self, y, topk_weights, handle: LowLatencyHandle, *, async_op=False):
        """Low-latency combine. y: FP32 or BF16 [local_experts, ranks * max_tokens, hidden] expert
        outputs in the masked layout (BF16 rows are sent as they are, FP32 rounded to BF16); topk_weights FP32 [tokens, top_k] of this rank's tokens. Returns FP32
        [tokens, hidden] = sum_k weights[t, k] * y of pair (t, k), in slot order."""
        MPI = self._mpi
        W, E_loc, h = self.size, self.local_experts, handle.hidden
        cap = W * (self.max_tokens or 1)

        def check():
            yy = _check_array("y", y, (F32, BF16), (E_loc, cap, h))
            ww = _check_array("topk_weights", topk_weights, (F32,), (handle.num_tokens, handle.top_k))
            return yy, ww

        checked, err = _local_check(check)
        turn = self._next_turn("ll_combine")
        sstart = _displs(handle.recv_rows + 1)
        send = self._buffer(("ll_combine_send", turn), (handle.recv_slot.size + W, h), np.uint16)
        _write_status(send, sstart, err)
        first = _displs(handle.recv_rows)
        yy2 = checked[0].reshape(E_loc * cap, h) if err is None else None
        for r in range(W):           # rows go back in the order they came
            n = int(handle.recv_rows[r])
            if n == 0:
                continue
            dst = send[sstart[r] + 1:sstart[r] + 1 + n]
            if err is None and yy2.dtype == BF16:   # DeepEP's contract: BF16 expert outputs, rows copied
                _C_EP.copy_rows(yy2.view(np.uint8), 0, handle.recv_slot[first[r]:first[r] + n], dst.view(np.uint8), 0,
                                None, n, 2 * h)
            elif err is None:
                _C_EP.gather_rows_to_bf16(yy2, handle.recv_slot[first[r]:first[r] + n], dst)
            else:
                dst[:] = 0
        recv = self._buffer(("ll_combine_recv", turn), (handle.pair_order.size + W, h), np.uint16)
        tag = 0x4c43
        call = self._announce("combine(low_latency)")
        rstart = _displs(handle.send_rows + 1)
        reqs = [self.comm.Irecv([recv[rstart[s]:rstart[s] + handle.send_rows[s] + 1], MPI.BYTE],
                                source=s, tag=tag) for s in range(W)]
        for r in range(W):
            reqs.append(self.comm.Isend([send[sstart[r]:sstart[r] + handle.recv_rows[r] + 1], MPI.BYTE],
                                        dest=r, tag=tag))

        def finish():
            _raise_status(recv, rstart)
            T, K = handle.num_tokens, handle.top_k
            out = np.zeros((T, h), F32)
            if T == 0:
                return out
            # Row of pair p in recv: its place in the sent order, shifted past the status rows.
            sent_pos = np.empty(T * K, np.int64)
            sent_pos[handle.pair_order] = np.arange(T * K)
            group = np.searchsorted(_displs(handle.send_rows), sent_pos, side="right") - 1
            position = (sent_pos + group + 1).astype(np.int32).reshape(T, K)
            _C_EP.weighted_sum_bf16_rows(recv, position, checked[1], out)
            return out

        pending = Pending(self, reqs, finish, "the low-latency combine exchange", call)
        return pending if async_op else pending.wait()


def _status_row(err, width=None):
    """A status row of bytes: int32 1 (ok) or 0 (error), then the error text (UTF-8, cut to fit)."""
    width = _STATUS_BYTES if width is None else width
    status = np.zeros(width, np.uint8)
    if width >= 4:
        status[:4] = np.frombuffer(np.int32(0 if err else 1).tobytes(), np.uint8)
        text = (err or "").encode("utf-8", "replace")[:width - 4]
        status[4:4 + len(text)] = np.frombuffer(text, np.uint8)
    else:
        status[:] = 0 if err else 1
    return status


def _status_error(row):
    """None for an ok status row, else its error text."""
    ok = (int(np.frombuffer(row[:4].tobytes(), np.int32)[0]) == 1) if row.size >= 4 else row[0] == 1
    if ok:
        return None
    return row[4:].tobytes().rstrip(b"\0").decode("utf-8", "replace") or "bad input to combine"


def _write_status(buf, starts, err):
    """Status rows (BF16 bits, uint16) at the given rows of buf."""
    u8 = buf.view(np.uint8)
    u8[starts] = _status_row(err, u8.shape[1])


def _raise_status(recv, starts):
    """Raise the errors of the status rows at `starts` of recv (one per source rank)."""
    u8 = recv.view(np.uint8)
    _raise_status_blocks(u8[starts])


def _raise_status_blocks(rows):
    """rows: [ranks, bytes] status rows, one per source rank; raise ValueError naming every bad rank."""
    msgs = [f"rank {r}: {text}" for r, text in enumerate(_status_error(row) for row in rows) if text is not None]
    if msgs:
        raise ValueError("; ".join(msgs))


class _StatusPending(Pending):
    def __init__(self, ep, requests, statuses, finish, what, call=None):
        super().__init__(ep, requests, finish, what, call)
        self._statuses = statuses

    def wait(self):
        if not self._done:
            self._check_call()
            with self._ep._watchdog.guard(self._what):
                self._ep._mpi.Request.Waitall(self._reqs, self._statuses)
            self._result = self._finish()
            self._done = True
        return self._result


def raw_alltoallv(comm, send, send_counts, recv, recv_counts):
    """The baseline: one blocking MPI_Alltoallv of bytes, buffers laid out by rank beforehand."""
    from mpi4py import MPI
    sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
    comm.Alltoallv([send, (sc, _displs(sc)), MPI.BYTE], [recv, (rc, _displs(rc)), MPI.BYTE])
