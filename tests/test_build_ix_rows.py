"""The builder of the InferenceX TensorRT-LLM disaggregated latency rows
(benchmarks/tables/build_ix_dynamo_trt.py): a record and its recipe become the settings the
simulator reads. The fixture and the recipe repositories are not shipped, so these tests feed it
one record and one recipe written here; the shipped rows are checked against their sources by
running the script where the sources are (docs/VALIDATION_LATENCY.md)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_ix_dynamo_trt",
                                              ROOT / "benchmarks" / "tables" / "build_ix_dynamo_trt.py")
builder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(builder)

KEY = ("21785935852", "gb300", "fp8")
RECORD = dict(isl=1024, osl=8192, conc=512, date="2026-02-07", image="nvcr.io#nvidia/ai-dynamo/runtime:0.8.1.post2",
              prefill_num_workers=2, decode_num_workers=1, prefill_tp=4, prefill_ep=4, prefill_dp_attention=True,
              decode_tp=16, decode_ep=16, decode_dp_attention=True,
              metrics={"median_ttft": 0.5123456, "median_tpot": 0.0212345})


def recipe(decode_tp=16, decode_ep=16, dp=True, slots=288):
    return {"resources": {"prefill_workers": 2, "decode_workers": 1},
            "backend": {"trtllm_config": {
                "prefill": {"tensor_parallel_size": 4, "moe_expert_parallel_size": 4, "enable_attention_dp": True,
                            "max_num_tokens": 16384, "max_batch_size": 16, "kv_cache_config": {"dtype": "fp8"},
                            "moe_config": {"backend": "DEEPGEMM"}, "cache_transceiver_config": {"backend": "UCX"}},
                "decode": {"tensor_parallel_size": decode_tp, "moe_expert_parallel_size": decode_ep,
                           "enable_attention_dp": dp, "max_batch_size": 64, "kv_cache_config": {"dtype": "fp8"},
                           "moe_config": {"backend": "WIDEEP", "load_balancer": {"num_slots": slots}}}}}}


def rows(y):
    return builder.rows_for(RECORD, KEY, "recipes/x.yaml", y, "deepseek-ai/DeepSeek-R1-0528", "2026-11-29")


def test_a_record_and_its_recipe_give_the_simulators_settings():
    ttft, tpot = rows(recipe())
    assert ttft["point"] == "ix_gb300_trt_fp8_1k8k_c512_ttft" and tpot["point"] == "ix_gb300_trt_fp8_1k8k_c512_tpot"
    assert (ttft["ep"], ttft["attn_tp"], ttft["moe_tp"], ttft["replicas"], ttft["max_running"]) == (16, 1, 1, 1, 64)
    assert ttft["redundant_experts"] == 32  # 288 load-balancer slots over 256 experts
    assert (ttft["prefill_ep"], ttft["prefill_attn_tp"], ttft["prefill_replicas"], ttft["prefill_max_running"],
            ttft["prefill_max_num_tokens"]) == (4, 1, 2, 16, 16384)
    assert ttft["num_prompts"] == 5120 and ttft["kv_fp8"] == "true" and ttft["weight_dtype"] == "fp8"
    assert ttft["dispatch_fp4"] == ""  # FP8 experts: the tokens go as FP8 (NVFP4 only for NVFP4 experts)
    assert ttft["published"] == 512.3456 and tpot["published"] == 21.2345
    assert "run 21785935852" in ttft["source"] and "recipes/x.yaml" in ttft["source"]


def test_tp_attention_with_tp_experts_is_moe_tp():
    y = recipe(decode_tp=8, decode_ep=1, dp=False, slots=256)
    ttft, _ = rows(y)
    assert (ttft["ep"], ttft["attn_tp"], ttft["moe_tp"], ttft["redundant_experts"]) == (8, 8, 8, 0)
    assert "TP8 attention, TP8 experts" in ttft["source"]


@pytest.mark.parametrize("field,value", [("decode_tp", 8), ("decode_dp_attention", False), ("prefill_num_workers", 1)])
def test_a_recipe_that_disagrees_with_its_record_is_left_out(field, value):
    y = recipe()
    c = y["backend"]["trtllm_config"]
    assert builder.agrees(RECORD, y["resources"], c["prefill"], c["decode"])
    assert not builder.agrees({**RECORD, field: value}, y["resources"], c["prefill"], c["decode"])


def test_blank_settings_compare_as_the_simulators_defaults():
    assert builder.same("moe_tp", 1, "") and builder.same("published", 171.117, "171.117")
    assert not builder.same("published", 171.117, "171.2") and not builder.same("ep", 8, "")
