"""Serving-simulation speed: the whole Mooncake conversation trace (12,031 requests) on DeepSeek's
H800 layout, disaggregated (a 144-GPU decode EP group with 32 redundant experts, a 32-GPU prefill
EP group with 32 redundant experts: the settings of points.csv's deepseek_day6 rows), timed on one
core, against a plain-Python event loop over the same requests with the same step-time table
(benchmarks/serving_python_loop.py), in the same run.

    OMP_NUM_THREADS=1 python benchmarks/bench_simulate.py [--repeats 3] [--python-requests N]

Before any timing is reported the two runs' per-request first-token and finish times are compared.
Ends with the line `simulate requests/s: N (R x plain Python)`.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.timing, run as a script
import serving_python_loop  # noqa: E402

from benchmarks.timing import timed  # noqa: E402

from dsperf import _C, serving  # noqa: E402
from dsperf.model import grounded  # noqa: E402
from dsperf.model.configs import load_model  # noqa: E402
from dsperf.model.devices import load_device  # noqa: E402

# DeepSeek's H800 layout (docs/VALIDATION.md, points.csv deepseek_day6_decode / _prefill).
LAYOUT = dict(mode="disaggregated", ep=144, redundant_experts=32, max_batch=128, prefill_ep=32,
              prefill_redundant_experts=32, routing="least_loaded")


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python-requests", type=int, default=0,
                    help="requests the plain loop replays (default 0: the whole trace)")
    args = ap.parse_args()
    trace = serving.load_trace("conversation")
    n = len(trace)

    sim = timed(lambda: serving.simulate("DeepSeek-V3", "H800", trace=trace, **LAYOUT), args.repeats)
    r, t_sim = sim.result, sim.median
    s = r.summary()

    # The plain loop on the same requests (all of them, or the first N), priced from the same table.
    m, d = load_model("DeepSeek-V3"), load_device("H800", "corrected")
    tables = grounded.kernel_tables("H800")
    common = dict(attn_tp=1, redundant_experts=32)  # simulate()'s defaults for the LAYOUT above
    dec = grounded._deployment("decode", ep=144, batch=1, **common)
    pre_layout = grounded._deployment("decode", ep=32, batch=1, **common)
    pricer_d = _C.serving.StepPricer(m, d, tables, dec, grounded._deployment("prefill", ep=144, **common))
    pricer_p = _C.serving.StepPricer(m, d, tables, pre_layout, grounded._deployment("prefill", ep=32, **common))
    k = args.python_requests or n
    part = trace.take(slice(0, k))
    loop = timed(lambda: serving_python_loop.run(part, pricer_d, pricer_p, decode_ranks=144, prefill_ranks=32,
                                                 kv_gbps=d.scaleout_gbps, max_running=128), 1, warm_up=False)
    plain, t_plain = loop.result, loop.median

    ref = r if k == n else serving.simulate("DeepSeek-V3", "H800", trace=part, **LAYOUT)
    first = np.array([q["first"] for q in plain], dtype=float)
    finish = np.array([q["finish"] for q in plain], dtype=float)
    dev_first = np.nanmax(np.abs(first - ref.records["first_token_ms"].to_numpy()))
    dev_finish = np.nanmax(np.abs(finish - ref.records["finish_ms"].to_numpy()))
    print(f"CPU: {cpu_name()}; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print(f"trace: {n} requests (conversation); layout: decode EP144 (+32 redundant, <= 128 requests per GPU), "
          f"prefill EP32 (+32 redundant), disaggregated, least-loaded routing, prefix cache on")
    print(f"C++ simulate: {t_sim:.3f} s median of {args.repeats} ({s['finished']} finished, "
          f"{r.info['steps']} group steps, {r.info['priced_points']} grounded-model evaluations)")
    print(f"  TTFT p50/p90/p99 {s['ttft_p50_ms'] / 1e3:.2f} / {s['ttft_p90_ms'] / 1e3:.2f} / "
          f"{s['ttft_p99_ms'] / 1e3:.2f} s; TPOT p50/p90/p99 {s['tpot_p50_ms']:.1f} / {s['tpot_p90_ms']:.1f} / "
          f"{s['tpot_p99_ms']:.1f} ms; prefix-cache hits {s['cached_token_share']:.1%} of prompt tokens")
    print(f"plain Python loop: {t_plain:.2f} s for {k} requests; largest difference from the C++ run: first token "
          f"{dev_first:.3g} ms, finish {dev_finish:.3g} ms")
    if not (dev_first < 1e-3 * max(1.0, np.nanmax(first)) and dev_finish < 1e-3 * max(1.0, np.nanmax(finish))):
        print("WARNING: the plain loop and the C++ simulator disagree beyond rounding")
    rate = n / t_sim
    ratio = (k / t_plain) and rate / (k / t_plain)
    print(f"simulate requests/s: {rate:.0f} ({ratio:.0f} x plain Python)")


if __name__ == "__main__":
    main()
