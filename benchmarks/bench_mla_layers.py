"""Whole MLA layers per execution variant at the shapes `dsperf report` times (16 heads, DeepSeek-V3's
other sizes): a decode step after a cached context and a prefill chunk after a cached prefix, each the
median of cold calls (the last-level cache flushed before each, as the report's sweep does).

    python benchmarks/bench_mla_layers.py [--variants CC,A_CC_ME] [--steps 2048,4096,8192]
                                          [--prefills 32:256,64:0,64:1024] [--repeats 5]

The figures behind docs/KERNELS_MEASUREMENTS.md's CC decompression and query-absorption entries
(2026-11-27): run it on the builds before and after a kernel change, in the same minutes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.baselines, run as a script

from benchmarks.baselines.machine import cache_sizes, describe_caches, describe_isa  # noqa: E402
from dsperf import _C  # noqa: E402
from dsperf.kernels import MLA_VARIANTS  # noqa: E402
from dsperf.predict import harness  # noqa: E402
from dsperf.predict.calibrate import _cpu_model, kernel_path  # noqa: E402  (the name calibration files record)
from dsperf.predict.harness import Pool  # noqa: E402


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise SystemExit(f"{flag} must list integers >= 0, got {text!r}")
    return values


def _prefills(text: str) -> list[tuple[int, int]]:
    out = []
    for item in (v for v in text.split(",") if v):
        tokens, _, prefix = item.partition(":")
        try:
            out.append((int(tokens), int(prefix or 0)))
        except ValueError:
            raise SystemExit(f"--prefills must be tokens:prefix pairs, got {item!r}") from None
        if out[-1][0] < 1 or out[-1][1] < 0:
            raise SystemExit(f"--prefills needs tokens >= 1 and prefix >= 0, got {item!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(MLA_VARIANTS), help=f"of {', '.join(MLA_VARIANTS)}")
    ap.add_argument("--steps", default="2048,4096,8192", help="cached tokens of each decode step")
    ap.add_argument("--prefills", default="32:256,64:0,64:1024,128:0", help="tokens:prefix of each prefill chunk")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    bad = [v for v in variants if v not in MLA_VARIANTS]
    if bad or not variants:
        raise SystemExit(f"--variants must name some of {', '.join(MLA_VARIANTS)}, got {a.variants!r}")
    if a.heads < 1 or a.repeats < 1:
        raise SystemExit("--heads and --repeats must be >= 1")
    points = [("mla_layer_step", v, 1, p) for p in _ints(a.steps, "--steps") for v in variants]
    points += [("mla_layer_prefill", v, t, p) for t, p in _prefills(a.prefills) for v in variants]

    print(f"cpu: {_cpu_model()}; kernels: {kernel_path()}")
    print(describe_isa(_C.kernels))
    print(f"caches: {describe_caches(cache_sizes())}; each call after a flush of the last-level cache "
          f"(the data streamed from memory); median of {a.repeats} calls")
    pool, flush = Pool(), harness.CacheFlusher()
    print(f"{'layer':<18} {'variant':<9} {'tokens':>6} {'prefix':>6} {'median ms':>10} {'min ms':>8} {'spread':>7}")
    for family, v, tokens, prefix in points:
        call, _ = harness.build(family, dict(variant=v, tokens=tokens, prefix=prefix, heads=a.heads), pool)
        r = harness.measure(call, repeats=a.repeats, warmup=1, flush=flush)
        print(f"{family:<18} {v:<9} {tokens:>6} {prefix:>6} {r['measured_ms']:>10.2f} {r['min_ms']:>8.2f} "
              f"{r['spread']:>7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
