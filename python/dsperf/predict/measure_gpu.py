"""`dsperf measure-gpu`: the shapes of a shipped kernel table timed on the GPU at hand with the
kernels production serving runs there, written as that GPU's own table in the shipped format.

    dsperf measure-gpu [--device H200] [--out DIR] [--budget-s 480] [--quick] [--dry-run]

Which kernel times which family (each row's source names it, with the library versions, the GPU,
its SM clock while the row was timed, and the date):

    gemm_fp8            torch._scaled_mm, FP8 e4m3 with per-tensor scales, BF16 out (cuBLASLt)
    gemm_bf16           torch.matmul in BF16 (cuBLAS), at the gemm_fp8 rows' shapes (the shipped
                        tables have no BF16 rows: the model prices those GEMMs at its default)
    grouped_masked      torch._scaled_grouped_mm, FP8 with row-wise scales, 3D x 3D (one batch of
                        experts, every expert full): PyTorch's CUTLASS grouped GEMM. Skipped, and
                        said so, where the installed PyTorch has no such function: a loop of
                        per-expert GEMMs is not a grouped kernel and would misprice the family.
    grouped_contiguous  the same kernel, 2D x 3D with per-expert row offsets
    mla_decode          FlashInfer's BatchMLAPagedAttentionWrapper (absorbed MLA over a paged BF16
                        latent cache, 64-token pages), where `import flashinfer` works
    mla_prefill         torch's scaled_dot_product_attention, causal (after a step's cached prefix:
                        the new tokens against prefix + new keys), q/k 192 and v 128 wide,
                        restricted to its fused backends (FlashAttention, cuDNN, memory-efficient;
                        the unfused math path is refused); the kernel that ran is named
  dsperf's own CUDA kernels (dsperf.cuda.grouped_gemm, mla_decode) time the same grouped and MLA
  decode shapes where dsperf was built with CUDA. They are not what a serving system runs, so
  their rows go to a separate file beside the comparison, never into the table the model reads.

Every call is timed as benchmarks/gpu_model_check.py times its GEMMs (dsperf.predict.gpu_timing):
an L2 flush before each launch, the kernels' own GPU time from PyTorch's profiler (CUPTI) averaged
over --iters launches; the median CUDA-event time around each launch is kept beside it.

Written to --out (default ./measure-gpu-<DEVICE>):
  <DEVICE>.csv                 the production rows, loadable by dsperf.model.grounded.read_table_rows
  <DEVICE>-measured.toml       the shipped device file with kernel_table = "<DEVICE>.csv": the grounded
                               model prices this GPU from its own rows through it
                               (dsperf predict --device <out>/<DEVICE>-measured.toml)
  <DEVICE>-dsperf-kernels.csv  dsperf's own kernels' rows, same format (not read by the model)
  comparison.csv / comparison.md  each measured shape beside the grounded model's current price for
                               this device (the shipped table, H800's rows for the Hopper parts,
                               moved onto this GPU's roofline) and their ratio; the shapes left
                               out and why; the model's steps from the shipped and the new table.

The run keeps to --budget-s: every shape's cost is estimated from the model's price of it (setup,
warm-up, 2 x iters timed launches with their flushes, the profiler's own overhead), corrected by
what the shapes measured so far really took; a shape whose estimate would end the run past the
budget is left out, and the files say which. The order interleaves the families (and, within one,
takes every other shape first), so a cut leaves a spread of every family rather than none of the
last. Without a GPU or PyTorch it says why and exits 0; --dry-run lists the shapes and the
estimated time without touching a GPU.

The timing is injectable: run_plan takes any object with available() / environment() /
measure(shape, iters) (TorchTimer is the real one) and a clock with now() / window(); the tests run
the whole pipeline with a fake one on a machine without a GPU.
"""
from __future__ import annotations

import datetime
import math
import statistics
from pathlib import Path
from typing import Callable

from .measure_gpu_output import markdown_table, write_outputs
from .measure_gpu_plan import DEFAULT_ITERS, QUICK_ITERS, Outcome, Pricer, Shape, estimate_s, plan_shapes
from .measure_gpu_torch import TorchTimer


def run_plan(timer, shapes: list[Shape], *, budget_s: float, iters: int, clock, price: Callable,
             log: Callable = lambda s: None, today: Callable | None = None) -> Outcome:
    """Measures the shapes in order with `timer` until the budget is spent: a shape whose family
    cannot run here (timer.available()) or whose estimate would end past budget_s (clock.now(),
    seconds since the run began) is left out with the reason; one whose measurement raises is
    left out with the error. Each measured shape keeps the SM clock over its own window."""
    today = today or (lambda: datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    skipped = {key: why for key, why in timer.available().items() if why}
    measured, left_out, ratios, started = [], [], [], set()
    for i, shape in enumerate(shapes):
        try:
            _one_shape(timer, shape, iters, budget_s, clock, price, log, today, skipped, measured, left_out, ratios,
                       started)
        except KeyboardInterrupt:  # stopped from outside (a hard time limit): keep what was measured
            left_out.extend((s, "interrupted: the run was stopped before this shape") for s in shapes[i:])
            break
    return Outcome(measured, left_out, skipped, clock.now(), budget_s, dict(timer.environment()))


def _one_shape(timer, shape, iters, budget_s, clock, price, log, today, skipped, measured, left_out, ratios, started):
    """One shape of run_plan: left out (family not runnable, budget, error) or measured."""
    key = (shape.family, shape.kernel)
    if key in skipped:
        left_out.append((shape, f"not run: {skipped[key]}"))
        return
    model_us, found = price(shape)
    # The estimate's per-shape part scaled by what the shapes so far took over theirs; a
    # family's first call (its library's set-up) is not.
    est = estimate_s(shape, model_us, iters)
    scale = min(10.0, max(0.5, statistics.median(ratios))) if ratios else 1.0
    est = est * scale + (estimate_s(shape, model_us, iters, True) - est if key not in started else 0.0)
    t0 = clock.now()
    if t0 + est > budget_s:
        left_out.append((shape, f"budget: estimated {est:.1f} s, {max(0.0, budget_s - t0):.1f} s left"))
        return
    try:
        m = timer.measure(shape, iters)
    except Exception as e:  # noqa: BLE001 - one shape's failure is reported, the run goes on
        started.add(key)
        left_out.append((shape, f"error: {type(e).__name__}: {' '.join(str(e).split())[:200]}"))
        log(f"  {shape.family} [{shape.kernel}] {shape.label()}: {type(e).__name__}: {str(e)[:120]}")
        return
    t1 = clock.now()
    if key in started:  # a family's first shape carries its library's first call: not a rate
        ratios.append((t1 - t0) / max(estimate_s(shape, model_us, iters), 1e-9))
    started.add(key)
    measured.append(dict(shape=shape, us=m.us, event_us=m.event_us, kernels=tuple(m.kernels), model_us=model_us,
                         from_table=found, clock=clock.window(t0, t1), date=today(), seconds=t1 - t0))
    log(f"  {shape.family} [{shape.kernel}] {shape.label()}: {m.us:.2f} us (model {model_us:.2f} us)")


# ---- the command ----------------------------------------------------------------------------------
def plan_text(shapes: list[Shape], price: Callable, iters: int, budget_s: float, device: str, note: str = "") -> str:
    """--dry-run: the shapes, the model's price and the estimated seconds of each, and where the
    budget would cut the plan if the estimates held."""
    import pandas as pd

    rows, total, started = [], 0.0, set()
    for s in shapes:
        us, found = price(s)
        est = estimate_s(s, us, iters, (s.family, s.kernel) not in started)
        started.add((s.family, s.kernel))
        fits = total + est <= budget_s
        total += est if fits else 0.0
        rows.append({"family": s.family, "kernel": s.kernel, "shape": s.label(), "model_us": us,
                     "estimated_s": est, "within_budget": fits})
    df = pd.DataFrame(rows)
    by = df.groupby(["family", "kernel"], sort=False).agg(shapes=("shape", "size"), estimated_s=("estimated_s", "sum"),
                                                          within_budget=("within_budget", "sum")).reset_index()
    out = [f"dsperf measure-gpu --dry-run: {len(shapes)} shapes priced as {device}, {iters} timed launches each "
           f"(CUPTI) plus {iters} event-timed; nothing is timed.{note}", "",
           markdown_table(by, ".1f"), "",
           f"estimated total {df['estimated_s'].sum():.0f} s; within the {budget_s:.0f}-s budget: "
           f"{int(df['within_budget'].sum())} shapes ({total:.0f} s), left out: {int((~df['within_budget']).sum())}. "
           "Families this machine cannot run (no grouped FP8 GEMM in torch, no FlashInfer, dsperf built without CUDA) "
           "are skipped on the GPU and named in the output.", "",
           markdown_table(df, ".3g"), ""]
    return "\n".join(out)


def run_command(args, *, timer_factory=None, clock_factory=None, print_fn=print) -> int:
    """`dsperf measure-gpu`: returns the exit status (0 also when there is no GPU to measure)."""
    from .gpu_timing import ClockSampler, gpu_device_name

    iters = args.iters if args.iters is not None else (QUICK_ITERS if args.quick else DEFAULT_ITERS)
    if not 1 <= iters <= 1000:
        raise ValueError(f"--iters must lie in [1, 1000], got {iters}")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise ValueError(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    torch, why = None, None
    if timer_factory is None:
        try:
            import torch
        except ImportError:
            why = "PyTorch is not installed"
        else:
            if not torch.cuda.is_available():
                why = "no CUDA GPU is usable here (torch.cuda.is_available() is False)"
                torch = None
    device, note = args.device, ""
    if device is None and torch is not None:
        device = gpu_device_name(torch)
        if device is None:
            raise ValueError(f"--device is needed: no shipped device file matches '{torch.cuda.get_device_name(0)}'")
    if device is None and args.dry_run:
        device, note = "H200", " No GPU to name the device: priced as H200 (--device to choose)."
    if getattr(args, "chain", None) and (getattr(args, "step", None) or getattr(args, "step_calls", None)):
        raise ValueError("--chain and --step / --step-calls time different things: give one")
    if getattr(args, "clock_seconds", 0.0) and not getattr(args, "chain", None):
        raise ValueError("--clock-seconds samples the clock while --chain's step replays: it needs --chain")
    if getattr(args, "chain", None):
        from .measure_gpu_chain import run_chain
        return run_chain(args, device, iters, torch, timer_factory, print_fn)
    if getattr(args, "step", None) or getattr(args, "step_calls", None):
        return _run_step(args, device, note, iters, torch, timer_factory, clock_factory, print_fn)
    shapes = plan_shapes(args.table, quick=args.quick, dsperf_kernels=not args.no_dsperf_kernels)
    if args.dry_run:
        print_fn(plan_text(shapes, Pricer(device), iters, args.budget_s, device, note))
        return 0
    if timer_factory is None and torch is None:
        print_fn(f"dsperf measure-gpu needs PyTorch with a CUDA GPU: {why}. Nothing measured.")
        return 0
    if device is None:
        raise ValueError("--device is needed: the timer names no GPU")
    timer = timer_factory() if timer_factory else TorchTimer(torch)
    price = Pricer(device)
    out_dir = Path(args.out or f"measure-gpu-{device}")
    print_fn(f"GPU 0: {timer.environment()['gpu']}; priced as {device} (shipped kernel table {price.table}); "
             f"{len(shapes)} shapes, {iters} launches each, budget {args.budget_s:.0f} s")
    with (clock_factory() if clock_factory else ClockSampler()) as clock:
        outcome = run_plan(timer, shapes, budget_s=args.budget_s, iters=iters, clock=clock, price=price,
                           log=print_fn if args.verbose else (lambda s: None))
    paths = write_outputs(outcome, device, out_dir)
    print_fn(paths["markdown"].read_text().split("## Every measured shape")[0].rstrip())
    print_fn("\nwritten: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _run_step(args, device, note, iters, torch, timer_factory, clock_factory, print_fn) -> int:
    """--step POINT (a decode point's priced calls) or --step-calls FILE (those of any step, written by
    dsperf predict --calls-out), timed at their shapes (measure_gpu_step)."""
    from . import measure_gpu_step as S
    from .gpu_timing import ClockSampler

    if args.step and getattr(args, "step_calls", None):
        raise ValueError("--step and --step-calls name the calls two ways: give one")
    if device is None:
        raise ValueError("--device is needed: the timer names no GPU")
    if args.step:
        point = S.find_point(args.step)
        if device != point["device"]:
            print_fn(f"note: point {point['point']} is a {point['device']} deployment; its calls are priced as "
                     f"{point['device']} and timed on this GPU ({device})")
        calls, result = S.step_calls(point)
        title, source, priced_as, name = f"--step {point['point']}", point["source"], point["device"], point["point"]
    else:
        calls, result = S.read_calls(args.step_calls), None
        title, source, priced_as = f"--step-calls {args.step_calls}", f"The calls in {args.step_calls}", device
        name = Path(args.step_calls).stem
    pairs = S.step_shapes(calls)
    shapes = list(dict.fromkeys(shape for _, shape in pairs))
    if args.no_dsperf_kernels:
        shapes = [s for s in shapes if s.kernel == "production"]
    price = Pricer(priced_as)
    if args.dry_run:
        print_fn(plan_text(shapes, price, iters, args.budget_s, priced_as, note))
        return 0
    if timer_factory is None and torch is None:
        print_fn("dsperf measure-gpu --step needs PyTorch with a CUDA GPU. Nothing measured.")
        return 0
    timer = timer_factory() if timer_factory else TorchTimer(torch)
    with (clock_factory() if clock_factory else ClockSampler()) as clock:
        outcome = run_plan(timer, shapes, budget_s=args.budget_s, iters=iters, clock=clock, price=price,
                           log=print_fn if args.verbose else (lambda s: None))
    df = S.step_frame(calls, outcome)
    summary = S.step_summary(df, result)
    out_dir = Path(args.out or f"measure-gpu-step-{name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_dir / "step.csv", index=False)
    text = S.step_markdown(title, source, df, summary, outcome.env, priced_as)
    if outcome.left_out:
        text += "\n## Left out\n\n" + "\n".join(f"- {s.family} [{s.kernel}] {s.label()}: {why}"
                                               for s, why in outcome.left_out) + "\n"
    (out_dir / "step.md").write_text(text)
    print_fn(text)
    print_fn(f"written: {out_dir / 'step.csv'}, {out_dir / 'step.md'}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("measure-gpu", help="time the kernel table's shapes on this GPU with production kernels and "
                                           "write its own table (docs/CUDA.md)")
    p.add_argument("--device", help="device file to price as (default: from the GPU's name; H200 for --dry-run "
                                    "without a GPU)")
    p.add_argument("--table", default="H800", help="shipped kernel table whose shapes are timed (default H800)")
    p.add_argument("--out", help="output folder (default ./measure-gpu-<DEVICE>)")
    p.add_argument("--budget-s", type=float, default=480.0, help="stop starting new shapes past this many seconds")
    p.add_argument("--quick", action="store_true", help=f"half the shapes of every family, {QUICK_ITERS} launches each")
    p.add_argument("--iters", type=int, help=f"timed launches per shape (default {DEFAULT_ITERS}, quick {QUICK_ITERS})")
    p.add_argument("--no-dsperf-kernels", action="store_true", help="time only the production kernels")
    p.add_argument("--dry-run", action="store_true", help="list the shapes and the estimated time; time nothing")
    p.add_argument("--step", metavar="POINT", help="time the priced calls of this decode validation point's step at "
                                                   "their shapes instead of a table's (measure_gpu_step.py)")
    p.add_argument("--step-calls", metavar="FILE", help="time the calls of a file written by dsperf predict "
                                                         "--calls-out (any deployment's step) at their shapes")
    p.add_argument("--chain", metavar="POINT", help="run this decode validation point's step back to back: each "
                                                    "call alone, the step as one CUDA graph and eagerly (the time "
                                                    "between kernels; measure_gpu_chain.py)")
    p.add_argument("--clock-seconds", type=float, default=0.0,
                   help="with --chain: replay the step's graph this long while nvidia-smi samples the SM clock (0: no)")
    p.add_argument("--verbose", action="store_true", help="a line per shape as it is measured")
