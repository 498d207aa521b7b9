"""Put the BF16 GEMM rows dsperf timed on an H200 into the shipped Hopper table (H800.csv).

The Hopper table's rows come from InferSim's H800 benchmarks, which time FP8 kernels only, so every
BF16 GEMM (MLA's per-head absorbed products, the router, the LM head, and all GEMMs of BF16 or
NVFP4-with-BF16 weights) ran at the flat default efficiency. `dsperf measure-gpu` timed cuBLAS BF16
GEMMs (torch.matmul) at the model's shapes on a lent H200, a part with the H800's GH100 die
(data/devices/measured/H200.csv). This script copies those rows into H800.csv with
`measured_on = H200`, so that each latency is read against the H200's roofline, the GPU that timed
it (the table loader's per-row rule, as the MI300X table's MI325X rows). The derived Blackwell
tables then move them with a published BF16 anchor (data/anchors.csv; dsperf.model.derive_table).

    python benchmarks/tables/import_measured_bf16.py        # rewrites python/dsperf/data/efficiency/H800.csv

Only the gemm_bf16 rows are taken; the measured file's other families stay out of the shipped table
(its FP8, grouped and attention rows time PyTorch's kernels where the H800 table has the serving
stacks' own: docs/VALIDATION.md). Rerunning replaces the gemm_bf16 rows it wrote before.
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "python" / "dsperf" / "data"
MEASURED = DATA / "devices" / "measured" / "H200.csv"
TABLE = DATA / "efficiency" / "H800.csv"
FAMILY = "gemm_bf16"
MEASURED_ON = "H200"
NOTE = (f"# The {FAMILY} rows were timed by dsperf measure-gpu on an H200 (cuBLAS BF16 via torch.matmul; "
        f"data/devices/measured/H200.csv), measured_on = {MEASURED_ON}: "
        "benchmarks/tables/import_measured_bf16.py.")


def _split(path: Path) -> tuple[list[str], list[dict], list[str]]:
    lines = path.read_text().splitlines()
    comments = [line for line in lines if line.lstrip().startswith("#")]
    reader = csv.DictReader(line for line in lines if not line.lstrip().startswith("#"))
    return comments, list(reader), list(reader.fieldnames or [])


def main() -> int:
    _, measured, _ = _split(MEASURED)
    imported = [r for r in measured if r["family"] == FAMILY]
    if not imported:
        print(f"{MEASURED}: no {FAMILY} rows", file=sys.stderr)
        return 1
    comments, rows, columns = _split(TABLE)
    if "measured_on" not in columns:
        columns.insert(columns.index("source"), "measured_on")
    kept = [r for r in rows if r["family"] != FAMILY]
    comments = [c for c in comments if c != NOTE] + [NOTE]
    buf = io.StringIO()
    buf.write("\n".join(comments) + "\n")
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in kept:
        w.writerow(r)
    for r in imported:
        w.writerow({**{c: r.get(c, "") for c in columns}, "measured_on": MEASURED_ON})
    TABLE.write_text(buf.getvalue())
    print(f"wrote {TABLE}: {len(kept)} rows kept, {len(imported)} {FAMILY} rows from {MEASURED.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
