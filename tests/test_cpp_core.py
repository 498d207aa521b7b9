"""Builds the C++ core on its own (no Python) and runs its ctest (cost model and kernels, on the
selected and the portable micro-kernels), so the README's one test command covers both halves.
Skips with a reason where CMake or a compiler is missing. .ci/run repeats it under ASan + UBSan."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="cmake or a C++ compiler is not installed")
def test_cpp_core_ctest(tmp_path):
    build = tmp_path / "build"
    run = lambda *cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # noqa: E731
    cfg = run("cmake", "-S", str(ROOT), "-B", str(build), "-DDSPERF_CUDA=OFF", "-DDSPERF_BUILD_TESTS=ON",
              "-DCMAKE_BUILD_TYPE=Release")
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    bld = run("cmake", "--build", str(build), "-j", "2")
    assert bld.returncode == 0, bld.stdout + bld.stderr
    test = run("ctest", "--test-dir", str(build), "--output-on-failure")
    assert test.returncode == 0, test.stdout + test.stderr
    for name in ("test_costmodel", "test_kernels"):
        out = run(str(build / name))
        assert out.returncode == 0 and " passed, 0 failed" in out.stdout, out.stdout
