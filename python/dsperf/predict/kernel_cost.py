"""Predicted latency of single kernel calls: the work each kernel family does (C++,
csrc/grounded/kernel_cost.cpp) priced on a device's roofline with per-family efficiencies.

A kernel point is a family name and its parameters, e.g.
``("experts_masked", dict(rows=64, active=8, dim=7168, inter=2048, dtype="bf16"))``; each family
declares its parameters and work in dsperf.ops. Base families are priced directly; composite ones
(``moe_layer``, ``decode_layer``) are the sum of their parts,
each part at its own family's efficiency, with the call overhead paid once: they are predicted,
never fitted, so they test whether the model composes.

The same functions price a GPU spec (``predict_ms(..., device="H800")``, ideal efficiencies unless
given) and this CPU (the spec `dsperf calibrate` writes, whose [efficiency] table holds the fitted
factors).
"""
from __future__ import annotations

from typing import Mapping

from .. import _C, ops
from .._checks import MAX_TOKENS, finite_results, flag, number
from ..model.devices import DeviceLike, load_device
from ..kernels import MLA_VARIANTS

KC = _C.kernel_cost
KernelWork = KC.KernelWork
KernelEfficiency = KC.KernelEfficiency
VARIANTS = MLA_VARIANTS

# Views of the registry (dsperf.ops): family name -> the parameters a point gives.
BASE_FAMILIES = {n: f.params for n, f in ops.base().items()}
COMPOSITE_FAMILIES = {n: f.params for n, f in ops.composite().items()}
FAMILIES = {n: f.params for n, f in ops.FAMILIES.items()}
# Families whose efficiency depends on the weight/cache dtype ("linear/fp8"), and those whose GEMMs
# change micro-kernel with the rows that share each weight (the stream kernel below
# linear_prefill_min_rows rows, the prefill kernel from there): fitted per regime.
DTYPE_FAMILIES = tuple(n for n, f in ops.FAMILIES.items() if f.key_by_dtype)
ROWS_FAMILIES = tuple(n for n, f in ops.FAMILIES.items() if f.rows_per_weight is not None)
# Bounds on the integer parameters: token-like counts up to MAX_TOKENS, every other size (widths,
# heads, experts, top_k, ...) up to MAX_KERNEL_DIM, so the C++ int64 shape products cannot overflow
# and the work stays finite.
MAX_KERNEL_DIM = 2 ** 24


def gemm_split_rows() -> int:
    """The rows at which this build's CPU GEMMs change kernel (0: one kernel for every size)."""
    return int(_C.kernels.linear_prefill_min_rows())


def efficiency_key(family: str, params: Mapping, split_rows: int | None = None) -> str:
    """The key of the efficiency a point is priced with: the family, plus /dtype where it matters,
    /variant for the MLA layers, and /rows<S or /rows>=S for GEMM families when the kernels change
    at S rows."""
    fam = ops.get(family)
    key = f"{family}/{params.get('dtype', 'bf16')}" if fam.key_by_dtype else family
    if fam.key_by_variant:
        key += f"/{params['variant']}"  # each variant's attention core is a different kernel
    split = gemm_split_rows() if split_rows is None else split_rows
    if split and fam.rows_per_weight is not None:
        key += f"/rows<{split}" if fam.rows_per_weight(params) < split else f"/rows>={split}"
    return key


class FittedEfficiency(KernelEfficiency):
    """A KernelEfficiency from the fit (dsperf.predict), with how to read it. roof: "memory" (the
    memory term is priced at mem_bw_gbps) or "cache" (at cache_bw_gbps: the family's data fit in
    the last-level cache and its calls ran faster than the memory roof allows). at_bound: the
    values the data pushed against an edge of the search, e.g. ("compute>=1", "overhead_us>=3000"):
    the fit is then a clipped guess, and the calibration output and the report say so."""

    def __init__(self, compute=1.0, memory=1.0, overhead_us=0.0, serial=0.0, roof="memory", at_bound=()):
        super().__init__(float(compute), float(memory), float(overhead_us), float(serial))
        if roof not in ("memory", "cache"):
            raise ValueError(f"roof must be 'memory' or 'cache', got {roof!r}")
        self.roof = roof
        self.at_bound = tuple(at_bound)

    def __repr__(self):
        return (f"FittedEfficiency(compute={self.compute:.4g}, memory={self.memory:.4g}, "
                f"overhead_us={self.overhead_us:.4g}, serial={self.serial:.4g}, roof={self.roof!r}, "
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


def _checked_params(fam, params: Mapping) -> dict:
    """A point's parameters, every size an integer within its bound; the C++ core names the exact
    lower bound of each ("k must be > 0"), so only values beyond int64 are refused here."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    missing = [k for k in fam.params if k not in params and k != "dtype"]
    if missing:
        raise ValueError(f"{fam.name} needs the parameter '{missing[0]}'")
    p = {}
    for k, v in params.items():
        if k in ("dtype", "variant"):
            p[k] = v
        else:
            v = number(f"{fam.name}: parameter '{k}'", v, integer=True)
            p[k] = number(f"{fam.name}: {k}", v, integer=True, lo=-2 ** 62,
                          hi=MAX_TOKENS if k in fam.token_params else MAX_KERNEL_DIM)
    return p


def parts(family: str, params: Mapping) -> list[tuple[str, dict, KernelWork]]:
    """The (family, params, work) parts a point is priced as: itself for a base family (after the
    GEMM parts of an MLA layer), its component kernels for a composite one."""
    fam = ops.get(family)
    p = _checked_params(fam, params)
    if fam.composite:
        return [part for f, q in fam.parts(p) for part in parts(f, q)]
    extra = [(f, q, ops.get(f).work(q)) for f, q in fam.parts(p)] if fam.parts else []
    return extra + [(family, p, fam.work(p))]


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
    """The [efficiency] table of a device file ({key: {compute, memory, overhead_us, serial, roof,
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
                                        number("serial", v.get("serial", 0.0), lo=0, hi=1), v.get("roof", "memory"),
                                        v.get("at_bound", ()))
            out[key].validate()
        except KeyError as e:
            raise ValueError(f"efficiency '{key}' is missing {e}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"efficiency '{key}' must have compute > 0, memory > 0, overhead_us >= 0, serial "
                             f"in [0, 1] and roof 'memory' or 'cache': {e}") from None
    return out


def load_efficiencies(path) -> dict[str, KernelEfficiency]:
    """The fitted efficiencies of a calibrated device file (empty when it has none)."""
    from ..model.devices import _read_toml

    return efficiencies_from_dict(_read_toml(path).get("efficiency", {}))


EP_LAYOUTS = tuple(_C.kernel_cost.EpLayout.__members__)   # named once in C++ (csrc/ep/ep_layout.hpp)
EP_TRANSPORTS = ("alltoallv", "window")


def ep_exchange_ms(tokens: int, *, hidden: int = 7168, top_k: int = 8, experts: int = 256, ranks: int,
                   layout: str = "token", fp8: bool = True, link_gbps: float, latency_us: float,
                   local_gbps: float = 0.0, overhead_us: float = 0.0, transport: str = "alltoallv") -> dict:
    """The cost model's expert-parallel exchange term (dsperf.ep's dispatch + combine) per rank
    and call under uniform routing. layout: "token" (DeepEP's normal layout), "expert" (normal mode
    into the per-expert layout) or "masked" (low latency). transport: "alltoallv" (MPI_Alltoallv:
    link bytes, with packing around them) or "window" (shared-memory windows on one node: no link
    bytes, each record or row copied once into its destination, each row read once by combine).
    Link bytes are priced at link_gbps (1e9 bytes/s out of each rank while all send) plus
    latency_us per exchange (sync, for windows); the rank's own copies at local_gbps (0: left out,
    as on a GPU); overhead_us is a fixed cost per call beyond the latencies (host code, empty
    messages). Returns dispatch_bytes, combine_bytes, local_bytes, exchanges, link_ms, local_ms and
    ms (their sum with the latencies and the overhead)."""
    if layout not in EP_LAYOUTS:
        raise ValueError(f"layout must be one of {EP_LAYOUTS}, got {layout!r}")
    if transport not in EP_TRANSPORTS:
        raise ValueError(f"transport must be one of {EP_TRANSPORTS}, got {transport!r}")
    link_gbps = number("link_gbps", link_gbps, lo=0, hi=1e9, lo_open=True)
    latency_us, local_gbps, overhead_us = (number(name, v, lo=0, hi=1e9) for name, v in (
        ("latency_us", latency_us), ("local_gbps", local_gbps), ("overhead_us", overhead_us)))
    tokens = number("tokens", tokens, integer=True, lo=0, hi=MAX_TOKENS)
    hidden, top_k, experts, ranks = (number(name, v, integer=True, lo=1, hi=MAX_KERNEL_DIM) for name, v in (
        ("hidden", hidden), ("top_k", top_k), ("experts", experts), ("ranks", ranks)))
    exchange = KC.ep_window_exchange if transport == "window" else KC.ep_exchange
    ex = exchange(tokens, hidden, top_k, experts, ranks, getattr(KC.EpLayout, layout), flag("fp8", fp8))
    total = KC.ep_exchange_seconds(ex, float(link_gbps), float(latency_us), float(local_gbps)) * 1e3 + overhead_us / 1e3
    local = ex.local_bytes / (local_gbps * 1e6) if local_gbps > 0 else 0.0
    out = dict(dispatch_bytes=ex.dispatch_bytes, combine_bytes=ex.combine_bytes, local_bytes=ex.local_bytes,
               exchanges=ex.exchanges, link_ms=(ex.dispatch_bytes + ex.combine_bytes) / (link_gbps * 1e6),
               local_ms=local, ms=total)
    finite_results("ep_exchange_ms", out)
    return out
