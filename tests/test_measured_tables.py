"""The GPU tables dsperf measure-gpu timed and the project ships (python/dsperf/data/devices/measured/):
they load as a device, every row names how it was measured, and the per-family comparison with the
model that docs/VALIDATION.md quotes is what the shipped model gives today (a model change that moves
it must move the document too)."""
import numpy as np
import pytest

from dsperf.model import grounded as G
from dsperf.model.devices import load_device
from dsperf.predict.gpu_timing import model_price_us

MEASURED = G.measured_tables_dir()

# docs/VALIDATION_GPU_MEASURED.md, "The H200 priced from its own measured table": (rows, median model / measured).
# gemm_bf16: 1.00 since these rows are the Hopper table's own (1.16 at the flat default before).
H200_QUOTED = {"gemm_fp8": (110, 0.96), "gemm_bf16": (110, 1.0), "grouped_contiguous": (48, 0.85),
               "grouped_masked": (94, 0.67), "mla_prefill": (5, 0.96)}


def test_the_measured_h200_table_loads_as_a_device_with_sourced_rows():
    toml = str(MEASURED / "H200-measured.toml")
    spec = load_device(toml)
    assert spec.name == "H200"
    rows = G.read_table_rows(MEASURED / "H200.csv")
    assert len(rows) == sum(n for n, _ in H200_QUOTED.values())
    assert all(r["source"].startswith("measured by dsperf measure-gpu: ") and "NVIDIA H200" in r["source"]
               and "2026-11-26" in r["source"] for r in rows)
    step = G.decode("DeepSeek-V3", toml, batch=128, kv_len=4989, ep=128)
    assert step["regime"].startswith("partial/")  # no MLA decode row: those calls at the default


@pytest.mark.parametrize("family", sorted(H200_QUOTED))
def test_the_model_against_the_measured_h200_rows_is_as_documented(family):
    tables, spec = G.kernel_tables("H200"), load_device("H200")
    rows = [r for r in G.read_table_rows(MEASURED / "H200.csv") if r["family"] == family]
    ratios = [model_price_us(G.SM, tables, spec, family, G.row_shape(r))[0] / r["latency_us"] for r in rows]
    count, median = H200_QUOTED[family]
    assert len(rows) == count
    assert round(float(np.median(ratios)), 2) == median
