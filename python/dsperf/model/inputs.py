"""Every number the model reads, with where it comes from, and the guard that none of them is a
published validation figure.

The model's inputs are: the device files (data/devices/*.toml, each numeric field with its
`sources` entry, checked by dsperf.model.devices.check_sources), the kernel tables
(data/efficiency/*.csv, each row with its source), the anchors of the transfer rule
(data/anchors.csv), the settings and assumed values of the validation points
(data/validation/points.csv, latency_points.csv), and the model's own constants, listed here in
INPUT_CONSTANTS with their source or an `assumed:` tag. `model_inputs()` gathers them all;
`guard()` says which of them equals a published figure, or (for a dimensionless input) the ratio of
two different published figures, at 4 significant digits (tests/test_input_guard.py).
"""
from __future__ import annotations

import inspect
import itertools
import math
import re
from pathlib import Path
from typing import Iterable, NamedTuple

from .. import _C
from . import bands, devices, grounded, table_files, validation, validation_latency
from .derive_table import read_anchors
from .input_exemptions import EXEMPT  # the matches looked into, each with why it stays

SM = _C.step_model
SV = _C.serving
ASSUMED = devices.ASSUMED
DIGITS = 4  # "equal" means equal when both are rounded to this many significant digits


class Constant(NamedTuple):
    value: float
    source: str            # where the value comes from, or 'assumed: <why>'
    declared: str          # where it is declared (file, and the name there)
    dimensionless: bool    # every value is read from where it is declared (the binding or the module)


def _simulate_defaults() -> dict:
    return {k: p.default for k, p in inspect.signature(_serving().simulate).parameters.items()
            if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}


def _serving():
    """The module dsperf.serving.simulate (the package exports its function under the same name)."""
    import importlib

    return importlib.import_module("dsperf.serving.simulate")


# The sources of the serving simulator's numeric defaults (dsperf.serving.simulate's arguments):
# docs/SERVING.md, "Assumed". A new numeric default without an entry fails the guard's test.
SIMULATE_DEFAULT_SOURCES = {
    "seed": "assumed: the random stream's seed (no figure: any seed gives the same statistics)",
    "cv": "assumed: gamma arrivals as bursty as Poisson (cv 1) unless asked",
    "input_len": "assumed: a 1K prompt for generated requests, a common benchmark length",
    "output_len": "assumed: 256 output tokens for generated requests",
    "range_ratio": "assumed: the neutral value (fixed lengths; the benchmarks' random dataset is a setting)",
    "recv_interval": "SGLang's default --scheduler-recv-interval (1: new requests received every step); a setting",
    "ep": "assumed: an API default layout (EP16, two 8-GPU nodes), not a deployment's",
    "attn_tp": "assumed: the neutral value (no attention TP)",
    "redundant_experts": "assumed: the neutral value (no redundant experts)",
    "replicas": "assumed: the neutral value (one instance)",
    "mtp": "assumed: the neutral value (no MTP)",
    "mtp_accepted": "assumed: the neutral value (no draft accepted)",
    "imbalance": "assumed: the neutral value (balanced routing)",
    "dense_tp": "assumed: the neutral value (no dense-layer TP)",
    "moe_tp": "assumed: the neutral value (no expert TP)",
    "prefill_ep": "assumed: an API default prefill layout (EP32, DeepSeek's prefill EP)",
    "prefill_attn_tp": "assumed: the neutral value (no attention TP)",
    "prefill_redundant_experts": "assumed: the neutral value (no redundant experts)",
    "prefill_replicas": "assumed: the neutral value (one prefill instance)",
    "prefill_max_num_tokens": "DeepSeek's profile: 16K prompt tokens per GPU per step (points.csv deepseek_profile_prefill)",
    "block_tokens": "the traces' block (512 tokens); assumed: the same granularity for KV paging",
    "sla_percentile": "assumed: goodput at the P90 of TTFT and TPOT, a common SLA percentile",
    "max_waiting": "assumed: overload guard, 10,000 requests waiting",
    "default_efficiency": "grounded.DEFAULT_EFFICIENCY (listed there)",
}


def _constants() -> dict[str, Constant]:
    S = _serving()
    hpp = "csrc/grounded/step_model.hpp"
    stypes = "csrc/serving/serving_types.hpp"
    out = {
        "step_model.decode_step_overhead_ms": Constant(
            SM.decode_step_overhead_ms,
            "assumed: scheduler, sampling and launch gaps per decode step; not measured (docs/VALIDATION.md)",
            f"{hpp}: kDecodeStepOverheadMs", False),
        "step_model.prefill_step_overhead_ms": Constant(
            SM.prefill_step_overhead_ms,
            "assumed: scheduler and launch gaps per prefill step; not measured (docs/VALIDATION.md)",
            f"{hpp}: kPrefillStepOverheadMs", False),
        # Not exposed by the binding (csrc/bindings/step_model.cpp): the declared value, checked
        # against the header by the test.
        "step_model.min_kernel_us": Constant(
            SM.min_kernel_us, "assumed: the floor of a call priced without a table row (one kernel launch)",
            f"{hpp}: kMinKernelUs", False),
        "step_model.graph_kernel_gap_us": Constant(
            SM.graph_kernel_gap_us,
            "measured: a compute kernel's boundary inside a CUDA graph, 0.36 us (a one-request DeepSeek-V3 step "
            "replayed from one graph on an H200 against its kernels alone: 0.29, 0.36 and 0.63 us in three runs, "
            "their median; dsperf "
            "measure-gpu --chain, data/devices/measured/chains/H200-trtllm_h200_min_latency*.md)",
            f"{hpp}: kGraphKernelGapUs", False),
        "step_model.memory_reserve": Constant(
            SM.memory_reserve, "assumed: 90% of device memory usable for weights and KV cache (docs/VALIDATION.md)",
            f"{hpp}: kMemoryReserve", True),
        "step_model.large_allreduce_link_share": Constant(
            SM.large_allreduce_link_share,
            "NCCL's effective NVLink bandwidth, 370 of 450 GB/s per direction (an NCCL maintainer, "
            "NVIDIA/nccl-tests issue #212, 2024-05-06): the rate of an all-reduce's bytes past the "
            "all-reduce table's largest message", f"{hpp}: kLargeAllReduceLinkShare", True),
        # NCCL's latency model for a small all-reduce over nodes (a TP group spanning nodes).
        **{f"step_model.{name}": Constant(
            getattr(SM, name),
            f"NVIDIA/nccl src/graph/tuning.cc at 5067397 (2026-06-11): {what}, the figure NCCL's tuner prices "
            "its algorithms with", f"{hpp}: {declared}", False)
           for name, what, declared in (
               ("nccl_tree_base_us", "the Tree algorithm's base latency with the LL protocol", "kNcclTreeBaseUs"),
               ("nccl_tree_nvlink_hop_us", "the Tree algorithm's NVLink hardware latency (LL)", "kNcclTreeNvlinkHopUs"),
               ("nccl_tree_net_hop_us", "the Tree algorithm's network hardware latency (LL)", "kNcclTreeNetHopUs"))},
        "grounded.DEFAULT_EFFICIENCY": Constant(
            grounded.DEFAULT_EFFICIENCY,
            "assumed: a flat share of the datasheet roofline for a compute call without a table row; "
            "not fitted to any deployment figure",
            "python/dsperf/model/table_files.py: DEFAULT_EFFICIENCY", True),
        "table_files._DEEPEP_HIDDEN": Constant(
            table_files._DEEPEP_HIDDEN, "DeepEP's benchmark: hidden 7168 (DeepSeek-V3), the shape its network rows were timed at",
            "python/dsperf/model/table_files.py: _DEEPEP_HIDDEN", False),
        "table_files._DEEPEP_TOP_K": Constant(
            table_files._DEEPEP_TOP_K, "DeepEP's benchmark: top-8 routing, the shape its network rows were timed at",
            "python/dsperf/model/table_files.py: _DEEPEP_TOP_K", False),
        "bands.LATENCY_BATCH": Constant(
            bands.LATENCY_BATCH, "assumed: requests per GPU below which a decode step is called latency-bound",
            "python/dsperf/model/bands.py: LATENCY_BATCH", False),
        "bands.BAND_QUANTILE": Constant(
            bands.BAND_QUANTILE, "assumed: the share of points in a regime a band is meant to hold",
            "python/dsperf/model/bands.py: BAND_QUANTILE", True),
        "bands.MIN_POINTS": Constant(
            bands.MIN_POINTS, "assumed: fewer check points than this in a regime fall back to a coarser regime",
            "python/dsperf/model/bands.py: MIN_POINTS", False),
        "serving.DEFAULT_DURATION_S": Constant(
            S.DEFAULT_DURATION_S, "assumed: 60 s of arrivals unless asked",
            "python/dsperf/serving/simulate.py: DEFAULT_DURATION_S", False),
        "serving.DEFAULT_MAX_NUM_TOKENS": Constant(
            S.DEFAULT_MAX_NUM_TOKENS, "assumed: a common chunked-prefill size, not read from a deployment (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_MAX_NUM_TOKENS", False),
        "serving.DEFAULT_PREFILL_TOKENS": Constant(
            S.DEFAULT_PREFILL_TOKENS, "DeepSeek's profile: 16K prompt tokens per GPU per step (points.csv deepseek_profile_prefill)",
            "python/dsperf/serving/simulate.py: DEFAULT_PREFILL_TOKENS", False),
        "serving.DEFAULT_MAX_WAITING": Constant(
            S.DEFAULT_MAX_WAITING, "assumed: overload guard (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_MAX_WAITING", False),
        "serving.DEFAULT_DRAIN_S": Constant(
            S.DEFAULT_DRAIN_S, "assumed: overload guard, simulated time after the last arrival (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_DRAIN_S", False),
        "serving.max_batch_cap": Constant(
            S.MAX_BATCH_CAP, "assumed: requests per GPU when max_batch is not given, beyond what a KV cache holds "
            "(docs/SERVING.md)", "python/dsperf/serving/simulate.py: MAX_BATCH_CAP", False),
        "serving.ctx_ratio": Constant(
            SV.decode_context_ratio, "assumed: a numerical grid, decode contexts 2% apart (linear interpolation between them)",
            f"{stypes}: ServeConfig::ctx_ratio", True),
        "serving.prefill_ratio": Constant(
            SV.prefill_bucket_ratio, "assumed: a numerical grid, prefill chunks in buckets +-2.2% wide",
            f"{stypes}: ServeConfig::prefill_ratio", True),
        "serving.prefix_slack_min": Constant(
            SV.prefix_slack_min, "assumed: prefix-aware routing's slack of at least 2 requests (docs/SERVING.md)",
            "csrc/serving/router.hpp: kPrefixSlackMin", False),
        "serving.prefix_slack_divisor": Constant(
            SV.prefix_slack_divisor, "assumed: prefix-aware routing's slack of a quarter of the least load (docs/SERVING.md)",
            "csrc/serving/router.hpp: kPrefixSlackDivisor", False),
    }
    for k, v in _simulate_defaults().items():
        out[f"serving.simulate({k}=)"] = Constant(
            v, SIMULATE_DEFAULT_SOURCES.get(k, ""), "python/dsperf/serving/simulate.py: simulate()",
            k in ("mtp_accepted", "imbalance", "default_efficiency", "cv", "range_ratio"))
    return out


INPUT_CONSTANTS: dict[str, Constant] = _constants()


class Input(NamedTuple):
    where: str
    value: float
    dimensionless: bool
    # Computed from other inputs rather than written down (a table row's efficiency: its latency
    # over its GPU's datasheet roofline); see computed_inputs_at_chance().
    computed: bool = False


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# Fields of a device file that are dimensionless (a ratio could pass as one of them).
DIMENSIONLESS_DEVICE_FIELDS = ("compute_derate", "discount", "sustained_clock_ratio")


def device_inputs(device) -> list[Input]:
    """The numbers of one device file (a shipped name or a .toml path), after the loader has
    accepted it in both modes (which checks every number's source)."""
    name = str(device)
    for mode in ("corrected", "as_published"):
        devices.load_device(device, mode)
    data = devices._catalogue().get(name.lower())
    if data is None:
        data = devices._read_toml(name)
    label = Path(name).name if name.endswith(".toml") else f"devices/{data.get('name', name)}.toml"
    return [Input(f"{label} {k}", float(v), k.rsplit(".", 1)[-1] in DIMENSIONLESS_DEVICE_FIELDS)
            for k, v in devices.numeric_fields(data).items()]


def _table_files():
    """The shipped kernel tables: data/efficiency/*.csv, and the GPUs' own tables that measure-gpu
    timed (data/devices/measured/*.csv), each as (label folder, file)."""
    for folder, label in ((grounded.tables_dir(), "efficiency"), (grounded.measured_tables_dir(), "measured")):
        for f in sorted(folder.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".csv"):
                yield label, f


def table_inputs() -> list[Input]:
    """Every numeric cell of the kernel tables, and the efficiency each compute row implies on the
    GPU that timed it (its datasheet roofline time over its latency: dimensionless)."""
    out = []
    specs = {}
    for label, f in _table_files():
        table = f.name[:-4]
        for row in grounded.read_table_rows(f):
            where = f"{label}/{f.name} {grounded.row_label(row)}"
            out += [Input(f"{where} {k}", v, False) for k, v in row.items() if _is_number(v)]
            if SM.is_comm_family(row["family"]) or "latency_us" not in row:
                continue
            on = row.get("measured_on", table)
            spec = specs.setdefault(on, devices.load_device(on, "corrected"))
            work = SM.table_work(row["family"], grounded.row_shape(row))
            eff = SM.datasheet_roofline_s(work, spec) / (row["latency_us"] * 1e-6)
            out.append(Input(f"{where} efficiency on {on}", eff, True, True))
    return out


def anchor_inputs() -> list[Input]:
    """The anchors' published kernel figures, and each as a fraction of its device's peak (the
    factor the transfer rule applies: dimensionless)."""
    out = []
    for a in read_anchors():
        where = f"anchors.csv {a['table']} {' '.join(a['families'])}"
        peak = getattr(devices.load_device(a["table"], "corrected"), a["peak_field"])
        out += [Input(f"{where} published", a["published"], False),
                Input(f"{where} published / {a['peak_field']}", a["published"] / peak, True)]
    return out


# Settings of a validation point that are not inputs: its figure, and its bookkeeping.
_NOT_INPUTS = ("published",)
DIMENSIONLESS_SETTINGS = ("mtp_accepted", "imbalance")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:\.\d+)?")


def _point_inputs(points, file) -> list[Input]:
    out = []
    for p in points:
        for k, v in p.items():
            if k not in _NOT_INPUTS and _is_number(v):
                out.append(Input(f"{file} {p['point']} {k}", float(v), k in DIMENSIONLESS_SETTINGS))
        for m in _NUMBER.finditer(p.get("assumed", "")):
            out.append(Input(f"{file} {p['point']} assumed text", float(m.group().replace(",", "")), False))
    return out


def point_inputs() -> list[Input]:
    """The settings the validation points are predicted with (batch, context, layout, MTP
    acceptance, imbalance, ...) and the numbers in their `assumed` texts."""
    return (_point_inputs(validation.load_points(), "points.csv")
            + _point_inputs(validation_latency.load_latency_points(), "latency_points.csv"))


def constant_inputs() -> list[Input]:
    return [Input(f"constant {k}", float(c.value), c.dimensionless) for k, c in INPUT_CONSTANTS.items()]


def model_inputs(device_files: Iterable = None) -> list[Input]:
    """Every number the model reads: the device files (all shipped devices unless given), the
    kernel tables, the anchors, the validation points' settings and the constants."""
    files = devices.list_devices() if device_files is None else list(device_files)
    return (list(itertools.chain.from_iterable(device_inputs(d) for d in files))
            + table_inputs() + anchor_inputs() + point_inputs() + constant_inputs())


def exemption(m: "Match") -> str | None:
    """Why a match stays (EXEMPT), or None."""
    return EXEMPT.get((m.where, m.figure.split(" = ")[0]))


class Figure(NamedTuple):
    name: str      # "<file> <point>"
    value: float
    unit: str      # what it counts, from its metric's declaration (tokens/s or ms)


def published_figures() -> list[Figure]:
    """Every published validation figure, peak and latency sections, with its unit."""
    return ([Figure(f"points.csv {p['point']}", p["published"], validation.PEAK_METRICS[p["metric"]].unit)
             for p in validation.load_points()]
            + [Figure(f"latency_points.csv {p['point']}", p["published"],
                      validation_latency.METRIC_READS[p["metric"]].unit)
               for p in validation_latency.load_latency_points()])


def sig(v: float, digits: int = DIGITS) -> float:
    """v rounded to `digits` significant digits."""
    return float(f"{v:.{digits - 1}e}")


class Match(NamedTuple):
    where: str
    value: float
    figure: str   # the published figure, or the ratio of two, it equals


def guard(inputs: Iterable[Input], figures: list[Figure] = None) -> list[Match]:
    """The inputs equal (at DIGITS significant digits) to a published figure, and the dimensionless
    inputs equal to a ratio of two different published figures in the same unit; empty when none is.

    Only like figures make a ratio an input could have been taken from (a speed-up, a share of a
    peak): a TTFT in ms over a throughput in tokens/s is no fraction of anything. Across units the
    ~30,000 ratios of the figures fill about a quarter of the 4-digit values in each decade, so every
    batch of new figures met some dimensionless input by chance alone."""
    figures = published_figures() if figures is None else figures
    by_value = {}
    for f in figures:
        by_value.setdefault(sig(f.value), []).append(f"{f.name} = {f.value:g}")
    ratios = {}
    for fa, fb in itertools.permutations(figures, 2):
        if fa.unit == fb.unit and sig(fa.value) != sig(fb.value):
            ratios.setdefault(sig(fa.value / fb.value), []).append(
                f"{fa.name} / {fb.name} = {fa.value:g} / {fb.value:g}")
    out = []
    for x in inputs:
        if x.value == 0:
            continue
        key = sig(abs(x.value))
        for name in by_value.get(key, ()):
            out.append(Match(x.where, x.value, name))
        # 1 is the neutral value of a dimensionless input (a clock at its rating, balanced routing):
        # any two published figures within 0.05% of each other give it, which says nothing of where
        # the input came from, so it is held to the published figures alone.
        if x.dimensionless and key != 1:
            for name in ratios.get(key, ()):
                out.append(Match(x.where, x.value, name))
    return out
