"""The AMX tile configuration as the build really passes it (issue: on GCC 12 the stores of rows[]
and colsb[] were dropped as dead, and LDTILECFG faulted on stack garbage on every AMX machine).

These checks need no AMX: they read the built module. Every LDTILECFG in it must load a constant
object (RIP-relative), and the 64 bytes at that address must be palette 1 with tiles 0-7 at 16 rows
of 64 bytes. On the code before the fix the operand was a stack slot (``-0x40(%rsp)``) with only
bytes 0-15 written, and the first check fails.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from dsperf import _C, kernels

K_ = _C.kernels
SO = _C.__file__


def _objdump(*args):
    return subprocess.run(["objdump", *args, SO], capture_output=True, text=True, check=True).stdout


def _ldtilecfg_lines():
    return [ln for ln in _objdump("-d", "--no-show-raw-insn").splitlines() if "ldtilecfg" in ln]


def _bytes_at(address: int, n: int) -> bytes:
    """n bytes at a virtual address of the module, from objdump's hex dump of its sections."""
    out = _objdump("-s", f"--start-address={address:#x}", f"--stop-address={address + n:#x}")
    data = bytearray()
    for ln in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+) ((?:[0-9a-f]{2,8} ){1,4})", ln)
        if m:
            data += bytes.fromhex(m.group(2).replace(" ", ""))
    return bytes(data[:n])


needs_objdump = pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump not installed")


def _expected_config() -> bytes:
    cfg = bytearray(64)
    cfg[0] = 1                                   # palette 1
    for t in range(8):
        cfg[16 + 2 * t:18 + 2 * t] = (64).to_bytes(2, "little")   # colsb: 64 bytes per row
        cfg[48 + t] = 16                          # rows
    return bytes(cfg)


def test_tile_config_object_holds_the_whole_configuration():
    cfg = K_.amx_tile_config()
    if not cfg:
        pytest.skip("this build has no AMX code (not x86-64 GCC/Clang)")
    assert cfg == _expected_config()


@needs_objdump
def test_every_ldtilecfg_loads_the_constant_configuration():
    lines = _ldtilecfg_lines()
    if not lines:
        pytest.skip("this build has no LDTILECFG")
    for ln in lines:
        m = re.search(r"ldtilecfg\s+(\S+)\s*(?:#\s*([0-9a-f]+))?", ln)
        operand, target = m.group(1), m.group(2)
        assert operand.endswith("(%rip)") and target, (
            f"LDTILECFG loads {operand}, not a constant object: the compiler may have dropped stores of the "
            f"configuration ({ln.strip()})")
        assert _bytes_at(int(target, 16), 64) == _expected_config(), f"the bytes LDTILECFG loads at {target}"


def _import_with(env_value):
    code = "from dsperf import kernels; print(kernels.amx_status())"
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DSPERF_AMX=env_value),
                          capture_output=True, text=True)


@pytest.mark.parametrize("value", ["2", "yes", "", "01"])
def test_bad_dsperf_amx_is_a_value_error_at_import(value):
    r = _import_with(value)
    assert r.returncode != 0
    assert "ValueError" in r.stderr and "DSPERF_AMX" in r.stderr


def test_dsperf_amx_1_is_accepted():
    r = _import_with("1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == kernels.amx_status()


def test_cpu_features_say_why_amx_is_or_is_not_used():
    f = kernels.cpu_features()
    assert f["amx"] == kernels.amx_status()
    assert "AMX: " + f["amx"] in f["why"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_importing_the_kernels_starts_no_threads():
    # The fuzz suites fork children from a server that imported dsperf.kernels; OpenMP threads
    # started at import (the AMX self-check once ran the driver on them) do not survive the fork,
    # and the children's first parallel kernel hung (seen on an AMX machine).
    code = ("import os, numpy\n"
            "before = len(os.listdir('/proc/self/task'))\n"
            "from dsperf import kernels\n"
            "kernels.amx_status(); kernels.cpu_features()\n"
            "print(before, len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1], f"threads before and after importing dsperf.kernels: {out}"
