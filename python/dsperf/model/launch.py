"""A deployment the explorer chose, written as the serving stack's own launch configuration.

`emit(row, stack)` turns one row of `dsperf.explore.search` (a device, EP size, attention TP, batch,
MTP, KV dtype, overlap, redundant experts, and for disaggregated serving the prefill layout) into
the commands or config files of SGLang, vLLM or TensorRT-LLM, or of NVIDIA Dynamo running one of
them (launch_dynamo.py). Each stack's options were read from
its own documentation, whose version each Stack in STACKS names; where a stack has no option for what the
prediction assumed, the export either refuses (a layout the stack cannot run: an error naming the
feature and the stack) or says so in `notes` (an optimisation the stack lacks, so it runs slower
than predicted).

What is emitted is the parallel layout and the options the prediction depends on, the memory share
among them: the row's `mem_fraction` (the share of each GPU's memory the explorer gave weights and
KV cache, which set its batch limit) in each stack's own terms (Stack.memory_note). Paths, hosts and
ports are the operator's and are left as placeholders.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Mapping

import pandas as pd

from . import grounded
from .devices import device_metadata, load_device


@dataclass(frozen=True)
class Stack:
    """One serving stack, declared once: what every part of the export says of it."""
    name: str                        # as the stack spells itself
    source: str                      # where its option names come from (read 2026-11-26)
    memory_note: str | None = None   # how its memory option differs from dsperf's share (None: it is that share)
    router: str | None = None        # what joins its own prefill and decode instances (None: nothing to add)


STACKS = {
    # --mem-fraction-static is the share dsperf models; its router needs no note (documented there).
    "sglang": Stack("SGLang", "SGLang 0.5 server arguments (docs.sglang.io: server_arguments, expert_parallelism, "
                              "speculative decoding, PD disaggregation)"),
    "vllm": Stack("vLLM", "vLLM 0.12 (docs.vllm.ai/en/v0.12.0: serving/expert_parallel_deployment, engine arguments, "
                          "config/parallel EPLBConfig, speculative decoding, disaggregated prefill with NixlConnector)",
                  memory_note="vLLM's --gpu-memory-utilization also holds its activations and CUDA graphs: its KV "
                              "cache comes out smaller than the prediction's by them, and its batch limit lower",
                  router="a router in front of the prefill and decode instances is the operator's (vLLM's "
                         "disaggregated-prefill proxy, llm-d or Dynamo)"),
    "trtllm": Stack("TensorRT-LLM", "TensorRT-LLM 1.x PyTorch backend, trtllm-serve --extra_llm_api_options YAML (LLM "
                                    "API reference, DeepSeek-R1 best-performance practice)",
                    memory_note="free_gpu_memory_fraction is of the memory left once weights and activation buffers "
                                "are loaded (written from the weights dsperf prices): the activations make its KV "
                                "cache somewhat smaller than the prediction's",
                    router="trtllm-serve disaggregated (context and generation servers) joins the two: its config "
                           "names their URLs"),
    "dynamo": Stack("NVIDIA Dynamo", "NVIDIA Dynamo 1.x (docs.nvidia.com/dynamo v1.5; ai-dynamo/dynamo: "
                                     "docs/backends/sglang/dsr1-wideep-h100.md @119290c, "
                                     "recipes/deepseek-r1/sglang/disagg-16gpu/deploy.yaml @08ebb8b, "
                                     "recipes/deepseek-r1/vllm/disagg/deploy_hopper_16gpu.yaml @0044eb9, "
                                     "recipes/deepseek-r1/trtllm/disagg/wide_ep/gb200/deploy.yaml @09783f6, "
                                     "examples/backends/vllm/launch/disagg.sh @11bc2e8, DynamoGraphDeployment "
                                     "nvidia.com/v1alpha1)"),
}
# The checkpoint each weight format serves from: NVIDIA's NVFP4 ones for NVFP4 experts (the v2 one
# where wo is NVFP4 too), DeepSeek's own otherwise (its FP8 weights; a BF16 deployment upcasts them).
MODEL_PATHS = {name: "nvidia/DeepSeek-R1-0528-FP4-v2" if fmt.wo_fp4
               else "nvidia/DeepSeek-R1-FP4" if fmt.experts_fp4 else "deepseek-ai/DeepSeek-R1"
               for name, fmt in grounded.WEIGHT_FORMATS.items()}


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
    weight = grounded.weight_dtype_of_row(row, _get)
    lay = {
        "kind": kind, "device": str(row["device"]), "gpus_per_node": int(spec.gpus_per_node), "ep": ep,
        "attn_tp": attn_tp, "dp": max(1, ep // attn_tp), "moe_tp": int(_get(row, "moe_tp", 1)),
        "dense_tp": int(_get(row, "dense_tp", 1)), "batch": float(row["batch"]),
        "redundant": int(_get(row, "redundant_experts", 0)), "mtp": int(_get(row, "mtp", 0)),
        "kv_fp8": bool(_get(row, "kv_fp8", False)), "overlap": str(_get(row, "overlap", "none")),
        "weight": weight, "prefill_ep": _get(row, "prefill_ep"), "prefill_tokens": _get(row, "prefill_tokens"),
        "vendor": device_metadata(str(row["device"])).get("vendor", "nvidia"),
        "mem_gib": float(spec.mem_gb),
    }
    # The memory share the row's batch limit was computed with (a row of explore.search carries it;
    # a row without the field takes the grounded model's default, as the explorer would). A NaN
    # there is a value, not an absence: mem_share refuses it by name.
    given = row.get("mem_fraction") if hasattr(row, "get") else None
    lay["mem_fraction"] = grounded.mem_share(given)
    lay["mem_fraction_given"] = given is not None
    lay["nodes"] = max(1, math.ceil(ep / lay["gpus_per_node"]))
    # Requests each attention group runs at once: the batch per GPU times the GPUs of a TP group.
    lay["running"] = max(1, int(round(lay["batch"] * attn_tp)))
    return lay


def weights_gib(lay: dict, gpus: int, attn_tp: int) -> float:
    """GiB of weights on each GPU of an instance of `gpus` GPUs at attention TP attn_tp (the grounded
    model's memory fields, which do not depend on the batch)."""
    return float(grounded.memory(device=lay["device"], ep=gpus, attn_tp=attn_tp, redundant_experts=lay["redundant"],
                                 weight_dtype=lay["weight"], dense_tp=lay["dense_tp"],  # the model splits it over attn_tp too
                                 moe_tp=lay["moe_tp"])["weights_gib"])


def kv_room_gib(lay: dict, gpus: int, attn_tp: int) -> float:
    """GiB a GPU of the instance keeps for KV cache under the row's share: share x memory - weights.
    Raises ValueError naming mem_fraction where the weights take all of it."""
    w = weights_gib(lay, gpus, attn_tp)
    room = lay["mem_fraction"] * lay["mem_gib"] - w
    if room <= 0:
        raise ValueError(f"mem_fraction {lay['mem_fraction']:g}: the weights ({w:.1f} GiB a GPU on {gpus} GPUs) take "
                         f"all of that share of {lay['device']}'s {lay['mem_gib']:g} GiB, leaving no KV cache")
    return room


def trtllm_free_fraction(lay: dict, gpus: int, attn_tp: int) -> float:
    """TensorRT-LLM's kv_cache_config.free_gpu_memory_fraction that gives the KV cache what dsperf's
    share does. dsperf's share (SGLang's --mem-fraction-static) is of the whole memory, weights
    included: KV = share x memory - weights. TensorRT-LLM's fraction is of the memory left free once
    the weights are loaded: KV = fraction x (memory - weights). Hence (share x memory - weights) /
    (memory - weights)."""
    room = kv_room_gib(lay, gpus, attn_tp)
    weights = lay["mem_fraction"] * lay["mem_gib"] - room
    return room / (lay["mem_gib"] - weights)


def _memory_notes(lay: dict, engine: str) -> list[str]:
    """What to tell the operator about the memory option of `engine` (an ENGINES key)."""
    note = STACKS[engine].memory_note
    notes = [] if note is None else [note]
    if not lay["mem_fraction_given"]:
        notes.append(f"the row has no mem_fraction: the grounded model's default share {lay['mem_fraction']:g} "
                     "(assumed) is written")
    return notes


def _spelled(stack: str) -> str:
    """A stack as it spells itself: a STACKS key, or already a phrase (Dynamo's "NVIDIA Dynamo with its
    vLLM backend")."""
    return STACKS[stack].name if stack in STACKS else stack


def _refuse(feature: str, stack: str, why: str):
    raise ValueError(f"{feature}: {_spelled(stack)} cannot run this layout ({why})")


# The builds the stacks' flags above were not read for: each vendor's own build of the stack takes
# other attention, MoE and all-to-all backends (and TensorRT-LLM and Dynamo's recipes are NVIDIA's).
OTHER_BUILDS = {"amd": "its ROCm build (other attention, fused-MoE and all-to-all backends)",
                "huawei": "its Ascend NPU build (torch_npu; other attention and MoE backends, no FP8)"}


def _common_checks(lay: dict, stack: str) -> None:
    if lay["vendor"] in OTHER_BUILDS:
        raise ValueError(f"device {lay['device']} ({lay['vendor']}): dsperf has no {STACKS[stack].name} "
                         "export for it: the flags it writes are those of the stack's NVIDIA-GPU build, read from "
                         f"its documentation for NVIDIA GPUs, not those of {OTHER_BUILDS[lay['vendor']]}")
    if lay["kind"] == "afd":
        _refuse("attention-FFN disaggregation (kind afd)", stack, "no documented option splits attention and "
                "experts onto separate GPUs")


def _join(args: list[str]) -> str:
    return " \\\n    ".join(args)


# ---- Engines --------------------------------------------------------------------------------------
# An engine's configuration of a row is kept apart from the program that starts it, because the same
# SGLang, vLLM or TensorRT-LLM flags are started either by the engine's own server or by a Dynamo
# worker (launch_dynamo.py).

@dataclass
class Instance:
    gpus: int
    args: list[str]              # the engine's own flags, without launcher and model
    config: str | None = None    # TensorRT-LLM: the name of its engine YAML in Engine.files
    attn_tp: int = 1             # its attention TP group (a prefill instance: DP attention)


@dataclass
class Engine:
    instances: dict[str, Instance]            # serve, or prefill and decode
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _split(lay: dict, serve_or_decode, prefill) -> dict[str, Instance]:
    """A row's instances: one serving instance, or with a prefill layout a prefill and a decode one."""
    if not lay["prefill_ep"]:
        return {"serve": serve_or_decode("serve")}
    return {"prefill": prefill(), "decode": serve_or_decode("decode")}


# ---- SGLang ---------------------------------------------------------------------------------------

def _sglang_args(lay: dict, role: str, gpus: int, attn_tp: int, deepep_mode: str, running: int | None) -> list[str]:
    nodes = max(1, math.ceil(gpus / lay["gpus_per_node"]))
    a = ["--trust-remote-code", f"--tp-size {gpus}"]
    if attn_tp < gpus:
        a += [f"--dp-size {gpus // attn_tp}", "--enable-dp-attention"]
    a.append(f"--ep-size {gpus // lay['moe_tp']}")
    if grounded.SM.experts_share_attention_group(attn_tp, gpus):
        # Every GPU holds the group's tokens after the attention all-reduce: the model prices the MoE
        # as local expert selection and one all-reduce, SGLang's default path without an all-to-all.
        a.append("--moe-a2a-backend none")
    else:
        if lay["moe_tp"] > 1:
            _refuse(f"MoE tensor parallelism x expert parallelism with a dispatch (moe_tp {lay['moe_tp']})", "sglang",
                    "--moe-a2a-backend deepep sets --ep-size to --tp-size, pure EP (its server_args' a2a handling)")
        a += ["--moe-a2a-backend deepep", f"--deepep-mode {deepep_mode}"]
    if _dense_group(lay, attn_tp) == 1:
        a.append("--moe-dense-tp-size 1")  # else SGLang's default: the whole TP group
    if nodes > 1:
        a += [f"--nnodes {nodes}", "--node-rank <rank>", "--dist-init-addr <host>:<port>"]
    if lay["redundant"]:
        a += [f"--ep-num-redundant-experts {lay['redundant']}", "--enable-eplb"]
    if lay["overlap"] == "two_batch" and not _two_batch_without_a2a(lay, attn_tp, gpus):
        a.append("--enable-two-batch-overlap")
    elif lay["overlap"] == "single_batch":
        a.append("--enable-single-batch-overlap")
    kv_room_gib(lay, gpus, attn_tp)   # refuses a share the weights alone fill
    a.append(f"--mem-fraction-static {lay['mem_fraction']:.3g}")
    if lay["kv_fp8"]:
        a.append("--kv-cache-dtype fp8_e4m3")
    if grounded.WEIGHT_FORMATS[lay["weight"]].experts_fp4:
        a.append("--quantization modelopt_fp4")
    if role != "prefill" and lay["mtp"]:
        a += ["--speculative-algorithm EAGLE", f"--speculative-num-steps {lay['mtp']}",
              "--speculative-eagle-topk 1", f"--speculative-num-draft-tokens {lay['mtp'] + 1}"]
    if running is not None:
        a += [f"--max-running-requests {running * (gpus // attn_tp)}", f"--cuda-graph-max-bs {running}"]
    if role != "serve":
        a.append(f"--disaggregation-mode {role}")
    return a


def _dense_group(lay: dict, attn_tp: int) -> int:
    """The GPUs the dense MLP is split over, as priced: dense_tp, at least the attention group."""
    return max(lay["dense_tp"], attn_tp)


def _two_batch_without_a2a(lay: dict, attn_tp: int, gpus: int) -> bool:
    """Two-batch overlap on an instance whose experts share the TP group: SGLang refuses it without an
    all-to-all backend ("moe_a2a_backend cannot be 'none'") and vLLM's dual-batch overlap "only targets
    DP+EP deployments" (its docs/design/dbo.md): the instance runs without it."""
    return lay["overlap"] == "two_batch" and grounded.SM.experts_share_attention_group(attn_tp, gpus)


def _two_batch_notes(lay: dict, instances: dict[str, Instance], stack: str) -> list[str]:
    return [f"{role}: two-batch overlap runs in {STACKS[stack].name} only with an all-to-all, and these experts share "
            "the TP group (an all-reduce): it runs without it, slower than predicted"
            for role, inst in instances.items()
            if _two_batch_without_a2a(lay, inst.attn_tp, inst.gpus)]


def _sglang_notes(lay: dict, instances: dict[str, Instance]) -> list[str]:
    """Where SGLang runs an instance otherwise than priced: its --moe-dense-tp-size takes 1 or, by
    default, the whole TP group (its server_args assert 1 or None), so a dense group between them runs
    over the whole group; and two-batch overlap without an all-to-all (_two_batch_without_a2a)."""
    notes = []
    for role, inst in instances.items():
        dense = _dense_group(lay, inst.attn_tp)
        if 1 < dense < inst.gpus:
            notes.append(f"{role}: SGLang runs the dense MLP layers over the whole TP group of {inst.gpus} GPUs, where "
                         f"the prediction split them over {dense} (--moe-dense-tp-size takes 1 or the TP group)")
    return notes + _two_batch_notes(lay, instances, "sglang")


def _sglang_engine(lay: dict, stack: str) -> Engine:
    def serve_or_decode(role: str) -> Instance:
        mode = "auto" if role == "serve" else "low_latency"
        return Instance(lay["ep"], _sglang_args(lay, role, lay["ep"], lay["attn_tp"], mode, lay["running"]),
                        attn_tp=lay["attn_tp"])

    def prefill() -> Instance:
        pe = int(lay["prefill_ep"])
        chunk = [f"--chunked-prefill-size {int(lay['prefill_tokens'])}"] if lay["prefill_tokens"] else []
        return Instance(pe, _sglang_args(lay, "prefill", pe, 1, "normal", None) + chunk)

    instances = _split(lay, serve_or_decode, prefill)
    return Engine(instances, notes=_sglang_notes(lay, instances) + _memory_notes(lay, "sglang"))


# ---- vLLM -----------------------------------------------------------------------------------------

def _vllm_args(lay: dict, role: str, gpus: int, attn_tp: int, backend: str, running: int | None) -> list[str]:
    a = ["--trust-remote-code", f"--tensor-parallel-size {attn_tp}", f"--data-parallel-size {gpus // attn_tp}",
         "--enable-expert-parallel"]
    if not grounded.SM.experts_share_attention_group(attn_tp, gpus):
        # vLLM runs an all-to-all backend only with data parallelism (dp_size > 1, its
        # FusedMoEParallelConfig.use_all2all_kernels); experts sharing the one TP group all-reduce.
        a.append(f"--all2all-backend {backend}")
    nodes = max(1, math.ceil(gpus / lay["gpus_per_node"]))
    if nodes > 1:
        a += [f"--data-parallel-size-local {max(1, lay['gpus_per_node'] // attn_tp)}",
              "--data-parallel-address <host>", "--data-parallel-rpc-port <port>"]
    if lay["redundant"]:
        a += ["--enable-eplb", "--eplb-config '" + json.dumps({"num_redundant_experts": lay["redundant"]}) + "'"]
    if lay["overlap"] == "two_batch" and not _two_batch_without_a2a(lay, attn_tp, gpus):
        a.append("--enable-dbo")
    kv_room_gib(lay, gpus, attn_tp)   # refuses a share the weights alone fill
    a.append(f"--gpu-memory-utilization {lay['mem_fraction']:.3g}")
    if lay["kv_fp8"]:
        a.append("--kv-cache-dtype fp8")
    if role != "prefill" and lay["mtp"]:
        a.append("--speculative-config '" + json.dumps({"method": "deepseek_mtp",
                                                         "num_speculative_tokens": lay["mtp"]}) + "'")
    if running is not None:
        a.append(f"--max-num-seqs {running}")
    if role != "serve":
        a.append("--kv-transfer-config '" + json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}) + "'")
    return a


def _vllm_engine(lay: dict, stack: str) -> Engine:
    if lay["moe_tp"] > 1:
        _refuse(f"MoE tensor parallelism x expert parallelism (moe_tp {lay['moe_tp']})", stack,
                "--enable-expert-parallel makes the MoE group pure EP")
    if lay["attn_tp"] > lay["gpus_per_node"]:
        _refuse(f"a TP group over nodes (attn_tp {lay['attn_tp']} > {lay['gpus_per_node']} GPUs a node)", stack,
                "its engine spans one TP group over nodes through a Ray cluster, which this export does not write")

    def serve_or_decode(role: str) -> Instance:
        return Instance(lay["ep"], _vllm_args(lay, role, lay["ep"], lay["attn_tp"], "deepep_low_latency",
                                              lay["running"]), attn_tp=lay["attn_tp"])

    def prefill() -> Instance:
        pe = int(lay["prefill_ep"])
        tokens = [f"--max-num-batched-tokens {int(lay['prefill_tokens'])}"] if lay["prefill_tokens"] else []
        return Instance(pe, _vllm_args(lay, "prefill", pe, 1, "deepep_high_throughput", None) + tokens)

    notes = []
    if lay["overlap"] == "single_batch":
        notes.append("single-batch overlap (dispatch under the shared expert) has no vLLM option: it runs "
                     "without it, slower than predicted")
    instances = _split(lay, serve_or_decode, prefill)
    for role, inst in instances.items():
        if _dense_group(lay, inst.attn_tp) > inst.attn_tp:
            # A data-parallel rank is a whole replica but for the experts: its dense MLP is split
            # over its tensor-parallel group only.
            notes.append(f"{role}: vLLM splits the dense MLP layers over each data-parallel rank's {inst.attn_tp} "
                         f"GPU(s), where the prediction split them over {_dense_group(lay, inst.attn_tp)} (dense_tp)")
    return Engine(instances, notes=notes + _two_batch_notes(lay, instances, "vllm") + _memory_notes(lay, "vllm"))


# ---- TensorRT-LLM ---------------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_/.][A-Za-z0-9_./@+=-]*")


def _scalar(v) -> str:
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, str) and not _PLAIN.fullmatch(v):
        return json.dumps(v)      # a JSON string is a valid double-quoted YAML scalar
    return str(v)


def _yaml(d: Mapping, indent=0) -> str:
    """YAML of nested mappings, lists and scalars; a multi-line string becomes a literal block."""
    pad, lines = " " * indent, []
    for k, v in d.items():
        if isinstance(v, Mapping):
            lines += [f"{pad}{k}:", _yaml(v, indent + 2)]
        elif isinstance(v, list):
            lines.append(f"{pad}{k}:")
            for item in v:
                if isinstance(item, Mapping):
                    body = _yaml(item, indent + 2)
                    lines.append(f"{pad}- " + body[indent + 2:])
                elif isinstance(item, str) and "\n" in item:
                    lines += [f"{pad}- |"] + [f"{pad}  {line}" for line in item.split("\n")]
                else:
                    lines.append(f"{pad}- {_scalar(item)}")
        elif isinstance(v, str) and "\n" in v:
            lines += [f"{pad}{k}: |"] + [f"{pad}  {line}" for line in v.split("\n")]
        else:
            lines.append(f"{pad}{k}: {_scalar(v)}")
    return "\n".join(lines)


def _trtllm_options(lay: dict, gpus: int, attn_tp: int, running: int | None, tokens: int | None,
                    decode: bool) -> dict:
    o = {"tensor_parallel_size": gpus, "moe_expert_parallel_size": gpus // lay["moe_tp"],
         "enable_attention_dp": attn_tp == 1 and gpus > 1}
    if lay["moe_tp"] > 1:
        o["moe_tensor_parallel_size"] = lay["moe_tp"]
    if running is not None:
        o["max_batch_size"] = running
        o["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": running}
    if tokens:
        o["max_num_tokens"] = tokens
    o["kv_cache_config"] = {"dtype": "fp8" if lay["kv_fp8"] else "auto",
                            "free_gpu_memory_fraction": round(trtllm_free_fraction(lay, gpus, attn_tp), 3)}
    o["moe_config"] = {"backend": "TRTLLM" if grounded.WEIGHT_FORMATS[lay["weight"]].experts_fp4 else "DEEPGEMM"}
    if decode and lay["mtp"]:
        o["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": lay["mtp"]}
    return o


def _trtllm_engine(lay: dict, stack: str) -> Engine:
    if 1 < lay["attn_tp"] < lay["ep"]:
        _refuse(f"attention TP {lay['attn_tp']} of an instance's {lay['ep']} GPUs (data parallel over TP groups)", stack,
                "its attention is data-parallel over every GPU of the instance, enable_attention_dp, or "
                "tensor-parallel over all of them")
    # TensorRT-LLM takes its layout from an engine YAML, not flags: each instance names its file.
    files: dict[str, str] = {}
    transfer = {"cache_transceiver_config": {"backend": "DEFAULT"}} if lay["prefill_ep"] else {}

    def instance(role: str, gpus: int, attn_tp: int, running, tokens, decode: bool) -> Instance:
        files[f"{role}.yaml"] = _yaml({**_trtllm_options(lay, gpus, attn_tp, running, tokens, decode), **transfer})
        return Instance(gpus, [], config=f"{role}.yaml", attn_tp=attn_tp)

    def serve_or_decode(role: str) -> Instance:
        return instance(role, lay["ep"], lay["attn_tp"], lay["running"], None, True)

    def prefill() -> Instance:
        tokens = int(lay["prefill_tokens"]) if lay["prefill_tokens"] else None
        return instance("prefill", int(lay["prefill_ep"]), 1, None, tokens, False)

    notes = []
    if lay["overlap"] in ("two_batch", "single_batch"):
        notes.append(f"{lay['overlap'].replace('_', '-')} overlap has no option in dsperf's TensorRT-LLM export: "
                     "the emitted configuration runs without it, slower than the prediction assumed")
    instances = _split(lay, serve_or_decode, prefill)
    for role, inst in instances.items():
        # TensorRT-LLM's own split of the dense MLP (modeling_deepseekv3.py, _compute_mlp_tp_size): none
        # under attention DP; else the TP group, within one node ("to avoid expensive inter-node allreduce").
        ours = 1 if inst.attn_tp == 1 else min(inst.gpus, lay["gpus_per_node"])
        if ours != _dense_group(lay, inst.attn_tp):
            notes.append(f"{role}: TensorRT-LLM splits the dense MLP layers over {ours} GPU(s) (none under attention "
                         f"DP, else the TP group within a node), where the prediction split them over "
                         f"{_dense_group(lay, inst.attn_tp)}")
    return Engine(instances, files=files, notes=notes + _memory_notes(lay, "trtllm"))


ENGINES = {"sglang": _sglang_engine, "vllm": _vllm_engine, "trtllm": _trtllm_engine}


# ---- Each engine's own server ---------------------------------------------------------------------

def _trtllm_serve(lay: dict, inst: Instance) -> list[str]:
    return [f"trtllm-serve {MODEL_PATHS[lay['weight']]} --backend pytorch --tp_size {inst.gpus} "
            f"--ep_size {inst.gpus // lay['moe_tp']} --extra_llm_api_options {inst.config}"]


NATIVE_HEADS = {
    "sglang": lambda lay, inst: ["python -m sglang.launch_server", f"--model-path {MODEL_PATHS[lay['weight']]}"],
    "vllm": lambda lay, inst: [f"vllm serve {MODEL_PATHS[lay['weight']]}"],
    "trtllm": _trtllm_serve,
}


def _native(stack: str):
    def emitter(lay: dict) -> Launch:
        eng = ENGINES[stack](lay, stack)
        L = Launch(stack, {}, files=eng.files, notes=list(eng.notes), source=STACKS[stack].source)
        for role, inst in eng.instances.items():
            L.roles[role] = _join(NATIVE_HEADS[stack](lay, inst) + inst.args)
        if "prefill" in eng.instances and STACKS[stack].router is not None:
            L.notes.append(STACKS[stack].router)
        return L
    return emitter


def _dynamo(lay: dict, backend: str | None = None) -> Launch:
    from .launch_dynamo import dynamo      # its own module; it builds on ENGINES above
    return dynamo(lay, "sglang" if backend is None else backend)


EMITTERS = {stack: _native(stack) for stack in ENGINES}
EMITTERS["dynamo"] = _dynamo               # the stacks that take a backend: their engine


def emit(row: Mapping, stack: str, backend: str | None = None) -> Launch:
    """The launch configuration of one explorer row for `stack` (sglang, vllm, trtllm or dynamo; for
    dynamo, `backend` names the engine its workers run: sglang (default), vllm or trtllm). A row
    without prefill_ep is aggregated serving (one instance); with it, PD-disaggregated (a prefill and
    a decode instance). Raises ValueError naming the stack or backend, or the feature the stack
    cannot run."""
    _check_stack(stack, backend)
    lay = _layout(row)
    _common_checks(lay, stack)
    return EMITTERS[stack](lay) if backend is None else EMITTERS[stack](lay, backend)


def _check_stack(stack, backend) -> None:
    if not isinstance(stack, str) or stack not in EMITTERS:
        raise ValueError(f"stack must be one of {', '.join(EMITTERS)}, got {stack!r}")
    if backend is not None and stack != "dynamo":
        raise ValueError(f"backend: only the dynamo stack runs another engine, got backend {backend!r} "
                         f"for stack {stack!r}")


def emit_best(rows, stack: str, backend: str | None = None) -> tuple[Launch, int, list[str]]:
    """The launch of the first of `rows` (a frame of explorer rows, best first) that `stack` can run:
    (its launch, its position, why each row before it was refused). Raises the first row's
    ValueError where the stack runs none of them."""
    _check_stack(stack, backend)
    if not isinstance(rows, pd.DataFrame):
        raise ValueError(f"rows must be a pandas DataFrame of explorer rows, got {type(rows).__name__}")
    refused = []
    for i, (_, row) in enumerate(rows.iterrows()):
        try:
            return emit(row, stack, backend), i, refused
        except ValueError as e:
            refused.append(str(e))
    if not refused:
        raise ValueError("rows: no configuration to launch")
    raise ValueError(refused[0])
