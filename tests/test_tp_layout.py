"""Tensor parallelism's layout in the grounded model's calls: what attention TP splits (the dense MLP,
the LM head, the shared experts where the experts share the group) and what MoE TP does not
multiply (the bytes of a permuted row, a token sent to a GPU). docs/GROUNDED_MODEL.md, "Attention TP"."""
import numpy as np
import pytest

from dsperf import _C
from dsperf.model import grounded
from dsperf.model.configs import load_model

SM = _C.step_model

V3_DIM, V3_VOCAB, V3_INTER, V3_MOE_INTER = 7168, 129280, 18432, 2048


def _calls(r):
    return {c["kernel"]: c for c in r["calls"]}


def test_attention_tp_splits_the_dense_mlp_lm_head_and_shared_experts():
    dp = _calls(grounded.decode("DeepSeek-V3", "H200", batch=4, ep=8, attn_tp=1, overlap="none"))
    tp = _calls(grounded.decode("DeepSeek-V3", "H200", batch=0.5, ep=8, attn_tp=8, overlap="none"))
    # DP attention: each GPU its own 4 tokens through whole weights.
    assert dp["lm_head"]["shape"]["m"] == 4 and dp["lm_head"]["shape"]["n"] == V3_VOCAB
    assert dp["dense_up"]["shape"]["n"] == 2 * V3_INTER and dp["shared_up"]["shape"]["n"] == 2 * V3_MOE_INTER
    # TP8 attention over the same 4 tokens: every GPU all 4 rows, an eighth of the weights.
    assert tp["lm_head"]["shape"]["m"] == 4 and tp["lm_head"]["shape"]["n"] == V3_VOCAB / 8
    assert tp["dense_up"]["shape"]["m"] == 4 and tp["dense_up"]["shape"]["n"] == 2 * V3_INTER / 8
    assert tp["shared_up"]["shape"]["m"] == 4 and tp["shared_up"]["shape"]["n"] == 2 * V3_MOE_INTER / 8
    assert "dense_allreduce" in tp and "dense_allreduce" not in dp
    assert tp["lm_head"]["us"] < dp["lm_head"]["us"] / 4


def test_shared_experts_stay_whole_where_the_experts_span_more_than_the_attention_group():
    c = _calls(grounded.decode("DeepSeek-V3", "H200", batch=2, ep=16, attn_tp=8, overlap="none"))
    assert c["shared_up"]["shape"]["n"] == 2 * V3_MOE_INTER


def test_attention_tp_splits_the_replicated_weights_in_memory():
    dp = grounded.decode("DeepSeek-V3", "H200", batch=4, ep=8, attn_tp=1, overlap="none")
    tp = grounded.decode("DeepSeek-V3", "H200", batch=0.5, ep=8, attn_tp=8, overlap="none")
    # Embedding + LM head (BF16, 2 x 129280 x 7168 x 2 bytes) alone shrink by 7/8 of 3.7 GB.
    assert dp["weights_gib"] - tp["weights_gib"] > 2 * V3_VOCAB * V3_DIM * 2 * 7 / 8 / 2**30


@pytest.mark.parametrize("moe_tp", [1, 8])
def test_a_permuted_row_carries_one_tokens_payload_whatever_the_moe_tp(moe_tp):
    r = grounded.prefill("DeepSeek-V3", "H200", tokens=128, prompt_len=1024, ep=8, attn_tp=8, moe_tp=moe_tp,
                         overlap="none")
    permute = _calls(r)["permute"]
    rows = 128 * 8 * moe_tp  # each token's 8 experts; with MoE TP every GPU of the group gets the token
    sets = 8 / moe_tp  # the busiest of the expert sets carries the step
    busiest = rows * SM.routing_skew(rows, sets, SM.routing_dispersion(load_model("DeepSeek-V3"), sets, 0))
    payload = V3_DIM + V3_DIM / 128 * 4  # FP8 values and one FP32 scale per 128
    assert permute["bytes"] == pytest.approx(busiest * payload * 2, rel=1e-12)


def test_moe_tp_normal_kernels_send_a_token_once_per_gpu_it_reaches():
    """Attention DP with one expert group over the EP GPUs (TensorRT-LLM's and SGLang's DEP attention
    with TP experts): every GPU holds a slice of every expert, so each token goes once to each other
    GPU (an all-gather) and its partial outputs come back once (a reduce-scatter), not once per
    (token, expert) pair and GPU of the group."""
    m = load_model("DeepSeek-V3")
    payload = m.dim + -(-m.dim // 128) * 4  # FP8 values and one FP32 scale per 128
    one_group = grounded.decode("DeepSeek-V3", "B300", batch=128, kv_len=2048, ep=8, moe_tp=8, overlap="none")
    calls = {c["kernel"]: c for c in one_group["calls"]}
    assert calls["dispatch"]["family"] == "dispatch_normal"
    assert calls["dispatch"]["bytes"] == pytest.approx(128 * 7 * payload, rel=1e-12)
    assert calls["combine"]["bytes"] == pytest.approx(128 * 7 * 2 * m.dim, rel=1e-12)
    # Prefill's normal kernels count the GPUs a token reaches: every GPU of each expert group holding
    # one of its experts. One group: all 7 others; two groups of four (128 experts each): each of the
    # 7 when one of the token's 8 experts lies in that GPU's group.
    def prefill_dispatch(moe_tp):
        calls = grounded.prefill("DeepSeek-V3", "B300", tokens=8192, prompt_len=1024, ep=8, moe_tp=moe_tp,
                                 overlap="none")["calls"]
        return next(c["bytes"] for c in calls if c["kernel"] == "dispatch")

    assert prefill_dispatch(8) == pytest.approx(8192 * 7 * payload, rel=1e-12)
    miss = np.prod([(256 - 128 - i) / (256 - i) for i in range(8)])
    assert prefill_dispatch(4) == pytest.approx(8192 * 7 * (1 - miss) * payload, rel=1e-12)


def test_the_model_refuses_more_attention_tp_than_gpus_naming_ep():
    """An 8-GPU TP group in a 4-GPU deployment was priced (a step of 61 ms that could not run)."""
    with pytest.raises(ValueError, match=r"ep \(4\) must be a multiple of attn_tp \(8\)"):
        grounded.decode("DeepSeek-V3", "H200", batch=8, ep=4, attn_tp=8)


def test_the_explorer_and_the_model_read_the_same_layout_rules():
    """Every layout the explorer keeps as feasible the model prices, and every one it refuses the model
    refuses (layout_rules.hpp: one home for the rules)."""
    from dsperf.model import explore
    layout = ["device", "ep", "attn_tp", "batch", "moe_tp", "dense_tp"]
    kinds = {"feasible": 0, "refused": 0}
    for weight in ("fp8", "fp4"):
        df = explore.search("DeepSeek-V3", ["H200", "B200"], ep=[4, 8, 12, 16, 24], attn_tp=[1, 2, 4, 8, 16],
                            batch=[0.25, 4], mtp=[(0, 0.0)], kv_fp8=[False], overlap=["none"], moe_tp=(1, 2, 4),
                            dense_tp=(1, 8), weight_dtype=(weight,), redundant_experts={})
        for row in df.drop_duplicates(layout).itertuples():
            if not row.feasible and row.reason == "KV cache does not fit beside the weights":
                continue   # memory, not a layout rule (the model reports it as fits_memory)
            kw = dict(batch=row.batch, ep=row.ep, attn_tp=row.attn_tp, moe_tp=row.moe_tp, dense_tp=row.dense_tp,
                      weight_dtype=weight, redundant_experts=0, overlap="none")
            if row.feasible:
                assert np.isfinite(grounded.decode("DeepSeek-V3", row.device, **kw)["step_ms"]), row
                kinds["feasible"] += 1
            else:
                with pytest.raises(ValueError):
                    grounded.decode("DeepSeek-V3", row.device, **kw)
                kinds["refused"] += 1
    assert kinds["feasible"] > 20 and kinds["refused"] > 20, kinds


def test_the_bound_layout_rule_names_the_reason_and_checks_its_divisors():
    from dsperf.model.configs import load_model
    from dsperf.model.devices import load_device
    m, dev = load_model("DeepSeek-V3"), load_device("H200", "corrected")

    def breach(**kw):
        return SM.layout_breach(m, dev, grounded._deployment("decode", **{"batch": 1, "redundant_experts": 0, **kw}))

    assert breach(ep=8, attn_tp=8) == "none"
    assert breach(ep=4, attn_tp=8) == "ep_not_multiple_of_tp"
    assert breach(ep=512, attn_tp=1) == "ep_exceeds_experts"
    assert breach(ep=24, attn_tp=12) == "tp_does_not_divide_node"
    reasons = {name for name, _ in SM.infeasible_reasons()}
    assert {"none", "ep_not_multiple_of_tp", "ep_exceeds_experts", "tp_does_not_divide_node"} <= reasons
    for field in ("attn_tp", "ep", "moe_tp", "dense_tp"):
        dep = SM.Deployment()
        setattr(dep, field, 0)
        with pytest.raises(ValueError, match=field):
            SM.layout_breach(m, dev, dep)
