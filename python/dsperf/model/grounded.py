"""The grounded model: a prefill or decode step priced as the kernel calls a DeepSeek-style serving
system runs, each at the efficiency a published kernel benchmark measured at that shape.

The C++ core (csrc/grounded/step_model.cpp) lists the calls of one layer (every MLA GEMM, the
attention core, norms, gate, dispatch, shared and routed experts, combine, dense MLP, LM head, MTP
drafts), prices each from its FLOPs and bytes (the kernel cost model's work functions) on the
device's datasheet roofline (its FLOPs at the device's sustained_clock_ratio of the clock the
tables ran at) divided by the efficiency read from data/efficiency/<table>.csv, and schedules them on a compute and a communication stream (two-batch overlap, single-batch overlap
or none). Where a family has no table row, the roofline at a default efficiency prices it and the
result counts the call as such (``calls_default``).

    >>> from dsperf import grounded
    >>> grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4989, ep=128)["tokens_per_gpu_s"]
"""
from __future__ import annotations

import csv
import functools
import math
import os
from pathlib import Path
from importlib import resources
from typing import Mapping, NamedTuple

import numpy as np
import pandas as pd

from .. import _C
from .._checks import MAX_COUNT, MAX_TOKENS, flag, finite_results, number, read_small_file
from .devices import (DeviceLike, DeviceSpec, device_metadata, kernel_table_name,  # noqa: F401
                      list_devices, load_device, tables_dir)
from .configs import load_model
from . import bands

SM = _C.step_model
FAMILIES = tuple(SM.family_names())
OVERLAPS = tuple(SM.OVERLAPS)  # the overlap schedules, named once in C++ (step_model.hpp)


class WeightFormat(NamedTuple):
    """Weights as stored: FP8 block-scaled outside the experts (else BF16), and NVFP4 routed and
    shared experts. By name (WEIGHT_FORMATS): "fp8", DeepSeek's FP8 with 128x128 block scales;
    "bf16" (BF16 GEMMs priced from the Hopper table's cuBLAS rows, timed on an H200, and the
    Blackwell tables derived from them); "fp4", NVFP4 experts on FP4 tensor cores with FP8 weights
    elsewhere (TensorRT-LLM's throughput recipe on Blackwell: FP8 attention); "fp4_bf16", NVFP4
    experts with BF16 weights elsewhere, as nvidia/DeepSeek-R1-FP4 stores them (its attention layers
    are left out of quantization, the FP4-v2 model card says) and TensorRT-LLM's min-latency recipe
    runs them (its B200 min-latency blog: "64x Attention Modules: bf16")."""

    weights_fp8: bool  # attention, dense MLP, LM head: FP8 block-scaled (else BF16)
    experts_fp4: bool  # routed and shared experts: NVFP4


WEIGHT_FORMATS = {"fp8": WeightFormat(True, False), "bf16": WeightFormat(False, False),
                  "fp4": WeightFormat(True, True), "fp4_bf16": WeightFormat(False, True)}
WEIGHT_DTYPES = tuple(WEIGHT_FORMATS)


def weight_dtype_of(weights_fp8: bool, experts_fp4: bool) -> str:
    """The WEIGHT_FORMATS name of a pair of flags (an explorer row's weights_fp8 and experts_fp4)."""
    flags = WeightFormat(bool(weights_fp8), bool(experts_fp4))
    return next(name for name, fmt in WEIGHT_FORMATS.items() if fmt == flags)


# Columns of a table file that carry a shape (blank where a family does not use them).
SHAPE_COLUMNS = ("m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "bytes", "ep", "tp")
DEFAULT_EFFICIENCY = 0.6
TABLE_BASES = ("measured", "derived")


def _tables_dir():
    return tables_dir()


def measured_tables_dir():
    """Where the project ships GPUs' own tables that `dsperf measure-gpu` timed, each beside the
    device file naming it (<GPU>.csv and <GPU>-measured.toml)."""
    return resources.files("dsperf") / "data" / "devices" / "measured"


# Bounds on a table file's figures. Latencies and bandwidths: the C++ tables' (kernel_table.hpp),
# values a real kernel or link could have measured. Shapes: token-like axes as the model's token
# counts (dsperf._checks.MAX_TOKENS), bytes to 2**50, the other sizes to 2**24, EP / TP sizes as
# counts; products of them stay finite.
_FIGURE_BOUNDS = {"latency_us": SM.TABLE_BOUNDS["latency_us"], "gbps": SM.TABLE_BOUNDS["gbps"]}
_SHAPE_MAX = {**{c: MAX_TOKENS for c in ("m", "batch", "kv_len", "tokens")}, "bytes": 2 ** 50,
              **{c: 2 ** 24 for c in ("n", "k", "groups", "heads", "q_len")}, "ep": MAX_COUNT, "tp": MAX_COUNT}
_MAX_TABLE_BYTES = 64 << 20


def _number(value: str, where: str, field: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{where}: field '{field}' must be a number, got {value!r}") from None
    lo, hi = _FIGURE_BOUNDS.get(field, (0, _SHAPE_MAX.get(field)))
    # Shapes are > 0; figures lie within the bounds a real measurement could have.
    return number(f"{where}: field '{field}'", x, lo=lo, hi=hi, lo_open=field not in _FIGURE_BOUNDS)


def read_table_rows(path) -> list[dict]:
    """The rows of an efficiency table file (comment lines start with '#'), checked: a known
    family, a source, a latency_us or gbps within the bounds a real kernel could have, the shape
    fields the family needs, and no two rows at one shape that disagree. Every error names the
    file, the row (and its line) and the field. A UTF-8 byte-order mark is skipped."""
    text = read_small_file(path, _MAX_TABLE_BYTES, "kernel table").removeprefix("\ufeff")
    numbered = [(n, line) for n, line in enumerate(text.splitlines(keepends=True), start=1)
                if not line.lstrip().startswith("#")]
    reader = csv.DictReader([line for _, line in numbered])
    need = {"family", "source"}
    if reader.fieldnames is None or not need <= {f.strip() for f in reader.fieldnames}:
        missing = sorted(need - {f.strip() for f in reader.fieldnames or ()})
        raise ValueError(f"{path}: missing column '{missing[0]}'")
    rows, seen, shipped = [], {}, None
    for i, raw in enumerate(reader, start=1):
        raw = {(k or "").strip(): v for k, v in raw.items()}
        where = f"{path}, row {i} (line {numbered[reader.line_num - 1][0]})"
        fam = (raw.get("family") or "").strip()
        if fam not in FAMILIES:
            raise ValueError(f"{where}: field 'family': unknown kernel family {fam!r}; known: {', '.join(FAMILIES)}")
        if not (raw.get("source") or "").strip():
            raise ValueError(f"{where}: field 'source' must name where the figure was published")
        row = {"family": fam, "source": raw["source"].strip()}
        # basis: measured (the default) or derived (a Hopper row moved by a published figure of this
        # device, model/derive_table.py), which must name that second source too.
        basis = (raw.get("basis") or "measured").strip()
        if basis not in TABLE_BASES:
            raise ValueError(f"{where}: field 'basis' must be one of {', '.join(TABLE_BASES)}, got {basis!r}")
        row["basis"] = basis
        if basis == "derived":
            if not (raw.get("source2") or "").strip():
                raise ValueError(f"{where}: field 'source2': a derived row names both sources (the row it "
                                 "was moved from, and the published figure that moved it)")
            row["source2"] = raw["source2"].strip()
        # measured_on: the GPU that timed the row, where it is not the table's own (a sibling part of
        # the same die, e.g. MI325X rows in the MI300X table): its latency is read against that roofline.
        measured_on = (raw.get("measured_on") or "").strip()
        if measured_on:
            shipped = shipped or list_devices()  # read once per table, on its first measured_on
            if measured_on not in shipped:
                raise ValueError(f"{where}: field 'measured_on' must name a shipped device "
                                 f"({', '.join(shipped)}), got {measured_on!r}")
            row["measured_on"] = measured_on
        dtype = (raw.get("dtype") or "").strip()
        if dtype:
            if dtype not in ("fp8", "bf16"):
                raise ValueError(f"{where}: field 'dtype' must be fp8 or bf16, got {dtype!r}")
            row["dtype"] = dtype
        # math: an attention row's products, fp8 if timed on the FP8 tensor cores (its roofline's), else BF16.
        math_dtype = (raw.get("math") or "").strip()
        if math_dtype not in ("", "fp8", "bf16") or (math_dtype and not SM.is_attention_family(fam)):
            attention = ", ".join(f for f in FAMILIES if SM.is_attention_family(f))
            raise ValueError(f"{where}: field 'math' must be fp8 or bf16 on an attention row ({attention}), "
                             f"got {math_dtype!r} on {fam}")
        if math_dtype == "fp8":
            row["math"] = "fp8"
        for col in SHAPE_COLUMNS + ("latency_us", "gbps", "tokens", "link_gbps"):
            if (raw.get(col) or "").strip():
                row[col] = _number(raw[col], where, col)
        comm = SM.is_comm_family(fam)
        if fam == "allreduce" and "gbps" not in row and not ("latency_us" in row and "bytes" in row):
            raise ValueError(f"{where}: field 'gbps': an allreduce row needs gbps, or latency_us and bytes "
                             "(the message size)")
        if comm and fam != "allreduce" and "gbps" not in row and not ("latency_us" in row and "tokens" in row):
            raise ValueError(f"{where}: field 'gbps': a {fam} row needs gbps, or latency_us and tokens")
        if not comm and "latency_us" not in row:
            raise ValueError(f"{where}: field 'latency_us' is required for {fam}")
        for col in SM.table_row_fields(fam):
            if col not in row:
                raise ValueError(f"{where}: field '{col}' is required for {fam}")
        # Two rows at one shape must agree: the lookup would keep both and price with either.
        key = row_label(row)
        figure = tuple(row.get(c) for c in ("latency_us", "gbps", "tokens"))
        if key in seen and seen[key][1] != figure:
            j = next(j for j, (a, b) in enumerate(zip(seen[key][1], figure)) if a != b)
            field = ("latency_us", "gbps", "tokens")[j]
            raise ValueError(f"{where}: field '{field}' is {figure[j]}, but {seen[key][0]} gives "
                             f"{seen[key][1][j]} at the same shape; keep one of the two rows")
        seen.setdefault(key, (f"row {i} (line {numbered[reader.line_num - 1][0]})", figure))
        rows.append(row)
    return rows


def row_label(row: Mapping) -> str:
    """A table row's identity: its family, dtype and shape (no two rows of a table share one, as
    read_table_rows checks), e.g. 'gemm_fp8 fp8 m=512 n=4096 k=7168'. Names a row where a row
    number would change with every edit of the file."""
    shape = " ".join(f"{c}={row[c]:.15g}" for c in SHAPE_COLUMNS if c in row)
    math_note = " math=fp8" if row.get("math") == "fp8" else ""
    return f"{row['family']} {row.get('dtype', 'fp8')} {shape}{math_note}".strip()


def _shape(row: Mapping) -> "SM.KernelShape":
    kw = {k: float(row[k]) for k in SHAPE_COLUMNS if k in row}
    kw["fp8"] = row.get("dtype", "fp8") == "fp8"
    kw["fp8_math"] = row.get("math") == "fp8"
    if row["family"] == "mla_prefill":
        kw.setdefault("kv_len", kw.get("m", 0.0))
    return SM.KernelShape(**kw)


# The model dimensions the network rows were measured with (DeepEP: hidden 7168, top-8, FP8 dispatch
# with one FP32 scale per 128 values, BF16 combine).
_DEEPEP_HIDDEN, _DEEPEP_TOP_K = 7168, 8


def _row_gbps(row: Mapping) -> float:
    if "gbps" in row:
        return row["gbps"]
    payload = _DEEPEP_HIDDEN + _DEEPEP_HIDDEN / 128 * 4 if row["family"].startswith("dispatch") else 2 * _DEEPEP_HIDDEN
    return row["tokens"] * _DEEPEP_TOP_K * payload / (row["latency_us"] * 1e-6) / 1e9


# The links the network table's dispatch/combine rows were timed over, as step_model.cpp prices
# them (C++ kTableNvlinkGbps: the normal kernels inside an NVLink domain are scaled by the device's
# nvlink_gbps over H800 NVLink per direction; kTableNicGbps: the low-latency kernels by the link they
# cross over a 400 Gb/s NIC; network.csv's header).
NETWORK_TABLE_LINK_GBPS = {"dispatch_normal": SM.TABLE_NVLINK_GBPS, "combine_normal": SM.TABLE_NVLINK_GBPS,
                           "dispatch_ll": SM.TABLE_NIC_GBPS, "combine_ll": SM.TABLE_NIC_GBPS}


def _device_comm_rows(path, rows) -> list[dict]:
    """A device table's own dispatch/combine rows (timed on that device's scale-up link, e.g. DeepEP's
    Ascend port inside a CloudMatrix384 supernode): normal or low-latency kernels, each with
    link_gbps, the link of one rank in that measurement, so that its figure is read as a fraction of
    that link (as a latency row is read against the roofline of the GPU that timed it). With
    rows of its own a device's calls inside its scale-up domain read them at their own EP, and its
    decode runs the low-latency kernels there where it has their rows; calls between domains read
    the network table (KernelTables.add_domain_bandwidth)."""
    out = []
    for i, row in enumerate(rows, start=1):
        fam = row["family"]
        if not SM.is_comm_family(fam):
            continue
        if fam not in NETWORK_TABLE_LINK_GBPS:
            raise ValueError(f"{path}, row {i}: field 'family': {fam} rows belong in the network table "
                             "(data/efficiency/network.csv); a device's kernel table takes only "
                             f"{', '.join(NETWORK_TABLE_LINK_GBPS)} rows (kernels timed over its "
                             "scale-up link)")
        if "link_gbps" not in row or "ep" not in row:
            raise ValueError(f"{path}, row {i}: field 'link_gbps': a {fam} row of a device's kernel table needs "
                             "ep and link_gbps (the GB/s of one rank's link in that measurement)")
        out.append(row)
    # The step model picks a domain's kernels by their dispatch rows and prices both halves from
    # the domain: a dispatch without its combine (or the reverse) would leave one at the default.
    have = {r["family"] for r in out}
    for fam in sorted(have):
        half, other = ("dispatch", "combine") if fam.startswith("dispatch") else ("combine", "dispatch")
        partner = fam.replace(half, other)
        if partner not in have:
            raise ValueError(f"{path}: field 'family': it has {fam} rows but no {partner} rows (a device's kernel "
                             "table gives both halves of an exchange it timed)")
    return out


def _add_compute_rows(t: "SM.KernelTables", rows, measured_on: DeviceSpec, families=None) -> None:
    """Compute rows (of `families`, or all) into t as latencies, each read against the roofline of
    the GPU that timed it: its `measured_on` part where the row names one, else `measured_on`."""
    devices = {}
    for row in rows:
        if SM.is_comm_family(row["family"]) or (families is not None and row["family"] not in families):
            continue
        on = row.get("measured_on")
        timed_on = measured_on if on is None else devices.setdefault(on, load_device(on, "corrected"))
        t.add_latency(row["family"], _shape(row), row["latency_us"], timed_on)


def _add_latencies(t: "SM.KernelTables", path, measured_on: DeviceSpec) -> None:
    """A device's table file's rows into t: compute rows as latencies, its own dispatch/combine rows
    (_device_comm_rows) as the bandwidths of its scale-up domain."""
    rows = read_table_rows(path)
    for row in _device_comm_rows(path, rows):
        fam = row["family"]
        t.add_domain_bandwidth(fam, row["ep"], _row_gbps(row) / row["link_gbps"] * NETWORK_TABLE_LINK_GBPS[fam])
    _add_compute_rows(t, rows, measured_on)


def _add_fallback_rows(t: "SM.KernelTables", fallback: str) -> None:
    """The compute rows of a sibling's table (a device file's `fallback_table`) for the families the
    device's own table has no row of, each read against the roofline of the GPU that timed it, as a
    device reading that table whole would (H100 and H200 read the H800 table so)."""
    rows = read_table_rows(_tables_dir() / f"{fallback}.csv")
    lacking = {r["family"] for r in rows if not SM.is_comm_family(r["family"]) and t.rows(r["family"]) == 0}
    _add_compute_rows(t, rows, load_device(fallback, "corrected"), lacking)


@functools.lru_cache(maxsize=16)
def _tables_for(table: str | None, default_efficiency: float, measured_on_file: str | None = None,
                modified_ns: int = 0, fallback: str | None = None) -> "SM.KernelTables":
    t = SM.KernelTables(default_efficiency)
    for row in read_table_rows(_tables_dir() / "network.csv"):
        if row["family"] == "allreduce" and "gbps" not in row:
            t.add_allreduce_latency(row["tp"], row["bytes"], row["latency_us"])
        else:
            t.add_bandwidth(row["family"], row.get("ep", 1.0), _row_gbps(row))
    if measured_on_file is not None:  # a calibration's own table, beside its device file
        path = Path(measured_on_file).parent / table
        if not path.is_file():
            raise ValueError(f"device file {measured_on_file} names the kernel table '{table}', which is missing")
        _add_latencies(t, path, load_device(measured_on_file, "corrected"))
    elif table is not None:
        path = _tables_dir() / f"{table}.csv"
        if not path.is_file():
            raise ValueError(f"kernel table '{table}' has no file data/efficiency/{table}.csv")
        _add_latencies(t, path, load_device(table, "corrected"))
    if fallback is not None:
        _add_fallback_rows(t, fallback)
    return t


def device_pricing(device: DeviceLike, default_efficiency: float = DEFAULT_EFFICIENCY) -> dict:
    """How a device is priced, from the one place that resolves it (grounded.decode, prefill, the
    explorer and the seed's grid all ask here): `tables`, its efficiency tables (its device file's
    `kernel_table`, a shipped table or its own CSV beside the file, then its `fallback_table`'s rows
    of the compute families that table lacks, plus the network rows; a device without a table gets
    only the network rows, every compute call at the default);
    `kernel_table`, that table's name (None: none); `table_kind`, how it was obtained (measured,
    derived or default: the regime of its error band, dsperf.model.bands); `board_power_w` (NaN
    where unknown).
    device: a shipped name, a .toml path, or a DeviceSpec (a shipped device's file by its name)."""
    lo, hi = SM.TABLE_BOUNDS["default_efficiency"]
    default_efficiency = _check_real("default_efficiency", default_efficiency, lo, hi)
    meta = device_metadata(device)
    table = meta.get("kernel_table")
    power = float(meta["board_power_w"]) if "board_power_w" in meta else math.nan
    # A table file (dsperf calibrate's) lies beside the device file that names it, which is the
    # device it was measured on.
    own = table is not None and table.endswith(".csv") and isinstance(device, (str, os.PathLike))
    fallback = meta.get("fallback_table")
    if not own:
        tables = _tables_for(table, default_efficiency, fallback=fallback)
    else:
        device_file = Path(device).resolve()
        # A recalibration rewrites the table: its modification time is part of the cache key.
        table_file = device_file.parent / table
        modified = table_file.stat().st_mtime_ns if table_file.is_file() else 0
        tables = _tables_for(table, default_efficiency, str(device_file), modified, fallback)
    if table is None:
        kind = "default"
    else:
        kind = _table_kind_of(str(Path(device).resolve().parent / table if own else _tables_dir() / f"{table}.csv"))
    return {"tables": tables, "kernel_table": table, "table_kind": kind, "board_power_w": power}


def kernel_tables(device: DeviceLike, default_efficiency: float = DEFAULT_EFFICIENCY) -> "SM.KernelTables":
    """The efficiency tables a device is priced with (device_pricing's `tables`)."""
    return device_pricing(device, default_efficiency)["tables"]


# Argument checks: the rules live in dsperf._checks (bool is not a number, floats are not integers,
# every value finite and bounded, errors name the argument).
def _check_real(name, v, lo, hi, low_open=False) -> float:
    return number(name, v, lo=lo, hi=hi, lo_open=low_open)


def _check_int(name, v, lo, hi) -> int:
    return number(name, v, integer=True, lo=lo, hi=hi)


_check_bool = flag


# Each numeric field's bounds, declared once with the field in C++ (step_model.hpp's
# DSPERF_DEPLOYMENT_FIELDS): name -> (lowest, highest, sentinel or None).
DEPLOYMENT_BOUNDS = dict(SM.Deployment.BOUNDS)


def _field(name, value, lo=None):
    """A deployment field checked against its declared bounds (lo: a tighter lower bound the
    relation to another field sets); integers stay integers. None asks for the field's sentinel."""
    flo, hi, sentinel = DEPLOYMENT_BOUNDS[name]
    if value is None and sentinel is not None:
        return type(getattr(SM.Deployment(), name))(sentinel)
    if isinstance(getattr(SM.Deployment(), name), int):
        return _check_int(name, value, int(flo), int(hi))
    return _check_real(name, value, flo if lo is None else max(flo, lo), hi)


def _deployment(phase: str, *, attn_tp, ep, redundant_experts, batch=128, tokens=16384, prompt_len=4096,
                cached_prefix=0, kv_len=4989, overlap="two_batch", mtp=0, mtp_accepted=0.0, kv_fp8=False,
                attn_fp8=False, dispatch_fp8=True, imbalance=1.0, comm_sms=None, step_overhead_ms=None, weight_dtype="fp8",
                dense_tp=1, moe_tp=1, eager_launch_us=0.0) -> "SM.Deployment":
    """The C++ Deployment of a call's arguments, each checked against its declared bounds and named."""
    d = SM.Deployment()
    d.phase = phase
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    d.overlap = overlap
    d.attn_tp = _field("attn_tp", attn_tp)
    values = dict(ep=ep, redundant_experts=redundant_experts, tokens=tokens, prompt_len=prompt_len,
                  cached_prefix=cached_prefix, kv_len=kv_len, mtp=mtp, mtp_accepted=mtp_accepted, dense_tp=dense_tp,
                  moe_tp=moe_tp, imbalance=imbalance, comm_sms=comm_sms, step_overhead_ms=step_overhead_ms,
                  eager_launch_us=eager_launch_us)
    for name, value in values.items():
        setattr(d, name, _field(name, value))
    d.batch = _field("batch", batch, lo=1 / d.attn_tp)  # a TP group serves batch x attn_tp requests: at least one
    d.kv_fp8 = _check_bool("kv_fp8", kv_fp8)
    d.attn_fp8 = _check_bool("attn_fp8", attn_fp8)
    d.dispatch_fp8 = _check_bool("dispatch_fp8", dispatch_fp8)
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {weight_dtype!r}")
    d.weights_fp8, d.experts_fp4 = WEIGHT_FORMATS[weight_dtype]
    return d


def _run(model, device, dep, default_efficiency):
    m = load_model(model)
    spec = load_device(device, "corrected") if not isinstance(device, DeviceSpec) else device
    out = SM.step(m, spec, kernel_tables(device, default_efficiency), dep)  # validates the deployment (names the field)
    out["device"] = spec.name
    out["sustained_clock_ratio"] = spec.sustained_clock_ratio
    regime = (table_kind(device), dep.phase, bands.bound_of(dep.phase, dep.batch if dep.phase == "decode" else None))
    out["error_band"], out["band_points"], out["band_regime"] = bands.lookup(*regime)
    out["regime"] = "/".join(regime)
    finite_results(f"grounded.{dep.phase}", {k: v for k, v in out.items() if k != "error_band"})
    return out


def error_band(phase: str, device: DeviceLike = "H800", batch=None) -> float:
    """The error band a prediction of this phase on this device carries (batch: decode requests per
    GPU, which decides whether the step is latency-bound): the leave-one-out band of its regime
    (dsperf.model.bands, data/validation/bands.csv)."""
    return bands.lookup(table_kind(device), phase, bands.bound_of(phase, batch))[0]


def error_bands(phase: str, kinds, code, batch) -> np.ndarray:
    """error_band per row of a grid: the table kind kinds[code[i]] (device_pricing's) at batch[i]."""
    code, batch = np.asarray(code), np.asarray(batch, dtype=float)
    latency = batch < bands.LATENCY_BATCH if phase == "decode" else np.zeros(len(batch), dtype=bool)
    by_latency = np.array([[bands.lookup(k, phase, bands.bound_of(phase, None))[0],
                            bands.lookup(k, phase, bands.bound_of(phase, 1))[0]] for k in kinds])
    return by_latency[code, latency.astype(int)]


def table_kind(device: DeviceLike) -> str:
    """How the device's kernel table was obtained: "measured", "derived" (any row moved from another
    GPU's table by a published figure), "partial" (rows, measured or derived, but not for every
    family in CORE_FAMILIES: most of a step runs at the default efficiency) or "default" (no table)."""
    return device_pricing(device)["table_kind"]


# The families that carry most of a step: a table without one of them prices most of the step at the
# default efficiency, and its band is the default regime's ("partial").
CORE_FAMILIES = ("gemm_fp8", "mla_decode", ("grouped_masked", "grouped_contiguous"))


@functools.lru_cache(maxsize=32)
def _table_kind_of(path: str) -> str:
    p = Path(path)
    rows = read_table_rows(p) if p.is_file() else read_table_rows(_tables_dir() / p.name)
    families = {r["family"] for r in rows}
    covered = all((f in families) if isinstance(f, str) else bool(families & set(f)) for f in CORE_FAMILIES)
    # Coverage first: a table without rows for a core family (the Ascend 910C's, derived MLA decode
    # rows only) prices most of a step at the default efficiency, however its rows were obtained.
    if not covered:
        return "partial"
    return "derived" if any(r["basis"] == "derived" for r in rows) else "measured"


def decode(model="DeepSeek-V3", device: DeviceLike = "H800", *, batch=128, kv_len=4989, ep=128, attn_tp=1,
           redundant_experts=0, overlap="two_batch", mtp=0, mtp_accepted=0.0, kv_fp8=False, attn_fp8=False,
           dispatch_fp8=True, imbalance=1.0, comm_sms=None, step_overhead_ms=None, weight_dtype="fp8", dense_tp=1,
           moe_tp=1, eager_launch_us=0.0, default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """One decode step per GPU: step_ms, tpot_ms, tps_user, tokens_per_gpu_s, the memory-limited
    batch (batch_limit, fits_memory), the per-layer times and the priced calls (``calls``).

    batch: requests per GPU; kv_len: their average context; ep: GPUs sharing the routed experts;
    attn_tp: attention TP (1 = DP attention); mtp / mtp_accepted: draft tokens per step and how many
    are accepted on average; imbalance: max/mean routed load per GPU (at least routing_skew's);
    kv_fp8: FlashMLA's FP8 latent cache; attn_fp8: the attention math in FP8 too (FP8 queries and
    cache on the FP8 tensor cores, as TensorRT-LLM's FP8 MQA; priced from the attention rows);
    weight_dtype: a WEIGHT_FORMATS name: "fp8", "bf16", "fp4" (NVFP4 experts, FP8 elsewhere; a device
    with fp4_tflops) or "fp4_bf16" (NVFP4 experts, BF16 elsewhere);
    dense_tp: the dense MLP split over this many GPUs (1: DP; at least attn_tp, which also splits the LM
    head, and the shared experts where ep == attn_tp: docs/GROUNDED_MODEL.md); moe_tp: each routed expert split over
    this many of the ep GPUs (ep / moe_tp expert groups; 1: pure EP); eager_launch_us: the host's
    time to launch one kernel when the step runs eagerly, without CUDA graphs (0, the default: one
    graph replay). Eager, the step takes at least `launches` x eager_launch_us (``launch_ms``): the
    GPU waits wherever its kernels are shorter than their launches."""
    dep = _deployment("decode", batch=batch, kv_len=kv_len, ep=ep, attn_tp=attn_tp,
                      redundant_experts=redundant_experts, overlap=overlap, mtp=mtp, mtp_accepted=mtp_accepted,
                      kv_fp8=kv_fp8, attn_fp8=attn_fp8, dispatch_fp8=dispatch_fp8, imbalance=imbalance,
                      comm_sms=comm_sms, step_overhead_ms=step_overhead_ms, weight_dtype=weight_dtype,
                      dense_tp=dense_tp, moe_tp=moe_tp, eager_launch_us=eager_launch_us)
    return _run(model, device, dep, default_efficiency)


def prefill(model="DeepSeek-V3", device: DeviceLike = "H800", *, tokens=16384, prompt_len=4096, cached_prefix=0,
            ep=32, attn_tp=1, redundant_experts=0, overlap="two_batch", dispatch_fp8=True, imbalance=1.0,
            comm_sms=None, step_overhead_ms=None, weight_dtype="fp8", dense_tp=1, moe_tp=1, eager_launch_us=0.0,
            default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """One prefill step per GPU: `tokens` new prompt tokens per GPU (prompts of `prompt_len`, of
    which `cached_prefix` come from the prefix cache). Returns step_ms, tokens_per_gpu_s, the
    per-layer times and the priced calls (``calls``). eager_launch_us: as decode's (prefill's
    kernels are long, so the launch bound seldom binds)."""
    dep = _deployment("prefill", tokens=tokens, prompt_len=prompt_len, cached_prefix=cached_prefix, ep=ep,
                      attn_tp=attn_tp, redundant_experts=redundant_experts, overlap=overlap,
                      dispatch_fp8=dispatch_fp8, imbalance=imbalance, comm_sms=comm_sms,
                      step_overhead_ms=step_overhead_ms, weight_dtype=weight_dtype, dense_tp=dense_tp, moe_tp=moe_tp,
                      eager_launch_us=eager_launch_us)
    return _run(model, device, dep, default_efficiency)


def lockstep_step_ms(decode_step_ms, chunk_ms, emitted_per_step, *, isl, osl, chunk_tokens, ranks):
    """The mean step of aggregated serving with data-parallel attention, milliseconds (numpy arrays
    broadcast).

    Each of `ranks` DP ranks holds a decode batch that emits `emitted_per_step` tokens a step; a
    finished request is replaced by a new one, whose prompt of `isl` tokens enters in chunks of at
    most `chunk_tokens` (the server's token budget per step), one chunk per rank and step. The MoE
    layers' all-to-all lock-steps the ranks, so a chunk on any rank holds every rank's step: a
    step costs the decode step plus, with the chance that at least one rank runs a chunk, the
    chunk's layers (`chunk_ms`). With one rank this is the prefill share of each output token."""
    # The per-row inputs may hold NaN (the explorer's infeasible rows), which stays NaN in the result;
    # the request's sizes must be numbers.
    for name, v, low in (("decode_step_ms", decode_step_ms, 0), ("chunk_ms", chunk_ms, 0),
                         ("emitted_per_step", emitted_per_step, 0), ("ranks", ranks, 1)):
        if (np.asarray(v, dtype=float) < low).any():
            raise ValueError(f"{name} must be >= {low}")
    for name, v in (("isl", isl), ("osl", osl), ("chunk_tokens", chunk_tokens)):
        if not (np.isfinite(np.asarray(v, dtype=float)).all() and (np.asarray(v, dtype=float) >= 1).all()):
            raise ValueError(f"{name} must be finite and >= 1")
    chunks_per_prompt = np.ceil(isl / chunk_tokens)
    per_rank = np.minimum(1.0, chunks_per_prompt * emitted_per_step / osl)  # chance a rank runs a chunk
    any_rank = 1 - (1 - per_rank) ** ranks
    return decode_step_ms + any_rank * chunk_ms, any_rank


def aggregated(model="DeepSeek-V3", device: DeviceLike = "H800", *, isl=1024, osl=2048, batch=128, kv_len=None,
               max_num_tokens=None, ep=8, attn_tp=1, redundant_experts=0, overlap="none", mtp=0, mtp_accepted=0.0,
               kv_fp8=False, attn_fp8=False, dispatch_fp8=True, imbalance=1.0, comm_sms=None, weight_dtype="fp8",
               dense_tp=1, moe_tp=1, default_efficiency=DEFAULT_EFFICIENCY) -> dict:
    """Aggregated serving (prefill and decode on the same GPUs, DP attention over the EP group):
    output tokens/s per GPU and per user, with every rank's decode step held by the prompt chunks
    of any rank (lockstep_step_ms).

    batch: requests per GPU; isl / osl: prompt and output tokens per request; kv_len: the context
    decode attends to (default isl + osl / 2); max_num_tokens: the server's tokens per step, which
    caps a prompt chunk (default: the whole prompt in one step). The chunk is priced as a prefill
    step of that many tokens on every GPU of the group (its fixed per-step overhead left out: the
    decode step already pays one)."""
    isl = _check_real("isl", isl, 1, 1e7)
    osl = _check_real("osl", osl, 1, 1e7)
    kv_len = isl + osl / 2 if kv_len is None else kv_len
    chunk = isl if max_num_tokens is None else min(isl, _check_real("max_num_tokens", max_num_tokens, 1, 1e7))
    common = dict(ep=ep, attn_tp=attn_tp, redundant_experts=redundant_experts, overlap=overlap,
                  dispatch_fp8=dispatch_fp8, imbalance=imbalance, comm_sms=comm_sms, weight_dtype=weight_dtype,
                  dense_tp=dense_tp, moe_tp=moe_tp, default_efficiency=default_efficiency)
    d = decode(model, device, batch=batch, kv_len=kv_len, mtp=mtp, mtp_accepted=mtp_accepted, kv_fp8=kv_fp8,
               attn_fp8=attn_fp8, **common)
    p = prefill(model, device, tokens=chunk, prompt_len=isl, **common)
    chunk_ms = p["step_ms"] - p["overhead_ms"]
    emitted = d["tokens_per_step"]
    step_ms, share = lockstep_step_ms(d["step_ms"], chunk_ms, emitted, isl=isl, osl=osl, chunk_tokens=chunk,
                                      ranks=max(1, ep // attn_tp))
    step_ms, share = float(step_ms), float(share)
    tpot = step_ms * batch / emitted  # each request emits emitted / batch tokens a step
    out = {"step_ms": step_ms, "decode_step_ms": d["step_ms"], "chunk_ms": chunk_ms, "chunk_tokens": chunk,
            "steps_with_chunk": share, "tokens_per_gpu_s": emitted / (step_ms / 1e3), "tpot_ms": tpot,
            "tps_user": 1e3 / tpot, "fits_memory": d["fits_memory"], "batch_limit": d["batch_limit"],
            "device": d["device"], "error_band": error_band("e2e", device),
            "regime": f"{table_kind(device)}/e2e/throughput"}
    finite_results("grounded.aggregated", {k: v for k, v in out.items() if k != "error_band"})
    return out


def calls_frame(result: Mapping) -> pd.DataFrame:
    """The priced calls of a step as a table: one row per kernel of a layer, its time per call,
    calls per step, the share of the step, its efficiency (of the datasheet roofline, or GB/s for
    communication; `us` prices the FLOPs at the device's sustained_clock_ratio on top) and whether a
    table row priced it."""
    df = pd.DataFrame(result["calls"])
    df["ms_per_step"] = df["us"] * df["calls_per_step"] / 1e3
    return df


def eplb_imbalance(load, *, ep: int, redundant_experts: int = 0, gpus_per_node: int = 8, n_group: int = 8,
                   policy: str = "auto") -> float:
    """The `imbalance` input of a deployment from a routing distribution: max / mean routed rows per
    GPU after dsperf.ep's EPLB places the experts (with `redundant_experts` replicas) on `ep` GPUs.

    load: tokens per logical expert of one layer (e.g. counts from a trace, or
    dsperf.ep.eplb.zipf_load(256, tokens, alpha=...))."""
    from ..ep import eplb

    import numpy as np

    shape = np.shape(load)
    if len(shape) not in (1, 2) or shape[-1] == 0:
        raise ValueError(f"load must be tokens per expert (one row per layer), got an array of shape {shape}")
    experts = int(shape[-1])
    ep = _check_int("ep", ep, 1, 4096)
    gpus_per_node = _check_int("gpus_per_node", gpus_per_node, 1, 1024)
    redundant_experts = _check_int("redundant_experts", redundant_experts, 0, 4096)
    if (experts + redundant_experts) % ep:
        raise ValueError(f"ep ({ep}) must divide the experts plus redundant experts ({experts + redundant_experts})")
    nodes = max(1, ep // gpus_per_node) if ep % gpus_per_node == 0 else 1
    plan = eplb.rebalance(load, experts + redundant_experts, num_gpus=ep, num_groups=n_group, num_nodes=nodes,
                          policy=policy)
    return eplb.imbalance(load, plan)
