"""Write python/dsperf/data/efficiency/Ascend910C.csv: the Ascend 910C kernel table, from the
Ascend kernel figures that are published at a source this project could read.

    PYTHONPATH=python python benchmarks/tables/build_ascend910c.py [--check]

What is published, and what it can give
---------------------------------------
No per-shape Ascend kernel benchmark (a latency or TFLOPS at each batch and context, each M of a
GEMM) could be read at its source for this table. What could be read is one best-case figure:

- arXiv 2509.25224 (AMLA, Huawei, 2025-09), abstract: the AMLA MLA decode kernel on "Ascend 910
  NPUs (integrated in CloudMatrix384)" reaches "up to 614 TFLOPS, reaching 86.8% of the
  theoretical maximum FLOPS". 614 / 0.868 = 707 TFLOPS, which is one 910C package's dense BF16
  peak (two dies of 353.9 TFLOPS = 707.8), not a die's (353.9, below 614) and not the FP16 peak
  (752: 614 / 752 = 81.6%). A dsperf "GPU" of this device is one package (Ascend910C.toml:
  fp16_tflops = 707.8, the BF16 package rate), so the figure is 614 / 707.8 = 0.8675 of the
  device's fp16_tflops, with no conversion between die and package. The shape of that best case
  is not in the abstract.

A best-case figure without its shape is an anchor of the transfer rule (dsperf.model.derive_table,
the same rule as the B200 table): every H800 FlashMLA decode row (InferSim, measured per shape)
keeps its efficiency relative to the best H800 row, scaled to the published Ascend best. The rows
are written with basis = derived and name both sources. The published figure is typed in below
and must agree with its row in python/dsperf/data/anchors.csv, which the rule reads.

Not used, and why:
- the operator-level figures of the CloudMatrix384 paper (arXiv 2506.12708: MLA compute and
  memory utilisation, INT8 GEMM utilisation, dispatch/combine latency by EP size) could only be
  read here in secondary summaries, not in the paper's own tables; and dispatch/combine rows
  belong in the network table (data/efficiency/network.csv), which all devices share;
- the deployment figures of that paper and of cann-recipes-infer (tokens/s per NPU, TPOT) are
  validation points (data/validation/points.csv) and never inputs.
So MLA prolog, GEMMs, grouped matmul and the rest still run at the default efficiency.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The installed dsperf (as the other scripts): a source tree's dsperf has no built extension.
from dsperf.model import derive_table  # noqa: E402
from dsperf.model.devices import load_device  # noqa: E402

DEVICE = "Ascend910C"
# (family, published figure, unit, fraction of peak as published, where it was published)
PUBLISHED = [
    ("mla_decode", 614.0, "TFLOPS", 0.868,
     "arXiv 2509.25224 (AMLA: MUL by ADD in FlashAttention Rescaling), abstract"),
]
# The package's dense BF16 peak (two dies of 353.9 TFLOPS), the peak the AMLA percentage is of.
PACKAGE_BF16_TFLOPS = 2 * 353.9


def check() -> list[str]:
    """The published figures against the device file and anchors.csv; problems, one line each."""
    problems = []
    dev = load_device(DEVICE, "corrected")
    if abs(dev.fp16_tflops - PACKAGE_BF16_TFLOPS) > 0.05:
        problems.append(f"{DEVICE}.toml fp16_tflops is {dev.fp16_tflops}, not the package's BF16 peak "
                        f"{PACKAGE_BF16_TFLOPS}: the anchors are fractions of that peak")
    anchors = {(a["table"], f): a for a in derive_table.read_anchors() for f in a["families"]}
    for family, figure, unit, fraction, where in PUBLISHED:
        peak = figure / fraction
        if abs(peak - PACKAGE_BF16_TFLOPS) / PACKAGE_BF16_TFLOPS > 0.005:
            problems.append(f"{where}: {figure} {unit} = {fraction:.1%} of {peak:.1f}, not the package BF16 peak")
        a = anchors.get((DEVICE, family))
        if a is None:
            problems.append(f"anchors.csv has no {DEVICE} row for {family} ({where}, {figure} {unit})")
        elif a["published"] != figure or a["peak_field"] != "fp16_tflops" or "2509.25224" not in a["source"]:
            problems.append(f"anchors.csv's {DEVICE} {family} row ({a['published']} of {a['peak_field']}) is not "
                            f"{figure} {unit} of fp16_tflops from {where}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the shipped table is what this gives")
    a = ap.parse_args(argv)
    problems = check()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    text = derive_table.render(DEVICE)
    path = ROOT / "python" / "dsperf" / "data" / "efficiency" / f"{DEVICE}.csv"
    if a.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{path} is not what the rule gives today: rerun without --check", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path} ({len(text.splitlines()) - 2} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
