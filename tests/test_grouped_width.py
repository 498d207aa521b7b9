"""A grouped GEMM at an expert width its table rows were not timed at (MoE TP's slices) is priced at
the rows' width with its experts scaled to keep its weights and output tiles
(grouped_at_row_width, csrc/grounded/kernel_table.cpp; docs/GROUNDED_MODEL.md)."""
import numpy as np
import pytest

from dsperf._C import step_model as SM
from dsperf.model import grounded
from dsperf.model.devices import load_device


def _price_us(tables, spec, family, **shape):
    s = SM.KernelShape(fp8=True, **shape)
    return SM.datasheet_roofline_s(SM.table_work(family, s), spec, 1.0) / tables.lookup(family, s, spec, 1.0)["value"] * 1e6


@pytest.mark.parametrize("family", ["grouped_masked", "grouped_contiguous"])
def test_a_narrow_expert_runs_as_fewer_experts_at_the_rows_width(family):
    # The H800 rows are DeepGEMM's at n = 4,096 (up projection): 9 experts at MoE TP8's 512 cost what
    # 1.125 experts at 4,096 cost (same weights, FLOPs and tiles).
    tables, spec = grounded.kernel_tables("H800"), load_device("H800", "corrected")
    m = 1 if family == "grouped_masked" else 512
    narrow = _price_us(tables, spec, family, m=m, n=512, k=7168, groups=9)
    assert narrow == pytest.approx(_price_us(tables, spec, family, m=m, n=4096, k=7168, groups=9 * 512 / 4096),
                                   rel=1e-9)
    if family == "grouped_masked":
        # ... which, at one row an expert (bound by its weights), streams them slower than 9 whole experts
        # do: fewer tiles to spread over the SMs.
        whole = _price_us(tables, spec, family, m=m, n=4096, k=7168, groups=9)
        assert (9 * 512 * 7168) / narrow < 0.8 * (9 * 4096 * 7168) / whole


def test_the_rule_predicts_a_measured_width_left_out_of_the_table():
    # MI355X's table holds aiter's fused MoE at two tensor-parallel widths (up projection n = 512 and 1,024,
    # measured): priced from the 1,024 rows alone, the 512 rows are met to 2.6% (median; 6 rows, 112-257 experts).
    spec = load_device("MI355X", "corrected")
    rows = [r for r in grounded.read_table_rows(grounded.tables_dir() / "MI355X.csv") if r["family"] == "grouped_masked"]
    narrow = [r for r in rows if (r["n"], r["k"]) == (512, 7168)]
    rest = SM.KernelTables(0.6)
    for r in rows:
        if (r["n"], r["k"]) != (512, 7168):
            rest.add_latency("grouped_masked", grounded.row_shape(r), r["latency_us"], spec)
    misses = [_price_us(rest, spec, "grouped_masked", m=r["m"], n=r["n"], k=r["k"], groups=r["groups"])
              / r["latency_us"] - 1 for r in narrow]
    assert len(misses) >= 5
    assert np.median(np.abs(misses)) <= 0.05 and np.max(np.abs(misses)) <= 0.12


def test_a_call_at_the_rows_width_reads_its_own_row():
    # No rescaling where the table has the call's width: a measured row prices at its own latency.
    tables, spec = grounded.kernel_tables("H800"), load_device("H800", "corrected")
    rows = [r for r in grounded.read_table_rows(grounded.tables_dir() / "H800.csv")
            if r["family"] == "grouped_masked" and r["groups"] == 8 and r["m"] == 64]
    assert rows
    for r in rows:
        assert _price_us(tables, spec, "grouped_masked", m=r["m"], n=r["n"], k=r["k"], groups=r["groups"]) == \
            pytest.approx(r["latency_us"], rel=1e-6)


def _row_widths(table, family):
    rows = grounded.read_table_rows(grounded.tables_dir() / f"{table}.csv")
    return sorted({(r["n"], r["k"]) for r in rows if r["family"] == family})


def _shipped_grouped_tables():
    from dsperf.model.devices import device_metadata, list_devices

    out = {}
    for dev in list_devices():
        table = device_metadata(dev).get("kernel_table")
        for family in ("grouped_masked", "grouped_contiguous", "grouped_fp4"):
            if table and _row_widths(table, family):
                out.setdefault((table, family), dev)
    return sorted((dev, table, family) for (table, family), dev in out.items())


@pytest.mark.parametrize("device,table,family", _shipped_grouped_tables())
def test_the_rows_width_is_the_nearest_in_n_and_k_whatever_the_expert_count(device, table, family):
    # DeepSeek's expert projections at every MoE TP (up: n = 4,096 / moe_tp, k = 7,168; down: n = 7,168,
    # k = 2,048 / moe_tp) and any expert count price as the same weights at the width nearest in (n, k),
    # log distance. MI355X holds width 512 at 112-257 experts only and 1,024 from 9: nearest in (experts,
    # n, k), 64 experts at n = 256 went to 512 and were then read at 1,024's rows (39% faster).
    import math

    tables, spec = grounded.kernel_tables(device), load_device(device, "corrected")
    widths = _row_widths(table, family)
    for moe_tp in (1, 2, 4, 8, 16):
        for n, k in ((4096 / moe_tp, 7168), (7168, 2048 / moe_tp)):
            row_n = min(widths, key=lambda w: math.log(w[0] / n) ** 2 + math.log(w[1] / k) ** 2)[0]
            for groups in [1.5 ** i for i in range(15)]:
                for m in (1, 64):
                    call = _price_us(tables, spec, family, m=m, n=n, k=k, groups=groups)
                    at_row = _price_us(tables, spec, family, m=m, n=row_n, k=k, groups=groups * n / row_n)
                    assert call == pytest.approx(at_row, rel=1e-9), (moe_tp, n, k, groups, m, row_n)
