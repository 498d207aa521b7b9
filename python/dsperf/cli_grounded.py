"""The `dsperf validate` and `dsperf predict` commands: the grounded model against published
deployments, and one deployment's step as priced kernel calls with its error band."""
from __future__ import annotations

import argparse

FORMATS = ("table", "csv", "markdown")


def add_parsers(sub) -> None:
    v = sub.add_parser("validate", help="the grounded model against published DeepSeek-V3/R1 deployments "
                                        "(docs/VALIDATION.md)")
    v.add_argument("--format", choices=FORMATS, default="table",
                   help="csv: one row per point with point,source,published,predicted,error (predicted / published - 1)")
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
    p.add_argument("--overlap", choices=("two_batch", "single_batch", "none"), default="two_batch")
    p.add_argument("--mtp", type=int, default=0, help="decode: MTP draft tokens per step")
    p.add_argument("--mtp-accepted", type=float, default=0.0, help="decode: draft tokens accepted per step")
    p.add_argument("--kv-fp8", action="store_true", help="FP8 latent cache (default BF16)")
    p.add_argument("--imbalance", type=float, default=1.0, help="max / mean routed load per GPU")
    p.add_argument("--format", choices=FORMATS, default="table")


def _render(df, fmt: str, floatfmt: str = ".4g") -> str:
    if fmt == "csv":
        return df.to_csv(index=False)
    return df.to_markdown(index=False, floatfmt=floatfmt) + "\n"


def run_validate(args: argparse.Namespace) -> str:
    from .validation import summary, validate

    df = validate()
    if args.format == "csv":
        return df.to_csv(index=False, float_format="%.6g")
    shown = df[["point", "device", "phase", "metric", "published", "predicted", "error", "utilisation", "missing"]]
    s = summary(df)
    text = _render(shown, args.format)
    text += (f"\n{s['points']} peak points: median |error| {s['median_abs_error']:.1%} (prefill "
             f"{s.get('median_abs_error_prefill', float('nan')):.1%}, decode {s.get('median_abs_error_decode', float('nan')):.1%}), "
             f"worst {s['max_abs_error']:.1%}; beyond 30% without a named missing input: "
             f"{', '.join(s['beyond_30pct_unexplained']) or 'none'}\n")
    return text


def run_predict(args: argparse.Namespace) -> str:
    from . import grounded

    common = dict(attn_tp=args.attn_tp, redundant_experts=args.redundant_experts, overlap=args.overlap,
                  imbalance=args.imbalance)
    if args.phase == "decode":
        r = grounded.decode(args.model, args.device, batch=args.batch, kv_len=args.kv_len,
                            ep=128 if args.ep is None else args.ep, mtp=args.mtp, mtp_accepted=args.mtp_accepted,
                            kv_fp8=args.kv_fp8, **common)
    else:
        r = grounded.prefill(args.model, args.device, tokens=args.tokens, prompt_len=args.prompt_len,
                             cached_prefix=args.cached_prefix, ep=32 if args.ep is None else args.ep, **common)
    calls = grounded.calls_frame(r)[["kernel", "family", "stage", "calls_per_step", "us", "ms_per_step",
                                     "efficiency", "from_table", "clamped"]]
    text = _render(calls, args.format)
    if args.format == "csv":
        return text
    band = r["error_band"]
    lines = [f"\n{args.phase} step on {r['device']}: {r['step_ms']:.2f} ms, {r['tokens_per_gpu_s']:.0f} tokens/s per GPU "
             f"(+/- {band:.0%}: the median |error| of the {args.phase} points in `dsperf validate`)"]
    if args.phase == "decode":
        lines.append(f"TPOT {r['tpot_ms']:.2f} ms, {r['tps_user']:.1f} tokens/s per user; memory holds "
                     f"{r['batch_limit']:.0f} requests per GPU at this context ({'fits' if r['fits_memory'] else 'does NOT fit'})")
    lines.append(f"calls priced from a table row: {r['calls_from_table']}, clamped to a table's edge: "
                 f"{r['calls_clamped']}, at the default efficiency (no row): {r['calls_default']}")
    return text + "\n".join(lines) + "\n"
