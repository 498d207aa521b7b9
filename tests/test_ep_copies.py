"""The exchange's row kernels (dsperf._C.ep) against numpy, without MPI."""
import ml_dtypes
import numpy as np
import pytest

from dsperf import _C, kernels
from dsperf.ep.layer import dequant_rows

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_combine_reduce_sums_partials_in_rank_order():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((7, 300)).astype(np.float32).astype(BF16)
    token_rows = np.array([[0, 3], [-1, 4], [1, -1], [-1, -1], [2, 6]], np.int64)
    out = np.full((5, 300), np.nan, np.float32)
    _C.ep.combine_reduce(rows.view(np.uint16), token_rows, out)
    f = rows.astype(np.float32)
    want = np.stack([f[0] + f[3], f[4], f[1], np.zeros(300, np.float32), f[2] + f[6]])
    assert np.array_equal(out, want)          # exact: the same additions in the same order


def test_combine_reduce_rejects_rows_past_the_buffer():
    out = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match="index the received rows"):
        _C.ep.combine_reduce(np.zeros((2, 4), np.uint16), np.array([[0, 2]], np.int64), out)


@pytest.mark.parametrize("dim", [7168, 200])     # a partial last group too
def test_dequant_gather_matches_numpy_bit_for_bit(dim):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((9, dim)) * 3).astype(np.float32).astype(BF16)
    q, s = kernels.act_quant(x)
    want = (q.astype(np.float32) * np.repeat(s, 128, axis=1)[:, :dim]).astype(BF16)
    assert np.array_equal(dequant_rows(q, s).view(np.uint16), want.view(np.uint16))
    # Gathered from byte records [values | pad | scales], the layout dispatch receives.
    col = dim + (-dim % 4)
    rec = np.zeros((9, col + 4 * s.shape[1] + 8), np.uint8)
    rec[:, :dim] = q.view(np.uint8)
    rec[:, col:col + 4 * s.shape[1]] = s.view(np.uint8)
    src = np.array([4, 4, 0, 8], np.int64)
    out = np.empty((4, dim), BF16)
    _C.ep.dequant_gather_rows(rec, col, dim, src, out.view(np.uint16))
    assert np.array_equal(out.view(np.uint16), want[src].view(np.uint16))
    with pytest.raises(ValueError, match="source"):
        _C.ep.dequant_gather_rows(rec, col, dim, np.array([0, 1, 2, 9], np.int64), out.view(np.uint16))


def test_written_arguments_must_be_contiguous_and_aligned():
    q, s = kernels.act_quant(np.ones((4, 256), np.float32).astype(BF16))
    out = np.zeros((4, 512), np.uint16)
    with pytest.raises(TypeError):                      # a strided output would be copied and lost
        _C.ep.dequant_rows(q.view(np.uint8), s, out[:, ::2])
    rec = np.zeros(4 * 264 + 1, np.uint8)[1:].reshape(4, 264)   # scales would be read misaligned
    with pytest.raises(ValueError, match="aligned"):
        _C.ep.dequant_gather_rows(rec, 256, 256, None, np.zeros((4, 256), np.uint16))


def test_expert_rows_of_the_expert_layout_any_hidden():
    # FP8 rows already in the per-expert layout, hidden not a multiple of 4.
    from dsperf.ep.alltoall import DispatchOut
    from dsperf.ep.routed import dispatch_results
    from dsperf.ep.transport import SimulatedTransport
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 130)).astype(np.float32).astype(BF16)
    q, s = kernels.act_quant(x)
    ids = np.zeros((0, 1), np.int32)     # a handle of a dispatch of no tokens, hidden 130
    none = {0: np.zeros((0, 1), np.float32)}
    handle = dispatch_results(SimulatedTransport(1), {0: x[:0]}, {0: ids}, none, 2)[0].handle
    d = DispatchOut(q, s, np.array([0, 2, 5], np.int64), 5, handle, layout="expert")
    assert np.array_equal(d.expert_rows_bf16().view(np.uint16), dequant_rows(q, s).view(np.uint16))


# ---- the window dispatch's planning (dsperf._C.ep: dispatch_counts, window_plan, window_scatter) ---
def _routing(rng, ranks, tokens, experts, top_k):
    return [np.argsort(rng.random((t, experts)), axis=1)[:, :top_k].astype(np.int64) for t in tokens]


def test_dispatch_counts_counts_and_checks_the_ids():
    ids = np.array([[0, 5], [1, 2], [6, 7]], np.int64)       # 8 experts on 4 ranks, 2 nodes
    node = np.array([0, 0, 1, 1], np.int64)
    out = np.empty(4 + 8 + 2, np.int64)
    assert _C.ep.dispatch_counts(ids, 8, 2, node, 2, out) == 0
    assert out[:4].tolist() == [2, 1, 1, 1]                   # tokens per rank (once per rank)
    assert out[4:12].tolist() == [1, 1, 1, 0, 0, 1, 1, 1]     # pairs per expert
    assert out[12:].tolist() == [2, 2]                        # tokens per node
    assert _C.ep.dispatch_counts(np.array([[0, 8]], np.int64), 8, 2, node, 2, out) == 1
    assert _C.ep.dispatch_counts(np.array([[3, 3]], np.int64), 8, 2, node, 2, out) == 2


def _streamed_hidden(rows):
    """A hidden size at which `rows` rows of FP32 (or of FP8 values) are written with streaming
    stores (the kernels' own rule, _C.kernels.writes_past_cache): a multiple of 128, plus 16 + 3 so
    the vector loops also run their partial last group."""
    hidden = 128
    while not _C.kernels.writes_past_cache(rows * (hidden // 128 * 128)):
        hidden *= 2
    return hidden + 19


@pytest.mark.parametrize("streamed", [False, True])
def test_pull_weighted_sum_matches_numpy_with_plain_and_streaming_stores(streamed):
    """Plain stores for outputs inside the cache, streaming ones past it: the same sums either way,
    also into an output that does not start on a 64-byte line (the head before the first aligned
    line) and with a partial last group of columns."""
    rng = np.random.default_rng(5)
    T, P = 6, 3
    dim = _streamed_hidden(T * 4) if streamed else 200
    peers = [rng.standard_normal((4, dim)).astype(np.float32).astype(BF16) for _ in range(P)]
    peer = rng.integers(-1, P, (T, 2)).astype(np.int32)
    row = rng.integers(0, 4, (T, 2)).astype(np.int64)
    w = rng.choice(np.array([0.5, 1.0, 2.0], np.float32), (T, 2))    # exact products: fma = mul + add
    store = np.full(T * dim + 1, np.nan, np.float32)
    out = store[1:].reshape(T, dim)                                  # 4 bytes past a 64-byte line
    _C.ep.pull_weighted_sum([p.view(np.uint16) for p in peers], peer, row, w, out, 1)
    want = np.zeros((T, dim), np.float32)
    for t in range(T):
        for m in range(2):
            if peer[t, m] >= 0:
                want[t] += w[t, m] * peers[peer[t, m]][row[t, m]].astype(np.float32)
    assert np.array_equal(out, want)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("layout", ["token", "expert", "masked"])
def test_window_scatter_places_every_row_as_the_numpy_definition(layout, streamed):
    """Every source's rows land where the definition puts them: records of a destination in source
    order, tokens ascending; per-expert rows by expert, then source, then token; masked rows at
    expert * capacity + the rows of lower sources + the token's place among its source's. streamed:
    rows so wide that a source's copies pass the cache (streaming stores, records off 64-byte lines)."""
    rng = np.random.default_rng(3)
    W, E_loc, K = 3, 4, 3
    h = _streamed_hidden(5) // 128 * 128 if streamed else 256
    E, tokens = W * E_loc, [5, 0, 7]
    ids = _routing(rng, W, tokens, E, K)
    vb, sb = h, 4 * (h // 128)
    sc_col = vb
    rec = sc_col + sb + 8 * K
    cap = W * max(tokens)
    code = {"token": 0, "expert": 1, "masked": 2}[layout]
    node = np.zeros(W, np.int64)
    rows = np.stack([np.concatenate([_counts(i, W, E, E_loc, node)]) for i in ids])
    plan = np.empty(6 * W + E_loc, np.int64)
    n_recv = pair_rows = None
    for me in range(W):
        _C.ep.window_plan(rows, E_loc, code, cap, me, plan)
        n_recv, pair_rows = plan[:W].copy(), plan[W:2 * W].copy()
    size = [int(n_recv[d] * rec) if layout == "token" else int(-(-pair_rows[d] * vb // 64) * 64 + pair_rows[d] * sb)
            for d in range(W)]
    bufs = [np.zeros(max(s, 1), np.uint8) for s in size]
    addr = np.array([b.ctypes.data for b in bufs], np.int64)
    nbytes = np.array(size, np.int64)
    payload = [rng.integers(0, 255, (t, vb), np.uint8) for t in tokens]
    scales = [rng.integers(0, 255, (t, sb), np.uint8) for t in tokens]
    weights = [rng.random((t, K)).astype(np.float32) for t in tokens]
    places = []
    for s in range(W):
        n = tokens[s]
        tp, tr = np.empty((n, W), np.int32), np.empty((n, W), np.int64)
        pp, pr = np.empty((n, K), np.int32), np.empty((n, K), np.int64)
        fmt = _C.ep.RowFormat(vb=vb, sb=sb, rec=rec, sc_col=sc_col, id_col=sc_col + sb)
        _C.ep.window_scatter(payload[s], 0, scales[s], 0, ids[s], weights[s], s, rows, E_loc, code, cap, fmt,
                             np.arange(W, dtype=np.int64), (addr, nbytes), (tp, tr, pp, pr), 1)
        places.append((tp, tr, pp, pr))
    # The definition, in numpy.
    for d in range(W):
        if layout == "token":
            recs = bufs[d][:size[d]].reshape(-1, rec)
            at = 0
            for s in range(W):
                hit = np.nonzero(np.any(ids[s] // E_loc == d, axis=1))[0]
                assert np.array_equal(places[s][1][hit, d], at + np.arange(hit.size))
                assert np.array_equal(places[s][0][hit, d], np.full(hit.size, d))
                assert np.array_equal(recs[at:at + hit.size, :vb], payload[s][hit])
                assert np.array_equal(recs[at:at + hit.size, sc_col:sc_col + sb], scales[s][hit])
                lid = recs[at:at + hit.size, sc_col + sb:sc_col + sb + 4 * K].view(np.int32)
                want = np.where(ids[s][hit] // E_loc == d, ids[s][hit] % E_loc, -1)
                assert np.array_equal(lid, want)
                assert np.array_equal(recs[at:at + hit.size, sc_col + sb + 4 * K:].view(np.float32), weights[s][hit])
                miss = np.setdiff1d(np.arange(tokens[s]), hit)
                assert np.all(places[s][0][miss, d] == -1) and np.all(places[s][1][miss, d] == -1)
                at += hit.size
        else:
            vals = bufs[d][:pair_rows[d] * vb].reshape(-1, vb)
            xb = -(-pair_rows[d] * vb // 64) * 64
            scs = bufs[d][xb:xb + pair_rows[d] * sb].reshape(-1, sb)
            base = 0
            for j in range(E_loc):
                e = d * E_loc + j
                row = j * cap if layout == "masked" else base
                for s in range(W):
                    ti, tk = np.nonzero(ids[s] == e)              # tokens ascending
                    want_rows = row + np.arange(ti.size)
                    assert np.array_equal(places[s][3][ti, tk], want_rows)
                    assert np.all(places[s][2][ti, tk] == d)
                    assert np.array_equal(vals[want_rows], payload[s][ti])
                    assert np.array_equal(scs[want_rows], scales[s][ti])
                    row += ti.size
                base = row if layout != "masked" else base


def _counts(ids, W, E, E_loc, node):
    out = np.empty(W + E + 1, np.int64)
    assert _C.ep.dispatch_counts(ids, E, E_loc, node, 1, out) == 0
    return out


def test_window_scatter_refuses_rows_past_a_segment():
    ids = np.array([[0, 1]], np.int64)
    rows = np.array([[1, 1, 1, 0]], np.int64)                 # 1 rank, 2 experts: 1 token, 1 pair each
    buf = np.zeros(64, np.uint8)
    tp, tr = np.empty((1, 1), np.int32), np.empty((1, 1), np.int64)
    pp, pr = np.empty((1, 2), np.int32), np.empty((1, 2), np.int64)
    with pytest.raises(ValueError, match="segment has 64"):
        _C.ep.window_scatter(np.zeros((1, 128), np.uint8), 0, None, 0, ids, None, 0, rows, 2, 1, 1,
                             _C.ep.RowFormat(vb=128, sb=0, rec=0, sc_col=0, id_col=0), np.zeros(1, np.int64),
                             (np.array([buf.ctypes.data], np.int64), np.array([64], np.int64)), (tp, tr, pp, pr), 1)
    assert not buf.any()                                       # nothing written
