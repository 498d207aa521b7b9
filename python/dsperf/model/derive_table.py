"""Kernel tables for GPUs with no per-shape measurements of a family: the transfer rule.

Blackwell GPUs have published kernel figures at their best shapes only (a GEMM library's peak at
large M, an attention kernel's best TFLOPS or GB/s), not the per-shape tables the grounded model
reads; so do AMD's attention kernels and the Ascend's (whose grouped matmul has no figure of its own
and borrows its dense INT8 GEMM's best, as Blackwell's grouped rows borrow CUTLASS's GEMM). The rule
that fills the gap:

    efficiency_target(shape) = efficiency_hopper(shape) x anchor / best_hopper(family)

- efficiency_hopper(shape): the Hopper table's measured row (data/efficiency/H800.csv), as a
  fraction of the H800's datasheet roofline at the tables' clock (of the sibling part's that timed
  it, where the row names one in measured_on: the BF16 GEMM rows, timed on an H200): the curve over
  shapes (how small shapes fall short of large ones) is taken from the Hopper kernels;
- anchor: a published best-case figure of the target GPU for that family, as a fraction of its
  own datasheet peak (data/anchors.csv, each with its source);
- best_hopper(family): the best efficiency of the Hopper rows the anchor is compared with (both
  "up to" figures): compute-bound rows for a TFLOPS anchor, memory-bound rows for a GB/s anchor,
  among rows at or below the roofline (a few rows' shapes fit the work model
  badly and come out above 1; they are not a best case). Where the Hopper table has no row bound
  like the anchor (all its rows of the family lie on the other side of the H800 roofline), the
  family's best row of the other bound is the reference, and the derived row's source2 says so.

Each derived row keeps the Hopper row's source and names the anchor's as `source2`, with
`basis = derived`. Rows of the NVFP4 families have no Hopper counterpart: they take the FP8 rows'
curve (gemm_fp8 for gemm_fp4; grouped_masked below 512 rows per expert and grouped_contiguous
from 512 for grouped_fp4), scaled to the NVFP4 anchor. One anchor scales every row of its families,
memory-bound rows too (no Blackwell GEMM library publishes its memory-bound best separately).
Efficiencies are capped at 1.

`python -m dsperf.model.derive_table` rewrites data/efficiency/<target>.csv, keeping the table's
measured rows (basis measured, e.g. the Ascend 910C's dispatch/combine rows, the aiter importers'
rows of the AMD tables) and the importers' notes as they are; tests/test_bands.py and
tests/test_ascend_table.py check that the shipped files are what the rule gives today.
"""
from __future__ import annotations

import csv
import io
import math
import sys
from importlib import resources

from .. import _C
from .devices import load_device, tables_dir

SM = _C.step_model
HOPPER_TABLE = "H800"
# The FP8 family whose rows give each NVFP4 family its curve over shapes.
FP4_CURVES = {"gemm_fp4": ("gemm_fp8",), "grouped_fp4": ("grouped_masked", "grouped_contiguous")}
GROUPED_FP4_CONTIGUOUS_FROM = 512   # rows per expert from which grouped_fp4 follows the prefill layout
PEAK_FIELDS = ("fp8_tflops", "fp16_tflops", "fp4_tflops", "mem_bw_gbps")
OUT_COLUMNS = ("family", "m", "n", "k", "groups", "batch", "kv_len", "heads", "ep", "dtype", "latency_us", "gbps",
               "basis", "source", "source2")


def _data(name):
    return tables_dir() / name


def read_anchors(path=None) -> list[dict]:
    """The published best-case figures: target table, families, figure, the device field it is a
    fraction of, and the source. Errors name the file, row and field."""
    path = path or resources.files("dsperf") / "data" / "anchors.csv"
    with path.open(newline="") if hasattr(path, "open") and not isinstance(path, str) else open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.lstrip().startswith("#")))
    out = []
    for i, r in enumerate(rows, start=1):
        for field in ("table", "families", "published", "peak_field", "source"):
            if not (r.get(field) or "").strip():
                raise ValueError(f"{path}, row {i}: field '{field}' is required")
        if r["peak_field"] not in PEAK_FIELDS:
            raise ValueError(f"{path}, row {i}: field 'peak_field' must be one of {', '.join(PEAK_FIELDS)}, "
                             f"got {r['peak_field']!r}")
        try:
            published = float(r["published"])
        except ValueError:
            raise ValueError(f"{path}, row {i}: field 'published' must be a number, got {r['published']!r}") from None
        families = r["families"].split()
        unknown = [f for f in families if f not in SM.family_names()]
        if unknown:
            raise ValueError(f"{path}, row {i}: field 'families': unknown kernel family {unknown[0]!r}")
        out.append({"table": r["table"].strip(), "families": families, "published": published,
                    "peak_field": r["peak_field"], "source": r["source"].strip()})
    return out


def _shape(row):
    from .table_files import row_shape as shape_of
    return shape_of(row)


def _roofline_s(family, row, device) -> float:
    return SM.datasheet_roofline_s(SM.table_work(family, _shape(row)), device, 1.0)


def _memory_bound(family, row, device) -> bool:
    w = SM.table_work(family, _shape(row))
    return w.bytes / (device.mem_bw_gbps * 1e9) >= _roofline_s(family, row, device) * (1 - 1e-12)


def _efficiency(row, device) -> float:
    return _roofline_s(row["family"], row, device) / (row["latency_us"] * 1e-6)


def _timed_on(row, hopper, siblings: dict):
    """The device a Hopper row's latency is read against: its measured_on (a sibling GH100 part
    that timed it, e.g. the BF16 GEMM rows timed on an H200), else the table's own."""
    on = row.get("measured_on")
    if on is None:
        return hopper
    if on not in siblings:
        siblings[on] = load_device(on, "corrected")
    return siblings[on]


def derive(target: str, hopper_table: str = HOPPER_TABLE) -> list[dict]:
    """The derived rows of `target`'s table."""
    from .grounded import read_table_rows

    hopper = load_device(hopper_table, "corrected")
    dev = load_device(target, "corrected")
    rows = read_table_rows(_data(f"{hopper_table}.csv"))
    siblings: dict = {}
    timed_on = {id(r): _timed_on(r, hopper, siblings) for r in rows}
    eff_of = {id(r): _efficiency(r, timed_on[id(r)]) for r in rows}
    # The best row per (family, what bounds it on the Hopper roofline): a TFLOPS anchor is compared
    # with compute-bound rows, a GB/s anchor with memory-bound ones. A few rows sit above the
    # roofline (their shape fits the work model badly): they are not a best case.
    best = {}
    for r in rows:
        e = eff_of[id(r)]
        key = (r["family"], _memory_bound(r["family"], r, timed_on[id(r)]))
        if e <= 1.0:
            best[key] = max(best.get(key, 0.0), e)
    out = []
    for anchor in (a for a in read_anchors() if a["table"] == target):
        anchor_eff = anchor["published"] / getattr(dev, anchor["peak_field"])
        memory = anchor["peak_field"] == "mem_bw_gbps"
        for family in anchor["families"]:
            curves = FP4_CURVES.get(family, (family,))
            reference = max(best.get((c, memory), 0.0) for c in curves)
            bound_note = ""
            if reference <= 0:
                # No Hopper row is bound like the anchor: every H800 row of the family sits on the
                # other side of its roofline (FlashMLA decode with a BF16 cache and 128 heads is
                # memory-bound on the H800, while the same shapes are compute-bound on a part with
                # less bandwidth per FLOP). Both figures are still a kernel's best fraction of its own
                # roofline: compare with the family's best row, and say so.
                reference = max(best.get((c, not memory), 0.0) for c in curves)
                if reference <= 0:
                    raise ValueError(f"anchor for {target} {family}: the {hopper_table} table has no "
                                     "row at or below the roofline to compare it with")
                bound_note = f", {'compute' if memory else 'memory'}-bound: the {hopper_table} table has no " \
                             f"{'memory' if memory else 'compute'}-bound row of {family}"
            for r in rows:
                if r["family"] not in curves:
                    continue
                if family == "grouped_fp4":
                    contiguous = r["family"] == "grouped_contiguous"
                    if contiguous != (r["m"] >= GROUPED_FP4_CONTIGUOUS_FROM):
                        continue
                eff = min(1.0, eff_of[id(r)] * anchor_eff / reference)
                new = {k: v for k, v in r.items() if k not in ("basis", "source2", "latency_us", "measured_on")}
                new["family"] = family
                # Rounded up, so that a row at the cap stays at or under the roofline.
                new["latency_us"] = math.ceil(_roofline_s(family, new, dev) / eff * 1e9) / 1e3
                new["basis"] = "derived"
                new["source"] = f"{r['source']} [curve over shapes]"
                new["source2"] = f"{anchor['source']} [{anchor['published']:g} = {anchor_eff:.4f} of {target} " \
                                 f"{anchor['peak_field']}; best {hopper_table} row {reference:.4f}{bound_note}]"
                out.append(new)
    return out


# Columns a table's measured rows may use beyond the derived rows' (written only where one does).
MEASURED_EXTRA_COLUMNS = ("tokens", "link_gbps", "q_len", "math", "measured_on")


def measured_rows(target: str) -> list[dict]:
    """The measured rows of target's shipped table (basis measured: a kernel timed on the target
    itself), which a regeneration keeps as they are."""
    from .grounded import read_table_rows

    path = _data(f"{target}.csv")
    return [r for r in read_table_rows(path) if r["basis"] == "measured"] if path.is_file() else []


_GENERATED_NOTES = ("# Kernel efficiency rows for ", "# Then ")


def _own_notes(target: str) -> list[str]:
    """The comment lines of target's shipped table that render did not write: the notes of the
    importer that wrote its measured rows (MI300X.csv's aiter importers), kept through a regeneration."""
    path = _data(f"{target}.csv")
    if not path.is_file():
        return []
    with open(path) as f:
        return [line for line in f if line.startswith("#") and not line.startswith(_GENERATED_NOTES)]


def _width(row: dict):
    """A GEMM row's width, (family, n, k), or None for a family without one (attention, all-to-all)."""
    return (row["family"], row["n"], row["k"]) if row.get("n") and row.get("k") else None


def render(target: str, measured: list[dict] | None = None) -> str:
    """target's table: the derived rows, then its measured rows (`measured`, or the shipped file's
    measured rows when None, so that a regeneration keeps them). A derived row at the shape of a
    measured row is left out: the measurement replaces it; so is every derived row of a GEMM width
    (family, n, k) that has measured rows: a measured curve over that width's shapes replaces the
    transferred one there whole, rather than meeting it at a step between two sources."""
    from .grounded import row_label

    measured = measured_rows(target) if measured is None else measured
    notes = _own_notes(target)
    taken = {row_label(r) for r in measured}
    widths = {_width(r) for r in measured if _width(r) is not None}
    rows = [r for r in derive(target) if row_label(r) not in taken and _width(r) not in widths]
    columns = OUT_COLUMNS + tuple(c for c in MEASURED_EXTRA_COLUMNS if any(c in r for r in measured))
    buf = io.StringIO()
    buf.write(f"# Kernel efficiency rows for {target}, derived (dsperf.model.derive_table): each {HOPPER_TABLE} row's "
              "efficiency scaled by a published best-case figure of this GPU (anchors.csv) over the best "
              f"{HOPPER_TABLE} row of the family. Regenerate: python -m dsperf.model.derive_table {target}\n")
    buf.writelines(notes)
    if measured:
        elsewhere = ("; a row naming measured_on was timed on that part and is read against its roofline"
                     if any(r.get("measured_on") for r in measured) else "")
        buf.write(f"# Then {len(measured)} measured rows (basis measured: timed on this device, each with its "
                  f"source{elsewhere}); a regeneration keeps them.\n")
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows + [dict(r) for r in measured]:
        w.writerow({k: (f"{v:g}" if isinstance(v, float) and k != "latency_us" else v) for k, v in r.items()})
    return buf.getvalue()


def write_or_check(target: str, measured: list[dict], check: bool) -> int:
    """For a table builder (benchmarks/tables/build_*.py) that declares a table's measured rows: write
    data/efficiency/<target>.csv as render gives it, or with check only say whether the shipped file
    is what it gives. Returns the exit status."""
    text = render(target, measured)
    path = _data(f"{target}.csv")
    if check:
        if not path.is_file() or path.read_text() != text:
            print(f"{path} is not what the rule gives today: rerun without --check", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    with open(path, "w", newline="") as f:
        f.write(text)
    print(f"wrote {path} ({sum(not line.startswith('#') for line in text.splitlines()) - 1} rows)")
    return 0


def builder_main(doc: str, target: str, measured, check, argv=None) -> int:
    """The command line of a table builder (benchmarks/tables/build_*.py): `check()` lists problems
    with the figures it declares (printed, exit 1); then the table is written, or with --check only
    compared, from `measured()` rows (write_or_check)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the shipped table is what this gives")
    a = ap.parse_args(argv)
    problems = check()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return write_or_check(target, measured(), a.check)


def main(argv=None) -> int:
    targets = (argv if argv is not None else sys.argv[1:]) or sorted({a["table"] for a in read_anchors()})
    for t in targets:
        path = _data(f"{t}.csv")
        text = render(t)  # before the file is opened for writing: rendering reads its measured rows
        with open(path, "w", newline="") as f:
            f.write(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
