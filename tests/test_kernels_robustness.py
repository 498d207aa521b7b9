"""Regression tests of the holes fuzzing found in dsperf.kernels: int64 indices narrowed before
their range check, NaN turned finite, caches written through a temporary copy, uninitialised
empty reductions, lenient scalar types and unchecked size arithmetic."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import BF16, f32, rand_bf16, rand_fp8_weight
from test_kernels_mla_variants import D, DIMS, KVL, make_weights
from test_kernels_decode_layer import make_layer


# ---- int64 indices: range-checked before narrowing -------------------------------------------------
def test_embedding_id_past_int32_is_refused_not_wrapped():
    table = np.eye(8, dtype=np.float32).astype(BF16)
    with pytest.raises(ValueError, match=r"ids\[1\] = 4294967299 does not fit int32"):
        K.embedding(table, np.array([0, 2 ** 32 + 3]))


def test_paged_cache_write_block_id_past_int32_leaves_the_cache_alone():
    rng = np.random.default_rng(0)
    cache = K.PagedMlaCache(8, 4, 16, 4)
    with pytest.raises(ValueError, match=r"block_table\[0, 0\] = 4294967300"):
        K.paged_cache_write(cache, np.array([[2 ** 32 + 4, 1]]), np.array([0]), np.array([0]), rand_bf16(rng, 1, 16),
                            rand_bf16(rng, 1, 4))
    assert not f32(cache.latent).any() and not f32(cache.rope).any()


@pytest.mark.parametrize("name, value", [("block_table", 2 ** 32 + 1), ("seqlens", 2 ** 32 + 8)])
def test_mla_decode_int64_tables_past_int32(name, value):
    rng = np.random.default_rng(0)
    args = dict(q_nope=rand_bf16(rng, 1, 1, 2, 16), q_rope=rand_bf16(rng, 1, 1, 2, 4),
                latent_cache=rand_bf16(rng, 4, 8, 16), rope_cache=rand_bf16(rng, 4, 8, 4),
                block_table=np.array([[0, 1]], np.int64), seqlens=np.array([8], np.int64), softmax_scale=0.2)
    args[name] = args[name].copy()
    args[name].reshape(-1)[0] = value
    with pytest.raises(ValueError, match=rf"{name}\[0(, 0)?\] = {value} does not fit int32"):
        K.mla_decode(**args)


def test_experts_masked_count_past_int32():
    rng = np.random.default_rng(0)
    x = rand_bf16(rng, 2, 3, 16)
    w13, w2 = rand_bf16(rng, 2, 16, 16), rand_bf16(rng, 2, 16, 8)
    with pytest.raises(ValueError, match="counts"):
        K.experts_masked(x, np.array([2 ** 32 + 1, 0]), w13, w2)


def test_mla_forward_paged_token_counts_do_not_wrap():
    rng = np.random.default_rng(0)
    cache = K.PagedMlaCache(4, 8, KVL, DIMS["rope"])
    with pytest.raises(ValueError, match="seqlens"):
        K.mla_forward_paged("A_CC_ME", rand_bf16(rng, 1, D), make_weights(rng), cache, np.zeros((1, 2), np.int32),
                            np.array([2 ** 31 - 1], np.int32), np.array([1], np.int32), freqs=K.rope_frequencies(dim=16),
                            softmax_scale=0.2, **DIMS)


# ---- NaN and Inf propagate as in the reference -------------------------------------------------------
@pytest.mark.parametrize("num_splits", [1, 3])
def test_mla_decode_nan_in_the_bf16_cache_reaches_the_output(num_splits):
    rng = np.random.default_rng(1)
    q_nope, q_rope = rand_bf16(rng, 2, 1, 4, 32), rand_bf16(rng, 2, 1, 4, 8)
    lat, rope = rand_bf16(rng, 6, 8, 32), rand_bf16(rng, 6, 8, 8)
    lat[1, 2, 5] = np.nan  # token 10 of request 0
    table, seqlens = np.array([[0, 1, 2], [3, 4, 5]], np.int32), np.array([20, 17], np.int32)
    out, lse = K.mla_decode(q_nope, q_rope, lat, rope, table, seqlens, 0.2, num_splits=num_splits)
    ref_out, ref_lse = R.mla_decode(q_nope, q_rope, lat, rope, table, seqlens, 0.2)
    assert np.isnan(ref_out[0]).all() and np.isfinite(ref_out[1]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref_out))
    np.testing.assert_array_equal(np.isnan(lse), np.isnan(ref_lse))


@pytest.mark.parametrize("variant", K.MLA_VARIANTS)
def test_mla_forward_nan_queries_give_nan_not_zeros(variant):
    rng = np.random.default_rng(2)
    w = make_weights(rng)
    w["wq_b"] = w["wq_b"].copy()
    w["wq_b"][3, 7] = np.nan  # one query column of head 0 for every token
    freqs = K.rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)
    if variant == "AM_CC_ME":
        w = K.mla_absorb_weights(w, **DIMS)
    x = rand_bf16(rng, 3, D)
    cache = K.MlaCache(4, KVL, DIMS["rope"], decompressed=variant == "CD", heads=DIMS["heads"], nope=DIMS["nope"],
                       v=DIMS["v"])
    y = K.mla_forward(variant, x, w, cache, freqs=freqs, softmax_scale=0.2, **DIMS)
    ref = R.mla_forward(x, w, freqs=freqs, softmax_scale=0.2, **DIMS)
    assert np.isnan(ref).all()
    assert np.isnan(y).all()


@pytest.mark.parametrize("where", ["attn_norm", "freqs", "wkv_b", "w13"])
def test_decode_layer_nan_weights_or_frequencies_give_non_finite_output(where):
    rng = np.random.default_rng(11)
    layer = make_layer(rng)
    freqs = K.rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)
    if where == "freqs":
        freqs = freqs.copy()
        freqs[1] = np.nan
    elif where == "wkv_b":
        layer["mla"] = dict(layer["mla"], wkv_b=layer["mla"]["wkv_b"].copy())
        layer["mla"]["wkv_b"][:, 3] = np.nan
    elif where == "w13":  # every routed expert: whichever the gate picks
        layer["moe"] = dict(layer["moe"], w13=layer["moe"]["w13"].copy())
        layer["moe"]["w13"][:, 0, 0] = np.nan
    else:
        layer[where] = layer[where].copy()
        layer[where][0] = np.nan
    out = K.decode_layer("A_CC_ME", rand_bf16(rng, 2, D), layer, K.MlaCache(4, KVL, DIMS["rope"]), freqs=freqs,
                         softmax_scale=0.15, **DIMS)
    assert not np.isfinite(f32(out)).any()


def test_act_quant_nan_block_has_a_nan_scale_as_in_the_reference():
    x = np.ones((2, 256), np.float32)
    x[0, :128] = np.nan      # an all-NaN block
    x[1, 200] = np.nan       # one NaN in a block
    q, s = K.act_quant(x)
    rq, rs = R.act_quant(x)
    np.testing.assert_array_equal(np.isnan(s), np.isnan(rs))
    assert np.isnan(s[0, 0]) and np.isnan(s[1, 1]) and np.isfinite(s[0, 1]) and np.isfinite(s[1, 0])
    # Dequantised, every value of a block that held a NaN is NaN: no NaN token crosses FP8 as zeros.
    deq = f32(q) * np.repeat(s, 128, axis=1)
    assert np.isnan(deq[0, :128]).all() and np.isnan(deq[1, 128:]).all()
    np.testing.assert_array_equal(deq[0, 128:], 1.0)


def test_act_quant_inf_matches_the_reference():
    x = np.ones((1, 128), np.float32)
    x[0, 3] = np.inf
    q, s = K.act_quant(x)
    rq, rs = R.act_quant(x)
    assert s[0, 0] == rs[0, 0] == np.inf
    np.testing.assert_array_equal(np.isnan(f32(q)), np.isnan(f32(rq)))


def test_moe_gate_never_picks_a_nan_expert_or_group():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
    w[5] = np.nan  # expert 5 (group 1 of 4) scores NaN for every token
    bias = (0.1 * rng.standard_normal(16)).astype(np.float32)
    kw = dict(n_group=4, topk_group=2, top_k=3, route_scale=1.0)
    for b in (None, bias):
        weights, ids = K.moe_gate(x, w, b, **kw)
        rw, rids = R.moe_gate(x, w, b, **kw)
        assert not (ids // 4 == 1).any()
        np.testing.assert_array_equal(ids, rids)
        np.testing.assert_allclose(weights, rw, rtol=1e-5)


# ---- caches written in place -------------------------------------------------------------------------
@pytest.mark.parametrize("attr, spoil, exc, match", [
    ("latent", lambda a: np.repeat(a, 2, axis=1)[:, ::2], ValueError, "cache.latent must be C-contiguous"),
    ("k_pe", lambda a: np.repeat(a, 2, axis=1)[:, ::2], ValueError, "cache.k_pe must be C-contiguous"),
    ("latent", lambda a: a.astype(np.float32), TypeError, "cache.latent must have dtype bfloat16"),
    ("k_pe", lambda a: a.view(np.uint16), TypeError, "cache.k_pe must have dtype bfloat16"),
    ("latent", lambda a: (a.setflags(write=False), a)[1], ValueError, "cache.latent must be writeable"),
    ("prefix", lambda p: 2 ** 32, ValueError, "cache.prefix must be <= 4"),
    ("prefix", lambda p: True, TypeError, "cache.prefix must be an integer"),
])
@pytest.mark.parametrize("fn", [K.decode_layer, K.decode_layer_by_ops])
def test_decode_layer_refuses_a_cache_it_would_write_through_a_copy(fn, attr, spoil, exc, match):
    rng = np.random.default_rng(0)
    cache = K.MlaCache(4, KVL, DIMS["rope"])
    setattr(cache, attr, spoil(getattr(cache, attr)))
    with pytest.raises(exc, match=match):
        fn("A_CC_ME", rand_bf16(rng, 1, D), make_layer(rng), cache, freqs=K.rope_frequencies(dim=DIMS["rope"]),
           softmax_scale=0.1, **DIMS)
    if attr != "prefix":
        assert cache.prefix == 0


def test_decode_layer_binding_does_not_convert_the_cache():
    """The binding itself takes the cache arrays without conversion: a float32 latent reaching it
    is refused rather than copied, written and dropped."""
    rng = np.random.default_rng(0)
    args = K._decode_layer_args("A_CC_ME", rand_bf16(rng, 1, D), make_layer(rng), K.MlaCache(4, KVL, DIMS["rope"]),
                                DIMS["heads"], K.rope_frequencies(dim=DIMS["rope"]), 0.1, DIMS["nope"], DIMS["rope"],
                                DIMS["v"], 1e-6)
    K._K.decode_layer(**args)  # the arguments as the front door builds them are accepted
    args["cache"] = dict(args["cache"], latent=np.zeros((4, KVL), np.float32))
    with pytest.raises(ValueError, match="cache latent must be a C-contiguous array of the expected dtype"):
        K._K.decode_layer(**args)


# ---- empty reductions --------------------------------------------------------------------------------
@pytest.mark.parametrize("M", [3, 64])   # the BF16-dot and the widened-FMA paths
def test_linear_with_k_zero_is_zeros(M):
    y = K.linear(np.zeros((M, 0), BF16), np.zeros((5, 0), BF16))
    np.testing.assert_array_equal(y, np.zeros((M, 5), np.float32))
    wq, ws = np.zeros((5, 0), K.FP8), np.zeros((1, 0), np.float32)
    np.testing.assert_array_equal(K.linear(np.zeros((M, 0), BF16), wq, ws), np.zeros((M, 5), np.float32))


@pytest.mark.parametrize("fn, args, shape", [
    (K.act_quant, (np.zeros((3, 0), np.float32),), [(3, 0), (3, 0)]),
    (K.rmsnorm, (np.zeros((3, 0), np.float32), np.zeros(0, np.float32)), [(3, 0)]),
    (K.silu_mul, (np.zeros((3, 0), np.float32),), [(3, 0)]),
    (K.weight_dequant, (np.zeros((4, 0), K.FP8), np.zeros((1, 0), np.float32)), [(4, 0)]),
    (K.embedding, (np.zeros((5, 0), BF16), np.array([1, 4])), [(2, 0)]),
])
def test_empty_rows_give_empty_outputs(fn, args, shape):
    out = fn(*args)
    out = out if isinstance(out, tuple) else (out,)
    assert [o.shape for o in out] == shape


# ---- strict scalar types -----------------------------------------------------------------------------
def _decode_inputs():
    rng = np.random.default_rng(0)
    return dict(q_nope=rand_bf16(rng, 1, 1, 2, 16), q_rope=rand_bf16(rng, 1, 1, 2, 4),
                latent_cache=rand_bf16(rng, 2, 8, 16), rope_cache=rand_bf16(rng, 2, 8, 4),
                block_table=np.array([[0, 1]]), seqlens=np.array([9]), softmax_scale=0.2)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(softmax_scale=True), TypeError, "softmax_scale must be a number"),
    (dict(softmax_scale="0.2"), TypeError, "softmax_scale must be a number"),
    (dict(softmax_scale=float("nan")), ValueError, "softmax_scale must be a finite FP32 number"),
    (dict(softmax_scale=1e300), ValueError, "softmax_scale must be a finite FP32 number"),
    (dict(softmax_scale=1e-50), ValueError, "softmax_scale must be positive"),
    (dict(num_splits=2.0), TypeError, "num_splits must be an integer"),
    (dict(num_splits=True), TypeError, "num_splits must be an integer"),
    (dict(num_splits=2 ** 63), ValueError, "num_splits must be <= "),
    (dict(num_splits=2 ** 40), ValueError, "num_splits: the split-KV partial outputs would need"),
])
def test_mla_decode_scalar_types(kw, exc, match):
    with pytest.raises(exc, match=match):
        K.mla_decode(**dict(_decode_inputs(), **kw))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(decompressed="no", heads=2), TypeError, "decompressed must be True or False"),
    (dict(decompressed=1, heads=2), TypeError, "decompressed must be True or False"),
    (dict(capacity=132.7), TypeError, "capacity must be an integer"),
    (dict(capacity=2 ** 50), ValueError, "capacity: the cache .* would need"),
])
def test_mla_cache_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        K.MlaCache(**dict(dict(capacity=4, kv_lora=16, rope=4), **kw))


def test_paged_cache_decompressed_is_a_bool():
    with pytest.raises(TypeError, match="decompressed must be True or False"):
        K.PagedMlaCache(2, decompressed="false", heads=2)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(eps=True), TypeError, "eps must be a number"),
    (dict(eps=float("inf")), ValueError, "eps must be a finite FP32 number"),
    (dict(eps=-1.0), ValueError, "eps must be >= 0"),
])
def test_rmsnorm_eps(kw, exc, match):
    with pytest.raises(exc, match=match):
        K.rmsnorm(np.ones((2, 4), np.float32), np.ones(4, np.float32), **kw)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(base="10000"), TypeError, "base must be a number"),
    (dict(factor=True), TypeError, "factor must be a number"),
    (dict(dim=64.0), TypeError, "dim must be an integer"),
    (dict(dim=2 ** 64), ValueError, "dim must be <= "),
    (dict(dim=2 ** 62), ValueError, "dim: the frequencies would need"),
])
def test_rope_frequencies_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        K.rope_frequencies(**kw)


def test_gate_route_scale_is_not_a_bool():
    x = np.ones((1, 8), np.float32)
    with pytest.raises(TypeError, match="route_scale must be a number"):
        K.moe_gate(x, np.ones((4, 8), np.float32), n_group=1, topk_group=1, top_k=1, route_scale=True)


# ---- size arithmetic ---------------------------------------------------------------------------------
def test_mla_heads_whose_products_overflow_int64():
    rng = np.random.default_rng(0)
    w = make_weights(rng)
    with pytest.raises(ValueError, match=r"heads x \(nope \+ rope\) overflows"):
        K.mla_absorb_weights(w, heads=2 ** 62, nope=DIMS["nope"], rope=DIMS["rope"], v=DIMS["v"])


def test_outputs_larger_than_memory_are_refused():
    x = np.zeros((2 ** 21, 0), BF16)   # zero-size inputs, a 16 TiB output
    with pytest.raises(ValueError, match=r"linear: y \[rows of x, rows of w\] would need"):
        K.linear(x, x)
    x = np.zeros((2 ** 40, 0), BF16)
    with pytest.raises(ValueError, match=r"linear: y \[rows of x, rows of w\] overflows"):
        K.linear(x, x)
    with pytest.raises(ValueError, match=r"moe_route offsets \[n_experts \+ 1\] would need"):
        K.moe_route(np.zeros((1, 1), np.int32), 2 ** 50)
    with pytest.raises(ValueError, match="n_experts must be <= "):
        K.moe_route(np.zeros((1, 1), np.int32), 2 ** 63)


def test_fp8_scales_shape_names_w():
    w, s = rand_fp8_weight(np.random.default_rng(0), 130, 20)
    with pytest.raises(ValueError, match=r"scale \[ceil\(rows of w / 128\)"):
        K.weight_dequant(w, s[:1])
