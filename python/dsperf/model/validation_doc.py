"""The point tables of docs/VALIDATION.md (peak section) and docs/VALIDATION_LATENCY.md (latency
section), rendered from `dsperf validate`, so that the documents quote what the model prints today.

Each table sits between two markers in its document (MARKERS); everything outside them is prose
that quotes history. `dsperf validate --format doc` prints the tables, and

    python -m dsperf.model.validation_doc            # rewrite the tables in docs/
    python -m dsperf.model.validation_doc --check    # exit 1 where a document differs

A test (tests/test_validation_doc.py) fails while a document's table differs from the model's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from .validation import PEAK_METRICS, POINT_PHASES, validate
from .validation_latency import METRIC_READS, validate_latency

# |error| at most this is set in bold in the peak table (the profile points' target).
BOLD_WITHIN = 0.10


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _whole(v: float) -> str:
    return f"{v:,.0f}"


def _four_digits(v: float) -> str:
    """Four significant digits, thousands grouped (2,708; 40.17; 439.2)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _band(row) -> str:
    if pd.isna(row["loo_band"]):
        return ""
    return f"{row['loo_band']:.0%}" + ("" if bool(row["inside_band"]) else " (outside)")


def _peak_row(r) -> list[str]:
    peak = r["kind"] == "peak"
    if peak:
        err = f"{r['error']:+.1%}"
        err = f"**{err}**" if abs(r["error"]) <= BOLD_WITHIN else err
    else:
        err = f"utilisation {r['utilisation']:.0%}"
    return [r["point"], r["role"], r["device"], POINT_PHASES[r["phase"]].label, PEAK_METRICS[r["metric"]].label,
            _whole(r["published"]) + ("" if peak else " (daily average)"), _whole(r["predicted"]), err,
            _band(r) if peak else "", _cell(r["missing"])]


def _latency_row(r) -> list[str]:
    name = r["point"] + (" (design)" if r["role"] == "design" else "")
    return [name, r["device"], METRIC_READS[r["metric"]].label, _four_digits(r["published"]),
            _four_digits(r["predicted"]), f"{r['error']:+.1%}", _band(r)]


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render_peak(df: pd.DataFrame) -> str:
    """The peak section's table (docs/VALIDATION.md) from dsperf.model.validation.validate()."""
    header = ["point", "role", "device", "phase", "metric", "published", "predicted", "error",
              "leave-one-out band", "missing input"]
    align = ["---"] * 5 + ["---:"] * 4 + ["---"]
    return _table(header, align, [_peak_row(r) for _, r in df.iterrows()])


def render_latency(df: pd.DataFrame) -> str:
    """The latency section's table (docs/VALIDATION_LATENCY.md) from validate_latency()."""
    header = ["point", "device", "metric", "published", "predicted", "error", "leave-one-out band"]
    align = ["---"] * 3 + ["---:"] * 4
    return _table(header, align, [_latency_row(r) for _, r in df.iterrows()])


class Section(NamedTuple):
    document: str                            # under docs/
    validate: Callable[[], pd.DataFrame]
    render: Callable[[pd.DataFrame], str]


SECTIONS = {"peak": Section("VALIDATION.md", validate, render_peak),
            "latency": Section("VALIDATION_LATENCY.md", validate_latency, render_latency)}


def markers(section: str) -> tuple[str, str]:
    return (f"<!-- generated: dsperf validate --format doc --section {section} "
            f"(python -m dsperf.model.validation_doc rewrites it) -->\n", f"<!-- end of generated {section} table -->\n")


def table_in(text: str, section: str, where: str = "the document") -> tuple[int, int]:
    """Start and end offsets of a section's generated table inside a document's text."""
    begin, end = markers(section)
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{where}: expected one pair of markers {begin.strip()!r} ... {end.strip()!r}")
    start = text.index(begin) + len(begin)
    stop = text.index(end)
    if stop < start:
        raise ValueError(f"{where}: the end marker of the {section} table comes before its start")
    return start, stop


def render(section: str, df: pd.DataFrame | None = None) -> str:
    s = SECTIONS[section]
    return s.render(s.validate() if df is None else df)


def _docs_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else Path(__file__).resolve().parents[3] / "docs"
    if not (path / SECTIONS["peak"].document).is_file():
        raise SystemExit(f"--docs: {path} holds no {SECTIONS['peak'].document} (pass the checkout's docs folder)")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsperf.model.validation_doc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", help="the docs folder (default: the checkout's docs/ beside python/)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 where a table differs")
    args = ap.parse_args(argv)
    docs = _docs_dir(args.docs)
    stale = []
    for name, s in SECTIONS.items():
        path = docs / s.document
        text = path.read_text()
        start, stop = table_in(text, name, str(path))
        table = render(name)
        if text[start:stop] == table:
            continue
        stale.append(str(path))
        if not args.check:
            path.write_text(text[:start] + table + text[stop:])
    verb = "differs from the model" if args.check else "rewritten"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
