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
