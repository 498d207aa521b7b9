"""`simulate()`: requests over time on a deployment, each step priced by the grounded model, in C++
(csrc/serving). Every argument is checked here, once, and named in its error; the C++ core trusts
its caller."""
from __future__ import annotations

import math
import re

import numpy as np

from .. import _C
from .._checks import MAX_COUNT, flag, number, text
from ..model import bands, grounded
from ..model.configs import load_model
from ..model.devices import DeviceSpec, load_device
from .result import ServingResult, Sla, build_result
from .traces import MAX_REQUEST_TOKENS, Trace, empty_trace, load_trace

SV = _C.serving
# The names live in C++ (csrc/serving/serving_types.hpp); Python reads them from the binding.
ARRIVALS = tuple(n for n, _ in SV.ARRIVALS if n not in ("concurrency", "trace"))  # the open-loop kinds
ROUTINGS = tuple(n for n, _ in SV.ROUTINGS)
MODES = tuple(n for n, _ in SV.MODES)
FIRST_TOKENS = tuple(n for n, _ in SV.FIRST_TOKENS)

# Defaults where a deployment does not say (docs/SERVING.md lists them as assumed).
DEFAULT_DURATION_S = 60.0
DEFAULT_MAX_NUM_TOKENS = 8192          # tokens per rank per step, aggregated (assumed: a common chunked-prefill size)
DEFAULT_PREFILL_TOKENS = 16384         # tokens per prefill rank per step (DeepSeek's 16K per GPU)
DEFAULT_MAX_WAITING = 10000            # overload guard: requests waiting in queues
DEFAULT_DRAIN_S = 3600.0               # overload guard: simulated time after the last arrival
MAX_BATCH_CAP = 4096                   # requests per GPU when max_batch is not given (beyond any KV cache)
MAX_SEED = 2 ** 63
MAX_REQUESTS = 10_000_000              # requests one run may generate (records stay a few GB at most)
MAX_RECV_INTERVAL = 10 ** 6            # loops between receives (assumed bound: published settings are 10-30)
MAX_POOL_GPUS = 2 ** 16                # GPUs per pool: far beyond any deployment, and the ranks' state stays small


# The prefill pool's fields in a layout rule's message, named as simulate takes them (prefill_<field>):
# a field followed by its value, its rule, the next field of a list or the end of a parenthesis.
_PREFILL_NAME = re.compile(r"\b(ep|attn_tp|redundant_experts|overlap|moe_tp)\b(?= \(| must|,|\))")


def _choice(name, value, allowed):
    text(name, value)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _opt_ms(name, v):
    return None if v is None else number(name, v, lo=0, lo_open=True, hi=1e9)


def check_sla(sla_ttft_ms=None, sla_tpot_ms=None, sla_percentile=90.0) -> Sla:
    p = number("sla_percentile", sla_percentile)
    if not 0 < p < 100:
        raise ValueError(f"sla_percentile must lie in (0, 100), got {sla_percentile!r}")
    return Sla(_opt_ms("sla_ttft_ms", sla_ttft_ms), _opt_ms("sla_tpot_ms", sla_tpot_ms), p)


def _rate(v, name="rate"):
    return number(name, v, lo=0, lo_open=True, hi=1e7)


def simulate(model="DeepSeek-V3", device="H800", *, rate=None, concurrency=None, trace=None, duration_s=None,
             seed=0, arrival="poisson", cv=1.0, input_len=1024, output_len=256, range_ratio=1.0, num_prompts=None,
             mode="aggregated", ep=16, attn_tp=1, redundant_experts=0, overlap="two_batch", replicas=1,
             max_batch=None, max_running=None, max_num_tokens=None, mtp=0, mtp_accepted=0.0, kv_fp8=False,
             attn_fp8=False,
             dispatch_fp8=True, dispatch_fp4=False, imbalance=1.0, weight_dtype="fp8", dense_tp=1, moe_tp=1,
             step_overhead_ms=None,
             mem_fraction=None, prefill_ep=32, prefill_attn_tp=1, prefill_redundant_experts=0, prefill_overlap="two_batch",
             prefill_replicas=1, prefill_max_num_tokens=DEFAULT_PREFILL_TOKENS, prefill_moe_tp=None,
             prefill_max_running=None,
             routing="least_loaded", prefix_cache=True, block_tokens=512, kv_transfer_gbps=None, recv_interval=1,
             first_token="decode",
             sla_ttft_ms=None, sla_tpot_ms=None, sla_percentile=90.0, max_waiting=DEFAULT_MAX_WAITING,
             max_time_s=None, default_efficiency=grounded.DEFAULT_EFFICIENCY) -> ServingResult:
    """Simulate serving on a deployment; returns a ServingResult (records, percentiles, throughput,
    goodput, time series).

    Traffic, exactly one of: ``rate`` (requests/s; open loop, ``arrival`` "poisson" or "gamma"
    with ``cv``), ``concurrency`` (closed loop: that many clients), or ``trace`` (a JSONL path or
    "conversation" / "synthetic"; with ``rate`` its timestamps are rescaled to that mean rate, with
    ``concurrency`` its requests are sent in order by a closed loop). Generated requests have
    ``input_len`` and ``output_len`` tokens, or, with ``range_ratio`` below 1, lengths drawn
    uniformly from the integers in [int(len x range_ratio), len] as the serving benchmarks' random
    dataset draws them (vLLM's and SGLang's benchmark_serving, ``--random-range-ratio``; their
    ``--num-prompts`` is ``num_prompts``: no more requests than that are generated). ``duration_s``:
    arrivals stop after it (default 60 s, or, given ``num_prompts``, when they are all sent; a
    trace: all of it).

    Layout (the names of dsperf.grounded.decode): ``ep`` GPUs per EP group, ``attn_tp`` GPUs per DP
    rank, ``replicas`` EP groups; ``max_batch`` requests per GPU (default: as many as the KV cache
    holds, in the ``mem_fraction`` of each GPU's memory the stack gives weights and cache: SGLang's
    --mem-fraction-static, default 0.9, assumed; it caps both pools); or ``max_running``, requests per DP
    rank (an attention group of ``attn_tp`` GPUs), the cap the stacks set (SGLang's
    --max-running-requests for a TP group, TensorRT-LLM's max_batch_size per rank; the decode pool's, or
    the one pool's when aggregated; ``prefill_max_running`` is the prefill pool's, default: no cap but its
    KV cache and token budget); ``max_num_tokens`` tokens per rank per step (default 8192). ``mode="disaggregated"``
    adds a prefill pool of ``prefill_replicas`` groups of ``prefill_ep`` GPUs whose prompts' KV
    caches cross the network at ``kv_transfer_gbps`` (default: the device's scale-out GB/s per GPU);
    ``prefill_moe_tp`` splits its experts (default: ``moe_tp``, the decode pool's). ``first_token``
    (disaggregated): where the stack streams the first token from: "decode" (default; Dynamo, SGLang's
    PD router and vLLM's proxy stream the response from the decode worker, so TTFT holds the hand-off
    and any wait for a decode slot) or "prefill" (at the end of the prompt's step).
    ``recv_interval``: SGLang's ``--scheduler-recv-interval``: a rank of the pool taking new requests
    receives them once its loop has counted that many (SGLang's weights: a decode step counts
    _C.serving.recv_weight_decode (1), a step with a prompt chunk recv_weight_prompt (1000), an idle
    rank receives at once); 1: every step.
    SLA: per-request ``sla_ttft_ms`` / ``sla_tpot_ms`` at ``sla_percentile``."""
    given = [n for n, v in (("rate", rate), ("concurrency", concurrency), ("trace", trace)) if v is not None]
    if not given or (len(given) > 1 and set(given) not in ({"rate", "trace"}, {"concurrency", "trace"})):
        raise ValueError("give one of rate, concurrency or trace (a trace may come with rate or concurrency)")
    if rate is not None:
        rate = _rate(rate)
    if concurrency is not None:
        concurrency = number("concurrency", concurrency, integer=True, lo=1, hi=MAX_COUNT)
    if duration_s is not None:
        duration_s = number("duration_s", duration_s, lo=0, lo_open=True, hi=1e7)
    seed = number("seed", seed, integer=True, lo=0, hi=MAX_SEED)
    arrival = _choice("arrival", arrival, ARRIVALS)
    cv = number("cv", cv, lo=0.05, hi=20)
    input_len = number("input_len", input_len, integer=True, lo=1, hi=MAX_REQUEST_TOKENS)
    output_len = number("output_len", output_len, integer=True, lo=1, hi=MAX_REQUEST_TOKENS)
    range_ratio = number("range_ratio", range_ratio, lo=0, hi=1)
    if num_prompts is not None:
        num_prompts = number("num_prompts", num_prompts, integer=True, lo=1, hi=MAX_REQUESTS)
    if trace is not None and range_ratio != 1:
        raise ValueError(f"range_ratio must be 1 with a trace (a trace brings its own lengths), got {range_ratio!r}")
    if trace is not None and num_prompts is not None:
        raise ValueError("num_prompts must not be given with a trace (a trace brings its own requests)")
    mode = _choice("mode", mode, MODES)
    first_token = _choice("first_token", first_token, FIRST_TOKENS)
    routing = _choice("routing", routing, ROUTINGS)
    prefix_cache = flag("prefix_cache", prefix_cache)
    block_tokens = number("block_tokens", block_tokens, integer=True, lo=1, hi=2 ** 20)
    replicas = number("replicas", replicas, integer=True, lo=1, hi=MAX_COUNT)
    prefill_replicas = number("prefill_replicas", prefill_replicas, integer=True, lo=1, hi=MAX_COUNT)
    max_waiting = number("max_waiting", max_waiting, integer=True, lo=1, hi=2 ** 30)
    recv_interval = number("recv_interval", recv_interval, integer=True, lo=1, hi=MAX_RECV_INTERVAL)
    sla = check_sla(sla_ttft_ms, sla_tpot_ms, sla_percentile)

    m = load_model(model)
    spec = device if isinstance(device, DeviceSpec) else load_device(device, "corrected")
    pricing = grounded.device_pricing(device, default_efficiency)  # its tables and how they were obtained
    tables = pricing["tables"]
    layout = dict(attn_tp=attn_tp, redundant_experts=redundant_experts, overlap=overlap, dispatch_fp8=dispatch_fp8,
                  dispatch_fp4=dispatch_fp4,
                  imbalance=imbalance, weight_dtype=weight_dtype, dense_tp=dense_tp, moe_tp=moe_tp,
                  step_overhead_ms=step_overhead_ms, mem_fraction=mem_fraction)
    dec = grounded._deployment("decode", ep=ep, mtp=mtp, mtp_accepted=mtp_accepted, kv_fp8=kv_fp8,
                               attn_fp8=attn_fp8, batch=1, **layout)
    dec_chunk = grounded._deployment("prefill", ep=ep, **layout)
    # The prefill pool's layout is checked by the same rules, under its own argument names.
    # ... under the bounds the deployment's fields declare (grounded.DEPLOYMENT_BOUNDS).
    bounds = grounded.DEPLOYMENT_BOUNDS
    prefill_ep = number("prefill_ep", prefill_ep, integer=True, lo=int(bounds["ep"][0]), hi=int(bounds["ep"][1]))
    prefill_attn_tp = number("prefill_attn_tp", prefill_attn_tp, integer=True, lo=int(bounds["attn_tp"][0]),
                             hi=int(bounds["attn_tp"][1]))
    prefill_redundant_experts = number("prefill_redundant_experts", prefill_redundant_experts, integer=True,
                                       lo=int(bounds["redundant_experts"][0]), hi=int(bounds["redundant_experts"][1]))
    _choice("prefill_overlap", prefill_overlap, grounded.OVERLAPS)
    if prefill_moe_tp is not None:
        prefill_moe_tp = number("prefill_moe_tp", prefill_moe_tp, integer=True, lo=int(bounds["moe_tp"][0]),
                                hi=int(bounds["moe_tp"][1]))
    pre_layout = dict(layout, attn_tp=prefill_attn_tp, redundant_experts=prefill_redundant_experts,
                      overlap=prefill_overlap, moe_tp=moe_tp if prefill_moe_tp is None else prefill_moe_tp)
    pre = grounded._deployment("decode", ep=prefill_ep, kv_fp8=kv_fp8, **pre_layout)
    pre_chunk = grounded._deployment("prefill", ep=prefill_ep, **pre_layout)
    for dep in (dec, dec_chunk):
        dep.validate(m, spec)  # the model-level rules (ep against the experts, attn_tp against the node), named
    if mode == "disaggregated":
        for dep in (pre, pre_chunk):
            try:
                dep.validate(m, spec)
            except ValueError as e:
                raise ValueError(_PREFILL_NAME.sub(r"prefill_\1", str(e))) from None
    for name, groups, e in (("replicas", replicas, ep), ("prefill_replicas", prefill_replicas, prefill_ep)):
        if groups * e > MAX_POOL_GPUS:
            raise ValueError(f"{name} x its ep ({groups} x {e}) must be <= {MAX_POOL_GPUS} GPUs per pool")
    if max_batch is not None and max_running is not None:
        raise ValueError("give max_batch (requests per GPU) or max_running (requests per DP rank), not both")
    batch_cap = (MAX_BATCH_CAP if max_batch is None
                 else number("max_batch", max_batch, integer=True, lo=1, hi=MAX_BATCH_CAP))
    # Requests a DP rank (an attention group) may hold at once, in each pool.
    decode_cap = batch_cap * dec.attn_tp
    if max_running is not None:
        decode_cap = number("max_running", max_running, integer=True, lo=1, hi=MAX_BATCH_CAP * dec.attn_tp)
    prefill_cap = batch_cap * pre.attn_tp
    if prefill_max_running is not None:
        if mode != "disaggregated":
            raise ValueError("prefill_max_running is the prefill pool's cap: give it with mode='disaggregated'")
        prefill_cap = number("prefill_max_running", prefill_max_running, integer=True, lo=1,
                             hi=MAX_BATCH_CAP * pre.attn_tp)
    tokens = DEFAULT_MAX_NUM_TOKENS if max_num_tokens is None else max_num_tokens
    tokens = number("max_num_tokens", tokens, integer=True, lo=1, hi=2 ** 24)
    prefill_tokens = number("prefill_max_num_tokens", prefill_max_num_tokens, integer=True, lo=1, hi=2 ** 24)
    gbps = spec.scaleout_gbps if kv_transfer_gbps is None else number("kv_transfer_gbps", kv_transfer_gbps, lo=0,
                                                                     lo_open=True, hi=1e6)

    tr = empty_trace()
    if trace is not None:
        tr = trace if isinstance(trace, Trace) else load_trace(trace)
        tr = _shape_trace(tr, rate, duration_s)
        kind = "concurrency" if concurrency is not None else "trace"
    elif concurrency is not None:
        kind = "concurrency"
    else:
        kind = arrival
    duration_ms = (duration_s if duration_s is not None else DEFAULT_DURATION_S) * 1e3
    # No duration given and a bounded set of requests (a prompt count, or a closed loop over a
    # trace): the run lasts until they are all sent.
    if duration_s is None and (num_prompts is not None or (kind == "concurrency" and trace is not None)):
        duration_ms = 1e15
    if kind == "trace":
        duration_ms = float(tr.arrival_ms[-1]) if len(tr) else 0.0
    elif kind in ARRIVALS and num_prompts is None and rate * duration_ms / 1e3 > MAX_REQUESTS:
        raise ValueError(f"rate x duration_s ({rate:g} x {duration_ms / 1e3:g}) asks for more than the {MAX_REQUESTS:,} "
                         "requests one run generates: shorten duration_s")
    drain = DEFAULT_DRAIN_S if max_time_s is None else number("max_time_s", max_time_s, lo=0, lo_open=True, hi=1e9)
    max_time_ms = duration_ms + drain * 1e3

    raw = SV.simulate(m, spec, tables, mode, dec, dec_chunk, replicas, decode_cap, tokens,
                      pre, pre_chunk, prefill_replicas, prefill_cap, prefill_tokens, routing, prefix_cache,
                      block_tokens, seed, gbps, max_waiting, max_time_ms, recv_interval, first_token, kind, rate or 1.0, cv,
                      concurrency or 1, duration_ms, input_len, output_len, range_ratio,
                      MAX_REQUESTS if num_prompts is None else num_prompts, tr.arrival_ms, tr.input_len,
                      tr.output_len, tr.hash_offsets, tr.hashes)
    gpus = replicas * ep + (prefill_replicas * prefill_ep if mode == "disaggregated" else 0)
    result = build_result(raw, sla, gpus)
    # The latency section's leave-one-out bands for a device with this kind of table.
    result.info.update(bands.serving_bands(pricing["table_kind"]))
    return result


def _shape_trace(tr: Trace, rate, duration_s) -> Trace:
    """A trace rescaled to a mean rate and cut at a duration (both optional), starting at 0."""
    t = tr.arrival_ms - tr.arrival_ms[0]
    if rate is not None:
        native = tr.mean_rate
        if not math.isfinite(native):
            raise ValueError("trace: its requests all arrive at once, so it cannot be rescaled to a rate")
        t = t * (native / rate)
    shaped = Trace(tr.name, t, tr.input_len, tr.output_len, tr.hash_offsets, tr.hashes)
    if duration_s is not None:
        keep = np.flatnonzero(t < duration_s * 1e3)
        if len(keep) == 0:
            raise ValueError(f"duration_s ({duration_s}) ends before the trace's first request")
        shaped = shaped.take(slice(0, len(keep)))
    return shaped
