"""benchmarks/gpu_model_check.py without a GPU: its prices are the grounded model's, its clock
summary reads nvidia-smi samples, and without a GPU it measures nothing and says so."""
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dsperf.model import grounded as G
from dsperf.model.devices import load_device

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _has_cuda_torch():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_a_table_row_priced_on_its_own_device_is_its_latency():
    """Its own latency, or a larger M's of the same (n, k) where that one was measured faster (a
    smaller GEMM can run padded to it: the lookup never prices more work cheaper)."""
    mc = _load("gpu_model_check")
    rows = [r for r in G.read_table_rows(G.tables_dir() / "H800.csv") if r["family"] == "gemm_fp8"]
    tables, spec = G.kernel_tables("H800"), load_device("H800")
    capped = 0
    for r in rows:
        us, found = mc.predicted_us(G.SM, tables, spec, "gemm_fp8", r["m"], r["n"], r["k"])
        want = min(q["latency_us"] for q in rows if (q["n"], q["k"]) == (r["n"], r["k"]) and q["m"] >= r["m"])
        capped += want < r["latency_us"]
        assert found and us == pytest.approx(want, rel=1e-9)
    # Most rows price at their own latency (15 of the 110 of H800.csv have a larger M measured faster).
    assert 0 < capped < len(rows) // 4


def test_bf16_gemms_are_priced_from_the_hopper_tables_rows_timed_on_an_h200():
    mc = _load("gpu_model_check")
    spec = load_device("H200")
    # A shape of the table's gemm_bf16 rows (cuBLAS, 235.6235 us on an H200): its own time.
    us, found = mc.predicted_us(G.SM, G.kernel_tables("H200"), spec, "gemm_bf16", 8192, 1536, 7168)
    assert found and us == pytest.approx(235.6235, rel=1e-6)
    # Off the rows: no faster than the BF16 roofline, and not at the flat default.
    us, found = mc.predicted_us(G.SM, G.kernel_tables("H200"), spec, "gemm_bf16", 8192, 4096, 7168)
    roofline_us = max(2.0 * 8192 * 4096 * 7168 / (spec.fp16_tflops * 1e12),
                      2.0 * (8192 * 7168 + 4096 * 7168 + 8192 * 4096) / (spec.mem_bw_gbps * 1e9)) * 1e6
    assert found and us > roofline_us and us != pytest.approx(roofline_us / G.DEFAULT_EFFICIENCY, rel=1e-3)


def test_the_gpu_name_picks_the_device_file():
    mc = _load("gpu_model_check")

    class FakeTorch:
        class cuda:
            name = ""

            @classmethod
            def get_device_name(cls, i):
                return cls.name
    for name, want in [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H800", "H800"),
                       ("NVIDIA H20", "H20"), ("NVIDIA A100-SXM4-80GB", None)]:
        FakeTorch.cuda.name = name
        assert mc.gpu_device_name(FakeTorch) == want, name


def test_the_clock_summary_reads_the_samples_after_the_cut():
    gv = _load("gpu_validate")
    s = gv.ClockSampler()
    s.samples = [(0.1, (1980.0, 1980.0, 300.0, 700.0)), (5.0, (1500.0, 1980.0, 690.0, 700.0)),
                 (6.0, (1400.0, 1980.0, float("nan"), 700.0)), (7.0, (1425.0, 1980.0, 692.0, 700.0))]
    mhz, max_mhz, watts, limit, n = s.summary(after_s=2.0)
    assert (mhz, max_mhz, limit, n) == (1425.0, 1980.0, 700.0, 3)
    assert watts == pytest.approx(691.0)  # the NaN reading left out
    assert s.summary(after_s=10.0) is None
    assert math.isclose(s.summary()[0], (1425.0 + 1500.0) / 2)


@pytest.mark.skipif(_has_cuda_torch(), reason="a GPU is present (the script then measures; run it by hand)")
def test_without_a_gpu_it_measures_nothing_and_exits_0():
    r = subprocess.run([sys.executable, str(BENCH / "gpu_model_check.py")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Nothing measured" in r.stdout
