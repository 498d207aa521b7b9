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


def _csv_rows(lines):
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


def _importer_columns():
    sys.path.insert(0, str(TABLES))
    try:
        from import_aiter_gemm import COLUMNS
    finally:
        sys.path.remove(str(TABLES))
    return COLUMNS


def test_the_shipped_mla_rows_are_what_the_importer_writes():
    # The importer writes the rows in its columns; dsperf.model.derive_table then rewrites the table in
    # the rule's columns (adding the derived prefill rows), keeping each field as written.
    columns = _importer_columns()
    out = subprocess.run([sys.executable, str(TABLES / "import_aiter_mla.py")], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    written = _csv_rows([",".join(columns)] + out)
    shipped = [r for r in _csv_rows(open(EFFICIENCY / "MI355X.csv")) if r["family"] == "mla_decode"]
    assert len(written) == len(shipped) == 21
    def fields(r):   # numbers compared as numbers: the rule writes latencies as floats
        out = {}
        for c in columns:
            try:
                out[c] = float(r[c])
            except ValueError:
                out[c] = r[c]
        return out

    assert [fields(r) for r in shipped] == [fields(r) for r in written]


@pytest.mark.parametrize("name", ["MI300X", "MI355X"])
def test_amd_tables_keep_the_importers_columns(name):
    lines = [line for line in open(EFFICIENCY / f"{name}.csv") if not line.startswith("#")]
    header = next(csv.reader(lines[:1]))
    # Every importer column is kept (the rule writes q_len and math only where a row uses them: MI355X's
    # MLA rows), beside the rule's basis and second source.
    assert set(_importer_columns()) - {"q_len", "math"} <= set(header) and {"basis", "source2"} <= set(header)


def test_mi355x_decode_attention_is_priced_from_its_rows():
    # The MLA decode rows cover a core family; the prefill attention core's rows are derived from aiter's
    # causal forward on MI355X (anchors.csv), which makes the table "derived".
    assert grounded.table_kind("MI355X") == "derived"
    # A call at a row's shape and math is priced at the row's time: FP8 queries, cache and math (the
    # rows' `math = fp8`), 128 heads (no attention TP), one micro-batch of 32 requests at 23,333 tokens
    # (aiter PR #3072: 199.795 us), plus the kernel boundary inside a CUDA graph every compute call pays.
    def core_of(**kw):
        r = grounded.decode("DeepSeek-V3", "MI355X", batch=32, kv_len=23333, ep=8, attn_tp=1, overlap="none", **kw)
        return grounded.calls_frame(r).query("family == 'mla_decode'").iloc[0]

    core = core_of(kv_fp8=True, attn_fp8=True)
    assert core["from_table"] and not core["clamped"]
    assert core["us"] == pytest.approx(199.795 + grounded.SM.graph_kernel_gap_us, rel=1e-6)
    # BF16 math on the same FP8 cache reaches the same fraction of its own roofline, which is
    # compute-bound here (128 heads over the 576-byte FP8 key): slower by the peaks' ratio, from the same rows.
    bf16_math = core_of(kv_fp8=True)
    assert bf16_math["from_table"] and bf16_math["efficiency"] == pytest.approx(core["efficiency"])
    assert bf16_math["us"] > core["us"]
    # A BF16 cache reads more bytes at the same shape: slower still, from the same rows.
    bf16_core = core_of()
    assert bf16_core["from_table"] and bf16_core["us"] > bf16_math["us"]
