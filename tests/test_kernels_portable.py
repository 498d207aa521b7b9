"""The kernel tests on the micro-kernels this process does not use: the suite runs again in a
subprocess under each other DSPERF_ISA. On a CPU that advertises AVX-512 BF16 that is the
portable path; on one whose CPUID hides BF16 (a virtual machine's mask) while VDPBF16PS runs, it is
the AVX-512 path, which DSPERF_ISA=avx512_bf16 turns on."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dsperf.kernels as kernels
from kernel_helpers import isa_under

HERE = Path(__file__).resolve().parent
SUITE = ["test_kernels_blocks.py", "test_kernels_moe.py", "test_kernels_mla.py", "test_kernels_mla_variants.py",
         "test_kernels_decode_layer.py", "test_kernels_gemm_fast_paths.py"]


@pytest.mark.parametrize("isa", ["portable", "avx512_bf16"])
def test_kernel_suite_on_the_other_kernels(isa):
    if kernels.isa() == isa:
        pytest.skip(f"{isa} is this process's own path")
    got, why = isa_under(isa)
    if isa == "portable":
        assert got == "portable"
    elif got != isa:
        pytest.skip(f"this CPU does not run {isa}: {why}")
    env = dict(os.environ, DSPERF_ISA=isa)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(HERE / f) for f in SUITE)],
                       env=env, capture_output=True, text=True, timeout=900, cwd=HERE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


@pytest.mark.parametrize("variable, value", [("DSPERF_ISA", "avx9000"), ("DSPERF_GEMM", "FMA")])
def test_an_unknown_kernel_choice_is_refused_by_name_at_import(variable, value):
    """Checked when dsperf.kernels is imported, on that thread: a kernel's OpenMP region could not
    raise it."""
    env = dict(os.environ, **{variable: value})
    r = subprocess.run([sys.executable, "-c", "import dsperf.kernels"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "ValueError" in r.stderr and variable in r.stderr and value in r.stderr
