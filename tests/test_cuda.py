"""The CUDA kernels: host-side argument checks everywhere; results against the CPU kernels and the
numpy reference where a GPU is present (skipped with the reason elsewhere)."""
import numpy as np
import pytest

from dsperf import cuda, kernels as K, reference as R

OK, WHY = cuda.available()
needs_gpu = pytest.mark.skipif(not OK, reason=f"no usable GPU: {WHY}")


def test_availability_is_reported_with_a_reason():
    ok, why = cuda.available()
    assert ok == (why == "")
    assert ok == (cuda.device_count() > 0) or not cuda._G.built_with_cuda()


@pytest.mark.skipif(OK, reason="a GPU is present")
def test_a_good_call_without_a_gpu_says_why():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32))


@pytest.mark.parametrize("call, err, match", [
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float64), np.ones(8, np.float32)), TypeError, "x must have dtype"),
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(7, np.float32)), ValueError, "weight"),
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32), eps=-1), ValueError, "eps"),
    (lambda: cuda.silu_mul(np.ones((2, 7), np.float32)), ValueError, "gate_up"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), n_group=3, topk_group=1, top_k=2, route_scale=1.0),
     ValueError, "n_group"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), n_group=4, topk_group=1, top_k=8, route_scale=1.0),
     ValueError, "top_k"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), np.ones(15, np.float32), n_group=1, topk_group=1, top_k=2,
                           route_scale=1.0), ValueError, "bias"),
    (lambda: cuda.moe_permute(np.ones((3, 8), K.BF16), np.array([0, 3], np.int32)), ValueError, "source"),
    (lambda: cuda.moe_unpermute(np.ones((4, 8), np.float32), np.array([[0, 4]], np.int32),
                                np.ones((1, 2), np.float32)), ValueError, "position"),
    (lambda: cuda.moe_unpermute(np.ones((4, 8), np.float32), np.array([[0, 1]], np.int32),
                                np.ones((1, 3), np.float32)), ValueError, "weights"),
])
def test_bad_input_is_named_before_any_gpu_work(call, err, match):
    with pytest.raises(err, match=match):
        call()


@needs_gpu
def test_rmsnorm_and_silu_mul_match_the_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7168)).astype(np.float32)
    w = rng.standard_normal(7168).astype(np.float32)
    np.testing.assert_allclose(cuda.rmsnorm(x, w), R.rmsnorm(x, w), rtol=1e-5, atol=1e-5)
    gu = rng.standard_normal((3, 2 * 2048)).astype(np.float32)
    got = cuda.silu_mul(gu).astype(np.float32)
    want = K.silu_mul(gu).astype(np.float32)
    # Both round to BF16; expf and the CPU's exp approximation may differ by one BF16 unit.
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)


@needs_gpu
@pytest.mark.parametrize("score_func, bias", [("sigmoid", True), ("sigmoid", False), ("softmax", False)])
def test_gate_matches_the_cpu_kernel(score_func, bias):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((64, 256)).astype(np.float32)
    b = (rng.standard_normal(256) * 0.1).astype(np.float32) if bias else None
    args = dict(n_group=8, topk_group=4, top_k=8, route_scale=2.5, score_func=score_func)
    w_gpu, ids_gpu = cuda.moe_gate(logits, b, **args)
    w_cpu, ids_cpu = K._K.moe_gate(logits, b, *K._gate_args(**args))
    np.testing.assert_array_equal(ids_gpu, ids_cpu)
    np.testing.assert_allclose(w_gpu, w_cpu, rtol=1e-5)


@needs_gpu
def test_permute_and_unpermute_match_the_cpu_kernels():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((33, 512)).astype(np.float32).astype(K.BF16)
    ids = np.argsort(rng.random((33, 256)), axis=1)[:, :8].astype(np.int32)
    _, position, source = K.moe_route(ids, 256)
    np.testing.assert_array_equal(cuda.moe_permute(x, source).view(np.uint16),
                                  K.moe_permute(x, source).view(np.uint16))
    y = rng.standard_normal((source.size, 512)).astype(np.float32)
    wts = rng.random((33, 8)).astype(np.float32)
    np.testing.assert_allclose(cuda.moe_unpermute(y, position, wts), K.moe_unpermute(y, position, wts),
                               rtol=1e-6, atol=1e-6)
