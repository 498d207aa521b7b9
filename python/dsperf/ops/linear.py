"""linear: y = x @ w.T, x BF16 [m, k], w BF16 or FP8 with 128x128 block scales [n, k], y FP32."""
from __future__ import annotations

from .. import _C
from .family import DIM, MOE_INTER as I, KernelWork, OpFamily, is_fp8


def work(p):
    w = _C.kernel_cost.linear_work(p["m"], p["n"], p["k"], is_fp8(p))
    count = p.get("count", 1)  # the same GEMM once per head
    return KernelWork(w.flops * count, w.bytes * count, w.fp8) if count != 1 else w


def build(p, pool):
    from .. import kernels as K

    x = pool.get("x", (p["m"], p["k"]))
    w, s = pool.weight("linear_w", (p["n"], p["k"]), p.get("dtype", "bf16"))
    return (lambda: K.linear(x, w, s)), dict(p)


def table_rows(p, us):
    """One GEMM: a gemm_bf16 or gemm_fp8 row (the same GEMM per head is not a table row)."""
    if p.get("count", 1) != 1:
        return []
    dt = p.get("dtype", "bf16")
    return [dict(family=f"gemm_{dt}", m=p["m"], n=p["n"], k=p["k"], dtype=dt, latency_us=us)]


def _points(shapes, dtype):
    return [dict(m=m, n=n, k=k, dtype=dtype) for m, n, k in shapes]


FAMILY = OpFamily(
    name="linear", params=("m", "n", "k", "dtype"), token_params=("m",),
    example=dict(m=4, n=256, k=512, dtype="bf16"),
    summary="GEMM y = x @ w.T (BF16 activations, BF16 or FP8 block-scaled weights)",
    kernels=("linear",), references=("reference.linear",),
    work=work, build=build, key_by_dtype=True, rows_per_weight=lambda p: p["m"], table_rows=table_rows,
    fit_points=lambda: (_points([(1, 4096, DIM), (16, 4096, DIM), (64, I, I), (128, 4096, DIM), (512, 2048, DIM)], "bf16")
                        + _points([(1, 4096, DIM), (16, 2048, DIM), (32, I, DIM), (128, 4096, DIM)], "fp8")),
    default_points=lambda: (_points([(4, 2048, DIM), (32, DIM, I), (256, DIM, I), (1024, 1536, DIM)], "bf16")
                            + _points([(8, DIM, I), (256, 2048, DIM)], "fp8")),
    large=lambda p: p["m"] >= 512,
)
