"""The validation documents quote the model as it is: their figures, bands and point tables equal
what `dsperf validate --format doc` renders (dsperf.model.validation_doc)."""
import shutil
from pathlib import Path

import pytest

from dsperf.cli import main as cli_main
from dsperf.model import validation_doc as vd

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def rendered():
    return {name: vd.render_blocks(name) for name in vd.SECTIONS}


BLOCKS = [(section, doc, block) for section, s in vd.SECTIONS.items() for doc, blocks in s.documents().items()
          for block in blocks]


def test_the_readme_quotes_both_sections_figures():
    assert ("peak", vd.README, "figures") in BLOCKS and ("latency", vd.README, "figures") in BLOCKS


@pytest.mark.parametrize("section,doc,block", BLOCKS)
def test_document_block_is_the_models(section, doc, block, rendered):
    path = DOCS / doc
    text = path.read_text()
    start, stop = vd.block_in(text, section, block, str(path))
    assert text[start:stop] == rendered[section][block], (
        f"{path.name}'s {section} {block} differs from `dsperf validate`: run python -m dsperf.model.validation_doc")


def test_tables_have_one_row_per_point(rendered):
    from dsperf.model.validation import load_points
    from dsperf.model.validation_latency import load_latency_points

    for section, points in (("peak", load_points()), ("latency", load_latency_points())):
        body = rendered[section]["table"].splitlines()[2:]
        assert [line.split(" | ")[0].lstrip("| ").removesuffix(" (design)") for line in body] == \
            [p["point"] for p in points]


def test_peak_row_formats():
    row = {"point": "p", "role": "check", "device": "H800", "phase": "e2e", "metric": "tokens_per_node_s",
           "published": 14800.0, "predicted": 16211.4, "error": 0.0954, "utilisation": float("nan"), "kind": "peak",
           "loo_band": 0.2, "inside_band": True, "missing": "a | b"}
    cells = vd._peak_row(row)
    assert cells[3:8] == ["prefill + decode", "tokens/s/node", "14,800", "16,211", "**+9.5%**"]
    assert cells[8] == "20%" and cells[9] == "a \\| b"
    row.update(error=-0.2, inside_band=False)
    assert vd._peak_row(row)[7:9] == ["-20.0%", "20% (outside)"]
    row.update(kind="daily", error=float("nan"), utilisation=0.913)
    assert vd._peak_row(row)[5:9] == ["14,800 (daily average)", "16,211", "utilisation 91%", ""]


def test_latency_numbers_keep_four_digits():
    assert [vd._four_digits(v) for v in (2708.2, 40.171, 439.24, 161.0, 6.78, 27299.4)] == \
        ["2,708", "40.17", "439.2", "161", "6.78", "27,299"]


def test_rewrite_touches_only_the_blocks(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    copies = {doc for s in vd.SECTIONS.values() for doc in s.documents()}
    for doc in copies:
        (docs / doc).resolve().write_text((DOCS / doc).read_text())
    path = docs / vd.SECTIONS["peak"].document
    readme = (docs / vd.README).resolve()
    originals = {p: p.read_text() for p in (path, readme)}
    for p in originals:
        text = p.read_text()
        start, stop = vd.block_in(text, "peak", "figures")
        p.write_text(text[:start] + "| stale |\n" + text[stop:])
    assert vd.main(["--docs", str(docs), "--check"]) == 1
    assert vd.main(["--docs", str(docs)]) == 0
    for p, text in originals.items():
        assert p.read_text() == text
    assert vd.main(["--docs", str(docs), "--check"]) == 0


def test_bad_documents_are_named(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for doc in ("VALIDATION.md", vd.README):
        (docs / doc).resolve().write_text((DOCS / doc).read_text())
    with pytest.raises(SystemExit, match="VALIDATION_LATENCY.md is missing"):
        vd.main(["--docs", str(docs), "--check"])
    (docs / "VALIDATION_LATENCY.md").write_text((DOCS / "VALIDATION_LATENCY.md").read_text())
    (docs / "VALIDATION.md").write_text("no markers here\n")
    with pytest.raises(ValueError, match="VALIDATION.md: expected one pair of markers"):
        vd.main(["--docs", str(docs), "--check"])
    with pytest.raises(SystemExit, match="--docs"):
        vd.main(["--docs", str(docs / "nowhere")])


def test_cli_prints_the_doc_tables(capsys, rendered):
    cli_main(["validate", "--format", "doc", "--section", "latency"])
    assert capsys.readouterr().out.strip() == "\n".join(rendered["latency"].values()).strip()


def _frame(errors: dict, unexplained: str = "") -> "pd.DataFrame":
    import pandas as pd

    rows = [{"point": p, "kind": "peak", "phase": "decode", "role": "design" if i % 2 else "check", "error": e,
             "inside_band": abs(e) < 0.2, "missing": "" if p == unexplained else "a named input"}
            for i, (p, e) in enumerate(errors.items())]
    return pd.DataFrame(rows)


def test_figures_say_met_and_not_met_from_the_errors():
    ids = [p for t in vd.POINT_TARGETS for p in t.points]
    good = vd.render_peak_figures(_frame({p: 0.05 for p in ids}))
    assert "**not met**" not in good and good.count(": met") == 3 + len(vd.POINT_TARGETS)
    errors = {p: 0.05 for p in ids} | {"trtllm_b200_min_latency": -0.25, "cloudmatrix384_decode": 0.4}
    bad = vd.render_peak_figures(_frame(errors, unexplained="cloudmatrix384_decode"))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in bad.splitlines()}
    assert "+5.0% / -25.0%" in lines["TensorRT-LLM one-request decode, H200 / B200"]
    assert lines["TensorRT-LLM one-request decode, H200 / B200"].endswith("within 20%: **not met** |")
    assert lines["points beyond 30%"].endswith("**not met** (cloudmatrix384_decode) |")
    assert "1: cloudmatrix384_decode (+40.0%)" in lines["points beyond 30%"]


def test_bands_block_has_every_regime_once():
    from dsperf.model import bands
    from dsperf.model.validation import validate

    df = validate()
    body = vd.render_bands(df).splitlines()[2:]
    assert len(body) == len(bands.band_table(df))
    assert all(line.count("±") == 1 for line in body)
