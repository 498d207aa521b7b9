"""Is `dsperf calibrate` stable? Runs the probes several times and prints, per figure, the spread
between runs beside the noise each run reports (the spread of its best rounds, max / min - 1: each
probe repeats until they agree within calibrate.SPREAD_BOUND or its rounds run out), and checks the
figures against first principles (FLOP per cycle x threads x clock; bandwidth below the
cache-resident read). Drift between runs minutes apart (a shared VM's host load) can exceed the
reported noise, and this table shows by how much.

    python benchmarks/bench_calibration.py [--runs 3] [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsperf import calibrate  # noqa: E402

FIGURES = [("bf16_dot_peak_gflops", "bf16_dot_peak_spread"), ("fp32_fma_peak_gflops", "fp32_fma_peak_spread"),
           ("read_gbps_1t", "read_spread_1t"), ("triad_gbps_1t", "triad_spread_1t"), ("cache_read_gbps", "cache_read_spread")]


def clock_ghz() -> float:
    """Highest clock the kernel reports (cpuinfo MHz), GHz; 0 where unknown."""
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
        return max(mhz) / 1000 if mhz else 0.0
    except OSError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="the quick probes (noisier)")
    a = ap.parse_args()
    if a.runs < 2:
        ap.error("--runs must be >= 2")
    runs = [calibrate.measure(quick=a.quick) for _ in range(a.runs)]
    threads = runs[0]["threads"]
    figures = FIGURES + [(f"read_gbps_{threads}t", f"read_spread_{threads}t"),
                         (f"triad_gbps_{threads}t", f"triad_spread_{threads}t")]
    print(f"{a.runs} calibration runs ({'quick' if a.quick else 'full'} probes), {threads} threads\n")
    print("| figure | runs | between runs (max-min)/max | reported noise (largest) | within it |")
    print("|---|---|---|---|---|")
    for value, spread in figures:
        vals = [r[value] for r in runs]
        between = (max(vals) - min(vals)) / max(vals)
        reported = max(r[spread] for r in runs)
        print(f"| {value} | {', '.join(f'{v:.1f}' for v in vals)} | {between:.3f} | {reported:.3f} | "
              f"{'yes' if between <= reported else 'no'} |")
    calls = [r["call_overhead_us"] for r in runs]
    print(f"| call_overhead_us | {', '.join(f'{v:.2f}' for v in calls)} | "
          f"{(max(calls) - min(calls)) / max(calls):.3f} | - | - |")

    ghz = clock_ghz()
    fma = statistics.median(r["fp32_fma_peak_gflops"] for r in runs)
    dot = statistics.median(r["bf16_dot_peak_gflops"] for r in runs)
    print("\nFirst principles (clock from /proc/cpuinfo: "
          f"{ghz:.2f} GHz; AVX-512: 2 FMA ports x 16 FP32 lanes x 2 FLOP, VDPBF16PS: 2 ports x 32 BF16 pairs x 2 FLOP):")
    if ghz:
        print(f"  FP32 FMA {fma:.0f} GFLOPS = {fma / (threads * 64 * ghz):.0%} of {threads} x 64 x {ghz:.2f} GHz "
              f"(cpuinfo gives the base clock; above 100% the cores run turbo, here at least "
              f"{fma / (threads * 64):.2f} GHz)")
        print(f"  BF16 dot {dot:.0f} GFLOPS = {dot / (threads * 128 * ghz):.0%} of {threads} x 128 x {ghz:.2f} GHz")
        print(f"  AMX (if it were usable here): at most {threads} x 1024 x {ghz:.2f} = {threads * 1024 * ghz:.0f} GFLOPS")
    read = statistics.median(r[f"read_gbps_{threads}t"] for r in runs)
    cache = statistics.median(r["cache_read_gbps"] for r in runs)
    print(f"  streaming read {read:.1f} GB/s {'<' if read < cache else '>='} cache-resident read {cache:.1f} GB/s")


if __name__ == "__main__":
    main()
