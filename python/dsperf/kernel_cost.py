"""Predicted latency of single kernel calls: the work each kernel family does (C++,
csrc/costmodel/kernel_cost.cpp) priced on a device's roofline with per-family efficiencies.

A kernel point is a family name and its parameters, e.g.
``("experts_masked", dict(rows=64, active=8, dim=7168, inter=2048, dtype="bf16"))``. Base families
are priced directly; composite ones (``moe_layer``, ``decode_layer``) are the sum of their parts,
each part at its own family's efficiency, with the call overhead paid once: they are predicted,
never fitted, so they test whether the model composes.

The same functions price a GPU spec (``predict_ms(..., device="H800")``, ideal efficiencies unless
given) and this CPU (the spec `dsperf calibrate` writes, whose [efficiency] table holds the fitted
factors).
"""
from __future__ import annotations

from typing import Mapping

from . import _C
from ._checks import MAX_TOKENS, finite_results, flag, number
from .hardware import DeviceLike, load_device

KC = _C.kernel_cost
KernelWork = KC.KernelWork
KernelEfficiency = KC.KernelEfficiency
VARIANTS = ("CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME")

# The families calibration fits (name -> the parameters a point gives).
BASE_FAMILIES = {
    "linear": ("m", "n", "k", "dtype"),
    "gate": ("tokens", "dim", "experts", "top_k"),
    "dispatch_combine": ("tokens", "top_k", "dim"),
    "experts_contiguous": ("rows", "active", "dim", "inter", "dtype"),
    "experts_masked": ("rows", "active", "dim", "inter", "dtype"),
    "mla_decode": ("keys", "batch", "q_len", "heads", "dtype"),
    "mla_prefill": ("variant", "tokens", "prefix", "heads"),
    "mla_step": ("variant", "tokens", "prefix", "heads"),
}
COMPOSITE_FAMILIES = {
    "moe_layer": ("tokens", "dim", "inter", "experts", "top_k", "active", "shared_inter", "dtype"),
    "decode_layer": ("variant", "tokens", "prefix", "heads", "dim", "inter", "experts", "top_k", "active",
                     "shared_inter", "dtype"),
}
FAMILIES = {**BASE_FAMILIES, **COMPOSITE_FAMILIES}
# Bounds on the integer parameters: token-like counts up to MAX_TOKENS, every other size (widths,
# heads, experts, top_k, ...) up to MAX_KERNEL_DIM, so the C++ int64 shape products cannot overflow
# and the work stays finite.
MAX_KERNEL_DIM = 2 ** 24
_TOKEN_PARAMS = ("m", "tokens", "rows", "keys", "prefix")
# Families whose efficiency depends on the weight/cache dtype: fitted per dtype ("linear/fp8").
DTYPE_FAMILIES = ("linear", "experts_contiguous", "experts_masked", "mla_decode")


# Families whose GEMMs change micro-kernel with the rows that share each weight (on this CPU: BF16
# dot products below linear_fma_min_rows rows, widened FP32 FMAs from there): fitted per regime.
ROWS_FAMILIES = ("linear", "experts_contiguous", "experts_masked")


def gemm_split_rows() -> int:
    """The rows at which this build's CPU GEMMs change kernel (0: one kernel for every size)."""
    return int(_C.kernels.linear_fma_min_rows())


def _rows_per_weight(family, p) -> float:
    if family == "linear":
        return p["m"]
    return p["rows"] / max(p["active"], 1)


def efficiency_key(family: str, params: Mapping, split_rows: int | None = None) -> str:
    """The key of the efficiency a point is priced with: the family, plus /dtype where it matters,
    /variant for the MLA layers, and /rows<S or /rows>=S for GEMM families when the kernels change
    at S rows."""
    key = f"{family}/{params.get('dtype', 'bf16')}" if family in DTYPE_FAMILIES else family
    if family in ("mla_prefill", "mla_step"):
        key += f"/{params['variant']}"  # each variant's attention core is a different kernel
    split = gemm_split_rows() if split_rows is None else split_rows
    if split and family in ROWS_FAMILIES:
        key += f"/rows<{split}" if _rows_per_weight(family, params) < split else f"/rows>={split}"
    return key


class FittedEfficiency(KernelEfficiency):
    """A KernelEfficiency from the fit (dsperf.predict), with how to read it. roof: "memory" (the
    memory term is priced at mem_bw_gbps) or "cache" (at cache_bw_gbps: the family's data fit in
    the last-level cache and its calls ran faster than the memory roof allows). at_bound: the
    values the data pushed against an edge of the search, e.g. ("compute>=1", "overhead_us>=300"):
    the fit is then a clipped guess, and the calibration output and the report say so."""

    def __init__(self, compute=1.0, memory=1.0, overhead_us=0.0, overlap=True, roof="memory", at_bound=()):
        super().__init__(float(compute), float(memory), float(overhead_us), bool(overlap))
        if roof not in ("memory", "cache"):
            raise ValueError(f"roof must be 'memory' or 'cache', got {roof!r}")
        self.roof = roof
        self.at_bound = tuple(at_bound)

    def __repr__(self):
        return (f"FittedEfficiency(compute={self.compute:.4g}, memory={self.memory:.4g}, "
                f"overhead_us={self.overhead_us:.4g}, overlap={self.overlap}, roof={self.roof!r}, "
                f"at_bound={self.at_bound})")


def part_seconds(w: KernelWork, spec, eff: KernelEfficiency, cache_resident: bool = False) -> float:
    """kernel_seconds on the roof the efficiency was fitted on (the cache roof for a family fitted
    as cache-resident, whatever the sweep's setting)."""
    return KC.kernel_seconds(w, spec, eff, bool(cache_resident) or getattr(eff, "roof", "memory") == "cache")


def lookup_efficiency(efficiencies: Mapping[str, KernelEfficiency], family: str, params: Mapping) -> KernelEfficiency:
    """The fitted efficiency of a point: its full key, else its key without the rows regime, else
    the family's, else the ideal roofline (a GPU spec without calibration)."""
    key = efficiency_key(family, params)
    for k in (key, key.split("/rows")[0], family):
        if k in efficiencies:
            return efficiencies[k]
    return KernelEfficiency()


def _dtype(params) -> bool:
    dt = params.get("dtype", "bf16")
    if dt not in ("bf16", "fp8"):
        raise ValueError(f"dtype must be 'bf16' or 'fp8', got {dt!r}")
    return dt == "fp8"


def _mla_shape(p) -> "KC.MlaShape":
    return KC.MlaShape(dim=p.get("dim", 7168), heads=p["heads"], q_lora=p.get("q_lora", 1536),
                       kv_lora=p.get("kv_lora", 512), nope=p.get("nope", 128), rope=p.get("rope", 64),
                       v=p.get("v", 128))


def _variant(p) -> int:
    v = p.get("variant")
    if v not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {v!r}")
    return VARIANTS.index(v)


def _base_work(family: str, p: Mapping) -> KernelWork:
    if family == "linear":
        w = KC.linear_work(p["m"], p["n"], p["k"], _dtype(p))
        count = p.get("count", 1)  # the same GEMM once per head
        return KernelWork(w.flops * count, w.bytes * count, w.fp8) if count != 1 else w
    if family == "gate":
        return KC.gate_work(p["tokens"], p["dim"], p["experts"], p["top_k"])
    if family == "dispatch_combine":
        return KC.dispatch_combine_work(p["tokens"], p["top_k"], p["dim"])
    if family in ("experts_contiguous", "experts_masked"):
        return KC.experts_work(p["rows"], p["active"], p["dim"], p["inter"], _dtype(p))
    if family == "mla_decode":
        return KC.mla_decode_work(p["keys"], p["batch"], p["q_len"], p["heads"], p.get("kv_lora", 512),
                                  p.get("rope", 64), _dtype(p))
    if family in ("mla_prefill", "mla_step"):
        return KC.mla_attention_work(_variant(p), p["tokens"], p["prefix"], _mla_shape(p))
    raise ValueError(f"unknown kernel family {family!r}; known: {', '.join(FAMILIES)}")


def parts(family: str, params: Mapping) -> list[tuple[str, dict, KernelWork]]:
    """The (family, params, work) parts a point is priced as: itself for a base family, its
    component kernels for a composite one."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    missing = [k for k in FAMILIES.get(family, ()) if k not in params and k != "dtype"]
    if family in FAMILIES and missing:
        raise ValueError(f"{family} needs the parameter '{missing[0]}'")
    if not isinstance(family, str):
        raise TypeError(f"family must be a string, got {family!r}")
    p = {}
    for k, v in params.items():  # sizes are integers; lower bounds are checked where the work is counted
        if k in ("dtype", "variant"):
            p[k] = v
        else:
            v = number(f"{family}: parameter '{k}'", v, integer=True)
            # A negative size reaches the core, which names its exact lower bound ("k must be > 0");
            # only one beyond int64 is refused here.
            p[k] = number(f"{family}: {k}", v, integer=True, lo=-2 ** 62,
                          hi=MAX_TOKENS if k in _TOKEN_PARAMS else MAX_KERNEL_DIM)
    if family == "moe_layer":
        rows = p["tokens"] * p["top_k"]
        out = [("gate", dict(tokens=p["tokens"], dim=p["dim"], experts=p["experts"], top_k=p["top_k"])),
               ("dispatch_combine", dict(tokens=p["tokens"], top_k=p["top_k"], dim=p["dim"])),
               ("experts_contiguous", dict(rows=rows, active=p["active"], dim=p["dim"], inter=p["inter"],
                                           dtype=p.get("dtype", "bf16")))]
        if p["shared_inter"]:
            out.append(("experts_contiguous", dict(rows=p["tokens"], active=1 if p["tokens"] else 0, dim=p["dim"],
                                                   inter=p["shared_inter"], dtype=p.get("dtype", "bf16"))))
        return [(f, q, _base_work(f, q)) for f, q in out]
    if family == "decode_layer":
        mla = dict(variant=p["variant"], tokens=p["tokens"], prefix=p["prefix"], heads=p["heads"], dim=p["dim"])
        moe = {k: p[k] for k in COMPOSITE_FAMILIES["moe_layer"] if k in p}
        return parts("mla_step" if p["tokens"] == 1 else "mla_prefill", mla) + parts("moe_layer", moe)
    if family in ("mla_prefill", "mla_step"):
        # The layer's GEMMs are priced as GEMMs (the linear family's efficiencies); the family's own
        # efficiency covers the attention core, the norms and the cache traffic.
        gemms = [("linear", dict(m=g.m, n=g.n, k=g.k, dtype="bf16", count=g.count))
                 for g in KC.mla_gemms(_variant(p), p["tokens"], p["prefix"], _mla_shape(p))]
        return [(f, q, _base_work(f, q)) for f, q in gemms] + [(family, p, _base_work(family, p))]
    return [(family, p, _base_work(family, p))]


def work(family: str, params: Mapping) -> KernelWork:
    """Total FLOPs and bytes of one call."""
    total = KernelWork()
    for _, _, w in parts(family, params):
        total += w
    return total


def predict_ms(family: str, params: Mapping, device: DeviceLike = "H800",
               efficiencies: Mapping[str, KernelEfficiency] | None = None, cache_resident: bool = False) -> float:
    """Predicted milliseconds of one call: each part's roofline time at its family's efficiency
    (ideal where `efficiencies` has none), plus the device's call overhead once."""
    spec = load_device(device, "corrected")  # a DeviceSpec is copied and validated
    if efficiencies is None:
        efficiencies = {}
    if not isinstance(efficiencies, Mapping) or not all(isinstance(e, KernelEfficiency) for e in efficiencies.values()):
        raise TypeError("efficiencies must map keys to KernelEfficiency (efficiencies_from_dict builds them)")
    cache_resident = flag("cache_resident", cache_resident)
    total = spec.call_overhead_us * 1e-6
    for fam, p, w in parts(family, params):
        eff = lookup_efficiency(efficiencies, fam, p)
        total += part_seconds(w, spec, eff, cache_resident) - spec.call_overhead_us * 1e-6
    finite_results(f"predict_ms({family})", {"ms": total * 1e3})
    return total * 1e3


def efficiencies_from_dict(table: Mapping) -> dict[str, KernelEfficiency]:
    """The [efficiency] table of a device file ({key: {compute, memory, overhead_us, overlap, roof,
    at_bound}}) as objects."""
    if not isinstance(table, Mapping):
        raise ValueError(f"the efficiency table must be a table of efficiencies, got {table!r}")
    out = {}
    for key, v in table.items():
        try:
            if not isinstance(v, Mapping):
                raise TypeError(f"got {v!r}")
            out[key] = FittedEfficiency(number("compute", v["compute"], lo=0, hi=1e6, lo_open=True),
                                        number("memory", v["memory"], lo=0, hi=1e6, lo_open=True),
                                        number("overhead_us", v.get("overhead_us", 0.0), lo=0, hi=1e9),
                                        flag("overlap", v.get("overlap", True)), v.get("roof", "memory"),
                                        v.get("at_bound", ()))
            out[key].validate()
        except KeyError as e:
            raise ValueError(f"efficiency '{key}' is missing {e}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"efficiency '{key}' must have compute > 0, memory > 0, overhead_us >= 0 "
                             f"and roof 'memory' or 'cache': {e}") from None
    return out


def load_efficiencies(path) -> dict[str, KernelEfficiency]:
    """The fitted efficiencies of a calibrated device file (empty when it has none)."""
    from .hardware import _read_toml

    return efficiencies_from_dict(_read_toml(path).get("efficiency", {}))


EP_LAYOUTS = ("token", "expert", "masked")


def ep_exchange_ms(tokens: int, *, hidden: int = 7168, top_k: int = 8, experts: int = 256, ranks: int,
                   layout: str = "token", fp8: bool = True, link_gbps: float, latency_us: float,
                   local_gbps: float = 0.0, overhead_us: float = 0.0) -> dict:
    """The cost model's expert-parallel all-to-all term (dsperf.ep's dispatch + combine) per rank
    and call under uniform routing. layout: "token" (DeepEP's normal layout), "expert" (normal mode
    into the per-expert layout) or "masked" (low latency). Link bytes are priced at link_gbps (1e9
    bytes/s out of each rank while all send) plus latency_us per exchange; the rank's own copies
    around the exchange at local_gbps (0: left out, as on a GPU); overhead_us is a fixed cost per
    call beyond the latencies (host code, empty messages). Returns dispatch_bytes, combine_bytes,
    local_bytes, exchanges, link_ms, local_ms and ms (their sum with the latencies and the overhead)."""
    if layout not in EP_LAYOUTS:
        raise ValueError(f"layout must be one of {EP_LAYOUTS}, got {layout!r}")
    link_gbps = number("link_gbps", link_gbps, lo=0, hi=1e9, lo_open=True)
    latency_us, local_gbps, overhead_us = (number(name, v, lo=0, hi=1e9) for name, v in (
        ("latency_us", latency_us), ("local_gbps", local_gbps), ("overhead_us", overhead_us)))
    tokens = number("tokens", tokens, integer=True, lo=0, hi=MAX_TOKENS)
    hidden, top_k, experts, ranks = (number(name, v, integer=True, lo=1, hi=MAX_KERNEL_DIM) for name, v in (
        ("hidden", hidden), ("top_k", top_k), ("experts", experts), ("ranks", ranks)))
    ex = KC.ep_exchange(tokens, hidden, top_k, experts, ranks, getattr(KC.EpLayout, layout), flag("fp8", fp8))
    total = KC.ep_exchange_seconds(ex, float(link_gbps), float(latency_us), float(local_gbps)) * 1e3 + overhead_us / 1e3
    local = ex.local_bytes / (local_gbps * 1e6) if local_gbps > 0 else 0.0
    out = dict(dispatch_bytes=ex.dispatch_bytes, combine_bytes=ex.combine_bytes, local_bytes=ex.local_bytes,
               exchanges=ex.exchanges, link_ms=(ex.dispatch_bytes + ex.combine_bytes) / (link_gbps * 1e6),
               local_ms=local, ms=total)
    finite_results("ep_exchange_ms", out)
    return out
