"""Dispatch and combine through shared-memory windows: every byte moved once, by the rank that has it.

The ranks of one node map each other's windows (window.ShmTransport). A call runs in two steps
separated by syncs (a published sequence number per rank and a small row of integers):

dispatch (both layouts, and the low-latency masked layout):
  1. sync the counts: each rank publishes how many tokens it sends each rank and how many
     (token, expert) pairs go to each expert, with its argument verdict and the call it is in.
     Every rank now knows every count, so every rank computes the same slots and window sizes
     (the routing plan in C++, csrc/ep/ep_plan.hpp: the one the transport exchanges read too).
  2. each rank writes its tokens straight into the destination ranks' windows at their final
     rows: token records (layout="token", DeepEP's normal layout), one row per pair in the
     per-expert layout (layout="expert"), or the masked layout (low-latency mode). FP8 payloads
     are quantised once on the source (or given quantised) and copied once per destination.
  3. sync again: the receive buffers are complete; the result is views of this rank's window.

combine (the same three kinds): each expert rank rounds its outputs to BF16 into its own
window (or the caller computed them in place, in combine_buffer(handle): no copy), one sync, and
each source rank reads its tokens' rows straight from the peers' windows and forms the weighted
sum in the same pass (FP32, slot order; over ranks in rank order for per-token partials).

The combine half lives in exchange_combine.py (a mixin of WindowEpComm).

Copy passes per byte (counted by the code, handle.passes): dispatch 1 (2 with a BF16 x quantised
here), combine 1 (the pull-reduce) + 1 when the outputs are not already in the combine buffer.

Across nodes (hierarchical, as DeepEP's normal internode kernels): the counts are gathered over
all ranks (MPI_Allgather), each token crosses to another node once per destination node, to the
rank with its source's local index there (MPI_Alltoallv among the ranks of one local index, a
"rail"), which writes it into the destination ranks' windows of its node as if it were its own.
Combine runs backwards: the forwarding rank gathers the BF16 rows of the tokens it forwarded from
its node's windows and sends them back along the rail, and the source reads them beside the rows
of its own node in the same weighted sum (rows are not reduced per node before crossing, so the
result is the same sum in the same order as on one node). The ranks are split into nodes by
shared memory, or into pretend nodes (EpComm(nodes=n), DSPERF_EP_NODES=n) to test on one machine.

Errors: the verdict of each rank's argument check and the call it is in ride in the first sync,
so a bad argument raises the same ValueError on every rank (naming the rank) with nothing written,
and ranks in different calls raise RuntimeError on every rank, naming each rank's call. A peer that
does not reach a sync within timeout_s ends the job naming it; an exception between the syncs
invalidates the windows (never reused stale) and, uncaught, ends the job through the excepthook.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _C, kernels
from .protocol import (BF16, CALLS, F32, FP8, DispatchOut, LowLatencyOut, _agree, _byte_rows, _calls_out_of_order,
                       _displs, _Done, _header, _header_words, _local_check, _parse_headers,
                       open_ep_comm)
from .plan import _LAYOUT_CODE, ExchangeHandle, RowFormat, _ranks_within, row_format
from .window import ShmTransport, WindowBroken
from .exchange_combine import CombineSteps
from .base import EpExchange

_C_EP = _C.ep
_VALUES = ("call", "seq", "top_k", "fp8")


@dataclass
class _WindowPlan(RowFormat):
    """Where every token and pair of a dispatch lands, from the counts every rank agreed on. The
    rows and places themselves are worked out in C++ (window_plan, window_scatter) from `rows`,
    by the routing plan the transport exchanges read too (csrc/ep/ep_plan.hpp, plan.py)."""
    rows: np.ndarray           # [ranks, ranks + experts + nodes] the agreed counts (C-contiguous)
    n_recv: np.ndarray         # [dest] records received
    pair_rows: np.ndarray      # [dest] pair rows (per-expert or masked layout)
    send: np.ndarray           # [ranks] tokens this rank sends each rank
    recv: np.ndarray           # [ranks] tokens this rank receives from each rank
    pair_send: np.ndarray      # [ranks] pairs this rank sends each rank
    pair_recv: np.ndarray      # [ranks] pairs this rank receives from each rank
    counts: np.ndarray         # [local experts] pairs into each of this rank's experts
    cap: int                   # rows per local expert of the masked layout

    @property
    def code(self):
        return _LAYOUT_CODE[self.layout]

    @property
    def native(self):
        """The row format as the C++ core takes it (one object across the binding)."""
        return _C_EP.RowFormat(vb=self.vb, sb=self.sb, rec=self.rec, sc_col=self.sc_col, id_col=self.id_col)


def _window_plan(rows, W, E_loc, cap, layout, fp8, hidden, K, me):
    out = np.empty(6 * W + E_loc, np.int64)
    _C_EP.window_plan(rows, E_loc, _LAYOUT_CODE[layout], cap, me, out)
    return _WindowPlan(**row_format(layout, fp8, hidden, K), rows=rows, n_recv=out[:W], pair_rows=out[W:2 * W],
                       send=out[2 * W:3 * W], recv=out[3 * W:4 * W], pair_send=out[4 * W:5 * W],
                       pair_recv=out[5 * W:6 * W], counts=out[6 * W:], cap=cap)


class WindowEpComm(CombineSteps, EpExchange):
    """EpComm over shared-memory windows on each node, and MPI between nodes (see the module doc).
    The same calls, arguments and results as the previous exchange (alltoall.AlltoallvEpComm), with
    one handle type (ExchangeHandle), combine_buffer(handle) for outputs computed in place, and
    combine(out=) for a kept output array. node: the node of every rank (window.node_layout);
    None: all on one node."""

    _check_id_values = False          # dispatch_counts checks the ids' values while counting them (C++)

    def __init__(self, num_experts, hidden, *, comm=None, max_tokens=None, timeout_s=60.0, abort_on_error=True,
                 node=None):
        open_ep_comm(self, comm, num_experts, hidden, max_tokens, timeout_s, abort_on_error)
        W = self.size
        node = np.zeros(W, np.int64) if node is None else np.asarray(node, np.int64)
        self.nodes = int(node.max()) + 1
        per_node = np.bincount(node, minlength=self.nodes)
        if np.any(per_node != per_node[0]):
            raise ValueError(f"the window exchange needs the same number of ranks on every node, got {per_node.tolist()}")
        self.exchange = "window" if self.nodes == 1 else "hierarchical"
        self._node = node
        self._node_ranks = np.nonzero(node == node[self.rank])[0]          # this node's ranks, ascending
        self._L = self._node_ranks.size
        self._li = int(np.searchsorted(self._node_ranks, self.rank))       # local index
        self._local_of = np.full(W, -1, np.int64)
        self._local_of[self._node_ranks] = np.arange(self._L)
        # Windows and rails live on a private duplicate, so their traffic never meets the caller's.
        self._calls = self.comm.Dup()
        node_comm = self._calls.Split(int(node[self.rank]), self.rank)
        self._rail = None
        if self.nodes > 1:
            # The ranks of one local index, one per node, in node order.
            self._rail = self._calls.Split(self._li, int(node[self.rank]))
            self._rail_ranks = np.array(self._rail.allgather(self.rank), np.int64)   # global rank per node
        self._hw = _header_words(len(_VALUES))
        self._ok_row = np.zeros(self._hw + W + self.num_experts + self.nodes, np.int64)
        self._ok_row[:self._hw] = _header(None, (0,) * len(_VALUES))
        ranks = self._node_ranks
        self._t = ShmTransport(node_comm, self._hw + W + self.num_experts + self.nodes, timeout_s=self.timeout_s,
                               label=lambda local: int(ranks[local]))
        # Threads for the exchange's copies: this rank's share of the node's cores (ranks that
        # outnumber the cores copy on one thread each; a thread waiting for a core stalls the copy).
        # dsperf.ep.bench.rate_probes probes the copy rate on the same share.
        import os
        mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self._threads = max(1, min(mine, (os.cpu_count() or 1) // self._L))
        self._call_seq = 0
        self._turn = {}
        self._ll_filled = {}      # (turn, fp8) -> rows per local expert the last use filled
        self._pub_read = {}       # turn -> transport seq at which peers last read that combine buffer
        self._bufs = {}           # private rail buffers, kept between calls

    def _next_turn(self, kind):
        t = self._turn.get(kind, 1) ^ 1
        self._turn[kind] = t
        return t

    def _buf(self, key, nbytes):
        buf = self._bufs.get(key)
        if buf is None or buf.nbytes < nbytes:
            buf = np.zeros(max(int(nbytes), 64), np.uint8)
            self._bufs[key] = buf
        return buf[:int(nbytes)]

    def _rail_exchange(self, send, send_counts, recv_key, recv_counts, what):
        """MPI_Alltoallv of bytes among the rail (one rank per node, node order)."""
        MPI = self._mpi
        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        recv = self._buf(recv_key, rc.sum())
        self._waitall([self._rail.Ialltoallv([send, (sc, _displs(sc)), MPI.BYTE], [recv, (rc, _displs(rc)), MPI.BYTE])],
                      what)
        return recv

    # -- syncs with the call check ---------------------------------------------------------------
    def _sync(self, call, err=None, values=(0, 0), counts=(), world=False):
        """Publish (verdict, call, counts), wait for every rank of the node (world=True: of the
        communicator, by MPI_Allgather); raises the same error on every rank for a bad argument
        anywhere or ranks in different calls. Returns (values, counts) rows; _same_values tells
        whether every rank's values were the same."""
        self._same_values = False
        if err is None and not world:
            # The header of a good verdict differs from call to call only in its first words (a kept
            # row: the sync copies it into the control window).
            row = self._ok_row
            row[2], row[3], row[4], row[5] = CALLS.index(call), self._call_seq, values[0], values[1]
            n = self._hw + len(counts)
            if len(counts):
                row[self._hw:n] = counts
            rows, same = self._t.sync(row[:n], call, 6)
            if same:
                # Every rank good, in this call, with the same top_k and fp8: nothing to parse.
                self._same_values = True
                return rows[:, 2:6], rows[:, self._hw:]
            row = row[:n].copy()
        elif err is None:
            row = np.concatenate([self._ok_row[:self._hw], np.asarray(counts, np.int64)])
            row[2:6] = (CALLS.index(call), self._call_seq, *values)
        else:
            head = _header(err, (CALLS.index(call), self._call_seq, *values))
            row = np.concatenate([head, np.asarray(counts, np.int64)]) if len(counts) else head
        if world:
            self._t._check()
            full = np.zeros(self._t.row_words, np.int64)
            full[:row.size] = row
            rows = np.empty((self.size, full.size), np.int64)
            self._waitall([self._calls.Iallgather(full, rows)], f"the other ranks to reach {call}")
        elif err is not None:
            rows = self._t.sync(row, call)
        codes, seqs = rows[:, 2], rows[:, 3]
        if np.any(codes != codes[0]) or np.any(seqs != seqs[0]):
            ranks = np.arange(self.size) if world else self._node_ranks
            why = _calls_out_of_order(codes, self._call_seq, ranks)
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
        self._guarded(lambda: self._sync("barrier", world=self.nodes > 1))

    def close(self):
        """Free the windows (collective)."""
        self._t.free()

    def _row_index(self) -> int:
        return self._li               # handles count rows per rank of this node

    # -- dispatch (the public calls and their checks: base.EpExchange) ------------------------------
    def _dispatch(self, call, check, fp8, layout, async_op):
        W, E, E_loc = self.size, self.num_experts, self.local_experts
        fp8 = bool(fp8)

        def check_and_count():
            out = check()
            ids = out[1]
            # Counts (tokens per rank, pairs per expert, tokens per node) and the ids' values checked
            # in one pass.
            counts = np.empty(W + E + self.nodes, np.int64)
            rc = _C_EP.dispatch_counts(ids, E, E_loc, self._node, self.nodes, counts)
            if rc == 1:
                raise ValueError(f"topk_ids must lie in [0, num_experts = {E}), "
                                 f"got values in [{ids.min()}, {ids.max()}]")
            if rc == 2:
                raise ValueError("topk_ids must not repeat an expert within a token")
            return out, counts

        checked, err = _local_check(check_and_count)
        self._call_seq += 1
        if err is None:
            (xx, ids, w, T), counts = checked
            K = ids.shape[1]
        else:
            xx, ids, w, T, K = None, np.zeros((0, 1), np.int64), None, 0, 0
            counts = np.zeros(W + E + self.nodes, np.int64)
        vals, rows = self._guarded(lambda: self._sync(call, err, (K, int(fp8)), counts, world=self.nodes > 1))
        if not self._same_values:
            _agree(vals, _VALUES, {"top_k", "fp8"})
        cap = W * (self.max_tokens or 1)
        rows = np.ascontiguousarray(rows[:, :W + E + self.nodes])
        plan = _window_plan(rows, W, E_loc, cap, layout, fp8, self.hidden, K, self.rank)
        return self._guarded(lambda: self._dispatch_write(call, plan, xx, ids, w, T, async_op))

    def _payload(self, xx, fp8):
        """(value rows, scale rows or None) as byte matrices, and the bytes quantising wrote."""
        if isinstance(xx, tuple):
            vals, scales = xx
            quant = 0
        elif fp8:
            vals, scales = kernels.act_quant(xx)
            quant = vals.nbytes + scales.nbytes
        else:
            vals, scales, quant = xx, None, 0
        return _byte_rows(vals), (_byte_rows(scales) if scales is not None else None), quant

    def _scatter(self, plan, s, vsrc, vcol, ssrc, scol, ids, w, segs):
        """Write source s's tokens (payload rows vsrc/ssrc at columns vcol/scol, global expert ids
        [n, K], weights [n, K] or None) into the windows of this node's destination ranks (segs:
        their addresses and bytes), each row once, straight to its final place (C++, one call).
        Returns (bytes written, tok_peer, tok_row [n, ranks], pair_peer, pair_row [n, K]): where
        every token's record and every pair's row is at every rank (global ranks; -1: none)."""
        n, K, W = ids.shape[0], plan.K, self.size
        tok_peer, tok_row = np.empty((n, W), np.int32), np.empty((n, W), np.int64)
        pair_peer, pair_row = np.empty((n, K), np.int32), np.empty((n, K), np.int64)
        written = _C_EP.window_scatter(vsrc, vcol, ssrc if plan.sb else None, scol, ids, w, s, plan.rows,
                                       self.local_experts, plan.code, plan.cap, plan.native, self._local_of,
                                       (segs[0], segs[1]), (tok_peer, tok_row, pair_peer, pair_row), self._threads)
        return written, tok_peer, tok_row, pair_peer, pair_row

    def _write_inbox(self, plan, s, vsrc, vcol, ssrc, scol, ids, w, segs):
        """Forwarded tokens of source s (another node) written into this node's windows. Returns
        (bytes written, per-token entries, pair entries): the (local rank, row) where combine finds
        each token's rows on this node, row-major."""
        written, tok_peer, tok_row, pair_peer, pair_row = self._scatter(plan, s, vsrc, vcol, ssrc, scol, ids, w, segs)
        here = self._local_of >= 0
        ti, td = np.nonzero((tok_peer >= 0) & here[None, :])
        tok_entries = (self._local_of[td].astype(np.int32), tok_row[ti, td])
        pi, pk = np.nonzero(here[pair_peer])
        pair_entries = (self._local_of[pair_peer[pi, pk]].astype(np.int32), pair_row[pi, pk])
        return written, tok_entries, pair_entries

    def _dispatch_write(self, call, plan, xx, ids, w, T, async_op):
        h, me = self.hidden, self.rank
        layout, fp8 = plan.layout, plan.fp8
        mode = "low_latency" if layout == "masked" else "normal"
        turn = self._next_turn(mode)
        nr = self._node_ranks
        if xx is not None and T:
            vrows, srows, quant = self._payload(xx, fp8)
        else:
            vrows, srows, quant = np.zeros((0, plan.vb), np.uint8), np.zeros((0, plan.sb or 1), np.uint8), 0

        # This node's windows: receive buffers of this kind and turn, and the combine buffer.
        n_recv, pair_rows = (plan.n_recv, plan.pair_rows) if self.nodes == 1 else (plan.n_recv[nr], plan.pair_rows[nr])
        if layout == "token":
            key, sizes = ("tok", turn), n_recv * plan.rec
        else:
            key, sizes = (layout, turn, fp8), -(-pair_rows * plan.vb // 64) * 64 + pair_rows * plan.sb
        views = self._t.regions(key, sizes)
        self._t.regions(("pub", turn), np.maximum(n_recv, pair_rows) * 2 * h)
        if layout == "masked":
            self._zero_masked(call, key, views, plan, turn, fp8)
        segs = self._t.segments(key)

        # Own tokens into this node's windows, and where combine finds them (records per token,
        # pair rows) at every rank; tokens for other nodes once per node along the rail.
        sent, tok_peer, tok_row, pair_peer, pair_row = self._scatter(plan, me, vrows, 0, srows, 0, ids, w, segs)
        rail = None
        if self._rail is not None:
            sent_rail, rail = self._forward(plan, vrows, srows, ids, w, segs, turn)
            sent += sent_rail
            # How many of this rank's entries come back along the rail from each node.
            for key_, nodes in (("back_tok", self._node[np.nonzero(tok_peer >= 0)[1]]),
                                ("back_pair", self._node[pair_peer.ravel()])):
                back = np.bincount(nodes, minlength=self.nodes).astype(np.int64)
                back[self._node[me]] = 0
                rail[key_] = back
            # Peers as combine reads them: a rank of this node, or (L) the rows back along the rail.
            tok_peer, tok_row = self._local_entries(tok_peer, tok_row, tok_peer >= 0)
            pair_peer, pair_row = self._local_entries(pair_peer, pair_row, np.ones(pair_row.shape, bool))

        def finish():
            return self._guarded(lambda: self._dispatch_finish(call, plan, turn, T, w, views, tok_peer, tok_row,
                                                               pair_peer, pair_row, sent, quant, rail))

        pending = _Done(finish)
        return pending if async_op else pending.wait()

    def _local_entries(self, peer, row, valid):
        """Global (rank, row) entries [T, M] (peer -1: none) as combine reads them: a rank of this
        node by its local index, else L with the row's place in the rows that come back along the
        rail (node by node, tokens ascending, entries in order within a token)."""
        L = self._L
        if self.nodes == 1:                       # one node: local index = rank, nothing on the rail
            return np.where(valid, peer, -1).astype(np.int32), row
        out_peer = np.full(peer.shape, -1, np.int32)
        out_row = np.zeros(peer.shape, np.int64)
        ok = valid & (peer >= 0)
        here = ok & (self._local_of[np.maximum(peer, 0)] >= 0)
        out_peer[here] = self._local_of[peer[here]]
        out_row[here] = row[here]
        if self._rail is not None:
            start = 0
            for n in range(self.nodes):
                at = ok & ~here & (self._node[np.maximum(peer, 0)] == n)
                k = int(at.sum())
                out_peer[at] = L
                out_row[at] = start + np.arange(k)        # row-major: tokens, then entries
                start += k
        return out_peer, out_row

    def _forward(self, plan, vrows, srows, ids, w, segs, turn):
        """The internode step of dispatch: this rank's tokens for each other node, once per node, to
        the rank of its local index there (rail records: payload, global ids, weights), and the
        tokens the rail brings written into this node's windows. Returns (bytes written, rail)."""
        E_loc, K, me = self.local_experts, plan.K, self.rank
        node_counts = plan.rows[:, self.size + self.num_experts:]
        my_node = int(self._node[me])
        dest_node = self._node[ids // E_loc] if ids.size else np.zeros(ids.shape, np.int64)
        rec = plan.rec
        send_counts = np.zeros(self.nodes, np.int64)
        picks = []
        for n in range(self.nodes):
            sel = np.nonzero(np.any(dest_node == n, axis=1))[0] if n != my_node and ids.size else np.zeros(0, np.int64)
            picks.append(sel)
            send_counts[n] = sel.size
        send = self._buf(("rail_send", turn), send_counts.sum() * rec).reshape(-1, rec)
        at = 0
        for sel in picks:
            if sel.size:
                blk = send[at:at + sel.size]
                _C_EP.copy_rows(vrows, 0, sel.astype(np.int64), blk, 0, None, sel.size, plan.vb, self._threads)
                if plan.sb:
                    _C_EP.copy_rows(srows, 0, sel.astype(np.int64), blk, plan.sc_col, None, sel.size, plan.sb,
                                    self._threads)
                blk[:, plan.id_col:plan.id_col + 4 * K] = ids[sel].astype(np.int32).view(np.uint8).reshape(sel.size, 4 * K)
                wk = w[sel] if w is not None else np.zeros((sel.size, K), F32)
                blk[:, plan.id_col + 4 * K:] = wk.astype(F32).view(np.uint8).reshape(sel.size, 4 * K)
            at += sel.size
        recv_counts = np.array([0 if n == my_node else node_counts[self._rail_ranks[n], my_node]
                                for n in range(self.nodes)], np.int64)
        recv = self._rail_exchange(send.reshape(-1), send_counts * rec, ("rail_recv", turn), recv_counts * rec,
                                   "the internode dispatch").reshape(-1, rec)
        written = send_counts.sum() * rec
        fwd_tok, fwd_pair = [], []
        start = 0
        for n in range(self.nodes):
            m = int(recv_counts[n])
            recs = recv[start:start + m]
            start += m
            if n == my_node or m == 0:
                fwd_tok.append((np.zeros(0, np.int32), np.zeros(0, np.int64)))
                fwd_pair.append((np.zeros(0, np.int32), np.zeros(0, np.int64)))
                continue
            src = int(self._rail_ranks[n])
            g_ids = recs[:, plan.id_col:plan.id_col + 4 * K].view(np.int32).astype(np.int64)
            wts = recs[:, plan.id_col + 4 * K:].view(F32)
            wr, tok_e, pair_e = self._write_inbox(plan, src, recs, 0, recs, plan.sc_col, g_ids, wts, segs)
            written += wr
            fwd_tok.append(tok_e)
            fwd_pair.append(pair_e)
        return written, dict(fwd_tok=fwd_tok, fwd_pair=fwd_pair)

    def _zero_masked(self, call, key, views, plan, turn, fp8):
        """The masked layout is zero past each expert's count: zero a fresh buffer whole (then sync,
        before peers write), and afterwards only the rows the last use filled past today's count."""
        E_loc, li, cap = self.local_experts, self._li, plan.cap
        if self._ll_filled.get((turn, fp8)) is None:
            self._t.zero_own(key)
            self._sync(call)                 # every rank is fresh together
        now = plan.counts
        before = self._ll_filled.get((turn, fp8))
        stale = np.maximum(before - now, 0) if before is not None else None   # rows per expert to zero again
        if stale is not None and stale.any():
            xv = views[li][:E_loc * cap * plan.vb].reshape(E_loc * cap, plan.vb)
            rows = np.repeat(np.arange(E_loc) * cap + now, stale) + _ranks_within(stale)
            xv[rows] = 0
            if plan.sb:
                xb = -(-E_loc * cap * plan.vb // 64) * 64
                views[li][xb:xb + E_loc * cap * plan.sb].reshape(E_loc * cap, plan.sb)[rows] = 0
        self._ll_filled[(turn, fp8)] = now.copy()

    def _dispatch_finish(self, call, plan, turn, T, w, views, tok_peer, tok_row, pair_peer, pair_row, sent, quant,
                         rail):
        E_loc, h, me, li = self.local_experts, self.hidden, self.rank, self._li
        self._sync(call)                 # every write into this node's windows is in place
        layout, fp8, K, nr = plan.layout, plan.fp8, plan.K, self._node_ranks
        vb, sb, rec = plan.vb, plan.sb, plan.rec
        nrecv = int(plan.n_recv[me])
        mode = "low_latency" if layout == "masked" else "normal"
        cap = plan.cap
        pair_send, pair_recv = plan.pair_send, plan.pair_recv
        if layout == "masked":
            send_counts, recv_counts = pair_send, pair_recv
            wire = dict(dispatch_send=pair_send * (vb + sb), dispatch_recv=pair_recv * (vb + sb),
                        combine_send=pair_recv * 2 * h, combine_recv=pair_send * 2 * h)
        elif layout == "token":
            send_counts, recv_counts = plan.send, plan.recv
            # DeepEP's combine: a BF16 per-token partial back per (token, rank).
            wire = dict(dispatch_send=send_counts * rec, dispatch_recv=recv_counts * rec,
                        combine_send=recv_counts * 2 * h, combine_recv=send_counts * 2 * h)
        else:
            send_counts, recv_counts = plan.send, plan.recv
            wire = dict(dispatch_send=pair_send * (vb + sb), dispatch_recv=pair_recv * (vb + sb),
                        combine_send=pair_recv * 2 * h, combine_recv=pair_send * 2 * h)
        total = int(wire["dispatch_send"].sum())
        passes = dict(dispatch=(sent + quant) / total if total else 0.0)
        counts = plan.counts
        one = self.nodes == 1
        masked = (counts, cap) if layout == "masked" else None
        handle = ExchangeHandle(mode, layout, turn, T, K, h, tok_peer, tok_row, plan.n_recv if one else plan.n_recv[nr],
                                pair_peer, pair_row, plan.pair_rows if one else plan.pair_rows[nr],
                                None if w is None else np.ascontiguousarray(w, F32), send_counts, recv_counts,
                                masked, wire, passes, rail)
        nsc = sb // 4
        own = views[li]
        if layout == "masked":
            xb = -(-E_loc * cap * vb // 64) * 64
            xv = own[:E_loc * cap * vb].view(FP8 if fp8 else BF16).reshape(E_loc, cap, h)
            xs = own[xb:xb + E_loc * cap * sb].view(F32).reshape(E_loc, cap, nsc) if sb else None
            return LowLatencyOut(xv, xs, counts.astype(np.int32), handle)
        if layout == "token":
            recs = own[:nrecv * rec].reshape(nrecv, rec)
            lid = recs[:, plan.id_col:plan.id_col + 4 * K].view(np.int32)
            wr = recs[:, plan.id_col + 4 * K:].view(F32)
            mine = lid >= 0
            offsets, position, source = kernels.moe_route(np.where(mine, lid, E_loc).astype(np.int32), E_loc + 1)
            rows = int(offsets[E_loc])
            xv = recs[:, :vb].view(FP8 if fp8 else BF16)
            xs = recs[:, plan.sc_col:plan.sc_col + sb].view(F32) if sb else None
            return DispatchOut(xv, xs, offsets[:E_loc + 1].copy(), nrecv, handle, layout="token", topk_ids=lid,
                               topk_weights=wr, source=source[:rows].astype(np.int64), records=recs,
                               scale_col=plan.sc_col)
        r_me = int(plan.pair_rows[me])
        xb = -(-r_me * vb // 64) * 64
        xv = own[:r_me * vb].view(FP8 if fp8 else BF16).reshape(r_me, h)
        xs = own[xb:xb + r_me * sb].view(F32).reshape(r_me, nsc) if sb else None
        offsets = np.zeros(E_loc + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return DispatchOut(xv, xs, offsets, nrecv, handle, layout="expert")

    # -- combine ---------------------------------------------------------------------------------
