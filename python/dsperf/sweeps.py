"""The kernel points dsperf measures: the fit sweep calibration learns the efficiencies from, and
the default sweep the report predicts. The two use different shapes, so the report's errors are
out of sample; the composite layers (moe_layer, decode_layer) appear only in the default sweep,
predicted from their parts.

Shapes are DeepSeek-V3's (dim 7168, expert inter 2048, q_lora 1536, latent 512) on one rank of a
deployment: 16 attention heads (TP8) or 128 (TP1), a handful of local experts.
"""
from __future__ import annotations

D, I = 7168, 2048


def _linear(shapes, dtype):
    return [("linear", dict(m=m, n=n, k=k, dtype=dtype)) for m, n, k in shapes]


def _experts(family, shapes, dtype):
    return [(family, dict(rows=r, active=a, dim=D, inter=I, dtype=dtype)) for r, a in shapes]


def _mla_decode(shapes, dtype):
    return [("mla_decode", dict(keys=k, batch=b, q_len=1, heads=h, dtype=dtype)) for k, b, h in shapes]


def _mla(family, variants, tokens, prefix, heads=16):
    return [(family, dict(variant=v, tokens=tokens, prefix=prefix, heads=heads)) for v in variants]


ALL = ("CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME")


def fit_points(quick=False):
    """The calibration sweep (quick: the smallest set that still fits every efficiency)."""
    pts = []
    pts += _linear([(1, 4096, D), (16, 4096, D), (64, I, I), (128, 4096, D), (512, 2048, D)], "bf16")
    pts += _linear([(1, 4096, D), (16, 2048, D), (32, I, D), (128, 4096, D)], "fp8")
    pts += [("gate", dict(tokens=t, dim=D, experts=256, top_k=8)) for t in (1, 64, 1024, 2048)]
    pts += [("dispatch_combine", dict(tokens=t, top_k=8, dim=D)) for t in (4, 64, 512, 2048)]
    # Experts in both regimes: few rows per expert stream the weights, many rows compute.
    pts += _experts("experts_masked", [(2, 2), (16, 4), (64, 4), (128, 4), (256, 2)], "bf16")
    pts += _experts("experts_masked", [(2, 2), (16, 8), (32, 4), (128, 2)], "fp8")
    pts += _experts("experts_contiguous", [(8, 4), (32, 4), (64, 2), (128, 2), (512, 1)], "bf16")
    pts += _experts("experts_contiguous", [(8, 4), (32, 4), (64, 2), (256, 1)], "fp8")
    pts += _mla_decode([(4096, 1, 16), (16384, 4, 16), (65536, 16, 16), (2048, 1, 128)], "bf16")
    pts += _mla_decode([(4096, 1, 16), (16384, 4, 16), (65536, 16, 16)], "fp8")
    # Two points per MLA variant: each variant's attention core is fitted on its own.
    pts += _mla("mla_prefill", ALL, 128, 0) + _mla("mla_prefill", ALL, 32, 256)
    pts += _mla("mla_step", ALL, 1, 2048) + _mla("mla_step", ALL, 1, 512)
    if quick:
        pts = [p for p in pts if not _large(p)]
    return pts


def default_points(quick=False):
    """The report's sweep: other shapes than the fit, plus the composite layers."""
    pts = []
    pts += _linear([(4, 2048, D), (32, D, I), (256, D, I), (1024, 1536, D)], "bf16")
    pts += _linear([(8, D, I), (256, 2048, D)], "fp8")
    pts += [("gate", dict(tokens=t, dim=D, experts=256, top_k=8)) for t in (16, 256, 4096)]
    pts += [("dispatch_combine", dict(tokens=t, top_k=8, dim=D)) for t in (16, 256, 4096)]
    pts += _experts("experts_masked", [(4, 4), (32, 8), (128, 8)], "bf16")
    pts += _experts("experts_masked", [(8, 4), (64, 8)], "fp8")
    pts += _experts("experts_contiguous", [(128, 4), (384, 3), (1024, 2)], "bf16")
    pts += _experts("experts_contiguous", [(64, 4), (512, 2)], "fp8")
    pts += _mla_decode([(8192, 2, 16), (32768, 8, 16), (131072, 32, 16), (4096, 1, 128)], "bf16")
    pts += _mla_decode([(8192, 2, 16), (131072, 32, 16)], "fp8")
    pts += _mla("mla_prefill", ALL, 256, 0) + _mla("mla_prefill", ("CC", "A_CC_ME"), 64, 1024)
    pts += _mla("mla_step", ALL, 1, 4096) + _mla("mla_step", ("CD", "A_CC"), 1, 1024)
    moe = dict(dim=D, inter=I, shared_inter=I, dtype="bf16")
    pts += [("moe_layer", dict(moe, tokens=t, experts=e, top_k=k)) for t, e, k in ((1, 16, 8), (16, 16, 8), (128, 8, 4))]
    pts += [("moe_layer", dict(moe, tokens=4, experts=16, top_k=8, dtype="fp8"))]
    layer = dict(moe, experts=16, top_k=8, heads=16)
    pts += [("decode_layer", dict(layer, variant=v, tokens=1, prefix=2048)) for v in ("CD", "A_CC_ME")]
    pts += [("decode_layer", dict(layer, variant="AM_CC_ME", tokens=4, prefix=4096))]
    if quick:
        pts = [p for p in pts if not _large(p)]
    return pts


def _large(point):
    """Points a quick sweep leaves out: the longest-running ones."""
    family, p = point
    if family == "linear":
        return p["m"] >= 512
    if family == "experts_contiguous":
        return p["rows"] >= 512
    if family == "experts_masked":
        return p["rows"] >= 128
    if family == "mla_decode":
        return p["keys"] >= 131072
    if family == "mla_prefill":
        return p["tokens"] >= 512 or (p["tokens"] >= 256 and p["variant"] in ("CC", "A_CC"))
    if family in ("gate", "dispatch_combine"):
        return p["tokens"] >= 4096
    if family in ("moe_layer", "decode_layer"):
        return p["tokens"] >= 128 or p.get("dtype") == "fp8"
    return False
