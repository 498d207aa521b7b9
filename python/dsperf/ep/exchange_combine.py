"""The combine half of the shared-memory window exchange (exchange.py): each expert rank rounds
its outputs to BF16 into its own window, one sync, and each source rank pulls its tokens' rows
from the peers' windows (and, across nodes, from the rail) and forms the weighted sum in one pass.
A mixin of WindowEpComm: it uses the exchange's syncs, windows and guard."""
from __future__ import annotations

import numpy as np

from .. import _C
from .protocol import BF16, F32, _byte_rows, _Done, _local_check
from .plan import ExchangeHandle

_C_EP = _C.ep


class CombineSteps:
    """The window exchange's combine (the _combine hook of base.EpExchange, whose combine and
    low_latency_combine check the arguments) and combine_buffer."""

    def combine_buffer(self, handle: ExchangeHandle, *, per_token=False):
        """The BF16 rows combine(…, handle) reads, in this rank's window: write the expert outputs
        here ([rows, hidden]: per received token with per_token=True, else per expert row; masked
        [local_experts, ranks * max_tokens, hidden] for the low-latency mode) and pass the array to
        combine, which then copies nothing. Valid until the next combine of the same turn."""
        h = handle.hidden
        rows = int(handle.tok_rows[self._li] if per_token else handle.pair_rows[self._li])
        seg = self._t.views(("pub", handle.turn))[self._li]
        out = seg[:rows * 2 * h].view(BF16).reshape(rows, h)
        if handle.mode == "low_latency":
            out = out.reshape(self.local_experts, -1, h)
        return out

    def _combine(self, call, check, handle, n, per_token, weights, async_op, out):
        h, li = self.hidden, self._li

        if weights is None and not per_token and isinstance(handle, ExchangeHandle) and handle.mode == "normal":
            weights = handle.weights            # the dispatch's topk_weights, summed here

        def check_all():
            yy = check()                        # EpExchange's checks (base.py), out included
            return yy.reshape(-1, h) if yy.ndim == 3 else yy   # the masked layout as rows

        checked, err = _local_check(check_all)
        self._call_seq += 1

        def write():
            # A peer may still be reading this turn's buffer from the last combine until it reaches
            # a later sync: if none has happened since, take one before overwriting.
            if self._pub_read.get(handle.turn) == self._t._seq:
                self._sync("barrier")
            seg = self._t.views(("pub", handle.turn))[li]
            pub = seg[:n * 2 * h].view(np.uint16).reshape(n, h)
            if err is not None:
                return 0
            yy = checked
            if yy.dtype == BF16 and yy.ctypes.data == pub.ctypes.data:
                return 0                                   # computed in place (combine_buffer)
            if handle.own_slots is not None:               # masked: only the filled rows
                slots = handle.own_slots
                if yy.dtype == BF16:
                    _C_EP.copy_rows(_byte_rows(yy), 0, slots, pub.view(np.uint8), 0, slots, slots.size, 2 * h,
                                    self._threads)
                else:
                    starts = np.nonzero(np.diff(np.concatenate([[-2], slots])) != 1)[0]
                    for a, b in zip(starts, np.append(starts[1:], slots.size)):
                        lo, hi = int(slots[a]), int(slots[b - 1]) + 1
                        _C_EP.gather_rows_to_bf16(yy[lo:hi], None, pub[lo:hi], self._threads)
                return slots.size * 2 * h
            if yy.dtype == BF16:
                pub[:] = yy[:n].view(np.uint16)
            else:
                _C_EP.gather_rows_to_bf16(yy, None, pub, self._threads)
            return n * 2 * h

        copied = self._guarded(write) if isinstance(handle, ExchangeHandle) else 0
        ww = np.ascontiguousarray(weights, F32) if weights is not None and err is None else None

        def finish():
            def body():
                if self.nodes > 1:
                    self._sync(call, err, world=True)   # a bad argument on any node, raised everywhere
                self._sync(call, err)                   # this node's outputs are in place
                self._pub_read[handle.turn] = self._t._seq
                segs = self._t.views(("pub", handle.turn))
                rows_at = handle.tok_rows if per_token else handle.pair_rows
                if handle.mode == "low_latency":
                    rows_at = np.full(self._L, n, np.int64)
                peers = [segs[r][:int(rows_at[r]) * 2 * h].view(np.uint16).reshape(int(rows_at[r]), h)
                         for r in range(self._L)]
                peer, row = (handle.tok_peer, handle.tok_row) if per_token else (handle.pair_peer, handle.pair_row)
                moved = 0
                if self._rail is not None:
                    back, moved = self._combine_rail(handle, peers, per_token)
                    peers.append(back)
                res = np.empty((handle.num_tokens, h), F32) if out is None else out
                _C_EP.pull_weighted_sum(peers, peer.astype(np.int32, copy=False), row, ww, res, self._threads)
                pulled = int((peer >= 0).sum()) * 2 * h
                total = int(handle.wire_bytes["combine_recv"].sum())
                handle.passes["combine"] = (copied + pulled + moved) / total if total else 0.0
                return res
            return self._guarded(body)

        pending = _Done(finish)
        return pending if async_op else pending.wait()

    def _combine_rail(self, handle, peers, per_token):
        """The internode step of combine: the BF16 rows of the tokens this rank forwarded, gathered
        from this node's windows and sent back along the rail; returns (rows that came back, bytes
        gathered)."""
        h = self.hidden
        fwd = handle.rail["fwd_tok" if per_token else "fwd_pair"]
        send_rows = np.array([e[0].size for e in fwd], np.int64)
        send = self._buf(("rail_csend", handle.turn), send_rows.sum() * 2 * h).reshape(-1, 2 * h)
        at = 0
        for loc, row in fwd:
            for p in range(self._L):
                pick = np.nonzero(loc == p)[0]
                if pick.size:
                    _C_EP.copy_rows(peers[p].view(np.uint8), 0, row[pick], send, 0, (at + pick).astype(np.int64),
                                    pick.size, 2 * h, self._threads)
            at += loc.size
        recv_rows = handle.rail["back_tok" if per_token else "back_pair"]
        back = self._rail_exchange(send.reshape(-1), send_rows * 2 * h, ("rail_crecv", handle.turn),
                                   recv_rows * 2 * h, "the internode combine")
        return back.view(np.uint16).reshape(-1, h), int(send_rows.sum()) * 2 * h
