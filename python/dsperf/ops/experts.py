"""experts_contiguous / experts_masked: the grouped expert FFN (merged gate_up w13, SiLU-mul, down
w2) in DeepGEMM's two layouts: rows sorted by expert (prefill) or a fixed capacity per expert
with counts (decode)."""
from __future__ import annotations

import numpy as np

from .. import _C
from .family import DIM, MOE_INTER as I, OpFamily, is_fp8
from .inputs import even_split

PARAMS = ("rows", "active", "dim", "inter", "dtype")


def work(p):
    return _C.kernel_cost.experts_work(p["rows"], p["active"], p["dim"], p["inter"], is_fp8(p))


def _weights(p, pool):
    dt = p.get("dtype", "bf16")
    w13, s13 = pool.weight("w13", (p["active"], 2 * p["inter"], p["dim"]), dt)
    w2, s2 = pool.weight("w2", (p["active"], p["dim"], p["inter"]), dt)
    return w13, w2, s13, s2


def build_contiguous(p, pool):
    from .. import kernels as K

    w = _weights(p, pool)
    counts = even_split(p["rows"], p["active"])
    x = pool.get("x", (p["rows"], p["dim"]))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return (lambda: K.experts_contiguous(x, offsets, *w)), dict(p)


def build_masked(p, pool):
    from .. import kernels as K

    w = _weights(p, pool)
    counts = even_split(p["rows"], p["active"])
    capacity = int(counts.max()) if p["rows"] else 1
    x = pool.get("x_masked", (p["active"], capacity, p["dim"]))
    c32 = counts.astype(np.int32)
    return (lambda: K.experts_masked(x, c32, *w)), dict(p)


def _points(shapes, dtype):
    return [dict(rows=r, active=a, dim=DIM, inter=I, dtype=dtype) for r, a in shapes]


def _rows_per_expert(p):
    return p["rows"] / max(p["active"], 1)


def _family(layout, summary, build, example, fit, default, large_rows):
    """One layout's family: the same parameters, work and efficiency key, its own call and points."""
    name = f"experts_{layout}"
    return OpFamily(name=name, params=PARAMS, token_params=("rows",), summary=summary, kernels=(name,),
                    references=(f"reference.{name}",), runs_on=("host", "gpu"), work=work, build=build,
                    key_by_dtype=True, rows_per_weight=_rows_per_expert, example=example,
                    fit_points=lambda: _points(fit[0], "bf16") + _points(fit[1], "fp8"),
                    default_points=lambda: _points(default[0], "bf16") + _points(default[1], "fp8"),
                    large=lambda p: p["rows"] >= large_rows)


# (rows, active experts) of each sweep, BF16 then FP8.
CONTIGUOUS = _family(
    "contiguous", "grouped expert FFN, rows contiguous per expert (prefill)", build_contiguous,
    dict(rows=12, active=3, dim=256, inter=128, dtype="bf16"),
    fit=([(8, 4), (32, 4), (64, 2), (128, 2), (512, 1)], [(8, 4), (32, 4), (64, 2), (256, 1)]),
    default=([(128, 4), (384, 3), (1024, 2)], [(64, 4), (512, 2)]), large_rows=512)

# Both regimes: few rows per expert stream the weights, many rows compute.
MASKED = _family(
    "masked", "grouped expert FFN, a fixed capacity per expert with counts (decode)", build_masked,
    dict(rows=5, active=2, dim=256, inter=128, dtype="fp8"),
    fit=([(2, 2), (16, 4), (64, 4), (128, 4), (256, 2)], [(2, 2), (16, 8), (32, 4), (128, 2)]),
    default=([(4, 4), (32, 8), (128, 8)], [(8, 4), (64, 8)]), large_rows=128)

FAMILIES = (CONTIGUOUS, MASKED)
