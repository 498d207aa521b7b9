"""The one list of an MLA layer's calls (csrc/model/mla_calls.hpp) and the three cost models that
read it: the seed's block FLOPs, the kernel cost model's GEMMs and the grounded step's calls.

The expected shapes are written out here from DeepSeek-V3's dimensions (dim 7168, 128 heads, q_lora
1536, kv_lora 512, nope 128, rope 64, v 128), not read back from the list."""
import pytest

from dsperf import _C
from dsperf.kernels import MLA_VARIANTS
from dsperf.model import grounded as G
from dsperf.model.configs import load_model

KC = _C.kernel_cost
V3 = KC.MlaShape()
H, D, QL, L, N, R, V = 128, 7168, 1536, 512, 128, 64, 128


def gemms(calls):
    return [(c.name, c.m, c.n, c.k, c.count) for c in calls if c.gemm]


def test_cc_runs_the_decompressed_layer():
    t, prefix = 5, 95
    calls = KC.mla_layer_calls(MLA_VARIANTS.index("CC"), t, prefix, V3)
    assert [c.name for c in calls] == ["wq_a", "wkv_a", "wq_b", "wkv_b", "attention_core", "wo"]
    assert gemms(calls) == [("wq_a", t, QL, D, 1), ("wkv_a", t, L + R, D, 1), ("wq_b", t, H * (N + R), QL, 1),
                            ("wkv_b", t + prefix, H * (N + V), L, 1), ("wo", t, D, H * V, 1)]
    core = calls[4]
    assert (core.part, core.qk, core.v) == ("core", N + R, V)


def test_cd_decompresses_only_the_new_tokens():
    calls = KC.mla_layer_calls(MLA_VARIANTS.index("CD"), 5, 95, V3)
    assert [g for g in gemms(calls) if g[0] == "wkv_b"] == [("wkv_b", 5, H * (N + V), L, 1)]


def test_absorbed_variants():
    run_time = KC.mla_layer_calls(MLA_VARIANTS.index("A_CC_ME"), 3, 10, V3)
    assert gemms(run_time) == [("wq_a", 3, QL, D, 1), ("wkv_a", 3, L + R, D, 1), ("wq_b", 3, H * (N + R), QL, 1),
                               ("q_absorb_w_uk", 3, L, N, H), ("o_absorb_w_uv", 3, V, L, H), ("wo", 3, D, H * V, 1)]
    assert [c.per_head for c in run_time if c.gemm] == [False, False, False, True, True, False]
    materialised = KC.mla_layer_calls(MLA_VARIANTS.index("AM_CC_ME"), 3, 10, V3)
    assert gemms(materialised) == [("wq_a", 3, QL, D, 1), ("wkv_a", 3, L + R, D, 1), ("wq_b", 3, H * R, QL, 1),
                                   ("q_absorb", 3, H * L, QL, 1), ("o_absorb", 3, D, H * L, 1)]
    core = next(c for c in materialised if not c.gemm)
    assert (core.qk, core.v) == (L + R, L)


def test_without_a_query_lora_the_query_comes_from_the_hidden_state():
    shape = KC.MlaShape(dim=2048, heads=16, q_lora=0)
    calls = KC.mla_layer_calls(MLA_VARIANTS.index("CC"), 4, 0, shape)
    assert [c.name for c in calls][:2] == ["wkv_a", "wq_b"]
    assert gemms(calls)[1] == ("wq_b", 4, 16 * (N + R), 2048, 1)
    # The kernel cost model prices such a layer (it refused q_lora = 0 before the list).
    assert KC.mla_forward_work(MLA_VARIANTS.index("CC"), 4, 0, shape).flops > 0


@pytest.mark.parametrize("variant", MLA_VARIANTS)
def test_kernel_cost_gemms_are_the_list(variant):
    v = MLA_VARIANTS.index(variant)
    listed = [(c.m, c.n, c.k, c.count) for c in KC.mla_layer_calls(v, 7, 100, V3) if c.gemm]
    assert [(g.m, g.n, g.k, g.count) for g in KC.mla_gemms(v, 7, 100, V3)] == listed


@pytest.mark.parametrize("q_len, kv_len, hit", [(1, 4989, 0.0), (1, 4989, 0.56), (4096, 4096, 0.0)])
def test_seed_block_flops_are_the_list(q_len, kv_len, hit):
    """The seed's split: projections (prolog + decompression) in FP8, core + output in FP16, with the
    KV down-projection run over every uncached key and the core over the full q x kv rectangle."""
    m = load_model("DeepSeek-V3")
    for name, variant, flops in (("CC", "CC", _C.mla_flops), ("AM_CC_ME", "AM_CC_ME", _C.mla_absorbed_flops)):
        calls = KC.mla_layer_calls(MLA_VARIANTS.index(variant), q_len, kv_len - q_len, V3)
        proj = attn = 0.0
        for c in calls:
            m_rows = kv_len * (1 - hit) if c.name == "wkv_a" else (kv_len if c.name == "wkv_b" else c.m)
            if not c.gemm:
                attn += 2 * H * q_len * kv_len * (c.qk + c.v)
            elif c.part == "output":
                attn += 2 * m_rows * c.n * c.k * c.count
            else:
                proj += 2 * m_rows * c.n * c.k * c.count
        total, fp8, fp16 = flops(q_len, kv_len, m, hit)
        assert fp8 == pytest.approx(proj / 1e9, rel=1e-12), name
        assert fp16 == pytest.approx(attn / 1e9, rel=1e-12), name


@pytest.mark.parametrize("phase, variant", [("decode", "A_CC_ME"), ("prefill", "CC")])
def test_grounded_step_prices_the_list(phase, variant):
    """The grounded step's attention GEMMs are the list's, in its order, on one TP rank's heads (one
    micro-batch: no overlap, so the step runs one)."""
    tp = 2
    if phase == "decode":
        r = G.decode(device="H800", batch=16, attn_tp=tp, ep=16, overlap="none")
        tokens = 16 * tp
    else:
        r = G.prefill(device="H800", tokens=8192, prompt_len=4096, attn_tp=tp, ep=16, overlap="none")
        tokens = 8192 * tp  # no cached prefix: wkv_b decompresses the prompts' own tokens
    listed = KC.mla_layer_calls(MLA_VARIANTS.index(variant), tokens, 0, KC.MlaShape(heads=H // tp))
    names = [c.name for c in listed]
    priced = [c for c in r["calls"] if c["stage"] == "attention" and c["kernel"] in names]
    assert [c["kernel"] for c in priced] == names
    for call, row in zip(listed, priced):
        if call.gemm:
            assert row["flops"] == pytest.approx(2 * call.m * call.n * call.k * call.count, rel=1e-12), call.name
