"""Weights prepared once (kernels.PackedWeights, kernels.PackedExperts): every call on them gives
exactly what the same call on the plain arrays gives, on any CPU. Where AMX is usable the prepared
weights hold tiles and the calls of enough rows read them; the tiles hold the very values the
per-call packing produces and the driver sums in the same order, so the results are bit for bit
the same. Elsewhere nothing is packed and the calls are the plain ones."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import FP8, assert_dot_close, f32, fp8_linear_eps, rand_bf16, rand_fp8_weight

AMX = K.amx_status() == "usable"
V3_GATE = dict(n_group=8, topk_group=4, top_k=8, route_scale=2.5)


@pytest.fixture
def rng():
    return np.random.default_rng(23)


# Rows below and above the AMX thresholds (4 rows BF16, 16 FP8), one block of x and more than one.
@pytest.mark.parametrize("m", [1, 3, 8, 20, 130, 300])
@pytest.mark.parametrize("fp8", [False, True])
def test_linear_on_packed_weights_equals_linear_on_the_arrays(rng, m, fp8):
    n, k = 200, 300
    x = rand_bf16(rng, m, k)
    w, scale = rand_fp8_weight(rng, n, k) if fp8 else (rand_bf16(rng, n, k), None)
    packed = K.PackedWeights(w, scale)
    assert packed.shape == (n, k)
    assert (packed.nbytes_packed > 0) == AMX
    np.testing.assert_array_equal(K.linear(x, packed), K.linear(x, w, scale))


# FP8 K tiles go by groups of two (64 codes, the converter's lane order): K of one tile and of three.
@pytest.mark.parametrize("k", [32, 96])
@pytest.mark.parametrize("m", [8, 20, 130])
def test_fp8_packed_weights_with_an_odd_number_of_k_tiles(rng, m, k):
    x = rand_bf16(rng, m, k)
    w, scale = rand_fp8_weight(rng, 64, k)
    np.testing.assert_array_equal(K.linear(x, K.PackedWeights(w, scale)), K.linear(x, w, scale))
    assert_dot_close(K.linear(x, w, scale), R.linear(x, w, scale), np.abs(f32(x)) @ np.abs(f32(
        R.weight_dequant(w, scale))).T, fp8_linear_eps(k))


def test_packed_weights_refuse_a_second_scale_and_bad_arrays(rng):
    w, scale = rand_fp8_weight(rng, 130, 64)
    packed = K.PackedWeights(w, scale)
    with pytest.raises(ValueError, match="w_scale goes with the weights"):
        K.linear(rand_bf16(rng, 4, 64), packed, scale)
    with pytest.raises(ValueError, match="K = x.shape"):
        K.linear(rand_bf16(rng, 4, 65), packed)
    with pytest.raises(ValueError, match="FP8 w needs w_scale"):
        K.PackedWeights(w)
    with pytest.raises(TypeError, match="w"):
        K.PackedWeights(np.zeros((4, 4), np.float64))


def _experts(rng, fp8, E=4, dim=256, inter=128):
    if fp8:
        pairs = [rand_fp8_weight(rng, 2 * inter, dim) for _ in range(E)]
        downs = [rand_fp8_weight(rng, dim, inter) for _ in range(E)]
        return (np.stack([p[0] for p in pairs]), np.stack([d[0] for d in downs]),
                np.stack([p[1] for p in pairs]), np.stack([d[1] for d in downs]))
    return rand_bf16(rng, E, 2 * inter, dim, scale=0.1), rand_bf16(rng, E, dim, inter, scale=0.1), None, None


@pytest.mark.parametrize("fp8", [False, True])
def test_experts_on_packed_weights_equal_the_plain_calls(rng, fp8):
    w13, w2, s13, s2 = _experts(rng, fp8)
    packed = K.PackedExperts(w13, w2, s13, s2)
    assert packed.n_experts == 4 and (packed.nbytes_packed > 0) == AMX
    rows = np.array([0, 2, 40, 40, 300], np.int64)        # experts of 2, 38, 0 and 260 rows
    x = rand_bf16(rng, int(rows[-1]), 256)
    np.testing.assert_array_equal(K.experts_contiguous(x, rows, packed),
                                  K.experts_contiguous(x, rows, w13, w2, s13, s2))
    xm = rand_bf16(rng, 4, 24, 256)
    counts = np.array([24, 0, 5, 17], np.int32)
    np.testing.assert_array_equal(K.experts_masked(xm, counts, packed), K.experts_masked(xm, counts, w13, w2, s13, s2))


def test_moe_layer_on_packed_routed_and_shared_experts_equals_the_plain_call(rng):
    E, dim, inter = 16, 256, 128
    w13, w2, _, _ = _experts(rng, False, E, dim, inter)
    sw13, sw2 = rand_bf16(rng, 2 * inter, dim, scale=0.1), rand_bf16(rng, dim, inter, scale=0.1)
    gate_w = rand_bf16(rng, E, dim)
    bias = (0.01 * rng.standard_normal(E)).astype(np.float32)
    x = rand_bf16(rng, 64, dim)
    plain = K.moe_layer(x, gate_w, w13, w2, gate_bias=bias, shared_w13=sw13, shared_w2=sw2, **V3_GATE)
    packed = K.moe_layer(x, gate_w, K.PackedExperts(w13, w2), gate_bias=bias,
                         shared_w13=K.PackedExperts(sw13[None], sw2[None]), **V3_GATE)
    np.testing.assert_array_equal(packed, plain)


def test_packed_experts_refuse_arrays_beside_them_and_a_wrong_shared_count(rng):
    w13, w2, _, _ = _experts(rng, False)
    packed = K.PackedExperts(w13, w2)
    x = rand_bf16(rng, 8, 256)
    with pytest.raises(ValueError, match="its w2 and scales are its own"):
        K.experts_contiguous(x, np.array([0, 8, 8, 8, 8]), packed, w2)
    with pytest.raises(ValueError, match="w2 is required"):
        K.experts_contiguous(x, np.array([0, 8, 8, 8, 8]), w13)
    with pytest.raises(ValueError, match="must hold one expert"):
        K.moe_layer(x, rand_bf16(rng, 4, 256), packed, shared_w13=packed, n_group=1, topk_group=1, top_k=2,
                    route_scale=1.0)
    fp8 = K.PackedExperts(*_experts(rng, True))
    assert fp8.w13.dtype == FP8
    with pytest.raises(TypeError, match="dtype"):
        K.moe_layer(x, rand_bf16(rng, 4, 256), packed, shared_w13=K.PackedExperts(fp8.w13[:1], fp8.w2[:1],
                    fp8.w13_scale[:1], fp8.w2_scale[:1]), n_group=1, topk_group=1, top_k=2, route_scale=1.0)
