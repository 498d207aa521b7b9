"""dsperf calibrate: a quick run writes a device file the cost model loads; figures are sane
against first principles; a second call reuses the file."""
import os
import time

import pytest

import dsperf
from dsperf import calibrate as cal


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "cpu.toml"
    # A tiny fit sweep: the real one (dsperf.sweeps.fit_points) takes a minute or more.
    points = [("linear", dict(m=m, n=256, k=512, dtype="bf16")) for m in (1, 32, 128)]
    return cal.calibrate(quick=True, path=path, points=points, repeats=2)


def test_writes_a_loadable_device(quick_run):
    path, m = quick_run
    assert not m["reused"] and path.exists()
    dev = dsperf.load_device(str(path), "corrected")
    assert dev.sm_count == m["threads"] and dev.fp16_tflops > 0 and dev.mem_bw_gbps > 0
    # The cost model runs on it.
    r = dsperf.decode("DeepSeek-V2-Lite", [str(path)], batch_sizes=[1], ep=1, redundant_experts=0, tp=1, mode="corrected")
    assert r["tpot_ms"].iloc[0] > 0


def test_figures_are_sane(quick_run):
    _, m = quick_run
    threads = m["threads"]
    # At most 2 FMA ports x 16 lanes x 2 FLOPs per cycle per thread at 6 GHz.
    assert 0 < m["fp32_fma_peak_gflops"] <= threads * 64 * 6.0
    if m["isa"] == "avx512_bf16":
        assert 0 < m["bf16_dot_peak_gflops"] <= threads * 128 * 6.0
    for t in range(1, threads + 1):
        assert 0 < m[f"read_gbps_{t}t"] < 2000 and 0 < m[f"triad_gbps_{t}t"] < 2000
    assert 0 < m["call_overhead_us"] < 1000
    # Cache-resident data reads at least about as fast as memory (a VM may share the LLC).
    assert m["cache_read_gbps"] > 0.5 * m[f"read_gbps_{threads}t"]


def test_writes_the_fitted_efficiencies(quick_run):
    path, m = quick_run
    e = dsperf.kernel_cost.lookup_efficiency(m["efficiency"], "linear", dict(m=128, n=256, k=512))
    assert 0 < e.compute <= 3 and 0 < e.memory <= 3 and e.overhead_us >= 0
    dev = dsperf.load_device(str(path), "corrected")
    assert dev.call_overhead_us == pytest.approx(m["call_overhead_us"], rel=1e-3) and dev.cache_bw_gbps > 0
    assert cal.fit_csv_path(path).exists()


def test_second_call_reuses_the_file(quick_run):
    path, _ = quick_run
    t0 = time.perf_counter()
    _, m = cal.calibrate(path=path)
    assert m["reused"] and time.perf_counter() - t0 < 5


def test_cli_calibrate_reports_the_file(quick_run, capsys):
    path, _ = quick_run
    from dsperf.cli import main

    assert main(["calibrate", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and "reused" in out and "fp32_fma_peak_gflops" in out


def test_out_must_be_a_file(tmp_path):
    from dsperf.cli import main

    assert main(["calibrate", "--out", str(tmp_path)]) == 2


def test_mpi_loopback_where_mpi_is_installed():
    import shutil

    if not shutil.which("mpirun"):
        pytest.skip("mpirun not installed: calibration leaves the MPI loopback out")
    r = cal._mpi_loopback()
    assert 0 < r["mpi_latency_us"] < 10_000 and 0 < r["mpi_bandwidth_gbps"] < 2000
