"""The `dsperf validate` latency section: the serving simulator against published latencies at a
stated concurrency (dsperf.model.validation_latency, data/validation/latency_points.csv)."""
import contextlib
import csv
import io
import math
import re

import pytest

from dsperf.cli import main as cli_main
from dsperf.model import validation, validation_latency as vl


@pytest.fixture(scope="module")
def table():
    return vl.validate_latency()


def _cli(*args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["validate", *args]) == 0
    return out.getvalue()


def test_every_latency_point_names_its_source_and_settings():
    points = vl.load_latency_points()
    assert len(points) >= 6
    assert len({p["point"] for p in points}) == len(points)
    for p in points:
        assert p["source"] and p["device"] and p["published"] > 0, p["point"]
        assert p["metric"] in vl.METRICS and p["kind"] == "peak" and p["concurrency"] >= 1, p["point"]
        for k in ("mode", "input_len", "output_len", "ep", "replicas"):
            assert k in p, (p["point"], k)
        # A run ends after its duration or its prompt count (its benchmark's --num-prompts).
        assert "duration_s" in p or "num_prompts" in p, p["point"]
        assert 0 <= p.get("range_ratio", 1) <= 1, p["point"]


def test_every_latency_point_is_predicted_finite_and_positive(table):
    assert len(table) == len(vl.load_latency_points())
    assert table["predicted"].map(math.isfinite).all() and (table["predicted"] > 0).all()
    assert (table["error"] - (table["predicted"] / table["published"] - 1)).abs().max() < 1e-12


def test_latency_columns_are_the_peak_sections(table):
    assert list(table.columns) == list(validation.validate().columns)
    rows = list(csv.DictReader(io.StringIO(_cli("--section", "latency", "--format", "csv"))))
    peak = list(csv.DictReader(io.StringIO(_cli("--section", "peak", "--format", "csv"))))
    assert list(rows[0].keys()) == list(peak[0].keys())
    assert [r["point"] for r in rows] == list(table["point"])


def test_printed_median_is_the_median_of_the_row_errors():
    text = _cli("--section", "latency")
    errors = [float(m) for m in re.findall(r"^\|[^|]+\|[^|]+\|[^|]+\|[^|]+\|[^|]+\|[^|]+\|[^|]+\|\s*(-?[\d.e+-]+)\s*\|",
                                            text, flags=re.M)]
    assert len(errors) == len(vl.load_latency_points())
    printed = float(re.search(r"latency points: median \|error\| ([\d.]+)%", text).group(1)) / 100
    recomputed = sorted(abs(e) for e in errors)
    n = len(recomputed)
    median = recomputed[n // 2] if n % 2 else (recomputed[n // 2 - 1] + recomputed[n // 2]) / 2
    # The table prints 4 significant digits, the summary one decimal of a percent.
    assert printed == pytest.approx(median, abs=6e-4)


def test_a_fixed_seed_gives_the_same_predictions(table):
    again = vl.validate_latency(fresh=True)  # simulated anew, not this process's kept runs
    assert (again["predicted"] == table["predicted"]).all()


def test_bad_metric_names_the_file_and_point(monkeypatch, tmp_path):
    text = vl._latency_points_path().read_text().replace(",tpot_p50_ms,", ",tpot_p95_ms,", 1)
    bad = tmp_path / "latency_points.csv"
    bad.write_text(text)
    monkeypatch.setattr(vl, "_latency_points_path", lambda: bad)
    with pytest.raises(ValueError, match=r"latency_points\.csv, point \w+: metric must be one of"):
        vl.load_latency_points()
