"""Write dsperf kernel-table rows (mla_decode) from ROCm/aiter's published MLA decode timings on MI355X.

aiter ships no tuned table for its MLA decode kernels: the per-shape times it publishes are in the
descriptions of its pull requests, where a kernel author compares a new kernel with aiter's assembly
(ASM) kernel over the (batch, context) grid of `op_tests/test_mla_persistent.py`. This script holds
the figures read there, each with the pull request, the table and the column it was read from, and
writes them as rows in MI355X.csv's columns (import_aiter_gemm.COLUMNS):

    python benchmarks/tables/import_aiter_mla.py >> python/dsperf/data/efficiency/MI355X.csv

What a figure is: the time `run_perftest` reports for one `aiter.mla.mla_decode_fwd` call (the
persistent ASM stage-1 kernel and the split-KV reduce; the metadata is built outside the timed
call), for `batch` requests of `ctx` cached tokens each, DeepSeek-V3's latent layout (kv_lora_rank
512 + rope 64, value 512), one KV head, page size 1 (the test's default block size), FP8 queries
and FP8 cache (the HipKittens kernel both tables compare with takes FP8 only). Only the ASM column
is read: it is the kernel aiter dispatches by default (at commit d35d35b40e, aiter/mla.py takes the
HipKittens path only with AITER_ENABLE_EXPERIMENTAL set).

How it becomes a row: family mla_decode, batch, kv_len = ctx, heads, q_len, dtype fp8 (the cache),
math fp8 (aiter's FP8 kernels run the products on FP8 MFMA, so each row is a fraction of the FP8-math
roofline; a BF16-math call is assumed to reach the same fraction of its own), latency_us, measured_on
MI355X.

Only rows read in full at the source are here. The stored copies of both descriptions hold part
of each table (the rest of the grid is not readable here); the sources below say which part.
"""
from __future__ import annotations

import csv
import sys

from import_aiter_gemm import COLUMNS

# Each source: where the table is, what it measured, and the (batch, ctx, ASM us) rows read from it.
SOURCES = [
    dict(
        where=("ROCm/aiter PR #2039 'Introduce HipKittens based nhead=128 MLA Kernel' (description of "
               "2026-02-12; merged as commit 57ed6a01a2, 2026-03-09): its HK-vs-ASM table, 'MI355' "
               "columns, ASM (us)"),
        heads=128, q_len=1,
        # The ctx = 21 rows for every batch, and batch 1 at ctx = 64 (the rest of the grid, ctx 64
        # to 8192, is not in the stored copy).
        rows=[(1, 21, 12.106), (3, 21, 13.021), (5, 21, 12.942), (16, 21, 13.592), (32, 21, 14.822),
              (64, 21, 15.120), (128, 21, 16.185), (256, 21, 20.367), (1, 64, 12.640)],
    ),
    dict(
        where=("ROCm/aiter PR #3072 'HK MLA: MI35x m16x8 retune, new m16x4 kernel, page_size + mask "
               "support' (description of 2026-05-07; merged as commit d35d35b40e, 2026-05-11): table "
               "'Performance - m16x8 (-n 128,1, MI355)', ASM (us) column"),
        heads=128, q_len=1,
        # ctx 23333 for every batch, ctx 8192 for batch 1-16 (the stored copy ends there).
        rows=[(1, 23333, 52.467), (3, 23333, 54.562), (5, 23333, 57.608), (16, 23333, 109.965),
              (32, 23333, 199.795), (64, 23333, 403.895), (128, 23333, 724.364), (256, 23333, 1422.0),
              (1, 8192, 29.806), (3, 8192, 29.831), (5, 8192, 31.611), (16, 8192, 52.138)],
    ),
]

KERNEL = ("aiter assembly MLA decode (persistent mode, stage 1 + split-KV reduce, as "
          "op_tests/test_mla_persistent.py times aiter.mla.mla_decode_fwd), FP8 Q and FP8 KV cache "
          "(kv_lora_rank 512 + rope 64), page size 1")


def rows() -> list[dict]:
    out = []
    for s in SOURCES:
        for batch, ctx, us in sorted(s["rows"], key=lambda r: (r[0], r[1])):
            out.append(dict(family="mla_decode", batch=batch, kv_len=ctx, heads=s["heads"], q_len=s["q_len"],
                            dtype="fp8", math="fp8", latency_us=f"{us:g}", measured_on="MI355X",
                            source=(f"{s['where']}: {KERNEL}; {s['heads']} heads, {s['q_len']} query token, "
                                    f"batch {batch}, context {ctx}; measured on MI355X (gfx950)")))
    return out


def main() -> int:
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n", restval="")
    for r in rows():
        w.writerow(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
