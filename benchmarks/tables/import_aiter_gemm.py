"""Write dsperf kernel-table rows (gemm_fp8) from ROCm/aiter's tuned FP8 block-scale GEMM timings
for DeepSeek-V3 shapes (aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv: columns
gfx, cu_num, M, N, K, ..., us): the measured latency of each (M, N, K) on one AMD GPU.

    python benchmarks/tables/import_aiter_gemm.py path/to/a8w8_blockscale_tuned_gemm_ds_v3.csv \\
        --gfx gfx942 --device MI300X --commit 84493f0 > python/dsperf/data/efficiency/MI300X.csv

--powers-of-two keeps the M values that are powers of two (the gfx950 file holds thousands of M).
The figures are aiter's; the rows name the file, the commit and the GPU they were measured on.
"""
from __future__ import annotations

import argparse
import csv
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--gfx", required=True, help="gfx942 (MI300X, 304 CUs) or gfx950 (MI355X, 256 CUs)")
    ap.add_argument("--device", required=True, help="the dsperf device the table is for (its name in the source)")
    ap.add_argument("--commit", required=True, help="the aiter commit the file was read at")
    ap.add_argument("--powers-of-two", action="store_true")
    a = ap.parse_args(argv)
    with open(a.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gfx"] == a.gfx]
    if not rows:
        raise SystemExit(f"{a.csv}: no rows for gfx {a.gfx!r}")
    cus = rows[0]["cu_num"]
    source = (f"ROCm/aiter aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv (commit {a.commit}): "
              f"tuned FP8 128x128 block-scale GEMM, measured on {a.gfx} ({a.device}, {cus} CUs)")
    out = csv.writer(sys.stdout, lineterminator="\n")
    print(f"# Kernel latencies measured on {a.device} ({a.gfx}): FP8 block-scale GEMMs at DeepSeek-V3 shapes, from "
          "ROCm/aiter's tuned configurations (benchmarks/tables/import_aiter_gemm.py). Only gemm_fp8: the other "
          "families run at the default efficiency.")
    out.writerow(["family", "m", "n", "k", "dtype", "latency_us", "source"])
    for r in sorted(rows, key=lambda r: (int(r["N"]), int(r["K"]), int(r["M"]))):
        m = int(r["M"])
        if a.powers_of_two and m & (m - 1):
            continue
        out.writerow(["gemm_fp8", m, int(r["N"]), int(r["K"]), "fp8", f"{float(r['us']):g}", source])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
