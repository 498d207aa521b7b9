"""EpExchange: what every expert-parallel exchange shares, written once.

The public calls (dispatch, low_latency_dispatch, combine, low_latency_combine, barrier's wait), their
argument checks and the handle they take live here; an exchange (exchange.WindowEpComm over shared
memory windows, alltoall.AlltoallvEpComm over MPI_Alltoallv) only moves rows, in two hooks:

    _dispatch(call, check, fp8, layout, async_op)
    _combine(call, check, handle, rows, per_token, weights, async_op, out)

`check` is this rank's argument check (raising TypeError/ValueError naming the argument); each
exchange runs it on its own rank, and its sync turns one rank's error into the same error on every
rank before any row moves. Set-up (communicator, watchdog, agreed sizes) is protocol.open_ep_comm."""
from __future__ import annotations

import numpy as np

from .plan import ExchangeHandle
from .protocol import BF16, F32, _check_array, check_tokens

LAYOUTS = ("expert", "token")   # normal-mode dispatch layouts; the low-latency mode writes "masked"


class EpExchange:
    exchange = ""                # "window", "hierarchical" or "alltoallv"
    # Whether check_tokens checks the ids' values (range, repeats); False where the exchange checks them
    # while counting them in C++ (one pass, the window exchange).
    _check_id_values = True

    # -- what an exchange provides -----------------------------------------------------------------
    def _dispatch(self, call, check, fp8, layout, async_op):
        raise NotImplementedError

    def _combine(self, call, check, handle, rows, per_token, weights, async_op, out):
        raise NotImplementedError

    def _row_index(self) -> int:
        """This rank's index into a handle's tok_rows / pair_rows."""
        return self.rank

    def _handle_fits(self, handle) -> bool:
        """Whether this exchange can combine with the handle (its own dispatch's)."""
        return isinstance(handle, ExchangeHandle)

    def _waitall(self, reqs, what):
        with self._watchdog.guard(what):
            self._mpi.Request.Waitall(reqs)

    # -- dispatch ----------------------------------------------------------------------------------
    def dispatch(self, x, topk_ids, topk_weights, *, fp8=True, layout="expert", async_op=False):
        """Normal-mode dispatch. x: BF16 [tokens, hidden] (quantised here when fp8) or an FP8
        (values, scales) pair from kernels.act_quant; topk_ids int [tokens, top_k] in
        [0, num_experts), no expert twice in a token; topk_weights FP32 [tokens, top_k]. layout:
        "expert" (rows in the contiguous per-expert layout) or "token" (each received token once;
        DeepEP's layout). Returns a DispatchOut (its handle an ExchangeHandle), or with
        async_op=True an object whose wait() returns it."""
        def check():
            if layout not in LAYOUTS:
                raise ValueError(f"layout must be 'expert' or 'token', got {layout!r}")
            return check_tokens(x, topk_ids, topk_weights, fp8, True, self.hidden, self.num_experts,
                                self._check_id_values)

        return self._dispatch("dispatch(normal)", check, fp8, layout, async_op)

    def low_latency_dispatch(self, x, topk_ids, *, fp8=True, async_op=False):
        """Low-latency dispatch into the masked layout [local_experts, ranks * max_tokens, hidden]
        (zero past each expert's count). Returns a LowLatencyOut."""
        def check():
            if self.max_tokens is None:
                raise ValueError("the low-latency mode needs EpComm(max_tokens=...)")
            out = check_tokens(x, topk_ids, None, fp8, False, self.hidden, self.num_experts, self._check_id_values)
            if out[3] > self.max_tokens:
                raise ValueError(f"x has {out[3]} tokens, more than max_tokens = {self.max_tokens}")
            return out

        return self._dispatch("dispatch(low_latency)", check, fp8, "masked", async_op)

    # -- combine -----------------------------------------------------------------------------------
    def combine(self, y, handle: ExchangeHandle, *, per_token=False, async_op=False, out=None):
        """Normal-mode combine: y FP32 or BF16 expert outputs in the per-expert layout (weighted by
        the dispatch's topk_weights and summed over each token's experts in slot order), or, with
        per_token=True, rows already reduced per received token (summed over ranks in rank order).
        Returns FP32 [tokens, hidden] on the tokens' rank, written into out when given (FP32
        [tokens, hidden], C-contiguous: a buffer kept between calls saves the page faults of a
        fresh one)."""
        ok = self._handle_fits(handle) and handle.mode == "normal"
        rows = handle.tok_rows if ok and per_token else (handle.pair_rows if ok else None)
        n = int(rows[self._row_index()]) if ok else 0

        def check():
            if not ok:
                raise ValueError("handle must be the handle of a normal-mode dispatch on this EpComm")
            if per_token:
                yy = _check_array("y", y, (BF16, F32), (n, self.hidden))
            else:
                yy = _check_array("y", y, (F32, BF16), (None, self.hidden))
                if yy.shape[0] < n:
                    raise ValueError(f"y must have the {n} rows dispatch returned, got {yy.shape[0]}")
            _check_out(out, handle, self.hidden)
            return yy

        return self._combine("combine(normal)", check, handle, n, per_token, None, async_op, out)

    def low_latency_combine(self, y, topk_weights, handle: ExchangeHandle, *, async_op=False, out=None):
        """Low-latency combine: y FP32 or BF16 [local_experts, ranks * max_tokens, hidden] in the
        masked layout; returns FP32 [tokens, hidden] = sum_k topk_weights[t, k] * y of pair (t, k)
        (into out when given, as combine)."""
        cap = self.size * (self.max_tokens or 1)
        ok = self._handle_fits(handle) and handle.mode == "low_latency"

        def check():
            if not ok:
                raise ValueError("handle must be the handle of a low-latency dispatch on this EpComm")
            yy = _check_array("y", y, (F32, BF16), (self.local_experts, cap, self.hidden))
            _check_array("topk_weights", topk_weights, (F32,), (handle.num_tokens, handle.top_k))
            _check_out(out, handle, self.hidden)
            return yy

        w = topk_weights if isinstance(topk_weights, np.ndarray) else None
        return self._combine("combine(low_latency)", check, handle, self.local_experts * cap, False, w, async_op, out)


def _check_out(out, handle, hidden):
    if out is None:
        return
    if not isinstance(out, np.ndarray) or out.dtype != F32 or out.shape != (handle.num_tokens, hidden) \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous float32 array of shape [{handle.num_tokens}, {hidden}]")
