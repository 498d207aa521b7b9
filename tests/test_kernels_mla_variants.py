"""The five MLA execution variants agree with each other and with the reference, in prefill
(causal, from an empty cache) and in decode (one token after the prefix)."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import EPS_BF16, f32, rand_bf16

DIMS = dict(heads=4, nope=32, rope=16, v=32)
D, QL, KVL = 256, 96, 64


def make_weights(rng):
    H, N, Rp, V = DIMS["heads"], DIMS["nope"], DIMS["rope"], DIMS["v"]
    return {
        "wq_a": rand_bf16(rng, QL, D, scale=D ** -0.5), "q_norm": (1 + 0.1 * rng.standard_normal(QL)).astype(np.float32),
        "wq_b": rand_bf16(rng, H * (N + Rp), QL, scale=QL ** -0.5),
        "wkv_a": rand_bf16(rng, KVL + Rp, D, scale=D ** -0.5),
        "kv_norm": (1 + 0.1 * rng.standard_normal(KVL)).astype(np.float32),
        "wkv_b": rand_bf16(rng, H * (N + V), KVL, scale=KVL ** -0.5), "wo": rand_bf16(rng, D, H * V, scale=(H * V) ** -0.5),
    }


def rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("variant", K.MLA_VARIANTS)
def test_variant_prefill_then_decode(variant):
    rng = np.random.default_rng(3)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=256, factor=4)
    scale = (DIMS["nope"] + DIMS["rope"]) ** -0.5
    P, T = 70, 1
    x = rand_bf16(rng, P + T, D)
    ref = R.mla_forward(x, w, freqs=freqs, softmax_scale=scale, **DIMS)
    cache = K.MlaCache(P + T, KVL, DIMS["rope"], decompressed=variant == "CD", heads=DIMS["heads"],
                       nope=DIMS["nope"], v=DIMS["v"])
    y_prefill = K.mla_forward(variant, x[:P], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
    y_decode = K.mla_forward(variant, x[P:], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
    assert cache.prefix == P + T
    # The variants round different intermediates to BF16 (decompressed K/V, absorbed queries,
    # materialised products): up to a few BF16 units of relative error (seen: 0.0014-0.0045).
    tol = 3 * EPS_BF16
    assert rel_err(y_prefill, ref[:P]) < tol
    assert rel_err(y_decode, ref[P:]) < tol


def test_cc_decompresses_a_long_cache_in_chunks_into_reused_buffers():
    """CC decompresses the whole cache on every call, a chunk of rows at a time (600 rows: three
    chunks of 200), into per-thread buffers kept between calls: two decode steps after a long
    prefill, each checked against the reference, and a shorter cache after them (the kept buffers
    are longer than it needs)."""
    rng = np.random.default_rng(5)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=1024, factor=4)
    scale = (DIMS["nope"] + DIMS["rope"]) ** -0.5
    P = 600
    x = rand_bf16(rng, P + 2, D)
    ref = R.mla_forward(x, w, freqs=freqs, softmax_scale=scale, **DIMS)
    cache = K.MlaCache(P + 2, KVL, DIMS["rope"], heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
    K.mla_forward("CC", x[:P], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
    for t in (P, P + 1):
        y = K.mla_forward("CC", x[t:t + 1], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
        assert rel_err(y, ref[t:t + 1]) < 3 * EPS_BF16
    short = K.MlaCache(40, KVL, DIMS["rope"], heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
    y = K.mla_forward("CC", x[:40], w, short, freqs=freqs, softmax_scale=scale, **DIMS)
    assert rel_err(y, R.mla_forward(x[:40], w, freqs=freqs, softmax_scale=scale, **DIMS)) < 3 * EPS_BF16


ABSORBED = [v for v in K.MLA_VARIANTS if v not in ("CD", "CC")]


@pytest.mark.parametrize("variant", ABSORBED)
def test_absorbed_prefill_over_many_key_chunks_and_row_blocks(variant):
    """The absorbed variants' multi-query core splits q_len x heads rows into blocks of 256 and the
    keys into chunks of 256, and a block stops at the last key its last row sees: 300 tokens after
    300 (1,200 rows: four whole blocks and a part; 600 keys: two whole chunks and a part), against
    the reference."""
    rng = np.random.default_rng(6)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=1024, factor=4)
    scale = (DIMS["nope"] + DIMS["rope"]) ** -0.5
    x = rand_bf16(rng, 600, D)
    ref = R.mla_forward(x, w, freqs=freqs, softmax_scale=scale, **DIMS)
    cache = K.MlaCache(600, KVL, DIMS["rope"], heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
    y0 = K.mla_forward(variant, x[:300], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
    y1 = K.mla_forward(variant, x[300:], w, cache, freqs=freqs, softmax_scale=scale, **DIMS)
    assert rel_err(y0, ref[:300]) < 3 * EPS_BF16
    assert rel_err(y1, ref[300:]) < 3 * EPS_BF16


def test_absorbed_variants_past_one_span_of_packed_keys_agree_with_cc():
    """Past 8,192 keys the multi-query core packs the keys a span at a time: 40 tokens after 8,300
    cached ones (random latents written into the cache) agree with CC's multi-head core."""
    rng = np.random.default_rng(7)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=16384, factor=4)
    P, T = 8300, 40
    x = rand_bf16(rng, T, D)
    latent, k_pe = rand_bf16(rng, P, KVL), rand_bf16(rng, P, DIMS["rope"])
    outs = {}
    for variant in ["CC"] + ABSORBED:
        cache = K.MlaCache(P + T, KVL, DIMS["rope"], heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
        cache.latent[:P], cache.k_pe[:P], cache.prefix = latent, k_pe, P
        outs[variant] = K.mla_forward(variant, x, w, cache, freqs=freqs, softmax_scale=0.15, **DIMS)
    for variant in ABSORBED:
        assert rel_err(outs[variant], outs["CC"]) < 3 * EPS_BF16


def test_variants_agree_with_each_other():
    rng = np.random.default_rng(4)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)
    x = rand_bf16(rng, 20, D)
    outs = {}
    for variant in K.MLA_VARIANTS:
        cache = K.MlaCache(20, KVL, DIMS["rope"], decompressed=True, heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
        outs[variant] = K.mla_forward(variant, x, w, cache, freqs=freqs, softmax_scale=0.15, **DIMS)
    # The two absorbed forms with and without concatenation compute the same sums.
    assert rel_err(outs["A_CC"], outs["A_CC_ME"]) < 2 * EPS_BF16
    assert rel_err(outs["CD"], outs["CC"]) < 1e-6  # the same numbers, cached or recomputed
    for variant in K.MLA_VARIANTS:
        assert rel_err(outs[variant], outs["CC"]) < 3 * EPS_BF16


def test_mla_forward_rejects_bad_input():
    rng = np.random.default_rng(0)
    w = make_weights(rng)
    freqs = K.rope_frequencies(dim=16)
    cache = K.MlaCache(4, KVL, 16)
    x = rand_bf16(rng, 2, D)
    with pytest.raises(ValueError, match="variant must be one of"):
        K.mla_forward("XYZ", x, w, cache, freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(ValueError, match="CD variant needs MlaCache"):
        K.mla_forward("CD", x, w, cache, freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(ValueError, match="AM_CC_ME needs"):
        K.mla_forward("AM_CC_ME", x, w, cache, freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(ValueError, match="weights is missing 'wo'"):
        K.mla_forward("CC", x, {k: a for k, a in w.items() if k != "wo"}, cache, freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(ValueError, match="cache has room for 4 more tokens, not 5"):
        K.mla_forward("CC", rand_bf16(rng, 5, D), w, cache, freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(ValueError, match=r"wq_b \[heads x \(nope \+ rope\), q_lora\]: dimension 0"):
        K.mla_forward("CC", x, w, cache, freqs=freqs, softmax_scale=0.1, heads=3, nope=32, rope=16, v=32)


def test_batched_paged_decode_pipeline_matches_reference():
    """Two requests of different lengths: the prolog writes every token into one paged cache; the
    last token of each is decoded together by mla_decode (absorbed), then W_UV and wo in numpy."""
    rng = np.random.default_rng(8)
    w = make_weights(rng)
    H, N, Rp, V = DIMS["heads"], DIMS["nope"], DIMS["rope"], DIMS["v"]
    freqs = K.rope_frequencies(dim=Rp, max_seq_len=4096)
    scale = (N + Rp) ** -0.5
    lens = [70, 9]
    xs = [rand_bf16(rng, n, D) for n in lens]
    cache = K.PagedMlaCache(6, 64, KVL, Rp)
    table = np.array([[3, 0], [5, 1]], np.int32)
    last = []
    for r, x in enumerate(xs):
        out = K.mla_prolog(x, w, np.arange(len(x), dtype=np.int32), freqs=freqs, cache=cache, block_table=table,
                           requests=np.full(len(x), r, np.int32), **DIMS)
        last.append(out)
    wkv_b = f32(w["wkv_b"]).reshape(H, N + V, KVL)
    q_abs = np.stack([np.einsum("hd,hdc->hc", f32(o["q_nope"][-1]), wkv_b[:, :N]) for o in last])
    q_abs = q_abs.astype(np.float32).astype(K.BF16)[:, None]          # [B, 1, H, kv_lora]
    q_pe = np.stack([o["q_pe"][-1] for o in last])[:, None]           # [B, 1, H, rope]
    o_lat, _ = K.mla_decode(q_abs, q_pe, cache.latent, cache.rope, table, np.array(lens, np.int32), scale, num_splits=2)
    o_lat = f32(o_lat[:, 0].astype(K.BF16))                            # [B, H, kv_lora]
    o = np.einsum("bhc,hdc->bhd", o_lat, wkv_b[:, N:]).astype(np.float32).astype(K.BF16)
    y = f32(o).reshape(len(lens), H * V) @ f32(w["wo"]).T
    for r, x in enumerate(xs):
        ref = R.mla_forward(x, w, freqs=freqs, softmax_scale=scale, **DIMS)[-1]
        assert rel_err(y[r], ref) < 3 * EPS_BF16


def test_mla_prolog_outputs_match_reference_pieces():
    rng = np.random.default_rng(9)
    w = make_weights(rng)
    freqs = K.rope_frequencies(dim=DIMS["rope"])
    x = rand_bf16(rng, 5, D)
    pos = np.array([0, 1, 7, 100, 3], np.int32)
    out = K.mla_prolog(x, w, pos, freqs=freqs, **DIMS)
    kv = R.bf16(f32(x) @ f32(w["wkv_a"]).T)
    np.testing.assert_allclose(f32(out["latent"]), f32(R.rmsnorm(kv[:, :KVL].astype(K.BF16), w["kv_norm"])),
                               rtol=2 * EPS_BF16, atol=1e-6)
    np.testing.assert_allclose(f32(out["k_pe"]), f32(R.apply_rope(kv[:, KVL:].astype(K.BF16), pos, freqs)),
                               rtol=4 * EPS_BF16, atol=4 * EPS_BF16)
    assert out["q_nope"].shape == (5, DIMS["heads"], DIMS["nope"]) and out["q_pe"].shape == (5, DIMS["heads"], DIMS["rope"])


@pytest.mark.parametrize("variant", K.MLA_VARIANTS)
def test_variants_over_the_paged_cache_match_the_contiguous_cache(variant):
    """Two requests of different lengths (neither a multiple of the block size) in one paged cache,
    blocks interleaved: a prefill, then a decode step each; every output equals the contiguous
    cache's, bit for bit (the same kernels on the same rows)."""
    rng = np.random.default_rng(11)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=256, factor=4)
    scale = (DIMS["nope"] + DIMS["rope"]) ** -0.5
    lens = [37, 70]
    xs = [rand_bf16(rng, n + 1, D) for n in lens]
    cd = variant == "CD"
    # Request 0 (38 tokens) in blocks 0, 2, 4; request 1 (71 tokens) in 1, 3, 5, 7, 8; the rest unused.
    table = np.array([[0, 2, 4, 6, 0, 0], [1, 3, 5, 7, 8, 9]], np.int32)
    paged = K.PagedMlaCache(10, 16, KVL, DIMS["rope"], decompressed=cd, heads=DIMS["heads"], nope=DIMS["nope"],
                            v=DIMS["v"])
    kw = dict(heads=DIMS["heads"], nope=DIMS["nope"], rope=DIMS["rope"], v=DIMS["v"], freqs=freqs,
              softmax_scale=scale)
    # Prefill both requests in one call, then one decode token each.
    y_pre = K.mla_forward_paged(variant, np.concatenate([x[:n] for x, n in zip(xs, lens)]), w, paged, table,
                                np.zeros(2, np.int32), np.array(lens, np.int32), **kw)
    y_dec = K.mla_forward_paged(variant, np.concatenate([x[n:] for x, n in zip(xs, lens)]), w, paged, table,
                                np.array(lens, np.int32), np.ones(2, np.int32), **kw)
    row = 0
    for b, (x, n) in enumerate(zip(xs, lens)):
        seq = K.MlaCache(n + 1, KVL, DIMS["rope"], decompressed=cd, heads=DIMS["heads"], nope=DIMS["nope"], v=DIMS["v"])
        np.testing.assert_array_equal(y_pre[row:row + n], K.mla_forward(variant, x[:n], w, seq, **kw))
        np.testing.assert_array_equal(y_dec[b:b + 1], K.mla_forward(variant, x[n:], w, seq, **kw))
        row += n


def test_paged_variants_with_an_fp8_latent_stay_close_and_bad_tables_are_named():
    rng = np.random.default_rng(12)
    w = K.mla_absorb_weights(make_weights(rng), **DIMS)
    freqs = K.rope_frequencies(dim=DIMS["rope"], original_seq_len=64, max_seq_len=256, factor=4)
    kw = dict(heads=DIMS["heads"], nope=DIMS["nope"], rope=DIMS["rope"], v=DIMS["v"], freqs=freqs,
              softmax_scale=0.15)
    x = rand_bf16(rng, 41, D)
    table = np.array([[3, 1, 0]], np.int32)
    outs = {}
    for dtype in ("bf16", "fp8"):
        paged = K.PagedMlaCache(4, 16, KVL, DIMS["rope"], dtype=dtype)
        K.mla_forward_paged("A_CC_ME", x[:40], w, paged, table, np.array([0], np.int32), np.array([40], np.int32), **kw)
        outs[dtype] = K.mla_forward_paged("A_CC_ME", x[40:], w, paged, table, np.array([40], np.int32),
                                          np.array([1], np.int32), **kw)
    # The decode step reads 40 cached latents rounded to FP8 (3 significand bits): a few per cent.
    assert rel_err(outs["fp8"], outs["bf16"]) < 2 ** -4
    paged = K.PagedMlaCache(2, 16, KVL, DIMS["rope"])
    with pytest.raises(ValueError, match="block_table points outside"):
        K.mla_forward_paged("CC", x[:20], w, paged, np.array([[0, 5]], np.int32), np.array([0], np.int32),
                            np.array([20], np.int32), **kw)
    with pytest.raises(ValueError, match="blocks per request"):
        K.mla_forward_paged("CC", x[:40], w, paged, np.array([[0, 1]], np.int32), np.array([0], np.int32),
                            np.array([40], np.int32), **kw)
    with pytest.raises(ValueError, match="CD variant needs"):
        K.mla_forward_paged("CD", x[:4], w, paged, np.array([[0, 1]], np.int32), np.array([0], np.int32),
                            np.array([4], np.int32), **kw)
    with pytest.raises(ValueError, match="sum\\(new_tokens\\)"):
        K.mla_forward_paged("CC", x[:4], w, paged, np.array([[0, 1]], np.int32), np.array([0], np.int32),
                            np.array([5], np.int32), **kw)
