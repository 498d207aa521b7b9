"""The baselines' GPU compositions (benchmarks/deepseek_v3/baseline/gpu.py) on the fake device of
test_cuda_fake (host memory, the CPU kernels behind the binding): the MoE layer composed from
dsperf.cuda calls equals dsperf.kernels.moe_layer, the dense MLP the CPU grouped FFN."""
import sys
from pathlib import Path

import numpy as np
import pytest

from dsperf import cuda, kernels as K
from kernel_helpers import rand_bf16, rand_fp8_weight
from cuda_fake import install_fake

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.deepseek_v3.baseline import gpu  # noqa: E402


@pytest.fixture
def fake(monkeypatch):
    return install_fake(monkeypatch)


@pytest.mark.parametrize("fp8", [False, True])
def test_moe_layer_composed_on_the_gpu_equals_the_cpu_layer(fake, fp8):
    rng = np.random.default_rng(1)
    T, D, I, E = 9, 256, 128, 8
    x, gate = rand_bf16(rng, T, D), rand_bf16(rng, E, D, scale=0.05)
    routing = dict(n_group=2, topk_group=1, top_k=3, route_scale=2.5)
    if fp8:
        w13, s13 = zip(*(rand_fp8_weight(rng, 2 * I, D) for _ in range(E + 1)))
        w2, s2 = zip(*(rand_fp8_weight(rng, D, I) for _ in range(E + 1)))
        w13, s13, w2, s2 = (np.stack(a) for a in (w13, s13, w2, s2))
        scales = dict(w13_scale=s13[:E], w2_scale=s2[:E], shared_w13_scale=s13[E], shared_w2_scale=s2[E])
    else:
        w13, w2 = rand_bf16(rng, E + 1, 2 * I, D, scale=0.05), rand_bf16(rng, E + 1, D, I, scale=0.05)
        scales = {}
    want = K.moe_layer(x, gate, w13[:E], w2[:E], shared_w13=w13[E], shared_w2=w2[E], **routing, **scales)
    layer = gpu.MoeOnGpu(gate, w13[:E], w2[:E], w13[E], w2[E], **routing, **scales)
    got = layer(gpu.up(x))
    assert isinstance(got, cuda.DeviceArray) and got.shape == (T, D)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_dense_mlp_on_the_gpu_equals_the_cpu_ffn(fake):
    rng = np.random.default_rng(2)
    x, w13, w2 = rand_bf16(rng, 5, 128), rand_bf16(rng, 1, 512, 128, scale=0.05), rand_bf16(rng, 1, 128, 256, scale=0.05)
    got = gpu.dense_mlp(gpu.up(x), gpu.up(w13), gpu.up(w2)).numpy()
    want = K.experts_contiguous(x, np.array([0, 5], np.int64), w13, w2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_shared_expert_must_match_the_routed_width(fake):
    rng = np.random.default_rng(3)
    w13, w2 = rand_bf16(rng, 2, 64, 32), rand_bf16(rng, 2, 32, 32)
    with pytest.raises(ValueError, match="shared expert"):
        gpu.MoeOnGpu(rand_bf16(rng, 2, 32), w13, w2, rand_bf16(rng, 128, 32), w2[0], n_group=1, topk_group=1,
                     top_k=1, route_scale=1.0)
