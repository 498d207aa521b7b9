"""The AMX GEMM driver (csrc/kernels/cpu/amx_gemm.cpp): its packing and tiling on the scalar
emulation of the tile instructions (any CPU), and, where the CPU has AMX, the hardware against
the emulation and the reference."""
import os
import subprocess
import sys

import numpy as np
import pytest

from dsperf import _C, kernels
from dsperf import reference
from dsperf.harness import random_fp8
from kernel_helpers import rand_bf16

K_ = _C.kernels
AMX = K_.amx_status() == "usable"


def _ref(x, w):
    return x.astype(np.float64) @ w.astype(np.float64).T


def _tol(x, w):
    # FP32 accumulation of exact BF16 products: a few ulps of the sum of magnitudes.
    return 4 * x.shape[1] * 2.0 ** -24 * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T) + 1e-30


# Shapes with partial tiles in every dimension, one tile exactly, more than two tile rows and columns;
# more than 128 rows of x (the blocked mode, K in chunks of 256), more than 256 rows (two passes over
# x) and more than 256 columns (two column blocks).
SHAPES = [(1, 1, 1), (16, 16, 32), (37, 41, 75), (64, 96, 256), (5, 130, 33), (33, 17, 512), (150, 40, 300),
          (270, 300, 40)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_emulated_amx_linear_matches_reference(m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    x, w = rand_bf16(rng, m, k), rand_bf16(rng, n, k)
    y = K_.linear_amx_emulated(x.view(np.uint16), w.view(np.uint16))
    assert y.shape == (m, n) and y.dtype == np.float32
    assert np.all(np.abs(y - _ref(x, w)) <= _tol(x, w))
    # ... and the kernels in use on this CPU agree with it.
    assert np.all(np.abs(y - kernels.linear(x, w)) <= 2 * _tol(x, w))


def _fp8_case(rng, m, n, k):
    x, w = rand_bf16(rng, m, k), random_fp8(rng, (n, k))
    scale = rng.uniform(0.5, 2.0, ((n + 127) // 128, (k + 127) // 128)).astype(np.float32)
    return x, w, scale


# FP8 shapes: one K tile (no second of a 64-code pair), K tails inside a pair and inside a block,
# an odd number of x's row tiles (one B tile), few rows over several 8-tile chunks of K (the chunks'
# tables rebuilt at each block), decode's fused conversion and products with one and two x tiles (a
# weight tile and K cut short), few rows in four pairs of x tiles over blocks of 16 weight rows (one
# A tile each: their sums take four tiles of room per pair all the same), the blocked mode.
FP8_SHAPES = [(16, 16, 32), (37, 200, 300), (3, 64, 1000), (8, 300, 700), (24, 40, 200), (100, 48, 256),
              (150, 130, 257)]


@pytest.mark.parametrize("m,n,k", FP8_SHAPES)
def test_emulated_amx_fp8_linear_matches_the_dequantised_reference(m, n, k):
    # Each 128 x 128 block is dequantised to bf16(code x scale) on its way to the tiles, as
    # reference.weight_dequant does: the products are then exact and only the FP32 sums round.
    rng = np.random.default_rng(m + 3 * n + k)
    x, w, scale = _fp8_case(rng, m, n, k)
    wd = reference.weight_dequant(w, scale)
    y = K_.linear_fp8_amx_emulated(x.view(np.uint16), w.view(np.uint8), scale)
    assert np.all(np.abs(y - _ref(x, wd)) <= _tol(x, wd))
    # ... and the kernels in use on this CPU agree with it.
    assert np.all(np.abs(y - kernels.linear(x, w, scale)) <= 2 * _tol(x, wd))


def test_emulated_amx_fp8_rejects_a_scale_of_the_wrong_shape():
    rng = np.random.default_rng(1)
    x, w, scale = _fp8_case(rng, 4, 130, 64)
    with pytest.raises(ValueError, match="scale"):
        K_.linear_fp8_amx_emulated(x.view(np.uint16), w.view(np.uint8), scale[:1])


@pytest.mark.parametrize("m,n,k", [(16, 16, 32), (37, 41, 75), (150, 40, 300)])
def test_emulated_amx_on_weights_packed_once_matches_reference(m, n, k):
    rng = np.random.default_rng(5 * m + n + k)
    x, w = rand_bf16(rng, m, k), rand_bf16(rng, n, k)
    y = K_.linear_packed_amx_emulated(x.view(np.uint16), w.view(np.uint16))
    assert np.all(np.abs(y - _ref(x, w)) <= _tol(x, w))


def _vnni(b):
    """gemm_bf16_vnni's layout of B [K, N]: rows interleaved two by two, a zero row for odd K."""
    k, n = b.shape
    if k % 2:
        b = np.concatenate([b, np.zeros((1, n), b.dtype)])
    return np.ascontiguousarray(b.reshape(-1, 2, n).transpose(0, 2, 1)).reshape(-1)


@pytest.mark.parametrize("m,n,k", [(16, 16, 32), (40, 512, 77), (128, 33, 256), (3, 5, 1), (140, 300, 66)])
def test_emulated_amx_vnni_gemm_matches_reference(m, n, k):
    rng = np.random.default_rng(7 + m + n + k)
    x, b = rand_bf16(rng, m, k), rand_bf16(rng, k, n)
    y = K_.gemm_vnni_amx_emulated(x.view(np.uint16), _vnni(b).view(np.uint16), n)
    assert np.all(np.abs(y - _ref(x, b.T)) <= _tol(x, b.T))


def test_emulated_amx_vnni_rejects_a_short_b():
    x = np.zeros((4, 8), np.uint16)
    with pytest.raises(ValueError, match="bp"):
        K_.gemm_vnni_amx_emulated(x, np.zeros(10, np.uint16), 4)


def test_amx_status_says_why_not_or_usable():
    status = kernels.amx_status()
    assert status == "usable" or len(status) > 10
    if not kernels.cpu_features()["amx_bf16"]:
        assert status != "usable"


def test_dsperf_amx_0_disables_amx():
    code = "from dsperf import kernels; print(kernels.amx_status())"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DSPERF_AMX="0"), capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "disabled by DSPERF_AMX=0"


def test_tile_peak_probes_measure_only_where_amx_runs_and_check_their_time():
    """The tile peak and the tile loop's ceiling (each step's operand tiles loaded first): 0 where AMX
    is not usable; else positive, the ceiling not above the peak by more than the noise of short probes
    on a shared machine. The two probes alternate, so that a busy minute slows both alike (run one after
    the other, a CI run once saw the peak's three at 4.2 TFLOPS and the loop's at 6.0). A time outside
    (0, 60] seconds is refused, naming it."""
    rounds = [(K_.probe_tile_peak_gflops(0.05), K_.probe_tile_peak_gflops(0.05, operand_loads=True))
              for _ in range(5)]
    peak, loop = max(p for p, _ in rounds), max(q for _, q in rounds)
    if not AMX:
        assert peak == 0 and loop == 0
    else:
        assert peak > 0 and 0 < loop <= 1.5 * peak, rounds
    with pytest.raises(ValueError, match="seconds"):
        K_.probe_tile_peak_gflops(0, True)


@pytest.mark.skipif(not AMX, reason=f"AMX not usable here: {K_.amx_status()}")
@pytest.mark.parametrize("m,n,k", SHAPES[1:])
def test_hardware_amx_linear_matches_emulation(m, n, k):
    rng = np.random.default_rng(3 * m + n + k)
    x, w = rand_bf16(rng, max(m, 16), k), rand_bf16(rng, n, k)
    hw = kernels.linear(x, w)                     # dispatches to AMX from a few rows
    em = K_.linear_amx_emulated(x.view(np.uint16), w.view(np.uint16))
    assert np.all(np.abs(hw - em) <= 2 * _tol(x, w))


@pytest.mark.skipif(not AMX, reason=f"AMX not usable here: {K_.amx_status()}")
@pytest.mark.parametrize("m,n,k", FP8_SHAPES + [(300, 300, 257)])
def test_hardware_amx_fp8_linear_matches_emulation(m, n, k):
    rng = np.random.default_rng(11 * m + n + k)
    x, w, scale = _fp8_case(rng, m, n, k)
    wd = reference.weight_dequant(w, scale)
    em = K_.linear_fp8_amx_emulated(x.view(np.uint16), w.view(np.uint8), scale)
    assert np.all(np.abs(kernels.linear(x, w, scale) - em) <= 2 * _tol(x, wd))
