"""The model benchmarks run end to end on small inputs, and each one's plain-Python counterpart agrees
with dsperf (the cost-model and explorer benchmarks exit non-zero otherwise; the simulator's warns).
No timing is asserted: figures belong to the benchmarks."""
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "bench_costmodel.py"


def _run(script: str, *args: str) -> str:
    r = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_bench_costmodel_runs_and_agrees():
    r = subprocess.run([sys.executable, str(SCRIPT), "--points", "3000", "--python-points", "300", "--repeats", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max rel diff" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("decode configs/s: ")


def test_bench_explore_runs_and_agrees():
    out = _run("bench_explore.py", "--batches", "8", "--python-points", "20", "--repeats", "1")
    assert "agreement with the search: worst " in out  # the script exits non-zero above 1e-9
    assert out.strip().splitlines()[-1].startswith("explore configs/s: ")


def test_bench_simulate_runs_and_agrees():
    out = _run("bench_simulate.py", "--repeats", "1", "--python-requests", "100")
    assert "WARNING" not in out, out
    assert out.strip().splitlines()[-1].startswith("simulate requests/s: ")


def test_bench_mla_layers_runs_and_rejects_a_bad_variant():
    out = _run("bench_mla_layers.py", "--variants", "CC,A_CC_ME", "--steps", "64", "--prefills", "32:64",
               "--heads", "2", "--repeats", "1")
    rows = [line for line in out.splitlines() if line.startswith("mla_layer_")]
    assert len(rows) == 4 and out.startswith("cpu: ")
    r = subprocess.run([sys.executable, str(BENCHMARKS / "bench_mla_layers.py"), "--variants", "XX"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--variants" in r.stderr
