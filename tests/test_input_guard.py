"""The input guard (issue 27): every number the model reads has a source or an `assumed:` tag, and
none of them is a published validation figure, nor (for a dimensionless one) a ratio of two
(dsperf.model.inputs)."""
import math
import random
import re
from pathlib import Path

import pytest

import dsperf
from dsperf.model import devices, inputs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def all_inputs():
    return inputs.model_inputs()


def _report(matches):
    return "\n".join(f"  {m.where} = {m.value:.6g} equals {m.figure}" for m in matches)


def test_the_guard_reads_every_kind_of_input(all_inputs):
    kinds = {x.where.split()[0].split("/")[0] for x in all_inputs}
    assert kinds == {"devices", "efficiency", "measured", "anchors.csv", "points.csv", "latency_points.csv",
                     "constant"}
    # The GPUs' own tables measure-gpu timed (an H200's) are inputs too, rows and efficiencies.
    assert sum(x.where.startswith("measured/H200.csv") for x in all_inputs) > 367
    shipped = {x.where.split()[0] for x in all_inputs if x.where.startswith("devices/")}
    assert len(shipped) == len(devices.list_devices()) == 17
    # Both modes' values: the [as_published] overrides are inputs too.
    assert "devices/H20.toml as_published.mem_bw_gbps" in {x.where for x in all_inputs}
    assert sum(x.dimensionless and not x.computed for x in all_inputs) > 100
    assert len(all_inputs) > 10000


def test_no_published_figure_or_ratio_of_two_is_an_input(all_inputs):
    """(a) No input equals a published figure (points.csv and latency_points.csv) at 4 significant
    digits; (b) no dimensionless input written down (derates, discounts, clock ratios, the default
    efficiency, the anchors' fractions of peak, MTP acceptance, imbalance, ...) equals the ratio of
    two different published figures. Matches looked into are in inputs.EXEMPT, each with its reason."""
    matches = inputs.guard(x for x in all_inputs if not x.computed)
    unexplained = [m for m in matches if inputs.exemption(m) is None]
    assert not unexplained, "inputs equal to a published figure or a ratio of two:\n" + _report(unexplained)
    # Every exemption is still needed (a stale one would hide the next match at that place).
    used = {(m.where, m.figure.split(" = ")[0]) for m in matches}
    assert set(inputs.EXEMPT) <= used, sorted(set(inputs.EXEMPT) - used)
    assert all(reason.strip() for reason in inputs.EXEMPT.values())


def test_table_efficiencies_match_ratios_no_more_often_than_chance(all_inputs):
    """A table row's efficiency is computed from its latency (checked above) and a datasheet peak (a
    device field, checked above); at 4 digits, ~2,000 of them against ~1,400 ratios of figures share
    digits by chance alone (about 80 times). The test: no more matches than against the ratios of
    figures each moved by a random factor (which no input can have been taken from)."""
    computed = [x for x in all_inputs if x.computed]
    assert len(computed) > 1500
    figures = inputs.published_figures()
    observed = len(inputs.guard(computed, figures))
    null = []
    for seed in range(8):
        r = random.Random(seed)
        null.append(len(inputs.guard(computed, [f._replace(value=f.value * r.uniform(0.8, 1.25)) for f in figures])))
    mean = sum(null) / len(null)
    assert observed <= mean + 4 * math.sqrt(mean) + 5, (observed, null)


def test_every_device_field_has_a_source():
    for name in devices.list_devices():
        data = devices._catalogue()[name.lower()]
        sources = devices.check_sources(data, name)
        for key in devices.numeric_fields(data):
            assert sources[key].strip(), (name, key)
        for mode in ("corrected", "as_published"):
            devices.load_device(name, mode)


def test_every_constant_has_a_source_and_its_declared_value():
    for name, c in inputs.INPUT_CONSTANTS.items():
        assert isinstance(c.source, str) and c.source.strip() and c.source.strip() != "assumed:", name
        assert math.isfinite(float(c.value)), name
    # Every numeric default of the serving simulator is listed with its source.
    assert set(inputs._simulate_defaults()) <= set(inputs.SIMULATE_DEFAULT_SOURCES)
    # The read values are the declared ones, not copies.
    assert inputs.INPUT_CONSTANTS["grounded.DEFAULT_EFFICIENCY"].value is dsperf.grounded.DEFAULT_EFFICIENCY
    # The C++ constants come through the binding (no retyped copy to drift from its header).
    assert inputs.INPUT_CONSTANTS["step_model.min_kernel_us"].value == dsperf._C.step_model.min_kernel_us
    assert inputs.INPUT_CONSTANTS["serving.ctx_ratio"].value == dsperf._C.serving.decode_context_ratio


# ---- the guard can fail ---------------------------------------------------------------------------

def _copy_with(tmp_path, name, field, value):
    text = (devices._devices_dir() / f"{name}.toml").read_text()
    text, n = re.subn(rf"(?m)^{field} = .*$", f"{field} = {value}", text, count=1)
    assert n == 1
    path = tmp_path / f"planted-{name}.toml"
    path.write_text(text)
    return str(path)


def _planted_matches(path, name):
    """The guard's matches in a planted copy of a device file, less those the shipped file's
    exemptions explain (its own coincidences, which the copy carries under another name)."""
    shipped = lambda m: m._replace(where=m.where.replace(f"planted-{name}.toml", f"devices/{name}.toml"))  # noqa: E731
    return [m for m in inputs.guard(inputs.device_inputs(path)) if inputs.exemption(shipped(m)) is None]


def test_a_planted_figure_in_a_device_file_is_caught(tmp_path):
    point, figure, _ = inputs.published_figures()[1]        # deepseek_profile_decode, 2324 tokens/s
    path = _copy_with(tmp_path, "H800", "mem_bw_gbps", figure)
    matches = _planted_matches(path, "H800")
    assert [(m.where, m.figure.split(" = ")[0]) for m in matches] == [("planted-H800.toml mem_bw_gbps", point)]


def test_a_planted_ratio_in_a_device_file_is_caught(tmp_path):
    (pa, a, ua), (pb, b, ub) = inputs.published_figures()[:2]
    assert ua == ub == "tokens/s"
    path = _copy_with(tmp_path, "H800", "discount", round(b / a, 6))
    matches = _planted_matches(path, "H800")
    assert any(m.where == "planted-H800.toml discount" and m.figure.startswith(f"{pb} / {pa}") for m in matches)
    # A dimensioned field is not compared with ratios (a throughput over a throughput is no GB/s).
    path = _copy_with(tmp_path, "H800", "mem_bw_gbps", round(b / a, 6))
    assert not _planted_matches(path, "H800")


def test_a_planted_constant_is_caught(monkeypatch):
    _, figure, _ = inputs.published_figures()[0]
    planted = inputs.Constant(figure, "assumed: planted", "here", False)
    monkeypatch.setitem(inputs.INPUT_CONSTANTS, "planted", planted)
    found = [m.where for m in inputs.guard(inputs.constant_inputs()) if inputs.exemption(m) is None]
    assert found == ["constant planted"]


def test_sig_digits():
    assert inputs.sig(15.312) == inputs.sig(15.3055) == 15.31
    assert inputs.sig(2324) != inputs.sig(2326)


# ---- the loader holds every device file to its sources -----------------------------------------------

def test_a_device_file_without_a_source_is_refused(tmp_path):
    text = (devices._devices_dir() / "H800.toml").read_text()
    f = tmp_path / "nosrc.toml"
    f.write_text(re.sub(r"(?m)^sources\.mem_bw_gbps = .*\n", "", text))
    with pytest.raises(ValueError, match=r"nosrc.toml.*field 'mem_bw_gbps' has no source"):
        dsperf.load_device(str(f))
    with pytest.raises(ValueError, match=r"field 'mem_bw_gbps' has no source"):
        dsperf.hardware.device_metadata(str(f))
    f.write_text(re.sub(r"(?m)^sources\.discount = .*$", 'sources.discount = "  "', text))
    with pytest.raises(ValueError, match=r"nosrc.toml' field 'discount': its source must be a non-empty text"):
        dsperf.load_device(str(f))
    f.write_text(re.sub(r"(?m)^sources\.discount = .*$", 'sources.discount = "assumed:"', text))
    with pytest.raises(ValueError, match=r"field 'discount': its source must be a non-empty text"):
        dsperf.load_device(str(f))
    f.write_text(text + 'fp4_tflops = 10.0\n')
    with pytest.raises(ValueError, match=r"field 'fp4_tflops' has no source"):
        dsperf.load_device(str(f))
    f.write_text(text.replace("sources.discount =", "sources.discont ="))
    with pytest.raises(ValueError, match=r"field 'discount' has no source"):
        dsperf.load_device(str(f))
    f.write_text(text.replace("sources.discount =", "sources.discont =").replace("discount = 0.85\n", ""))
    with pytest.raises(ValueError, match=r"missing the field 'discount'"):
        dsperf.load_device(str(f))
    f.write_text(text + 'sources.warp_size = "NVIDIA"\n')
    with pytest.raises(ValueError, match=r"has a source for 'warp_size', which is not a field of the file"):
        dsperf.load_device(str(f))
    f.write_text("sources = 3\n" + text.replace("\nsources.", "\n#sources."))
    with pytest.raises(ValueError, match=r"field 'sources' must be a table"):
        dsperf.load_device(str(f))


def test_as_published_overrides_need_their_source(tmp_path):
    text = (devices._devices_dir() / "H20.toml").read_text()
    f = tmp_path / "h20.toml"
    f.write_text(re.sub(r'(?m)^sources\."as_published\.nvlink_gbps" = .*\n', "", text))
    for mode in ("corrected", "as_published"):  # refused whichever values the mode reads
        with pytest.raises(ValueError, match=r"field 'as_published.nvlink_gbps' has no source"):
            dsperf.load_device(str(f), mode)


def test_a_source_may_be_a_sources_table(tmp_path):
    """`sources.<field> = ...` beside each value and a [sources] table at the end are the same TOML."""
    text = (devices._devices_dir() / "RTX4090.toml").read_text()
    lines = text.splitlines()
    kept = [ln for ln in lines if not ln.startswith("sources.")]
    table = ["[sources]"] + [ln[len("sources."):] for ln in lines if ln.startswith("sources.")]
    f = tmp_path / "table.toml"
    f.write_text("\n".join(kept + table) + "\n")
    a, b = dsperf.load_device(str(f)), dsperf.load_device("RTX4090")
    assert all(getattr(a, k) == getattr(b, k) for k in devices.SPEC_FIELDS)


def test_the_neutral_value_is_held_to_figures_not_to_ratios():
    # Two published figures within 0.05% of each other give a ratio of 1, the neutral value of every
    # dimensionless input: it says nothing of where an input of 1 came from. Any other ratio counts.
    figures = [inputs.Figure("a", 311.607, "ms"), inputs.Figure("b", 311.526, "ms"), inputs.Figure("c", 100.0, "ms")]
    one = inputs.Input("planted one", 1.0, True)
    ratio = inputs.Input("planted ratio", 311.526 / 100.0, True)
    assert inputs.guard([one], figures) == []
    assert [m.figure for m in inputs.guard([ratio], figures)] == ["b / c = 311.526 / 100"]
    assert [m.where for m in inputs.guard([inputs.Input("planted", 100.0, False)], figures)] == ["planted"]


def test_ratios_are_of_figures_in_one_unit():
    # A dimensionless input could have been taken from a speed-up or a share (one TTFT over another,
    # one throughput over another), not from a TTFT in ms over a throughput in tokens/s.
    figures = [inputs.Figure("ttft a", 300.0, "ms"), inputs.Figure("ttft b", 200.0, "ms"),
               inputs.Figure("rate", 100.0, "tokens/s")]
    hits = lambda v: [m.figure for m in inputs.guard([inputs.Input("planted", v, True)], figures)]  # noqa: E731
    assert hits(1.5) == ["ttft a / ttft b = 300 / 200"]
    assert hits(3.0) == [] and hits(2.0) == []    # ms over tokens/s
    # Every published figure's unit comes from its metric's declaration.
    assert {f.unit for f in inputs.published_figures()} == {"ms", "tokens/s"}
