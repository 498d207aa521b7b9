"""The ``dsperf`` command."""
from __future__ import annotations

import argparse
import sys

from . import __version__, cli_grounded
from .serving import cli as cli_serving
from ._checks import MAX_COUNT, MAX_TOKENS, number, number_list


def _csv(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _positive_floats(text: str) -> list[float]:
    try:
        values = [float(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, got '{text}'") from None
    return values


def _add_tables(sub):
    p = sub.add_parser("tables", help="print every table of the seed analysis (as_published by default)")
    p.add_argument("--model", default="DeepSeek-V3", help="shipped model name or config.json path")
    p.add_argument("--mode", default="as_published",
                   help="as_published (the seed's arithmetic), corrected (every fix), or either with "
                        "+fix / -fix terms; `dsperf fixes` lists the fixes")
    p.add_argument("--devices", type=_csv, help="devices for both phases, e.g. H800,H20,H200")
    p.add_argument("--prefill-devices", type=_csv, default=["H800", "H20"])
    p.add_argument("--decode-devices", type=_csv, default=["H800", "H20", "H20_3e"])
    p.add_argument("--seq-len", type=float, default=4383, help="prompt length (tokens)")
    p.add_argument("--decode-len", type=float, default=1210, help="output length (tokens)")
    p.add_argument("--kv-cache-hit", type=float, default=0.563, help="prefix-cache hit rate in [0, 1)")
    p.add_argument("--tp", type=int, default=4, help="prefill attention TP of the headline layout")
    p.add_argument("--dp", type=int, default=8, help="prefill attention DP of the headline layout")
    p.add_argument("--alt-tp", type=int, default=8, help="TP of the second prefill layout")
    p.add_argument("--alt-dp", type=int, default=4, help="DP of the second prefill layout")
    p.add_argument("--dispatch-nodes", type=int, default=4)
    p.add_argument("--batch-sizes", type=_positive_floats, default=[32, 64, 128, 256], help="decode batch per GPU")
    p.add_argument("--ep", type=int, default=144, help="decode expert parallelism (GPUs sharing the experts)")
    p.add_argument("--redundant-experts", type=int, default=32, help="decode redundant expert replicas")
    p.add_argument("--sections", type=_csv, default=["model", "devices", "prefill", "decode"],
                   help="any of model,devices,prefill,decode")
    p.add_argument("--format", default="markdown", choices=["markdown", "csv"])


def _add_devices(sub):
    p = sub.add_parser("devices", help="list the shipped device specs")
    p.add_argument("--mode", default="corrected", help="as_published shows the seed's values")
    sub.add_parser("fixes", help="list the seed quirks that corrected mode fixes")
    sub.add_parser("deviations", help="each fix's effect on the headline figures (docs/DEVIATIONS.md)")
    c = sub.add_parser("calibrate", help="measure this machine and write it as a device spec")
    c.add_argument("--force", action="store_true", help="measure again even if a calibration is cached")
    c.add_argument("--quick", action="store_true", help="short probes (seconds): noisier figures")
    c.add_argument("--out", help="device file to write (default ~/.cache/dsperf/cpu-<host>-<kernels>.toml)")
    c.add_argument("--progress", action="store_true",
                   help="progress on stderr (one line per probe group, a bar during the fit sweep); "
                        "on by default when stderr is a terminal")


def _add_report(sub):
    r = sub.add_parser("report", help="the main job: calibrate (or reuse), print the seed's tables, run the kernel "
                                      "sweep and write a predicted-vs-measured report folder")
    r.add_argument("--quick", action="store_true", help="the small sweep (a few minutes)")
    r.add_argument("--out", default="report", help="report folder (default ./report)")
    r.add_argument("--recalibrate", action="store_true", help="measure the machine again even if a calibration is cached")
    r.add_argument("--calibration",
                   help="device file to use or write (default ~/.cache/dsperf/cpu-<host>-<kernels>.toml)")
    r.add_argument("--hot", action="store_true", help="cache-resident data (default: caches flushed before each call)")
    r.add_argument("--repeats", type=int, help="timed calls per point (default 5, quick 3)")
    r.add_argument("--no-tables", action="store_true", help="do not print the seed's tables (still written)")
    r.add_argument("--no-ep", action="store_true", help="skip the expert-parallel all-to-all section (mpirun -np 2)")
    r.add_argument("--check", action="store_true",
                   help="exit with status 1 when an accuracy target of the report is not met "
                        "(the summary in report.md says met / not met either way)")


def _add_deepseek(sub):
    sub.add_parser("deepseek", help="the model beside DeepSeek's published per-node throughput")


def _run_tables(args) -> str:
    from .seed.tables import TableOptions, all_tables, render

    unknown = set(args.sections) - {"model", "devices", "prefill", "decode"}
    if unknown:
        raise ValueError(f"--sections: unknown section '{sorted(unknown)[0]}'")
    # The API checks these too, but under its own names (tp, not --alt-tp): name the flags here.
    for flag in ("--seq-len", "--decode-len"):
        number(flag, getattr(args, flag[2:].replace("-", "_")), hi=MAX_TOKENS)
    number("--kv-cache-hit", args.kv_cache_hit)
    number_list("--batch-sizes", args.batch_sizes, lo=0, lo_open=True, hi=MAX_TOKENS)
    for flag, lo in (("--tp", 1), ("--dp", 1), ("--alt-tp", 1), ("--alt-dp", 1), ("--dispatch-nodes", 1), ("--ep", 1),
                     ("--redundant-experts", 0)):
        number(flag, getattr(args, flag[2:].replace("-", "_")), integer=True, lo=lo, hi=MAX_COUNT)
    opts = TableOptions(
        model=args.model, mode=args.mode,
        prefill_devices=args.devices or args.prefill_devices, decode_devices=args.devices or args.decode_devices,
        seq_len=args.seq_len, decode_len=args.decode_len, kv_cache_hit=args.kv_cache_hit, tp=args.tp, dp=args.dp,
        alt_tp=args.alt_tp, alt_dp=args.alt_dp, dispatch_nodes=args.dispatch_nodes, batch_sizes=args.batch_sizes,
        ep=args.ep, redundant_experts=args.redundant_experts)
    if "H20" not in [d for d in opts.prefill_devices]:
        opts.scaleout_device = opts.prefill_devices[0]
        opts.scaleout_variants = tuple((f"{opts.scaleout_device}-{bw * 8 * 8 / 1000:g}T", bw) for bw in (50, 25, 12.5))
    return render(all_tables(opts, args.sections), args.format)


def _run_deepseek() -> str:
    from .seed.compare import deepseek_comparison

    return deepseek_comparison().to_markdown(index=False, floatfmt=".2f") + "\n"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the argument, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    parser = _Parser(prog="dsperf", description="DeepSeek-V3/R1 inference cost model")
    parser.add_argument("--version", action="version", version=f"dsperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_tables(sub)
    _add_devices(sub)
    _add_deepseek(sub)
    _add_report(sub)
    cli_grounded.add_parsers(sub)
    cli_grounded.add_explore_parser(sub)
    cli_serving.add_simulate_parser(sub)
    from .predict import measure_gpu
    measure_gpu.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "tables":
            text = _run_tables(args)
        elif args.command == "calibrate":
            from .predict.calibrate import IN_MEMORY_KEYS, calibrate

            from .predict.fit import efficiencies_table

            path, m = calibrate(force=args.force, quick=args.quick, path=args.out,
                                progress=args.progress or sys.stderr.isatty())
            effs = m["efficiency"]
            rows = "\n".join(f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in m.items()
                             if k not in IN_MEMORY_KEYS)
            text = f"| measurement | value |\n|---|---|\n{rows}\n\n"
            if m.get("unsteady_probes"):
                text += (f"unsteady probes (spread above {m.get('probe_spread_bound', 0.1):.0%} over their best rounds; "
                         f"their figures carry that spread as their band): {m['unsteady_probes']}\n\n")
            if effs:
                text += "fitted kernel efficiencies:\n\n" + efficiencies_table(effs).to_markdown(index=False, floatfmt=".3g")
                stuck = [k for k, e in effs.items() if getattr(e, "at_bound", ())]
                if stuck:
                    text += ("\n\nat a bound of the search (the data wanted a value beyond it, so the fit is a clipped "
                             f"guess): {', '.join(stuck)}")
            text += f"\n\ndevice file: {path}" + (" (reused; --force to measure again)" if m.get("reused") else "") + "\n"
        elif args.command == "report":
            from .predict.report import report_targets, run_report

            if args.repeats is not None and not 1 <= args.repeats <= 1000:
                raise ValueError(f"--repeats must lie in [1, 1000], got {args.repeats}")
            out = run_report(args.out, quick=args.quick, cold=not args.hot, force_calibration=args.recalibrate,
                             calibration=args.calibration, repeats=args.repeats, progress=sys.stderr.isatty(),
                             print_tables=not args.no_tables, ep=not args.no_ep)
            text = ""
            if args.check and not all(t["met"] for t in report_targets(out)):
                return 1  # the report and its summary are written; the status says a target was missed
        elif args.command == "validate":
            text = cli_grounded.run_validate(args)
        elif args.command == "predict":
            text = cli_grounded.run_predict(args)
        elif args.command == "explore":
            text = cli_grounded.run_explore(args)
        elif args.command == "simulate":
            text = cli_serving.run_simulate(args)
        elif args.command == "measure-gpu":
            return measure_gpu.run_command(args)  # prints as it goes; 0 also without a GPU (nothing to measure)
        elif args.command == "deviations":
            from .seed.deviations import deviation_effects

            df = deviation_effects()
            # One format per column, never scientific: token rates as whole numbers, the rest to 4 digits.
            fmts = [".0f" if "tok/s" in c else ".4g" for c in df.reset_index().columns]
            text = df.reset_index().to_markdown(index=False, floatfmt=fmts) + "\n"
        elif args.command == "fixes":
            from ._C import fix_descriptions, fix_names

            width = max(map(len, fix_names()))
            text = "".join(f"{n:<{width}}  {d}\n" for n, d in zip(fix_names(), fix_descriptions()))
        elif args.command == "devices":
            from .model.devices import device_table, list_devices

            text = device_table(list_devices(), args.mode).to_markdown(floatfmt=".4g") + "\n"
        else:
            text = _run_deepseek()
    except (ValueError, TypeError, OSError) as e:
        print(f"dsperf {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a command-line tool answers in one line, never a traceback
        print(f"dsperf {args.command}: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
