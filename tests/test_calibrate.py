"""dsperf calibrate: a quick run writes a device file the cost model loads; figures are sane
against first principles; a second call reuses the file."""
import contextlib
import io
import time

import pandas as pd
import pytest

import dsperf
from dsperf import calibrate as cal


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "cpu.toml"
    # A tiny fit sweep: the real one (dsperf.sweeps.fit_points) takes a minute or more.
    points = [("linear", dict(m=m, n=256, k=512, dtype="bf16")) for m in (1, 32, 128)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        path, m = cal.calibrate(quick=True, path=path, points=points, repeats=2, progress=True)
    return path, dict(m, stderr=err.getvalue())


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
    # Cache-resident data reads at least about as fast as memory (a VM may share the LLC), where both
    # probes were steady: under other jobs a descheduled probe thread reads at a fraction of either,
    # and the calibration names such probes instead of trusting them.
    unsteady = m["unsteady_probes"].split(", ")
    if "cache_read" not in unsteady and f"read_{threads}t" not in unsteady:
        assert m["cache_read_gbps"] > 0.5 * m[f"read_gbps_{threads}t"]


def test_writes_the_fitted_efficiencies(quick_run):
    path, m = quick_run
    e = dsperf.kernel_cost.lookup_efficiency(m["efficiency"], "linear", dict(m=128, n=256, k=512))
    assert 0 < e.compute <= 1 and 0 < e.memory <= 1 and e.overhead_us >= 0 and e.roof in ("memory", "cache")
    dev = dsperf.load_device(str(path), "corrected")
    assert dev.call_overhead_us == pytest.approx(m["call_overhead_us"], rel=1e-3) and dev.cache_bw_gbps > 0
    assert cal.fit_csv_path(path).exists()


def test_second_call_reuses_the_file(quick_run):
    path, _ = quick_run
    t0 = time.perf_counter()
    _, m = cal.calibrate(path=path)
    assert m["reused"] and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("field, stale, says", [
    # DSPERF_ISA / DSPERF_GEMM pick kernels of other speeds.
    ("kernels", "avx512_bf16-elsewhere", "measured on the avx512_bf16-elsewhere kernels"),
    # An upgrade or a rebuild changes the kernels' speeds.
    ("kernels_build", "0123456789abcdef", "measured on build 0123456789abcdef of dsperf's kernels"),
])
def test_a_file_measured_on_other_kernels_or_another_build_is_measured_again(quick_run, tmp_path, field, stale, says):
    path, m = quick_run
    assert m["kernels"] == cal.kernel_path() and cal.kernel_path() in cal.default_path().name
    assert m["kernels_build"] == cal.kernels_build() and len(m["kernels_build"]) == 16
    other = tmp_path / "other.toml"
    text = path.read_text()
    assert f'{field} = "{m[field]}"' in text
    other.write_text(text.replace(f'{field} = "{m[field]}"', f'{field} = "{stale}"'))
    with pytest.warns(UserWarning, match=says):
        _, again = cal.calibrate(quick=True, path=other, points=[("linear", dict(m=1, n=256, k=512, dtype="bf16"))],
                                 repeats=2)
    assert not again["reused"] and again[field] == m[field]
    assert cal.calibrate(path=other)[1]["reused"]  # and the new file is this build's and path's


def test_cli_calibrate_reports_the_file(quick_run, capsys):
    path, m = quick_run
    from dsperf.cli import main

    assert main(["calibrate", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and "reused" in out and "fp32_fma_peak_gflops" in out
    # What the fit could not pin down and the probes that did not settle are said, not only tabled.
    stuck = [k for k, e in m["efficiency"].items() if e.at_bound]
    assert ("at a bound of the search" in out) == bool(stuck) and all(k in out for k in stuck)
    assert ("unsteady probes" in out) == bool(m["unsteady_probes"])


def test_out_must_be_a_file(tmp_path):
    from dsperf.cli import main

    assert main(["calibrate", "--out", str(tmp_path)]) == 2


def test_mpi_loopback_where_mpi_is_installed():
    import shutil

    if not shutil.which("mpirun"):
        pytest.skip("mpirun not installed: calibration leaves the MPI loopback out")
    r = cal._mpi_loopback()
    assert 0 < r["mpi_latency_us"] < 10_000 and 0 < r["mpi_bandwidth_gbps"] < 2000


def test_progress_is_one_line_per_probe_group(quick_run):
    lines = quick_run[1]["stderr"].splitlines()
    for group in ("compute peaks:", "memory bandwidth:", "cache-resident read:", "call overhead:", "fit sweep:",
                  "fitted "):
        assert sum(line.startswith(f"calibrate: {group}") for line in lines) == 1, group


def test_the_file_records_spreads_and_unsteady_probes(quick_run):
    path, m = quick_run
    assert m["probe_spread_bound"] == cal.SPREAD_BOUND
    threads = m["threads"]
    spreads = {k: v for k, v in m.items() if "spread_" in k or k.endswith("_spread") and k != "probe_spread_bound"}
    assert f"read_spread_{threads}t" in spreads and all(v >= 0 for v in spreads.values())
    # A probe named unsteady is one whose spread stayed above the bound, and only those.
    above = {k for k, v in spreads.items() if v > cal.SPREAD_BOUND}
    assert len(above) == len([p for p in m["unsteady_probes"].split(", ") if p])
    again = dsperf.calibrate.calibrate(path=path)[1]
    assert again["unsteady_probes"] == m["unsteady_probes"]


class FakeProbe:
    """A probe that returns the given figures in turn (the last one from then on)."""

    def __init__(self, *values):
        self.values, self.calls = list(values), 0

    def __call__(self):
        self.calls += 1
        return self.values[min(self.calls, len(self.values)) - 1]


def test_rounds_repeat_a_probe_until_its_best_rounds_agree():
    steady, settling = FakeProbe(10.0, 10.5, 10.2), FakeProbe(47.0, 37.3, 45.0, 44.0, 46.0)
    r = cal._rounds({"steady": steady, "settling": settling}, max_rounds=10, budget_s=1e9)
    # Three rounds agree within 10%: done, and not run again while the other settles.
    assert steady.calls == 3 and r["steady"] == (10.5, pytest.approx(0.05), 3)
    # 47 / 37.3 / 45 spread by 26%; a fourth round of 44 makes the best three 47 / 45 / 44: steady.
    assert settling.calls == 4 and r["settling"] == (47.0, pytest.approx(47 / 44 - 1), 4)
    # Rounds slowed by another process (116 GB/s, then 0.7) do not hide the figure once it recurs.
    disturbed = FakeProbe(116.0, 0.74, 1.05, 116.0, 1.97, 110.0)
    r = cal._rounds({"cache_read": disturbed}, max_rounds=10, budget_s=1e9)
    assert disturbed.calls == 6 and r["cache_read"] == (116.0, pytest.approx(116 / 110 - 1), 6)


def test_rounds_report_the_spread_when_the_bound_is_not_reached():
    rising = FakeProbe(*[30.0 * 1.1 ** i for i in range(50)])  # a probe that never settles
    r = cal._rounds({"read": rising}, max_rounds=6, budget_s=1e9)
    assert rising.calls == 6 and r["read"] == (pytest.approx(30 * 1.1 ** 5), pytest.approx(1.1 ** 2 - 1), 6)
    # The time budget stops the rounds too (here each call takes 10 s), but never before SPREAD_WINDOW.
    rising = FakeProbe(*[30.0 * 1.1 ** i for i in range(50)])
    r = cal._rounds({"read": rising}, max_rounds=50, budget_s=15, clock=lambda: 10.0 * rising.calls)
    assert rising.calls == cal.SPREAD_WINDOW and r["read"][1] > cal.SPREAD_BOUND


def test_probe_bands_name_the_probe_behind_each_roof():
    m = {"threads": 2, "bf16_dot_peak_gflops": 167.0, "bf16_dot_peak_spread": 0.2, "fp32_fma_peak_gflops": 340.0,
         "fp32_fma_peak_spread": 0.04, "read_spread_1t": 0.5, "read_spread_2t": 0.26, "cache_read_spread": 0.08}
    assert cal.probe_bands(m) == {"compute": 0.04, "memory": 0.26, "cache": 0.08}
    assert all(v != v for v in cal.probe_bands({"threads": 2}).values())  # NaN: an old file without spreads
    # Where AMX is usable its tile peak is the roof, and its spread the compute band.
    amx = dict(m, amx_tile_peak_gflops=7600.0, amx_tile_peak_spread=0.03)
    assert cal.compute_peak(amx) == "amx_tile_peak" and cal.probe_bands(amx)["compute"] == 0.03
    assert cal._spec_values(dict(amx, mem_gb=24, read_gbps_2t=30.0, triad_gbps_2t=28.0, cache_read_gbps=60.0,
                                 call_overhead_us=1.5), "x")["fp16_tflops"] == 7.6


def test_a_calibration_without_the_tile_peak_is_measured_again_where_amx_is_usable():
    assert cal._missing_probes({"amx_usable": True}) == "amx_tile_peak"
    assert cal._missing_probes({"amx_usable": True, "amx_tile_peak_gflops": 7600.0}) == ""
    assert cal._missing_probes({"amx_usable": False}) == ""


def test_efficiency_roof_and_bounds_survive_the_file(tmp_path):
    from dsperf.kernel_cost import FittedEfficiency, load_efficiencies

    path = tmp_path / "cpu.toml"
    effs = {"gate": FittedEfficiency(0.5, 0.25, 300, 1.0, "cache", ("overhead_us>=300",)),
            "linear/bf16": FittedEfficiency(1.0, 0.7, 0, 0.0)}
    path.write_text('name = "x"\n' + "\n".join(cal._efficiency_lines(effs)) + "\n")
    e = load_efficiencies(path)
    assert (e["gate"].roof, e["gate"].at_bound, e["gate"].serial) == ("cache", ("overhead_us>=300",), 1.0)
    assert (e["linear/bf16"].roof, e["linear/bf16"].at_bound) == ("memory", ())
    with pytest.raises(ValueError, match="roof"):
        FittedEfficiency(roof="l2")


def test_the_spec_in_memory_is_the_one_the_file_holds(quick_run):
    """calibrate keeps the spec in memory and writes it once: reading the file back gives the same
    spec field by field, and the file holds every field the one list of fields requires."""
    path, m = quick_run
    from_file = dsperf.load_device(str(path), "corrected")
    for name, _, _ in dsperf.DeviceSpec.FIELDS:
        assert getattr(m["spec"], name) == getattr(from_file, name), name
    text = path.read_text()
    assert text.count("[calibration]") == 1 and "spec = " not in text and "reused = " not in text


def test_the_calibration_writes_this_machines_kernel_table(quick_run):
    """The fit sweep's GEMMs become rows of an efficiency table in the GPUs' format, which the file
    names and the grounded model prices this machine's calls with."""
    path, m = quick_run
    table = cal.kernel_table_path(path)
    rows = dsperf.grounded.read_table_rows(table)
    assert [(r["family"], r["m"]) for r in rows] == [("gemm_bf16", 1), ("gemm_bf16", 32), ("gemm_bf16", 128)]
    sweep = pd.read_csv(cal.fit_csv_path(path))
    assert [r["latency_us"] for r in rows] == pytest.approx(list(sweep["measured_ms"] * 1e3), rel=1e-5)
    assert f'kernel_table = "{table.name}"' in path.read_text()
    r = dsperf.grounded.decode("DeepSeek-V2-Lite", str(path), batch=4, kv_len=1024, ep=1)
    assert r["calls_from_table"] > 0 and r["tokens_per_gpu_s"] > 0


def test_a_rewritten_kernel_table_is_read_again(quick_run, tmp_path):
    """A recalibration rewrites the table beside the device file; the grounded model reads the new
    rows in the same process, not a cached copy of the old ones."""
    import os
    import shutil

    path, _ = quick_run
    dev, table = tmp_path / path.name, tmp_path / cal.kernel_table_path(path).name
    shutil.copy(path, dev)
    shutil.copy(cal.kernel_table_path(path), table)
    kw = dict(batch=4, kv_len=1024, ep=1)
    before = dsperf.grounded.decode("DeepSeek-V2-Lite", str(dev), **kw)["step_ms"]
    rows = table.read_text().splitlines()
    header = next(i for i, line in enumerate(rows) if line.startswith("family,"))
    col = rows[header].split(",").index("latency_us")
    slower = [",".join(f"{float(v) * 10:g}" if j == col else v for j, v in enumerate(line.split(",", len(rows[header].split(",")) - 1)))
              for line in rows[header + 1:]]
    table.write_text("\n".join(rows[:header + 1] + slower) + "\n")
    os.utime(table, ns=(table.stat().st_atime_ns, table.stat().st_mtime_ns + 1_000_000_000))
    assert dsperf.grounded.decode("DeepSeek-V2-Lite", str(dev), **kw)["step_ms"] > before


def test_a_file_written_before_sources_is_measured_again(quick_run, tmp_path):
    """Every number of a device file names its source (dsperf.model.devices.check_sources): the file
    calibrate writes does, and one written before (no sources entries) is measured again, not refused."""
    path, m = quick_run
    text = path.read_text()
    assert 'sources.mem_bw_gbps = "measured by dsperf calibrate on ' in text
    old = tmp_path / "old.toml"
    old.write_text("".join(line for line in text.splitlines(keepends=True) if not line.startswith("sources.")))
    with pytest.raises(ValueError, match="has no source"):
        dsperf.load_device(str(old))
    with pytest.warns(UserWarning, match="written before device files named the source of each field"):
        _, again = cal.calibrate(quick=True, path=old, points=[("linear", dict(m=1, n=256, k=512, dtype="bf16"))],
                                 repeats=2)
    assert not again["reused"] and dsperf.load_device(str(old)).sm_count == m["threads"]


def test_the_roof_is_resampled_between_the_fit_sweeps_kernel_calls(quick_run):
    path, m = quick_run
    # The quick run's three points each left one sample; the file says so and names its source.
    assert m["read_sweep_samples"] == 3 and m["read_sweep_best_gbps"] >= m["read_sweep_median_gbps"] > 0
    threads = m["threads"]
    assert m[f"read_gbps_{threads}t"] == pytest.approx(max(m["read_gbps_probe"], m["read_sweep_median_gbps"]))
    assert "median of 3 probes between the fit sweep's kernel calls" in path.read_text()


def test_with_roof_samples_takes_the_better_of_probe_and_median_without_ratcheting():
    base = {"threads": 2, "read_gbps_2t": 40.0}
    got = cal.with_roof_samples(base, [30.0, 50.0, 90.0])
    # The median (50), not the best sample (90): the kernels' own times are medians.
    assert got["read_gbps_2t"] == 50.0 and got["read_gbps_probe"] == 40.0 and got["read_sweep_best_gbps"] == 90.0
    # A reused calibration starts again from its own probe, not from the last sweep's roof.
    again = cal.with_roof_samples(got, [20.0, 25.0, 30.0])
    assert again["read_gbps_2t"] == 40.0 and again["read_gbps_probe"] == 40.0
    assert cal.with_roof_samples(base, []) is base


def test_run_sweep_calls_between_after_each_point():
    from dsperf.predict.harness import run_sweep

    calls = []
    points = [("linear", dict(m=1, n=64, k=128, dtype="bf16"))] * 2
    df = run_sweep(points, repeats=1, cold=False, progress=False, between=lambda: calls.append(1))
    assert len(df) == 2 and calls == [1, 1]
