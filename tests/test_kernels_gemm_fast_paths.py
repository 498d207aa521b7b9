"""The AVX512-BF16 GEMM paths against dsperf.reference at the shapes that reach each of them: the
stream kernel (fewer rows than linear_prefill_min_rows: decode), the packed kernel (prefill; K past its
8192-wide block carries partial sums), FP8 converted in registers (stream) or dequantised into the
panels (packed), K tails that are not whole 64- or 32-wide steps, rows that are not whole tiles,
negative and non-finite scales. The products the probe did not pick (FP32 FMAs or dot products,
in the prefill kernels, the stream kernel's tiles of 2 rows and more and attention's VNNI-layout
GEMM) run too, in a subprocess with DSPERF_GEMM forcing them."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsperf import _C
from dsperf import kernels as K
from dsperf import reference as R
from kernel_helpers import fp8_linear_eps, EPS_F32, assert_dot_close, f32, rand_bf16, rand_fp8_weight

HERE = Path(__file__).resolve().parent
SPLIT = int(_C.kernels.linear_prefill_min_rows())  # 0 on the portable path: every shape takes one kernel


@pytest.fixture
def rng():
    return np.random.default_rng(16)


SHAPES = [(1, 64, 3), (1, 75, 130), (3, 129, 257), (8, 7168, 40), (7, 2048, 131), (max(SPLIT - 1, 1), 200, 9),
          (max(SPLIT, 1), 200, 9), (16, 96, 13), (37, 1000, 25), (64, 8192 + 300, 14), (5, 8192 + 64, 7),
          # The stream kernel's K blocks (x's block takes two thirds of L1: 2048 columns at 8 rows
          # with a 48 KB L1, 1024 at 16) with a partial last step, and several row tiles carrying their
          # sums between blocks; FP8 rows over three 128-row scale blocks whose byte tables are rebuilt
          # per K-block as the panels cross them.
          (6, 3000, 37), (16, 4000, 9), (20, 1100, 130), (8, 5000, 300),
          # The packed kernel: odd K (the last pair's zero half), N over several 48-row slices with a
          # partial one and FP8 row groups on both sides of a 128-row scale boundary, an odd K past
          # the 8192-wide block, rows that are not whole 8-row tiles.
          (max(SPLIT, 1) + 5, 75, 130), (max(SPLIT, 1) + 8, 129, 257), (max(SPLIT, 1) + 1, 8192 + 129, 50)]


@pytest.mark.parametrize("m, k, n", SHAPES)
def test_linear_bf16_paths(rng, m, k, n):
    x, w = rand_bf16(rng, m, k), rand_bf16(rng, n, k)
    assert_dot_close(K.linear(x, w), R.linear(x, w), np.abs(f32(x)) @ np.abs(f32(w)).T, 2 * k * EPS_F32)


@pytest.mark.parametrize("m, k, n", SHAPES)
def test_linear_fp8_paths(rng, m, k, n):
    x = rand_bf16(rng, m, k)
    w, s = rand_fp8_weight(rng, n, k)
    s[::2] *= -1  # a negative scale flips every sign of its block
    wd = R.weight_dequant(w, s)
    assert_dot_close(K.linear(x, w, s), R.linear(x, w, s), np.abs(f32(x)) @ np.abs(f32(wd)).T, fp8_linear_eps(k))


@pytest.mark.parametrize("m", [1, 5, max(SPLIT, 1) + 3])
def test_fp8_nan_code_and_scale_propagate(rng, m):
    """A NaN code or a NaN scale makes the outputs it reaches NaN and leaves the others finite; the
    zero padding past K never turns into the value of code 0 under a non-finite scale."""
    k, n = 200, 260
    x = rand_bf16(rng, m, k)
    w, s = rand_fp8_weight(rng, n, k)
    w[3, 5] = 0x7F  # e4m3fn NaN
    s[1, 1] = np.nan  # rows 128-255, columns 128-199 (K ends inside this block)
    s[2, 0] = np.inf  # rows 256-259, columns 0-127
    got, ref = K.linear(x, w, s), R.linear(x, w, s)
    # The outputs a non-finite value reaches are non-finite, and the others finite. A NaN stays NaN;
    # an infinite scale gives +-inf where the reference scales a partial sum, and NaN where a kernel
    # dequantises the block first (+inf and -inf products summed): both are outside the contract.
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
    assert np.isnan(got[np.isnan(ref)]).all()
    finite = np.isfinite(ref)
    wd = f32(R.weight_dequant(w, s))
    bound = np.abs(f32(x)) @ np.abs(np.where(np.isfinite(wd), wd, 0)).T
    assert_dot_close(got[finite], ref[finite], bound[finite], fp8_linear_eps(k))


def test_experts_masked_stream_path_fp8(rng):
    """Decode experts (few rows per expert) on FP8 weights: the stream kernel inside expert_ffn."""
    E, D, I, cap = 3, 256, 192, 4
    x = rand_bf16(rng, E, cap, D)
    counts = np.array([4, 1, 0], np.int32)
    w13, s13 = zip(*(rand_fp8_weight(rng, 2 * I, D) for _ in range(E)))
    w2, s2 = zip(*(rand_fp8_weight(rng, D, I) for _ in range(E)))
    args = (x, counts, np.stack(w13), np.stack(w2), np.stack(s13), np.stack(s2))
    got, ref = K.experts_masked(*args), R.experts_masked(*args)
    np.testing.assert_allclose(got, ref, rtol=0.02, atol=0.02 * np.abs(ref).max())


@pytest.mark.skipif(os.environ.get("DSPERF_GEMM") is not None or SPLIT == 0,
                    reason="already a forced run, or the portable path (no prefill kernel choice)")
@pytest.mark.parametrize("kernel", ["dot", "fma"])
def test_both_product_kernels(kernel):
    env = dict(os.environ, DSPERF_GEMM=kernel)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(HERE / "test_kernels_gemm_fast_paths.py"), str(HERE / "test_kernels_blocks.py"),
                        str(HERE / "test_kernels_mla.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_gemm_products_names_the_forced_choice():
    forced, got = os.environ.get("DSPERF_GEMM"), _C.kernels.gemm_products()
    if K.isa() != "avx512_bf16":
        assert got == "portable"
    elif forced:
        assert got == forced
    else:
        assert got in ("dot", "fma")
