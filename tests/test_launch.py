"""The explorer's choice written as a serving stack's launch configuration (dsperf.model.launch),
held to published reproduction commands where the two overlap."""
import re

import pytest

from dsperf.model import launch

# A reproduction of SGLang's 96 x H100 recipe (sgl-project/sglang issue #6017), its decode instance
# as run by a user who followed it (SGLang 0.4.6 flag names): 9 nodes, EP72, DP attention, two-batch
# overlap, 32 redundant experts, DeepEP low-latency.
SGLANG_6017_DECODE = (
    "python3 -m sglang.launch_server --model-path /mnt/model/DeepSeek-V3-0324 --disaggregation-mode decode "
    "--nnodes 9 --node-rank 0 --tp-size 72 --dp-size 72 --enable-dp-attention --decode-log-interval 1 "
    "--enable-deepep-moe --page-size 1 --trust-remote-code --moe-dense-tp-size 1 --enable-dp-lm-head "
    "--disable-radix-cache --enable-two-batch-overlap --deepep-mode low_latency --mem-fraction-static 0.8 "
    "--max-running-requests 2048 --ep-num-redundant-experts 32 --cuda-graph-bs 256")


def flags(cmd: str) -> dict:
    """--flag value pairs of a command line (a bare flag maps to True)."""
    toks = cmd.replace("\\\n", " ").split()
    out = {}
    for i, t in enumerate(toks):
        if t.startswith("--"):
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            out[t] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def _row(**kw):
    row = dict(device="H100", ep=72, attn_tp=1, batch=256, redundant_experts=32, mtp=0, kv_fp8=False,
               overlap="two_batch", moe_tp=1, dense_tp=1, weights_fp8=True, experts_fp4=False, kind="ep",
               prefill_ep=32, prefill_tokens=16384)
    row.update(kw)
    return row


def test_sglang_decode_matches_the_published_recipe_where_they_overlap():
    got = flags(launch.emit(_row(), "sglang").roles["decode"])
    want = flags(SGLANG_6017_DECODE)
    shared = {"--tp-size", "--dp-size", "--enable-dp-attention", "--nnodes", "--deepep-mode", "--moe-dense-tp-size",
              "--enable-two-batch-overlap", "--ep-num-redundant-experts", "--disaggregation-mode"}
    for f in sorted(shared):
        assert got.get(f) == want[f], (f, got.get(f), want[f])
    # Where they differ, and why (docs/EXPLORE.md): SGLang 0.5 names DeepEP --moe-a2a-backend deepep
    # (0.4.6: --enable-deepep-moe); dsperf sizes the CUDA graphs to its batch (the recipe captures 256)
    # and the running requests to batch x DP ranks; it asks for dynamic EPLB where the recipe loads a
    # placement dumped from a run (--init-expert-location).
    assert got["--moe-a2a-backend"] == "deepep" and "--enable-deepep-moe" in want
    assert got["--cuda-graph-max-bs"] == "256" and got["--max-running-requests"] == str(256 * 72)


def test_sglang_prefill_is_the_ep32_dp_attention_instance():
    got = flags(launch.emit(_row(), "sglang").roles["prefill"])
    assert got["--tp-size"] == "32" and got["--dp-size"] == "32" and got["--enable-dp-attention"] is True
    assert got["--deepep-mode"] == "normal" and got["--nnodes"] == "4" and got["--chunked-prefill-size"] == "16384"
    assert got["--disaggregation-mode"] == "prefill" and "--speculative-algorithm" not in got


def test_trtllm_matches_its_published_h200_max_throughput_settings():
    # TensorRT-LLM's DeepSeek-R1 best-performance practice on 8 x H200 (points.csv): attention DP,
    # EP8, max_batch_size 128, FP8 weights on DeepGEMM, BF16 KV, no MTP, aggregated.
    L = launch.emit(_row(device="H200", ep=8, batch=128, redundant_experts=0, overlap="none", prefill_ep=None,
                         prefill_tokens=None), "trtllm")
    yaml = L.files["serve.yaml"]
    for line in ("tensor_parallel_size: 8", "moe_expert_parallel_size: 8", "enable_attention_dp: true",
                 "max_batch_size: 128", "backend: DEEPGEMM"):
        assert re.search(rf"^\s*{re.escape(line)}$", yaml, re.M), line
    # Differs: the practice sets max_num_tokens 1151, a chunk size an aggregated explorer row does not
    # choose; dsperf writes none.
    assert "max_num_tokens" not in yaml and not L.notes


def test_mtp_fp8_kv_and_overlap_reach_every_stack():
    row = _row(mtp=2, kv_fp8=True, ep=16, prefill_ep=None, prefill_tokens=None, batch=32)
    s = flags(launch.emit(row, "sglang").roles["serve"])
    assert s["--speculative-num-steps"] == "2" and s["--speculative-num-draft-tokens"] == "3"
    assert s["--kv-cache-dtype"] == "fp8_e4m3" and s["--enable-two-batch-overlap"] is True
    v = flags(launch.emit(row, "vllm").roles["serve"])
    assert '"num_speculative_tokens": 2' in launch.emit(row, "vllm").roles["serve"]
    assert v["--kv-cache-dtype"] == "fp8" and v["--enable-dbo"] is True and v["--data-parallel-size"] == "16"
    t = launch.emit(row, "trtllm")
    assert "num_nextn_predict_layers: 2" in t.files["serve.yaml"] and "dtype: fp8" in t.files["serve.yaml"]
    assert any("two-batch overlap" in n for n in t.notes)  # TensorRT-LLM runs it without


@pytest.mark.parametrize("stack", ["sglang", "vllm", "trtllm"])
def test_attention_ffn_disaggregation_is_refused_naming_feature_and_stack(stack):
    with pytest.raises(ValueError, match=r"attention-FFN disaggregation.*" + launch.STACK_NAMES[stack]):
        launch.emit(_row(kind="afd"), stack)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="stack must be one of sglang, vllm, trtllm, got 'dynamo'"):
        launch.emit(_row(), "dynamo")
    with pytest.raises(ValueError, match="MoE tensor parallelism.*vLLM"):
        launch.emit(_row(moe_tp=2, attn_tp=8, ep=8), "vllm")
    row = _row()
    del row["ep"]
    with pytest.raises(ValueError, match="field 'ep'"):
        launch.emit(row, "sglang")


def test_explore_cli_emits_the_best_rows_launch_and_a_page(tmp_path):
    import contextlib
    import io

    from dsperf.cli import main as cli_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(["explore", "--devices", "H200", "--tpot-ms", "50", "--out", str(tmp_path), "--emit", "vllm",
                         "--html", str(tmp_path / "page.html")]) == 0
    text = out.getvalue()
    assert "vllm serve" in text and (tmp_path / "launch_vllm.txt").read_text().startswith("# vllm")
    assert (tmp_path / "page.html").stat().st_size > 0
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert cli_main(["explore", "--devices", "H200", "--emit", "dynamo"]) != 0
    assert "--emit must be one of sglang, vllm, trtllm, got 'dynamo'" in err.getvalue()
