"""No kernel reads past the end (or before the start) of an input: the CPU kernels run on inputs
that end, then on inputs that begin, at an inaccessible page, with widths whose tails the vector
kernels load under masks (guard_worker.py lists what it covers), once per kernel path.
AddressSanitizer does not check masked vector loads; a guard page does, because a masked-off lane
never faults and a real over-read always does."""
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
    try:
        r = subprocess.run([sys.executable, str(HERE / "guard_worker.py")], env=env, capture_output=True, text=True,
                           timeout=600, cwd=HERE)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"no result in 600 s; the last case started: {out.strip().splitlines()[-1:]}")
    lines = r.stdout.strip().splitlines()
    products = "portable" if got == "portable" else env["DSPERF_GEMM"]
    assert lines and lines[0] == f"kernels: {got} {products}", lines[:1]
    if r.returncode < 0:
        pytest.fail(f"{signal.Signals(-r.returncode).name} in case '{lines[-1] if lines else '?'}': a read or "
                    f"write outside an input\n{r.stderr[-2000:]}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert lines[-1].endswith("differing results: []")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="guard pages use Linux mprotect")
@pytest.mark.parametrize("edge, step", [("end", "a.nbytes"), ("start", "-1")])
def test_a_guarded_array_faults_one_byte_past_its_edge(edge, step):
    """The guard itself: the array's bytes are readable, and the byte beyond the guarded edge is not."""
    code = ("import ctypes, numpy as np; from guard_pages import guarded; "
            f"a = guarded(np.arange(10, dtype=np.uint8), {edge!r}); assert a.tolist() == list(range(10)); "
            "print('read', flush=True); "
            f"ctypes.string_at(a.ctypes.data + {step}, 1)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, timeout=60)
    assert r.stdout.strip() == "read" and r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-500:])
