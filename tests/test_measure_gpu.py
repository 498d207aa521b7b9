"""`dsperf measure-gpu` without a GPU: the whole pipeline (plan, budget, table, device file,
comparison) run with a fake timer and clock; --dry-run and the no-GPU exit through the CLI."""
import argparse
import csv
import math
import re
import subprocess
import sys

import pytest

from dsperf.model import grounded as G
from dsperf.model.devices import load_device
from dsperf.predict import measure_gpu as MG
from dsperf.predict import measure_gpu_output as MO
from dsperf.predict import measure_gpu_plan as MP
from dsperf.predict.gpu_timing import ClockSampler, model_price_us

SOURCE = re.compile(r"^measured by dsperf measure-gpu: (?P<kernel>.+) \(torch 2\.9\.0, CUDA 12\.8, NVIDIA H200\), "
                    r"SM clock (?P<med>\d+) MHz \((?P<lo>\d+)-(?P<hi>\d+)\), (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d UTC)$")


def _has_cuda_torch():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


class FakeClock:
    """A run's time axis that only the fake timer moves, with one nvidia-smi-like sample per step."""

    def __init__(self):
        self.t, self.samples = 0.0, []

    def now(self):
        return self.t

    def advance(self, s):
        self.t += s
        self.samples.append((self.t, (1500.0 + 10 * len(self.samples) % 200, 1980.0, 600.0, 700.0)))

    def window(self, a, b):
        return ClockSampler.window(self, a, b)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeTimer:
    """Each shape 'runs' in factor x the model's H200 price and takes `seconds` of the clock;
    families in `missing` cannot run, shapes in `broken` raise."""

    def __init__(self, clock, seconds=0.05, factor=2.0, missing=(), broken=()):
        self.clock, self.seconds, self.factor = clock, seconds, factor
        self.missing, self.broken = dict(missing), set(broken)
        self.price = MP.Pricer("H200")
        self.calls = []

    def available(self):
        keys = [(f, "production") for f in MP.PRODUCTION_FAMILIES] + [(f, "dsperf") for f in MP.DSPERF_FAMILIES]
        return {k: self.missing.get(k) for k in keys}

    def environment(self):
        return {"gpu": "NVIDIA H200", "torch": "2.9.0", "cuda": "12.8", "date": "2026-11-27"}

    def measure(self, shape, iters):
        self.calls.append((shape, iters))
        self.clock.advance(self.seconds)
        if shape in self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        factor = self.factor * (1.5 if shape.kernel == "dsperf" else 1.0)
        return MP.Measurement(self.price(shape)[0] * factor, self.price(shape)[0] * factor + 9, ("fake_kernel",))


def _args(tmp_path, **kw):
    base = dict(device="H200", table="H800", out=str(tmp_path / "out"), budget_s=480.0, quick=False, iters=None,
                no_dsperf_kernels=False, dry_run=False, verbose=False, step=None)
    base.update(kw)
    return argparse.Namespace(**base)


def _run(tmp_path, timer_kw=None, **kw):
    clock = FakeClock()
    timer = FakeTimer(clock, **(timer_kw or {}))
    printed = []
    code = MG.run_command(_args(tmp_path, **kw), timer_factory=lambda: timer, clock_factory=lambda: clock,
                          print_fn=printed.append)
    return code, timer, "\n".join(printed), tmp_path / "out"


def test_the_plan_covers_the_tables_families_and_dsperfs_kernels_beside_them():
    shapes = MP.plan_shapes("H800")
    rows = G.read_table_rows(G.tables_dir() / "H800.csv")
    count = {f: sum(r["family"] == f for r in rows) for f in MP.PRODUCTION_FAMILIES}
    prod = [s for s in shapes if s.kernel == "production"]
    for fam in ("gemm_fp8", "grouped_masked", "grouped_contiguous", "mla_decode", "mla_prefill"):
        assert sum(s.family == fam for s in prod) == count[fam] > 0, fam
    # BF16 GEMMs at every FP8 GEMM shape (the table has none of its own).
    assert {s.dims for s in prod if s.family == "gemm_bf16"} == {s.dims for s in prod if s.family == "gemm_fp8"}
    assert all(s.dtype == "bf16" for s in prod if s.family == "gemm_bf16")
    own = [s for s in shapes if s.kernel == "dsperf"]
    assert {s.family for s in own} == set(MP.DSPERF_FAMILIES)
    # Production first, then dsperf's; the first round visits every production family once.
    assert shapes.index(own[0]) == len(prod)
    assert [s.family for s in shapes[:6]] == list(MP.PRODUCTION_FAMILIES)
    quick = MP.plan_shapes("H800", quick=True)
    assert len(prod) / 2 <= sum(s.kernel == "production" for s in quick) <= len(prod) / 2 + 6
    assert set(quick) < set(shapes)


def test_the_whole_run_writes_a_table_the_model_reads_with_every_rows_source(tmp_path):
    code, timer, printed, out = _run(tmp_path)
    assert code == 0
    assert {it for _, it in timer.calls} == {MP.DEFAULT_ITERS}
    table = out / "H200.csv"
    rows = G.read_table_rows(table)
    # Production kernels only in the model's table, one row per production shape of the plan.
    assert len(rows) == sum(s.kernel == "production" for s in MP.plan_shapes("H800"))
    assert {r["family"] for r in rows} == set(MP.PRODUCTION_FAMILIES)
    dates = set()
    for r in rows:
        m = SOURCE.match(r["source"])
        assert m, r["source"]
        assert 1500 <= int(m["lo"]) <= int(m["med"]) <= int(m["hi"]) < 1700
        assert "dsperf's own" not in m["kernel"]
        dates.add(m["date"])
    assert dates
    assert any("torch._scaled_mm" in r["source"] for r in rows if r["family"] == "gemm_fp8")
    assert all("_scaled_grouped_mm" in r["source"] for r in rows if r["family"].startswith("grouped"))
    # dsperf's kernels: their own file, in the same format, each row saying so.
    own = G.read_table_rows(out / "H200-dsperf-kernels.csv")
    assert {r["family"] for r in own} == set(MP.DSPERF_FAMILIES)
    assert all("dsperf's own kernel" in r["source"] and SOURCE.match(r["source"]) for r in own)
    assert "wrote" not in printed and "H200.csv" in printed


def test_the_model_prices_the_gpu_from_its_measured_rows(tmp_path):
    _, timer, _, out = _run(tmp_path)
    device_file = str(out / "H200-measured.toml")
    assert load_device(device_file).name == "H200"
    pricing = G.device_pricing(device_file)
    assert pricing["kernel_table"] == "H200.csv" and pricing["table_kind"] == "measured"
    spec = load_device("H200")
    measured = {(r["family"], r["m"], r["n"], r["k"]): r["latency_us"]
                for r in G.read_table_rows(out / "H200.csv") if r["family"] == "gemm_fp8"}
    for (fam, m, n, k), us in measured.items():
        shape = G.SM.KernelShape(m=m, n=n, k=k, fp8=True)
        priced, found = model_price_us(G.SM, pricing["tables"], spec, fam, shape)
        assert found and priced == pytest.approx(us, rel=1e-6)
        shipped, _ = model_price_us(G.SM, G.kernel_tables("H200"), spec, fam, shape)
        assert priced == pytest.approx(2 * shipped, rel=2e-5)  # the fake GPU ran every call in twice the price
    # Whole steps from the new table: every family ran twice as slow, so the steps' compute grows.
    shipped, mine = G.decode("DeepSeek-V3", "H200")["step_ms"], G.decode("DeepSeek-V3", device_file)["step_ms"]
    assert mine > 1.3 * shipped
    md = (out / "comparison.md").read_text()
    assert "The grounded model from the new table" in md and "kind: measured" in md


def test_the_comparison_gives_each_shape_the_models_price_and_the_ratio(tmp_path):
    _, _, _, out = _run(tmp_path)
    with open(out / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(MP.plan_shapes("H800"))
    price = MP.Pricer("H200")
    for r in rows[:40] + rows[-40:]:
        ratio = float(r["model_over_measured"])
        assert ratio == pytest.approx(float(r["model_us"]) / float(r["measured_us"]), rel=1e-4)
        assert ratio == pytest.approx(1 / 2 if r["kernel"] == "production" else 1 / 3, rel=1e-4)
        if r["kernel"] == "dsperf":
            assert float(r["dsperf_over_production"]) == pytest.approx(1.5, rel=1e-4)
    gemm = next(r for r in rows if r["family"] == "gemm_fp8")
    shape = MP.Shape("gemm_fp8", "fp8", tuple((f, int(float(gemm[f]))) for f in ("m", "n", "k")))
    assert float(gemm["model_us"]) == pytest.approx(price(shape)[0], rel=1e-5)
    assert {r["model_from_table"] for r in rows if r["family"] == "gemm_bf16"} == {"True"}  # the Hopper table's rows
    md = (out / "comparison.md").read_text()
    assert "## By family" in md and "| grouped_masked" in md


def test_the_budget_leaves_shapes_out_and_says_which(tmp_path):
    code, timer, printed, out = _run(tmp_path, timer_kw=dict(seconds=1.0), budget_s=60.0)
    assert code == 0
    measured = len(timer.calls)
    assert 20 <= measured <= 61
    rows = G.read_table_rows(out / "H200.csv")
    assert len(rows) == measured
    # Round-robin: a short run still holds every production family.
    assert {r["family"] for r in rows} == set(MP.PRODUCTION_FAMILIES)
    md = (out / "comparison.md").read_text()
    left = [ln for ln in md.splitlines() if ln.startswith("- ") and "budget: estimated" in ln]
    assert len(left) == len(MP.plan_shapes("H800")) - measured
    assert f"{measured} shapes measured" in md and f"{len(left)} left out" in md
    # No shape started past the budget: the clock stopped within one shape of it.
    assert timer.clock.now() <= 60.0 + 1.0


def test_a_family_that_cannot_run_and_a_shape_that_fails_are_reported(tmp_path):
    why = "torch 2.3.0 has no torch._scaled_grouped_mm"
    broken = MP.plan_shapes("H800")[0]
    _, _, _, out = _run(tmp_path, timer_kw=dict(missing={("grouped_masked", "production"): why,
                                                         ("grouped_contiguous", "production"): why},
                                                broken={broken}))
    rows = G.read_table_rows(out / "H200.csv")
    assert not any(r["family"].startswith("grouped") for r in rows)
    md = (out / "comparison.md").read_text()
    assert f"- grouped_masked (production): {why}" in md
    assert f"{broken.label()}: error: RuntimeError: CUDA error: an illegal memory access" in md
    assert not any((r["m"], r["n"], r["k"]) == (broken.get("m"), broken.get("n"), broken.get("k"))
                   for r in rows if r["family"] == broken.family)


def test_the_estimates_follow_the_models_price_and_the_first_call():
    s = MP.Shape("mla_decode", "bf16", (("batch", 64), ("kv_len", 32768), ("heads", 128)))
    small = MP.Shape("mla_decode", "bf16", (("batch", 1), ("kv_len", 1024), ("heads", 128)))
    assert MP.estimate_s(s, 1000.0, 15) > MP.estimate_s(small, 20.0, 15) > MP.FIXED_S
    assert MP.estimate_s(small, 20.0, 15, True) - MP.estimate_s(small, 20.0, 15) == MP.FIRST_CALL_S["mla_decode"]
    assert s.input_bytes() == pytest.approx(2 * 64 * 32768 * 576 + 4 * 64 * 128 * 576 * 2)


def test_the_clock_window_reads_the_samples_inside_or_the_nearest():
    c = FakeClock()
    c.samples = [(0.5, (1900.0, 1980.0, 300.0, 700.0)), (1.0, (1500.0, 1980.0, 600.0, 700.0)),
                 (1.5, (1400.0, 1980.0, 650.0, 700.0)), (3.0, (float("nan"),) * 4)]
    assert c.window(0.9, 1.6) == (1450.0, 1400.0, 1500.0, 2)
    assert c.window(2.9, 3.1) == (1400.0, 1400.0, 1400.0, 1)  # the NaN reading skipped, the nearest kept
    c.samples = []
    med, lo, hi, n = c.window(0, 1)
    assert n == 0 and math.isnan(med)
    assert MO.clock_text((med, lo, hi, n)) == "SM clock not sampled (no nvidia-smi)"


def test_the_device_file_names_the_table_before_any_section(tmp_path):
    env = {"gpu": "NVIDIA H20", "date": "2026-11-27"}
    text = MO.device_file_text("H20", "H20.csv", env)
    assert text.count("kernel_table") == 1
    assert text.index('kernel_table = "H20.csv"') < text.index("[as_published]")
    path = tmp_path / "H20-measured.toml"
    path.write_text(text)
    (tmp_path / "H20.csv").write_text("family,m,n,k,dtype,latency_us,source\ngemm_fp8,128,7168,2048,fp8,20.0,x\n")
    assert G.device_pricing(str(path))["kernel_table"] == "H20.csv"
    assert load_device(str(path), "as_published").mem_bw_gbps == load_device("H20", "as_published").mem_bw_gbps


def test_dry_run_lists_the_shapes_and_the_estimate_through_the_cli():
    r = subprocess.run([sys.executable, "-m", "dsperf.cli", "measure-gpu", "--dry-run", "--quick", "--device", "H100",
                        "--budget-s", "60", "--no-dsperf-kernels"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    n = len(MP.plan_shapes("H800", quick=True, dsperf_kernels=False))
    assert f"{n} shapes priced as H100" in out and "nothing is timed" in out
    assert "| mla_prefill" in out and "dsperf" not in out.split("nothing is timed")[1].split("estimated total")[0]
    m = re.search(r"estimated total (\d+) s; within the 60-s budget: (\d+) shapes \((\d+) s\), left out: (\d+)", out)
    assert m and int(m[2]) + int(m[4]) == n and int(m[3]) <= 60 and int(m[4]) > 0


@pytest.mark.skipif(_has_cuda_torch(), reason="a GPU is present (the command then measures; run it by hand)")
def test_without_a_gpu_it_measures_nothing_and_exits_0(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dsperf.cli", "measure-gpu", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Nothing measured" in r.stdout and ("PyTorch is not installed" in r.stdout or "no CUDA GPU" in r.stdout)
    assert not (tmp_path / "o").exists()


def test_bad_arguments_are_one_line_errors():
    r = subprocess.run([sys.executable, "-m", "dsperf.cli", "measure-gpu", "--dry-run", "--budget-s", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--budget-s" in r.stderr and "Traceback" not in r.stderr


def test_a_run_stopped_from_outside_keeps_what_it_measured(tmp_path):
    """The device script's hard stop (SIGINT past the budget) ends the loop, not the files."""
    class Interrupted(FakeTimer):
        def measure(self, shape, iters):
            if len(self.calls) == 7:
                raise KeyboardInterrupt
            return super().measure(shape, iters)
    clock = FakeClock()
    timer = Interrupted(clock)
    code = MG.run_command(_args(tmp_path), timer_factory=lambda: timer, clock_factory=lambda: clock,
                          print_fn=lambda s: None)
    assert code == 0
    assert len(G.read_table_rows(tmp_path / "out" / "H200.csv")) == 7
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert md.count("interrupted: the run was stopped before this shape") == len(MP.plan_shapes("H800")) - 7


def test_the_real_timer_skips_what_the_installed_libraries_lack():
    """TorchTimer.available over a stand-in torch module: no torch._scaled_grouped_mm means no
    grouped rows (never a per-expert loop in its place); FlashInfer and dsperf's CUDA build absent
    here are named."""
    class FakeTorch:
        __version__ = "2.4.0+cu121"
        float8_e4m3fn = object()
        _scaled_mm = object()

        class cuda:
            @staticmethod
            def get_device_capability(i):
                return (9, 0)

    timer = MG.TorchTimer.__new__(MG.TorchTimer)  # no GPU set-up: only the library checks
    timer.torch, timer._kernel_text = FakeTorch, {}
    got = timer.available()
    assert got[("gemm_fp8", "production")] is None and got[("gemm_bf16", "production")] is None
    for fam in ("grouped_masked", "grouped_contiguous"):
        assert "has no torch._scaled_grouped_mm" in got[(fam, "production")]
    FakeTorch._scaled_grouped_mm = object()
    got = timer.available()
    assert got[("grouped_masked", "production")] is None and got[("grouped_contiguous", "production")] is None
    FakeTorch.cuda.get_device_capability = staticmethod(lambda i: (8, 0))
    got = timer.available()
    assert "sm_90" in got[("grouped_masked", "production")] and "sm_89" in got[("gemm_fp8", "production")]
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        assert "flashinfer is not importable" in got[("mla_decode", "production")]
    from dsperf import cuda
    if not cuda.available()[0]:
        assert all("not usable" in got[(f, "dsperf")] for f in MP.DSPERF_FAMILIES)


def test_the_step_comparison_runs_in_a_child_and_a_crash_there_is_named(monkeypatch):
    from pathlib import Path
    from dsperf.predict import measure_gpu_output as O
    shipped = Path(G.__file__).resolve().parents[1] / "data" / "devices" / "H200.toml"
    assert O.step_comparison_in_child("H200", shipped) == [tuple(r) for r in O.step_comparison("H200", shipped)]
    # A child that dies (as one H200 host's did) is an error naming the signal, not the caller's end.
    monkeypatch.setattr(O.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, -11, "", "Fatal Python error"))
    with pytest.raises(RuntimeError, match="ended with signal SIGSEGV .*Fatal Python error"):
        O.step_comparison_in_child("H200", shipped)
