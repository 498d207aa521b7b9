"""An explorer row served by NVIDIA Dynamo: its frontend and one worker per instance, each worker
running the SGLang, vLLM or TensorRT-LLM engine that launch.py configures.

Dynamo's workers take their engine's own flags (`python3 -m dynamo.sglang` reads SGLang's server
arguments, `dynamo.vllm` vLLM's engine arguments, `dynamo.trtllm` TensorRT-LLM's engine YAML), so the
engine part comes from launch.ENGINES unchanged and this module adds only what Dynamo adds: the
worker module, its role in disaggregated serving, the frontend that routes requests to prefill and
then decode, and a DynamoGraphDeployment for Kubernetes shaped like Dynamo's DeepSeek-R1 recipes.
Option names and layout: launch.STACKS["dynamo"].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .launch import ENGINES, MODEL_PATHS, STACKS, Engine, Instance, Launch, _join, _yaml

FRONTEND = "python3 -m dynamo.frontend"    # OpenAI HTTP on its default port 8000; routes prefill, then decode


def _sglang_roles(lay: dict, role: str, inst: Instance, config_dir: str) -> list[str]:
    # Dynamo tokenizes in its frontend, so the worker skips SGLang's tokenizer (every Dynamo recipe
    # passes it). SGLang's own --disaggregation-mode is already among the engine flags; the recipes
    # move the KV cache over NIXL and make the prefill pick DP ranks round-robin so that a decode
    # with DP attention can tell which rank holds a request.
    flags = ["--skip-tokenizer-init"]
    if role == "prefill":
        flags += ["--disaggregation-transfer-backend nixl", "--load-balance-method round_robin"]
    elif role == "decode":
        flags.append("--disaggregation-transfer-backend nixl")
        if lay["attn_tp"] < inst.gpus:
            flags.append("--prefill-round-robin-balance")
    return flags


def _mode(role: str) -> list[str]:
    # dynamo.vllm and dynamo.trtllm name the role themselves (vLLM's --is-prefill-worker is deprecated for it).
    return [] if role == "serve" else [f"--disaggregation-mode {role}"]


def _vllm_roles(lay: dict, role: str, inst: Instance, config_dir: str) -> list[str]:
    return _mode(role)


def _trtllm_roles(lay: dict, role: str, inst: Instance, config_dir: str) -> list[str]:
    return [f"--extra-engine-args {config_dir}{inst.config}"] + _mode(role)


@dataclass(frozen=True)
class Backend:
    module: str               # the Dynamo worker: python3 -m <module>
    model_flag: str
    image: str                # Dynamo's runtime container for this engine
    roles: Callable[[dict, str, Instance, str], list[str]]
    multinode: tuple[str, ...] = ()   # flags the DynamoGraphDeployment recipes add when a worker spans nodes


BACKENDS = {
    "sglang": Backend("dynamo.sglang", "--model-path", "nvcr.io/nvidia/ai-dynamo/sglang-runtime:<version>",
                      _sglang_roles),
    "vllm": Backend("dynamo.vllm", "--model", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:<version>",
                    _vllm_roles, ("--data-parallel-hybrid-lb",)),
    "trtllm": Backend("dynamo.trtllm", "--model-path",
                      "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:<version>", _trtllm_roles),
}
# On Kubernetes the operator wires a multinode worker's ranks and rendezvous (Dynamo's deployment
# guide: --dist-init-addr/--nnodes for SGLang, its own for vLLM and TensorRT-LLM), so these
# per-node flags of the command-line form are left out of the DynamoGraphDeployment.
OPERATOR_WIRED = {"--nnodes", "--node-rank", "--dist-init-addr", "--data-parallel-size-local",
                  "--data-parallel-address", "--data-parallel-rpc-port"}
CONFIG_DIR = "/config/"       # where the DynamoGraphDeployment mounts TensorRT-LLM's engine YAML


def _worker(lay: dict, b: Backend, role: str, inst: Instance, args: list[str], config_dir: str = "") -> str:
    head = [f"python3 -m {b.module}", f"{b.model_flag} {MODEL_PATHS[lay['weight']]}"]
    return _join(head + args + b.roles(lay, role, inst, config_dir))


# A pod is one host. On NVL72 racks dsperf's gpus_per_node is the NVLink domain (72), while a host
# (compute tray) has 4 GPUs: the GB200 recipe asks gpu "4" per pod and counts trays in nodeCount.
GPUS_PER_HOST = {"GB200": 4, "GB300": 4}


def _host_gpus(lay: dict) -> int:
    return GPUS_PER_HOST.get(lay["device"], lay["gpus_per_node"])


def _nodes(lay: dict, inst: Instance) -> int:
    return max(1, -(-inst.gpus // _host_gpus(lay)))


def _container(b: Backend, command: str) -> dict:
    return {"image": b.image, "command": ["/bin/sh", "-c"], "args": [command]}


def _worker_service(lay: dict, b: Backend, role: str, inst: Instance, configmap: str | None) -> dict:
    nodes = _nodes(lay, inst)
    args = [a for a in inst.args if a.split()[0] not in OPERATOR_WIRED] + (list(b.multinode) if nodes > 1 else [])
    container = _container(b, _worker(lay, b, role, inst, args, CONFIG_DIR))
    svc = {"componentType": "worker"}
    if role != "serve":
        svc["subComponentType"] = role
    svc["replicas"] = 1
    if nodes > 1:
        svc["multinode"] = {"nodeCount": nodes}
    svc["resources"] = {"limits": {"gpu": str(min(inst.gpus, _host_gpus(lay)))}}
    pod = {"mainContainer": container}
    if configmap:
        container["volumeMounts"] = [{"name": "engine-config", "mountPath": CONFIG_DIR.rstrip("/")}]
        pod["volumes"] = [{"name": "engine-config", "configMap": {"name": configmap}}]
    svc["extraPodSpec"] = pod
    return svc


def _graph(lay: dict, backend: str, eng: Engine) -> str:
    """A DynamoGraphDeployment (nvidia.com/v1alpha1, as the DeepSeek-R1 recipes write it); TensorRT-LLM's
    engine YAML goes in a ConfigMap mounted at /config, as its recipe does."""
    b = BACKENDS[backend]
    name = f"dsperf-{backend}-{'disagg' if 'prefill' in eng.instances else 'agg'}"
    configmap = f"{name}-engine-config" if eng.files else None
    services = {"Frontend": {"componentType": "frontend", "replicas": 1,
                             "extraPodSpec": {"mainContainer": _container(b, FRONTEND)}}}
    for role, inst in eng.instances.items():
        services[role] = _worker_service(lay, b, role, inst, configmap)
    docs = []
    if configmap:
        docs.append(_yaml({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": configmap},
                           "data": dict(eng.files)}))
    docs.append(_yaml({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                       "metadata": {"name": name}, "spec": {"backendFramework": backend, "services": services}}))
    return "\n---\n".join(docs) + "\n"


def dynamo(lay: dict, backend: str = "sglang") -> Launch:
    """The Dynamo launch of a checked layout (launch._layout): the frontend and worker command lines
    (a worker spanning nodes is started on each as its engine's own flags say, e.g. SGLang's
    --node-rank) and the same deployment as a DynamoGraphDeployment in files['dynamo.yaml']."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    b = BACKENDS[backend]
    eng = ENGINES[backend](lay, f"NVIDIA Dynamo with its {STACKS[backend].name} backend")
    L = Launch("dynamo", {"frontend": FRONTEND}, files=dict(eng.files), notes=list(eng.notes),
               source=f"{STACKS['dynamo'].source}; backend {STACKS[backend].name}: {STACKS[backend].source}")
    for role, inst in eng.instances.items():
        L.roles[role] = _worker(lay, b, role, inst, inst.args)
    L.files["dynamo.yaml"] = _graph(lay, backend, eng)
    L.notes.append("Dynamo's runtime services that the frontend and workers find each other through "
                   "(outside Kubernetes), the hosts, ports and container image tag are the operator's")
    return L
