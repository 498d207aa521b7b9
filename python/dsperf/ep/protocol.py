"""What both exchanges share: payload dtypes, the small int64 headers that carry each rank's
argument verdict and the values every rank must agree on, the call descriptors that catch ranks in
different calls, the argument checks, and the dispatch results (DispatchOut, LowLatencyOut)."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import _C

_C_EP = _C.ep

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
F32 = np.dtype(np.float32)

_ERR_BYTES = 248            # room for one rank's error message in a header
_MAGIC = 0x64737065         # "dspe"


# ---- call descriptors: every rank must be in the same call -------------------------------------
_CALL_MAGIC = 0x64736361   # "dsca"
CALLS = ("dispatch(normal)", "combine(normal)", "dispatch(low_latency)", "combine(low_latency)", "barrier")


def _calls_out_of_order(codes, seq, ranks=None):
    """The error for ranks whose call codes differ: ranks grouped by the call they made (ranks: the
    rank of each code, default its position)."""
    groups = {}
    for r, c in zip(range(len(codes)) if ranks is None else ranks, codes):
        groups.setdefault(int(c), []).append(int(r))
    parts = []
    for c, ranks in sorted(groups.items(), key=lambda kv: kv[1][0]):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
        name = CALLS[c] if 0 <= c < len(CALLS) else f"an unknown call ({c})"
        parts.append(f"{who} called {name}")
    return RuntimeError(f"dsperf.ep: calls out of order at call {seq} on this communicator: " + ", ".join(parts) +
                        " (every rank must make the same dsperf.ep calls in the same order; the communicator "
                        "is unusable now)")


# ---- headers: local verdicts and the values every rank must agree on ----------------------------
def _header(ok_error, values):
    """int64 words: magic, ok, the values, then the error text (UTF-8, cut to _ERR_BYTES)."""
    text = (ok_error or "").encode("utf-8", "replace")[:_ERR_BYTES]
    err = np.zeros(_ERR_BYTES, np.uint8)
    err[:len(text)] = np.frombuffer(text, np.uint8)
    words = np.array([_MAGIC, 0 if ok_error else 1, *values], np.int64)
    return np.concatenate([words, err.view(np.int64)])


def _parse_headers(rows, names):
    """rows: [ranks, words] headers. Returns the values as [ranks, len(names)], or raises the first
    rank's error (or a disagreement) as ValueError, identically on every rank."""
    n = len(names)
    if np.any(rows[:, 0] != _MAGIC):
        bad = int(np.nonzero(rows[:, 0] != _MAGIC)[0][0])
        raise RuntimeError(f"dsperf.ep: rank {bad} sent a message that is not a dsperf.ep header "
                           "(ranks are running different code or calls out of order)")
    bad = np.nonzero(rows[:, 1] == 0)[0]
    if bad.size:
        msgs = []
        for r in bad:
            text = rows[r, 2 + n:].view(np.uint8).tobytes().rstrip(b"\0").decode("utf-8", "replace")
            msgs.append(f"rank {int(r)}: {text}")
        raise ValueError("; ".join(msgs))
    return rows[:, 2:2 + n]


def _agree(values, names, agree):
    """Raise ValueError naming the first value in `agree` that differs between ranks."""
    for j, name in enumerate(names):
        if name in agree and np.any(values[:, j] != values[0, j]):
            per_rank = ", ".join(f"rank {r} has {int(v)}" for r, v in enumerate(values[:, j]))
            raise ValueError(f"{name} differs between ranks: {per_rank}")


def _header_words(n_values):
    return 2 + n_values + _ERR_BYTES // 8


# ---- argument checks ---------------------------------------------------------------------------
def _check_array(name, a, dtypes, shape):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(str(d) for d in dtypes)}, got {a.dtype}")
    if a.ndim != len(shape) or any(s is not None and a.shape[i] != s for i, s in enumerate(shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {list(a.shape)}")
    return np.ascontiguousarray(a)


def _local_check(fn):
    """Run fn(); return (result, None) or (None, 'the error message')."""
    try:
        return fn(), None
    except (TypeError, ValueError) as exc:
        return None, str(exc)


def agree_sizes(comm, waitall, num_experts, hidden, max_tokens, timeout_s):
    """(num_experts, hidden, max_tokens or -1) checked on this rank and agreed by every rank of comm
    (collective): a bad or differing value raises the same ValueError on every rank, naming it."""
    size = comm.Get_size()

    def check():
        # Upper bounds keep the exchange buffers (max_tokens x experts x hidden) allocatable and
        # the header words exact.
        for name, v, hi in (("num_experts", num_experts, 1 << 20), ("hidden", hidden, 1 << 24)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= hi:
                raise ValueError(f"{name} must be an integer in [1, {hi}], got {v!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                                       or not 1 <= max_tokens <= 1 << 24):
            raise ValueError(f"max_tokens must be None or an integer in [1, {1 << 24}], got {max_tokens!r}")
        if num_experts % size:
            raise ValueError(f"num_experts ({num_experts}) must be a multiple of the ranks ({size})")
        if isinstance(timeout_s, bool) or not (isinstance(timeout_s, (int, float)) and 0 < timeout_s <= 1e6):
            raise ValueError(f"timeout_s must be a number in (0, 1e6], got {timeout_s!r}")
        return int(num_experts), int(hidden), -1 if max_tokens is None else int(max_tokens)

    names = ("num_experts", "hidden", "max_tokens", "ranks")
    vals, err = _local_check(check)
    mine = _header(err, (*(vals if vals else (0, 0, 0)), size))
    rows = np.empty((size, mine.size), np.int64)
    waitall([comm.Iallgather(mine, rows)], "the EpComm set-up")
    values = _parse_headers(rows, names)
    _agree(values, names, set(names))
    return vals


def check_tokens(x, topk_ids, topk_weights, fp8, need_weights, hidden, num_experts, check_values=True):
    """This rank's dispatch arguments checked: (x or (values, scales), ids int64, weights or None,
    tokens). Raises TypeError/ValueError naming the argument. check_values=False leaves the ids'
    values (range, repeats) to the caller (the window exchange checks them while counting)."""
    if isinstance(x, tuple):
        if len(x) != 2:
            raise ValueError("x as a tuple must be (fp8 values, scales)")
        vals = _check_array("x[0]", x[0], (FP8,), (None, hidden))
        sc = _check_array("x[1]", x[1], (F32,), (vals.shape[0], -(-hidden // 128)))
        if not fp8:
            raise ValueError("x given as FP8 (values, scales) needs fp8=True")
        T = vals.shape[0]
        x = (vals, sc)
    else:
        x = _check_array("x", x, (BF16,), (None, hidden))
        T = x.shape[0]
    ids = _check_array("topk_ids", topk_ids, (np.dtype(np.int32), np.dtype(np.int64)), (T, None))
    if ids.shape[1] < 1:
        raise ValueError("topk_ids must have at least one column (top_k >= 1)")
    if check_values and ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise ValueError(f"topk_ids must lie in [0, num_experts = {num_experts}), "
                         f"got values in [{ids.min()}, {ids.max()}]")
    if check_values and ids.size and np.any(np.diff(np.sort(ids, axis=1), axis=1) == 0):
        raise ValueError("topk_ids must not repeat an expert within a token")
    w = None
    if need_weights or topk_weights is not None:
        w = _check_array("topk_weights", topk_weights, (F32,), ids.shape)
    return x, ids.astype(np.int64, copy=False), w, T


@dataclass
class DispatchOut:
    """Normal-mode dispatch result.

    layout="expert": x holds the rows in the contiguous per-expert layout of this rank's experts
    (local expert e owns rows offsets[e]:offsets[e + 1]; a token with two experts here appears twice).
    layout="token": x holds each received token once, in arrival order (rank 0's first), as DeepEP's
    normal dispatch returns them; rows `source[offsets[e]:offsets[e + 1]]` of x are expert e's.
    x: FP8 or BF16 [rows, hidden]; scales: FP32 [rows, ceil(hidden / 128)] for FP8, else None.
    In the token layout x, scales, topk_ids and topk_weights are views of the receive buffer (rows
    strided, no copy). topk_ids: int32 [received, top_k] local expert of each slot, -1 where the
    slot's expert lives on another rank; topk_weights FP32 [received, top_k]; source int64
    [expert rows] the received token of each expert-layout row."""
    x: np.ndarray
    scales: np.ndarray | None
    offsets: np.ndarray
    num_recv_tokens: int
    handle: object             # plan.ExchangeHandle (every exchange)
    layout: str = "expert"
    topk_ids: np.ndarray | None = None
    topk_weights: np.ndarray | None = None
    source: np.ndarray | None = None
    records: np.ndarray | None = None   # token layout: the receive buffer's byte records [received, record]
    scale_col: int = 0                  # byte column of the scales within a record (FP8)

    def expert_rows_bf16(self):
        """BF16 [expert rows, hidden]: the rows in the per-expert layout, FP8 dequantised, in one
        pass (gathered from the receive buffer when the layout is "token")."""
        hidden = self.handle.hidden
        rows = int(self.offsets[-1])
        out = np.empty((rows, hidden), BF16)
        if self.layout == "token":
            if self.scales is not None:
                _C_EP.dequant_gather_rows(self.records, self.scale_col, hidden, self.source, out.view(np.uint16))
            else:
                _C_EP.copy_rows(self.records, 0, self.source, out.view(np.uint8), 0, None, rows, 2 * hidden)
        elif self.scales is not None:
            _C_EP.dequant_rows(self.x.view(np.uint8), self.scales, out.view(np.uint16))
        else:
            out[:] = self.x
        return out


@dataclass
class LowLatencyOut:
    """Low-latency dispatch result, the masked layout: x [local_experts, ranks * max_tokens, hidden]
    (FP8 or BF16; rows past counts[e] are zero), scales FP32 [local_experts, capacity,
    ceil(hidden / 128)] for FP8, counts int32 [local_experts]. Within an expert, rows come from
    rank 0 first, then rank 1, ...; within a rank, in token order."""
    x: np.ndarray
    scales: np.ndarray | None
    counts: np.ndarray
    handle: object             # plan.ExchangeHandle (every exchange)


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


def _byte_rows(a):
    """A 2-D array's rows as bytes (a C-contiguous view; a copy only where a is strided)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape[0], a.shape[1] * a.itemsize)


def _displs(counts):
    out = np.zeros(len(counts), np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def open_ep_comm(ep, comm, num_experts, hidden, max_tokens, timeout_s, abort_on_error) -> None:
    """What every exchange sets up first, on `ep`: the communicator (COMM_WORLD by default), the
    abort hook, rank and size, the bounded timeout and its watchdog, and the sizes every rank
    agreed on (agree_sizes: a difference raises on every rank naming the argument)."""
    from .guards import _mpi, _Watchdog, install_abort_on_error

    MPI = _mpi()
    ep._mpi = MPI
    ep.comm = MPI.COMM_WORLD if comm is None else comm
    if abort_on_error:
        install_abort_on_error(ep.comm)
    ep.rank, ep.size = ep.comm.Get_rank(), ep.comm.Get_size()
    ep.timeout_s = (float(timeout_s) if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
                    and 0 < timeout_s <= 1e6 else 60.0)
    ep._watchdog = _Watchdog(ep.comm, ep.timeout_s)
    vals = agree_sizes(ep.comm, ep._waitall, num_experts, hidden, max_tokens, timeout_s)
    ep.num_experts, ep.hidden, mt = (int(v) for v in vals)
    ep.max_tokens = None if mt < 0 else mt
    ep.local_experts = ep.num_experts // ep.size
    ep.first_expert = ep.rank * ep.local_experts
