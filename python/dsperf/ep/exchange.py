"""Dispatch and combine through shared-memory windows: every byte moved once, by the rank that has it.

The ranks of one node map each other's windows (window.ShmTransport). A call runs in two steps
separated by syncs (a published sequence number per rank and a small row of integers):

dispatch (both layouts, and the low-latency masked layout):
  1. sync the counts: each rank publishes how many tokens it sends each rank and how many
     (token, expert) pairs go to each expert, with its argument verdict and the call it is in.
     Every rank now knows every count, so every rank computes the same slots and window sizes.
  2. each rank writes its tokens straight into the destination ranks' windows at their final
     rows: token records (layout="token", DeepEP's normal layout), one row per pair in the
     per-expert layout (layout="expert"), or the masked layout (low-latency mode). FP8 payloads
     are quantised once on the source (or given quantised) and copied once per destination.
  3. sync again: the receive buffers are complete; the result is views of this rank's window.

combine (the same three kinds): each expert rank rounds its outputs to BF16 into its own
window (or the caller computed them in place, in combine_buffer(handle): no copy), one sync, and
each source rank reads its tokens' rows straight from the peers' windows and forms the weighted
sum in the same pass (FP32, slot order; over ranks in rank order for per-token partials).

Copy passes per byte (counted by the code, handle.passes): dispatch 1 (2 with a BF16 x quantised
here), combine 1 (the pull-reduce) + 1 when the outputs are not already in the combine buffer.

Errors: the verdict of each rank's argument check and the call it is in ride in the first sync,
so a bad argument raises the same ValueError on every rank (naming the rank) with nothing written,
and ranks in different calls raise RuntimeError on every rank, naming each rank's call. A peer that
does not reach a sync within timeout_s ends the job naming it; an exception between the syncs
invalidates the windows (never reused stale) and, uncaught, ends the job through the excepthook.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _C, kernels
from .alltoall import (BF16, CALLS, F32, FP8, DispatchOut, LowLatencyOut, _calls_out_of_order, _check_array,
                       _header, _header_words, _local_check, _mpi, _parse_headers, _agree, _Watchdog, _byte_rows,
                       _displs, agree_sizes, check_tokens, install_abort_on_error)
from .window import ShmTransport, WindowBroken

_C_EP = _C.ep
_VALUES = ("call", "seq", "top_k", "fp8")


@dataclass
class ExchangeHandle:
    """What combine needs from a dispatch, for every mode and layout (one handle type).

    Rows this rank's tokens occupy at the other ranks, so combine can read them in place:
    tok_peer/tok_row [tokens, ranks]: the rank and row of each token's record (per-token partials,
    rank order; peer -1: not sent there); pair_peer/pair_row [tokens, top_k]: the rank and row of
    each (token, expert) pair in that rank's per-expert (normal) or masked (low-latency) rows.
    tok_rows/pair_rows [ranks]: how many rows each rank's combine buffer holds per kind."""
    mode: str                  # "normal" or "low_latency"
    layout: str                # "token", "expert" or "masked"
    turn: int                  # which of the two buffer sets (two micro-batches in flight)
    num_tokens: int
    top_k: int
    hidden: int
    tok_peer: np.ndarray
    tok_row: np.ndarray
    tok_rows: np.ndarray
    pair_peer: np.ndarray
    pair_row: np.ndarray
    pair_rows: np.ndarray
    weights: np.ndarray | None         # FP32 [tokens, top_k] (normal mode), summed by combine
    send_counts: np.ndarray            # [ranks] tokens (normal) or pairs (low latency) sent to each rank
    recv_counts: np.ndarray            # [ranks] tokens or pairs received from each rank
    own_slots: np.ndarray | None       # low latency: this rank's filled rows of the masked layout
    wire_bytes: dict                   # bytes per peer: dispatch_send, dispatch_recv, combine_send, combine_recv
    passes: dict = field(default_factory=dict)   # copy passes per payload byte, by phase


class _Done:
    """A finished or deferred step with DeepEP's async interface: wait() returns the result."""

    def __init__(self, finish):
        self._finish, self._done, self._result = finish, False, None

    def test(self):
        return self._done

    def wait(self):
        if not self._done:
            self._result = self._finish()
            self._done = True
        return self._result


def _row_layout(hidden, fp8):
    """(value bytes, scale bytes) of one payload row."""
    return (hidden, 4 * -(-hidden // 128)) if fp8 else (2 * hidden, 0)


class WindowEpComm:
    """EpComm over the shared-memory windows of one node (see the module doc). The same calls,
    arguments and results as the previous exchange (alltoall.AlltoallvEpComm), with one handle
    type (ExchangeHandle) and combine_buffer(handle) for outputs computed in place."""

    exchange = "window"

    def __init__(self, num_experts, hidden, *, comm=None, max_tokens=None, timeout_s=60.0, abort_on_error=True):
        MPI = _mpi()
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        if abort_on_error:
            install_abort_on_error(self.comm)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout_s = (float(timeout_s) if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
                          and 0 < timeout_s <= 1e6 else 60.0)
        self._watchdog = _Watchdog(self.comm, self.timeout_s)
        vals = agree_sizes(self.comm, self._waitall, num_experts, hidden, max_tokens, timeout_s)
        self.num_experts, self.hidden, mt = (int(v) for v in vals)
        self.max_tokens = None if mt < 0 else mt
        self.local_experts = self.num_experts // self.size
        self.first_expert = self.rank * self.local_experts
        # Windows live on a private duplicate, so their collectives never meet the caller's traffic.
        self._calls = self.comm.Dup()
        self._hw = _header_words(len(_VALUES))
        self._t = ShmTransport(self._calls, self._hw + self.size + self.num_experts, timeout_s=self.timeout_s)
        self._call_seq = 0
        self._turn = {}
        self._ll_filled = {}      # (turn, fp8) -> rows per local expert the last use filled
        self._pub_read = {}       # turn -> transport seq at which peers last read that combine buffer

    def _waitall(self, reqs, what):
        with self._watchdog.guard(what):
            self._mpi.Request.Waitall(reqs)

    def _next_turn(self, kind):
        t = self._turn.get(kind, 1) ^ 1
        self._turn[kind] = t
        return t

    # -- syncs with the call check ---------------------------------------------------------------
    def _sync(self, call, err=None, values=(0, 0), counts=()):
        """Publish (verdict, call, counts), wait for every rank; raises the same error on every rank
        for a bad argument anywhere or ranks in different calls. Returns (values, counts) rows."""
        head = _header(err, (CALLS.index(call), self._call_seq, *values))
        row = np.concatenate([head, np.asarray(counts, np.int64)]) if len(counts) else head
        rows = self._t.sync(row, call)
        codes, seqs = rows[:, 2], rows[:, 3]
        if np.any(codes != codes[0]) or np.any(seqs != seqs[0]):
            why = _calls_out_of_order(codes, self._call_seq)
            self._t.invalidate(str(why))
            raise why
        try:
            vals = _parse_headers(rows[:, :self._hw], _VALUES)
        except ValueError as exc:
            exc.agreed = True            # every rank raises it at the same sync, nothing written
            raise
        return vals, rows[:, self._hw:]

    def _guarded(self, body):
        """Run an exchange step; anything but an agreed error leaves the windows invalid."""
        try:
            return body()
        except WindowBroken:
            raise
        except BaseException as exc:
            if getattr(exc, "agreed", False):
                raise
            self._t.invalidate(f"{type(exc).__name__}: {exc}")
            raise

    def barrier(self):
        self._call_seq += 1
        self._guarded(lambda: self._sync("barrier"))

    def close(self):
        """Free the windows (collective)."""
        self._t.free()

    # -- dispatch --------------------------------------------------------------------------------
    def dispatch(self, x, topk_ids, topk_weights, *, fp8=True, layout="expert", async_op=False):
        """Normal-mode dispatch, as AlltoallvEpComm.dispatch: layout "token" (each received token once,
        views of this rank's window) or "expert" (rows written straight into the per-expert layout).
        Returns a DispatchOut (its handle an ExchangeHandle), or with async_op an object whose
        wait() returns it."""
        def check():
            if layout not in ("expert", "token"):
                raise ValueError(f"layout must be 'expert' or 'token', got {layout!r}")
            return check_tokens(x, topk_ids, topk_weights, fp8, True, self.hidden, self.num_experts)

        return self._dispatch("dispatch(normal)", check, fp8, layout, async_op)

    def low_latency_dispatch(self, x, topk_ids, *, fp8=True, async_op=False):
        """Low-latency dispatch into the masked layout [local_experts, ranks * max_tokens, hidden] of
        this rank's window (zero past each expert's count). Returns a LowLatencyOut."""
        def check():
            if self.max_tokens is None:
                raise ValueError("the low-latency mode needs EpComm(max_tokens=...)")
            out = check_tokens(x, topk_ids, None, fp8, False, self.hidden, self.num_experts)
            if out[3] > self.max_tokens:
                raise ValueError(f"x has {out[3]} tokens, more than max_tokens = {self.max_tokens}")
            return out

        return self._dispatch("dispatch(low_latency)", check, fp8, "masked", async_op)

    def _dispatch(self, call, check, fp8, layout, async_op):
        W, E, E_loc, h, me = self.size, self.num_experts, self.local_experts, self.hidden, self.rank
        fp8 = bool(fp8)
        checked, err = _local_check(check)
        self._call_seq += 1
        if err is None:
            xx, ids, w, T = checked
            K = ids.shape[1]
            dest = ids // E_loc
            to_rank = np.zeros((T, W), bool)
            to_rank[np.arange(T)[:, None], dest] = True
            send_counts = to_rank.sum(axis=0).astype(np.int64)
            per_expert = np.bincount(ids.ravel(), minlength=E).astype(np.int64)
        else:
            xx, ids, w, T, K = None, np.zeros((0, 1), np.int64), None, 0, 0
            dest, to_rank = ids, np.zeros((0, W), bool)
            send_counts, per_expert = np.zeros(W, np.int64), np.zeros(E, np.int64)
        vals, counts = self._guarded(lambda: self._sync(call, err, (K, int(fp8)),
                                                         np.concatenate([send_counts, per_expert])))
        _agree(vals, _VALUES, {"top_k", "fp8"})
        N = counts[:, :W]                    # [source, dest] tokens
        PE = counts[:, W:W + E]              # [source, expert] pairs
        return self._guarded(lambda: self._dispatch_write(call, xx, ids, w, T, K, fp8, layout, dest, to_rank, N, PE,
                                                          async_op))

    def _dispatch_write(self, call, xx, ids, w, T, K, fp8, layout, dest, to_rank, N, PE, async_op):
        W, E, E_loc, h, me = self.size, self.num_experts, self.local_experts, self.hidden, self.rank
        mode = "low_latency" if layout == "masked" else "normal"
        turn = self._next_turn(mode)
        copied = 0
        quant_bytes = 0
        if xx is not None and T:
            if isinstance(xx, tuple):
                vals, scales = xx
            elif fp8:
                vals, scales = kernels.act_quant(xx)
                quant_bytes = vals.nbytes + scales.nbytes
            else:
                vals, scales = xx, None
            vrows = _byte_rows(vals)
            srows = _byte_rows(scales) if scales is not None else None
        vb, sb = _row_layout(h, fp8)
        sc_col = vb + (-vb % 4)

        # Where this rank's tokens go, for every layout: token records (and the per-token rows of
        # combine) and pair rows (the per-expert / masked layouts, and combine's expert rows).
        order_rank, order_tok = np.nonzero(to_rank.T)           # grouped by rank, tokens ascending
        order_tok = order_tok.astype(np.int64)
        tok_off = np.cumsum(N, axis=0) - N                        # [source, dest] first record row
        block = _displs(N[me])
        tok_peer = np.full((T, W), -1, np.int32)
        tok_row = np.zeros((T, W), np.int64)
        tok_peer[order_tok, order_rank] = order_rank
        tok_row[order_tok, order_rank] = tok_off[me, order_rank] + np.arange(order_tok.size) - block[order_rank]
        n_recv = N.sum(axis=0)                                    # tokens each rank receives
        totals = PE.sum(axis=0)                                   # pairs each expert receives
        pair_off = np.cumsum(PE, axis=0) - PE                     # [source, expert] first row within the expert
        cap = W * (self.max_tokens or 1)
        if layout == "masked":
            expert_base = (np.arange(E) % E_loc) * cap
            pair_rows = np.full(W, E_loc * cap, np.int64)
        else:
            per_rank = totals.reshape(W, E_loc)
            expert_base = (np.cumsum(per_rank, axis=1) - per_rank).ravel()
            pair_rows = per_rank.sum(axis=1)
        flat = ids.ravel()
        pair_order = np.argsort(flat, kind="stable")              # by expert, then token
        g_sorted = flat[pair_order]
        j = np.arange(flat.size) - np.repeat(_displs(np.bincount(flat, minlength=E)), np.bincount(flat, minlength=E))
        slot_sorted = expert_base[g_sorted] + pair_off[me, g_sorted] + j
        pair_row = np.zeros(flat.size, np.int64)
        pair_row[pair_order] = slot_sorted
        pair_row = pair_row.reshape(T, K) if T else np.zeros((0, max(K, 1)), np.int64)
        pair_peer = dest.astype(np.int32).reshape(pair_row.shape)

        # The windows: receive buffers of this kind and turn, and the combine buffer of this turn.
        rec = sc_col + sb + 8 * K
        id_col = sc_col + sb
        if layout == "token":
            key, sizes = ("tok", turn), n_recv * rec
        else:
            rows = pair_rows
            xbytes = -(-rows * vb // 64) * 64
            key, sizes = (layout, turn, fp8), xbytes + rows * sb
        views = self._t.regions(key, sizes)
        pub_rows = np.maximum(n_recv, pair_rows)
        pub_views = self._t.regions(("pub", turn), pub_rows * 2 * h)
        masked_fresh = False
        if layout == "masked" and self._ll_filled.get((turn, fp8)) is None:
            self._t.zero_own(key)        # a fresh masked buffer: zeros past every count from the start
            masked_fresh = True
        if masked_fresh:
            self._sync(call)             # (every rank is fresh together) zeros in place before anyone writes
        if layout == "masked":
            now = totals.reshape(W, E_loc)[me]
            before = self._ll_filled.get((turn, fp8), np.zeros(E_loc, np.int64))
            xv_own = views[me][:E_loc * cap * vb].reshape(E_loc, cap, vb)
            sv_own = views[me][-(-E_loc * cap * vb // 64) * 64:][:E_loc * cap * sb].reshape(E_loc, cap, sb) if sb else None
            for e in np.nonzero(before > now)[0]:          # rows the last use filled past today's count
                xv_own[e, now[e]:before[e]] = 0
                if sv_own is not None:
                    sv_own[e, now[e]:before[e]] = 0
            self._ll_filled[(turn, fp8)] = now.copy()

        # The writes: each token (or pair) once, straight into its row at the destination.
        if xx is not None and T:
            starts = _displs(np.bincount(order_rank, minlength=W))
            for d in range(W):
                if layout == "token":
                    n = int(N[me, d])
                    if n == 0:
                        continue
                    toks = order_tok[starts[d]:starts[d] + n]
                    recs = views[d][:n_recv[d] * rec].reshape(n_recv[d], rec)[tok_off[me, d]:tok_off[me, d] + n]
                    _C_EP.copy_rows(vrows, 0, toks, recs, 0, None, n, vb)
                    if sb:
                        _C_EP.copy_rows(srows, 0, toks, recs, sc_col, None, n, sb)
                    lid = np.where(dest[toks] == d, ids[toks] % E_loc, -1).astype(np.int32)
                    recs[:, id_col:id_col + 4 * K] = lid.view(np.uint8).reshape(n, 4 * K)
                    recs[:, id_col + 4 * K:] = w[toks].view(np.uint8).reshape(n, 4 * K)
                    copied += n * rec
                else:
                    sel = np.nonzero(g_sorted // E_loc == d)[0]
                    if sel.size == 0:
                        continue
                    toks = (pair_order[sel] // K).astype(np.int64)
                    slots = slot_sorted[sel].astype(np.int64)
                    r_d = int(pair_rows[d])
                    xb = -(-r_d * vb // 64) * 64
                    _C_EP.copy_rows(vrows, 0, toks, views[d][:r_d * vb].reshape(r_d, vb), 0, slots, sel.size, vb)
                    if sb:
                        _C_EP.copy_rows(srows, 0, toks, views[d][xb:xb + r_d * sb].reshape(r_d, sb), 0, slots,
                                        sel.size, sb)
                    copied += sel.size * (vb + sb)
        sent = copied

        def finish():
            return self._guarded(lambda: self._dispatch_finish(call, layout, turn, fp8, T, K, w, views, rec, sc_col,
                                                               id_col, vb, sb, N, PE, n_recv, pair_rows, tok_peer,
                                                               tok_row, pair_peer, pair_row, sent, quant_bytes,
                                                               pub_rows, cap, to_rank))

        pending = _Done(finish)
        return pending if async_op else pending.wait()

    def _dispatch_finish(self, call, layout, turn, fp8, T, K, w, views, rec, sc_col, id_col, vb, sb, N, PE, n_recv,
                         pair_rows, tok_peer, tok_row, pair_peer, pair_row, sent, quant_bytes, pub_rows, cap, to_rank):
        W, E_loc, h, me = self.size, self.local_experts, self.hidden, self.rank
        self._sync(call)                 # every rank's writes are in place
        nr = int(n_recv[me])
        mode = "low_latency" if layout == "masked" else "normal"
        if layout == "masked":
            send_counts = PE.reshape(W, W, E_loc)[me].sum(axis=1)
            recv_counts = PE.reshape(W, W, E_loc)[:, me].sum(axis=1)
            row_b = vb + sb
            wire = dict(dispatch_send=send_counts * row_b, dispatch_recv=recv_counts * row_b,
                        combine_send=recv_counts * 2 * h, combine_recv=send_counts * 2 * h)
        else:
            send_counts, recv_counts = N[me].copy(), N[:, me].copy()
            if layout == "token":
                wire = dict(dispatch_send=send_counts * rec, dispatch_recv=recv_counts * rec)
            else:
                ps = PE.reshape(W, W, E_loc)
                pair_send, pair_recv = ps[me].sum(axis=1), ps[:, me].sum(axis=1)
                wire = dict(dispatch_send=pair_send * (vb + sb), dispatch_recv=pair_recv * (vb + sb))
            # DeepEP's combine returns BF16 per-token partials, one per (token, rank).
            wire.update(combine_send=recv_counts * 2 * h, combine_recv=send_counts * 2 * h)
            if layout == "expert":
                wire.update(combine_send=pair_recv * 2 * h, combine_recv=pair_send * 2 * h)
        total = int(wire["dispatch_send"].sum())
        passes = dict(dispatch=(sent + quant_bytes) / total if total else 0.0)
        own_slots = None
        if layout == "masked":
            counts = PE.reshape(W, W, E_loc)[:, me].sum(axis=0)
            own_slots = np.concatenate([e * cap + np.arange(c) for e, c in enumerate(counts)]).astype(np.int64) \
                if counts.sum() else np.zeros(0, np.int64)
        handle = ExchangeHandle(mode, layout, turn, T, K, h, tok_peer, tok_row, n_recv, pair_peer, pair_row, pair_rows,
                                None if w is None else np.ascontiguousarray(w), send_counts, recv_counts, own_slots,
                                wire, passes)
        nsc = sb // 4
        if layout == "masked":
            xb = -(-E_loc * cap * vb // 64) * 64
            xv = views[me][:E_loc * cap * vb].view(FP8 if fp8 else BF16).reshape(E_loc, cap, h)
            xs = views[me][xb:xb + E_loc * cap * sb].view(F32).reshape(E_loc, cap, nsc) if sb else None
            return LowLatencyOut(xv, xs, counts.astype(np.int32), handle)
        if layout == "token":
            recs = views[me][:nr * rec].reshape(nr, rec)
            lid = recs[:, id_col:id_col + 4 * K].view(np.int32)
            wr = recs[:, id_col + 4 * K:].view(F32)
            mine = lid >= 0
            offsets, position, source = kernels.moe_route(np.where(mine, lid, E_loc).astype(np.int32), E_loc + 1)
            rows = int(offsets[E_loc])
            xv = recs[:, :vb].view(FP8 if fp8 else BF16)
            xs = recs[:, sc_col:sc_col + sb].view(F32) if sb else None
            return DispatchOut(xv, xs, offsets[:E_loc + 1].copy(), nr, handle, layout="token", topk_ids=lid,
                               topk_weights=wr, source=source[:rows].astype(np.int64), records=recs, scale_col=sc_col)
        r_me = int(pair_rows[me])
        xb = -(-r_me * vb // 64) * 64
        xv = views[me][:r_me * vb].view(FP8 if fp8 else BF16).reshape(r_me, h)
        xs = views[me][xb:xb + r_me * sb].view(F32).reshape(r_me, nsc) if sb else None
        per = PE.reshape(W, W, E_loc)[:, me].sum(axis=0)
        offsets = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
        return DispatchOut(xv, xs, offsets, nr, handle, layout="expert")

    # -- combine ---------------------------------------------------------------------------------
    def combine_buffer(self, handle: ExchangeHandle, *, per_token=False):
        """The BF16 rows combine(…, handle) reads, in this rank's window: write the expert outputs
        here ([rows, hidden]: per received token with per_token=True, else per expert row; masked
        [local_experts, ranks * max_tokens, hidden] for the low-latency mode) and pass the array to
        combine, which then copies nothing. Valid until the next combine of the same turn."""
        h = handle.hidden
        rows = handle.tok_rows[self.rank] if per_token else handle.pair_rows[self.rank]
        seg = self._t.regions(("pub", handle.turn), np.zeros(self.size, np.int64))[self.rank]
        out = seg[:int(rows) * 2 * h].view(BF16).reshape(int(rows), h)
        if handle.mode == "low_latency":
            out = out.reshape(self.local_experts, -1, h)
        return out

    def combine(self, y, handle: ExchangeHandle, *, per_token=False, async_op=False, out=None):
        """Normal-mode combine, as AlltoallvEpComm.combine: y FP32 or BF16 expert outputs in the
        per-expert layout (weighted by the dispatch's topk_weights and summed over each token's
        experts in slot order), or, with per_token=True, rows already reduced per received token
        (summed over ranks in rank order). Returns FP32 [tokens, hidden] on the tokens' rank, written
        into out when given (FP32 [tokens, hidden], C-contiguous: a buffer kept between calls saves
        the page faults of a fresh one)."""
        n = int(handle.tok_rows[self.rank] if per_token else handle.pair_rows[self.rank])

        def check():
            if not isinstance(handle, ExchangeHandle) or handle.mode != "normal":
                raise ValueError("handle must be the handle of a normal-mode dispatch on this EpComm")
            if per_token:
                return _check_array("y", y, (BF16, F32), (n, handle.hidden))
            yy = _check_array("y", y, (F32, BF16), (None, handle.hidden))
            if yy.shape[0] < n:
                raise ValueError(f"y must have the {n} rows dispatch returned, got {yy.shape[0]}")
            return yy

        weights = None if per_token else handle.weights
        peer, row = (handle.tok_peer, handle.tok_row) if per_token else (handle.pair_peer, handle.pair_row)
        return self._combine("combine(normal)", check, handle, n, peer, row, weights, per_token, async_op, out)

    def low_latency_combine(self, y, topk_weights, handle: ExchangeHandle, *, async_op=False, out=None):
        """Low-latency combine: y FP32 or BF16 [local_experts, ranks * max_tokens, hidden] in the
        masked layout; returns FP32 [tokens, hidden] = sum_k topk_weights[t, k] * y of pair (t, k)."""
        cap = self.size * (self.max_tokens or 1)

        def check():
            if not isinstance(handle, ExchangeHandle) or handle.mode != "low_latency":
                raise ValueError("handle must be the handle of a low-latency dispatch on this EpComm")
            yy = _check_array("y", y, (F32, BF16), (self.local_experts, cap, self.hidden))
            _check_array("topk_weights", topk_weights, (F32,), (handle.num_tokens, handle.top_k))
            return yy.reshape(self.local_experts * cap, self.hidden)

        w = topk_weights if isinstance(topk_weights, np.ndarray) else None
        return self._combine("combine(low_latency)", check, handle, self.local_experts * cap, handle.pair_peer,
                             handle.pair_row, w, False, async_op, out)

    def _combine(self, call, check, handle, n, peer, row, weights, per_token, async_op, out):
        h, me = handle.hidden, self.rank

        def check_all():
            yy = check()
            if out is not None:
                if not isinstance(out, np.ndarray) or out.dtype != F32 or out.shape != (handle.num_tokens, h) \
                        or not out.flags.c_contiguous or not out.flags.writeable:
                    raise ValueError(f"out must be a writable C-contiguous float32 array of shape "
                                     f"[{handle.num_tokens}, {h}]")
            return yy

        checked, err = _local_check(check_all)
        self._call_seq += 1

        def write():
            # A peer may still be reading this turn's buffer from the last combine until it reaches
            # a later sync: if none has happened since, take one before overwriting.
            if self._pub_read.get(handle.turn) == self._t._seq:
                self._sync("barrier")
            seg = self._t.regions(("pub", handle.turn), np.zeros(self.size, np.int64))[me]
            pub = seg[:n * 2 * h].view(np.uint16).reshape(n, h)
            copied = 0
            if err is None:
                yy = checked
                if yy.dtype == BF16 and yy.ctypes.data == pub.ctypes.data:
                    pass                                   # computed in place (combine_buffer)
                elif handle.own_slots is not None:         # masked: only the filled rows
                    slots = handle.own_slots
                    if yy.dtype == BF16:
                        _C_EP.copy_rows(_byte_rows(yy), 0, slots, pub.view(np.uint8), 0, slots, slots.size, 2 * h)
                    else:
                        starts = np.nonzero(np.diff(np.concatenate([[-2], slots])) != 1)[0]
                        for a, b in zip(starts, np.append(starts[1:], slots.size)):
                            lo, hi = int(slots[a]), int(slots[b - 1]) + 1
                            _C_EP.gather_rows_to_bf16(yy[lo:hi], None, pub[lo:hi])
                    copied = slots.size * 2 * h
                elif yy.dtype == BF16:
                    pub[:] = yy[:n].view(np.uint16)
                    copied = n * 2 * h
                else:
                    _C_EP.gather_rows_to_bf16(yy, None, pub)
                    copied = n * 2 * h
            return copied

        copied = self._guarded(write)
        ww = None
        if weights is not None and err is None:
            ww = np.ascontiguousarray(weights, F32)

        def finish():
            def body():
                self._sync(call, err)
                self._pub_read[handle.turn] = self._t._seq
                segs = self._t.regions(("pub", handle.turn), np.zeros(self.size, np.int64))
                rows_at = handle.tok_rows if per_token else handle.pair_rows
                if handle.mode == "low_latency":
                    rows_at = np.full(self.size, n, np.int64)
                peers = [segs[r][:int(rows_at[r]) * 2 * h].view(np.uint16).reshape(int(rows_at[r]), h)
                         for r in range(self.size)]
                res = np.empty((handle.num_tokens, h), F32) if out is None else out
                _C_EP.pull_weighted_sum(peers, peer, row, ww, res)
                pulled = int((peer >= 0).sum()) * 2 * h
                total = int(handle.wire_bytes["combine_recv"].sum())
                handle.passes["combine"] = (copied + pulled) / total if total else 0.0
                return res
            return self._guarded(body)

        pending = _Done(finish)
        return pending if async_op else pending.wait()
