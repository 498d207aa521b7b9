"""Building blocks and the GEMM against dsperf.reference."""
import threading

import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import fp8_linear_eps, BF16, EPS_BF16, EPS_F32, FP8, assert_dot_close, f32, rand_bf16, rand_fp8_weight


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("m, k, n", [(1, 32, 1), (5, 300, 7), (4, 64, 4), (33, 1000, 65), (9, 7168, 24), (64, 512, 130)])
def test_linear_bf16(rng, m, k, n):
    x, w = rand_bf16(rng, m, k), rand_bf16(rng, n, k)
    # BF16 x BF16 products are exact in FP32: only the summation order differs.
    assert_dot_close(K.linear(x, w), R.linear(x, w), np.abs(f32(x)) @ np.abs(f32(w)).T, 2 * k * EPS_F32)


@pytest.mark.parametrize("m, k, n", [(1, 128, 128), (3, 300, 200), (17, 1024, 256), (40, 300, 200)])
def test_linear_fp8_block_scaled(rng, m, k, n):
    x = rand_bf16(rng, m, k)
    w, s = rand_fp8_weight(rng, n, k)
    wd = R.weight_dequant(w, s)
    assert_dot_close(K.linear(x, w, s), R.linear(x, w, s), np.abs(f32(x)) @ np.abs(f32(wd)).T, fp8_linear_eps(k))


def test_weight_dequant_matches_reference(rng):
    w, s = rand_fp8_weight(rng, 200, 300)
    np.testing.assert_array_equal(K.weight_dequant(w, s).view(np.uint16), R.weight_dequant(w, s).view(np.uint16))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_act_quant_matches_reference(rng, dtype):
    x = (rng.standard_normal((7, 300)) * 3).astype(np.float32).astype(dtype)
    x[2, :128] = 0  # an all-zero group
    q, s = K.act_quant(x)
    rq, rs = R.act_quant(x)
    np.testing.assert_array_equal(s, rs)
    np.testing.assert_array_equal(q.view(np.uint8), rq.view(np.uint8))
    # FP8 saturation: the group maximum maps to exactly 448.
    assert np.abs(f32(q)).max() == 448.0


def test_fp8_conversion_matches_ml_dtypes(rng):
    # weight_dequant with unit scales converts FP8 -> BF16 through the kernels' own FP8 decoding.
    w = np.arange(256, dtype=np.uint8).reshape(2, 128).view(FP8)  # every FP8 bit pattern
    finite = ~np.isnan(f32(w))
    got = f32(K.weight_dequant(w, np.ones((1, 1), np.float32)))
    np.testing.assert_array_equal(got[finite], f32(w)[finite])


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_rmsnorm(rng, dtype):
    x = rng.standard_normal((6, 7168)).astype(np.float32).astype(dtype)
    w = (1 + 0.1 * rng.standard_normal(7168)).astype(np.float32)
    got, ref = f32(K.rmsnorm(x, w)), f32(R.rmsnorm(x, w))
    tol = 1e-5 if dtype == np.float32 else EPS_BF16
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max() * 1e-3)


def test_rope_frequencies_yarn():
    for kw in ({}, dict(max_seq_len=4096), dict(dim=128, factor=8, beta_fast=16)):
        np.testing.assert_allclose(K.rope_frequencies(**kw), R.rope_frequencies(**kw), rtol=1e-6)
    f = K.rope_frequencies()
    assert f[0] == 1.0 and f[-1] < 1.0 / 10000 ** (62 / 64) * 0.5  # the slowest dimensions are interpolated


@pytest.mark.parametrize("dtype, shape", [(np.float32, (9, 16, 64)), (BF16, (5, 64)), (np.float32, (1, 1, 64))])
def test_rope(rng, dtype, shape):
    x = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    pos = rng.integers(0, 16384, shape[0]).astype(np.int32)
    freqs = K.rope_frequencies()
    got, ref = f32(K.apply_rope(x, pos, freqs)), f32(R.apply_rope(x, pos, freqs))
    tol = 1e-5 if dtype == np.float32 else 2 * EPS_BF16
    np.testing.assert_allclose(got, ref, atol=tol * np.abs(f32(x)).max() * 2)
    assert got.dtype == np.float32 and K.apply_rope(x, pos, freqs).dtype == x.dtype


def test_embedding(rng):
    table = rand_bf16(rng, 100, 64)
    ids = np.array([0, 99, 5, 5], np.int64)
    np.testing.assert_array_equal(K.embedding(table, ids).view(np.uint16), R.embedding(table, ids).view(np.uint16))
    with pytest.raises(ValueError, match=r"ids\[1\] = 100 is outside \[0, 100\)"):
        K.embedding(table, np.array([3, 100], np.int32))


@pytest.mark.parametrize("inter", [1, 16, 300])
def test_silu_mul(rng, inter):
    gu = rng.standard_normal((4, 2 * inter)).astype(np.float32) * 4
    gu[0, :inter] = np.resize(np.array([100, -100, 88.5, -87.5, 0, np.nan], np.float32), inter)  # clamp, NaN
    got, ref = f32(K.silu_mul(gu)), f32(R.silu_mul(gu))
    np.testing.assert_allclose(got, ref, rtol=2 * EPS_BF16, atol=1e-6)
    assert np.isnan(got).sum() == np.isnan(ref).sum()


def test_inputs_are_not_modified(rng):
    x = rng.standard_normal((3, 2, 64)).astype(np.float32)
    before = x.copy()
    K.apply_rope(x, np.arange(3, dtype=np.int32), K.rope_frequencies())
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("call, exc, match", [
    (lambda x, w: K.linear(x.astype(np.float32), w), TypeError, "x must have dtype bfloat16"),
    (lambda x, w: K.linear(x, np.ascontiguousarray(w[:, :10])), ValueError, "K = x.shape\\[1\\] = 64"),
    (lambda x, w: K.linear(x[:, ::2], w[:, ::2]), ValueError, "x must be C-contiguous"),
    (lambda x, w: K.linear(x, w.astype(np.float32).astype(FP8)), ValueError, "FP8 w needs w_scale"),
    (lambda x, w: K.linear(x, w, np.ones((1, 1), np.float32)), ValueError, "w_scale applies to FP8 w only"),
    (lambda x, w: K.linear([[1.0]], w), TypeError, "x must be a numpy array"),
    (lambda x, w: K.rmsnorm(f32(x), np.ones(3, np.float32)), ValueError, "weight must have 64 entries"),
    (lambda x, w: K.apply_rope(f32(x), np.arange(2, dtype=np.int32), K.rope_frequencies()), ValueError, "positions"),
    (lambda x, w: K.silu_mul(np.ones((2, 3), np.float32)), ValueError, "even width"),
])
def test_bad_input_names_the_argument(rng, call, exc, match):
    x, w = rand_bf16(rng, 4, 64), rand_bf16(rng, 8, 64)
    with pytest.raises(exc, match=match):
        call(x, w)


def test_kernels_release_the_gil(rng):
    # While one thread is inside a long GEMM, the main thread keeps running Python code.
    x, w = rand_bf16(rng, 256, 4096), rand_bf16(rng, 4096, 4096)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (K.linear(x, w), done.set()))
    ticks = 0
    worker.start()
    while not done.is_set():
        ticks += 1
    worker.join()
    assert ticks > 1000, "the main thread was blocked while the kernel ran"
