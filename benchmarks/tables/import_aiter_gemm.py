"""Write dsperf kernel-table rows (gemm_fp8) from ROCm/aiter's tuned FP8 block-scale GEMM timings
for DeepSeek-V3 shapes (aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv: columns
gfx, cu_num, M, N, K, ..., us): the measured latency of each (M, N, K) on one AMD GPU.

The file says which architecture and CU count timed a row (gfx942 with 304 CUs is an MI300X or an
MI325X; gfx950 with 256 CUs an MI350X or an MI355X), not which GPU. The commit that last wrote a
row does, where its message names the GPU. So the rows are attributed by `git blame` in an aiter
checkout at the commit read, and only rows whose commit is mapped to a device are kept:

    python benchmarks/tables/import_aiter_gemm.py --repo path/to/aiter --commit 84493f0 --gfx gfx942 \\
        --measured-on 1a4121e559=MI300X --measured-on 84493f0=MI325X > python/dsperf/data/efficiency/MI300X.csv

Each row carries `measured_on` (the device whose roofline its latency is read against) and a source
naming the file, the commit read, and the commit that wrote the row with its message's GPU. Rows
written by other commits (bulk merges, format migrations) are left out and counted in the header.
--powers-of-two keeps the M values that are powers of two (the gfx950 file holds thousands of M).
The figures are aiter's. MI355X's table is this importer's gfx950 rows, then import_aiter_fmoe.py's
fused-MoE rows and import_aiter_mla.py's MLA decode rows appended (same columns, COLUMNS below; the
header note is the shipped file's first line after "left out)"):

    python benchmarks/tables/import_aiter_gemm.py --repo aiter --commit 84493f0 --gfx gfx950 --powers-of-two \
        --measured-on 1638f9e7a9=MI355X --header-note "; then ..." > python/dsperf/data/efficiency/MI355X.csv

The last step of either table, after every importer has written its rows: `python -m
dsperf.model.derive_table MI300X MI355X` adds the attention rows aiter publishes only as best cases
(derived by the transfer rule from data/anchors.csv), keeping the importers' rows and notes; it
rewrites the table in the rule's columns, so rerun the importers on a fresh file, not on its output.
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from collections import Counter

FILE = "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv"
# The AMD tables' columns, shared by the scripts that append to them (import_aiter_fmoe.py,
# import_aiter_mla.py): groups is blank for a GEMM, batch/kv_len/heads/q_len for all but attention.
COLUMNS = ["family", "m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "dtype", "math", "latency_us",
           "measured_on", "source"]


def blamed_lines(repo: str, commit: str) -> list[tuple[str, str]]:
    """(commit that last wrote the line, the line) for every line of FILE at `commit`."""
    out = subprocess.run(["git", "-C", repo, "blame", "--line-porcelain", commit, "--", FILE], check=True,
                         capture_output=True, text=True).stdout
    lines, sha = [], None
    for text in out.splitlines():
        if text.startswith("\t"):
            lines.append((sha, text[1:]))
        else:
            head = text.split(" ", 1)[0]
            if len(head) == 40 and all(c in "0123456789abcdef" for c in head):  # a line's header: its commit
                sha = head
    return lines


def parse_mapping(pairs) -> dict[str, str]:
    out = {}
    for p in pairs:
        sha, sep, device = p.partition("=")
        if not sep or len(sha) < 7 or not device:
            raise SystemExit(f"--measured-on must be SHA=DEVICE (at least 7 hex digits), got {p!r}")
        out[sha] = device
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="an aiter git checkout (the file is read with git blame)")
    ap.add_argument("--commit", required=True, help="the aiter commit the file is read at")
    ap.add_argument("--gfx", required=True, help="gfx942 (304 CUs: MI300X, MI325X) or gfx950 (256 CUs)")
    ap.add_argument("--measured-on", action="append", default=[], metavar="SHA=DEVICE",
                    help="rows last written by this commit were timed on this dsperf device (its message says so)")
    ap.add_argument("--powers-of-two", action="store_true")
    ap.add_argument("--header-note", default="", help="appended to the header comment (what else the file holds)")
    a = ap.parse_args(argv)
    gpu_of = parse_mapping(a.measured_on)
    lines = blamed_lines(a.repo, a.commit)
    header = next(csv.reader([lines[0][1]]))
    kept, left_out = [], Counter()
    for sha, text in lines[1:]:
        row = dict(zip(header, next(csv.reader([text]))))
        if row.get("gfx") != a.gfx:
            continue
        if a.powers_of_two and int(row["M"]) & (int(row["M"]) - 1):
            continue
        device = next((d for s, d in gpu_of.items() if sha.startswith(s)), None)
        if device is None:
            left_out[sha[:10]] += 1
            continue
        kept.append((sha, device, row))
    if not kept:
        raise SystemExit(f"{FILE} at {a.commit}: no {a.gfx} rows written by the mapped commits")
    subjects = {sha: subprocess.run(["git", "-C", a.repo, "log", "-1", "--format=%s", sha], check=True,
                                    capture_output=True, text=True).stdout.strip() for sha, _, _ in kept}
    out = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n", restval="")
    counts = Counter(d for _, d, _ in kept)
    print(f"# Kernel latencies of ROCm/aiter's tuned FP8 block-scale GEMMs at DeepSeek-V3 shapes ({a.gfx}; "
          f"benchmarks/tables/import_aiter_gemm.py), each row read against the roofline of the GPU that timed it "
          f"(measured_on: {', '.join(f'{n} {d}' for d, n in sorted(counts.items()))} rows, by the commit that "
          f"wrote it; {sum(left_out.values())} rows whose commit names no GPU left out)" + (a.header_note or ". Only gemm_fp8."))
    out.writeheader()
    for sha, device, r in sorted(kept, key=lambda k: (int(k[2]["N"]), int(k[2]["K"]), int(k[2]["M"]))):
        m = int(r["M"])
        source = (f"ROCm/aiter {FILE} (read at commit {a.commit}): tuned FP8 128x128 block-scale GEMM, written by "
                  f"commit {sha[:10]} ('{subjects[sha][:90]}'), timed on {a.gfx} ({device}, {r['cu_num']} CUs)")
        out.writerow(dict(family="gemm_fp8", m=m, n=int(r["N"]), k=int(r["K"]), dtype="fp8",
                          latency_us=f"{float(r['us']):g}", measured_on=device, source=source))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
