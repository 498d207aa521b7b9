"""The `dsperf simulate` command: requests over time on a deployment (dsperf.serving)."""
from __future__ import annotations

import argparse
import re

from .._markdown import markdown

FORMATS = ("table", "csv", "markdown")


def add_simulate_parser(sub) -> None:
    from ..cli_grounded import _overlaps
    from ..model.grounded import SM, WEIGHT_DTYPES
    from .simulate import ARRIVALS, DEFAULT_MAX_NUM_TOKENS, DEFAULT_PREFILL_TOKENS, FIRST_TOKENS, MODES, ROUTINGS

    p = sub.add_parser("simulate", help="serve requests over time on a deployment: TTFT/TPOT/ITL/E2E percentiles, "
                                        "throughput, goodput (docs/SERVING.md)")
    p.add_argument("--model", default="DeepSeek-V3")
    p.add_argument("--device", default="H800")
    traffic = p.add_mutually_exclusive_group(required=False)
    traffic.add_argument("--rate", type=float, help="requests/s, open loop (with --trace: rescale it to this rate)")
    traffic.add_argument("--concurrency", type=int, help="clients of a closed loop (with --trace: its requests in order)")
    p.add_argument("--trace", help="JSONL trace file, or a shipped trace: conversation, synthetic")
    p.add_argument("--duration", type=float, help="seconds of arrivals (default 60; a trace: all of it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arrival", choices=ARRIVALS, default="poisson", help="open-loop arrivals (gamma: bursty, --cv)")
    p.add_argument("--cv", type=float, default=1.0, help="gamma arrivals: coefficient of variation of the gaps")
    p.add_argument("--input-len", type=int, default=1024, help="prompt tokens of generated requests")
    p.add_argument("--output-len", type=int, default=256, help="output tokens of generated requests")
    p.add_argument("--range-ratio", type=float, default=1.0,
                   help="generated lengths uniform in [ratio x len, len], as a benchmark's --random-range-ratio "
                        "(default 1: fixed)")
    p.add_argument("--num-prompts", type=int, help="generate no more requests than this, as a benchmark's "
                                                   "--num-prompts (without --duration: run until all are sent)")
    p.add_argument("--mode", choices=MODES, default="aggregated")
    p.add_argument("--ep", type=int, default=16, help="GPUs per EP group (the decode pool's when disaggregated)")
    p.add_argument("--attn-tp", type=int, default=1, help="GPUs per DP attention rank")
    p.add_argument("--redundant-experts", type=int, default=0)
    p.add_argument("--overlap", choices=_overlaps(), default="two_batch")
    p.add_argument("--replicas", type=int, default=1, help="EP groups")
    p.add_argument("--max-batch", type=int, help="requests per GPU (default: as many as the KV cache holds)")
    p.add_argument("--max-running", type=int, help="or: requests per DP rank (an attention group), the stack's own cap "
                                                  "(SGLang's --max-running-requests, TensorRT-LLM's max_batch_size); "
                                                  "the decode pool's when disaggregated")
    p.add_argument("--prefill-max-running", type=int, help="requests per DP rank of the prefill pool (disaggregated; "
                                                          "default: no cap but its KV cache and token budget)")
    p.add_argument("--max-num-tokens", type=int, help=f"tokens per rank per step (default {DEFAULT_MAX_NUM_TOKENS})")
    p.add_argument("--mem-fraction", type=float, help="share of each GPU's memory for weights and KV cache "
                                                     f"(SGLang's --mem-fraction-static; default {SM.memory_reserve:g}, assumed)")
    p.add_argument("--mtp", type=int, default=0, help="MTP draft tokens per step")
    p.add_argument("--mtp-accepted", type=float, default=0.0, help="draft tokens accepted per step on average")
    p.add_argument("--kv-fp8", action="store_true", help="FP8 latent cache")
    p.add_argument("--weight-dtype", choices=WEIGHT_DTYPES, default="fp8")
    p.add_argument("--imbalance", type=float, default=1.0, help="max / mean routed load per GPU")
    p.add_argument("--prefill-ep", type=int, default=32, help="disaggregated: GPUs per prefill EP group")
    p.add_argument("--prefill-attn-tp", type=int, default=1)
    p.add_argument("--prefill-redundant-experts", type=int, default=0)
    p.add_argument("--prefill-replicas", type=int, default=1, help="disaggregated: prefill EP groups")
    p.add_argument("--prefill-max-num-tokens", type=int, default=DEFAULT_PREFILL_TOKENS,
                   help="tokens per prefill rank per step")
    p.add_argument("--kv-transfer-gbps", type=float, help="disaggregated: GB/s of a KV hand-off (default: the "
                                                          "device's scale-out per GPU)")
    p.add_argument("--recv-interval", type=int, default=1,
                   help="SGLang's --scheduler-recv-interval: new requests are received once the loop counts this "
                        "many (SGLang's weights: a decode step 1, a prompt step 1000); default 1: every step")
    p.add_argument("--routing", choices=ROUTINGS, default="least_loaded")
    p.add_argument("--first-token", choices=FIRST_TOKENS, default="decode",
                   help="disaggregated: where the first token is streamed from (decode: after the hand-off, as "
                        "Dynamo, SGLang's PD router and vLLM's proxy do; prefill: at the end of the prompt's step)")
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--sla-ttft-ms", type=float, help="goodput: TTFT limit per request")
    p.add_argument("--sla-tpot-ms", type=float, help="goodput: TPOT limit per request")
    p.add_argument("--sla-percentile", type=float, default=90.0, help="percentile the SLA is judged at, in (0, 100)")
    p.add_argument("--format", choices=FORMATS, default="table", help="csv: one row per request")


# simulate()'s argument names, as the command's flags: errors are reported under the flag typed.
_FLAGS = {"rate": "--rate", "concurrency": "--concurrency", "trace": "--trace", "duration_s": "--duration",
          "seed": "--seed", "cv": "--cv", "input_len": "--input-len", "output_len": "--output-len",
          "range_ratio": "--range-ratio", "num_prompts": "--num-prompts",
          "ep": "--ep", "attn_tp": "--attn-tp", "redundant_experts": "--redundant-experts", "replicas": "--replicas",
          "max_batch": "--max-batch", "max_running": "--max-running", "prefill_max_running": "--prefill-max-running",
          "max_num_tokens": "--max-num-tokens", "mtp_accepted": "--mtp-accepted",
          "mtp": "--mtp", "imbalance": "--imbalance", "prefill_ep": "--prefill-ep",
          "prefill_attn_tp": "--prefill-attn-tp", "prefill_redundant_experts": "--prefill-redundant-experts",
          "prefill_replicas": "--prefill-replicas", "prefill_max_num_tokens": "--prefill-max-num-tokens",
          "kv_transfer_gbps": "--kv-transfer-gbps", "sla_ttft_ms": "--sla-ttft-ms", "sla_tpot_ms": "--sla-tpot-ms",
          "sla_percentile": "--sla-percentile", "mem_fraction": "--mem-fraction",
          "recv_interval": "--recv-interval"}
_NAME = re.compile(r"\b(" + "|".join(sorted(_FLAGS, key=len, reverse=True)) + r")\b(?= must| \(|:| is|\))")


def _as_flags(message: str) -> str:
    return _NAME.sub(lambda m: _FLAGS[m.group(1)], message)


def run_simulate(args: argparse.Namespace) -> str:
    from .simulate import simulate

    if args.rate is None and args.concurrency is None and args.trace is None:
        raise ValueError("give --rate, --concurrency or --trace")
    kw = dict(rate=args.rate, concurrency=args.concurrency, trace=args.trace, duration_s=args.duration,
              seed=args.seed, arrival=args.arrival, cv=args.cv, input_len=args.input_len, output_len=args.output_len,
              range_ratio=args.range_ratio, num_prompts=args.num_prompts, mode=args.mode, ep=args.ep, attn_tp=args.attn_tp, redundant_experts=args.redundant_experts,
              overlap=args.overlap, replicas=args.replicas, max_batch=args.max_batch, max_running=args.max_running,
              prefill_max_running=args.prefill_max_running,
              max_num_tokens=args.max_num_tokens, mem_fraction=args.mem_fraction, mtp=args.mtp,
              mtp_accepted=args.mtp_accepted, kv_fp8=args.kv_fp8,
              weight_dtype=args.weight_dtype, imbalance=args.imbalance, prefill_ep=args.prefill_ep,
              prefill_attn_tp=args.prefill_attn_tp, prefill_redundant_experts=args.prefill_redundant_experts,
              prefill_replicas=args.prefill_replicas, prefill_max_num_tokens=args.prefill_max_num_tokens,
              kv_transfer_gbps=args.kv_transfer_gbps, recv_interval=args.recv_interval, routing=args.routing,
              prefix_cache=not args.no_prefix_cache, first_token=args.first_token,
              sla_ttft_ms=args.sla_ttft_ms, sla_tpot_ms=args.sla_tpot_ms, sla_percentile=args.sla_percentile)
    try:
        r = simulate(args.model, args.device, **kw)
    except (ValueError, TypeError) as e:
        raise type(e)(_as_flags(str(e))) from None
    if args.format == "csv":
        return r.to_csv(float_format="%.6g")
    s = r.summary()
    text = markdown(r.percentiles(), ",.1f", index=True) + "\n\n"
    good = ("no SLA given (--sla-ttft-ms, --sla-tpot-ms)" if args.sla_ttft_ms is None and args.sla_tpot_ms is None
            else f"goodput {s['goodput']:.4g} requests/s ({s['sla_met_share']:.1%} within the SLA)")
    text += (f"{s['finished']} of {s['requests']} requests finished; {s['request_throughput']:.4g} requests/s, "
             f"{s['output_tokens_per_s']:.4g} output tokens/s ({s['output_tokens_per_gpu_s']:.4g} per GPU); "
             f"{good}; prefix-cache hits {s['cached_token_share']:.1%} of prompt tokens; {s['preemptions']} "
             f"preemptions; {s['drain_s']:.1f} s from the last arrival to the last answer\n")
    if "band_regime" in s:
        from ..model.validation_latency import BOUND_LABELS

        from ..model.bands import describe

        bands = "; ".join(f"{label} {describe(s[bound + '_band'])}" for bound, label in BOUND_LABELS.items())
        text += (f"error bands of the {s['band_regime']} regime (the latency section's leave-one-out bands over "
                 f"published medians, docs/VALIDATION_LATENCY.md): {bands}\n")
    if s["overloaded"]:
        text += (f"OVERLOADED: stopped at the {s['stop_reason']} bound; queues grew from t = "
                 f"{s['overload_since_s']:.1f} s, at {s['overload_rate']:.4g} requests/s arriving\n")
    return text
