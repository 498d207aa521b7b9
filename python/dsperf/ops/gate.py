"""gate: DeepSeek-V3's router, scores x @ weight.T over the experts, group-limited top-k."""
from __future__ import annotations

import numpy as np

from .. import _C
from .family import DIM, OpFamily
from .inputs import gate_groups


def build(p, pool):
    from .. import kernels as K

    x = pool.get("x", (p["tokens"], p["dim"]))
    w = pool.get("gate_w", (p["experts"], p["dim"]))
    bias = np.zeros(p["experts"], np.float32)
    g = gate_groups(p["experts"], p["top_k"])
    return (lambda: K.moe_gate(x, w, bias, **g)), dict(p)


def _points(tokens):
    return [dict(tokens=t, dim=DIM, experts=256, top_k=8) for t in tokens]


FAMILY = OpFamily(
    name="gate", params=("tokens", "dim", "experts", "top_k"), token_params=("tokens",),
    example=dict(tokens=8, dim=256, experts=16, top_k=4),
    summary="MoE gate: router GEMM, sigmoid scores, group-limited top-k",
    kernels=("moe_gate",), references=("reference.moe_gate",), runs_on=("host", "gpu"),
    work=lambda p: _C.kernel_cost.gate_work(p["tokens"], p["dim"], p["experts"], p["top_k"]),
    build=build,
    fit_points=lambda: _points((1, 64, 1024, 2048)),
    default_points=lambda: _points((16, 256, 4096)),
    large=lambda p: p["tokens"] >= 4096,
)
