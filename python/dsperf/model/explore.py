"""The deployment explorer: the grounded model over every decode layout of a set of devices, with
prefill priced per device, so that a user can ask "given these GPUs and this SLA, what is the best
deployment, and what is the whole trade-off?".

    >>> from dsperf import explore
    >>> df = explore.search(devices=["H800", "H200"], isl=4096, osl=1024)
    >>> ok = explore.meets_sla(df, tpot_ms=50)
    >>> explore.pareto(ok)          # tokens/s per user against tokens/s per GPU

One row per configuration (device x EP x attention TP x MTP x KV dtype x overlap x batch per GPU);
infeasible ones stay in the frame with the reason (`infeasible`, `fits_memory`). Serving is priced
both ways: prefill-decode disaggregated (TPOT = the decode step; prefill GPUs added in proportion,
`prefill_gpus_per_decode_gpu`) and aggregated (the same GPUs interleave prefill, and a prompt on
any DP rank holds the step of every rank the MoE all-to-all lock-steps: `tpot_aggregated_ms`,
`tokens_per_gpu_s_aggregated`, see grounded.lockstep_step_ms). Output tokens/s per GPU (`tokens_per_gpu_s_served`) counts
the prefill GPUs either way.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
import math
import numbers
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from .. import _C
from ._alloc import small_pages
from . import grounded, prices
from .._checks import finite_results, number, number_list
from .devices import SPEC_FIELDS, DeviceLike, device_list, resolve_devices
from .configs import load_model

# Defaults of the search, each an assumption the user can replace.
DEFAULT_EP = (8, 16, 32, 64, 72, 128, 144, 256)
# Redundant experts paired with each EP size: enough replicas to give every GPU whole slots
# (256 + r divisible by ep), as DeepSeek (EP144: 32) and SGLang (EP72: 32) did.
DEFAULT_REDUNDANT = {8: 0, 16: 0, 32: 32, 64: 64, 72: 32, 128: 0, 144: 32, 256: 0}
DEFAULT_ATTN_TP = (1, 2, 4, 8)
# MTP draft tokens and the accepted drafts per step assumed for them: DeepSeek-V3's report gives
# 85-90% acceptance of the second token; SGLang's H20 post 2.4-2.7 accepted tokens with 3 drafted.
DEFAULT_MTP = ((0, 0.0), (1, 0.85), (2, 1.55))
DEFAULT_BATCH = tuple(float(b) for b in (0.125, 0.25, 0.5, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512))
OVERLAP_CODES = {name: code for code, name in enumerate(_C.step_model.OVERLAPS)}  # C++ Overlap values, named once there
# Why a configuration cannot run: the texts by code, and the codes by name, from their one home
# (explore.hpp's Infeasible).
_REASONS = _C.step_model.infeasible_reasons()
REASONS = [text for _, text in _REASONS]
WHY = {name: code for code, (name, _) in enumerate(_REASONS)}
KINDS = ["ep", "afd"]  # wide-EP decode instances; attention-FFN disaggregation
# Prefill layouts searched per device: EP size and new prompt tokens per GPU per step.
DEFAULT_PREFILL_EP = (8, 16, 32, 64)
DEFAULT_PREFILL_TOKENS = (4096.0, 8192.0, 16384.0, 32768.0)
# Attention GPUs of an attention-FFN disaggregated deployment (the expert GPUs are the `ep` sizes).
DEFAULT_AFD_ATTN = (8, 16, 32, 64)
# USD per GPU-hour when the caller gives none: data/prices.csv, a source or "assumed" per device
# (model/prices.py); devices not listed get NaN cost.
DEFAULT_GPU_HOUR_USD = prices.DEFAULT_GPU_HOUR_USD


def _ints(name, values, lo, hi) -> list[int]:
    return number_list(name, values, integer=True, lo=lo, hi=hi)


def _positive(name, v, hi=1e8) -> float:
    return number(name, v, lo=0, lo_open=True, hi=hi)


def _prices(devices: Sequence[str], gpu_hour_usd) -> dict[str, float]:
    if gpu_hour_usd is None:
        return {d: DEFAULT_GPU_HOUR_USD.get(d, math.nan) for d in devices}
    if isinstance(gpu_hour_usd, numbers.Real) and not isinstance(gpu_hour_usd, bool):
        return {d: _positive("gpu_hour_usd", gpu_hour_usd, 1e6) for d in devices}
    if not isinstance(gpu_hour_usd, dict):
        raise TypeError(f"gpu_hour_usd must be a number or a dict device -> USD, got {type(gpu_hour_usd).__name__}")
    out = {}
    for d in devices:
        v = gpu_hour_usd.get(d, DEFAULT_GPU_HOUR_USD.get(d, math.nan))
        out[d] = v if isinstance(v, float) and math.isnan(v) else _positive(f"gpu_hour_usd[{d!r}]", v, 1e6)
    return out


def _prefill(model, device: DeviceLike, isl: float, tokens: float, ep: int, mem_fraction=None) -> dict:
    """The device's prefill: one step of `tokens` per GPU with prompts of isl (a prompt longer
    than a step is one prompt per step)."""
    return grounded.prefill(model, device, tokens=max(tokens, isl), prompt_len=isl, ep=ep,
                            redundant_experts=DEFAULT_REDUNDANT.get(ep, 0), mem_fraction=mem_fraction)


def prefill_options(model="DeepSeek-V3", devices: Iterable[DeviceLike] = ("H800",), *, isl=4096,
                    ep: Sequence[int] = DEFAULT_PREFILL_EP, tokens: Sequence[float] = DEFAULT_PREFILL_TOKENS,
                    mem_fraction=None) -> pd.DataFrame:
    """Every prefill layout of the devices (EP x tokens per GPU per step): TTFT (one step holding
    the prompt) and prompt tokens/s per GPU, from the grounded model (mem_fraction: as search's)."""
    isl = _positive("isl", isl, 1e7)
    eps = _ints("prefill_ep", ep, 1, 4096)
    steps = [_positive("prefill_tokens", t, 1e7) for t in tokens]
    if not steps:
        raise ValueError("prefill_tokens must not be empty")
    rows = []
    devices = device_list(devices)
    # Each device priced as given (its file's own kernel table included), labelled as search labels it.
    for device, (label, _) in zip(devices, resolve_devices(devices, "corrected")):
        for e in eps:
            for t in steps:
                r = _prefill(model, device, isl, t, e, mem_fraction)
                rows.append({"device": label, "prefill_ep": e, "prefill_tokens": max(t, isl), "ttft_ms": r["step_ms"],
                             "prefill_tokens_per_gpu_s": r["tokens_per_gpu_s"], "prefill_fits": r["fits_memory"]})
    return pd.DataFrame(rows)


def _choose_prefill(options: pd.DataFrame, ttft_ms) -> dict:
    """Per device, the prefill layout with the most tokens/s per GPU whose TTFT meets ttft_ms (the
    fastest-TTFT layout when none does)."""
    out = {}
    for device, g in options[options["prefill_fits"]].groupby("device", sort=False):
        ok = g if ttft_ms is None else g[g["ttft_ms"] <= ttft_ms]
        pick = ok.loc[ok["prefill_tokens_per_gpu_s"].idxmax()] if len(ok) else g.loc[g["ttft_ms"].idxmin()]
        out[device] = pick.to_dict()
    return out


def search(model="DeepSeek-V3", devices: Iterable[DeviceLike] = ("H800", "H200"), *, isl=4096, osl=1024,
           ep: Sequence[int] = DEFAULT_EP, redundant_experts: dict | None = None,
           attn_tp: Sequence[int] = DEFAULT_ATTN_TP, mtp: Sequence[tuple[int, float]] = DEFAULT_MTP,
           kv_fp8: Sequence[bool] = (False, True), overlap: Sequence[str] = ("two_batch", "single_batch", "none"),
           batch: Sequence[float] = DEFAULT_BATCH, prefill_tokens: Sequence[float] = DEFAULT_PREFILL_TOKENS,
           prefill_ep: Sequence[int] = DEFAULT_PREFILL_EP, ttft_ms=None, imbalance=1.0,
           gpu_hour_usd=None, step_overhead_ms=None, request_rate=None, weight_dtype=("fp8",), dense_tp=(1,),
           moe_tp=(1,), routing_load=None, mem_fraction=None, afd=False,
           afd_attn_gpus: Sequence[int] = DEFAULT_AFD_ATTN, afd_micro_batches: Sequence[int] = (2, 3)) -> pd.DataFrame:
    """Every decode configuration of the grid, with its serving figures (see the module doc).

    isl / osl: input and output tokens per request (decode attends to isl + osl / 2 on average);
    mtp: (draft tokens, accepted drafts per step) pairs; prefill_tokens / prefill_ep: the prefill
    layouts searched per device (tokens per GPU per step, EP size): each device's prefill instances
    take the one with the most tokens/s per GPU whose TTFT meets `ttft_ms` (columns prefill_ep,
    prefill_tokens); gpu_hour_usd: a price for all devices, a dict per device, or None
    for DEFAULT_GPU_HOUR_USD; imbalance: one max/mean routed load per GPU, or several to search;
    redundant_experts: {ep: a count, or counts to search}; routing_load: tokens per expert of one
    layer (a trace's counts, or dsperf.ep.eplb.zipf_load): each EP layout then carries the imbalance
    dsperf.ep's EPLB leaves with its redundant experts (grounded.eplb_imbalance); weight_dtype: names of grounded.WEIGHT_FORMATS ("fp8", "bf16", "fp4": NVFP4 experts, "fp4_bf16": NVFP4 experts and BF16 elsewhere, "fp4_v2": as fp4_bf16 with wo in NVFP4 too);
    dense_tp: the dense MLP data-parallel (1) or split over that many GPUs (at least attn_tp); moe_tp: each routed
    expert whole on one GPU (1) or split over that many of the EP GPUs (MoE TP x EP); mem_fraction: the share
    of each GPU's memory the stack gives weights and KV cache (SGLang's --mem-fraction-static; None: the
    grounded model's assumed SM.memory_reserve), which sets batch_limit and fits_memory; request_rate: requests per
    second to serve, which adds the xPyD plan (`decode_instances`, `prefill_instances` of
    `prefill_ep` GPUs, `total_gpus`) for disaggregated serving; afd: add attention-FFN disaggregated
    deployments (`kind` "afd": `afd_attn_gpus` attention GPUs x the `ep` sizes as expert GPUs,
    micro-batches ping-ponged between them, see explore_afd.afd_columns)."""
    m = load_model(model)
    isl, osl = _positive("isl", isl, 1e7), _positive("osl", osl, 1e7)
    devices = device_list(devices)
    pairs = resolve_devices(devices, "corrected")
    ax = _axes(pairs, ep=ep, redundant_experts=redundant_experts, attn_tp=attn_tp, mtp=mtp, kv_fp8=kv_fp8,
               overlap=overlap, batch=batch, imbalance=imbalance, weight_dtype=weight_dtype, dense_tp=dense_tp,
               moe_tp=moe_tp, gpu_hour_usd=gpu_hour_usd, step_overhead_ms=step_overhead_ms,
               routing_load=routing_load, mem_fraction=mem_fraction)
    # Tables and board power resolved once per device, as grounded.decode resolves them.
    pricing = [grounded.device_pricing(d) for d in devices]
    with small_pages():  # a million rows: faulted in faster without huge-page advice (_alloc.small_pages)
        cols = _price_grid(m, pairs, pricing, ax, kv_len=isl + osl / 2)
        if afd:
            from .explore_afd import with_afd  # (it reads this module's reasons and axes)

            cols = with_afd(cols, m, pairs, pricing, ax, afd_attn_gpus, afd_micro_batches, kv_len=isl + osl / 2)
        return _frame(model, m, devices, pairs, pricing, ax, cols, isl=isl, osl=osl, prefill_ep=prefill_ep,
                      prefill_tokens=prefill_tokens, ttft_ms=ttft_ms, request_rate=request_rate)


@dataclass
class _Axes:
    """The grid's axes, each checked once (search's arguments)."""
    labels: list
    eps: list
    reds: list
    tps: list
    mtp_n: list
    mtp_a: list
    kvs: list
    ovs: list
    batches: list
    imbalances: list
    weights: list
    dense_tps: list
    moe_tps: list
    prices: dict
    overhead: float
    groups: list   # (ep sizes, redundant counts, imbalances) priced together
    mem_fraction: float  # of each GPU's memory for weights and KV cache


def _axes(pairs, *, ep, redundant_experts, attn_tp, mtp, kv_fp8, overlap, batch, imbalance, weight_dtype, dense_tp,
          moe_tp, gpu_hour_usd, step_overhead_ms, routing_load, mem_fraction=None) -> _Axes:
    labels = [label for label, _ in pairs]
    # A device given twice (under one name or two: 'H800', 'h800') would be two frames' worth of one.
    keys = [(spec.name,) + tuple(getattr(spec, k) for k in SPEC_FIELDS) for _, spec in pairs]
    twice = next((i for i, k in enumerate(keys) if k in keys[:i]), None)
    if twice is not None:
        raise ValueError(f"devices lists {labels[twice]!r} twice ({labels[keys.index(keys[twice])]!r} is the same "
                         "device); give each device once")
    eps = _ints("ep", ep, 1, 4096)
    red_map = DEFAULT_REDUNDANT if redundant_experts is None else dict(redundant_experts)
    # Each EP size with each of its redundant-expert counts (an int, or a sequence to search).
    ep_pairs = []
    for e in eps:
        rs = red_map.get(e, 0)
        for r in (rs if isinstance(rs, (list, tuple)) else [rs]):
            if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 0:
                raise ValueError(f"redundant_experts[{e}] must be integers >= 0, got {r!r}")
            ep_pairs.append((e, int(r)))
    eps, reds = [e for e, _ in ep_pairs], [r for _, r in ep_pairs]
    tps = _ints("attn_tp", attn_tp, 1, 64)
    mtp = list(mtp)
    if not mtp:
        raise ValueError("mtp must not be empty")
    for pair in mtp:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"mtp must hold (draft tokens, accepted drafts) pairs, got {pair!r}")
    mtp_n = _ints("mtp draft tokens", [p[0] for p in mtp], 0, 8)
    mtp_a = [float(p[1]) for p in mtp]
    for n, a in zip(mtp_n, mtp_a):
        if not 0 <= a <= n:
            raise ValueError(f"mtp accepted drafts must lie in [0, {n}], got {a}")
    # One value (kv_fp8=True) or several to search.
    scalar = isinstance(kv_fp8, (str, bytes, numbers.Number, np.bool_)) or not hasattr(kv_fp8, "__iter__")
    kvs = [grounded._check_bool("kv_fp8", v) for v in ([kv_fp8] if scalar else kv_fp8)]
    if not kvs:
        raise ValueError("kv_fp8 must not be empty")
    ovs = list(overlap)
    for o in ovs:
        if o not in OVERLAP_CODES:
            raise ValueError(f"overlap values must be among {', '.join(OVERLAP_CODES)}, got {o!r}")
    batches = [_positive("batch", b, 1e6) for b in batch]  # fractional: requests per GPU of a TP group
    if not batches:
        raise ValueError("batch must not be empty")
    imbalances = number_list("imbalance", imbalance, lo=1, hi=SM.MAX_IMBALANCE)
    weights = [weight_dtype] if isinstance(weight_dtype, str) else list(weight_dtype)
    if not weights or any(w not in grounded.WEIGHT_DTYPES for w in weights):
        raise ValueError(f"weight_dtype values must be among {', '.join(grounded.WEIGHT_DTYPES)}, got {weight_dtype!r}")
    dense_tps = _ints("dense_tp", dense_tp, 1, 64)
    moe_tps = _ints("moe_tp", moe_tp, 1, 64)
    prices = _prices(labels, gpu_hour_usd)
    overhead = (SM.decode_step_overhead_ms if step_overhead_ms is None
                else grounded._check_real("step_overhead_ms", step_overhead_ms, 0, 1e4))
    # With a routing distribution, each (EP, redundant experts) pair gets the imbalance dsperf.ep's
    # EPLB leaves for it; otherwise every pair takes each of the given imbalances.
    if routing_load is not None:
        if imbalance != 1.0:
            raise ValueError("give imbalance or routing_load, not both (routing_load derives the imbalance)")
        groups = [([e], [r], [grounded.eplb_imbalance(routing_load, ep=e, redundant_experts=r)])
                  for e, r in zip(eps, reds)]
    else:
        groups = [(eps, reds, imbalances)]
    return _Axes(labels, eps, reds, tps, mtp_n, mtp_a, kvs, ovs, batches, imbalances, weights, dense_tps, moe_tps,
                 prices, overhead, groups, grounded.mem_share(mem_fraction))


def format_columns(weight_dtype: str, n: int) -> dict:
    """A weight format's flags as n-row explorer columns (one per grounded.WeightFormat field)."""
    return {k: np.full(n, v) for k, v in grounded.WEIGHT_FORMATS[weight_dtype]._asdict().items()}


def _price_grid(m, pairs, pricing, ax: _Axes, *, kv_len) -> dict:
    """The C++ grid's columns over every axis (one call per weight dtype, dense TP, MoE TP and
    imbalance group)."""
    # The C++ grid takes one weight dtype, dense TP and imbalance per call; the few values of those
    # axes are looped here.
    parts = []
    for w in ax.weights:
        for dtp, mtp_ in itertools.product(ax.dense_tps, ax.moe_tps):
            for g_eps, g_reds, g_imbs in ax.groups:
                for imb in g_imbs:
                    c = SM.explore_decode(m, [sp for _, sp in pairs], [p["tables"] for p in pricing],
                                          g_eps, g_reds, ax.tps, ax.mtp_n, ax.mtp_a, [int(v) for v in ax.kvs],
                                          [OVERLAP_CODES[o] for o in ax.ovs], ax.batches, kv_len=kv_len,
                                          imbalance=imb, step_overhead_ms=ax.overhead, dense_tp=dtp, moe_tp=mtp_,
                                          mem_fraction=ax.mem_fraction, weight_dtype=w)
                    n = len(c["ep"])
                    c.update(format_columns(w, n))
                    c["dense_tp"] = np.full(n, dtp, np.int32)
                    c["moe_tp"] = np.full(n, mtp_, np.int32)
                    c["imbalance"] = np.full(n, imb)
                    parts.append(c)
    cols = parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    cols["kind"] = np.zeros(len(cols["ep"]), np.int8)
    cols["attn_gpus"] = cols["ep"].astype(float)
    return cols


def _frame(model, m, devices, pairs, pricing, ax: _Axes, cols, *, isl, osl, prefill_ep, prefill_tokens, ttft_ms,
           request_rate) -> pd.DataFrame:
    """The search's frame: the grid's columns, feasibility, the serving columns per device's chosen
    prefill layout, cost, energy and error band; checked finite on every feasible row."""
    labels = ax.labels
    # Derived columns in numpy over the device codes (a million rows: no per-row Python).
    code = cols.pop("device_index")
    ttft_target = None if ttft_ms is None else _positive("ttft_ms", ttft_ms)
    rate = None if request_rate is None else _positive("request_rate", request_rate, 1e9)
    options = prefill_options(model, devices, isl=isl, ep=prefill_ep, tokens=prefill_tokens,
                              mem_fraction=ax.mem_fraction)
    # Disaggregated serving hands each request's KV cache from the prefill to the decode instance
    # over the NIC: isl tokens x the cache's bytes per token (grounded.decode's).
    kv_bytes = {kv: grounded.decode(m, pairs[0][1], batch=1, kv_len=isl, ep=8, kv_fp8=kv)["kv_bytes_per_token"]
                for kv in (False, True)}
    # Plain Python values only: pandas compares attrs when frames are concatenated.
    context = {"labels": labels, "isl": isl, "osl": osl, "prefill_options": options.to_dict("list"), "request_rate": rate,
               "kv_bytes": kv_bytes, "price": [ax.prices[label] for label in labels],
               "power": [p["board_power_w"] for p in pricing], "scaleout_gbps": [sp.scaleout_gbps for _, sp in pairs],
               "gpus_per_node": [sp.gpus_per_node for _, sp in pairs]}
    reason = cols.pop("infeasible").astype(np.int8)
    reason[(reason == 0) & ~cols["fits_memory"]] = WHY["kv_does_not_fit"]
    gpus = np.where(cols["kind"] == 1, cols["attn_gpus"] + cols["ep"], cols["ep"]).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        headroom = 1 - cols["batch"] / cols["batch_limit"]  # -inf where nothing fits
    data = {"device": pd.Categorical.from_codes(code, categories=labels, validate=False)}
    data.update(cols)
    data["overlap"] = pd.Categorical.from_codes(cols["overlap"], categories=list(OVERLAP_CODES) + ["ping_pong"],
                                                validate=False)
    data["kind"] = pd.Categorical.from_codes(cols["kind"], categories=KINDS, validate=False)
    data.update(
        reason=pd.Categorical.from_codes(reason, categories=REASONS, validate=False),
        feasible=reason == 0,
        gpus=gpus,
        memory_headroom=headroom,
        # The share its batch limit was computed with: what the launch export writes (launch.py).
        mem_fraction=np.full(len(gpus), ax.mem_fraction),
        error_band=grounded.error_bands("decode", [p["table_kind"] for p in pricing], code, cols["batch"]),
        # False where the device has no kernel table: its compute runs at the default efficiency,
        # and its band (regime default/...) is the worst error of any published check point.
        kernel_table=np.array([p["kernel_table"] is not None for p in pricing])[code],
    )
    data.update(_serving_columns({**cols, "gpus": gpus, "device_code": code}, context, ttft_target))
    df = pd.DataFrame(data, copy=False)
    finite_results("explore.search", {k: df[k].to_numpy() for k in _FINITE_WHEN_FEASIBLE}, rows=df["feasible"])
    # What the serving columns were derived from, so that an SLA applied later (meets_sla, nearest)
    # chooses each device's prefill layout for its own TTFT target.
    df.attrs["explore"] = {**context, "ttft_ms": ttft_target}
    return df


# Columns every feasible row must hold a finite value in (the rest may be NaN: a device without a
# price or a board power, an infeasible row).
_FINITE_WHEN_FEASIBLE = ("step_ms", "tpot_ms", "tps_user", "tokens_per_gpu_s", "ttft_ms", "tokens_per_gpu_s_served",
                         "tpot_aggregated_ms", "tokens_per_gpu_s_aggregated", "tpot_with_ttft_ms", "gpus",
                         "prefill_gpus")


def _serving_columns(cols, context: dict, ttft_ms) -> dict:
    """The columns that depend on each device's prefill layout, the one with the most tokens/s per
    GPU whose TTFT meets ttft_ms (None: the highest-throughput one). cols: the decode columns
    (device_code, tokens_per_gpu_s, step_ms, tpot_ms, batch, mtp_accepted, kind, attn_gpus, ep,
    attn_tp, kv_fp8, gpus) as numpy arrays."""
    labels, isl, osl = context["labels"], context["isl"], context["osl"]
    code = cols["device_code"]
    per_dev = lambda values: np.asarray(values, dtype=float)[code]  # noqa: E731
    chosen = _choose_prefill(pd.DataFrame(context["prefill_options"]), ttft_ms)
    missing = [label for label in labels if label not in chosen]
    if missing:
        raise ValueError(f"no prefill layout of {missing[0]} fits its memory (prefill_ep, prefill_tokens)")
    pre = [chosen[label] for label in labels]
    tps = cols["tokens_per_gpu_s"]
    pre_tps = per_dev([p["prefill_tokens_per_gpu_s"] for p in pre])  # each row's device's prefill tokens/s per GPU
    ratio = (isl / osl) * tps / pre_tps  # prefill GPUs per decode GPU
    served = tps / (1 + ratio)
    # Aggregated serving: the decode GPUs also run the prompts, one prompt a chunk at the device's
    # prefill rate, and the MoE all-to-all lock-steps the DP ranks (grounded.lockstep_step_ms).
    emitted = cols["batch"] * (1 + cols["mtp_accepted"])
    lockstep_ranks = np.maximum(1, np.where(cols["kind"] == 1, cols["attn_gpus"], cols["ep"]) // cols["attn_tp"])
    step_aggregated, _ = grounded.lockstep_step_ms(cols["step_ms"], isl / pre_tps * 1e3, emitted, isl=isl, osl=osl,
                                                   chunk_tokens=isl, ranks=lockstep_ranks)
    # The KV cache handed over at the NIC's datasheet rate (not overlapped with the prefill: an
    # upper bound; layer-wise streaming hides most of it).
    kv = context["kv_bytes"]
    kv_transfer = isl * np.where(cols["kv_fp8"], kv[True], kv[False]) / (per_dev(context["scaleout_gbps"]) * 1e9) * 1e3
    ttft = per_dev([p["ttft_ms"] for p in pre]) + kv_transfer
    gpus = cols["gpus"]
    prefill_gpus = np.ceil(gpus * ratio)
    price, power = per_dev(context["price"]), per_dev(context["power"])
    out = dict(
        ttft_ms=ttft,
        kv_transfer_ms=kv_transfer,
        prefill_ep=per_dev([p["prefill_ep"] for p in pre]),
        prefill_tokens=per_dev([p["prefill_tokens"] for p in pre]),
        prefill_gpus_per_decode_gpu=ratio,
        tokens_per_gpu_s_served=served,
        tpot_aggregated_ms=step_aggregated * cols["batch"] / emitted,
        tokens_per_gpu_s_aggregated=emitted / (step_aggregated / 1e3),
        tpot_with_ttft_ms=(ttft + osl * cols["tpot_ms"]) / osl,
        prefill_gpus=prefill_gpus,
        nodes=np.ceil((gpus + prefill_gpus) / per_dev(context["gpus_per_node"])),
        gpu_hour_usd=price,
        cost_per_m_output_usd=price / 3600 / served * 1e6,
        cost_per_m_tokens_usd=price / 3600 / (served * (1 + isl / osl)) * 1e6,
        energy_j_per_output_token=power / served,
    )
    rate = context["request_rate"]
    if rate is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            out["decode_instances"] = np.ceil(rate * osl / (tps * gpus))
            out["prefill_instances"] = np.ceil(rate * isl / (pre_tps * out["prefill_ep"]))
        out["total_gpus"] = out["decode_instances"] * gpus + out["prefill_instances"] * out["prefill_ep"]
    return out


def with_prefill_for(df: pd.DataFrame, ttft_ms) -> pd.DataFrame:
    """df (a search result) with each device's prefill layout chosen for a TTFT target: the one
    with the most tokens/s per GPU whose TTFT meets ttft_ms, and every column that depends on it
    (ttft_ms, prefill_ep, tokens_per_gpu_s_served, costs, ...) recomputed. meets_sla and nearest
    apply their ttft_ms through it, so an SLA chooses the prefill layout wherever it is applied. A
    frame without search's record of its prefill options (df.attrs["explore"]) is returned as is."""
    context = df.attrs.get("explore")
    target = None if ttft_ms is None else _positive("ttft_ms", ttft_ms)
    if context is None or target is None or context.get("ttft_ms") == target or df.empty:
        return df
    cols = {k: df[k].to_numpy() for k in ("tokens_per_gpu_s", "step_ms", "tpot_ms", "batch", "mtp_accepted", "ep",
                                          "attn_gpus", "attn_tp", "kv_fp8", "gpus")}
    cols["kind"] = df["kind"].cat.codes.to_numpy()
    cols["device_code"] = df["device"].cat.codes.to_numpy()
    out = df.assign(**_serving_columns(cols, context, target))
    out.attrs["explore"] = {**context, "ttft_ms": target}
    return out


def board_power_w(device: DeviceLike) -> float:
    """A device's board power (its file's `board_power_w`, grounded.device_pricing), NaN where unknown."""
    return grounded.device_pricing(device)["board_power_w"]


def meets_sla(df: pd.DataFrame, *, tpot_ms=None, ttft_ms=None, tps_user=None, convention="decode",
              serving="disaggregated") -> pd.DataFrame:
    """The feasible rows that meet the SLA. convention: "decode" (TPOT = time between tokens) or
    "with_ttft" ((TTFT + osl x TPOT) / osl, the convention that charges the first token's wait to
    every token); serving: "disaggregated" (decode TPOT) or "aggregated" (TPOT with prefill
    interleaved)."""
    if convention not in ("decode", "with_ttft"):
        raise ValueError(f"convention must be 'decode' or 'with_ttft', got {convention!r}")
    if serving not in ("disaggregated", "aggregated"):
        raise ValueError(f"serving must be 'disaggregated' or 'aggregated', got {serving!r}")
    df = with_prefill_for(df, ttft_ms)
    tpot = _tpot(df, convention, serving)
    ok = df["feasible"].to_numpy(copy=True)
    if tpot_ms is not None:
        ok &= (tpot <= _positive("tpot_ms", tpot_ms)).to_numpy()
    if ttft_ms is not None:
        ok &= (df["ttft_ms"] <= _positive("ttft_ms", ttft_ms)).to_numpy()
    if tps_user is not None:
        ok &= (1e3 / tpot >= _positive("tps_user", tps_user)).to_numpy()
    return df[ok]


def _tpot(df, convention, serving):
    base = df["tpot_aggregated_ms"] if serving == "aggregated" else df["tpot_ms"]
    if convention == "with_ttft":
        return base + (df["tpot_with_ttft_ms"] - df["tpot_ms"])
    return base


def nearest(df: pd.DataFrame, *, tpot_ms=None, ttft_ms=None, n=5) -> pd.DataFrame:
    """When nothing meets an SLA: the feasible configurations closest to it, with their margin
    (how far over each target, as a fraction)."""
    n = number("n", n, integer=True, lo=0, hi=2 ** 31)
    f = with_prefill_for(df, ttft_ms)
    f = f[f["feasible"]].copy()
    margin = pd.Series(0.0, index=f.index)
    if tpot_ms is not None:
        f["tpot_margin"] = f["tpot_ms"] / _positive("tpot_ms", tpot_ms) - 1
        margin = margin + f["tpot_margin"].clip(lower=0)
    if ttft_ms is not None:
        f["ttft_margin"] = f["ttft_ms"] / _positive("ttft_ms", ttft_ms) - 1
        margin = margin + f["ttft_margin"].clip(lower=0)
    f["margin"] = margin
    return f.sort_values(["margin", "tokens_per_gpu_s_served"], ascending=[True, False]).head(n)


def pareto(df: pd.DataFrame, x="tps_user", y="tokens_per_gpu_s_served", maximize=(True, True)) -> pd.DataFrame:
    """The Pareto frontier of df over two columns (both maximised by default): the rows no other
    row beats on both, sorted by x."""
    if df.empty:
        return df
    sx = df[x].to_numpy(float) * (1 if maximize[0] else -1)
    sy = df[y].to_numpy(float) * (1 if maximize[1] else -1)
    valid = np.isfinite(sx) & np.isfinite(sy)
    idx = np.flatnonzero(valid)
    order = idx[np.lexsort((-sy[idx], -sx[idx]))]  # x descending, then y descending
    keep, best_y = [], -np.inf
    for i in order:
        if sy[i] > best_y:
            keep.append(i)
            best_y = sy[i]
    return df.iloc[keep].sort_values(x)


def cost_frontier(df: pd.DataFrame) -> pd.DataFrame:
    """The cheapest configuration at each latency: cost per million output tokens against TPOT."""
    return pareto(df, x="tpot_ms", y="cost_per_m_output_usd", maximize=(False, False))


SM = _C.step_model


def frontier_figure(df: pd.DataFrame, *, title="DeepSeek-V3 decode: throughput per GPU against speed per user"):
    """tokens/s per GPU (served, prefill GPUs counted) against tokens/s per user: every feasible
    configuration of df in grey, each device's Pareto frontier as a line."""
    from ..predict.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    feasible = df[df["feasible"]]
    if len(feasible) > 20000:
        feasible = feasible.sample(20000, random_state=0)
    ax.scatter(feasible["tps_user"], feasible["tokens_per_gpu_s_served"], s=3, color="0.8", label="configurations")
    for device, g in df[df["feasible"]].groupby("device", observed=True):
        f = pareto(g)
        ax.plot(f["tps_user"], f["tokens_per_gpu_s_served"], marker="o", ms=3, label=f"{device} frontier")
    ax.set_xlabel("tokens/s per user (1000 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU (prefill GPUs counted)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def cost_figure(df: pd.DataFrame, *, title="DeepSeek-V3 decode: cost against latency"):
    """Cost per million output tokens against TPOT: each device's cheapest configuration per latency."""
    from ..predict.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for device, g in df[df["feasible"]].groupby("device", observed=True):
        f = cost_frontier(g)
        if f["cost_per_m_output_usd"].notna().any():
            ax.plot(f["tpot_ms"], f["cost_per_m_output_usd"], marker="o", ms=3, label=str(device))
    ax.set_xlabel("TPOT (ms)")
    ax.set_ylabel("USD per million output tokens")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if ax.lines:
        ax.legend()
    else:  # no device has a price: say so on the figure rather than draw an empty legend
        ax.text(0.5, 0.5, "no device here has a price (data/prices.csv, or gpu_hour_usd)", ha="center",
                va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


SHOWN = ["device", "gpus", "prefill_gpus", "ep", "redundant_experts", "attn_tp", "moe_tp", "mtp", "kv_fp8",
         *grounded.WeightFormat._fields, "dense_tp", "overlap", "batch", "tpot_ms",
         "tps_user", "tokens_per_gpu_s", "tokens_per_gpu_s_served", "ttft_ms", "prefill_ep", "prefill_tokens",
         "cost_per_m_output_usd",
         "energy_j_per_output_token", "memory_headroom"]


def best(df: pd.DataFrame, n=10, by="tokens_per_gpu_s_served") -> pd.DataFrame:
    """The n configurations with the highest `by`, one per (device, ep, attn_tp, mtp, overlap) layout."""
    top = df.sort_values(by, ascending=False)
    top = top.drop_duplicates(["device", "ep", "attn_tp", "moe_tp", "mtp", "overlap", *grounded.WeightFormat._fields,
                               "dense_tp"])
    return top.head(n)


def frontier_gap(df: pd.DataFrame, rows: pd.DataFrame, x="tps_user", y="tokens_per_gpu_s_served") -> pd.Series:
    """How far each of `rows` lies below the frontier of df: 1 - y / (the frontier's best y among
    configurations at least as fast in x). 0 on the frontier; compare it with the error band."""
    f = pareto(df[df["feasible"]], x, y)
    fx, fy = f[x].to_numpy(), f[y].to_numpy()
    out = []
    for rx, ry in zip(rows[x], rows[y]):
        if not (np.isfinite(rx) and np.isfinite(ry)):
            out.append(math.nan)  # an infeasible row has no place relative to the frontier
            continue
        faster = fy[fx >= rx - 1e-12]
        out.append(1 - ry / faster.max() if len(faster) else 0.0)
    return pd.Series(out, index=rows.index, name="frontier_gap")
