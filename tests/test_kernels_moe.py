"""MoE kernels against dsperf.reference: gating semantics, routing, grouped experts in both
layouts (BF16 and FP8 block-scaled weights), and the whole layer."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import BF16, EPS_BF16, EPS_F32, FP8, assert_dot_close, f32, rand_bf16, rand_fp8_weight

V3_GATE = dict(n_group=8, topk_group=4, top_k=8, route_scale=2.5)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


# ---- gating ------------------------------------------------------------------------------------
@pytest.mark.parametrize("score_func, with_bias, cfg", [
    ("sigmoid", True, V3_GATE),
    ("sigmoid", False, V3_GATE),
    ("softmax", False, dict(n_group=8, topk_group=3, top_k=6, route_scale=16.0)),  # DeepSeek-V2
    ("softmax", False, dict(n_group=1, topk_group=1, top_k=6, route_scale=1.0)),   # V2-Lite
    ("sigmoid", True, dict(n_group=1, topk_group=1, top_k=8, route_scale=2.827)),  # Kimi-K2
])
def test_gate_matches_reference_fp32(rng, score_func, with_bias, cfg):
    T, D = 200, 64
    E = 256 if cfg["n_group"] > 1 else 64
    x = rng.standard_normal((T, D)).astype(np.float32)
    w = rng.standard_normal((E, D)).astype(np.float32) * 0.3
    bias = (rng.standard_normal(E) * 0.1).astype(np.float32) if with_bias else None
    weights, ids = K.moe_gate(x, w, bias, score_func=score_func, **cfg)
    rw, rids = R.moe_gate(x, w, bias, score_func=score_func, **cfg)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(weights, rw, rtol=1e-5)
    if score_func == "sigmoid":
        np.testing.assert_allclose(weights.sum(axis=1), cfg["route_scale"], rtol=1e-5)


def test_gate_bf16_inputs_use_the_gemm(rng):
    x, w = rand_bf16(rng, 64, 256), rand_bf16(rng, 256, 256, scale=0.2)
    bias = (rng.standard_normal(256) * 0.05).astype(np.float32)
    _, ids = K.moe_gate(x, w, bias, **V3_GATE)
    _, rids = R.moe_gate(x, w, bias, **V3_GATE)
    # Logits differ from the reference only by FP32 summation order; selections agree.
    assert (ids == rids).mean() > 0.999


def test_gate_group_rules_by_hand():
    # 4 experts in 2 groups; keep 1 group; pick 1 expert.
    logits = np.log(np.array([[0.9, 0.1, 0.6, 0.6]]) / (1 - np.array([[0.9, 0.1, 0.6, 0.6]]))).astype(np.float32)
    eye = np.eye(4, dtype=np.float32)
    cfg = dict(n_group=2, topk_group=1, top_k=1, route_scale=1.0)
    # No bias: a group scores its best (0.9 vs 0.6): expert 0.
    _, ids = K.moe_gate(logits, eye, None, **cfg)
    assert ids.tolist() == [[0]]
    # With a (zero) bias: a group scores its best two (1.0 vs 1.2): expert 2 (ties go low).
    w, ids = K.moe_gate(logits, eye, np.zeros(4, np.float32), **cfg)
    assert ids.tolist() == [[2]] and w.tolist() == [[1.0]]
    # The bias steers selection but not the weights.
    w, ids = K.moe_gate(logits, eye, np.array([0, 0, 0, 0.5], np.float32), n_group=1, topk_group=1, top_k=2,
                        route_scale=2.0)
    assert ids.tolist() == [[3, 0]]
    np.testing.assert_allclose(w, [[2 * 0.6 / 1.5, 2 * 0.9 / 1.5]], rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_group=7, topk_group=4, top_k=8), "n_group \\(7\\) must divide the 256 experts"),
    (dict(n_group=8, topk_group=9, top_k=8), "topk_group must lie in \\[1, n_group = 8\\]"),
    (dict(n_group=8, topk_group=1, top_k=33), "top_k \\(33\\) must lie in \\[1, 32\\]"),
    (dict(n_group=8, topk_group=4, top_k=0), "top_k must be >= 1"),
    (dict(n_group=8, topk_group=4, top_k=8, score_func="relu"), "score_func must be"),
    (dict(n_group=8, topk_group=4, top_k=8, route_scale=0.0), "route_scale must be positive"),
])
def test_gate_rejects_bad_configs(rng, kwargs, match):
    x, w = rng.standard_normal((2, 16)).astype(np.float32), rng.standard_normal((256, 16)).astype(np.float32)
    kw = dict(route_scale=1.0)
    kw.update(kwargs)
    with pytest.raises(ValueError, match=match):
        K.moe_gate(x, w, **kw)


# ---- routing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ids", [
    np.array([[3, 1], [1, 0], [3, 3], [0, 2]], np.int32),
    np.zeros((5, 2), np.int32),               # all tokens to one expert
    np.array([[2]], np.int32),                # a single token
])
def test_route_permute_unpermute(rng, ids):
    E, D = 4, 32
    offsets, position, source = K.moe_route(ids, E)
    ro, rp, rs = R.moe_route(ids, E)
    np.testing.assert_array_equal(offsets, ro)
    np.testing.assert_array_equal(position, rp)
    np.testing.assert_array_equal(source, rs)
    x = rand_bf16(rng, ids.shape[0], D)
    xp = K.moe_permute(x, source)
    np.testing.assert_array_equal(f32(xp), f32(R.moe_permute(x, source)))
    yp = rng.standard_normal((ids.size, D)).astype(np.float32)
    wts = rng.random(ids.shape).astype(np.float32)
    np.testing.assert_allclose(K.moe_unpermute(yp, position, wts), R.moe_unpermute(yp, position, wts), rtol=1e-6)


def test_route_rejects_ids_out_of_range():
    with pytest.raises(ValueError, match=r"ids\[1, 0\] = 4 is outside \[0, 4\)"):
        K.moe_route(np.array([[0, 1], [4, 2]], np.int32), 4)


# ---- experts -----------------------------------------------------------------------------------
def make_experts(rng, E, D, I, fp8):
    if not fp8:
        return rand_bf16(rng, E, 2 * I, D, scale=0.05), rand_bf16(rng, E, D, I, scale=0.05), None, None
    w13, s13, w2, s2 = [], [], [], []
    for _ in range(E):
        a, sa = rand_fp8_weight(rng, 2 * I, D)
        b, sb = rand_fp8_weight(rng, D, I)
        w13.append(a), s13.append(sa), w2.append(b), s2.append(sb)
    return np.stack(w13), np.stack(w2), np.stack(s13), np.stack(s2)


def ffn_bound(x, w13, w2, s13, s2):
    """|x| |w1,3| and |h| |w2| products: the scale of each output's rounding error."""
    w13d = f32(R.weight_dequant(w13, s13)) if s13 is not None else f32(w13)
    w2d = f32(R.weight_dequant(w2, s2)) if s2 is not None else f32(w2)
    h = np.abs(f32(R.silu_mul(f32(x) @ w13d.T)))
    # h is rounded to BF16 from slightly different FP32 sums: one BF16 unit of slack per element.
    return (h + EPS_BF16 * h + 1e-3 * np.abs(f32(x)).max()) @ np.abs(w2d).T


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_experts_contiguous(rng, fp8):
    E, D, I = 4, 256, 128
    w13, w2, s13, s2 = make_experts(rng, E, D, I, fp8)
    counts = np.array([3, 0, 1, 9])  # an expert with no tokens, one with a single token
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    x = rand_bf16(rng, int(counts.sum()), D)
    got = K.experts_contiguous(x, offsets, w13, w2, s13, s2)
    ref = R.experts_contiguous(x, offsets, w13, w2, s13, s2)
    bound = np.zeros_like(ref)
    for e in range(E):
        a, b = offsets[e], offsets[e + 1]
        if b > a:
            bound[a:b] = ffn_bound(x[a:b], w13[e], w2[e], None if s13 is None else s13[e], None if s2 is None else s2[e])
    assert_dot_close(got, ref, bound, 2 * EPS_BF16)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_experts_masked(rng, fp8):
    E, D, I, cap = 3, 256, 128, 8
    w13, w2, s13, s2 = make_experts(rng, E, D, I, fp8)
    x = rand_bf16(rng, E, cap, D)
    counts = np.array([8, 0, 5], np.int32)
    got = K.experts_masked(x, counts, w13, w2, s13, s2)
    ref = R.experts_masked(x, counts, w13, w2, s13, s2)
    assert (got[1] == 0).all() and (got[2, 5:] == 0).all()
    for e in range(E):
        c = counts[e]
        if c:
            bound = ffn_bound(x[e, :c], w13[e], w2[e], None if s13 is None else s13[e], None if s2 is None else s2[e])
            assert_dot_close(got[e, :c], ref[e, :c], bound, 2 * EPS_BF16)


def test_experts_reject_bad_layouts(rng):
    w13, w2, _, _ = make_experts(rng, 2, 128, 64, False)
    x = rand_bf16(rng, 4, 128)
    with pytest.raises(ValueError, match="offsets must have experts \\+ 1 = 3 entries"):
        K.experts_contiguous(x, np.array([0, 4], np.int64), w13, w2)
    with pytest.raises(ValueError, match="offsets must start at 0"):
        K.experts_contiguous(x, np.array([0, 5, 4], np.int64), w13, w2)
    with pytest.raises(ValueError, match="w2 must have shape"):
        K.experts_contiguous(x, np.array([0, 2, 4], np.int64), w13, w2[:, :, :32].copy())
    with pytest.raises(ValueError, match="counts must lie in \\[0, capacity = 2\\]"):
        K.experts_masked(x.reshape(2, 2, 128), np.array([3, 0], np.int32), w13, w2)
    with pytest.raises(ValueError, match="FP8 expert weights need w13_scale"):
        K.experts_contiguous(x, np.array([0, 2, 4], np.int64), w13.astype(np.float32).astype(FP8),
                             w2.astype(np.float32).astype(FP8))


# ---- the layer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("tokens", [1, 13])
def test_moe_layer(rng, fp8, tokens):
    E, D, I = 16, 256, 128
    w13, w2, s13, s2 = make_experts(rng, E, D, I, fp8)
    sw13, sw2, ss13, ss2 = make_experts(rng, 1, D, I, fp8)
    gate_w = rand_bf16(rng, E, D, scale=0.3)
    bias = (rng.standard_normal(E) * 0.05).astype(np.float32)
    x = rand_bf16(rng, tokens, D)
    kw = dict(n_group=4, topk_group=2, top_k=4, route_scale=2.5, gate_bias=bias, shared_w13=sw13[0],
              shared_w2=sw2[0], w13_scale=s13, w2_scale=s2,
              shared_w13_scale=None if ss13 is None else ss13[0], shared_w2_scale=None if ss2 is None else ss2[0])
    got = K.moe_layer(x, gate_w, w13, w2, **kw)
    ref = R.moe_layer(x, gate_w, w13, w2, **kw)
    weights, ids = R.moe_gate(x, gate_w, bias, n_group=4, topk_group=2, top_k=4, route_scale=2.5)
    bound = ffn_bound(x, sw13[0], sw2[0], kw["shared_w13_scale"], kw["shared_w2_scale"])
    for t in range(tokens):
        for k in range(4):
            e = ids[t, k]
            bound[t] += weights[t, k] * ffn_bound(x[t:t + 1], w13[e], w2[e], None if s13 is None else s13[e],
                                                  None if s2 is None else s2[e])[0]
    assert_dot_close(got, ref, bound, 2 * EPS_BF16)
