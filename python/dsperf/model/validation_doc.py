"""The point tables and headline figures of docs/VALIDATION.md (peak section) and
docs/VALIDATION_LATENCY.md (latency section), rendered from `dsperf validate`, so that the documents
quote what the model prints today.

Each block (a section's `figures` against its targets, and its point `table`) sits between two
markers in its document (`markers`); everything outside them is prose, and the history of how the
figures moved is in docs/VALIDATION_HISTORY.md. `dsperf validate --format doc` prints the blocks, and

    python -m dsperf.model.validation_doc            # rewrite the blocks in docs/
    python -m dsperf.model.validation_doc --check    # exit 1 where a document differs

A test (tests/test_validation_doc.py) fails while a document's block differs from the model's.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from . import bands
from .validation import BEYOND, PEAK_METRICS, POINT_PHASES, summary, validate
from .validation_latency import BOUND_LABELS, METRIC_READS, latency_summary, validate_latency

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


class PointTarget(NamedTuple):
    """A target the issues set on named peak points: each within `within` of its published figure."""
    label: str
    points: tuple[str, ...]
    within: float


# The peak section's targets on named points (issue 27 for the profile and one-request points,
# issue 31 for the Ascend ones); the statistics' targets are in render_peak_figures.
POINT_TARGETS = (
    PointTarget("DeepSeek profile-data prefill / decode", ("deepseek_profile_prefill", "deepseek_profile_decode"), 0.10),
    PointTarget("TensorRT-LLM one-request decode, H200 / B200", ("trtllm_h200_min_latency", "trtllm_b200_min_latency"),
                0.20),
    PointTarget("CloudMatrix384 decode (Ascend 910C)", ("cloudmatrix384_decode",), 0.15),
    PointTarget("cann-recipes-infer's A3 decode (the seed documents' figure)", ("cannrecipes_a3_decode",), 0.15),
)
# The share of check points their printed band must hold, and the most a median |error| may be
# (issue 27); a point beyond validation.BEYOND must name its missing input.
INSIDE_BAND_TARGET = 0.80
MEDIAN_TARGET = 0.15


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _points_cell(df: pd.DataFrame, ids: tuple[str, ...]) -> tuple[str, pd.DataFrame]:
    """The points' errors as one cell, "+1.0% / -2.0% (design, check)", and their rows."""
    rows = df.set_index("point").loc[list(ids)]
    errors = " / ".join(f"{e:+.1%}" for e in rows["error"])
    return f"{errors} ({', '.join(rows['role'])})", rows


def render_peak_figures(df: pd.DataFrame) -> str:
    """The peak section's figures against its targets (docs/VALIDATION.md)."""
    s = summary(df)
    peaks = df[df["kind"] == "peak"]
    check = peaks[peaks["role"] == "check"]
    phases = ", ".join(f"{POINT_PHASES[ph].label} {s['median_abs_error_' + ph]:.1%}"
                       for ph in POINT_PHASES if "median_abs_error_" + ph in s)
    outside = check.loc[~check["inside_band"].astype(bool), "point"].tolist()
    inside = len(check) - len(outside)
    rows = [[f"median \\|error\\|, all {s['points']} peak points", f"{s['median_abs_error']:.1%} ({phases})", ""],
            [f"median \\|error\\|, the {s['check_points']} `check` points", f"{s['median_abs_error_check']:.1%}",
             f"<= {MEDIAN_TARGET:.0%}: {_verdict(s['median_abs_error_check'] <= MEDIAN_TARGET)}"],
            ["`check` points inside their leave-one-out band",
             f"{inside} of {len(check)} = {inside / len(check):.0%}" + (f" (outside: {', '.join(outside)})" if outside else ""),
             f">= {INSIDE_BAND_TARGET:.0%}: {_verdict(inside / len(check) >= INSIDE_BAND_TARGET)}"]]
    for t in POINT_TARGETS:
        cell, points = _points_cell(df, t.points)
        rows.append([t.label, cell, f"within {t.within:.0%}: {_verdict(bool((points['error'].abs() <= t.within).all()))}"])
    beyond = peaks[peaks["error"].abs() > BEYOND]
    named = ", ".join(f"{r.point} ({r.error:+.1%})" for r in beyond.itertuples()) or "none"
    rows.append([f"points beyond {BEYOND:.0%}", f"{len(beyond)}: {named}",
                 f"none without a named missing input: {_verdict(not s['beyond_30pct_unexplained'])}"
                 + (f" ({', '.join(s['beyond_30pct_unexplained'])})" if s["beyond_30pct_unexplained"] else "")])
    return _table(["figure", "now", "target"], ["---", "---", "---"], rows)


def _bands_block(table: pd.DataFrame) -> str:
    rows = [[r.table, POINT_PHASES[r.phase].label if r.phase in POINT_PHASES else r.phase, r.bound,
             f"±{r.band:.0%}", str(r.points), r.from_regime] for r in table.itertuples()]
    return _table(["kernel table", "phase", "bound", "band", "check points", "measured over"],
                  ["---"] * 3 + ["---:"] * 2 + ["---"], rows)


def render_bands(df: pd.DataFrame) -> str:
    """The error band each regime's grounded predictions print (dsperf.model.bands.peak_band_table,
    what data/validation/bands.csv holds), one row per (table kind, phase, bound)."""
    return _bands_block(bands.peak_band_table(df))


def render_serving_bands(df: pd.DataFrame) -> str:
    """The TTFT and TPOT bands each regime's serving simulations print (bands.serving_band_table)."""
    return _bands_block(bands.serving_band_table(df))


def render_latency_figures(df: pd.DataFrame) -> str:
    """The latency section's headline figures (docs/VALIDATION_LATENCY.md); no target is set on them."""
    s = latency_summary(df)
    peaks = df[df["kind"] == "peak"]
    groups = ", ".join(f"{label} {s['median_abs_error_' + b]:.1%}" for b, label in BOUND_LABELS.items()
                       if "median_abs_error_" + b in s)
    inside = round(s["inside_band_check"] * s["check_points"])
    rows = [[f"median \\|error\\|, all {s['points']} latency points", f"{s['median_abs_error']:.1%} ({groups})"],
            ["roles", f"{int((peaks['role'] == 'design').sum())} `design`, {s['check_points']} `check`"],
            [f"median \\|error\\|, the {s['check_points']} `check` points", f"{s['median_abs_error_check']:.1%}"],
            ["`check` points inside their leave-one-out band",
             f"{inside} of {s['check_points']} = {s['inside_band_check']:.0%}"],
            [f"beyond {BEYOND:.0%} without a named missing input", ", ".join(s["beyond_30pct_unexplained"]) or "none"]]
    return _table(["figure", "now"], ["---", "---"], rows)


# The README, beside docs/, quotes each section's figures too (its "How accurate is it?").
README = "../README.md"


class Block(NamedTuple):
    name: str                                # the marker's name, with the section's
    render: Callable[[pd.DataFrame], str]
    also_in: tuple[str, ...] = ()            # documents besides the section's (relative to docs/)


class Section(NamedTuple):
    document: str                            # under docs/
    validate: Callable[[], pd.DataFrame]
    blocks: tuple[Block, ...]

    def documents(self) -> dict[str, list[str]]:
        """Each document this section writes into (relative to docs/), with the blocks it holds."""
        out = {self.document: [b.name for b in self.blocks]}
        for b in self.blocks:
            for doc in b.also_in:
                out.setdefault(doc, []).append(b.name)
        return out


SECTIONS = {"peak": Section("VALIDATION.md", validate,
                            (Block("figures", render_peak_figures, (README,)), Block("bands", render_bands),
                             Block("table", render_peak))),
            "latency": Section("VALIDATION_LATENCY.md", validate_latency,
                               (Block("figures", render_latency_figures, (README,)), Block("bands", render_serving_bands),
                                Block("table", render_latency)))}


def markers(section: str, block: str) -> tuple[str, str]:
    return (f"<!-- generated: the {section} {block} (dsperf validate --format doc --section {section}; "
            f"python -m dsperf.model.validation_doc rewrites it) -->\n", f"<!-- end of generated {section} {block} -->\n")


def block_in(text: str, section: str, block: str, where: str = "the document") -> tuple[int, int]:
    """Start and end offsets of a section's generated block inside a document's text."""
    begin, end = markers(section, block)
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{where}: expected one pair of markers {begin.strip()!r} ... {end.strip()!r}")
    start = text.index(begin) + len(begin)
    stop = text.index(end)
    if stop < start:
        raise ValueError(f"{where}: the end marker of the {section} {block} comes before its start")
    return start, stop


def render_blocks(section: str, df: pd.DataFrame | None = None) -> dict[str, str]:
    """Each block of a section, by name, from one validation of it."""
    s = SECTIONS[section]
    df = s.validate() if df is None else df
    return {b.name: b.render(df) for b in s.blocks}


def render(section: str, df: pd.DataFrame | None = None) -> str:
    """A section's blocks as `dsperf validate --format doc` prints them."""
    return "\n".join(render_blocks(section, df).values())


def _docs_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else Path(__file__).resolve().parents[3] / "docs"
    if not (path / SECTIONS["peak"].document).is_file():
        raise SystemExit(f"--docs: {path} holds no {SECTIONS['peak'].document} (pass the checkout's docs folder)")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsperf.model.validation_doc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", help="the docs folder (default: the checkout's docs/ beside python/; the README "
                                   "beside it is written too)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 where a table differs")
    args = ap.parse_args(argv)
    docs = _docs_dir(args.docs)
    texts, stale = {}, []
    for name, s in SECTIONS.items():
        rendered = render_blocks(name)
        for doc, blocks in s.documents().items():
            path = Path(os.path.normpath(docs / doc))
            if path not in texts:
                if not path.is_file():
                    raise SystemExit(f"--docs: {path} is missing (the {name} section writes into it)")
                texts[path] = (path.read_text(),) * 2
            old, new = texts[path]
            for block in blocks:
                start, stop = block_in(new, name, block, str(path))
                new = new[:start] + rendered[block] + new[stop:]
            texts[path] = (old, new)
    for path, (old, new) in texts.items():
        if new == old:
            continue
        stale.append(str(path))
        if not args.check:
            path.write_text(new)
    verb = "differs from the model" if args.check else "rewritten"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
