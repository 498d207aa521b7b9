"""A deployment the explorer chose, written as the serving stack's own launch configuration.

`emit(row, stack)` turns one row of `dsperf.explore.search` (a device, EP size, attention TP, batch,
MTP, KV dtype, overlap, redundant experts, and for disaggregated serving the prefill layout) into
the commands or config files of SGLang, vLLM or TensorRT-LLM. Each stack's options were read from
its own documentation, whose version is named in STACKS; where a stack has no option for what the
prediction assumed, the export either refuses (a layout the stack cannot run: an error naming the
feature and the stack) or says so in `notes` (an optimisation the stack lacks, so it runs slower
than predicted).

What is emitted is the parallel layout and the options the prediction depends on. Paths, hosts,
ports, memory fractions and the like are the operator's and are left as placeholders.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Mapping

from .devices import load_device

# Where each stack's option names come from (read 2026-11-26).
STACKS = {
    "sglang": "SGLang 0.5 server arguments (docs.sglang.io: server_arguments, expert_parallelism, "
              "speculative decoding, PD disaggregation)",
    "vllm": "vLLM 0.12 (docs.vllm.ai/en/v0.12.0: serving/expert_parallel_deployment, engine arguments, "
            "config/parallel EPLBConfig, speculative decoding, disaggregated prefill with NixlConnector)",
    "trtllm": "TensorRT-LLM 1.x PyTorch backend, trtllm-serve --extra_llm_api_options YAML (LLM API reference, "
              "DeepSeek-R1 best-performance practice)",
}
MODEL_PATHS = {"fp8": "deepseek-ai/DeepSeek-R1", "bf16": "deepseek-ai/DeepSeek-R1", "fp4": "nvidia/DeepSeek-R1-FP4"}


@dataclass
class Launch:
    stack: str
    roles: dict[str, str]                 # role (decode, prefill, serve) -> command line
    files: dict[str, str] = field(default_factory=dict)   # name -> contents (TensorRT-LLM YAML)
    notes: list[str] = field(default_factory=list)        # what the stack runs differently from the prediction
    source: str = ""

    def text(self) -> str:
        out = [f"# {self.stack}: {self.source}"]
        for name, body in self.files.items():
            out += [f"# --- {name}", body.rstrip()]
        for role, cmd in self.roles.items():
            out += [f"# --- {role}", cmd]
        out += [f"# note: {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def _get(row: Mapping, key: str, default=None):
    v = row.get(key, default) if hasattr(row, "get") else default
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return default
    return v


def _layout(row: Mapping) -> dict:
    """The row's layout, checked: what every stack's export reads."""
    for key in ("device", "ep", "attn_tp", "batch"):
        if _get(row, key) is None:
            raise ValueError(f"row: field '{key}' is required to export a launch configuration")
    kind = str(_get(row, "kind", "ep"))
    spec = load_device(str(row["device"]), "corrected")
    ep, attn_tp = int(row["ep"]), int(row["attn_tp"])
    weight = "fp4" if bool(_get(row, "experts_fp4", False)) else ("fp8" if bool(_get(row, "weights_fp8", True)) else "bf16")
    lay = {
        "kind": kind, "device": str(row["device"]), "gpus_per_node": int(spec.gpus_per_node), "ep": ep,
        "attn_tp": attn_tp, "dp": max(1, ep // attn_tp), "moe_tp": int(_get(row, "moe_tp", 1)),
        "dense_tp": int(_get(row, "dense_tp", 1)), "batch": float(row["batch"]),
        "redundant": int(_get(row, "redundant_experts", 0)), "mtp": int(_get(row, "mtp", 0)),
        "kv_fp8": bool(_get(row, "kv_fp8", False)), "overlap": str(_get(row, "overlap", "none")),
        "weight": weight, "prefill_ep": _get(row, "prefill_ep"), "prefill_tokens": _get(row, "prefill_tokens"),
    }
    lay["nodes"] = max(1, math.ceil(ep / lay["gpus_per_node"]))
    # Requests each attention group runs at once: the batch per GPU times the GPUs of a TP group.
    lay["running"] = max(1, int(round(lay["batch"] * attn_tp)))
    return lay


def _refuse(feature: str, stack: str, why: str):
    raise ValueError(f"{feature}: {STACK_NAMES[stack]} cannot run this layout ({why})")


STACK_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}


def _common_checks(lay: dict, stack: str) -> None:
    if lay["kind"] == "afd":
        _refuse("attention-FFN disaggregation (kind afd)", stack, "no documented option splits attention and "
                "experts onto separate GPUs")


# ---- SGLang ---------------------------------------------------------------------------------------

def _sglang(lay: dict) -> Launch:
    L = Launch("sglang", {}, source=STACKS["sglang"])

    def cmd(role: str, gpus: int, attn_tp: int, deepep_mode: str, running: int | None) -> str:
        nodes = max(1, math.ceil(gpus / lay["gpus_per_node"]))
        a = ["python -m sglang.launch_server", f"--model-path {MODEL_PATHS[lay['weight']]}", "--trust-remote-code",
             f"--tp-size {gpus}"]
        if attn_tp < gpus:
            a += [f"--dp-size {gpus // attn_tp}", "--enable-dp-attention"]
        a += [f"--ep-size {gpus // lay['moe_tp']}", "--moe-a2a-backend deepep", f"--deepep-mode {deepep_mode}",
              f"--moe-dense-tp-size {lay['dense_tp']}"]
        if nodes > 1:
            a += [f"--nnodes {nodes}", "--node-rank <rank>", "--dist-init-addr <host>:<port>"]
        if lay["redundant"]:
            a += [f"--ep-num-redundant-experts {lay['redundant']}", "--enable-eplb"]
        if lay["overlap"] == "two_batch":
            a.append("--enable-two-batch-overlap")
        elif lay["overlap"] == "single_batch":
            a.append("--enable-single-batch-overlap")
        if lay["kv_fp8"]:
            a.append("--kv-cache-dtype fp8_e4m3")
        if lay["weight"] == "fp4":
            a.append("--quantization modelopt_fp4")
        if role != "prefill" and lay["mtp"]:
            a += ["--speculative-algorithm EAGLE", f"--speculative-num-steps {lay['mtp']}",
                  "--speculative-eagle-topk 1", f"--speculative-num-draft-tokens {lay['mtp'] + 1}"]
        if running is not None:
            a += [f"--max-running-requests {running * (gpus // attn_tp)}", f"--cuda-graph-max-bs {running}"]
        if role != "serve":
            a.append(f"--disaggregation-mode {role}")
        return " \\\n    ".join(a)

    if lay["prefill_ep"]:
        pe = int(lay["prefill_ep"])
        L.roles["prefill"] = cmd("prefill", pe, 1, "normal", None) + (
            f" \\\n    --chunked-prefill-size {int(lay['prefill_tokens'])}" if lay["prefill_tokens"] else "")
        L.roles["decode"] = cmd("decode", lay["ep"], lay["attn_tp"], "low_latency", lay["running"])
    else:
        L.roles["serve"] = cmd("serve", lay["ep"], lay["attn_tp"], "auto", lay["running"])
    return L


# ---- vLLM -----------------------------------------------------------------------------------------

def _vllm(lay: dict) -> Launch:
    if lay["moe_tp"] > 1:
        _refuse(f"MoE tensor parallelism x expert parallelism (moe_tp {lay['moe_tp']})", "vllm",
                "--enable-expert-parallel makes the MoE group pure EP")
    L = Launch("vllm", {}, source=STACKS["vllm"])

    def cmd(role: str, gpus: int, attn_tp: int, backend: str, running: int | None) -> str:
        a = [f"vllm serve {MODEL_PATHS[lay['weight']]}", "--trust-remote-code", f"--tensor-parallel-size {attn_tp}",
             f"--data-parallel-size {gpus // attn_tp}", "--enable-expert-parallel", f"--all2all-backend {backend}"]
        nodes = max(1, math.ceil(gpus / lay["gpus_per_node"]))
        if nodes > 1:
            a += [f"--data-parallel-size-local {max(1, lay['gpus_per_node'] // attn_tp)}",
                  "--data-parallel-address <host>", "--data-parallel-rpc-port <port>"]
        if lay["redundant"]:
            a += ["--enable-eplb", "--eplb-config '" + json.dumps({"num_redundant_experts": lay["redundant"]}) + "'"]
        if lay["overlap"] == "two_batch":
            a.append("--enable-dbo")
        if lay["kv_fp8"]:
            a.append("--kv-cache-dtype fp8")
        if role != "prefill" and lay["mtp"]:
            a.append("--speculative-config '" + json.dumps({"method": "deepseek_mtp",
                                                             "num_speculative_tokens": lay["mtp"]}) + "'")
        if running is not None:
            a.append(f"--max-num-seqs {running}")
        if role != "serve":
            a.append("--kv-transfer-config '" + json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}) + "'")
        return " \\\n    ".join(a)

    if lay["overlap"] == "single_batch":
        L.notes.append("single-batch overlap (dispatch under the shared expert) has no vLLM option: it runs "
                       "without it, slower than predicted")
    if lay["prefill_ep"]:
        L.roles["prefill"] = cmd("prefill", int(lay["prefill_ep"]), 1, "deepep_high_throughput", None) + (
            f" \\\n    --max-num-batched-tokens {int(lay['prefill_tokens'])}" if lay["prefill_tokens"] else "")
        L.roles["decode"] = cmd("decode", lay["ep"], lay["attn_tp"], "deepep_low_latency", lay["running"])
        L.notes.append("a router in front of the prefill and decode instances is the operator's (vLLM's "
                       "disaggregated-prefill proxy, llm-d or Dynamo)")
    else:
        L.roles["serve"] = cmd("serve", lay["ep"], lay["attn_tp"], "deepep_low_latency", lay["running"])
    return L


# ---- TensorRT-LLM ---------------------------------------------------------------------------------

def _yaml(d: Mapping, indent=0) -> str:
    lines = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            lines.append(" " * indent + f"{k}:")
            lines.append(_yaml(v, indent + 2))
        else:
            s = "true" if v is True else "false" if v is False else v
            lines.append(" " * indent + f"{k}: {s}")
    return "\n".join(lines)


def _trtllm(lay: dict) -> Launch:
    L = Launch("trtllm", {}, source=STACKS["trtllm"])
    if lay["overlap"] in ("two_batch", "single_batch"):
        L.notes.append(f"{lay['overlap'].replace('_', '-')} overlap has no option in dsperf's TensorRT-LLM export: "
                       "the emitted configuration runs without it, slower than the prediction assumed")

    def options(gpus: int, attn_tp: int, running: int | None, tokens: int | None, decode: bool) -> dict:
        o = {"tensor_parallel_size": gpus, "moe_expert_parallel_size": gpus // lay["moe_tp"],
             "enable_attention_dp": attn_tp == 1 and gpus > 1}
        if lay["moe_tp"] > 1:
            o["moe_tensor_parallel_size"] = lay["moe_tp"]
        if running is not None:
            o["max_batch_size"] = running
            o["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": running}
        if tokens:
            o["max_num_tokens"] = tokens
        o["kv_cache_config"] = {"dtype": "fp8" if lay["kv_fp8"] else "auto"}
        o["moe_config"] = {"backend": "TRTLLM" if lay["weight"] == "fp4" else "DEEPGEMM"}
        if decode and lay["mtp"]:
            o["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": lay["mtp"]}
        return o

    def serve(name: str, gpus: int) -> str:
        return (f"trtllm-serve {MODEL_PATHS[lay['weight']]} --backend pytorch --tp_size {gpus} "
                f"--ep_size {gpus // lay['moe_tp']} --extra_llm_api_options {name}")

    if lay["prefill_ep"]:
        pe, tokens = int(lay["prefill_ep"]), int(lay["prefill_tokens"]) if lay["prefill_tokens"] else None
        L.files["prefill.yaml"] = _yaml({**options(pe, 1, None, tokens, False),
                                         "cache_transceiver_config": {"backend": "DEFAULT"}})
        L.files["decode.yaml"] = _yaml({**options(lay["ep"], lay["attn_tp"], lay["running"], None, True),
                                        "cache_transceiver_config": {"backend": "DEFAULT"}})
        L.roles["prefill"] = serve("prefill.yaml", pe)
        L.roles["decode"] = serve("decode.yaml", lay["ep"])
        L.notes.append("trtllm-serve disaggregated (context and generation servers) joins the two: its "
                       "config names their URLs")
    else:
        L.files["serve.yaml"] = _yaml(options(lay["ep"], lay["attn_tp"], lay["running"], None, True))
        L.roles["serve"] = serve("serve.yaml", lay["ep"])
    return L


EMITTERS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}


def emit(row: Mapping, stack: str) -> Launch:
    """The launch configuration of one explorer row for `stack` (sglang, vllm or trtllm). A row
    without prefill_ep is aggregated serving (one command); with it, PD-disaggregated (a prefill and
    a decode command). Raises ValueError naming the stack, or the feature the stack cannot run."""
    if not isinstance(stack, str) or stack not in EMITTERS:
        raise ValueError(f"stack must be one of {', '.join(EMITTERS)}, got {stack!r}")
    lay = _layout(row)
    _common_checks(lay, stack)
    return EMITTERS[stack](lay)
