"""The routing plan of a dispatch as the exchanges read it: from the counts every rank agreed on
(tokens per (source, destination) rank, (token, expert) pairs per (source, expert)), where each
token's record and each pair's row lands at its destination, in the three layouts (token: records
per source, source-major; expert: contiguous per local expert, sources in rank order within an
expert; masked: [local experts, ranks * max_tokens] rows, zero past each count), and the handle
combine reads it back with (ExchangeHandle, one type for every mode, layout and transport).

The plan itself exists once, in C++ (csrc/ep/ep_plan.hpp: routing_plan, routing_places): the window
exchange (exchange.py) computes it there inside window_plan and window_scatter, and the transport
exchange (routed.py, over MPI, NCCL or the simulated transport) reads the same offsets and places
through the binding (_make_plan, source_entries). What is left here is what combine derives from
them (returned_rows, returned_position, pair_experts), RowFormat and ExchangeHandle."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _C
from .protocol import _displs

_C_EP = _C.ep

# The layouts' codes, declared once in C++ (csrc/ep/ep_layout.hpp).
_LAYOUT_CODE = {name: int(v) for name, v in _C.kernel_cost.EpLayout.__members__.items()}

@dataclass
class ExchangeHandle:
    """What combine needs from a dispatch, for every mode and layout (one handle type).

    Rows this rank's tokens occupy at the other ranks, so combine can read them in place:
    tok_peer/tok_row [tokens, ranks]: the rank and row of each token's record (per-token partials,
    rank order; peer -1: not sent there); pair_peer/pair_row [tokens, top_k]: the rank and row of
    each (token, expert) pair in that rank's per-expert (normal) or masked (low-latency) rows.
    Peers are ranks of this rank's node (local index), and `locals` (the node's size) stands for the
    rows that come back over the rail from other nodes. tok_rows/pair_rows [node ranks]: how many
    rows each node rank's combine buffer holds per kind. rail: the forwarding side (None on one node).
    The window exchange (exchange.py) and the transport exchanges (routed.py: MPI, NCCL, simulated)
    fill it alike: on one node the two give the same fields for the same inputs."""
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
    masked: tuple | None               # low latency: (pairs per local expert of this rank, rows per expert)
    wire_bytes: dict                   # bytes per peer: dispatch_send, dispatch_recv, combine_send, combine_recv
    passes: dict = field(default_factory=dict)   # copy passes per payload byte, by phase
    rail: dict | None = None
    plan: "_Plan | None" = None        # the agreed counts and row offsets (transport exchanges' combine reads them)
    received: dict | None = None       # transport exchanges, token layout: position/weights [received, top_k]
    rank: int | None = None            # transport exchanges: the rank whose dispatch returned it
    _slots: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def own_slots(self) -> np.ndarray | None:
        """Low latency: this rank's filled rows of the masked layout, flat (built on first use: the
        in-place combine never needs them)."""
        if self.masked is None:
            return None
        if self._slots is None:
            self._slots = masked_slots(*self.masked)
        return self._slots


@dataclass
class RowFormat:
    """How a dispatch's rows are laid out in bytes; every exchange's plan carries it."""
    layout: str
    fp8: bool
    K: int
    vb: int                    # value bytes of a row
    sb: int                    # scale bytes of a row
    sc_col: int                # scales' column in a record
    rec: int                   # record bytes: values | pad | scales | K local ids | K weights

    @property
    def id_col(self):
        return self.sc_col + self.sb


def row_format(layout, fp8, hidden, K) -> dict:
    """RowFormat's fields for rows of `hidden` values (FP8 + one FP32 scale per 128, or BF16)."""
    vb, sb = (hidden, 4 * -(-hidden // 128)) if fp8 else (2 * hidden, 0)
    sc_col = vb + (-vb % 4)
    return dict(layout=layout, fp8=fp8, K=K, vb=vb, sb=sb, sc_col=sc_col, rec=sc_col + sb + 8 * K)


@dataclass
class _Plan(RowFormat):
    """Where every token and pair of a dispatch lands, from the counts every rank agreed on. The
    offsets are the C++ routing plan's (native), read in place: read-only views."""
    N: np.ndarray              # [source, dest] tokens
    PE: np.ndarray             # [source, expert] pairs
    tok_off: np.ndarray        # [source, dest] first record row of the source's tokens at the dest
    n_recv: np.ndarray         # [dest] records received
    expert_base: np.ndarray    # [expert] first row of the expert in its rank's pair rows
    pair_off: np.ndarray       # [source, expert] first row of the source's pairs within the expert
    pair_rows: np.ndarray      # [dest] pair rows (per-expert or masked layout)
    native: object = field(default=None, repr=False, compare=False)   # the _C.ep.RoutingPlan behind them


def _make_plan(rows, E_loc, cap, layout, fp8, hidden, K):
    """The plan from the agreed count rows [ranks, ranks + experts] (tokens source -> dest, then
    pairs source -> expert), computed in C++ (routing_plan, as the window exchange computes it)."""
    rows = np.ascontiguousarray(rows, np.int64)
    W = rows.shape[0]
    native = _C_EP.routing_plan(rows, E_loc, _LAYOUT_CODE[layout], cap)
    return _Plan(**row_format(layout, fp8, hidden, K), N=rows[:, :W], PE=rows[:, W:W + W * E_loc],
                 tok_off=native.tok_off, n_recv=native.n_recv, expert_base=native.expert_base,
                 pair_off=native.pair_off, pair_rows=native.pair_rows, native=native)


def source_entries(plan, s, ids):
    """Where source s's tokens (global expert ids [n, K], tokens ascending) land at every rank, as
    the C++ routing plan places them (routing_places, the window exchange's own places): (dest
    [n, K] int32 rank of each pair's expert, hit [n, ranks] token sent to the rank, tok_peer [n, ranks]
    int32 (the rank where hit, else -1), tok_row [n, ranks] its record row there (-1 where not sent),
    pair_row [n, K] each pair's row in its rank's per-expert or masked rows)."""
    ids = np.ascontiguousarray(ids, np.int64)
    (n, K), W = ids.shape, plan.N.shape[0]
    tok_peer, tok_row = np.empty((n, W), np.int32), np.empty((n, W), np.int64)
    dest, pair_row = np.empty((n, K), np.int32), np.empty((n, K), np.int64)
    _C_EP.routing_places(plan.native, s, ids, (tok_peer, tok_row, dest, pair_row))
    return dest, tok_peer >= 0, tok_peer, tok_row, pair_row


def masked_slots(counts, cap):
    """The filled rows of a masked layout, flat: expert e's first counts[e] of its cap rows."""
    counts = np.asarray(counts, np.int64)
    return (np.repeat(np.arange(counts.size) * cap, counts) + _ranks_within(counts)).astype(np.int64)


def _ranks_within(counts):
    """0, 1, ..., counts[0] - 1, 0, 1, ..., counts[1] - 1, ...: each item's place within its group."""
    counts = np.asarray(counts, np.int64)
    return np.arange(int(counts.sum())) - np.repeat(_displs(counts), counts)


def returned_rows(plan, s, d, local_experts, per_token):
    """The rows of rank d's layout that hold source s's tokens (per_token: its records) or pairs, in
    the order s sent them: what d sends back to s at combine."""
    if per_token:
        first = int(plan.tok_off[s, d])
        return np.arange(first, first + int(plan.N[s, d]), dtype=np.int64)
    g = np.arange(d * local_experts, (d + 1) * local_experts)
    cnt = plan.PE[s, g]
    return np.repeat(plan.expert_base[g] + plan.pair_off[s, g], cnt) + _ranks_within(cnt)


def returned_position(plan, s, key, row, per_token):
    """Each entry's row in what source s receives back at combine (one block per peer in rank order,
    each in returned_rows order). per_token: key = tok_peer [n, ranks] (-1: not sent, row 0);
    else key = the pairs' global experts [n, K] (a rank's experts are consecutive, so the pairs s
    sent before expert g's are those of experts 0 .. g - 1)."""
    if per_token:
        ok = key >= 0
        p = np.where(ok, key, 0)
        pos = _displs(plan.N[s])[p] + row - plan.tok_off[s, p]
        return np.where(ok, pos, 0).astype(np.int64)
    g = key
    return (_displs(plan.PE[s])[g] + row - plan.expert_base[g] - plan.pair_off[s, g]).astype(np.int64)


def pair_experts(plan, peer, row, local_experts):
    """The global expert of each pair, from its rank and its row in that rank's pair rows (a rank's
    experts are consecutive, each expert's rows start at expert_base; empty experts share a start
    with the next one, so the last start at or before the row is the pair's expert)."""
    span = (int(plan.pair_rows.max()) if plan.pair_rows.size else 0) + 1
    ranks = np.repeat(np.arange(plan.pair_rows.size), local_experts)
    starts = ranks * span + plan.expert_base
    return np.searchsorted(starts, np.asarray(peer, np.int64) * span + row, side="right") - 1
