"""dispatch_combine: one process's share of the MoE exchange, rows permuted into expert order
(moe_permute) and the experts' outputs weighted back into token order (moe_unpermute)."""
from __future__ import annotations

import numpy as np

from .. import _C
from .family import DIM, OpFamily


def build(p, pool):
    from .. import kernels as K

    t, k, d = p["tokens"], p["top_k"], p["dim"]
    x = pool.get("x", (t, d))
    ids = pool.rng.integers(0, 256, size=(t, k)).astype(np.int32)
    _, position, source = K.moe_route(ids, 256)
    y_perm = pool.get("y_perm", (t * k, d), "f32")
    weights = np.full((t, k), 1.0 / k, np.float32)

    def call():
        K.moe_permute(x, source)
        return K.moe_unpermute(y_perm, position, weights)

    return call, dict(p)


def _points(tokens):
    return [dict(tokens=t, top_k=8, dim=DIM) for t in tokens]


FAMILY = OpFamily(
    name="dispatch_combine", params=("tokens", "top_k", "dim"), token_params=("tokens",),
    example=dict(tokens=8, top_k=4, dim=256),
    summary="permute rows into expert order and weight the outputs back (one process's dispatch + combine)",
    kernels=("moe_permute", "moe_unpermute"),
    references=("reference.moe_permute", "reference.moe_unpermute"), runs_on=("host", "gpu"),
    work=lambda p: _C.kernel_cost.dispatch_combine_work(p["tokens"], p["top_k"], p["dim"]),
    build=build,
    fit_points=lambda: _points((4, 64, 512, 2048)),
    default_points=lambda: _points((16, 256, 4096)),
    large=lambda p: p["tokens"] >= 4096,
)
