"""The `dsperf validate` and `dsperf predict` commands: the grounded model against published
deployments, and one deployment's step as priced kernel calls with its error band."""
from __future__ import annotations

import argparse

from ._markdown import markdown

FORMATS = ("table", "csv", "markdown")


def _sections() -> tuple:
    """all, then the validation sections, named once in dsperf.model.validation_doc."""
    from .model.validation_doc import SECTIONS

    return ("all",) + tuple(SECTIONS)


def _overlaps() -> tuple:
    """The overlap schedules, named once in C++ (step_model.hpp's kOverlapNames)."""
    from . import _C

    return tuple(_C.step_model.OVERLAPS)


def add_parsers(sub) -> None:
    from .model.grounded import SM, WEIGHT_DTYPES

    v = sub.add_parser("validate", help="the grounded model against published DeepSeek-V3/R1 deployments "
                                        "(docs/VALIDATION.md)")
    v.add_argument("--format", choices=FORMATS + ("doc",), default="table",
                   help="csv: one row per point with point,source,published,predicted,error (predicted / published - 1); "
                        "doc: each section's table as docs/VALIDATION.md and docs/VALIDATION_LATENCY.md quote it "
                        "(python -m dsperf.model.validation_doc rewrites them there)")
    v.add_argument("--section", choices=_sections(), default="all",
                   help="peak: the grounded model's step figures; latency: the serving simulator's TTFT/TPOT at a "
                        "stated concurrency (docs/VALIDATION.md); all: both, the CSV rows of both under one header")
    v.add_argument("--write-bands", action="store_true",
                   help="rewrite data/validation/bands.csv (each regime's error band) from this validation")
    p = sub.add_parser("predict", help="one prefill or decode step of a deployment as priced kernel calls (grounded model)")
    p.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    p.add_argument("--device", default="H800")
    p.add_argument("--model", default="DeepSeek-V3")
    p.add_argument("--ep", type=int, default=None, help="GPUs sharing the routed experts (decode 128, prefill 32)")
    p.add_argument("--attn-tp", type=int, default=1, help="attention TP (1: DP attention)")
    p.add_argument("--redundant-experts", type=int, default=0)
    p.add_argument("--batch", type=float, default=128, help="decode: requests per GPU")
    p.add_argument("--kv-len", type=float, default=4989, help="decode: average context per request")
    p.add_argument("--tokens", type=float, default=16384, help="prefill: new prompt tokens per GPU per step")
    p.add_argument("--prompt-len", type=float, default=4096, help="prefill: tokens per prompt")
    p.add_argument("--cached-prefix", type=float, default=0, help="prefill: prompt tokens served by the prefix cache")
    p.add_argument("--overlap", choices=_overlaps(), default="two_batch")
    p.add_argument("--mtp", type=int, default=0, help="decode: MTP draft tokens per step")
    p.add_argument("--mtp-accepted", type=float, default=0.0, help="decode: draft tokens accepted per step")
    p.add_argument("--kv-fp8", action="store_true", help="FP8 latent cache (default BF16)")
    p.add_argument("--attn-fp8", action="store_true", help="decode: FP8 attention math too (needs --kv-fp8)")
    p.add_argument("--weight-dtype", choices=WEIGHT_DTYPES, default="fp8",
                   help="fp4: NVFP4 experts, FP8 elsewhere; fp4_bf16: NVFP4 experts, BF16 elsewhere; "
                        "fp4_v2: NVFP4 experts and attention output projection (wo), BF16 elsewhere, as the "
                        "FP4-v2 checkpoints (a device with FP4 tensor cores)")
    p.add_argument("--imbalance", type=float, default=1.0,
                   help="max / mean routed load per GPU (the model takes at least the busiest expert set that "
                        "balanced routing scatters a step's rows to: docs/GROUNDED_MODEL.md, \"The busiest rank\")")
    p.add_argument("--eager-launch-us", type=float, default=0.0,
                   help="host time to launch one kernel when the step runs without CUDA graphs (0: graph replay; "
                        "PyTorch's eager launches of a DeepSeek step took 14-26 us a kernel on lent H200s' hosts, "
                        "docs/VALIDATION_GPU_MEASURED.md)")
    p.add_argument("--mem-fraction", type=float, help="share of each GPU's memory for weights and KV cache, which "
                                                     "sets the batch limit (SGLang's --mem-fraction-static; default "
                                                     f"{SM.memory_reserve:g}, assumed)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--calls-out", metavar="FILE", help="also write the priced calls with their shapes as CSV, for "
                                                       "dsperf measure-gpu --step-calls on a GPU (docs/CUDA.md)")


def _render(df, fmt: str, floatfmt: str = ".4g") -> str:
    if fmt == "csv":
        return df.to_csv(index=False)
    return markdown(df, floatfmt) + "\n"


def run_validate(args: argparse.Namespace) -> str:
    from .model.validation import summary, validate
    from .model.validation_latency import latency_summary, validate_latency

    section = getattr(args, "section", "all")
    write = getattr(args, "write_bands", False)

    # Each section validated once, for its output and the bands file (which holds both) alike.
    peak = validate() if section in ("all", "peak") or write else None
    lat = validate_latency() if section in ("all", "latency") or write else None
    written = ""
    if write:
        from .model.bands import write_bands
        written = f"wrote {write_bands(peak, lat)}\n"
    if args.format == "doc":
        from .model import validation_doc

        names = validation_doc.SECTIONS if section == "all" else (section,)
        frames = {"peak": peak, "latency": lat}
        return "\n".join(validation_doc.render(name, frames[name]) for name in names) + written
    frames, text = [], ""
    if section in ("all", "peak"):
        frames.append(peak)
        if args.format != "csv":
            text += _peak_text(peak, summary(peak), args.format) + written
    elif args.format != "csv":
        text += written
    if section in ("all", "latency"):
        frames.append(lat)
        if args.format != "csv":
            text += ("\n" if text else "") + _latency_text(lat, latency_summary(lat), args.format)
    if args.format == "csv":
        import pandas as pd

        return pd.concat(frames, ignore_index=True).to_csv(index=False, float_format="%.6g")
    return text


_SHOWN = ["point", "device", "role", "phase", "metric", "published", "predicted", "error", "loo_band", "utilisation",
          "missing"]


def _peak_text(df, s, fmt) -> str:
    text = _render(df[_SHOWN], fmt)
    text += (f"\n{s['points']} peak points: median |error| {s['median_abs_error']:.1%} (prefill "
             f"{s.get('median_abs_error_prefill', float('nan')):.1%}, decode {s.get('median_abs_error_decode', float('nan')):.1%}), "
             f"worst {s['max_abs_error']:.1%}; beyond 30% without a named missing input: "
             f"{', '.join(s['beyond_30pct_unexplained']) or 'none'}\n"
             f"{s['check_points']} check points (no model term shaped on them): median |error| "
             f"{s['median_abs_error_check']:.1%}; inside their leave-one-out band (loo_band): "
             f"{s['inside_band_check']:.0%}\n")
    return text


def _latency_text(df, s, fmt) -> str:
    from .model.validation_latency import BOUND_LABELS

    text = ("Latency section: the serving simulator (dsperf simulate) at each published figure's concurrency "
            "and settings\n\n")
    text += _render(df[[c for c in _SHOWN if c != "utilisation"]], fmt)
    groups = ", ".join(f"{label} {s.get('median_abs_error_' + bound, float('nan')):.1%}"
                       for bound, label in BOUND_LABELS.items())
    text += (f"\n{s['points']} latency points: median |error| {s['median_abs_error']:.1%} ({groups}), worst "
             f"{s['max_abs_error']:.1%}; beyond 30% without a named missing input: "
             f"{', '.join(s['beyond_30pct_unexplained']) or 'none'}\n"
             f"{s['check_points']} check points: median |error| {s['median_abs_error_check']:.1%}; inside their "
             f"leave-one-out band: {s['inside_band_check']:.0%}\n")
    return text


# The grounded model's arguments under the flags `dsperf predict` takes them as.
_PREDICT_FLAGS = ("batch", "kv_len", "tokens", "prompt_len", "cached_prefix", "ep", "attn_tp", "redundant_experts",
                  "mtp_accepted", "mtp", "imbalance", "mem_fraction")


def _flag_error(exc: Exception) -> Exception:
    """A grounded argument error reworded with the flag as typed (`kv_len must ...` -> `--kv-len must ...`)."""
    msg = str(exc)
    for name in _PREDICT_FLAGS:
        if msg.startswith(name + " "):
            return type(exc)("--" + name.replace("_", "-") + msg[len(name):])
    return exc


def run_predict(args: argparse.Namespace) -> str:
    try:
        return _predict(args)
    except (TypeError, ValueError) as e:
        raise _flag_error(e) from None


def _predict(args: argparse.Namespace) -> str:
    from .model import bands, grounded
    from .model.devices import load_device

    common = dict(attn_tp=args.attn_tp, redundant_experts=args.redundant_experts, overlap=args.overlap,
                  imbalance=args.imbalance, weight_dtype=args.weight_dtype, eager_launch_us=args.eager_launch_us,
                  mem_fraction=args.mem_fraction)
    if args.phase == "decode":
        r = grounded.decode(args.model, args.device, batch=args.batch, kv_len=args.kv_len,
                            ep=128 if args.ep is None else args.ep, mtp=args.mtp, mtp_accepted=args.mtp_accepted,
                            kv_fp8=args.kv_fp8, attn_fp8=args.attn_fp8, **common)
    else:
        r = grounded.prefill(args.model, args.device, tokens=args.tokens, prompt_len=args.prompt_len,
                             cached_prefix=args.cached_prefix, ep=32 if args.ep is None else args.ep, **common)
    if args.calls_out:
        from .predict.measure_gpu_step import calls_table
        try:
            calls_table(r["calls"]).to_csv(args.calls_out, index=False)
        except OSError as e:
            raise ValueError(f"--calls-out: cannot write {args.calls_out}: {e}") from None
    calls = grounded.calls_frame(r)[["kernel", "family", "stage", "calls_per_step", "us", "ms_per_step",
                                     "efficiency", "from_table", "clamped"]]
    text = _render(calls, args.format)
    if args.format == "csv":
        return text
    band = r["error_band"]
    lines = [f"\n{args.phase} step on {r['device']}: {r['step_ms']:.2f} ms, {r['tokens_per_gpu_s']:.0f} tokens/s per GPU "
             f"({bands.describe(band)}; regime {r['regime']}, the conformal {bands.BAND_QUANTILE:.0%} quantile of |error| of `dsperf validate`'s check "
             f"points in {r['band_regime']}, {r['band_points']} points)"]
    per_chip = load_device(args.device).gpus_per_chip
    if per_chip > 1:  # a part its vendor counts as one chip of several devices (an Ascend 910C's two dies)
        lines.append(f"{r['tokens_per_gpu_s'] * per_chip:.0f} tokens/s per chip ({r['device']}: a GPU here is one of "
                     f"a chip's {per_chip} devices, gpus_per_chip)")
    if args.phase == "decode":
        lines.append(f"TPOT {r['tpot_ms']:.2f} ms, {r['tps_user']:.1f} tokens/s per user; memory holds "
                     f"{r['batch_limit']:.0f} requests per GPU at this context ({'fits' if r['fits_memory'] else 'does NOT fit'})")
    if args.eager_launch_us > 0:
        bound = "host-bound: the GPU waits for launches" if r["launch_ms"] > r["step_ms"] - r["overhead_ms"] - 1e-9 \
            else "GPU-bound: the launches run ahead of the kernels"
        lines.append(f"eager: {r['launches']:.0f} kernel launches x {args.eager_launch_us:g} us = {r['launch_ms']:.2f} ms "
                     f"of host time per step ({bound})")
    if r["regime"].endswith("/latency"):
        from .predict.measure_gpu_step import shipped_step_ratio
        lines.append("latency-bound step: its calls are smaller than most table rows (clamped ones are priced at the "
                     f"nearest row's efficiency); timed on an H200, a one-request step's calls took "
                     f"{shipped_step_ratio():.2f}x what the model priced them at then (docs/VALIDATION_GPU_MEASURED.md, \"A one-request step's calls "
                     "timed\"): dsperf measure-gpu --step-calls times this step's calls on a GPU (--calls-out)")
    lines.append(f"calls priced from a table row: {r['calls_from_table']}, clamped to a table's edge: "
                 f"{r['calls_clamped']}, at the default efficiency (no row): {r['calls_default']}")
    if r["sustained_clock_ratio"] < 1:
        lines.append(f"FLOPs priced at {r['sustained_clock_ratio']:.4g} of the clock the kernel tables ran at (the device's "
                     "sustained_clock_ratio, an assumption: docs/VALIDATION.md), so `us` of a compute-bound call is its "
                     "table time / that ratio")
    kind = grounded.table_kind(args.device)
    if kind == "default":
        lines.append(f"{r['device']} has no kernel table: its compute runs at the default efficiency, and no published "
                     "point tests such a device: the band is the worst |error| of any point (docs/VALIDATION.md)")
    elif kind == "partial":
        lines.append(f"{r['device']}'s kernel table has rows for some families only (the calls with from_table False run "
                     "at the default efficiency), so the band is the worst |error| of any point (docs/VALIDATION.md)")
    elif kind == "derived":
        lines.append(f"{r['device']}'s kernel table holds derived rows (the H800 rows' curve over shapes scaled to "
                     "published figures of this GPU at its best shapes: data/anchors.csv, docs/VALIDATION.md)")
    return text + "\n".join(lines) + "\n"


def add_explore_parser(sub) -> None:
    from .model.grounded import SM

    e = sub.add_parser("explore", help="search deployments (devices, EP, attention TP, MTP, KV dtype, overlap, "
                                       "batch) against an SLA; the Pareto frontier, cost and energy")
    e.add_argument("--model", default="DeepSeek-V3")
    e.add_argument("--devices", default="H800,H200", help="comma-separated device names or .toml paths")
    e.add_argument("--isl", type=float, default=4096, help="input tokens per request")
    e.add_argument("--osl", type=float, default=1024, help="output tokens per request")
    e.add_argument("--tpot-ms", type=float, default=None, help="SLA: time per output token")
    e.add_argument("--ttft-ms", type=float, default=None, help="SLA: time to first token")
    e.add_argument("--tpot-convention", choices=("decode", "with_ttft"), default="decode",
                   help="decode: time between tokens; with_ttft: (TTFT + osl x TPOT) / osl")
    e.add_argument("--serving", choices=("disaggregated", "aggregated"), default="disaggregated")
    e.add_argument("--gpu-hour-usd", type=float, default=None,
                   help="price per GPU-hour for every device (default: each device's row in data/prices.csv, "
                        "sourced or marked assumed)")
    e.add_argument("--request-rate", type=float, default=None,
                   help="requests/s to serve: adds the xPyD plan (decode and prefill instances, total GPUs)")
    e.add_argument("--weight-dtype", default="fp8",
                   help="weight dtypes to search, comma-separated, among fp8,bf16,fp4,fp4_bf16,fp4_v2 "
                        "(grounded.WEIGHT_FORMATS)")
    e.add_argument("--dense-tp", default="1", help="dense-MLP TP sizes to search, comma-separated (1: data-parallel)")
    e.add_argument("--moe-tp", default="1", help="MoE TP sizes to search, comma-separated (1: each expert whole)")
    e.add_argument("--mem-fraction", type=float, default=None,
                   help="share of each GPU's memory for weights and KV cache, which sets each layout's batch limit "
                        f"(SGLang's --mem-fraction-static; default {SM.memory_reserve:g}, assumed)")
    e.add_argument("--routing-zipf", type=float, default=None,
                   help="a Zipf routing skew (alpha): each layout's imbalance from dsperf.ep's EPLB on that load")
    e.add_argument("--afd", action="store_true",
                   help="also search attention-FFN disaggregation (attention GPUs + expert GPUs, ping-pong)")
    e.add_argument("--slo-percentile", type=float, default=None,
                   help="re-check the best configurations by simulating their serving (dsperf.serving): the SLA "
                        "at this percentile of TTFT and TPOT, in (0, 100)")
    e.add_argument("--top", type=int, default=10, help="configurations to print")
    e.add_argument("--out", default="explore", help="folder for explore.csv (the SLA's frontier and best) and PNGs")
    e.add_argument("--emit", default=None, metavar="STACK",
                   help="also write the launch command of the best configuration sglang, vllm, trtllm or dynamo "
                        "can run, and why each better one cannot (OUT/launch_STACK.txt; dsperf.model.launch)")
    e.add_argument("--dynamo-backend", default=None, metavar="ENGINE",
                   help="with --emit dynamo: the engine Dynamo's workers run, sglang (default), vllm or trtllm")
    e.add_argument("--html", default=None, metavar="FILE",
                   help="also write one self-contained interactive page of the configurations that meet the SLA")


def _int_list(flag: str, text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def run_explore(args: argparse.Namespace) -> str:
    import sys
    from pathlib import Path

    from ._checks import number, number_list
    from .model import bands, explore, explore_page, grounded, launch, launch_dynamo

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not devices:
        raise ValueError("--devices must name at least one device")
    # Every flag checked, and named as typed, before the search runs (it takes seconds to minutes).
    number("--top", args.top, integer=True, lo=1, hi=10 ** 6)
    number("--isl", args.isl, lo=0, lo_open=True, hi=1e7)
    number("--osl", args.osl, lo=0, lo_open=True, hi=1e7)
    for flag_name, value, hi in (("--tpot-ms", args.tpot_ms, 1e8), ("--ttft-ms", args.ttft_ms, 1e8),
                                 ("--gpu-hour-usd", args.gpu_hour_usd, 1e6), ("--request-rate", args.request_rate, 1e9)):
        if value is not None:
            number(flag_name, value, lo=0, lo_open=True, hi=hi)
    if args.slo_percentile is not None:
        number("--slo-percentile", args.slo_percentile, lo=0, lo_open=True, hi=100)
        if args.slo_percentile == 100:
            raise ValueError("--slo-percentile must lie in (0, 100), got 100")
    if args.mem_fraction is not None:
        lo, hi, _ = grounded.DEPLOYMENT_BOUNDS["mem_fraction"]
        number("--mem-fraction", args.mem_fraction, lo=lo, hi=hi)
    dense_tp, moe_tp = _int_list("--dense-tp", args.dense_tp), _int_list("--moe-tp", args.moe_tp)
    for flag_name, values in (("--dense-tp", dense_tp), ("--moe-tp", moe_tp)):
        number_list(flag_name, values, integer=True, lo=1, hi=64)
    if args.emit is not None and args.emit not in launch.EMITTERS:
        raise ValueError(f"--emit must be one of {', '.join(launch.EMITTERS)}, got {args.emit!r}")
    if args.dynamo_backend is not None and args.emit != "dynamo":
        raise ValueError(f"--dynamo-backend applies to --emit dynamo only, got --emit {args.emit}")
    if args.dynamo_backend is not None and args.dynamo_backend not in launch_dynamo.BACKENDS:
        raise ValueError(f"--dynamo-backend must be one of {', '.join(launch_dynamo.BACKENDS)}, "
                         f"got {args.dynamo_backend!r}")
    weights = [w.strip() for w in args.weight_dtype.split(",") if w.strip()]
    if not weights or any(w not in grounded.WEIGHT_DTYPES for w in weights):
        raise ValueError(f"--weight-dtype values must be among {', '.join(grounded.WEIGHT_DTYPES)}, "
                         f"got {args.weight_dtype!r}")
    print(f"dsperf explore: searching {', '.join(devices)} ...", file=sys.stderr, flush=True)
    load = None
    if args.routing_zipf is not None:
        number("--routing-zipf", args.routing_zipf, lo=0, hi=10)
        from .ep.eplb import zipf_load

        load = zipf_load(256, 1_000_000, alpha=args.routing_zipf, seed=0)
    df = explore.search(args.model, devices, isl=args.isl, osl=args.osl, gpu_hour_usd=args.gpu_hour_usd,
                        request_rate=args.request_rate, afd=args.afd, ttft_ms=args.ttft_ms,
                        weight_dtype=weights,
                        dense_tp=dense_tp, moe_tp=moe_tp, routing_load=load, mem_fraction=args.mem_fraction)
    shown = ["kind", "attn_gpus"] * args.afd + explore.SHOWN + (["decode_instances", "prefill_instances", "total_gpus"] if args.request_rate else [])
    print(f"dsperf explore: {len(df)} configurations, {int(df['feasible'].sum())} feasible", file=sys.stderr)
    ok = explore.meets_sla(df, tpot_ms=args.tpot_ms, ttft_ms=args.ttft_ms, convention=args.tpot_convention,
                           serving=args.serving)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sla = []
    if args.tpot_ms is not None:
        sla.append(f"TPOT <= {args.tpot_ms:g} ms ({args.tpot_convention}, {args.serving})")
    if args.ttft_ms is not None:
        sla.append(f"TTFT <= {args.ttft_ms:g} ms")
    head = f"{len(ok)} of {len(df)} configurations meet {' and '.join(sla) or 'no SLA'}"
    if ok.empty:
        near = explore.nearest(df, tpot_ms=args.tpot_ms, ttft_ms=args.ttft_ms, n=args.top)
        near.to_csv(out / "explore.csv", index=False)
        cols = [c for c in explore.SHOWN + ["tpot_margin", "ttft_margin"] if c in near.columns]
        return (f"{head}: the frontier is empty. Nearest configurations (margin = how far over each target):\n\n"
                + markdown(near[cols]) + f"\n\nwritten: {out / 'explore.csv'}\n")
    frontier = explore.pareto(ok)
    best = explore.best(ok, args.top)
    pd_frame = __import__("pandas").concat([frontier.assign(set="frontier"), best.assign(set="best")])
    pd_frame.to_csv(out / "explore.csv", index=False)
    explore.frontier_figure(ok).savefig(out / "frontier.png", dpi=120)
    explore.cost_figure(ok).savefig(out / "cost.png", dpi=120)
    band = float(best["error_band"].max()) if len(best) else float(df["error_band"].max())
    untabled = sorted(set(df.loc[~df["kernel_table"], "device"].astype(str)))
    note = (f"\nno kernel table for {', '.join(untabled)}: its compute is priced at the default efficiency "
            f"({__import__('dsperf').grounded.DEFAULT_EFFICIENCY}) and the band does not cover it\n" if untabled else "")
    unpriced = sorted(set(df.loc[df["gpu_hour_usd"].isna(), "device"].astype(str)))
    if unpriced:
        note += (f"\nno price for {', '.join(unpriced)} (data/prices.csv has no row): its cost columns are empty "
                 f"and the cost figure leaves it out; give --gpu-hour-usd to price it\n")
    unpowered = sorted(set(df.loc[df["energy_j_per_output_token"].isna() & df["feasible"], "device"].astype(str)))
    if unpowered:
        note += (f"\nno board power for {', '.join(unpowered)} (its device file has no board_power_w): its energy "
                 f"column is empty\n")
    if args.slo_percentile is not None:
        from .serving import recheck

        print("dsperf explore: simulating the best configurations ...", file=sys.stderr, flush=True)
        sim = recheck(best, args.model, isl=args.isl, osl=args.osl, sla_percentile=args.slo_percentile,
                      sla_tpot_ms=args.tpot_ms, sla_ttft_ms=args.ttft_ms, serving=args.serving)
        note += (f"\nThe first {len(sim)} re-checked by simulation (a closed loop of batch x GPUs clients; "
                 f"P{args.slo_percentile:g} of the requests after the first wave):\n\n"
                 + markdown(sim) + "\n")
    extra = ""
    if args.html:
        sla_given = {"tpot_ms": args.tpot_ms, "ttft_ms": args.ttft_ms}
        extra += f"page: {explore_page.write_html(ok, args.html, sla=sla_given)}\n"
    if args.emit:
        launched, at, refused = launch.emit_best(best, args.emit, backend=args.dynamo_backend)
        (out / f"launch_{args.emit}.txt").write_text(launched.text())
        which = "the best configuration" if at == 0 else f"configuration {at + 1} of the best"
        skipped = "".join(f"- configuration {i + 1}: {why}\n" for i, why in enumerate(refused))
        if skipped:
            skipped = f"\n{args.emit} cannot run the better ones:\n{skipped}"
        extra += (f"{skipped}\nLaunch ({args.emit}) of {which}, also in {out / f'launch_{args.emit}.txt'}:\n\n"
                  + launched.text())
    return (f"{head}.\n\nBest by output tokens/s per GPU (prefill GPUs counted; the widest band among them "
            f"{bands.describe(band)}, from each row's error_band, its regime's conformal {bands.BAND_QUANTILE:.0%} quantile "
            f"of |error| in `dsperf validate`):\n\n"
            + markdown(best[shown])
            + f"\n\nPareto frontier (tokens/s per user against tokens/s per GPU): {len(frontier)} configurations\n\n"
            + markdown(frontier[shown])
            + f"\n\nwritten: {out / 'explore.csv'}, {out / 'frontier.png'}, {out / 'cost.png'}\n" + note + extra)
