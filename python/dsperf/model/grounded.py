"""The grounded model: a prefill or decode step priced as the kernel calls a DeepSeek-style serving
system runs, each at the efficiency a published kernel benchmark measured at that shape.

The C++ core (csrc/grounded/step_model.cpp; one layer's calls in layer_calls.cpp) lists the
calls of one layer (every MLA GEMM, the attention core, norms, gate, dispatch, shared and routed
experts, combine, dense MLP, LM head, MTP drafts), prices each from its FLOPs and bytes (the kernel
cost model's work functions) on the device's datasheet roofline (its FLOPs at the device's
sustained_clock_ratio of the clock the tables ran at) divided by the efficiency read from
data/efficiency/<table>.csv, and schedules them on a compute and a communication stream (two-batch
overlap, single-batch overlap or none). Where a family has no table row, the roofline at a default
efficiency prices it and the result counts the call as such (``calls_default``).

    >>> from dsperf import grounded
    >>> grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4989, ep=128)["tokens_per_gpu_s"]
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from .. import _C
from .._checks import flag, finite_results, number
from .devices import DeviceLike, DeviceSpec, kernel_table_name, list_devices, load_device, tables_dir  # noqa: F401
from .configs import load_model
from . import bands
# The table files' reader and resolver, part of this module's API (grounded.kernel_tables, ...).
from .table_files import (DEFAULT_EFFICIENCY, FAMILIES, SHAPE_COLUMNS, device_pricing,  # noqa: F401
                          kernel_tables, measured_tables_dir, read_table_rows, row_label, row_shape, table_kind)

SM = _C.step_model
OVERLAPS = tuple(SM.OVERLAPS)  # the overlap schedules, named once in C++ (step_model.hpp)


# How the weights are stored, declared once in C++ (csrc/grounded/weight_format.hpp: each format's
# name, the checkpoint it describes and its flags): a WeightFormat holds the flags a Deployment
# carries (weights_fp8: FP8 block-scaled outside the NVFP4 modules, else BF16; experts_fp4: NVFP4
# routed and shared experts; wo_fp4: NVFP4 attention output projection), WEIGHT_FORMATS names them
# ("fp8", "bf16", "fp4", "fp4_bf16", "fp4_v2").
WeightFormat = NamedTuple("WeightFormat", [(flag, bool) for flag in SM.WEIGHT_FLAGS])
WEIGHT_FORMATS = {name: WeightFormat(*flags) for name, flags in SM.WEIGHT_FORMATS}
WEIGHT_DTYPES = tuple(WEIGHT_FORMATS)


def weight_dtype_of(*flags) -> str:
    """The WEIGHT_FORMATS name of a row's flags, given in WeightFormat's field order (an explorer
    row's weights_fp8, experts_fp4, wo_fp4)."""
    if len(flags) != len(WeightFormat._fields):
        raise ValueError(f"weight_dtype_of takes the {len(WeightFormat._fields)} flags "
                         f"{', '.join(WeightFormat._fields)}, got {len(flags)}")
    fmt = WeightFormat(*(bool(f) for f in flags))
    name = SM.weight_dtype_of(list(fmt))  # the one lookup, C++'s (weight_format.hpp)
    if name is not None:
        return name
    given = ", ".join(f"{k}={v}" for k, v in fmt._asdict().items())
    raise ValueError(f"{given} name no weight format (WEIGHT_FORMATS: {', '.join(WEIGHT_DTYPES)})")


def weight_dtype_of_row(row, get=None) -> str:
    """The WEIGHT_FORMATS name of a row's WeightFormat fields (an explorer row, a launch row): a field
    the row lacks reads as DeepSeek's FP8 checkpoint has it. get(row, field, default): how to read one
    (default: row.get)."""
    read = get or (lambda r, k, d: r.get(k, d))
    return weight_dtype_of(*(read(row, k, d) for k, d in zip(WeightFormat._fields, WEIGHT_FORMATS["fp8"])))


# Argument checks: the rules live in dsperf._checks (bool is not a number, floats are not integers,
# every value finite and bounded, errors name the argument).
def _check_real(name, v, lo, hi, low_open=False) -> float:
    return number(name, v, lo=lo, hi=hi, lo_open=low_open)


def _check_int(name, v, lo, hi) -> int:
    return number(name, v, integer=True, lo=lo, hi=hi)


_check_bool = flag


# Each numeric field's bounds, declared once with the field in C++ (step_model.hpp's
# DSPERF_DEPLOYMENT_FIELDS): name -> (lowest, highest, sentinel or None).
DEPLOYMENT_BOUNDS = dict(SM.Deployment.BOUNDS)


def _field(name, value, lo=None):
    """A deployment field checked against its declared bounds (lo: a tighter lower bound the
    relation to another field sets); integers stay integers. None asks for the field's sentinel."""
    flo, hi, sentinel = DEPLOYMENT_BOUNDS[name]
    if value is None and sentinel is not None:
        return type(getattr(SM.Deployment(), name))(sentinel)
    if isinstance(getattr(SM.Deployment(), name), int):
        return _check_int(name, value, int(flo), int(hi))
    return _check_real(name, value, flo if lo is None else max(flo, lo), hi)


def mem_share(value=None) -> float:
    """The share of each GPU's memory the stack gives weights and KV cache: `value` checked against
    the Deployment field's bounds (naming mem_fraction), or the model's assumed default where None."""
    return SM.memory_reserve if value is None else _field("mem_fraction", value)


def _deployment(phase: str, *, attn_tp, ep, redundant_experts, batch=128, tokens=16384, prompt_len=4096,
                cached_prefix=0, kv_len=4989, overlap="two_batch", mtp=0, mtp_accepted=0.0, kv_fp8=False,
                attn_fp8=False, dispatch_fp8=True, dispatch_fp4=False, imbalance=1.0, comm_sms=None,
                step_overhead_ms=None, weight_dtype="fp8", dense_tp=1, moe_tp=1, eager_launch_us=0.0,
                mem_fraction=None) -> "SM.Deployment":
    """The C++ Deployment of a call's arguments, each checked against its declared bounds and named."""
    d = SM.Deployment()
    d.phase = phase
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    d.overlap = overlap
    d.attn_tp = _field("attn_tp", attn_tp)
    values = dict(ep=ep, redundant_experts=redundant_experts, tokens=tokens, prompt_len=prompt_len,
                  cached_prefix=cached_prefix, kv_len=kv_len, mtp=mtp, mtp_accepted=mtp_accepted, dense_tp=dense_tp,
                  moe_tp=moe_tp, imbalance=imbalance, comm_sms=comm_sms, step_overhead_ms=step_overhead_ms,
                  eager_launch_us=eager_launch_us)
    if mem_fraction is not None:  # else the field's default (SM.memory_reserve, assumed)
        values["mem_fraction"] = mem_fraction
    for name, value in values.items():
        setattr(d, name, _field(name, value))
    d.batch = _field("batch", batch, lo=1 / d.attn_tp)  # a TP group serves batch x attn_tp requests: at least one
    d.kv_fp8 = _check_bool("kv_fp8", kv_fp8)
    d.attn_fp8 = _check_bool("attn_fp8", attn_fp8)
    d.dispatch_fp8 = _check_bool("dispatch_fp8", dispatch_fp8)
    d.dispatch_fp4 = _check_bool("dispatch_fp4", dispatch_fp4)
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {weight_dtype!r}")
    d.weight_dtype = weight_dtype
    return d


def _spec(device: DeviceLike) -> DeviceSpec:
    """The device a call prices: a DeviceSpec as given, else the shipped or file device, datasheet values."""
    return device if isinstance(device, DeviceSpec) else load_device(device, "corrected")


def _run(model, device, dep, default_efficiency):
    m = load_model(model)
    spec = _spec(device)
    out = SM.step(m, spec, kernel_tables(device, default_efficiency), dep)  # validates the deployment (names the field)
    out["device"] = spec.name
    out["sustained_clock_ratio"] = spec.sustained_clock_ratio
    regime = (table_kind(device), dep.phase, bands.bound_of(dep.phase, dep.batch if dep.phase == "decode" else None))
    out["error_band"], out["band_points"], out["band_regime"] = bands.lookup(*regime)
    out["regime"] = "/".join(regime)
    finite_results(f"grounded.{dep.phase}", {k: v for k, v in out.items() if k != "error_band"})
    return out


def error_band(phase: str, device: DeviceLike = "H800", batch=None) -> float:
    """The error band a prediction of this phase on this device carries (batch: decode requests per
    GPU, which decides whether the step is latency-bound): the leave-one-out band of its regime
    (dsperf.model.bands, data/validation/bands.csv)."""
    return bands.lookup(table_kind(device), phase, bands.bound_of(phase, batch))[0]


def error_bands(phase: str, kinds, code, batch) -> np.ndarray:
    """error_band per row of a grid: the table kind kinds[code[i]] (device_pricing's) at batch[i]."""
    code, batch = np.asarray(code), np.asarray(batch, dtype=float)
    latency = batch < bands.LATENCY_BATCH if phase == "decode" else np.zeros(len(batch), dtype=bool)
    by_latency = np.array([[bands.lookup(k, phase, bands.bound_of(phase, None))[0],
                            bands.lookup(k, phase, bands.bound_of(phase, 1))[0]] for k in kinds])
    return by_latency[code, latency.astype(int)]


def decode(model="DeepSeek-V3", device: DeviceLike = "H800", *, batch=128, kv_len=4989, ep=128, attn_tp=1,
           redundant_experts=0, overlap="two_batch", mtp=0, mtp_accepted=0.0, kv_fp8=False, attn_fp8=False,
           dispatch_fp8=True, dispatch_fp4=False, imbalance=1.0, comm_sms=None, step_overhead_ms=None,
           weight_dtype="fp8", dense_tp=1, moe_tp=1, eager_launch_us=0.0, mem_fraction=None,
           default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """One decode step per GPU: step_ms, tpot_ms, tps_user, tokens_per_gpu_s, the memory-limited
    batch (batch_limit, fits_memory), the per-layer times and the priced calls (``calls``).

    batch: requests per GPU; kv_len: their average context; ep: GPUs sharing the routed experts;
    attn_tp: attention TP (1 = DP attention); mtp / mtp_accepted: draft tokens per step and how many
    are accepted on average; imbalance: max/mean routed load per GPU (at least routing_skew's);
    kv_fp8: FlashMLA's FP8 latent cache; dispatch_fp4: the tokens dispatched in NVFP4 (TensorRT-LLM's
    all-to-all after quantisation, its default with NVFP4 experts; over dispatch_fp8); attn_fp8: the
    attention math in FP8 too (FP8 queries and cache on the FP8 tensor cores, as TensorRT-LLM's FP8 MQA;
    priced from the attention rows);
    weight_dtype: a WEIGHT_FORMATS name: "fp8", "bf16", "fp4" (NVFP4 experts, FP8 elsewhere; a device
    with fp4_tflops), "fp4_bf16" (NVFP4 experts, BF16 elsewhere) or "fp4_v2" (NVFP4 experts and wo);
    dense_tp: the dense MLP split over this many GPUs (1: DP; at least attn_tp, which also splits the LM
    head, and the shared experts where ep == attn_tp: docs/GROUNDED_MODEL.md); moe_tp: each routed expert split over
    this many of the ep GPUs (ep / moe_tp expert groups; 1: pure EP); eager_launch_us: the host's
    time to launch one kernel when the step runs eagerly, without CUDA graphs (0, the default: one
    graph replay). Eager, the step takes at least `launches` x eager_launch_us (``launch_ms``): the
    GPU waits wherever its kernels are shorter than their launches. mem_fraction: the share of each
    GPU's memory the stack gives weights and the KV cache (SGLang's --mem-fraction-static; None: 0.9,
    assumed), which sets batch_limit."""
    dep = _deployment("decode", batch=batch, kv_len=kv_len, ep=ep, attn_tp=attn_tp,
                      redundant_experts=redundant_experts, overlap=overlap, mtp=mtp, mtp_accepted=mtp_accepted,
                      kv_fp8=kv_fp8, attn_fp8=attn_fp8, dispatch_fp8=dispatch_fp8, dispatch_fp4=dispatch_fp4,
                      imbalance=imbalance,
                      comm_sms=comm_sms, step_overhead_ms=step_overhead_ms, weight_dtype=weight_dtype,
                      dense_tp=dense_tp, moe_tp=moe_tp, eager_launch_us=eager_launch_us, mem_fraction=mem_fraction)
    return _run(model, device, dep, default_efficiency)


def memory(model="DeepSeek-V3", device: DeviceLike = "H800", *, batch=1, kv_len=1, ep=8, attn_tp=1,
           redundant_experts=0, kv_fp8=False, weight_dtype="fp8", dense_tp=1, moe_tp=1, mem_fraction=None) -> dict:
    """A decode deployment's memory per GPU alone, no kernel priced (the memory fields decode returns):
    weights_gib, kv_gib (the batch's latent cache at kv_len), kv_bytes_per_token, batch_limit and
    fits_memory. The weights do not depend on batch or kv_len. Arguments as decode's."""
    dep = _deployment("decode", batch=batch, kv_len=kv_len, ep=ep, attn_tp=attn_tp,
                      redundant_experts=redundant_experts, kv_fp8=kv_fp8, weight_dtype=weight_dtype,
                      dense_tp=dense_tp, moe_tp=moe_tp, mem_fraction=mem_fraction)
    out = SM.memory(load_model(model), _spec(device), dep)  # validates the deployment (names the field)
    finite_results("grounded.memory", out)
    return out


def prefill(model="DeepSeek-V3", device: DeviceLike = "H800", *, tokens=16384, prompt_len=4096, cached_prefix=0,
            ep=32, attn_tp=1, redundant_experts=0, overlap="two_batch", dispatch_fp8=True, dispatch_fp4=False,
            imbalance=1.0, comm_sms=None, step_overhead_ms=None, weight_dtype="fp8", dense_tp=1, moe_tp=1,
            eager_launch_us=0.0, mem_fraction=None, default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """One prefill step per GPU: `tokens` new prompt tokens per GPU (prompts of `prompt_len`, of
    which `cached_prefix` come from the prefix cache). Returns step_ms, tokens_per_gpu_s, the
    per-layer times and the priced calls (``calls``). eager_launch_us: as decode's (prefill's
    kernels are long, so the launch bound seldom binds); mem_fraction: as decode's (fits_memory)."""
    dep = _deployment("prefill", tokens=tokens, prompt_len=prompt_len, cached_prefix=cached_prefix, ep=ep,
                      attn_tp=attn_tp, redundant_experts=redundant_experts, overlap=overlap,
                      dispatch_fp8=dispatch_fp8, dispatch_fp4=dispatch_fp4, imbalance=imbalance, comm_sms=comm_sms,
                      step_overhead_ms=step_overhead_ms, weight_dtype=weight_dtype, dense_tp=dense_tp, moe_tp=moe_tp,
                      eager_launch_us=eager_launch_us, mem_fraction=mem_fraction)
    return _run(model, device, dep, default_efficiency)


def lockstep_step_ms(decode_step_ms, chunk_ms, emitted_per_step, *, isl, osl, chunk_tokens, ranks):
    """The mean step of aggregated serving with data-parallel attention, milliseconds (numpy arrays
    broadcast).

    Each of `ranks` DP ranks holds a decode batch that emits `emitted_per_step` tokens a step; a
    finished request is replaced by a new one, whose prompt of `isl` tokens enters in chunks of at
    most `chunk_tokens` (the server's token budget per step), one chunk per rank and step. The MoE
    layers' all-to-all lock-steps the ranks, so a chunk on any rank holds every rank's step: a
    step costs the decode step plus, with the chance that at least one rank runs a chunk, the
    chunk's layers (`chunk_ms`). With one rank this is the prefill share of each output token."""
    # The per-row inputs may hold NaN (the explorer's infeasible rows), which stays NaN in the result;
    # the request's sizes must be numbers.
    for name, v, low in (("decode_step_ms", decode_step_ms, 0), ("chunk_ms", chunk_ms, 0),
                         ("emitted_per_step", emitted_per_step, 0), ("ranks", ranks, 1)):
        if (np.asarray(v, dtype=float) < low).any():
            raise ValueError(f"{name} must be >= {low}")
    for name, v in (("isl", isl), ("osl", osl), ("chunk_tokens", chunk_tokens)):
        if not (np.isfinite(np.asarray(v, dtype=float)).all() and (np.asarray(v, dtype=float) >= 1).all()):
            raise ValueError(f"{name} must be finite and >= 1")
    chunks_per_prompt = np.ceil(isl / chunk_tokens)
    per_rank = np.minimum(1.0, chunks_per_prompt * emitted_per_step / osl)  # chance a rank runs a chunk
    any_rank = 1 - (1 - per_rank) ** ranks
    return decode_step_ms + any_rank * chunk_ms, any_rank


def aggregated(model="DeepSeek-V3", device: DeviceLike = "H800", *, isl=1024, osl=2048, batch=128, kv_len=None,
               max_num_tokens=None, ep=8, attn_tp=1, redundant_experts=0, overlap="none", mtp=0, mtp_accepted=0.0,
               kv_fp8=False, attn_fp8=False, dispatch_fp8=True, dispatch_fp4=False, imbalance=1.0, comm_sms=None,
               weight_dtype="fp8", dense_tp=1, moe_tp=1, default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """Aggregated serving (prefill and decode on the same GPUs, DP attention over the EP group):
    output tokens/s per GPU and per user, with every rank's decode step held by the prompt chunks
    of any rank (lockstep_step_ms).

    batch: requests per GPU; isl / osl: prompt and output tokens per request; kv_len: the context
    decode attends to (default isl + osl / 2); max_num_tokens: the server's tokens per step, which
    caps a prompt chunk (default: the whole prompt in one step). The chunk is priced as a prefill
    step of that many tokens on every GPU of the group (its fixed per-step overhead left out: the
    decode step already pays one)."""
    isl = _check_real("isl", isl, 1, 1e7)
    osl = _check_real("osl", osl, 1, 1e7)
    kv_len = isl + osl / 2 if kv_len is None else kv_len
    chunk = isl if max_num_tokens is None else min(isl, _check_real("max_num_tokens", max_num_tokens, 1, 1e7))
    common = dict(ep=ep, attn_tp=attn_tp, redundant_experts=redundant_experts, overlap=overlap,
                  dispatch_fp8=dispatch_fp8, dispatch_fp4=dispatch_fp4, imbalance=imbalance, comm_sms=comm_sms,
                  weight_dtype=weight_dtype, dense_tp=dense_tp, moe_tp=moe_tp, default_efficiency=default_efficiency)
    d = decode(model, device, batch=batch, kv_len=kv_len, mtp=mtp, mtp_accepted=mtp_accepted, kv_fp8=kv_fp8,
               attn_fp8=attn_fp8, **common)
    p = prefill(model, device, tokens=chunk, prompt_len=isl, **common)
    chunk_ms = p["step_ms"] - p["overhead_ms"]
    emitted = d["tokens_per_step"]
    step_ms, share = lockstep_step_ms(d["step_ms"], chunk_ms, emitted, isl=isl, osl=osl, chunk_tokens=chunk,
                                      ranks=max(1, ep // attn_tp))
    step_ms, share = float(step_ms), float(share)
    tpot = step_ms * batch / emitted  # each request emits emitted / batch tokens a step
    out = {"step_ms": step_ms, "decode_step_ms": d["step_ms"], "chunk_ms": chunk_ms, "chunk_tokens": chunk,
            "steps_with_chunk": share, "tokens_per_gpu_s": emitted / (step_ms / 1e3), "tpot_ms": tpot,
            "tps_user": 1e3 / tpot, "fits_memory": d["fits_memory"], "batch_limit": d["batch_limit"],
            "device": d["device"], "error_band": error_band("e2e", device),
            "regime": f"{table_kind(device)}/e2e/throughput"}
    finite_results("grounded.aggregated", {k: v for k, v in out.items() if k != "error_band"})
    return out


def calls_frame(result: Mapping) -> pd.DataFrame:
    """The priced calls of a step as a table: one row per kernel of a layer, its time per call,
    calls per step, the share of the step, its efficiency (of the datasheet roofline, or GB/s for
    communication; `us` prices the FLOPs at the device's sustained_clock_ratio on top) and whether a
    table row priced it."""
    df = pd.DataFrame(result["calls"])
    df["ms_per_step"] = df["us"] * df["calls_per_step"] / 1e3
    return df


def eplb_imbalance(load, *, ep: int, redundant_experts: int = 0, gpus_per_node: int = 8, n_group: int = 8,
                   policy: str = "auto") -> float:
    """The `imbalance` input of a deployment from a routing distribution: max / mean routed rows per
    GPU after dsperf.ep's EPLB places the experts (with `redundant_experts` replicas) on `ep` GPUs.

    load: tokens per logical expert of one layer (e.g. counts from a trace, or
    dsperf.ep.eplb.zipf_load(256, tokens, alpha=...))."""
    from ..ep import eplb

    import numpy as np

    shape = np.shape(load)
    if len(shape) not in (1, 2) or shape[-1] == 0:
        raise ValueError(f"load must be tokens per expert (one row per layer), got an array of shape {shape}")
    experts = int(shape[-1])
    ep = _check_int("ep", ep, 1, 4096)
    gpus_per_node = _check_int("gpus_per_node", gpus_per_node, 1, 1024)
    redundant_experts = _check_int("redundant_experts", redundant_experts, 0, 4096)
    if (experts + redundant_experts) % ep:
        raise ValueError(f"ep ({ep}) must divide the experts plus redundant experts ({experts + redundant_experts})")
    nodes = max(1, ep // gpus_per_node) if ep % gpus_per_node == 0 else 1
    plan = eplb.rebalance(load, experts + redundant_experts, num_gpus=ep, num_groups=n_group, num_nodes=nodes,
                          policy=policy)
    return eplb.imbalance(load, plan)
