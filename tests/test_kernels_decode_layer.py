"""The one-call decode layer equals the same layer composed from the individual kernels."""
import numpy as np
import pytest

from dsperf import kernels as K
from kernel_helpers import f32, rand_bf16
from test_kernels_mla_variants import D, DIMS, KVL, make_weights


def make_layer(rng, E=8, I=64):
    moe = {"gate_weight": rand_bf16(rng, E, D, scale=0.3), "gate_bias": (0.05 * rng.standard_normal(E)).astype(np.float32),
           "w13": rand_bf16(rng, E, 2 * I, D, scale=0.05), "w2": rand_bf16(rng, E, D, I, scale=0.05),
           "shared_w13": rand_bf16(rng, 2 * I, D, scale=0.05), "shared_w2": rand_bf16(rng, D, I, scale=0.05),
           "n_group": 4, "topk_group": 2, "top_k": 2, "route_scale": 2.5}
    return {"attn_norm": np.ones(D, np.float32), "ffn_norm": np.ones(D, np.float32),
            "mla": K.mla_absorb_weights(make_weights(rng), **DIMS), "moe": moe}


@pytest.mark.parametrize("variant", ["A_CC_ME", "AM_CC_ME", "CD"])
def test_one_call_equals_op_by_op(variant):
    rng = np.random.default_rng(11)
    layer = make_layer(rng)
    freqs = K.rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)
    prefix = rand_bf16(rng, 30, D)
    step = rand_bf16(rng, 1, D)
    outs = []
    for fn in (K.decode_layer, K.decode_layer_by_ops):
        cache = K.MlaCache(31, KVL, DIMS["rope"], decompressed=True, heads=DIMS["heads"], nope=DIMS["nope"],
                           v=DIMS["v"])
        fn(variant, prefix, layer, cache, freqs=freqs, softmax_scale=0.15, **DIMS)   # prefill the prefix
        outs.append(fn(variant, step, layer, cache, freqs=freqs, softmax_scale=0.15, **DIMS))
        assert cache.prefix == 31
    # The same kernels in the same order: the only difference is where the residual sums round.
    np.testing.assert_allclose(f32(outs[0]), f32(outs[1]), rtol=2 ** -7, atol=1e-6)


def test_decode_layer_rejects_missing_pieces():
    rng = np.random.default_rng(0)
    layer = make_layer(rng)
    cache = K.MlaCache(4, KVL, DIMS["rope"])
    x = rand_bf16(rng, 1, D)
    freqs = K.rope_frequencies(dim=DIMS["rope"])
    with pytest.raises(ValueError, match="layer\\['moe'\\] is missing 'top_k'"):
        K.decode_layer("A_CC_ME", x, dict(layer, moe={k: v for k, v in layer["moe"].items() if k != "top_k"}), cache,
                       freqs=freqs, softmax_scale=0.1, **DIMS)
    with pytest.raises(TypeError, match="layer\\['attn_norm'\\] must be a numpy array"):
        K.decode_layer("A_CC_ME", x, dict(layer, attn_norm=None), cache, freqs=freqs, softmax_scale=0.1, **DIMS)


def test_decode_layer_shared_expert_needs_both_matrices():
    rng = np.random.default_rng(0)
    layer = make_layer(rng)
    moe = {k: v for k, v in layer["moe"].items() if k != "shared_w2"}
    with pytest.raises(ValueError, match="moe: shared_w13 and moe: shared_w2 go together"):
        K.decode_layer("A_CC_ME", rand_bf16(rng, 1, D), dict(layer, moe=moe), K.MlaCache(4, KVL, DIMS["rope"]),
                       freqs=K.rope_frequencies(dim=DIMS["rope"]), softmax_scale=0.1, **DIMS)
