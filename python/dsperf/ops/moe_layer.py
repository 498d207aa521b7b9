"""moe_layer: gate -> route -> experts -> combine + shared expert in one call. Composite: priced
as its parts (gate, dispatch_combine, experts_contiguous for the routed and the shared experts)."""
from __future__ import annotations

from .family import DIM, MOE_INTER as I, OpFamily
from .inputs import active_experts, gate_groups, moe_weights

PARAMS = ("tokens", "dim", "inter", "experts", "top_k", "active", "shared_inter", "dtype")


def parts(p):
    rows, dt = p["tokens"] * p["top_k"], p.get("dtype", "bf16")
    out = [("gate", dict(tokens=p["tokens"], dim=p["dim"], experts=p["experts"], top_k=p["top_k"])),
           ("dispatch_combine", dict(tokens=p["tokens"], top_k=p["top_k"], dim=p["dim"])),
           ("experts_contiguous", dict(rows=rows, active=p["active"], dim=p["dim"], inter=p["inter"], dtype=dt))]
    if p["shared_inter"]:
        out.append(("experts_contiguous", dict(rows=p["tokens"], active=1 if p["tokens"] else 0, dim=p["dim"],
                                               inter=p["shared_inter"], dtype=dt)))
    return out


def layer_inputs(p, pool):
    """(x, moe weights with the gate's grouping, measured params with `active` filled in)."""
    e, k = p["experts"], p["top_k"]
    moe = moe_weights(pool, e, p["dim"], p["inter"], p["shared_inter"], p.get("dtype", "bf16"))
    x = pool.get("x", (p["tokens"], p["dim"]))
    return x, moe, dict(p, active=active_experts(moe, x, e, k))


def build(p, pool):
    from .. import kernels as K

    x, moe, q = layer_inputs(p, pool)
    gate = gate_groups(p["experts"], p["top_k"])

    def call():
        return K.moe_layer(x, moe["gate_weight"], moe["w13"], moe["w2"], gate_bias=moe["gate_bias"],
                           shared_w13=moe.get("shared_w13"), shared_w2=moe.get("shared_w2"),
                           w13_scale=moe["w13_scale"], w2_scale=moe["w2_scale"],
                           shared_w13_scale=moe.get("shared_w13_scale"),
                           shared_w2_scale=moe.get("shared_w2_scale"), **gate)

    return call, q


def _default_points():
    moe = dict(dim=DIM, inter=I, shared_inter=I, dtype="bf16")
    return ([dict(moe, tokens=t, experts=e, top_k=k) for t, e, k in ((1, 16, 8), (16, 16, 8), (128, 8, 4))]
            + [dict(moe, tokens=4, experts=16, top_k=8, dtype="fp8")])


FAMILY = OpFamily(
    name="moe_layer", params=PARAMS, token_params=("tokens",),
    example=dict(tokens=3, dim=256, inter=128, experts=16, top_k=4, shared_inter=128, dtype="bf16"),
    summary="the MoE half of a layer in one call (composite: priced as its parts)",
    kernels=("moe_layer",), references=("reference.moe_layer",),
    parts=parts, build=build, default_points=_default_points,
    large=lambda p: p["tokens"] >= 128 or p.get("dtype") == "fp8",
)
