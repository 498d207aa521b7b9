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
    # choose; dsperf writes none. Its only notes are the memory option's (this row gives no share).
    assert "max_num_tokens" not in yaml
    assert L.notes == [launch.STACKS["trtllm"].memory_note] + [n for n in L.notes if "no mem_fraction" in n]


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


@pytest.mark.parametrize("weights_fp8", [True, False])
def test_nvfp4_expert_rows_name_the_fp4_checkpoint_whatever_the_weights_elsewhere(weights_fp8):
    # "fp4" (FP8 elsewhere) and "fp4_bf16" (BF16 elsewhere, as nvidia/DeepSeek-R1-FP4 stores them).
    row = _row(device="B200", ep=8, prefill_ep=None, prefill_tokens=None, batch=32, weights_fp8=weights_fp8,
               experts_fp4=True)
    s = launch.emit(row, "sglang").roles["serve"]
    assert "nvidia/DeepSeek-R1-FP4" in s and flags(s)["--quantization"] == "modelopt_fp4"
    t = launch.emit(row, "trtllm")
    assert "backend: TRTLLM" in t.files["serve.yaml"]


def test_fp4_v2_rows_name_the_v2_checkpoint():
    row = _row(device="B200", ep=8, prefill_ep=None, prefill_tokens=None, batch=32, weights_fp8=False,
               experts_fp4=True, wo_fp4=True)
    assert "nvidia/DeepSeek-R1-0528-FP4-v2" in launch.emit(row, "sglang").roles["serve"]


@pytest.mark.parametrize("stack", ["sglang", "vllm", "trtllm", "dynamo"])
def test_attention_ffn_disaggregation_is_refused_naming_feature_and_stack(stack):
    with pytest.raises(ValueError, match=r"attention-FFN disaggregation.*" + launch.STACKS[stack].name):
        launch.emit(_row(kind="afd"), stack)


@pytest.mark.parametrize("stack", ["sglang", "vllm", "trtllm", "dynamo"])
@pytest.mark.parametrize("device, vendor, build", [("MI300X", "amd", "ROCm"), ("Ascend910C", "huawei", "Ascend NPU")])
def test_other_vendors_parts_get_no_export_of_the_cuda_flags(stack, device, vendor, build):
    """The flags written were read from each stack's documentation for NVIDIA GPUs: an AMD or Ascend
    row is refused, naming the device, its vendor, the stack and the build whose flags differ."""
    with pytest.raises(ValueError, match=rf"device {device} \({vendor}\): dsperf has no "
                                         rf"{launch.STACKS[stack].name} export.*{build} build"):
        launch.emit(_row(device=device, ep=8, redundant_experts=0, prefill_ep=None), stack)


def test_a_device_file_vendor_is_checked(tmp_path):
    from dsperf.model import devices

    assert devices.device_metadata("H200")["vendor"] == "nvidia"
    # Every vendor but the one whose documentation the flags were read from has no export.
    assert set(launch.OTHER_BUILDS) == set(devices.VENDORS) - {"nvidia"}
    assert {devices.device_metadata(d)["vendor"] for d in ("MI355X", "Ascend910B-376T")} == {"amd", "huawei"}
    text = devices.shipped_device_file("H20").read_text().replace('vendor = "nvidia"', 'vendor = "intel"')
    bad = tmp_path / "x.toml"
    bad.write_text(text)
    with pytest.raises(ValueError, match="field 'vendor' must be one of nvidia, amd, huawei, got 'intel'"):
        devices.device_metadata(str(bad))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="stack must be one of sglang, vllm, trtllm, dynamo, got 'tgi'"):
        launch.emit(_row(), "tgi")
    with pytest.raises(ValueError, match="MoE tensor parallelism.*vLLM"):
        launch.emit(_row(moe_tp=2, attn_tp=8, ep=8), "vllm")
    row = _row()
    del row["ep"]
    with pytest.raises(ValueError, match="field 'ep'"):
        launch.emit(row, "sglang")


def test_a_tp_group_over_two_nodes_is_launched_by_sglang_and_trtllm_and_refused_by_vllm():
    row = _row(ep=16, attn_tp=16, batch=4, redundant_experts=0, overlap="none")
    got = flags(launch.emit(row, "sglang").roles["decode"])
    assert (got["--tp-size"], got["--ep-size"], got["--nnodes"]) == ("16", "16", "2") and "--enable-dp-attention" not in got
    # The experts share the TP group: no all-to-all, as the model prices it (all-reduce, no dispatch).
    assert got["--moe-a2a-backend"] == "none" and "--deepep-mode" not in got
    trt = launch.emit(row, "trtllm")
    assert flags(trt.roles["decode"])["--tp_size"] == "16" and "enable_attention_dp: false" in trt.files["decode.yaml"]
    with pytest.raises(ValueError, match=r"a TP group over nodes \(attn_tp 16 > 8 GPUs a node\).*vLLM"):
        launch.emit(row, "vllm")


@pytest.mark.parametrize("attn_tp, ep, a2a", [(8, 8, "none"), (8, 16, "deepep"), (1, 8, "deepep"), (2, 8, "deepep")])
def test_sglang_runs_deepep_only_where_the_model_prices_a_dispatch(attn_tp, ep, a2a):
    row = _row(device="H200", ep=ep, attn_tp=attn_tp, batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    got = flags(launch.emit(row, "sglang").roles["serve"])
    assert got["--moe-a2a-backend"] == a2a and ("--deepep-mode" in got) == (a2a == "deepep")
    assert launch.grounded.SM.experts_share_attention_group(attn_tp, ep) == (a2a == "none")
    vllm = flags(launch.emit(row, "vllm").roles["serve"])
    assert ("--all2all-backend" in vllm) == (a2a == "deepep")


@pytest.mark.parametrize("stack, backend", [("trtllm", None), ("dynamo", "trtllm")])
def test_trtllm_refuses_attention_tp_between_one_and_the_instance(stack, backend):
    """TensorRT-LLM's attention is DP over every GPU (enable_attention_dp) or TP over all of them: a
    DP4 x TP2 attention row would run as TP8 there, not as priced."""
    row = _row(device="H200", ep=8, attn_tp=2, batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    with pytest.raises(ValueError, match=r"attention TP 2 of an instance's 8 GPUs.*cannot run this layout"):
        launch.emit(row, stack, backend=backend)
    for attn_tp in (1, 8):
        launch.emit({**row, "attn_tp": attn_tp}, stack, backend=backend)


def test_sglang_dense_mlp_group_is_one_gpu_or_the_whole_tp_group():
    """--moe-dense-tp-size is 1 or left to its default (the TP group: SGLang asserts 1 or None); a group
    between them runs over the whole TP group, and the notes say so."""
    base = dict(device="H200", batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    dp = launch.emit(_row(ep=8, attn_tp=1, **base), "sglang")
    assert flags(dp.roles["serve"])["--moe-dense-tp-size"] == "1" and not any("dense" in n for n in dp.notes)
    for row in (_row(ep=8, attn_tp=8, **base), _row(ep=8, attn_tp=1, dense_tp=8, **base)):
        out = launch.emit(row, "sglang")
        assert "--moe-dense-tp-size" not in flags(out.roles["serve"]) and not any("dense" in n for n in out.notes)
    between = launch.emit(_row(ep=16, attn_tp=2, **base), "sglang")
    assert "--moe-dense-tp-size" not in flags(between.roles["serve"])
    assert any("dense MLP layers over the whole TP group of 16 GPUs" in n and "over 2" in n for n in between.notes)


def test_vllm_says_where_it_splits_the_dense_mlp_otherwise_than_priced():
    base = dict(device="H200", batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    split = launch.emit(_row(ep=8, attn_tp=1, dense_tp=8, **base), "vllm")
    assert any("vLLM splits the dense MLP layers over each data-parallel rank's 1 GPU(s)" in n and "over 8" in n
               for n in split.notes)
    assert not any("dense MLP" in n for n in launch.emit(_row(ep=8, attn_tp=1, **base), "vllm").notes)


def test_trtllm_says_where_it_splits_the_dense_mlp_otherwise_than_priced():
    """TensorRT-LLM runs the dense MLP data-parallel under attention DP and TP within a node otherwise."""
    base = dict(batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    adp = launch.emit(_row(device="H200", ep=8, attn_tp=1, dense_tp=8, **base), "trtllm")
    assert any("TensorRT-LLM splits the dense MLP layers over 1 GPU(s)" in n and "over 8" in n for n in adp.notes)
    tep16 = launch.emit(_row(device="H100", ep=16, attn_tp=16, **base), "trtllm")
    assert any("over 8 GPU(s)" in n and "split them over 16" in n for n in tep16.notes)
    for row in (_row(device="H200", ep=8, attn_tp=1, **base), _row(device="H200", ep=8, attn_tp=8, **base)):
        assert not any("dense MLP" in n for n in launch.emit(row, "trtllm").notes)


def test_sglang_two_batch_overlap_needs_an_all_to_all():
    """SGLang refuses --enable-two-batch-overlap with --moe-a2a-backend none: a row whose experts share
    the TP group runs without it, and the notes say it will be slower than predicted."""
    base = dict(device="H200", batch=4, redundant_experts=0, overlap="two_batch", prefill_ep=None)
    shared = launch.emit(_row(ep=8, attn_tp=8, **base), "sglang")
    assert "--enable-two-batch-overlap" not in flags(shared.roles["serve"])
    assert any("two-batch overlap runs in SGLang only with an all-to-all" in n for n in shared.notes)
    ep = launch.emit(_row(ep=8, attn_tp=1, **base), "sglang")
    assert "--enable-two-batch-overlap" in flags(ep.roles["serve"]) and not any("two-batch" in n for n in ep.notes)
    shared_vllm = launch.emit(_row(ep=8, attn_tp=8, **base), "vllm")
    assert "--enable-dbo" not in flags(shared_vllm.roles["serve"])
    assert any("two-batch overlap runs in vLLM only with an all-to-all" in n for n in shared_vllm.notes)
    assert "--enable-dbo" in flags(launch.emit(_row(ep=8, attn_tp=1, **base), "vllm").roles["serve"])


def test_sglang_runs_moe_tp_only_where_the_experts_share_the_tp_group():
    """SGLang's DeepEP makes the MoE group pure EP (--ep-size := --tp-size): MoE TP x EP with a
    dispatch is refused; sharing the TP group it all-reduces, and --ep-size 4 over TP8 runs."""
    shared = flags(launch.emit(_row(device="H200", ep=8, attn_tp=8, moe_tp=2, batch=4, redundant_experts=0,
                                    overlap="none", prefill_ep=None), "sglang").roles["serve"])
    assert (shared["--tp-size"], shared["--ep-size"], shared["--moe-a2a-backend"]) == ("8", "4", "none")
    with pytest.raises(ValueError, match=r"MoE tensor parallelism x expert parallelism with a dispatch \(moe_tp 2\).*"
                                         r"SGLang.*--ep-size to --tp-size"):
        launch.emit(_row(device="H200", ep=16, attn_tp=1, moe_tp=2, batch=4, redundant_experts=0, overlap="none",
                         prefill_ep=None), "sglang")


@pytest.mark.parametrize("attn_tp, ep, name", [(0, 8, "attn_tp"), (8, -1, "ep")])
def test_the_shared_group_rule_names_a_bad_argument(attn_tp, ep, name):
    with pytest.raises(ValueError, match=name):
        launch.grounded.SM.experts_share_attention_group(attn_tp, ep)


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
        assert cli_main(["explore", "--devices", "H200", "--emit", "tgi"]) != 0
    assert "--emit must be one of sglang, vllm, trtllm, dynamo, got 'tgi'" in err.getvalue()


def test_emit_best_launches_the_first_row_the_stack_runs_and_says_why_the_others_were_refused():
    import pandas as pd
    base = dict(device="H200", batch=4, redundant_experts=0, overlap="none", prefill_ep=None)
    rows = pd.DataFrame([_row(ep=8, attn_tp=2, **base), _row(ep=8, attn_tp=8, **base)])
    launched, at, refused = launch.emit_best(rows, "trtllm")
    assert at == 1 and len(refused) == 1 and "attention TP 2 of an instance's 8 GPUs" in refused[0]
    assert "tensor_parallel_size: 8" in launched.files["serve.yaml"]
    assert launch.emit_best(rows, "sglang")[1] == 0          # SGLang runs DP4 x TP2 attention
    with pytest.raises(ValueError, match="attention TP 2 of an instance's 8 GPUs"):
        launch.emit_best(rows.iloc[:1], "trtllm")
    with pytest.raises(ValueError, match="no configuration to launch"):
        launch.emit_best(rows.iloc[:0], "trtllm")
    with pytest.raises(ValueError, match="stack must be one of"):
        launch.emit_best(rows, "tgi")
    for bad in ([rows.iloc[0].to_dict()], None):
        with pytest.raises(ValueError, match="rows must be a pandas DataFrame"):
            launch.emit_best(bad, "trtllm")


# ---- NVIDIA Dynamo --------------------------------------------------------------------------------
# Dynamo's DeepSeek-R1 wide-EP example on H100 (ai-dynamo/dynamo docs/backends/sglang/dsr1-wideep-h100.md
# @119290c): one EP32 prefill worker and one EP32 decode worker, 4 nodes each, two-batch overlap,
# 32 redundant experts. Its head-node commands, paths and ports as published.
DYNAMO_H100_PREFILL = (
    "python3 -m dynamo.sglang --model-path /model/ --served-model-name deepseek-ai/DeepSeek-R1 --skip-tokenizer-init "
    "--disaggregation-mode prefill --disaggregation-transfer-backend nixl --disaggregation-bootstrap-port 30001 "
    "--dist-init-addr ${HEAD_PREFILL_NODE_IP}:29500 --nnodes 4 --node-rank 0 --tp-size 32 --dp-size 32 "
    "--enable-dp-attention --decode-log-interval 1000 --moe-a2a-backend deepep --load-balance-method round_robin "
    "--page-size 1 --trust-remote-code --moe-dense-tp-size 1 --enable-dp-lm-head --disable-radix-cache "
    "--watchdog-timeout 1000000 --enable-two-batch-overlap --deepep-mode normal --mem-fraction-static 0.85 "
    "--deepep-config /configs/deepep.json --ep-num-redundant-experts 32 --ep-dispatch-algorithm dynamic "
    "--eplb-algorithm deepseek")
DYNAMO_H100_DECODE = (
    "python3 -m dynamo.sglang --model-path /model/ --served-model-name deepseek-ai/DeepSeek-R1 --skip-tokenizer-init "
    "--disaggregation-mode decode --disaggregation-transfer-backend nixl --disaggregation-bootstrap-port 30001 "
    "--dist-init-addr ${HEAD_DECODE_NODE_IP}:29500 --nnodes 4 --node-rank 0 --tp-size 32 --dp-size 32 "
    "--enable-dp-attention --decode-log-interval 1000 --moe-a2a-backend deepep --prefill-round-robin-balance "
    "--page-size 1 --trust-remote-code --moe-dense-tp-size 1 --enable-dp-lm-head --disable-radix-cache "
    "--watchdog-timeout 1000000 --enable-two-batch-overlap --deepep-mode low_latency --mem-fraction-static 0.835 "
    "--ep-num-redundant-experts 32 --cuda-graph-bs 128")


def _dgd(L):
    import yaml  # a test dependency (pyproject .[test]): these checks never skip
    docs = list(yaml.safe_load_all(L.files["dynamo.yaml"]))
    assert docs[-1]["apiVersion"] == "nvidia.com/v1alpha1" and docs[-1]["kind"] == "DynamoGraphDeployment"
    return docs


def test_dynamo_sglang_workers_match_the_published_h100_wideep_example_where_they_overlap():
    L = launch.emit(_row(ep=32, batch=128), "dynamo")
    assert L.roles["frontend"] == "python3 -m dynamo.frontend"
    shared = {"--tp-size", "--dp-size", "--enable-dp-attention", "--nnodes", "--moe-a2a-backend", "--deepep-mode",
              "--moe-dense-tp-size", "--enable-two-batch-overlap", "--ep-num-redundant-experts", "--trust-remote-code",
              "--skip-tokenizer-init", "--disaggregation-mode", "--disaggregation-transfer-backend"}
    for role, recipe, own in (("prefill", DYNAMO_H100_PREFILL, {"--load-balance-method"}),
                              ("decode", DYNAMO_H100_DECODE, {"--prefill-round-robin-balance"})):
        assert L.roles[role].startswith("python3 -m dynamo.sglang")
        got, want = flags(L.roles[role]), flags(recipe)
        for f in sorted(shared | own):
            assert got.get(f) == want[f], (role, f, got.get(f), want[f])
    # Where they differ (docs/EXPLORE.md): dsperf sizes the decode CUDA graphs with --cuda-graph-max-bs
    # (the example lists --cuda-graph-bs 128) and leaves SGLang's default bootstrap port.
    decode = flags(L.roles["decode"])
    assert decode["--cuda-graph-max-bs"] == "128" and "--cuda-graph-bs" not in decode
    assert "--disaggregation-bootstrap-port" not in decode


def test_dynamo_disaggregated_rows_give_frontend_prefill_and_decode_workers():
    for backend, module in (("sglang", "dynamo.sglang"), ("vllm", "dynamo.vllm"), ("trtllm", "dynamo.trtllm")):
        L = launch.emit(_row(), "dynamo", backend=backend)
        assert list(L.roles) == ["frontend", "prefill", "decode"], backend
        for role in ("prefill", "decode"):
            assert L.roles[role].startswith(f"python3 -m {module}") and flags(L.roles[role])["--disaggregation-mode"] == role
        services = _dgd(L)[-1]["spec"]["services"]
        assert services["Frontend"]["componentType"] == "frontend"
        # EP32 prefill on 4 H100 nodes, EP72 decode on 9: one worker each, 8 GPUs a pod.
        for role, nodes in (("prefill", 4), ("decode", 9)):
            svc = services[role]
            assert (svc["componentType"], svc["subComponentType"]) == ("worker", role), backend
            assert svc["multinode"]["nodeCount"] == nodes and svc["resources"]["limits"]["gpu"] == "8"
            cmd = svc["extraPodSpec"]["mainContainer"]["args"][0]
            # The operator wires a multinode worker's ranks; no placeholders reach Kubernetes.
            assert "<" not in cmd and "--node-rank" not in cmd and f"--disaggregation-mode {role}" in cmd


def test_dynamo_aggregated_row_is_one_worker_without_a_role():
    # (8 x H200: DeepSeek's FP8 weights do not fit 8 x H100, which the export refuses.)
    L = launch.emit(_row(device="H200", ep=8, prefill_ep=None, prefill_tokens=None), "dynamo", backend="vllm")
    assert list(L.roles) == ["frontend", "serve"] and "--disaggregation-mode" not in L.roles["serve"]
    svc = _dgd(L)[-1]["spec"]["services"]["serve"]
    assert "subComponentType" not in svc and "multinode" not in svc and svc["resources"]["limits"]["gpu"] == "8"


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_dynamo_workers_carry_the_engines_own_configuration(backend):
    # One concept, one home: the Dynamo worker runs the very flags (or engine YAML) of the engine's export.
    row = _row(mtp=2, kv_fp8=True, overlap="single_batch" if backend != "sglang" else "two_batch")
    native, dyn = launch.emit(row, backend), launch.emit(row, "dynamo", backend=backend)
    for role in ("prefill", "decode"):
        engine_flags = {f: v for f, v in flags(native.roles[role]).items()
                        if f not in ("--model-path", "--backend", "--tp_size", "--ep_size", "--extra_llm_api_options")}
        got = flags(dyn.roles[role])
        assert all(got.get(f) == v for f, v in engine_flags.items()), role
    for name in ("prefill.yaml", "decode.yaml"):
        assert dyn.files.get(name) == native.files.get(name)
    engine_notes = [n for n in native.notes if "router" not in n and "joins the two" not in n]
    assert all(n in dyn.notes for n in engine_notes) and not any("router in front" in n for n in dyn.notes)


def test_dynamo_vllm_matches_the_hopper_16gpu_recipe_where_they_overlap():
    # recipes/deepseek-r1/vllm/disagg/deploy_hopper_16gpu.yaml @0044eb9: DEP16 prefill and decode,
    # 2 nodes each, DeepEP high-throughput / low-latency, DBO, EPLB with 32 redundant experts,
    # max-num-seqs 512 on decode, --data-parallel-hybrid-lb across the nodes.
    L = launch.emit(_row(device="H200", ep=16, batch=512, prefill_ep=16), "dynamo", backend="vllm")
    services = _dgd(L)[-1]["spec"]["services"]
    for role, a2a in (("prefill", "deepep_high_throughput"), ("decode", "deepep_low_latency")):
        svc = services[role]
        got = flags(svc["extraPodSpec"]["mainContainer"]["args"][0])
        assert svc["multinode"]["nodeCount"] == 2 and svc["subComponentType"] == role
        assert got["--tensor-parallel-size"] == "1" and got["--data-parallel-size"] == "16"
        assert got["--all2all-backend"] == a2a and got["--enable-expert-parallel"] is True
        assert got["--enable-dbo"] is True and got["--enable-eplb"] is True and got["--data-parallel-hybrid-lb"] is True
        assert '"num_redundant_experts": 32' in svc["extraPodSpec"]["mainContainer"]["args"][0]
    assert flags(L.roles["decode"])["--max-num-seqs"] == "512"
    # Differs: the recipe marks the prefill worker with the older --is-prefill-worker (deprecated for
    # --disaggregation-mode in dynamo.vllm) and passes no --kv-transfer-config; dsperf gives both roles
    # NixlConnector as Dynamo's examples/backends/vllm/launch/disagg.sh does.
    assert "--is-prefill-worker" not in L.roles["prefill"] and "NixlConnector" in L.roles["prefill"]


def test_dynamo_trtllm_matches_the_gb200_wide_ep_recipe_where_they_overlap():
    # recipes/deepseek-r1/trtllm/disagg/wide_ep/gb200/deploy.yaml @09783f6: a DEP4 prefill worker on one
    # GB200 tray (max_num_tokens 4608) and a DEP32 decode worker on 8 trays (max_batch_size 32), FP4
    # weights, FP8 KV cache, the engine YAML in a ConfigMap mounted at /config.
    L = launch.emit(_row(device="GB200", ep=32, batch=32, redundant_experts=0, overlap="none", kv_fp8=True,
                         experts_fp4=True, prefill_ep=4, prefill_tokens=4608), "dynamo", backend="trtllm")
    docs = _dgd(L)
    configmap, services = docs[0], docs[-1]["spec"]["services"]
    assert configmap["kind"] == "ConfigMap" and docs[-1]["spec"]["backendFramework"] == "trtllm"
    import yaml  # a test dependency (pyproject .[test]): these checks never skip
    prefill = yaml.safe_load(configmap["data"]["prefill.yaml"])
    decode = yaml.safe_load(configmap["data"]["decode.yaml"])
    assert (prefill["tensor_parallel_size"], prefill["moe_expert_parallel_size"], prefill["enable_attention_dp"],
            prefill["max_num_tokens"]) == (4, 4, True, 4608)
    assert (decode["tensor_parallel_size"], decode["moe_expert_parallel_size"], decode["enable_attention_dp"],
            decode["max_batch_size"]) == (32, 32, True, 32)
    for cfg in (prefill, decode):
        assert cfg["kv_cache_config"]["dtype"] == "fp8" and cfg["cache_transceiver_config"]["backend"] == "DEFAULT"
    assert "multinode" not in services["prefill"] and services["decode"]["multinode"]["nodeCount"] == 8
    assert services["decode"]["resources"]["limits"]["gpu"] == "4"
    cmd = flags(services["decode"]["extraPodSpec"]["mainContainer"]["args"][0])
    assert cmd["--extra-engine-args"] == "/config/decode.yaml" and cmd["--disaggregation-mode"] == "decode"
    # Differs: the recipe runs the WIDEEP MoE backend where dsperf's TensorRT-LLM export picks TRTLLM for FP4.
    assert decode["moe_config"]["backend"] == "TRTLLM"


def test_dynamo_bad_backend_and_unsupported_layouts_are_named():
    with pytest.raises(ValueError, match="backend must be one of sglang, vllm, trtllm, got 'tgi'"):
        launch.emit(_row(), "dynamo", backend="tgi")
    with pytest.raises(ValueError, match="backend: only the dynamo stack.*'vllm'.*'sglang'"):
        launch.emit(_row(), "sglang", backend="vllm")
    with pytest.raises(ValueError, match="MoE tensor parallelism.*NVIDIA Dynamo with its vLLM backend"):
        launch.emit(_row(moe_tp=2, attn_tp=8, ep=8), "dynamo", backend="vllm")


# ---- The memory share ------------------------------------------------------------------------------

def _h200_row(**kw):
    return _row(device="H200", ep=8, attn_tp=1, batch=32, redundant_experts=0, overlap="none", prefill_ep=None,
                prefill_tokens=None, **kw)


def test_each_stack_writes_the_rows_memory_share_in_its_own_terms():
    row = _h200_row(mem_fraction=0.8)
    assert flags(launch.emit(row, "sglang").roles["serve"])["--mem-fraction-static"] == "0.8"
    vllm = launch.emit(row, "vllm")
    assert flags(vllm.roles["serve"])["--gpu-memory-utilization"] == "0.8"
    assert any("--gpu-memory-utilization also holds its activations" in n for n in vllm.notes)
    got = re.search(r"free_gpu_memory_fraction: ([0-9.]+)", launch.emit(row, "trtllm").files["serve.yaml"])
    assert got is not None
    # The fraction of the memory left after the weights gives the KV cache the bytes dsperf's own
    # memory model leaves it at this share: batch_limit requests of kv_len tokens each.
    from dsperf.model import grounded
    d = grounded.decode(device="H200", batch=32, kv_len=1000, ep=8, attn_tp=1, mem_fraction=0.8)
    mem = grounded.load_device("H200", "corrected").mem_gb
    kv_gib = d["batch_limit"] * d["kv_bytes_per_token"] * 1000 / 2 ** 30
    assert float(got.group(1)) * (mem - d["weights_gib"]) == pytest.approx(kv_gib, rel=2e-3)
    # A larger share leaves the KV cache more of what the weights leave.
    more = re.search(r"free_gpu_memory_fraction: ([0-9.]+)",
                     launch.emit(_h200_row(mem_fraction=0.9), "trtllm").files["serve.yaml"])
    assert float(more.group(1)) > float(got.group(1))


def test_a_search_row_carries_its_share_into_the_export():
    from dsperf.model import explore
    df = explore.search(devices=["H200"], ep=[8], attn_tp=[1], batch=[16], mtp=[(0, 0.0)], kv_fp8=[True],
                        overlap=["none"], mem_fraction=0.75)
    row = df[df["feasible"]].iloc[0]
    assert row["mem_fraction"] == 0.75
    for role, cmd in launch.emit(row, "sglang").roles.items():
        assert flags(cmd)["--mem-fraction-static"] == "0.75", role
    assert not any("no mem_fraction" in n for n in launch.emit(row, "sglang").notes)


def test_a_row_without_a_share_takes_the_default_and_says_so():
    L = launch.emit(_h200_row(), "sglang")
    assert flags(L.roles["serve"])["--mem-fraction-static"] == "0.9"
    assert any("no mem_fraction" in n and "assumed" in n for n in L.notes)


@pytest.mark.parametrize("bad", [1.5, -0.5, "x", 0.01, float("nan"), float("inf")])
def test_a_bad_share_is_refused_by_name(bad):
    with pytest.raises((ValueError, TypeError), match="mem_fraction"):
        launch.emit(_h200_row(mem_fraction=bad), "sglang")


@pytest.mark.parametrize("stack", ["sglang", "vllm", "trtllm"])
def test_a_share_the_weights_fill_is_refused_for_every_stack(stack):
    # EP8 on H200 holds ~78 GiB of FP8 weights a GPU: a 0.4 share (~56 GiB) leaves no cache.
    with pytest.raises(ValueError, match="mem_fraction 0.4: the weights"):
        launch.emit(_h200_row(mem_fraction=0.4), stack)
