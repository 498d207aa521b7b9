"""The CUDA kernels: host-side argument checks everywhere; results against the CPU kernels and the
numpy reference where a GPU is present (skipped with the reason elsewhere)."""
import numpy as np
import pytest

from dsperf import cuda, kernels as K, reference as R
from dsperf.cuda_array import DeviceArray
from kernel_helpers import BF16, EPS_BF16, FP8, f32, rand_bf16, rand_fp8_weight, shuffled_block_table

OK, WHY = cuda.available()
needs_gpu = pytest.mark.skipif(not OK, reason=f"no usable GPU: {WHY}")
HOPPER_WHY = cuda._G.wgmma_unsupported_reason(0) if OK else WHY


def _choose(monkeypatch, env, choice):
    """The kernel a parametrized case runs: "wgmma" takes the Hopper kernel (skipped off sm_90); any
    other value is the environment switch's setting for the mma.sync family's own kernels, asked for
    by name (on an sm_90 GPU the default would be the Hopper kernel). Returns the call's keyword
    arguments."""
    if choice == "wgmma":
        if HOPPER_WHY:
            pytest.skip(f"the Hopper kernels need an sm_90 GPU: {HOPPER_WHY}")
        return dict(variant="wgmma")
    monkeypatch.setenv(env, choice)
    return dict(variant="mma")


def test_availability_is_reported_with_a_reason():
    ok, why = cuda.available()
    assert ok == (why == "")
    assert ok == (cuda.device_count() > 0) or not cuda._G.built_with_cuda()


@pytest.mark.skipif(OK, reason="a GPU is present")
def test_a_good_call_without_a_gpu_says_why():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        DeviceArray((4,), np.float32)


@pytest.mark.skipif(OK, reason="a GPU is present (the script then measures; run it by hand)")
def test_gpu_validate_says_it_needs_a_gpu_and_exits_0():
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_validate.py"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "needs a CUDA GPU" in r.stdout and WHY in r.stdout


def _mla_case(rng, seqlens, q_len=1, heads=16, L=512, rope=64, bs=64):
    """A paged cache with blocks handed out in a shuffled order (as test_kernels_mla's)."""
    table, total = shuffled_block_table(rng, seqlens, bs, 3)
    return dict(q_nope=rand_bf16(rng, len(seqlens), q_len, heads, L, scale=0.05),
                q_rope=rand_bf16(rng, len(seqlens), q_len, heads, rope, scale=0.05),
                latent_cache=rand_bf16(rng, total, bs, L), rope_cache=rand_bf16(rng, total, bs, rope),
                block_table=table, seqlens=np.array(seqlens, np.int32))


def _mla(**changes):
    c = _mla_case(np.random.default_rng(0), [70, 5])
    c.update(changes)
    return lambda: cuda.mla_decode(c["q_nope"], c["q_rope"], c["latent_cache"], c["rope_cache"], c["block_table"],
                                   c["seqlens"], c.get("scale", 0.1), latent_scale=c.get("latent_scale"))


W13 = np.zeros((2, 128, 64), BF16)
W2 = np.zeros((2, 64, 64), BF16)


@pytest.mark.parametrize("call, err, match", [
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float64), np.ones(8, np.float32)), TypeError, "x must have dtype"),
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(7, np.float32)), ValueError, "weight"),
    (lambda: cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32), eps=-1), ValueError, "eps"),
    (lambda: cuda.silu_mul(np.ones((2, 7), np.float32)), ValueError, "gate_up"),
    (lambda: cuda.act_quant(np.ones((2, 7), np.float32)), TypeError, "x must have dtype bfloat16"),
    (lambda: cuda.apply_rope(np.ones((2, 4, 64), BF16), np.zeros(3, np.int32), np.ones(32, np.float32)),
     ValueError, "positions"),
    (lambda: cuda.apply_rope(np.ones((2, 64), BF16), np.zeros(2, np.int32), np.ones(31, np.float32)),
     ValueError, "freqs"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), n_group=3, topk_group=1, top_k=2, route_scale=1.0),
     ValueError, "n_group"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), n_group=4, topk_group=1, top_k=8, route_scale=1.0),
     ValueError, "top_k"),
    (lambda: cuda.moe_gate(np.ones((2, 16), np.float32), np.ones(15, np.float32), n_group=1, topk_group=1, top_k=2,
                           route_scale=1.0), ValueError, "bias"),
    (lambda: cuda.moe_permute(np.ones((3, 8), BF16), np.array([0, 3], np.int32)), ValueError, "source"),
    (lambda: cuda.moe_unpermute(np.ones((4, 8), np.float32), np.array([[0, 4]], np.int32),
                                np.ones((1, 2), np.float32)), ValueError, "position"),
    (lambda: cuda.moe_unpermute(np.ones((4, 8), np.float32), np.array([[0, 1]], np.int32),
                                np.ones((1, 3), np.float32)), ValueError, "weights"),
    (lambda: cuda.grouped_gemm(np.ones((4, 64), BF16), W13, offsets=np.array([0, 2, 3])), ValueError,
     "end at the rows"),
    (lambda: cuda.grouped_gemm(np.ones((4, 64), BF16), W13, offsets=np.array([0, 3, 2, 4])), ValueError,
     "experts \\+ 1"),
    (lambda: cuda.grouped_gemm(np.ones((2, 4, 64), BF16), W13, counts=np.array([1, 5])), ValueError, "capacity = 4"),
    (lambda: cuda.grouped_gemm(np.ones((2, 4, 64), BF16), W13), ValueError, "offsets .* or counts"),
    (lambda: cuda.experts_contiguous(np.ones((4, 64), BF16), np.array([0, 4, 4]), W13, np.zeros((2, 64, 32), BF16)),
     ValueError, "w2 must have shape"),
    (lambda: cuda.experts_contiguous(np.ones((4, 64), BF16), np.array([0, 4, 4]), W13.astype(FP8), W2.astype(FP8)),
     ValueError, "w13_scale and w2_scale"),
    (lambda: cuda.experts_masked(np.ones((3, 4, 64), BF16), np.array([1, 1, 1]), W13, W2), ValueError,
     "experts = 2"),
    (lambda: cuda.cublas_gemm_bf16(np.ones((2, 4, 64), BF16), np.ones((3, 8, 64), BF16)), ValueError, "batch = 2"),
    (lambda: cuda.mla_prefill(np.zeros((4, 2, 192), BF16), np.zeros((3, 2, 192), BF16), np.zeros((3, 2, 128), BF16),
                              0.1), ValueError, "at least the 4 query tokens"),
    (lambda: cuda.mla_prefill(np.zeros((4, 2, 192), BF16), np.zeros((4, 3, 192), BF16), np.zeros((4, 2, 128), BF16),
                              0.1), ValueError, "k must be"),
    (lambda: cuda.mla_prefill(np.zeros((4, 2, 192), BF16), np.zeros((4, 2, 192), BF16), np.zeros((4, 2, 256), BF16),
                              0.1), ValueError, "dv a multiple of 16 in \\[16, 128\\]"),
    (_mla(scale=0.0), ValueError, "softmax_scale"),
    (_mla(seqlens=np.array([70, 200], np.int32)), ValueError, "seqlens\\[1\\] = 200"),
    (_mla(block_table=np.array([[0, 99], [1, 0]], np.int32)), ValueError, "block_table\\[0\\]"),
    (_mla(q_rope=np.zeros((2, 1, 8, 64), BF16)), ValueError, "q_rope must match"),
    (_mla(latent_cache=np.zeros((7, 64, 512), FP8)), ValueError, "latent_scale"),
    (_mla(q_nope=np.zeros((2, 1, 16, 500), BF16), latent_cache=np.zeros((6, 64, 500), BF16)), ValueError,
     "multiple of 16"),
])
def test_bad_input_is_named_before_any_gpu_work(call, err, match):
    with pytest.raises(err, match=match):
        call()


# ---- the MLA plan (host work, in every build) ----------------------------------------------------
@pytest.mark.parametrize("seqlens, num_splits, sm_count", [
    ([1, 64, 65, 200], 2, None), ([1000, 5, 130], 3, None), ([3], 8, None),
    ([4096] * 4 + [17], None, 132), ([1] * 64, None, 132), ([100000], None, 8),
])
def test_mla_plan_partitions_every_request_into_block_ranges(seqlens, num_splits, sm_count):
    meta = cuda.get_mla_metadata(np.array(seqlens), 1, 128, num_splits=num_splits, sm_count=sm_count)
    assert meta.batch == len(seqlens)
    items = meta.items
    for b, n in enumerate(seqlens):
        mine = items[items[:, 0] == b]
        blocks = -(-n // 64)
        # Ranges in order, touching, covering [0, blocks); split indices 0.. and slots as counted.
        assert mine[0, 1] == 0 and mine[-1, 2] == blocks
        assert (mine[1:, 1] == mine[:-1, 2]).all() and (mine[:, 2] > mine[:, 1]).all()
        assert mine[:, 3].tolist() == list(range(len(mine)))
        assert meta.splits()[b] == len(mine)
        if num_splits:
            assert len(mine) == min(num_splits, blocks)
    assert meta.num_partials == len(items)
    if sm_count:  # automatic: enough work items to occupy the SMs when the work allows
        groups = -(-128 // 16)
        assert len(items) >= min(sum(-(-n // 64) for n in seqlens), 2 * sm_count // groups) // 2


def test_mla_plan_sizes_its_splits_for_the_kernel_in_use(monkeypatch):
    # 128 heads: the 64-row kernel (DSPERF_MLA_MMA=1) has 2 row blocks per split, the 16-row one 8,
    # so the automatic plan cuts 4x more splits for it.
    lens = np.full(4, 8192)
    monkeypatch.setenv("DSPERF_MLA_MMA", "0")
    n16 = cuda.get_mla_metadata(lens, 1, 128, sm_count=132, variant="mma").num_items
    monkeypatch.setenv("DSPERF_MLA_MMA", "1")
    n64 = cuda.get_mla_metadata(lens, 1, 128, sm_count=132, variant="mma").num_items
    assert n64 > 3 * n16
    # The Hopper kernel's block fills an SM: its plan aims at one item per SM, not two (512 blocks:
    # 16 splits of 8 blocks per request against 32 of 4).
    plans = {v: cuda.get_mla_metadata(lens, 1, 128, sm_count=132, variant=v) for v in ("mma", "wgmma")}
    assert plans["mma"].num_items == n64 == 128 and plans["wgmma"].num_items == 64
    with pytest.raises(ValueError, match="variant must be one of"):
        cuda.get_mla_metadata(lens, 1, 128, sm_count=132, variant="hopper")


def test_mla_plan_rejects_bad_input():
    with pytest.raises(ValueError, match="seqlens must be >= 0"):
        cuda.get_mla_metadata(np.array([-1]), 1, 16, num_splits=1)
    with pytest.raises(ValueError, match="num_splits"):
        cuda.get_mla_metadata(np.array([5]), 1, 16, num_splits=0)
    meta = cuda.get_mla_metadata(np.array([70, 5]), 2, 16, num_splits=1)
    c = _mla_case(np.random.default_rng(0), [70, 5])
    with pytest.raises(ValueError, match="metadata was planned"):
        cuda.mla_decode(*c.values(), 0.1, metadata=meta)


# ---- on the GPU --------------------------------------------------------------------------------
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
def test_device_arrays_in_device_arrays_out():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    w = rng.standard_normal(256).astype(np.float32)
    y = cuda.rmsnorm(DeviceArray.from_numpy(x), DeviceArray.from_numpy(w))
    assert isinstance(y, DeviceArray) and y.device == 0
    np.testing.assert_array_equal(y.numpy(), cuda.rmsnorm(x, w))
    # Ids held on the GPU are checked there.
    with pytest.raises(ValueError, match="source\\[1\\] = 9"):
        cuda.moe_permute(DeviceArray.from_numpy(rand_bf16(rng, 3, 8)),
                         DeviceArray.from_numpy(np.array([0, 9], np.int32)))


@needs_gpu
@pytest.mark.parametrize("dim", [7168, 200])  # whole 128-groups, and a partial last group
def test_act_quant_matches_the_cpu(dim):
    rng = np.random.default_rng(3)
    x = rand_bf16(rng, 33, dim)
    q, s = cuda.act_quant(x)
    rq, rs = K.act_quant(x)
    np.testing.assert_array_equal(s, rs)
    # Same scale; FP8 rounding of x / scale may differ only where the CPU's division rounds otherwise.
    assert (q.view(np.uint8) == rq.view(np.uint8)).mean() > 0.999
    deq = f32(q) * np.repeat(s, 128, axis=1)[:, :dim]
    np.testing.assert_allclose(deq, f32(rq) * np.repeat(rs, 128, axis=1)[:, :dim], rtol=2 ** -3, atol=0)


@needs_gpu
@pytest.mark.parametrize("shape", [(5, 16, 64), (7, 64)])
def test_rope_matches_the_cpu(shape):
    rng = np.random.default_rng(4)
    x = rand_bf16(rng, *shape)
    pos = rng.integers(0, 160000, shape[0]).astype(np.int32)
    freqs = K.rope_frequencies(64)
    got, want = f32(cuda.apply_rope(x, pos, freqs)), f32(K.apply_rope(x, pos, freqs))
    # Both round the same FP32 products to BF16; sincosf and libm may differ in the last FP32 bit.
    np.testing.assert_allclose(got, want, atol=2 * EPS_BF16 * np.abs(f32(x)).max())


@needs_gpu
@pytest.mark.parametrize("score_func, bias", [("sigmoid", True), ("sigmoid", False), ("softmax", False)])
def test_gate_matches_the_cpu_kernel(score_func, bias):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((64, 256)).astype(np.float32)
    b = (rng.standard_normal(256) * 0.1).astype(np.float32) if bias else None
    args = dict(n_group=8, topk_group=4, top_k=8, route_scale=2.5, score_func=score_func)
    w_gpu, ids_gpu = cuda.moe_gate(logits, b, **args)
    w_cpu, ids_cpu = K._K.moe_gate(logits, b, K._gate_args(**args))
    np.testing.assert_array_equal(ids_gpu, ids_cpu)
    np.testing.assert_allclose(w_gpu, w_cpu, rtol=1e-5)


@needs_gpu
def test_permute_and_unpermute_match_the_cpu_kernels():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((33, 512)).astype(np.float32).astype(BF16)
    ids = np.argsort(rng.random((33, 256)), axis=1)[:, :8].astype(np.int32)
    _, position, source = K.moe_route(ids, 256)
    np.testing.assert_array_equal(cuda.moe_permute(x, source).view(np.uint16),
                                  K.moe_permute(x, source).view(np.uint16))
    y = rng.standard_normal((source.size, 512)).astype(np.float32)
    wts = rng.random((33, 8)).astype(np.float32)
    np.testing.assert_allclose(cuda.moe_unpermute(y, position, wts), K.moe_unpermute(y, position, wts),
                               rtol=1e-6, atol=1e-6)


# ---- grouped GEMM and experts ------------------------------------------------------------------
def _counts(rng, E, total):
    c = rng.multinomial(total, np.ones(E) / E)
    c[1] += c[0]  # an expert without tokens; the rows still add up to total
    c[0] = 0
    return c


@needs_gpu
# Tile-aligned; ragged N and K (vector loads, a partial last K tile); K not a multiple of 8 (scalar loads).
@pytest.mark.parametrize("N, Kd", [(256, 512), (200, 136), (72, 100)])
# The mma.sync kernel (K % 8 == 0), the WMMA one, and Hopper's wgmma (K % 8 == 0).
@pytest.mark.parametrize("bf16_mma", ["1", "0", "wgmma"])
def test_grouped_gemm_bf16_contiguous_matches_numpy(monkeypatch, bf16_mma, N, Kd):
    if bf16_mma == "wgmma" and Kd % 8:
        pytest.skip("the wgmma kernel takes K % 8 == 0 (it refuses the rest, tested on the fake device)")
    kw = _choose(monkeypatch, "DSPERF_BF16_MMA", bf16_mma)
    rng = np.random.default_rng(10)
    E = 6
    counts = _counts(rng, E, 300)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    a, b = rand_bf16(rng, 300, Kd), rand_bf16(rng, E, N, Kd, scale=0.1)
    got = cuda.grouped_gemm(a, b, offsets=offsets, **kw)
    # The reference in FP64, so that the bound below is the GPU's FP32 accumulation error alone.
    want = np.concatenate([f32(a[offsets[e]:offsets[e + 1]]).astype(np.float64) @ f32(b[e]).T.astype(np.float64)
                           for e in range(E)])
    bound = np.concatenate([np.abs(f32(a[offsets[e]:offsets[e + 1]])) @ np.abs(f32(b[e])).T for e in range(E)])
    assert (np.abs(got - want) <= Kd * 2.0 ** -24 * bound + 1e-30).all()


@needs_gpu
@pytest.mark.parametrize("bf16_mma", ["1", "0", "wgmma"])
@pytest.mark.parametrize("cap", [100, 300])  # one and three 128-row tiles per expert
def test_grouped_gemm_bf16_masked_zeroes_past_the_counts(monkeypatch, bf16_mma, cap):
    kw = _choose(monkeypatch, "DSPERF_BF16_MMA", bf16_mma)
    rng = np.random.default_rng(11)
    E, N, Kd = 4, 136, 256
    counts = np.array([0, cap, 37, cap - 35], np.int32)
    a, b = rand_bf16(rng, E, cap, Kd), rand_bf16(rng, E, N, Kd, scale=0.1)
    got = cuda.grouped_gemm(a, b, counts=counts, **kw)
    for e in range(E):
        n = counts[e]
        np.testing.assert_allclose(got[e, :n], f32(a[e, :n]) @ f32(b[e]).T, rtol=1e-4, atol=1e-4)
        assert (got[e, n:] == 0).all()


@needs_gpu
# FP8 tensor cores where the GPU has them; the WMMA path; Hopper's wgmma.
@pytest.mark.parametrize("fp8_mma", ["1", "0", "wgmma"])
@pytest.mark.parametrize("N, Kd", [(256, 384), (200, 272)])
def test_grouped_gemm_fp8_block_scaled_matches_the_dequantised_product(monkeypatch, fp8_mma, N, Kd):
    kw = _choose(monkeypatch, "DSPERF_FP8_MMA", fp8_mma)
    rng = np.random.default_rng(12)
    E = 3
    counts = np.array([50, 0, 77])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    x = rand_bf16(rng, int(counts.sum()), Kd)
    aq, as_ = K.act_quant(x)
    ws = [rand_fp8_weight(rng, N, Kd) for _ in range(E)]
    bq, bs = np.stack([w for w, _ in ws]), np.stack([s for _, s in ws])
    got = cuda.grouped_gemm(aq, bq, offsets=offsets, a_scale=as_, b_scale=bs, **kw)
    adq = f32(aq).astype(np.float64) * np.repeat(as_, 128, axis=1)[:, :Kd]
    for e in range(E):
        wdq = f32(bq[e]).astype(np.float64) * np.repeat(np.repeat(bs[e], 128, 0), 128, 1)[:N, :Kd]
        want = adq[offsets[e]:offsets[e + 1]] @ wdq.T
        if want.size == 0:  # the expert without rows: nothing of it in the output
            assert got[offsets[e]:offsets[e + 1]].shape == want.shape
            continue
        # The FP8 tensor cores accumulate with about 14 significant bits between the per-128-block
        # promotions to FP32 (DeepSeek-V3's report on Hopper), so their path gets a looser bound.
        atol = (1e-5 if fp8_mma == "0" else 2e-3) * np.abs(want).max()
        np.testing.assert_allclose(got[offsets[e]:offsets[e + 1]], want, rtol=1e-4, atol=atol)


def _rel(got, want):
    return np.linalg.norm(f32(got) - f32(want)) / max(np.linalg.norm(f32(want)), 1e-30)


@needs_gpu
@pytest.mark.parametrize("fp8", [False, True])
def test_experts_match_the_cpu_kernels_in_both_layouts(fp8):
    rng = np.random.default_rng(13)
    E, D, I = 4, 256, 128
    if fp8:
        w13s = [rand_fp8_weight(rng, 2 * I, D) for _ in range(E)]
        w2s = [rand_fp8_weight(rng, D, I) for _ in range(E)]
        w13, s13 = np.stack([w for w, _ in w13s]), np.stack([s for _, s in w13s])
        w2, s2 = np.stack([w for w, _ in w2s]), np.stack([s for _, s in w2s])
    else:
        w13, w2, s13, s2 = rand_bf16(rng, E, 2 * I, D, scale=0.05), rand_bf16(rng, E, D, I, scale=0.05), None, None
    counts = np.array([10, 0, 70, 3])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    x = rand_bf16(rng, int(counts.sum()), D)
    got = cuda.experts_contiguous(x, offsets, w13, w2, s13, s2)
    want = K.experts_contiguous(x, offsets, w13, w2, s13, s2)
    # The intermediate is rounded to BF16 on both sides; FP32 sums in other orders can flip a
    # rounding, which moves the output by about a BF16 unit at most in a few places.
    assert _rel(got, want) < 4 * EPS_BF16
    xm = np.zeros((E, 80, D), BF16)
    for e in range(E):
        xm[e, :counts[e]] = x[offsets[e]:offsets[e + 1]]
    gm = cuda.experts_masked(xm, counts.astype(np.int32), w13, w2, s13, s2)
    wm = K.experts_masked(xm, counts.astype(np.int32), w13, w2, s13, s2)
    assert _rel(gm, wm) < 4 * EPS_BF16
    assert (gm[0, counts[0]:] == 0).all()


@needs_gpu
def test_cublas_baseline_matches_numpy():
    rng = np.random.default_rng(14)
    a, b = rand_bf16(rng, 3, 40, 256), rand_bf16(rng, 3, 72, 256)
    got = cuda.cublas_gemm_bf16(a, b)
    want = np.einsum("bmk,bnk->bmn", f32(a), f32(b))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


# ---- MLA decode --------------------------------------------------------------------------------
@needs_gpu
# The 16-row WMMA kernel, the 64-row mma.sync one, and Hopper's wgmma one.
@pytest.mark.parametrize("mla_mma", ["0", "1", "wgmma"])
@pytest.mark.parametrize("seqlens, q_len, splits", [
    ([1], 1, 1), ([63, 64, 65], 1, 1), ([1000, 5, 130], 1, 3), ([2, 200], 2, 4), ([3], 1, 8),
    ([4000, 17, 300], 1, None),  # the automatic plan
    ([300, 90], 2, 2),           # 2 x 128 heads: rows past one 64-row tile
])
def test_mla_decode_matches_the_cpu(monkeypatch, mla_mma, seqlens, q_len, splits):
    kw = _choose(monkeypatch, "DSPERF_MLA_MMA", mla_mma)
    rng = np.random.default_rng(len(seqlens) * 100 + q_len)
    c = _mla_case(rng, seqlens, q_len, heads=128 if seqlens == [300, 90] else 16)
    scale = (128 + 64) ** -0.5
    out, lse = cuda.mla_decode(*c.values(), scale, num_splits=splits, **kw)
    want, wlse = K.mla_decode(*c.values(), scale, num_splits=1)
    np.testing.assert_allclose(out, want, atol=3 * EPS_BF16 * np.abs(f32(c["latent_cache"])).max())
    np.testing.assert_allclose(lse, wlse, rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("mla_mma", ["0", "1", "wgmma"])
def test_mla_decode_fp8_cache_and_device_arrays(monkeypatch, mla_mma):
    kw = _choose(monkeypatch, "DSPERF_MLA_MMA", mla_mma)
    rng = np.random.default_rng(22)
    cache = K.PagedMlaCache(6, 64, 512, 64, dtype="fp8")
    table = np.array([[4, 1, 5], [2, 0, 3]], np.int32)
    lens = np.array([150, 9], np.int32)
    requests = np.concatenate([np.full(n, b) for b, n in enumerate(lens)]).astype(np.int32)
    positions = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    K.paged_cache_write(cache, table, requests, positions, rand_bf16(rng, len(requests), 512),
                        rand_bf16(rng, len(requests), 64))
    qn, qr = rand_bf16(rng, 2, 1, 16, 512, scale=0.05), rand_bf16(rng, 2, 1, 16, 64, scale=0.05)
    want, wlse = K.mla_decode(qn, qr, cache.latent, cache.rope, table, lens, 0.1, latent_scale=cache.latent_scale)
    dev = [DeviceArray.from_numpy(a) for a in (qn, qr, cache.latent, cache.rope, table, lens)]
    meta = cuda.get_mla_metadata(dev[5], 1, 16)
    out, lse = cuda.mla_decode(*dev, 0.1, meta, latent_scale=DeviceArray.from_numpy(cache.latent_scale), **kw)
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(out.numpy(), want, atol=3 * EPS_BF16 * 448 * cache.latent_scale.max())
    np.testing.assert_allclose(lse.numpy(), wlse, rtol=1e-4, atol=1e-4)
    # A block id held on the GPU is checked there.
    bad = table.copy()
    bad[0, 2] = 77
    with pytest.raises(ValueError, match="block_table\\[0, 2\\] = 77"):
        cuda.mla_decode(*dev[:4], DeviceArray.from_numpy(bad), dev[5], 0.1, meta,
                        latent_scale=DeviceArray.from_numpy(cache.latent_scale), **kw)


@needs_gpu
@pytest.mark.parametrize("T, prefix, heads", [(1, 0, 4), (37, 0, 16), (100, 60, 8)])
def test_mla_prefill_matches_numpy(T, prefix, heads):
    rng = np.random.default_rng(T + prefix)
    S = T + prefix
    q, k = rand_bf16(rng, T, heads, 192, scale=0.3), rand_bf16(rng, S, heads, 192, scale=0.3)
    v = rand_bf16(rng, S, heads, 128)
    scale = 192 ** -0.5
    out, lse = cuda.mla_prefill(q, k, v, scale)
    s = np.einsum("thd,shd->hts", f32(q), f32(k)) * scale
    visible = np.arange(S)[None, :] <= prefix + np.arange(T)[:, None]
    s = np.where(visible[None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    want = np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), f32(v))
    # Probabilities rounded to BF16 before P V: about one BF16 unit of the largest value.
    np.testing.assert_allclose(out, want, atol=3 * EPS_BF16 * np.abs(f32(v)).max())
    np.testing.assert_allclose(lse, (m[..., 0] + np.log(p.sum(-1))).T, rtol=1e-4, atol=1e-4)


# ---- CUDA graphs -------------------------------------------------------------------------------
def test_a_graph_replays_only_after_a_capture():
    with pytest.raises(RuntimeError, match="nothing captured"):
        cuda.CudaGraph().replay()


@pytest.mark.skipif(OK, reason="a GPU is present")
def test_a_graph_capture_without_a_gpu_says_why():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        with cuda.CudaGraph():
            pass


@needs_gpu
def test_graph_of_attention_and_experts_replays_like_the_eager_calls():
    rng = np.random.default_rng(30)
    c = _mla_case(rng, [300, 70], q_len=1, heads=16)
    mla = [DeviceArray.from_numpy(a) for a in c.values()]
    meta = cuda.get_mla_metadata(mla[5], 1, 16)
    o, l = DeviceArray((2, 1, 16, 512), np.float32), DeviceArray((2, 1, 16), np.float32)
    E, cap, D, I = 4, 8, 256, 128
    x = DeviceArray.from_numpy(rand_bf16(rng, E, cap, D))
    counts = DeviceArray.from_numpy(np.array([3, 0, 8, 5], np.int32))
    w13, w2 = DeviceArray.from_numpy(rand_bf16(rng, E, 2 * I, D, scale=0.05)), DeviceArray.from_numpy(
        rand_bf16(rng, E, D, I, scale=0.05))
    eager_y = cuda.experts_masked(x, counts, w13, w2).numpy()
    eager_o, eager_l = (a.numpy() for a in cuda.mla_decode(*mla, 0.1, meta))  # also the warm-up
    g = cuda.CudaGraph()
    with g:
        cuda.mla_decode(*mla, 0.1, meta, out=(o, l), validate=False)
        y = cuda.experts_masked(x, counts, w13, w2, validate=False)
        with pytest.raises(RuntimeError, match="numpy"):
            cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32))
    o.set(np.zeros(o.shape, np.float32))
    g.replay()
    np.testing.assert_array_equal(o.numpy(), eager_o)
    np.testing.assert_array_equal(l.numpy(), eager_l)
    np.testing.assert_array_equal(y.numpy(), eager_y)
    # New inputs in the same buffers, replayed.
    new_x = rand_bf16(rng, E, cap, D)
    x.set(new_x)
    g.replay()
    np.testing.assert_array_equal(y.numpy(), cuda.experts_masked(new_x, np.array([3, 0, 8, 5], np.int32),
                                                                 w13.numpy(), w2.numpy()))
