"""MLA decode over the paged latent cache against dsperf.reference."""
import numpy as np
import pytest

from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import EPS_BF16, f32, rand_bf16, shuffled_block_table

BS = 64


def make_case(rng, seqlens, q_len=1, heads=16, L=512, rope=64, spare_blocks=3):
    """A paged cache whose blocks are handed out in a shuffled order, as an allocator would."""
    table, total = shuffled_block_table(rng, seqlens, BS, spare_blocks)
    latent = rand_bf16(rng, total, BS, L)
    rope_c = rand_bf16(rng, total, BS, rope)
    qn = rand_bf16(rng, len(seqlens), q_len, heads, L, scale=0.05)
    qr = rand_bf16(rng, len(seqlens), q_len, heads, rope, scale=0.05)
    return qn, qr, latent, rope_c, table, np.array(seqlens, np.int32)


@pytest.mark.parametrize("seqlens, q_len, splits", [
    ([1], 1, 1),                        # kv_len 1
    ([63, 64, 65], 1, 1),               # around the block size
    ([1000, 5, 130], 1, 3),             # one long context among short ones, split-KV
    ([2, 200], 2, 4),                   # two query tokens (causal), more splits than some ranges
    ([3], 1, 8),                        # splits with no keys
])
def test_mla_decode_matches_reference(seqlens, q_len, splits):
    rng = np.random.default_rng(len(seqlens) * 100 + q_len * 10 + splits)
    qn, qr, lat, rop, table, lens = make_case(rng, seqlens, q_len)
    scale = (128 + 64) ** -0.5
    out, lse = K.mla_decode(qn, qr, lat, rop, table, lens, scale, num_splits=splits)
    rout, rlse = R.mla_decode(qn, qr, lat, rop, table, lens, scale)
    # Probabilities are rounded to BF16 before the value GEMM: each output moves by at most
    # about one BF16 unit of the largest value.
    np.testing.assert_allclose(out, rout, atol=2 * EPS_BF16 * np.abs(f32(lat)).max())
    np.testing.assert_allclose(lse, rlse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("L, rope", [(40, 8), (41, 8), (256, 32)])
def test_mla_decode_other_widths(L, rope):
    # The keys go into the score GEMM's pair layout 16 x 16 words at a time: widths whose pairs are
    # not a multiple of 16, and an odd width (a zero half-pair), take the other paths.
    rng = np.random.default_rng(L + rope)
    qn, qr, lat, rop, table, lens = make_case(rng, [37, 300], 1, heads=8, L=L, rope=rope)
    scale = (L + rope) ** -0.5
    out, lse = K.mla_decode(qn, qr, lat, rop, table, lens, scale, num_splits=2)
    rout, rlse = R.mla_decode(qn, qr, lat, rop, table, lens, scale)
    np.testing.assert_allclose(out, rout, atol=2 * EPS_BF16 * np.abs(f32(lat)).max())
    np.testing.assert_allclose(lse, rlse, rtol=1e-5, atol=1e-5)


def test_split_count_does_not_change_the_answer():
    rng = np.random.default_rng(5)
    qn, qr, lat, rop, table, lens = make_case(rng, [700, 90])
    a, la = K.mla_decode(qn, qr, lat, rop, table, lens, 0.1, num_splits=1)
    b, lb = K.mla_decode(qn, qr, lat, rop, table, lens, 0.1, num_splits=5)
    np.testing.assert_allclose(a, b, atol=2 * EPS_BF16 * np.abs(f32(lat)).max())
    np.testing.assert_allclose(la, lb, rtol=1e-5)


@pytest.mark.parametrize("edit, exc, match", [
    (lambda c: c.update(table=np.where(c["table"] == c["table"][0, 0], 99, c["table"]).astype(np.int32)),
     ValueError, "block_table\\[0, 0\\] = 99 is outside the cache's"),
    (lambda c: c.update(lens=np.array([200], np.int32)), ValueError, "exceeds the block table's 64 tokens"),
    (lambda c: c.update(lens=np.array([0], np.int32)), ValueError, "shorter than the 1 query tokens"),
    (lambda c: c.update(qn=f32(c["qn"])), TypeError, "q_nope must have dtype bfloat16"),
    (lambda c: c.update(qr=c["qr"][:, :, :, :32].copy()), ValueError, "q_nope / q_rope widths"),
    (lambda c: c.update(lat=c["lat"][:, :, :256].copy()), ValueError, "widths must match"),
    (lambda c: c.update(scale=0.0), ValueError, "softmax_scale must be positive"),
])
def test_mla_decode_rejects_bad_input(edit, exc, match):
    rng = np.random.default_rng(0)
    qn, qr, lat, rop, table, lens = make_case(rng, [40], spare_blocks=0)
    c = dict(qn=qn, qr=qr, lat=lat, rop=rop, table=table, lens=lens, scale=0.1)
    edit(c)
    with pytest.raises(exc, match=match):
        K.mla_decode(c["qn"], c["qr"], c["lat"], c["rop"], c["table"], c["lens"], c["scale"])


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_paged_cache_write_then_decode(dtype):
    rng = np.random.default_rng(21)
    seqlens = [70, 3]
    table = np.array([[4, 1], [2, 0]], np.int32)
    cache = K.PagedMlaCache(5, BS, 512, 64, dtype=dtype)
    # Tokens arrive interleaved across the two requests, as a batch scheduler sends them.
    requests = np.array([0] * seqlens[0] + [1] * seqlens[1], np.int32)
    positions = np.concatenate([np.arange(n) for n in seqlens]).astype(np.int32)
    order = rng.permutation(len(requests))
    latent, k_pe = rand_bf16(rng, len(requests), 512), rand_bf16(rng, len(requests), 64)
    K.paged_cache_write(cache, table, requests[order], positions[order], latent[order], k_pe[order])
    # Each token sits where its block table says.
    for i in (0, 69, 70, 72):
        blk, row = table[requests[i], positions[i] // BS], positions[i] % BS
        np.testing.assert_array_equal(f32(cache.rope[blk, row]), f32(k_pe[i]))
        if dtype == "bf16":
            np.testing.assert_array_equal(f32(cache.latent[blk, row]), f32(latent[i]))
        else:
            q, s = R.act_quant(latent[i:i + 1])
            np.testing.assert_array_equal(cache.latent[blk, row].view(np.uint8), q[0].view(np.uint8))
            np.testing.assert_array_equal(cache.latent_scale[blk, row], s[0])
    qn = rand_bf16(rng, 2, 1, 8, 512, scale=0.05)
    qr = rand_bf16(rng, 2, 1, 8, 64, scale=0.05)
    lens = np.array(seqlens, np.int32)
    out, lse = K.mla_decode(qn, qr, cache.latent, cache.rope, table, lens, 0.1, num_splits=2,
                            latent_scale=cache.latent_scale)
    rout, rlse = R.mla_decode(qn, qr, cache.latent, cache.rope, table, lens, 0.1, latent_scale=cache.latent_scale)
    np.testing.assert_allclose(out, rout, atol=2 * EPS_BF16 * np.abs(f32(latent)).max())
    np.testing.assert_allclose(lse, rlse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("requests, positions, match", [
    ([2], [0], r"requests\[0\] = 2 is outside the block table's 2 rows"),
    ([0], [128], r"positions\[0\] = 128 is outside the request's 128 slots"),
    ([1], [70], r"block_table\[1, 1\] = 9 \(token 0\) is outside the cache's 5 blocks"),
])
def test_paged_cache_write_rejects_bad_addresses(requests, positions, match):
    cache = K.PagedMlaCache(5, BS, 512, 64)
    table = np.array([[0, 1], [2, 9]], np.int32)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=match):
        K.paged_cache_write(cache, table, np.array(requests, np.int32), np.array(positions, np.int32),
                            rand_bf16(rng, 1, 512), rand_bf16(rng, 1, 64))


def test_fp8_latent_needs_its_scales():
    cache = K.PagedMlaCache(2, BS, 512, 64, dtype="fp8")
    rng = np.random.default_rng(0)
    qn, qr = rand_bf16(rng, 1, 1, 2, 512), rand_bf16(rng, 1, 1, 2, 64)
    with pytest.raises(ValueError, match="an FP8 latent_cache needs latent_scale"):
        K.mla_decode(qn, qr, cache.latent, cache.rope, np.zeros((1, 1), np.int32), np.array([1], np.int32), 0.1)
