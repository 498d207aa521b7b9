"""No kernel reads past the end (or before the start) of an input: every CPU kernel runs on inputs
that end at an inaccessible page, with widths whose tails the vector kernels load under masks
(guard_worker.py), once per kernel path. AddressSanitizer does not check masked vector loads; a
guard page does, because a masked-off lane never faults and a real over-read always does."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_helpers import isa_under

HERE = Path(__file__).resolve().parent
PATHS = {"portable": {"DSPERF_ISA": "portable"},
         "avx512_bf16, dot products": {"DSPERF_ISA": "avx512_bf16", "DSPERF_GEMM": "dot"},
         "avx512_bf16, FP32 FMAs": {"DSPERF_ISA": "avx512_bf16", "DSPERF_GEMM": "fma"}}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="guard pages use Linux mprotect")
@pytest.mark.parametrize("path", list(PATHS))
def test_no_kernel_reads_outside_its_inputs(path):
    env = dict(os.environ, **PATHS[path])
    got, why = isa_under(env["DSPERF_ISA"])
    if got != env["DSPERF_ISA"]:
        pytest.skip(f"this CPU does not run {env['DSPERF_ISA']}: {why}")
    r = subprocess.run([sys.executable, str(HERE / "guard_worker.py")], env=env, capture_output=True, text=True,
                       timeout=600, cwd=HERE)
    lines = r.stdout.strip().splitlines()
    if r.returncode < 0:
        pytest.fail(f"{signal.Signals(-r.returncode).name} in case '{lines[-1] if lines else '?'}': a read or "
                    f"write outside an input\n{r.stderr[-2000:]}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert lines[-1].endswith("differing results: []")
