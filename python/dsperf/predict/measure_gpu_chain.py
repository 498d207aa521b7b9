"""dsperf measure-gpu --chain POINT: what a decode step spends between its kernels.

The table rows and `--step` time each kernel alone (its own GPU time after an L2 flush). A server
runs a step's ~1,500 kernels back to back, either replayed from one CUDA graph or launched one by
one from the host (eager). This times the same step three ways on the GPU at hand:

- alone: each call's kernels, their own time (measure_gpu_torch.TorchTimer, as the table rows);
- graph: the whole step captured into one CUDA graph and replayed (CUDA events around a replay);
- eager: the same calls launched one by one from Python (PyTorch's launch path, as a server without
  CUDA graphs runs them).

(graph - sum of the kernels alone) / kernels is the time a kernel boundary costs inside a graph:
the drain of one kernel and the ramp of the next, the launch latency a graph does not remove.
eager / kernels, where the host is the bound, is the host's time to launch one kernel. A tiny
kernel (one value added in place) chained 2,000 times gives the same two figures with nothing else
in the way (`floor`).

Weights: each call's operands exist in RING copies used in turn by successive layers, so a step
reads its weights from HBM as a server does (RING layers' weights are far larger than the L2).
Calls whose kernel cannot run or be captured here (the TP all-reduces on one GPU; MLA decode
without FlashInfer) are left out of the chain and named in the output.
"""
from __future__ import annotations

import math
import statistics

RING = 4           # operand copies per call: successive layers read different weights
FLOOR_KERNELS = 2000
GRAPH_REPLAYS = 10
EAGER_RUNS = 5


def layer_plan(calls: list[dict]) -> list[list[int]]:
    """The step as layers of call indices, in the order the calls are listed: a call run n times a
    step (calls_per_step, rounded) appears in the first n of max(n) layers. 61 layers of a
    DeepSeek-V3 step: the 3 dense layers' calls in the first 3, the LM head in the first."""
    counts = [max(0, int(round(float(c["calls_per_step"])))) for c in calls]
    layers = max(counts, default=0)
    return [[i for i, n in enumerate(counts) if layer < n] for layer in range(layers)]


def chain_summary(alone_us: dict, kernels_per_call: dict, plan: list[list[int]], graph_us: float,
                  eager_us: float, eager_host_us: float) -> dict:
    """The chain's figures from its measurements: alone_us / kernels_per_call by call index (the
    calls in the chain), the step's graph replay and eager times (us, CUDA events) and the host's
    wall time of the eager launches (us)."""
    chained = [i for layer in plan for i in layer if i in alone_us]
    kernels = sum(kernels_per_call[i] for i in chained)
    alone = sum(alone_us[i] for i in chained)
    out = {"calls": len(chained), "kernels": kernels, "alone_ms": alone / 1e3, "graph_ms": graph_us / 1e3,
           "eager_ms": eager_us / 1e3, "eager_host_ms": eager_host_us / 1e3}
    out["graph_gap_us"] = (graph_us - alone) / kernels if kernels else math.nan
    out["eager_launch_us"] = eager_host_us / kernels if kernels else math.nan
    out["graph_over_alone"] = graph_us / alone if alone else math.nan
    return out


def _events_us(torch, fn, runs: int) -> tuple[float, float]:
    """(median GPU time of fn between CUDA events, median host wall time of the call), us."""
    import time

    gpu, host = [], []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end) * 1e3)
        host.append((t1 - t0) * 1e6)
    return statistics.median(gpu), statistics.median(host)


def kernels_per_call(torch, fn) -> int:
    """GPU kernels one call of fn launches (PyTorch's profiler over three calls)."""
    from torch.profiler import ProfilerActivity, profile

    from .gpu_timing import _is_gpu_kernel

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    n = sum(e.count for e in prof.key_averages() if _is_gpu_kernel(e))
    return max(1, int(round(n / 3)))


def _graph_of(torch, fns) -> "object":
    """One CUDA graph of fns in order (warmed up on a side stream first, as PyTorch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    return g


def graph_and_eager(torch, fns) -> tuple:
    """fns run in order two ways: (their graph, its replay's GPU time, the eager run's GPU time, the
    eager run's host launch time), us, medians of GRAPH_REPLAYS and EAGER_RUNS."""
    g = _graph_of(torch, fns)
    graph_us, _ = _events_us(torch, g.replay, GRAPH_REPLAYS)

    def eager():
        for f in fns:
            f()
    eager_us, host_us = _events_us(torch, eager, EAGER_RUNS)
    return g, graph_us, eager_us, host_us


def launch_floor(torch, n: int = FLOOR_KERNELS) -> dict:
    """A one-value in-place add chained n times: per kernel, replayed from a graph and launched
    eagerly (GPU time between events and the host's launch time), us."""
    x = torch.zeros(1, device="cuda", dtype=torch.float32)
    _, graph_us, eager_us, host_us = graph_and_eager(torch, [lambda: x.add_(1.0)] * n)
    return {"kernels": n, "graph_us_per_kernel": graph_us / n, "eager_us_per_kernel": eager_us / n,
            "eager_host_us_per_kernel": host_us / n}


def clock_under_replay(torch, graph, seconds: float, sampler=None) -> dict:
    """The SM clock while the step's graph replays back to back for `seconds`: nvidia-smi's median SM
    clock and power over the second half (after the clock settles), the maximum clock, and the
    median replay time over that half (ms). {} where nvidia-smi is missing or gave no sample."""
    from .gpu_timing import ClockSampler

    sampler = sampler or ClockSampler()
    if not sampler.available:
        return {}
    replays = []
    with sampler:
        while sampler.now() < seconds:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            replays.append((sampler.now(), start.elapsed_time(end)))
    got = sampler.summary(after_s=seconds / 2)
    if got is None:
        return {}
    mhz, max_mhz, watts, limit_w, n = got
    late = [ms for t, ms in replays if t >= seconds / 2]
    return {"seconds": seconds, "sm_mhz": mhz, "max_sm_mhz": max_mhz, "ratio": mhz / max_mhz if max_mhz else math.nan,
            "watts": watts, "power_limit_w": limit_w, "samples": n,
            "replay_ms": statistics.median(late) if late else math.nan, "replays": len(replays)}


def measure_chain(torch, timer, calls: list[dict], shapes: dict, iters: int, log=print,
                  clock_seconds: float = 0.0) -> dict:
    """Times the step of `calls` (shapes: call index -> its production Shape) alone, as one graph and
    eagerly; with clock_seconds > 0, the SM clock while the graph replays that long.
    Returns {"summary", "rows", "left_out", "floor", "clock"}."""
    plan = layer_plan(calls)
    fns, keep, left_out, alone, per_call = {}, [], {}, {}, {}
    for i, shape in shapes.items():
        name = calls[i]["kernel"]
        try:
            build = getattr(timer, f"_{shape.kernel}_{shape.family}")
            copies = [build(shape) for _ in range(RING)]
            one = copies[0][0]
            _graph_of(torch, [one])  # refused here rather than inside the step's capture
            alone[i] = timer.measure(shape, iters).us
            per_call[i] = kernels_per_call(torch, one)
        except Exception as e:  # noqa: BLE001 - a call that cannot run or be captured is named and left out
            left_out[name] = f"{type(e).__name__}: {str(e)[:160]}"
            torch.cuda.synchronize()
            continue
        fns[i] = [f for f, _ in copies]
        keep.append(copies)
        log(f"  {name}: {shape.label()} alone {alone[i]:.2f} us, {per_call[i]} kernel(s) a call")
    for i, c in enumerate(calls):
        if i not in shapes:
            left_out.setdefault(c["kernel"], f"family {c['family']}: no kernel to run it on one GPU here")
    chain = [fns[i][layer % RING] for layer, idx in enumerate(plan) for i in idx if i in fns]
    log(f"  the step: {len(chain)} calls in the chain; capturing one graph")
    g, graph_us, eager_us, host_us = graph_and_eager(torch, chain)
    summary = chain_summary(alone, per_call, plan, graph_us, eager_us, host_us)
    rows = [{"kernel": calls[i]["kernel"], "family": calls[i]["family"], "shape": shapes[i].label(),
             "calls_per_step": calls[i]["calls_per_step"], "alone_us": alone[i], "kernels_per_call": per_call[i]}
            for i in sorted(alone)]
    clock = clock_under_replay(torch, g, clock_seconds) if clock_seconds > 0 else {}
    return {"summary": summary, "rows": rows, "left_out": left_out, "floor": launch_floor(torch), "clock": clock}


def chain_markdown(title: str, result: dict, env: dict, priced_as: str) -> str:
    from .measure_gpu_output import markdown_table
    import pandas as pd

    s, f = result["summary"], result["floor"]
    lines = [f"# dsperf measure-gpu {title}", "",
             f"Calls priced as {priced_as}; run on {env.get('gpu', '?')} (torch {env.get('torch', '?')}, CUDA "
             f"{env.get('cuda', '?')}), {env.get('date', '?')}. Each call's operands in {RING} copies used in turn by "
             "successive layers (weights read from HBM).", "",
             "| measure | value |", "|---|---:|",
             f"| calls in the chain / kernels they launch | {s['calls']} / {s['kernels']} |",
             f"| kernels alone (own GPU time after an L2 flush), summed | {s['alone_ms']:.3f} ms |",
             f"| the step replayed from one CUDA graph | {s['graph_ms']:.3f} ms ({s['graph_over_alone']:.3f} x alone) |",
             f"| per kernel boundary inside the graph, (graph - alone) / kernels | {s['graph_gap_us']:.3f} us |",
             f"| the step launched eagerly from Python: GPU time / host launch time | {s['eager_ms']:.3f} / "
             f"{s['eager_host_ms']:.3f} ms |",
             f"| host launch time per kernel, eager | {s['eager_launch_us']:.3f} us |",
             f"| floor: one-value add x {f['kernels']}, graph replay per kernel | {f['graph_us_per_kernel']:.3f} us |",
             f"| floor: the same launched eagerly, GPU / host per kernel | {f['eager_us_per_kernel']:.3f} / "
             f"{f['eager_host_us_per_kernel']:.3f} us |"]
    c = result.get("clock") or {}
    if c:
        lines.append(f"| SM clock while the graph replays {c['seconds']:.0f} s (second half): median / max | "
                     f"{c['sm_mhz']:.0f} / {c['max_sm_mhz']:.0f} MHz ({c['ratio']:.4f}), {c['watts']:.0f} W of "
                     f"{c['power_limit_w']:.0f} W; replay {c['replay_ms']:.3f} ms |")
    lines += ["",
             markdown_table(pd.DataFrame(result["rows"]), ".4g"), ""]
    if result["left_out"]:
        lines += ["Left out of the chain:", ""] + [f"- {k}: {v}" for k, v in result["left_out"].items()] + [""]
    return "\n".join(lines)


def run_chain(args, device, iters, torch, timer_factory, print_fn) -> int:
    """--chain POINT: the point's decode step run alone, as one graph and eagerly (see the module)."""
    import json
    from pathlib import Path

    from . import measure_gpu_step as S
    from .measure_gpu_torch import TorchTimer

    clock_s = getattr(args, "clock_seconds", 0.0) or 0.0
    if not (math.isfinite(clock_s) and 0 <= clock_s <= 600):
        raise ValueError(f"--clock-seconds must lie in [0, 600], got {clock_s}")
    point = S.find_point(args.chain, "--chain")
    calls, _ = S.step_calls(point)
    shapes = {i: s for i, c in enumerate(calls) if (s := S.call_shape(c)) is not None}
    if args.dry_run or (timer_factory is None and torch is None):
        plan = layer_plan(calls)
        print_fn(f"--chain {point['point']}: {sum(map(len, plan))} calls over {len(plan)} layers; "
                 f"{len(shapes)} of {len(calls)} distinct calls have a kernel to run"
                 + ("" if args.dry_run else ". Nothing measured: needs PyTorch with a CUDA GPU."))
        return 0
    timer = timer_factory() if timer_factory else TorchTimer(torch)
    result = measure_chain(torch, timer, calls, shapes, iters, log=print_fn if args.verbose else (lambda s: None),
                           clock_seconds=clock_s)
    env = timer.environment()
    env.pop("kernel_text", None)
    out_dir = Path(args.out or f"measure-gpu-chain-{point['point']}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "chain.json").write_text(json.dumps({"point": point["point"], "env": env, **result}, indent=1))
    text = chain_markdown(f"--chain {point['point']}", result, env, point["device"])
    (out_dir / "chain.md").write_text(text)
    print_fn(text)
    print_fn(f"written: {out_dir / 'chain.json'}, {out_dir / 'chain.md'}")
    return 0
