"""MI355X's MLA decode rows: aiter's assembly kernel timed on MI355X as published in aiter pull
requests (benchmarks/tables/import_aiter_mla.py), and the AMD tables' shared columns."""
import csv
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from dsperf.model import grounded

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "benchmarks" / "tables"
EFFICIENCY = resources.files("dsperf") / "data" / "efficiency"


def _mla_rows():
    return [r for r in grounded.read_table_rows(EFFICIENCY / "MI355X.csv") if r["family"] == "mla_decode"]


def test_mi355x_mla_rows_name_their_pull_request_and_gpu():
    rows = _mla_rows()
    assert len(rows) == 21
    for r in rows:
        assert r["measured_on"] == "MI355X" and r["dtype"] == "fp8" and r["heads"] == 128 and r["q_len"] == 1
        assert "ROCm/aiter PR #2039" in r["source"] or "ROCm/aiter PR #3072" in r["source"]
        assert "ASM (us)" in r["source"] and "measured on MI355X" in r["source"]
        assert f"batch {int(r['batch'])}, context {int(r['kv_len'])}" in r["source"]
    assert {int(r["kv_len"]) for r in rows} == {21, 64, 8192, 23333}
    assert {int(r["batch"]) for r in rows} == {1, 3, 5, 16, 32, 64, 128, 256}


def test_the_shipped_mla_rows_are_what_the_importer_writes():
    out = subprocess.run([sys.executable, str(TABLES / "import_aiter_mla.py")], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    shipped = [line.rstrip("\n") for line in open(EFFICIENCY / "MI355X.csv") if line.startswith("mla_decode,")]
    assert out == shipped


@pytest.mark.parametrize("name", ["MI300X", "MI355X"])
def test_amd_tables_have_the_importers_columns(name):
    sys.path.insert(0, str(TABLES))
    try:
        from import_aiter_gemm import COLUMNS
    finally:
        sys.path.remove(str(TABLES))
    lines = [line for line in open(EFFICIENCY / f"{name}.csv") if not line.startswith("#")]
    assert next(csv.reader(lines[:1])) == COLUMNS


def test_mi355x_decode_attention_is_priced_from_its_rows():
    # The MLA decode rows cover a core family: the table is complete enough to be "measured" (its
    # prefill attention has no rows and stays at the default efficiency).
    assert grounded.table_kind("MI355X") == "measured"
    # A call at a row's shape is priced at the row's time: FP8 cache, 128 heads (no attention TP),
    # one micro-batch of 32 requests at 23,333 tokens (aiter PR #3072: 199.795 us), plus the kernel
    # boundary inside a CUDA graph every compute call pays.
    r = grounded.decode("DeepSeek-V3", "MI355X", batch=32, kv_len=23333, ep=8, attn_tp=1, kv_fp8=True,
                        overlap="none")
    calls = grounded.calls_frame(r)
    core = calls[calls["family"] == "mla_decode"].iloc[0]
    assert core["from_table"] and not core["clamped"]
    assert core["us"] == pytest.approx(199.795 + grounded.SM.graph_kernel_gap_us, rel=1e-6)
    # A BF16 cache reads more bytes at the same shape: slower, from the same rows.
    bf16 = grounded.decode("DeepSeek-V3", "MI355X", batch=32, kv_len=23333, ep=8, attn_tp=1, overlap="none")
    bf16_core = grounded.calls_frame(bf16).query("family == 'mla_decode'").iloc[0]
    assert bf16_core["from_table"] and bf16_core["us"] > core["us"]
