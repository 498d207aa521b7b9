"""The routing plan of a dispatch exists once, in C++ (csrc/ep/ep_plan.hpp, bound as _C.ep.routing_plan
and routing_places): the transport exchanges read it through dsperf.ep.plan (_make_plan,
source_entries) and the window exchange computes it inside window_scatter. Checked here against a
slow definition written out token by token, and the two exchanges' places against each other."""
import numpy as np
import pytest

from dsperf import _C
from dsperf.ep.plan import _LAYOUT_CODE, _make_plan, source_entries

LAYOUTS = ["token", "expert", "masked"]


def _routing(rng, tokens, E, K):
    """Distinct top-K experts per token, tokens ascending as each source holds them."""
    return [np.argsort(rng.random((t, E)), axis=1)[:, :K].astype(np.int64) for t in tokens]


def _count_rows(ids, W, E_loc, extra=0):
    """The agreed counts [W, W + E + extra]: tokens source -> rank (once per rank), pairs source ->
    expert, then `extra` columns the plan must ignore (the window exchange's node counts)."""
    E = W * E_loc
    rows = np.full((W, W + E + extra), 99, np.int64)
    for s, a in enumerate(ids):
        rows[s, :W] = [sum(any(e // E_loc == d for e in t) for t in a) for d in range(W)]
        rows[s, W:W + E] = [int(np.sum(a == e)) for e in range(E)]
    return rows


def _slow_plan(rows, W, E_loc, layout, cap):
    """The definition: sources in rank order at every destination; per-expert rows contiguous per
    local expert, experts in order; masked rows at local expert * cap."""
    E = W * E_loc
    N, PE = rows[:, :W], rows[:, W:W + E]
    tok_off = np.array([[sum(N[r, d] for r in range(s)) for d in range(W)] for s in range(W)])
    pair_off = np.array([[sum(PE[r, e] for r in range(s)) for e in range(E)] for s in range(W)])
    base = []
    for e in range(E):
        d, j = divmod(e, E_loc)
        base.append(j * cap if layout == "masked" else sum(PE[:, d * E_loc + i].sum() for i in range(j)))
    pair_rows = [E_loc * cap if layout == "masked" else PE[:, d * E_loc:(d + 1) * E_loc].sum() for d in range(W)]
    return dict(tok_off=tok_off, n_recv=N.sum(axis=0), expert_base=np.array(base), pair_off=pair_off,
                pair_rows=np.array(pair_rows))


def _slow_places(plan, s, ids, W, E_loc):
    """Each token in turn: its record row at a rank follows the source's earlier tokens sent there,
    each pair's row the source's earlier pairs of the same expert."""
    n, K = ids.shape
    tok_peer, tok_row = np.full((n, W), -1), np.full((n, W), -1)
    pair_peer, pair_row = np.zeros((n, K)), np.zeros((n, K))
    sent_to, sent_pairs = [0] * W, [0] * (W * E_loc)
    for i in range(n):
        for k in range(K):
            e = int(ids[i, k])
            d = e // E_loc
            pair_peer[i, k] = d
            pair_row[i, k] = plan["expert_base"][e] + plan["pair_off"][s, e] + sent_pairs[e]
            sent_pairs[e] += 1
            if tok_peer[i, d] < 0:
                tok_peer[i, d], tok_row[i, d] = d, plan["tok_off"][s, d] + sent_to[d]
                sent_to[d] += 1
    return tok_peer, tok_row, pair_peer, pair_row


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("W, E_loc, K, tokens", [(1, 4, 2, [6]), (3, 4, 3, [5, 0, 7]), (4, 2, 2, [3, 9, 1, 4])])
def test_the_plan_and_places_are_the_slow_definition(layout, W, E_loc, K, tokens):
    rng = np.random.default_rng(W * 10 + K)
    ids = _routing(rng, tokens, W * E_loc, K)
    rows = _count_rows(ids, W, E_loc)
    cap = W * max(tokens)
    plan = _make_plan(rows, E_loc, cap, layout, False, 64, K)
    want = _slow_plan(rows, W, E_loc, layout, cap)
    for name, value in want.items():
        got = getattr(plan, name)
        assert got.dtype == np.int64 and np.array_equal(got, value), name
    assert np.array_equal(plan.N, rows[:, :W]) and np.array_equal(plan.PE, rows[:, W:])
    for s in range(W):
        dest, hit, tok_peer, tok_row, pair_row = source_entries(plan, s, ids[s])
        w_peer, w_row, w_pair_peer, w_pair_row = _slow_places(want, s, ids[s], W, E_loc)
        assert np.array_equal(tok_peer, w_peer) and np.array_equal(tok_row, w_row)
        assert np.array_equal(dest, w_pair_peer) and np.array_equal(pair_row, w_pair_row)
        assert np.array_equal(hit, w_peer >= 0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_window_exchange_places_tokens_where_the_transport_plan_does(layout):
    """window_scatter (the window exchange) and source_entries (the transport exchanges) fill the
    same places from the same counts: the count rows here carry extra columns, as the window
    exchange's do, and no destination is on this node (local_of -1: places only, nothing written)."""
    rng = np.random.default_rng(11)
    W, E_loc, K, tokens = 4, 3, 3, [4, 6, 0, 5]
    ids = _routing(rng, tokens, W * E_loc, K)
    rows = _count_rows(ids, W, E_loc, extra=2)
    cap = W * max(tokens)
    plan = _make_plan(rows[:, :W + W * E_loc], E_loc, cap, layout, False, 64, K)
    fmt = _C.ep.RowFormat(vb=128, sb=0, rec=128 + 8 * K, sc_col=128, id_col=128)
    for s in range(W):
        n = tokens[s]
        places = (np.empty((n, W), np.int32), np.empty((n, W), np.int64), np.empty((n, K), np.int32),
                  np.empty((n, K), np.int64))
        written = _C.ep.window_scatter(np.zeros((n, 128), np.uint8), 0, None, 0, ids[s], None, s, rows, E_loc,
                                       _LAYOUT_CODE[layout], cap, fmt, np.full(W, -1, np.int64),
                                       (np.zeros(0, np.int64), np.zeros(0, np.int64)), places, 1)
        assert written == 0
        dest, _, tok_peer, tok_row, pair_row = source_entries(plan, s, ids[s])
        for got, want in zip(places, (tok_peer, tok_row, dest, pair_row)):
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_the_plan_offsets_are_read_only_views_of_the_cpp_plan():
    rows = _count_rows(_routing(np.random.default_rng(1), [3, 2], 4, 2), 2, 2)
    plan = _make_plan(rows, 2, 1, "expert", False, 64, 2)
    for name in ("tok_off", "n_recv", "expert_base", "pair_off", "pair_rows"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(plan, name)[0] = 1
    native = plan.native
    del plan
    assert native.tok_off.shape == (2, 2) and native.pair_off.shape == (2, 4)


def test_the_binding_checks_its_arguments():
    ids = np.array([[0, 3]], np.int64)
    rows = _count_rows([ids, np.zeros((0, 2), np.int64)], 2, 2)
    native = _C.ep.routing_plan(rows, 2, 1, 1)
    places = (np.empty((1, 2), np.int32), np.empty((1, 2), np.int64), np.empty((1, 2), np.int32),
              np.empty((1, 2), np.int64))
    with pytest.raises(ValueError, match="rows must hold W \\+ E counts"):
        _C.ep.routing_plan(rows[:, :5], 2, 1, 1)
    with pytest.raises(ValueError, match="layout out of range"):
        _C.ep.routing_plan(rows, 2, 3, 1)
    with pytest.raises(ValueError, match="source out of range"):
        _C.ep.routing_places(native, 2, ids, places)
    with pytest.raises(ValueError, match="ids out of range"):
        _C.ep.routing_places(native, 0, np.array([[0, 4]], np.int64), places)
    with pytest.raises(ValueError, match="C-contiguous int32, int64"):     # a copy would be filled, not this
        _C.ep.routing_places(native, 0, ids, (places[1],) + places[1:])
    with pytest.raises(ValueError, match="tok_peer and tok_row must be"):
        _C.ep.routing_places(native, 0, ids, (np.empty((1, 3), np.int32),) + places[1:])
    _C.ep.routing_places(native, 0, ids, places)
    assert places[0].tolist() == [[0, 1]] and places[3].tolist() == [[0, 0]]
