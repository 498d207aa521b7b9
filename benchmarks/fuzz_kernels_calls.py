"""The valid small calls of every public dsperf.kernels function, with each argument's kind, for
benchmarks/fuzz_kernels_census.py to spoil one argument at a time (and tests/test_fuzz_kernels.py
to draw from). Each call names its reference (dsperf.reference, or a composed equivalent)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

# Small sizes: the MLA has dim 32, 2 heads, nope 8, rope 4, v 8, q_lora 16, kv_lora 16.
DIMS = dict(heads=2, nope=8, rope=4, v=8)
D, QL, KVL = 32, 16, 16


def _k():
    from dsperf import kernels
    return kernels


def _r():
    from dsperf import reference
    return reference


def _rng():
    return np.random.default_rng(1234)


def _bf16(rng, *shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(_k().BF16)


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _fp8_weight(rng, rows, cols):
    K = _k()
    nb, kb = -(-rows // 128), -(-cols // 128)
    return (rng.standard_normal((rows, cols)) * 8).astype(np.float32).astype(K.FP8), np.full((nb, kb), 0.01, np.float32)


def _mla_weights(rng):
    H, N, R, V = DIMS["heads"], DIMS["nope"], DIMS["rope"], DIMS["v"]
    return {"wq_a": _bf16(rng, QL, D, scale=0.2), "q_norm": np.ones(QL, np.float32),
            "wq_b": _bf16(rng, H * (N + R), QL, scale=0.2), "wkv_a": _bf16(rng, KVL + R, D, scale=0.2),
            "kv_norm": np.ones(KVL, np.float32), "wkv_b": _bf16(rng, H * (N + V), KVL, scale=0.2),
            "wo": _bf16(rng, D, H * V, scale=0.2)}


def _moe(rng, E=4, I=8):
    return {"gate_weight": _bf16(rng, E, D), "gate_bias": _f32(rng, E, scale=0.05),
            "w13": _bf16(rng, E, 2 * I, D, scale=0.1), "w2": _bf16(rng, E, D, I, scale=0.1),
            "shared_w13": _bf16(rng, 2 * I, D, scale=0.1), "shared_w2": _bf16(rng, D, I, scale=0.1),
            "n_group": 2, "topk_group": 1, "top_k": 2, "route_scale": 1.5}


def _freqs():
    return _k().rope_frequencies(dim=DIMS["rope"], max_seq_len=4096)


@dataclass
class Arg:
    """How an argument may be spoiled. kind: array (float data), ids (integer array), int, real,
    bool, choice (a string from a set), cache, paged_cache, weights (dict of arrays), layer."""
    kind: str
    optional: bool = False   # None is a valid value
    nan: bool = False        # NaN / Inf here must reach the output (the arrays the result depends on)
    bound: int | None = None     # ids: the first invalid value above (None: any int32 is valid)
    minimum: int | None = None   # int / real: the smallest valid value
    positive: bool = False       # real: > 0
    huge_valid: bool = False     # int: 2**31 and more is a valid value (compared with the reference)


@dataclass
class Fn:
    name: str
    build: Callable[[], dict]                  # the valid call's arguments
    args: dict[str, Arg]
    ref: Callable[..., Any] | None = None       # dsperf.reference's twin, called with the same arguments
    call: Callable[..., Any] | None = None      # default: getattr(dsperf.kernels, name)(**kw)
    fresh_cache: bool = False                   # the call fills a cache: reference runs on a fresh one
    nan_unused: tuple = ()                      # dict entries this call ignores (no NaN put there)
    nan_no_ref: tuple = ()                      # dict entries the reference does not take


def _mla_forward_ref(variant, x, weights, cache, *, heads, freqs, softmax_scale, nope, rope, v, eps=1e-6):
    return _r().mla_forward(x, weights, heads=heads, freqs=freqs, softmax_scale=softmax_scale, nope=nope, rope=rope,
                            v=v, eps=eps)


def _paged(rng, dtype="bf16"):
    K = _k()
    c = K.PagedMlaCache(4, 8, KVL, DIMS["rope"], dtype=dtype)
    bt = np.array([[0, 1], [2, 3]], np.int32)
    K.paged_cache_write(c, bt, np.array([0] * 11 + [1] * 6, np.int32),
                        np.concatenate([np.arange(11), np.arange(6)]).astype(np.int32), _bf16(rng, 17, KVL),
                        _bf16(rng, 17, DIMS["rope"]))
    return c, bt


def _fp8_experts(rng, E=2, I=8, dim=16):
    w13, s13 = zip(*(_fp8_weight(rng, 2 * I, dim) for _ in range(E)))
    w2, s2 = zip(*(_fp8_weight(rng, dim, I) for _ in range(E)))
    return dict(w13=np.stack(w13), w2=np.stack(w2), w13_scale=np.stack(s13), w2_scale=np.stack(s2))


def _decode_args(rng, dtype="bf16"):
    c, bt = _paged(rng, dtype)
    H = DIMS["heads"]
    return dict(q_nope=_bf16(rng, 2, 1, H, KVL), q_rope=_bf16(rng, 2, 1, H, DIMS["rope"]), latent_cache=c.latent,
                rope_cache=c.rope, block_table=bt, seqlens=np.array([11, 6], np.int32), softmax_scale=0.3,
                num_splits=2, latent_scale=c.latent_scale)


def _layer(rng):
    K = _k()
    return {"attn_norm": np.ones(D, np.float32), "ffn_norm": np.ones(D, np.float32),
            "mla": K.mla_absorb_weights(_mla_weights(rng), **DIMS), "moe": _moe(rng)}


def _mla_cache(decompressed=False):
    return _k().MlaCache(8, KVL, DIMS["rope"], decompressed=decompressed, heads=DIMS["heads"], nope=DIMS["nope"],
                         v=DIMS["v"])


def functions() -> list[Fn]:
    A, I_, N_, R_ = Arg("array"), Arg("int"), Arg("int", minimum=1), Arg("real")
    mla_scalars = {"heads": Arg("int", minimum=1), "nope": Arg("int", minimum=1), "rope": Arg("int", minimum=2),
                   "v": Arg("int", minimum=1)}
    fns = [
        Fn("linear", lambda: dict(x=_bf16(_rng(), 3, 16), w=_bf16(_rng(), 5, 16)),
           {"x": Arg("array", nan=True), "w": Arg("array", nan=True)}, ref=lambda **kw: _r().linear(**kw)),
        Fn("linear_fp8", lambda: dict(x=_bf16(_rng(), 3, 16), w=_fp8_weight(_rng(), 5, 16)[0],
                                      w_scale=_fp8_weight(_rng(), 5, 16)[1]),
           {"x": Arg("array", nan=True), "w": A, "w_scale": Arg("array", nan=True)},
           ref=lambda **kw: _r().linear(**kw), call=lambda **kw: _k().linear(**kw)),
        Fn("rmsnorm", lambda: dict(x=_f32(_rng(), 3, 8), weight=_f32(_rng(), 8), eps=1e-6),
           {"x": Arg("array", nan=True), "weight": Arg("array", nan=True), "eps": Arg("real", minimum=0)},
           ref=lambda **kw: _r().rmsnorm(**kw)),
        Fn("rope_frequencies", lambda: dict(dim=16, base=10000.0, factor=40.0, original_seq_len=4096,
                                            max_seq_len=16384, beta_fast=32.0, beta_slow=1.0),
           {"dim": Arg("int", minimum=2), "base": R_, "factor": R_,
            "original_seq_len": Arg("int", minimum=1, huge_valid=True),
            "max_seq_len": Arg("int", minimum=1, huge_valid=True), "beta_fast": R_, "beta_slow": R_},
           ref=lambda **kw: _r().rope_frequencies(**kw)),
        Fn("rope_mscale", lambda: dict(factor=40.0, mscale_all_dim=1.0, original_seq_len=4096, max_seq_len=16384),
           {"factor": Arg("real", positive=True), "mscale_all_dim": R_,
            "original_seq_len": Arg("int", minimum=1, huge_valid=True),
            "max_seq_len": Arg("int", minimum=1, huge_valid=True)}),
        Fn("apply_rope", lambda: dict(x=_f32(_rng(), 3, 2, 8), positions=np.array([0, 5, 9], np.int32),
                                      freqs=_k().rope_frequencies(dim=8)),
           {"x": Arg("array", nan=True), "positions": Arg("ids"), "freqs": Arg("array", nan=True)},
           ref=lambda **kw: _r().apply_rope(**kw)),
        Fn("embedding", lambda: dict(table=_bf16(_rng(), 10, 8), ids=np.array([0, 3, 9, 3], np.int64)),
           {"table": A, "ids": Arg("ids", bound=10)}, ref=lambda **kw: _r().embedding(**kw)),
        Fn("silu_mul", lambda: dict(gate_up=_f32(_rng(), 3, 8)), {"gate_up": Arg("array", nan=True)},
           ref=lambda **kw: _r().silu_mul(**kw)),
        Fn("act_quant", lambda: dict(x=_f32(_rng(), 2, 200)), {"x": Arg("array", nan=True)},
           ref=lambda **kw: _r().act_quant(**kw)),
        Fn("weight_dequant", lambda: dict(w=_fp8_weight(_rng(), 130, 20)[0], scale=np.full((2, 1), 0.01, np.float32)),
           {"w": A, "scale": Arg("array", nan=True)}, ref=lambda **kw: _r().weight_dequant(**kw)),
        Fn("moe_gate", lambda: dict(x=_f32(_rng(), 3, 16), weight=_f32(_rng(), 8, 16), bias=_f32(_rng(), 8, scale=0.1),
                                    n_group=2, topk_group=1, top_k=2, route_scale=1.5, score_func="sigmoid"),
           {"x": Arg("array", nan=True), "weight": Arg("array", nan=True), "bias": Arg("array", optional=True),
            "n_group": N_, "topk_group": N_, "top_k": N_, "route_scale": Arg("real", positive=True),
            "score_func": Arg("choice")}, ref=lambda **kw: _r().moe_gate(**kw)),
        Fn("moe_route", lambda: dict(ids=np.array([[0, 1], [3, 1], [2, 0]], np.int32), n_experts=4),
           {"ids": Arg("ids", bound=4), "n_experts": N_}, ref=lambda **kw: _r().moe_route(**kw)),
        Fn("moe_permute", lambda: dict(x=_bf16(_rng(), 3, 8), source=np.array([0, 2, 1, 1, 0, 2], np.int64)),
           {"x": A, "source": Arg("ids", bound=3)}, ref=lambda **kw: _r().moe_permute(**kw)),
        Fn("moe_unpermute", lambda: dict(y_perm=_f32(_rng(), 6, 8), position=np.array([[0, 1], [2, 3], [4, 5]], np.int64),
                                         weights=_f32(_rng(), 3, 2)),
           {"y_perm": Arg("array", nan=True), "position": Arg("ids", bound=6), "weights": Arg("array", nan=True)},
           ref=lambda **kw: _r().moe_unpermute(**kw)),
        Fn("experts_contiguous", lambda: dict(x=_bf16(_rng(), 5, 16), offsets=np.array([0, 2, 5], np.int64),
                                              w13=_bf16(_rng(), 2, 16, 16, scale=0.1),
                                              w2=_bf16(_rng(), 2, 16, 8, scale=0.1)),
           {"x": Arg("array", nan=True), "offsets": Arg("ids", bound=6), "w13": Arg("array", nan=True),
            "w2": Arg("array", nan=True)}, ref=lambda **kw: _r().experts_contiguous(**kw)),
        Fn("experts_contiguous_fp8", lambda: dict(x=_bf16(_rng(), 5, 16), offsets=np.array([0, 2, 5]),
                                                  **_fp8_experts(_rng())),
           {"x": Arg("array", nan=True), "offsets": Arg("ids", bound=6), "w13": A, "w2": A,
            "w13_scale": Arg("array", nan=True), "w2_scale": Arg("array", nan=True)},
           ref=lambda **kw: _r().experts_contiguous(**kw), call=lambda **kw: _k().experts_contiguous(**kw)),
        Fn("experts_masked", lambda: dict(x=_bf16(_rng(), 2, 3, 16), counts=np.array([2, 3], np.int64),
                                          w13=_bf16(_rng(), 2, 16, 16, scale=0.1), w2=_bf16(_rng(), 2, 16, 8, scale=0.1)),
           {"x": Arg("array", nan=True), "counts": Arg("ids", bound=4), "w13": Arg("array", nan=True),
            "w2": Arg("array", nan=True)}, ref=lambda **kw: _r().experts_masked(**kw)),
        Fn("moe_layer", lambda: dict(x=_bf16(_rng(), 3, D), gate_weight=_moe(_rng())["gate_weight"],
                                     w13=_moe(_rng())["w13"], w2=_moe(_rng())["w2"], n_group=2, topk_group=1, top_k=2,
                                     route_scale=1.5, gate_bias=_moe(_rng())["gate_bias"],
                                     shared_w13=_moe(_rng())["shared_w13"], shared_w2=_moe(_rng())["shared_w2"]),
           {"x": Arg("array", nan=True), "gate_weight": A, "w13": A, "w2": A, "n_group": N_, "topk_group": N_,
            "top_k": N_, "route_scale": Arg("real", positive=True), "gate_bias": Arg("array", optional=True),
            "shared_w13": Arg("array", optional=True, nan=True), "shared_w2": Arg("array", optional=True, nan=True)},
           ref=lambda **kw: _r().moe_layer(**kw)),
        Fn("MlaCache", lambda: dict(capacity=8, kv_lora=KVL, rope=4, decompressed=True, heads=2, nope=8, v=8),
           {"capacity": N_, "kv_lora": N_, "rope": Arg("int", minimum=2), "decompressed": Arg("bool"),
            "heads": N_, "nope": N_, "v": N_}),
        Fn("PagedMlaCache", lambda: dict(num_blocks=4, block_size=8, kv_lora=KVL, rope=4, dtype="fp8",
                                         decompressed=True, heads=2, nope=8, v=8),
           {"num_blocks": N_, "block_size": N_, "kv_lora": N_, "rope": Arg("int", minimum=2), "dtype": Arg("choice"),
            "decompressed": Arg("bool"), "heads": N_, "nope": N_, "v": N_}),
        Fn("paged_cache_write", lambda: dict(cache=_k().PagedMlaCache(4, 8, KVL, 4), block_table=np.array([[0, 1], [3, 2]]),
                                             requests=np.array([0, 1, 1]), positions=np.array([3, 0, 9]),
                                             latent=_bf16(_rng(), 3, KVL), k_pe=_bf16(_rng(), 3, 4)),
           {"cache": Arg("paged_cache"), "block_table": Arg("ids", bound=4), "requests": Arg("ids", bound=2),
            "positions": Arg("ids", bound=16), "latent": A, "k_pe": A}),
        Fn("mla_decode", lambda: _decode_args(_rng()),
           {"q_nope": Arg("array", nan=True), "q_rope": Arg("array", nan=True), "latent_cache": Arg("array", nan=True),
            "rope_cache": Arg("array", nan=True), "block_table": Arg("ids", bound=4), "seqlens": Arg("ids", bound=17),
            "softmax_scale": Arg("real", positive=True), "num_splits": N_},
           ref=lambda **kw: _r().mla_decode(**kw)),
        Fn("mla_decode_fp8", lambda: _decode_args(_rng(), "fp8"),
           {"q_nope": Arg("array", nan=True), "latent_cache": A, "latent_scale": Arg("array", nan=True),
            "block_table": Arg("ids", bound=4), "seqlens": Arg("ids", bound=17)},
           ref=lambda **kw: _r().mla_decode(**kw), call=lambda **kw: _k().mla_decode(**kw)),
        Fn("paged_cache_write_fp8", lambda: dict(cache=_k().PagedMlaCache(4, 8, KVL, 4, dtype="fp8"),
                                                 block_table=np.array([[0, 1], [3, 2]]), requests=np.array([0, 1, 1]),
                                                 positions=np.array([3, 0, 9]), latent=_bf16(_rng(), 3, KVL),
                                                 k_pe=_bf16(_rng(), 3, 4)),
           {"cache": Arg("paged_cache"), "latent": A, "k_pe": A}, call=lambda **kw: _k().paged_cache_write(**kw)),
        Fn("mla_prolog", lambda: dict(x=_bf16(_rng(), 3, D), weights=_mla_weights(_rng()),
                                      positions=np.array([0, 1, 2]), freqs=_freqs(), **DIMS),
           {"x": Arg("array", nan=True), "weights": Arg("weights"), "positions": Arg("ids"),
            "freqs": Arg("array", nan=True), **mla_scalars, "eps": Arg("real", minimum=0)}),
        Fn("mla_absorb_weights", lambda: dict(weights=_mla_weights(_rng()), **DIMS),
           {"weights": Arg("weights"), **mla_scalars}),
    ]
    for variant in ("CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME"):
        def build(variant=variant):
            w = _mla_weights(_rng())
            if variant == "AM_CC_ME":
                w = _k().mla_absorb_weights(w, **DIMS)
            return dict(variant=variant, x=_bf16(_rng(), 3, D), weights=w, cache=_mla_cache(variant == "CD"),
                        freqs=_freqs(), softmax_scale=0.3, **DIMS)
        fns.append(Fn(f"mla_forward[{variant}]", build,
                      {"variant": Arg("choice"), "x": Arg("array", nan=True), "weights": Arg("weights", nan=True),
                       "cache": Arg("cache"), "freqs": Arg("array", nan=True),
                       "softmax_scale": Arg("real", positive=True), **mla_scalars},
                      ref=_mla_forward_ref, call=lambda **kw: _k().mla_forward(**kw), fresh_cache=True,
                      # AM_CC_ME runs on the materialised products instead of wkv_b and wo.
                      nan_unused=("wkv_b", "wo") if variant == "AM_CC_ME" else (),
                      nan_no_ref=("q_absorb", "o_absorb")))

    def paged_build():
        c, bt = _paged(_rng())
        return dict(variant="A_CC_ME", x=_bf16(_rng(), 3, D), weights=_mla_weights(_rng()), cache=c, block_table=bt,
                    seqlens=np.array([11, 6]), new_tokens=np.array([1, 2]), freqs=_freqs(), softmax_scale=0.3, **DIMS)
    fns.append(Fn("mla_forward_paged", paged_build,
                  {"variant": Arg("choice"), "x": Arg("array"), "weights": Arg("weights"), "cache": Arg("paged_cache"),
                   "block_table": Arg("ids", bound=4), "seqlens": Arg("ids", bound=16),
                   "new_tokens": Arg("ids", bound=8), "freqs": Arg("array"), "softmax_scale": Arg("real", positive=True),
                   **mla_scalars}))
    for name in ("decode_layer", "decode_layer_by_ops"):
        fns.append(Fn(name, lambda: dict(variant="A_CC_ME", x=_bf16(_rng(), 2, D), layer=_layer(_rng()),
                                         cache=_mla_cache(), freqs=_freqs(), softmax_scale=0.3, **DIMS),
                      {"variant": Arg("choice"), "x": Arg("array", nan=True), "layer": Arg("layer", nan=True),
                       "cache": Arg("cache"), "freqs": Arg("array", nan=True),
                       "softmax_scale": Arg("real", positive=True), **mla_scalars},
                      # NaN goes where the one-call layer and the layer composed of the (reference-
                      # checked) kernels must agree.
                      ref=(lambda **kw: _k().decode_layer_by_ops(**dict(kw, cache=_mla_cache()))) if name == "decode_layer"
                      else (lambda **kw: _k().decode_layer(**dict(kw, cache=_mla_cache()))), fresh_cache=True,
                      nan_unused=("q_absorb", "o_absorb")))  # A_CC_ME does not read them
    for name in ("isa", "amx_status", "cpu_features"):
        fns.append(Fn(name, dict, {}))
    return fns
