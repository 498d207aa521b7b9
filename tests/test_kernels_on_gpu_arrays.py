"""dsperf.kernels calls whose arrays live on a GPU go to their dsperf.cuda twins; here on the fake
device of test_cuda_fake (host memory and the CPU kernels behind the CUDA binding), so the routing,
the placement of results and the mixing errors are checked without a GPU."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf.cuda_array import DeviceArray
from kernel_helpers import rand_bf16
from cuda_fake import install_fake


@pytest.fixture
def fake(monkeypatch):
    return install_fake(monkeypatch)


def up(a):
    return DeviceArray.from_numpy(a)


def host(r):
    assert isinstance(r, DeviceArray), f"expected a GPU result, got {type(r).__name__}"
    return r.numpy()


def test_elementwise_and_routing_calls_run_on_gpu_arrays(fake):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    np.testing.assert_array_equal(host(K.rmsnorm(up(x), up(w))), K.rmsnorm(x, w))
    gu = rng.standard_normal((6, 64)).astype(np.float32)
    np.testing.assert_array_equal(host(K.silu_mul(up(gu))).view(np.uint16), K.silu_mul(gu).view(np.uint16))
    xb = rand_bf16(rng, 6, 256)
    q, s = K.act_quant(up(xb))
    q0, s0 = K.act_quant(xb)
    np.testing.assert_array_equal(host(q).view(np.uint8), q0.view(np.uint8))
    np.testing.assert_array_equal(host(s), s0)
    y = rng.standard_normal((12, 256)).astype(np.float32)
    pos = rng.permutation(12).astype(np.int32).reshape(6, 2)
    wt = rng.random((6, 2)).astype(np.float32)
    np.testing.assert_allclose(host(K.moe_unpermute(up(y), up(pos), up(wt))), K.moe_unpermute(y, pos, wt), rtol=1e-6)
    src = rng.integers(0, 6, 10).astype(np.int32)
    np.testing.assert_array_equal(host(K.moe_permute(up(xb), up(src))).view(np.uint16),
                                  K.moe_permute(xb, src).view(np.uint16))


def test_gate_and_experts_run_on_gpu_arrays(fake):
    rng = np.random.default_rng(1)
    x, gate = rand_bf16(rng, 7, 128), rand_bf16(rng, 16, 128, scale=0.05)
    routing = dict(n_group=4, topk_group=2, top_k=4, route_scale=2.5)
    w, ids = K.moe_gate(up(x), up(gate), **routing)
    w0, ids0 = K.moe_gate(x, gate, **routing)
    np.testing.assert_array_equal(host(ids), ids0)
    np.testing.assert_allclose(host(w), w0, rtol=1e-5)
    w13, w2 = rand_bf16(rng, 2, 64, 128, scale=0.05), rand_bf16(rng, 2, 128, 32, scale=0.05)
    off = np.array([0, 3, 7], np.int64)
    np.testing.assert_allclose(host(K.experts_contiguous(up(x), up(off), up(w13), up(w2))),
                               K.experts_contiguous(x, off, w13, w2), rtol=1e-5, atol=1e-6)


def test_mixing_host_and_gpu_arrays_is_a_clear_error(fake):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    with pytest.raises(TypeError, match="weight"):
        K.rmsnorm(up(x), w)
    xb, gate = rand_bf16(rng, 4, 64), rand_bf16(rng, 8, 64)
    with pytest.raises(TypeError, match="both be GPU arrays"):
        K.moe_gate(up(xb), gate, n_group=1, topk_group=1, top_k=2, route_scale=1.0)


def test_numpy_calls_stay_on_the_cpu(fake):
    x = np.ones((2, 64), np.float32)
    r = K.rmsnorm(x, np.ones(64, np.float32))
    assert isinstance(r, np.ndarray) and fake.calls == []
