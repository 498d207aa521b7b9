"""The grounded model's kernel table files: reading and checking data/efficiency/<table>.csv (and a
calibration's own table beside its device file), the network table's bandwidth and all-reduce rows,
and resolving which tables a device is priced with (device_pricing) and how they were obtained
(table_kind: measured, derived, partial or default, the regime of a prediction's error band).

dsperf.model.grounded prices steps from what this module builds; the rows' format is in
docs/ADDING_A_DEVICE.md.
"""
from __future__ import annotations

import csv
import functools
import math
import os
from importlib import resources
from pathlib import Path
from typing import Mapping

from .. import _C
from .._checks import MAX_COUNT, MAX_TOKENS, number, read_small_file
from .devices import DeviceLike, DeviceSpec, device_metadata, list_devices, load_device, tables_dir

SM = _C.step_model
FAMILIES = tuple(SM.family_names())

# Columns of a table file that carry a shape (blank where a family does not use them).
SHAPE_COLUMNS = ("m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "bytes", "ep", "tp")
DEFAULT_EFFICIENCY = 0.6
TABLE_BASES = ("measured", "derived")


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


def row_shape(row: Mapping) -> "SM.KernelShape":
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
        t.add_latency(row["family"], row_shape(row), row["latency_us"], timed_on)


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
    rows = read_table_rows(tables_dir() / f"{fallback}.csv")
    lacking = {r["family"] for r in rows if not SM.is_comm_family(r["family"]) and t.rows(r["family"]) == 0}
    _add_compute_rows(t, rows, load_device(fallback, "corrected"), lacking)


@functools.lru_cache(maxsize=16)
def _tables_for(table: str | None, default_efficiency: float, measured_on_file: str | None = None,
                modified_ns: int = 0, fallback: str | None = None) -> "SM.KernelTables":
    t = SM.KernelTables(default_efficiency)
    for row in read_table_rows(tables_dir() / "network.csv"):
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
        path = tables_dir() / f"{table}.csv"
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
    default_efficiency = number("default_efficiency", default_efficiency, lo=lo, hi=hi)
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
        kind = _table_kind_of(str(Path(device).resolve().parent / table if own else tables_dir() / f"{table}.csv"))
    return {"tables": tables, "kernel_table": table, "table_kind": kind, "board_power_w": power}


def kernel_tables(device: DeviceLike, default_efficiency: float = DEFAULT_EFFICIENCY) -> "SM.KernelTables":
    """The efficiency tables a device is priced with (device_pricing's `tables`)."""
    return device_pricing(device, default_efficiency)["tables"]


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
    rows = read_table_rows(p) if p.is_file() else read_table_rows(tables_dir() / p.name)
    families = {r["family"] for r in rows}
    covered = all((f in families) if isinstance(f, str) else bool(families & set(f)) for f in CORE_FAMILIES)
    # Coverage first: a table without rows for a core family (the Ascend 910C's, derived MLA decode
    # rows only) prices most of a step at the default efficiency, however its rows were obtained.
    if not covered:
        return "partial"
    return "derived" if any(r["basis"] == "derived" for r in rows) else "measured"
