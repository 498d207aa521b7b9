"""Shared helpers of the kernel tests: random BF16/FP8 data, dtype-derived tolerances, and the
kernel path a process would run."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn
EPS_BF16 = 2.0 ** -8   # unit roundoff of BF16 (8 significand bits)
EPS_F32 = 2.0 ** -24


def rand_bf16(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(BF16)


def shuffled_block_table(rng, seqlens, block_size, spare_blocks):
    """(block_table int32 [B, max blocks], total blocks): the blocks of a paged cache handed out
    in a shuffled order, as an allocator would, with spare_blocks nobody owns."""
    need = [-(-n // block_size) for n in seqlens]
    total = sum(need) + spare_blocks
    order = rng.permutation(total).astype(np.int32)
    table = np.zeros((len(seqlens), max(need)), np.int32)
    i = 0
    for b, k in enumerate(need):
        table[b, :k] = order[i:i + k]
        i += k
    return table, total


def rand_fp8_weight(rng, rows, cols):
    """FP8 weights with 128x128 block scales, as DeepSeek-V3's checkpoint stores them."""
    w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    nb, kb = -(-rows // 128), -(-cols // 128)
    scale = np.zeros((nb, kb), np.float32)
    q = np.zeros((rows, cols), np.float32)
    for i in range(nb):
        for j in range(kb):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            scale[i, j] = np.abs(blk).max() / 448.0
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = blk / scale[i, j]
    return np.clip(q, -448, 448).astype(FP8), scale


def fp8_linear_eps(k):
    """The tolerance of an FP8 block-scaled GEMM against dsperf.reference.linear: the reference
    scales each 128-deep partial sum (DeepGEMM's definition); a kernel may round code x scale to
    BF16 first, one BF16 unit roundoff of each product, on top of the FP32 summation of k terms."""
    return EPS_BF16 + 2 * k * EPS_F32


def f32(a):
    return np.asarray(a).astype(np.float32)


def assert_dot_close(actual, expected, abs_bound, eps):
    """|actual - expected| <= eps * abs_bound elementwise, where abs_bound is sum |a| |b| of the
    products behind each output (the rounding error bound of a dot product)."""
    actual, expected = f32(actual), f32(expected)
    assert actual.shape == expected.shape
    excess = np.abs(actual - expected) - eps * abs_bound - 1e-30
    assert (excess <= 0).all(), f"max excess {excess.max():.3g} at {np.unravel_index(excess.argmax(), excess.shape)}"


def make_ranks(rng, n, E, tokens, top_k=4, dim=64):
    """Expert-parallel inputs of n ranks: {rank: BF16 x [tokens[r], dim]}, {rank: int32 distinct
    top-k ids in [0, E)}, {rank: FP32 weights}."""
    xs, ids, ws = {}, {}, {}
    for r in range(n):
        T = tokens[r]
        xs[r] = rand_bf16(rng, T, dim)
        ids[r] = np.argsort(rng.random((T, E)), axis=1)[:, :top_k].astype(np.int32)
        ws[r] = rng.random((T, top_k)).astype(np.float32)
    return xs, ids, ws


def isa_under(value: str) -> tuple[str, str]:
    """The ISA a process with DSPERF_ISA=value runs, and why."""
    env = dict(os.environ, DSPERF_ISA=value)
    check = subprocess.run([sys.executable, "-c", "import dsperf.kernels as k; print(k.isa()); "
                            "print(k.cpu_features()['why'])"], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    isa, why = check.stdout.strip().split("\n", 1)
    return isa, why
