"""The cost-model benchmark runs end to end on a tiny grid and its transcription agrees with dsperf
(the benchmark exits non-zero otherwise). No timing is asserted: figures belong to the benchmark."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_costmodel.py"


def test_bench_costmodel_runs_and_agrees():
    r = subprocess.run([sys.executable, str(SCRIPT), "--points", "3000", "--python-points", "300", "--repeats", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max rel diff" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("decode configs/s: ")
