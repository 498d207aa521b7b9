"""Device specs: one TOML file per device under data/devices, loadable by name or path."""
from __future__ import annotations

import functools
import math
import os
import sys
from importlib import resources
from typing import Iterable, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .. import _C
from .._checks import number, read_small_file

DeviceSpec = _C.DeviceSpec

# TOML keys that map onto DeviceSpec fields, with their types: the C++ list of fields
# (csrc/hardware/device_spec.hpp), as the binding exposes it.
SPEC_FIELDS = {name: {"int": int, "float": float, "str": str}[kind] for name, kind, _ in DeviceSpec.FIELDS}
OPTIONAL = tuple(name for name, _, required in DeviceSpec.FIELDS if not required)
# Keys of a device file the spec does not hold (dsperf.hardware.device_metadata).
METADATA_FIELDS = ("kernel_table", "fallback_table", "board_power_w", "vendor")
# Who makes the part (a device file's `vendor`; absent: nvidia). The launch export reads it: the
# stacks' flags it writes were read from their NVIDIA-GPU documentation.
VENDORS = ("nvidia", "amd", "huawei")
REQUIRED = [k for k in SPEC_FIELDS if k not in OPTIONAL]
# Tables a device file may hold beside its fields: the seed's values, the sources of every number,
# and what `dsperf calibrate` measured and fitted (its own record of the measurement).
TABLES = ("as_published", "sources", "calibration", "efficiency")
# A source that is not a publication or a measurement starts with this and says why.
ASSUMED = "assumed:"

DeviceLike = Union[str, os.PathLike, DeviceSpec]


def _devices_dir():
    return resources.files("dsperf") / "data" / "devices"


def tables_dir():
    """Where the shipped kernel tables live (data/efficiency/<name>.csv, and the network table)."""
    return resources.files("dsperf") / "data" / "efficiency"


_MAX_TOML_BYTES = 16 << 20  # a device file is a few KB; refuse to parse anything huge


def _read_toml(path) -> dict:
    """A TOML file as a dict; every failure (unreadable, not UTF-8, not TOML, nested beyond
    Python's recursion limit) is a ValueError naming the file."""
    text = read_small_file(path, _MAX_TOML_BYTES, "device file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"device file '{path}' is not valid TOML: {e}") from None
    except RecursionError:
        raise ValueError(f"device file '{path}' is not a device file: nested too deeply") from None


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, tuple]:
    """Lower-cased name or alias -> (file, parsed TOML) of every shipped device (read once; treat as read-only)."""
    out = {}
    for p in sorted(_devices_dir().iterdir(), key=lambda p: p.name):
        if p.name.endswith(".toml"):
            data = _read_toml(p)
            for key in [data.get("name", p.name[:-5])] + list(data.get("aliases", [])):
                out[str(key).lower()] = (p, data)
    return out


@functools.lru_cache(maxsize=1)
def _catalogue() -> dict[str, dict]:
    """Lower-cased name or alias -> parsed TOML of every shipped device (treat as read-only)."""
    return {key: data for key, (_, data) in _shipped().items()}


def shipped_device_file(name: str):
    """The file of a shipped device, by its name or an alias (any case); ValueError naming it otherwise."""
    found = _shipped().get(str(name).lower())
    if found is None:
        raise ValueError(f"no shipped device file is named '{name}'")
    return found[0]


def list_devices() -> list[str]:
    """Canonical names of the shipped devices."""
    return sorted({d["name"] for d in _catalogue().values()})


def spec_from_dict(data: dict, mode: str = "as_published", source: str = "<dict>") -> DeviceSpec:
    """A DeviceSpec from a parsed device file. Unless the mode fixes 'datasheet_devices' (as
    'corrected' does), the file's [as_published] table overrides its datasheet values with the
    ones the seed analysis used."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a string, got {type(mode).__name__}")
    seed_values = not _C.parse_mode(mode)["datasheet_devices"]
    if not isinstance(data, dict):
        raise ValueError(f"device file {source} must hold a table of fields, got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"device file {source} is missing the field '{missing[0]}'")
    values = {k: v for k, v in data.items() if k in SPEC_FIELDS}
    # A malformed file is refused whichever values the mode reads from it.
    seed = data.get("as_published", {})
    if not isinstance(seed, dict):
        raise ValueError(f"device file {source} field 'as_published' must be a table, got {seed!r}")
    if seed_values:
        values.update({k: v for k, v in seed.items() if k in SPEC_FIELDS})
    unknown = [k for k in data if k not in SPEC_FIELDS and k != "aliases" and k not in TABLES
               and k not in METADATA_FIELDS]
    if unknown:
        raise ValueError(f"device file {source} has an unknown field '{unknown[0]}'")
    spec = DeviceSpec()
    for key, value in values.items():
        setattr(spec, key, _field_value(key, value, f"device file {source} field"))
    try:
        spec.validate()
    except ValueError as e:
        raise ValueError(f"device file {source}: {e}") from None
    check_sources(data, source)
    return spec


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def numeric_fields(data: dict) -> dict:
    """{field: value} of every number of a parsed device file the model reads: its top-level fields,
    and its [as_published] overrides as 'as_published.<field>'. The [calibration] and [efficiency]
    tables of a `dsperf calibrate` file are its record of the measurement and are not included."""
    out = {k: v for k, v in data.items() if _is_number(v)}
    seed = data.get("as_published", {})
    if isinstance(seed, dict):
        out.update({f"as_published.{k}": v for k, v in seed.items() if _is_number(v)})
    return out


def check_sources(data: dict, source: str = "<dict>") -> dict:
    """The `sources` table of a parsed device file, checked: every numeric field (numeric_fields)
    has a non-empty text naming where its value comes from (a datasheet, a paper, a PR, a
    measurement) or starting with 'assumed:' and saying why; and every entry names a field the file
    has (a stale or misspelt entry is an error, as an unknown field is). Every device file is held
    to this, shipped or not: a number without a source cannot be told apart from a fitted one.
    Errors name the file and the field."""
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise ValueError(f"device file {source} field 'sources' must be a table of texts, got {sources!r}")
    numbers = numeric_fields(data)
    for key in numbers:
        text = sources.get(key)
        if text is None:
            name = f'"{key}"' if "." in key else key
            raise ValueError(f"device file {source} field '{key}' has no source: add sources.{name} = \"<datasheet, "
                             f"paper, PR or measurement>\" (or \"{ASSUMED} <why>\") (docs/ADDING_A_DEVICE.md)")
        if not isinstance(text, str) or not text.strip() or text.strip() == ASSUMED or "\0" in text:
            raise ValueError(f"device file {source} field '{key}': its source must be a non-empty text (where the "
                             f"value comes from, or '{ASSUMED} <why>'), got {text!r}")
    seed = data.get("as_published", {})
    known = set(numbers) | {k for k in data if k not in TABLES} | (
        {f"as_published.{k}" for k in seed} if isinstance(seed, dict) else set())
    stale = [k for k in sources if k not in known]
    if stale:
        raise ValueError(f"device file {source} has a source for '{stale[0]}', which is not a field of the file")
    return sources


# Integer fields are C++ ints: bounded here, before the conversion (DeviceSpec::validate has the
# tighter ranges and names them).
_INT_MAX = 2 ** 31 - 1


def _field_value(key, value, where):
    """A device field's value, strictly typed: str for the name; an int (not a bool, not a float) for
    int fields; a finite int or float for float fields."""
    kind = SPEC_FIELDS[key]
    if kind is str:
        ok = isinstance(value, str) and value != "" and "\0" not in value
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and -_INT_MAX <= value <= _INT_MAX
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        want = {str: "str (non-empty)", int: "int", float: "float (finite)"}[kind]
        raise ValueError(f"{where} '{key}' must be {want}, got {value!r}")
    return kind(value)


def load_device(device: DeviceLike, mode: str = "corrected", **overrides) -> DeviceSpec:
    """A DeviceSpec by shipped name or alias (case-insensitive), TOML path, or DeviceSpec.

    Datasheet values by default; mode="as_published" (or any mode string without the
    datasheet_devices fix) gives the values the seed analysis used where they differ (H20's
    3,350 GB/s, ...).

    Keyword overrides replace fields, e.g. ``load_device("H20", scaleout_gbps=25)``.
    """
    if isinstance(device, DeviceSpec):
        spec = _copy(device)
    elif isinstance(device, (str, os.PathLike)):
        text = os.fspath(device)
        cat = _catalogue()
        if text.lower() in cat:
            spec = spec_from_dict(cat[text.lower()], mode, source=f"'{text}'")
        elif text.endswith(".toml") and os.path.isfile(text):
            spec = spec_from_dict(_read_toml(text), mode, source=f"'{text}'")
        else:
            raise ValueError(f"unknown device '{text}'; shipped devices: {', '.join(list_devices())} "
                             "(or give the path of a .toml device file)")
    else:
        raise TypeError(f"device must be a name, a .toml path or a DeviceSpec, got {type(device).__name__}")
    for key, value in overrides.items():
        if key not in SPEC_FIELDS:
            raise ValueError(f"unknown device field '{key}'")
        setattr(spec, key, _field_value(key, value, "device override"))
    spec.validate()
    return spec


def _copy(spec: DeviceSpec) -> DeviceSpec:
    out = DeviceSpec()
    for key in SPEC_FIELDS:
        setattr(out, key, getattr(spec, key))
    return out


def _spec_repr(spec: DeviceSpec) -> str:
    return (f"DeviceSpec(name={spec.name!r}, fp16_tflops={spec.fp16_tflops:g}, fp8_tflops={spec.fp8_tflops:g}, "
            f"mem_gb={spec.mem_gb:g}, mem_bw_gbps={spec.mem_bw_gbps:g}, nvlink_gbps={spec.nvlink_gbps:g}, "
            f"scaleout_gbps={spec.scaleout_gbps:g}, gpus_per_node={spec.gpus_per_node})")


DeviceSpec.__repr__ = _spec_repr


def _variant_label(spec: DeviceSpec, mode: str) -> str:
    """A DeviceSpec's name, plus the fields where it differs from the shipped device of that name
    (under either kind of values), so that two variants never print under one name."""
    data = _catalogue().get(spec.name.lower())
    if data is None:
        return spec.name
    diffs = None
    for m in ("corrected", "as_published"):
        ref = spec_from_dict(data, m)
        d = [k for k in SPEC_FIELDS if k != "name" and getattr(spec, k) != getattr(ref, k)]
        if diffs is None or len(d) < len(diffs):
            diffs = d
    return spec.name if not diffs else spec.name + " (" + ", ".join(f"{k}={getattr(spec, k):g}" for k in diffs) + ")"


def device_list(devices: Union[DeviceLike, Iterable[DeviceLike]]) -> list:
    """One device or a sequence of them, as a list (in the order given)."""
    if isinstance(devices, (str, os.PathLike, DeviceSpec)):
        return [devices]
    if isinstance(devices, (bytes, dict)) or not hasattr(devices, "__iter__"):
        raise TypeError(f"devices must be a device or a sequence of devices, got {devices!r}")
    return list(devices)


def resolve_devices(devices: Union[DeviceLike, Iterable[DeviceLike]], mode: str) -> list[tuple[str, DeviceSpec]]:
    """(label, spec) pairs; the label is what the caller wrote, so tables keep their names; a
    DeviceSpec that differs from the shipped device of its name is labelled with its differences."""
    out = []
    for d in device_list(devices):
        if isinstance(d, DeviceSpec):
            _warn_if_other_mode(d, mode)
        spec = load_device(d, mode)
        if isinstance(d, DeviceSpec):
            label = _variant_label(spec, mode)
        else:
            label = spec.name if str(d).endswith(".toml") else str(d)
        out.append((label, spec))
    if not out:
        raise ValueError("devices must name at least one device")
    return out


def _warn_if_other_mode(spec: DeviceSpec, mode: str) -> None:
    """A shipped device's spec loaded for the other kind of values (the seed's or the datasheet's)
    than `mode` uses would silently change the answer: say so."""
    data = _catalogue().get(spec.name.lower())
    if data is None or not data.get("as_published"):
        return
    wanted = "as_published" if mode == "as_published" or (mode != "grounded" and not _C.parse_mode(mode)[
        "datasheet_devices"]) else "corrected"
    other = "corrected" if wanted == "as_published" else "as_published"
    fields = [k for k in SPEC_FIELDS if k != "name"]
    same = lambda a, b: all(getattr(a, k) == getattr(b, k) for k in fields)  # noqa: E731
    mine, theirs = spec_from_dict(data, wanted), spec_from_dict(data, other)
    if same(spec, theirs) and not same(spec, mine):
        import warnings

        values = "the seed's published" if other == "as_published" else "datasheet"
        warnings.warn(f"device {spec.name} carries {values} values (load_device(..., {other!r})) but mode {mode!r} "
                      f"uses the {'datasheet' if values != 'datasheet' else 'seed'}'s; the spec is used as given",
                      UserWarning, stacklevel=4)


# The board power a device file may give, watts: a value a real accelerator could draw.
BOARD_POWER_W = (1.0, 1e5)


def device_metadata(device: DeviceLike) -> dict:
    """The keys of a device file beyond the spec, checked: `kernel_table` (the efficiency table its
    kernels are priced with: a shipped table's name, or a .csv beside the file), `board_power_w`
    and `vendor` (VENDORS); empty for a DeviceSpec that is not a shipped device. Read through
    dsperf.grounded.device_pricing, which resolves them for every caller."""
    if isinstance(device, DeviceSpec):
        device = device.name
        data = _catalogue().get(device.lower())
    elif isinstance(device, (str, os.PathLike)):
        device = os.fspath(device)
        data = _catalogue().get(device.lower())
        if data is None and device.endswith(".toml") and os.path.isfile(device):
            data = _read_toml(device)
        elif data is None:
            raise ValueError(f"unknown device '{device}'; shipped devices: {', '.join(list_devices())} "
                             "(or give the path of a .toml device file)")
    else:
        raise TypeError(f"device must be a name, a .toml path or a DeviceSpec, got {type(device).__name__}")
    if data:
        check_sources(data, f"'{device}'")
    out = {k: data[k] for k in METADATA_FIELDS if data and k in data}
    table = out.get("kernel_table")
    if table is not None and not (isinstance(table, str) and table.strip() and "\0" not in table):
        raise ValueError(f"device file '{device}' field 'kernel_table' must name a table (a string such as "
                         f"\"H800\" or \"mine.csv\"), got {table!r}")
    fallback = out.get("fallback_table")
    if fallback is not None and not (isinstance(fallback, str) and fallback in shipped_tables()):
        raise ValueError(f"device file '{device}' field 'fallback_table' must name a shipped table ("
                         f"{', '.join(shipped_tables())}), got {fallback!r}")
    if "vendor" in out and out["vendor"] not in VENDORS:
        raise ValueError(f"device file '{device}' field 'vendor' must be one of {', '.join(VENDORS)}, "
                         f"got {out['vendor']!r}")
    if "board_power_w" in out:
        lo, hi = BOARD_POWER_W
        out["board_power_w"] = number(f"device file '{device}' field 'board_power_w'", out["board_power_w"], lo=lo, hi=hi)
    return out


@functools.lru_cache(maxsize=1)
def shipped_tables() -> tuple:
    """The shipped kernel tables' names (tables_dir()'s <name>.csv, the network table aside)."""
    return tuple(sorted(f.name[:-4] for f in tables_dir().iterdir()
                        if f.name.endswith(".csv") and f.name != "network.csv"))


def kernel_table_name(device: DeviceLike) -> str | None:
    """The efficiency table a device's kernels are priced with; None for a device without one."""
    return device_metadata(device).get("kernel_table")


def device_table(devices: Iterable[DeviceLike], mode: str = "corrected"):
    """The devices' specs as a DataFrame, one row per device."""
    import pandas as pd

    rows = []
    for label, spec in resolve_devices(devices, mode):
        row = {"GPU": label}
        row.update({k: getattr(spec, k) for k in SPEC_FIELDS if k != "name"})
        rows.append(row)
    return pd.DataFrame(rows).set_index("GPU")
