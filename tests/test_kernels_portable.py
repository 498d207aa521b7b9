"""The portable micro-kernels pass the same kernel tests: the suite runs again in a subprocess
with DSPERF_ISA=portable (this machine would otherwise always pick AVX-512)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(os.environ.get("DSPERF_ISA") == "portable", reason="already the portable run")
def test_kernel_suite_on_portable_kernels():
    env = dict(os.environ, DSPERF_ISA="portable")
    check = subprocess.run([sys.executable, "-c", "import dsperf.kernels as k; print(k.isa())"], env=env,
                           capture_output=True, text=True)
    assert check.stdout.strip() == "portable", check.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(HERE / "test_kernels_blocks.py"), str(HERE / "test_kernels_moe.py"),
                        str(HERE / "test_kernels_mla.py"), str(HERE / "test_kernels_mla_variants.py"),
                        str(HERE / "test_kernels_decode_layer.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
