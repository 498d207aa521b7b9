"""Error bands by regime (dsperf.model.bands), the derived Blackwell table (dsperf.model.derive_table)
(the guard that no published figure is an input is tests/test_input_guard.py)."""
import csv
import math
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from dsperf.model import bands, derive_table, grounded, validation
from dsperf._C import step_model as SM

DATA = resources.files("dsperf") / "data"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def frame():
    return validation.validate()


def test_shipped_bands_are_what_validation_measures_today(frame):
    from dsperf.model.validation_latency import validate_latency

    with bands.bands_path().open(newline="") as f:
        shipped = pd.read_csv(f, comment="#")
    now = bands.band_table(frame, validate_latency())
    assert list(shipped.columns) == list(now.columns)
    pd.testing.assert_frame_equal(shipped.reset_index(drop=True), now.reset_index(drop=True), check_dtype=False,
                                  atol=1e-6)  # stale: run `dsperf validate --write-bands`


def test_every_regime_has_a_finite_band(frame):
    for table in bands.TABLE_KINDS:
        for phase in bands.phases():
            band, n, _ = bands.lookup(table, phase, bands.bound_of(phase, 1))
            assert math.isfinite(band) and band > 0 and n >= bands.MIN_POINTS


def test_leave_one_out_leaves_the_point_out():
    df = pd.DataFrame({"kind": ["peak"] * 4, "role": ["check"] * 4, "table": ["measured"] * 4,
                       "phase": ["decode"] * 4, "bound": ["throughput"] * 4, "error": [0.01, 0.02, 0.03, 0.90]})
    out = bands.leave_one_out(df)
    # The outlier's band comes from the other three only, so it falls outside (three points are too
    # few for an 80% conformal band: the band is their worst error).
    assert out["loo_band"].iloc[3] == pytest.approx(0.03)
    assert not out["inside_band"].iloc[3]
    assert out["inside_band"].iloc[:3].all()


def test_conformal_rank_is_the_split_conformal_rank():
    # ceil((n + 1) x 0.8): 3 points cannot promise 80% (rank 4 > 3); 4 need the largest; 9 the 8th.
    assert bands.BAND_QUANTILE == 0.8
    assert [bands.conformal_rank(n) for n in (3, 4, 9, 14, 19)] == [4, 4, 8, 12, 16]
    assert math.isnan(bands._quantile([0.1, 0.2, 0.3]))
    assert bands._quantile([0.4, -0.1, 0.3, 0.2]) == pytest.approx(0.4)


def test_conformal_bands_cover_at_least_their_share_of_exchangeable_errors():
    # Leave-one-out over many regimes of random errors: the share inside the band is at least
    # BAND_QUANTILE (the plain interpolated quantile covers about 0.74 of such points at n = 9).
    import numpy as np

    rng = np.random.default_rng(0)
    inside = []
    for _ in range(400):
        errors = rng.standard_normal(9) * 0.2
        df = pd.DataFrame({"kind": ["peak"] * 9, "role": ["check"] * 9, "table": ["measured"] * 9,
                           "phase": ["decode"] * 9, "bound": ["throughput"] * 9, "error": errors})
        inside.extend(bands.leave_one_out(df)["inside_band"])
    assert np.mean(inside) >= bands.BAND_QUANTILE


def test_design_points_do_not_narrow_the_bands(frame):
    design = frame[frame["role"] == "design"]
    assert len(design) >= 3  # DeepSeek's profile prefill and decode, TensorRT-LLM's H200 aggregated point
    changed = frame.copy()
    changed.loc[changed["role"] == "design", "error"] = 0.0
    without, now = bands.band_table(changed), bands.band_table(frame)
    # Perfect design points leave every band to the check points; real ones can only widen them.
    assert (now["band"] >= without["band"] - 1e-12).all()
    assert (without["from_regime"].str.contains("floored") == False).all()  # noqa: E712


def test_a_design_point_floors_its_regimes_band():
    # Four check points give a band of their worst, 0.04; a design point of the same regime missing by
    # 0.5 (in-sample, so the model does no better on new points) floors it; one of another regime does not.
    df = pd.DataFrame({"point": list("abcdef"), "kind": ["peak"] * 6,
                       "role": ["check"] * 4 + ["design"] * 2, "table": ["measured"] * 6,
                       "phase": ["decode"] * 6, "bound": ["latency"] * 4 + ["latency", "throughput"],
                       "error": [0.01, 0.02, 0.03, 0.04, -0.5, 0.9]})
    table = bands.band_table(df).set_index(["table", "phase", "bound"])
    assert table.loc[("measured", "decode", "latency"), "band"] == pytest.approx(0.5)
    assert table.loc[("measured", "decode", "latency"), "from_regime"].endswith("floored by design point e")
    # The throughput regime has no check point of its own: its band falls back to (measured, decode),
    # 0.04, and is floored by its own design point f.
    assert table.loc[("measured", "decode", "throughput"), "band"] == pytest.approx(0.9)
    # An untested table kind takes the worst error of any point, design ones included.
    assert table.loc[("default", "decode", "latency"), "band"] == pytest.approx(0.9)
    out = bands.leave_one_out(df)
    # a's band from the other three check points is untested (too few): their worst, floored by any design point.
    assert out["loo_band"].iloc[0] == pytest.approx(0.9)
    assert out["loo_band"].iloc[4] == pytest.approx(0.04)  # e's own band leaves e out


def test_the_one_request_regime_prints_its_design_points_miss(frame):
    # TensorRT-LLM's one-request H200 decode is a design point the model still misses by ~65%; a
    # latency-bound decode step on a measured table must not print a narrower band than that.
    point = frame.set_index("point").loc["trtllm_h200_min_latency"]
    band, _, src = bands.lookup("measured", "decode", "latency")
    assert band >= abs(point["error"]) - 1e-6 and "trtllm_h200_min_latency" in src


def test_predictions_carry_their_regimes_band():
    h800 = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=128)
    b200 = grounded.decode("DeepSeek-V3", "B200", batch=128, kv_len=4096, ep=8)
    one = grounded.decode("DeepSeek-V3", "H200", batch=0.125, kv_len=2048, ep=8, attn_tp=8)
    assert h800["regime"] == "measured/decode/throughput"
    assert b200["regime"] == "derived/decode/throughput"
    assert one["regime"] == "measured/decode/latency"
    assert b200["error_band"] > h800["error_band"]


def test_points_need_a_role_and_a_date(tmp_path, monkeypatch):
    text = (DATA / "validation" / "points.csv").read_text()
    bad = text.replace(",peak,design,", ",peak,maybe,", 1)
    path = tmp_path / "points.csv"
    path.write_text(bad)
    monkeypatch.setattr(validation, "_points_path", lambda: path)
    with pytest.raises(ValueError, match=r"points.csv, row 1: field 'role'"):
        validation.load_points()
    path.write_text(text.replace(",design,2026-11-23,", ",design,23/11/2026,", 1))
    with pytest.raises(ValueError, match=r"field 'added'"):
        validation.load_points()


# ---- the derived table ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["B200", "RTX4090"])
def test_shipped_derived_table_is_what_the_rule_gives(name):
    # Derived rows from published best cases over the H800 curve (the RTX 4090's: no kernel timed on the
    # part; B200's with its measured dispatch/combine rows kept).
    shipped = (DATA / "efficiency" / f"{name}.csv").read_text()
    assert shipped == derive_table.render(name)  # stale: python -m dsperf.model.derive_table {name}
    assert grounded.table_kind(name) == "derived"


def test_derived_rows_name_both_sources_and_stay_under_the_roofline():
    rows = grounded.read_table_rows(DATA / "efficiency" / "B200.csv")
    b200 = grounded.load_device("B200", "corrected")
    # Every compute row is derived but the NVFP4 experts', and the dispatch/combine rows are measured
    # (benchmarks/tables/build_b200.py).
    comm = [r for r in rows if r["family"].startswith(("dispatch", "combine"))]
    assert len(comm) == 6 and all(r["basis"] == "measured" and r["link_gbps"] == 900 and "DeepEP" in r["source"]
                                  for r in comm)
    moe = [r for r in rows if r["family"] == "grouped_fp4"]
    assert len(moe) == 50 and all(r["basis"] == "measured" and "flashinfer" in r["source"] for r in moe)
    rows = [r for r in rows if r not in comm]
    assert all(r["basis"] == "derived" and r["source"] and r["source2"] for r in rows if r not in moe)
    for r in rows:
        assert 0 < derive_table._efficiency(r, b200) <= 1.0 + 1e-9, r


def test_the_nvfp4_expert_rows_are_flashinfers_fused_block_split_by_work():
    """Each published fused-MoE time (FlashInfer's B200 table, and PR #4985's B300 runs) is two rows at
    the shape uniform routing gives (the B300's: the experts it printed), the gate-up GEMM two thirds of
    it and the down GEMM one third, and they replace the derived rows at those widths whole
    (derive_table.render)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_b200", ROOT / "benchmarks" / "tables" / "build_b200.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    rows = [r for r in grounded.read_table_rows(DATA / "efficiency" / "B200.csv") if r["family"] == "grouped_fp4"
            and r.get("measured_on") != "B300"]
    assert b.experts_touched(1, 256) == 8 and b.experts_touched(16, 16) == 16 and b.experts_touched(4096, 256) == 256
    for tokens, local, ms in b.FLASHINFER_FUSED_MOE:
        g = b.experts_touched(tokens, local)
        pair = [r for r in rows if r["groups"] == g and r["m"] == pytest.approx(8 * tokens / g, abs=1e-4)]
        assert sorted((r["n"], r["latency_us"]) for r in pair) == [
            (4096.0, pytest.approx(ms * 1e3 * 2 / 3, abs=1e-3)), (7168.0, pytest.approx(ms * 1e3 / 3, abs=1e-3))]
    # The B300 runs: at the experts they printed, read against the B300's roofline.
    b300 = [r for r in grounded.read_table_rows(DATA / "efficiency" / "B200.csv")
            if r["family"] == "grouped_fp4" and r.get("measured_on") == "B300"]
    assert len(b300) == 2 * len(b.FLASHINFER_FUSED_MOE_B300) and all("PR #4985" in r["source"] for r in b300)
    for tokens, active, ms in b.FLASHINFER_FUSED_MOE_B300:
        pair = [r for r in b300 if r["groups"] == active and r["m"] == pytest.approx(max(tokens, active) / active,
                                                                                      abs=1e-4)]
        assert sorted((r["n"], r["latency_us"]) for r in pair) == [
            (4096.0, pytest.approx(ms * 1e3 * 2 / 3, abs=1e-3)), (7168.0, pytest.approx(ms * 1e3 / 3, abs=1e-3))]
    # No derived row is left at the measured widths.
    assert {(r["n"], r["k"]) for r in rows + b300} == {(4096.0, 7168.0), (7168.0, 2048.0)}
    derived = derive_table.derive("B200")
    assert any(r["family"] == "grouped_fp4" for r in derived)   # the rule still gives them; render drops them


def test_blackwell_devices_read_the_derived_table():
    for dev in ("B200", "GB200", "B300", "GB300"):
        assert grounded.table_kind(dev) == "derived"
        r = grounded.decode("DeepSeek-V3", dev, batch=64, kv_len=2048, ep=8)
        big = grounded.calls_frame(r)
        big = big[big["ms_per_step"] > 0.05 * r["step_ms"]]
        compute = big[~big["family"].str.startswith(("dispatch", "combine", "allreduce"))]
        assert compute["from_table"].all(), compute  # no call over 5% of the step at the flat default


def _big_compute_calls(r):
    """A priced step's compute calls (not communication, not elementwise) that take over 5% of it."""
    calls = grounded.calls_frame(r)
    big = calls[calls["ms_per_step"] > 0.05 * r["step_ms"]]
    return big[~big["family"].map(lambda f: SM.is_comm_family(f) or f == "elementwise")]


# Every shipped device: the RTX 4090, the last without a table, got its derived rows on 2026-11-28.
@pytest.mark.parametrize("dev", sorted(grounded.list_devices()))
def test_no_call_over_5_percent_of_a_step_runs_at_the_flat_default(dev):
    # DP attention with EP8 and the one-node TP8 layout; decode with BF16 and with FP8 attention math, and
    # prefill. Before 2026-11-28 MLA decode and prefill ran at the default on MI300X and MI325X (up to 14% of
    # a prefill step), MI355X's prefill attention core (11%), the Ascend's grouped matmul (68% of a decode
    # step) and its prefill attention core (17%), and FP8 attention math on every device (5-27%).
    for layout in (dict(ep=8), dict(ep=8, attn_tp=8, moe_tp=8)):
        for r in (grounded.decode("DeepSeek-V3", dev, batch=64, kv_len=4096, **layout),
                  grounded.decode("DeepSeek-V3", dev, batch=64, kv_len=4096, kv_fp8=True, attn_fp8=True, **layout),
                  grounded.prefill("DeepSeek-V3", dev, **layout)):
            compute = _big_compute_calls(r)
            assert len(compute) and compute["from_table"].all(), compute


def test_no_bf16_call_of_a_one_request_step_runs_at_the_flat_default():
    # TensorRT-LLM's B200 min-latency layout with its published weights (BF16 attention): the BF16
    # projections read the derived gemm_bf16 rows (before them, wo and wq_a took 5-7% of the step
    # at the default).
    r = grounded.decode("DeepSeek-V3", "B200", batch=0.125, kv_len=2048, ep=8, attn_tp=8, moe_tp=4, mtp=3,
                        mtp_accepted=1.82, overlap="none", weight_dtype="fp4_bf16")
    calls = grounded.calls_frame(r)
    assert calls.loc[calls["family"] == "gemm_bf16", "from_table"].all()
    compute = _big_compute_calls(r)
    assert compute["from_table"].all(), compute


def test_hopper_bf16_rows_are_the_h200_measurements_read_against_the_h200():
    # benchmarks/tables/import_measured_bf16.py copies them; each keeps the GPU that timed it.
    table = [r for r in grounded.read_table_rows(DATA / "efficiency" / "H800.csv") if r["family"] == "gemm_bf16"]
    timed = [r for r in grounded.read_table_rows(DATA / "devices" / "measured" / "H200.csv")
             if r["family"] == "gemm_bf16"]
    assert len(table) == len(timed) == 110
    key = lambda r: (r["m"], r["n"], r["k"], r["latency_us"], r["source"])  # noqa: E731
    assert sorted(map(key, table)) == sorted(map(key, timed))
    assert all(r["measured_on"] == "H200" for r in table)
    # The derived B200 row of a sibling-timed row scales that row's efficiency on the H200.
    h200, b200 = (grounded.load_device(d, "corrected") for d in ("H200", "B200"))
    anchor = next(a for a in derive_table.read_anchors() if a["table"] == "B200" and "gemm_bf16" in a["families"])
    # The reference: the best compute-bound row (the anchor is a TFLOPS figure), on the H200.
    best = max(e for e, r in ((derive_table._efficiency(r, h200), r) for r in table)
               if e <= 1.0 and not derive_table._memory_bound("gemm_bf16", r, h200))
    derived = {(r["m"], r["n"], r["k"]): r for r in derive_table.derive("B200") if r["family"] == "gemm_bf16"}
    for r in table[:5]:
        want = min(1.0, derive_table._efficiency(r, h200) * anchor["published"] / b200.fp16_tflops / best)
        got = derive_table._efficiency(derived[(r["m"], r["n"], r["k"])], b200)
        assert got == pytest.approx(want, rel=1e-3)  # the derived latency is rounded up to the ns
        assert "measured_on" not in derived[(r["m"], r["n"], r["k"])]


@pytest.mark.parametrize("text, field", [
    ("family,source,m,n,k,latency_us,basis\ngemm_fp8,x,1,2,3,4,derived\n", "source2"),
    ("family,source,m,n,k,latency_us,basis\ngemm_fp8,x,1,2,3,4,guessed\n", "basis"),
])
def test_bad_basis_names_file_row_and_field(tmp_path, text, field):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"t.csv, row 1 \(line 2\): field '{field}'"):
        grounded.read_table_rows(path)


def test_bad_anchor_names_file_row_and_field(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("table,families,published,peak_field,source\nB200,gemm_fp8,fast,fp8_tflops,x\n")
    with pytest.raises(ValueError, match=r"a.csv, row 1: field 'published'"):
        derive_table.read_anchors(path)


@pytest.mark.parametrize("ratio", [0.0, 1.2, -0.5])
def test_clock_ratio_outside_0_1_is_refused(ratio):
    with pytest.raises(ValueError, match="sustained_clock_ratio"):
        grounded.load_device("B200", "corrected", sustained_clock_ratio=ratio)


# The input guard (no published figure, nor a ratio of two, is an input) is tests/test_input_guard.py.


# ---- fixed costs: the TP all-reduce by message size, and MoE under TP attention ----------------------

def test_tp_allreduce_is_priced_from_its_latency_table():
    r = grounded.decode("DeepSeek-V3", "H200", batch=0.125, kv_len=2048, ep=8, attn_tp=8, moe_tp=2, mtp=3,
                        mtp_accepted=1.82, overlap="none")
    calls = grounded.calls_frame(r).set_index("kernel")
    ar = calls.loc["attn_allreduce"]
    # One request with 3 drafts on 8 GPUs: 4 tokens x 7168 x 2 bytes, priced at the table's latency
    # for that message (5.7-7.8 us measured on 8 x H100; H200 has the same NVLink), not ~0 by bandwidth.
    t, h200 = grounded.kernel_tables("H200"), grounded.load_device("H200")
    assert ar["from_table"] and ar["us"] == pytest.approx(t.allreduce_us(8, 4 * 7168 * 2, h200)["us"])
    assert 5.7 < ar["us"] < 16.7
    small, big = t.allreduce_us(8, 4096, h200), t.allreduce_us(8, 8e6, h200)
    assert big["us"] > small["us"] and big["clamped"] and not small["clamped"]
    # A link twice as fast halves only the part above the fixed cost.
    fast = t.allreduce_us(8, 8e6, grounded.load_device("B200"))["us"]  # NVLink 5: 900 GB/s
    assert fast == pytest.approx(5.9 + (big["us"] - 5.9) / 2)
    # Past the largest row (1 MiB), a message's further bytes are ring traffic at NCCL's share of
    # the link: 8 MB on 8 GPUs moves 2 x 7/8 x (8e6 - 1 MiB) bytes at 370 GB/s, not at the
    # small-message kernels' slope (11.7 us per 512 KiB, about 45 GB/s of message).
    ring = 2 * 7 / 8 * (8e6 - 1048576) / (450 * SM.large_allreduce_link_share * 1e3)
    assert big["us"] == pytest.approx(33.8 + ring)
    assert big["us"] < 33.8 + 11.7 * (8e6 - 1048576) / 524288


def test_moe_under_tp_attention_on_the_same_gpus_needs_no_dispatch():
    common = dict(batch=4, kv_len=2048, attn_tp=8, moe_tp=2)
    same = grounded.calls_frame(grounded.decode("DeepSeek-V3", "H200", ep=8, **common))
    wider = grounded.calls_frame(grounded.decode("DeepSeek-V3", "H200", ep=16, **common))
    assert "moe_allreduce" in set(same["kernel"]) and not {"dispatch", "combine"} & set(same["kernel"])
    assert {"dispatch", "combine"} <= set(wider["kernel"]) and "moe_allreduce" not in set(wider["kernel"])


def test_allreduce_rows_need_a_message_size(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("family,source,tp,latency_us\nallreduce,x,8,5.9\n")
    with pytest.raises(ValueError, match=r"n.csv, row 1 \(line 2\): field .gbps.: an allreduce row needs gbps, or latency_us "
                                         r"and bytes"):
        grounded.read_table_rows(path)


def test_amd_tables_read_measured_gemm_and_moe_rows_and_derived_attention_rows():
    """MI300X's and MI325X's table: aiter's GEMMs and routed experts, timed (measured rows), and since
    2026-11-28 MLA decode and prefill rows derived from aiter's published best cases on MI300X (anchors.csv:
    PR #3188's FP8 decode, the MHA README's causal forward). Every core family has rows, so the table is
    `derived` and the attention core is priced from rows, not at the default efficiency."""
    rows = grounded.read_table_rows(DATA / "efficiency" / "MI300X.csv")
    families = {r["family"] for r in rows}
    assert families == {"gemm_fp8", "grouped_masked", "grouped_contiguous", "mla_decode", "mla_prefill"}
    measured = [r for r in rows if r["basis"] == "measured"]
    assert {r["family"] for r in measured} == {"gemm_fp8", "grouped_masked", "grouped_contiguous"}
    assert all("aiter" in r["source"] for r in measured)
    derived = [r for r in rows if r["basis"] == "derived"]
    assert {r["family"] for r in derived} == {"mla_decode", "mla_prefill"}
    assert all("H800" in r["source"] and "ROCm/aiter" in r["source2"] for r in derived)
    # The experts' rows: aiter's fused MoE tuned on MI325X (304 CUs) at the EP8 shape, in both families.
    moe = [r for r in rows if r["family"] in ("grouped_masked", "grouped_contiguous")]
    assert len(moe) == 60 and all(r["measured_on"] == "MI325X" and "gfx942 (MI325X, 304 CUs)" in r["source"]
                                  and "a8w8_blockscale_tuned_fmoe_ds_v3.csv (commit 84493f0" in r["source"] for r in moe)
    for dev in ("MI300X", "MI325X"):
        assert grounded.table_kind(dev) == "derived"
        r = grounded.decode("DeepSeek-V3", dev, batch=64, kv_len=2048, ep=8)
        calls = grounded.calls_frame(r)
        assert calls.loc[calls["family"].isin(["gemm_fp8", "grouped_masked", "mla_decode"]), "from_table"].all()
        assert r["regime"].startswith("derived/")
        p = grounded.calls_frame(grounded.prefill("DeepSeek-V3", dev, ep=8))
        assert p.loc[p["family"] == "mla_prefill", "from_table"].all()


@pytest.mark.parametrize("name", ["MI300X", "MI355X"])
def test_shipped_amd_tables_are_what_the_rule_gives(name):
    # The importers write the measured rows (benchmarks/tables/import_aiter_*.py); the rule then adds the
    # derived attention rows and keeps the importers' rows and notes.
    shipped = (DATA / "efficiency" / f"{name}.csv").read_text()
    assert shipped == derive_table.render(name)  # stale: python -m dsperf.model.derive_table {name}
    assert "# Kernel latencies of ROCm/aiter's tuned FP8 block-scale GEMMs" in shipped


def test_a_partial_table_prints_the_partial_band(tmp_path):
    """A table without rows for a core family is `partial` (no shipped table is, since the Ascend 910C's
    grouped rows of 2026-11-28): here an MI300X whose table holds its GEMM rows only. The partial regime
    has no check point of its own now, so its band falls back to the worst check error of all."""
    gemms = [line for line in (DATA / "efficiency" / "MI300X.csv").read_text().splitlines(keepends=True)
             if not line.startswith(("#", "mla_", "grouped_"))]
    (tmp_path / "gemms.csv").write_text("".join(gemms))
    toml = (DATA / "devices" / "MI300X.toml").read_text()
    assert 'kernel_table = "MI300X"' in toml
    (tmp_path / "mi300x_gemms.toml").write_text(toml.replace('kernel_table = "MI300X"', 'kernel_table = "gemms.csv"'))
    dev = str(tmp_path / "mi300x_gemms.toml")
    assert grounded.table_kind(dev) == "partial"
    r = grounded.decode("DeepSeek-V3", dev, batch=64, kv_len=2048, ep=8)
    calls = grounded.calls_frame(r)
    assert calls.loc[calls["family"] == "gemm_fp8", "from_table"].all()
    assert not calls.loc[calls["family"].isin(["grouped_masked", "mla_decode"]), "from_table"].any()
    assert r["regime"].startswith("partial/") and r["band_regime"].startswith("worst of all")
    assert r["error_band"] == pytest.approx(max(bands.lookup(k, "decode", "throughput")[0] for k in bands.TABLE_KINDS))


def test_mi355x_fused_moe_rows_load_with_their_sources():
    # aiter's tuned FP8 block-scale fused MoE at DeepSeek-V3 expert shapes, measured on gfx950
    # (benchmarks/tables/import_aiter_fmoe.py): one set of measurements in both grouped families.
    rows = grounded.read_table_rows(DATA / "efficiency" / "MI355X.csv")
    moe = [r for r in rows if r["family"] in ("grouped_masked", "grouped_contiguous")]
    assert len(moe) == 80 and all("a8w8_blockscale_tuned_fmoe_ds_v3.csv (commit 84493f0" in r["source"]
                                  and "gfx950 (MI355X, 256 CUs)" in r["source"] for r in moe)
    assert {r["k"] for r in moe if r["n"] == 7168} == {256, 512}  # TP8 and TP4 down projections
    tables = grounded.kernel_tables("MI355X")
    assert tables.rows("grouped_masked") == tables.rows("grouped_contiguous") == 40
    for phase, fam in (("decode", "grouped_masked"), ("prefill", "grouped_contiguous")):
        r = (grounded.decode("DeepSeek-V3", "MI355X", batch=64, kv_len=4096, ep=8) if phase == "decode"
             else grounded.prefill("DeepSeek-V3", "MI355X", ep=8))
        calls = grounded.calls_frame(r)
        assert calls.loc[calls["family"] == fam, "from_table"].all()
    # The prefill attention core reads rows derived from aiter's causal forward on MI355X (anchors.csv).
    assert calls.loc[calls["family"] == "mla_prefill", "from_table"].all()
    # aiter's 304-CU DeepSeek fmoe rows were measured on MI325X: MI300X's table (which MI325X reads too)
    # holds them as it holds the MI325X GEMM rows, each read against the roofline of the GPU that timed it.
    assert grounded.kernel_tables("MI300X").rows("grouped_masked") == 30


def test_a_band_is_described_as_the_range_of_the_published_figure():
    # error = predicted / published - 1 within +/- b: published between 1 / (1 + b) and 1 / (1 - b) x predicted.
    assert bands.describe(0.5) == "+/- 50%: the published figure 0.67x to 2x the prediction"
    assert "to 33x" in bands.describe(0.97)
    assert bands.describe(1.2).endswith("to any multiple of the prediction")
    assert bands.describe(float("nan")) == "no band"
    for bad in (-0.1, "0.5", None, True):
        with pytest.raises(ValueError, match="band must be"):
            bands.describe(bad)
    with pytest.raises(ValueError, match="table must be one of measured"):
        bands.serving_bands("guessed")
