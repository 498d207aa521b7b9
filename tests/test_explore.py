"""The deployment explorer (dsperf.explore, `dsperf explore`)."""
import contextlib
import io
import re

import numpy as np
import pandas as pd
import pytest

from dsperf import explore, grounded
from dsperf.cli import main as cli_main

SMALL = dict(ep=(8, 32, 128), attn_tp=(1, 3, 8), batch=(1.0, 16.0, 64.0, 256.0, 1024.0))


@pytest.fixture(scope="module")
def frame():
    return explore.search(devices=["H800", "H20"], isl=4096, osl=1024, **SMALL)


def test_one_row_per_configuration_infeasible_ones_kept_with_a_reason(frame):
    # devices x ep x tp x mtp x kv x overlap x batch
    assert len(frame) == 2 * 3 * 3 * 3 * 2 * 3 * 5
    bad_tp = frame[frame["attn_tp"] == 3]
    assert len(bad_tp) and (bad_tp["reason"] == "attention TP must divide the node (or span whole nodes) and the heads").all()
    assert not bad_tp["feasible"].any() and bad_tp["tpot_ms"].isna().all()
    too_big = frame[(frame["batch"] == 1024) & (frame["attn_tp"] == 1)]
    assert (too_big["reason"] == "KV cache does not fit beside the weights").all()
    assert frame.loc[frame["feasible"], "tokens_per_gpu_s"].gt(0).all()


def test_rows_equal_the_grounded_model(frame):
    rows = frame[frame["feasible"]].sample(25, random_state=1)
    for r in rows.itertuples():
        g = grounded.decode("DeepSeek-V3", str(r.device), batch=r.batch, kv_len=4096 + 512, ep=int(r.ep),
                            attn_tp=int(r.attn_tp), redundant_experts=int(r.redundant_experts),
                            overlap=str(r.overlap), mtp=int(r.mtp), mtp_accepted=float(r.mtp_accepted),
                            kv_fp8=bool(r.kv_fp8))
        assert g["tokens_per_gpu_s"] == pytest.approx(r.tokens_per_gpu_s, rel=1e-12)
        assert g["batch_limit"] == pytest.approx(r.batch_limit, rel=1e-12)


def test_a_grid_priced_in_parallel_work_units_equals_the_grounded_model():
    # Large enough for the threaded path (>= 4096 rows), one device and one MTP: the C++ grid cuts
    # the batches into spans of doubling chains (work units) and prices each batch's EP sizes back
    # to back; every row must still be the one grounded.decode gives for its configuration.
    batch = tuple(float(b) for b in range(1, 301))
    df = explore.search(devices=["H200"], isl=2048, osl=512, ep=(8, 16, 64), mtp=((1, 0.8),), batch=batch)
    assert len(df) == 1 * 3 * 4 * 1 * 2 * 3 * 300
    rows = df[df["feasible"]].sample(30, random_state=3)
    for r in rows.itertuples():
        g = grounded.decode("DeepSeek-V3", "H200", batch=r.batch, kv_len=2048 + 256, ep=int(r.ep),
                            attn_tp=int(r.attn_tp), redundant_experts=int(r.redundant_experts),
                            overlap=str(r.overlap), mtp=1, mtp_accepted=0.8, kv_fp8=bool(r.kv_fp8))
        assert g["step_ms"] == pytest.approx(r.step_ms, rel=1e-12)


def test_parts_priced_once_per_point_hold_for_every_ep_size():
    # The attention and dense stages and the LM heads are priced once per (batch, TP, KV format)
    # at its first feasible EP size and read by the others (EpFreeParts): with TP 8 the EP sizes 4
    # and 12 are infeasible, 16 and 24 are not, and the experts share the attention group at 8.
    batch = tuple(float(b) for b in range(1, 200))
    df = explore.search(devices=["H800"], isl=1024, osl=256, ep=(4, 8, 12, 16, 24), attn_tp=(1, 8),
                        mtp=((2, 1.5),), batch=batch)
    priced = df[df["step_ms"].notna()]  # EP 8 is priced though its KV cache does not fit an H800
    rows = priced.groupby(["ep", "attn_tp"]).sample(4, random_state=5)
    assert set(rows.loc[rows["attn_tp"] == 8, "ep"]) == {8, 16, 24}  # 4 and 12: not multiples of the TP
    for r in rows.itertuples():
        g = grounded.decode("DeepSeek-V3", "H800", batch=r.batch, kv_len=1024 + 128, ep=int(r.ep),
                            attn_tp=int(r.attn_tp), redundant_experts=int(r.redundant_experts),
                            overlap=str(r.overlap), mtp=2, mtp_accepted=1.5, kv_fp8=bool(r.kv_fp8))
        assert g["step_ms"] == r.step_ms


def test_serving_columns(frame):
    f = frame[frame["feasible"]]
    assert (f["tokens_per_gpu_s_served"] < f["tokens_per_gpu_s"]).all()  # prefill GPUs are counted
    assert (f["tpot_aggregated_ms"] > f["tpot_ms"]).all()
    assert np.allclose(f["tpot_with_ttft_ms"], (f["ttft_ms"] + 1024 * f["tpot_ms"]) / 1024)
    assert (f["cost_per_m_output_usd"] > 0).all() and (f["energy_j_per_output_token"] > 0).all()
    assert f["kernel_table"].all()
    # Aggregated serving: with one DP rank (attention TP over the whole EP group) a prompt holds only
    # its own GPU, the prefill share of each token (tpot x (1 + ratio)); more ranks hold more steps.
    one = f[(f["attn_tp"] == f["ep"]) & (f["kind"] == "ep")]
    assert len(one) and np.allclose(one["tpot_aggregated_ms"], one["tpot_ms"] * (1 + one["prefill_gpus_per_decode_gpu"]))
    many = f[(f["attn_tp"] == 1) & (f["ep"] >= 8)]
    assert len(many) and (many["tpot_aggregated_ms"] > many["tpot_ms"] * (1 + many["prefill_gpus_per_decode_gpu"])).all()
    assert np.allclose(f["tokens_per_gpu_s_aggregated"], f["batch"] / f["tpot_aggregated_ms"] * 1e3)  # a token per user per TPOT


def test_sla_filter_and_conventions(frame):
    ok = explore.meets_sla(frame, tpot_ms=50)
    assert len(ok) and (ok["tpot_ms"] <= 50).all() and ok["feasible"].all()
    strict = explore.meets_sla(frame, tpot_ms=50, convention="with_ttft")
    agg = explore.meets_sla(frame, tpot_ms=50, serving="aggregated")
    assert len(strict) < len(ok) and len(agg) < len(ok)
    assert len(explore.meets_sla(frame, ttft_ms=1e7)) == int(frame["feasible"].sum())


def test_pareto_frontier_is_undominated_and_dominates_the_rest(frame):
    ok = explore.meets_sla(frame, tpot_ms=80)
    f = explore.pareto(ok)
    x, y = ok["tps_user"].to_numpy(), ok["tokens_per_gpu_s_served"].to_numpy()
    for fx, fy in zip(f["tps_user"], f["tokens_per_gpu_s_served"]):
        assert not ((x >= fx) & (y >= fy) & ((x > fx) | (y > fy))).any()
    fx, fy = f["tps_user"].to_numpy(), f["tokens_per_gpu_s_served"].to_numpy()
    for a, b in zip(x, y):
        assert ((fx >= a) & (fy >= b)).any()
    cheap = explore.cost_frontier(ok)
    assert cheap["cost_per_m_output_usd"].is_monotonic_decreasing


def test_an_sla_nobody_meets_gives_an_empty_frontier_and_the_nearest(frame):
    ok = explore.meets_sla(frame, tpot_ms=0.5)
    assert ok.empty and explore.pareto(ok).empty
    near = explore.nearest(frame, tpot_ms=0.5, n=3)
    assert len(near) == 3 and (near["tpot_margin"] > 0).all()
    assert near["margin"].is_monotonic_increasing


@pytest.mark.parametrize("kwargs, name, exc", [
    (dict(devices=["H999"]), "H999", ValueError),
    (dict(gpu_hour_usd=-1.0), "gpu_hour_usd", ValueError),
    (dict(ep=(0,)), "ep", ValueError),
    (dict(ep=(True,)), "ep", TypeError),
    (dict(batch=()), "batch", ValueError),
    (dict(isl=0), "isl", ValueError),
    (dict(overlap=("three_batch",)), "overlap", ValueError),
    (dict(mtp=((1, 2.0),)), "mtp", ValueError),
    (dict(kv_fp8=("yes",)), "kv_fp8", TypeError),
])
def test_bad_input_names_the_argument(kwargs, name, exc):
    with pytest.raises(exc, match=name):
        explore.search(**{**dict(devices=["H800"], batch=(16.0,)), **kwargs})


def test_bad_sla_arguments():
    df = explore.search(devices=["H800"], batch=(16.0,), ep=(32,))
    with pytest.raises(ValueError, match="tpot_ms"):
        explore.meets_sla(df, tpot_ms=-5)
    with pytest.raises(ValueError, match="convention"):
        explore.meets_sla(df, tpot_ms=5, convention="average")


def test_cli_explore_writes_csv_and_figures(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(["explore", "--devices", "H800,B200", "--tpot-ms", "50", "--out", str(tmp_path)]) == 0
    text = out.getvalue()
    assert "Pareto frontier" in text and "no kernel table for" not in text
    df = pd.read_csv(tmp_path / "explore.csv")
    assert {"frontier", "best"} == set(df["set"]) and (df["tpot_ms"] <= 50).all()
    assert (tmp_path / "frontier.png").stat().st_size > 10_000 and (tmp_path / "cost.png").stat().st_size > 10_000


def test_cli_explore_unmeetable_sla_prints_the_nearest(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(["explore", "--devices", "H800", "--tpot-ms", "1", "--out", str(tmp_path)]) == 0
    assert "frontier is empty" in out.getvalue() and "tpot_margin" in out.getvalue()


def test_cli_explore_bad_price():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli_main(["explore", "--gpu-hour-usd", "-2"]) == 2
    assert "gpu-hour-usd" in err.getvalue()


def test_request_rate_plans_instances():
    df = explore.search(devices=["H800"], ep=(32, 144), batch=(64.0,), request_rate=100.0, isl=4096, osl=1024)
    f = df[df["feasible"]]
    assert len(f) and (f["decode_instances"] >= 1).all() and (f["prefill_instances"] >= 1).all()
    # Enough decode instances for the output tokens the rate asks for.
    assert (f["decode_instances"] * f["gpus"] * f["tokens_per_gpu_s"] >= 100 * 1024 - 1e-6).all()
    assert (f["total_gpus"] == f["decode_instances"] * f["gpus"] + f["prefill_instances"] * f["prefill_ep"]).all()
    with pytest.raises(ValueError, match="request_rate"):
        explore.search(devices=["H800"], batch=(64.0,), request_rate=-1.0)


def test_attention_ffn_disaggregation_rows():
    df = explore.search(devices=["H800"], ep=(16, 64), batch=(32.0, 128.0), afd=True, afd_attn_gpus=(16, 32),
                        afd_micro_batches=(2,), mtp=((0, 0.0),), kv_fp8=(False,), attn_tp=(1,))
    afd = df[df["kind"] == "afd"]
    assert len(afd) == 2 * 2 * 2  # expert GPUs x attention GPUs x batch
    assert (afd["gpus"] == afd["attn_gpus"] + afd["ep"]).all() and (afd["overlap"] == "ping_pong").all()
    f = afd[afd["feasible"]]
    assert len(f) and (f["tokens_per_gpu_s"] > 0).all()
    # Per GPU, tokens/s = attention GPUs x batch / step / all GPUs.
    assert np.allclose(f["tokens_per_gpu_s"], f["attn_gpus"] * f["batch"] / (f["step_ms"] / 1e3) / f["gpus"])
    # A bigger expert cluster for the same attention cluster: each expert GPU gets fewer rows.
    a = f[(f["attn_gpus"] == 32) & (f["batch"] == 128)].set_index("ep")
    assert a.loc[64, "step_ms"] <= a.loc[16, "step_ms"] * 1.5
    ep_rows = df[df["kind"] == "ep"]
    assert (ep_rows["gpus"] == ep_rows["ep"]).all()


def test_attention_ffn_disaggregation_reasons():
    """The AFD rows' reasons, set on the Python side, carry the texts of explore.hpp's codes."""
    df = explore.search(devices=["H800"], ep=(16, 512), batch=(0.5, 32.0), afd=True, afd_attn_gpus=(16,),
                        afd_micro_batches=(2,), mtp=((0, 0.0),), kv_fp8=(False,), attn_tp=(1,))
    afd = df[df["kind"] == "afd"].set_index(["ep", "batch"])
    assert afd.loc[(16, 0.5), "reason"] == "fewer than one token per GPU per micro-batch"
    assert afd.loc[(512, 32.0), "reason"] == "EP exceeds routed + redundant experts"
    assert afd.loc[(16, 32.0), "reason"] == "" and afd.loc[(16, 32.0), "feasible"]


def test_prefill_layout_follows_the_ttft_target():
    opts = explore.prefill_options(devices=["H800"], isl=4096)
    assert len(opts) == 4 * 4 and (opts["ttft_ms"] > 0).all()
    loose = explore.search(devices=["H800"], ep=(32,), batch=(64.0,))
    tight = explore.search(devices=["H800"], ep=(32,), batch=(64.0,), ttft_ms=float(opts["ttft_ms"].min()) * 1.01)
    assert (tight["ttft_ms"] <= loose["ttft_ms"]).all()
    best = opts.loc[opts["prefill_tokens_per_gpu_s"].idxmax()]
    row = loose.iloc[0]
    assert row["prefill_ep"] == best["prefill_ep"]
    assert row["ttft_ms"] == pytest.approx(best["ttft_ms"] + row["kv_transfer_ms"], rel=1e-12)


def test_ttft_includes_the_kv_handoff(frame):
    f = frame[frame["feasible"]]
    assert (f["kv_transfer_ms"] > 0).all()
    # FP8 caches hand over fewer bytes than BF16 ones.
    assert f.loc[f["kv_fp8"], "kv_transfer_ms"].max() < f.loc[~f["kv_fp8"], "kv_transfer_ms"].min()
    assert ((f["ttft_ms"] - f["kv_transfer_ms"]).groupby(f["device"], observed=True).nunique() == 1).all()


def test_weight_dtype_dense_tp_redundancy_and_eplb_axes():
    from dsperf.ep.eplb import zipf_load

    base = dict(devices=["H800"], ep=(32,), attn_tp=(1,), mtp=((0, 0.0),), kv_fp8=(False,), overlap=("two_batch",),
                batch=(64.0,))
    df = explore.search(**base, weight_dtype=("fp8", "bf16"), dense_tp=(1, 8), redundant_experts={32: (0, 32)})
    assert len(df) == 2 * 2 * 2
    fp8, bf16 = df[df["weights_fp8"]], df[~df["weights_fp8"]]
    assert (bf16["weights_gib"].to_numpy() > 1.8 * fp8["weights_gib"].to_numpy()).all()
    assert (bf16["tokens_per_gpu_s"].to_numpy() < fp8["tokens_per_gpu_s"].to_numpy()).all()
    assert set(df["dense_tp"]) == {1, 8} and set(df["redundant_experts"]) == {0, 32}
    # A skewed routing load: EPLB with redundant experts leaves a smaller imbalance, and more tokens/s.
    skew = explore.search(**base, redundant_experts={32: (0, 32)}, routing_load=zipf_load(256, 500_000, alpha=1.0))
    by_r = skew.set_index("redundant_experts")
    assert by_r.loc[32, "imbalance"] < by_r.loc[0, "imbalance"]
    assert by_r.loc[32, "tokens_per_gpu_s"] > by_r.loc[0, "tokens_per_gpu_s"]
    with pytest.raises(ValueError, match="weight_dtype"):
        explore.search(**base, weight_dtype=("int4",))
    # NVFP4 experts: infeasible on Hopper (no FP4 tensor cores), priced as the grounded model on Blackwell.
    fp4 = explore.search(**{**base, "devices": ["H800", "B200"]}, weight_dtype=("fp4",))
    h800, b200 = fp4[fp4["device"] == "H800"], fp4[fp4["device"] == "B200"]
    assert (h800["reason"] == "NVFP4 weights need FP4 tensor cores").all() and not h800["feasible"].any()
    assert b200["feasible"].all() and b200["experts_fp4"].all() and b200["weights_fp8"].all()
    g = grounded.decode("DeepSeek-V3", "B200", batch=64, ep=32, redundant_experts=32, kv_len=4096 + 512, weight_dtype="fp4")
    assert b200["tokens_per_gpu_s"].iloc[0] == pytest.approx(g["tokens_per_gpu_s"], rel=1e-12)
    # The FP4-v2 checkpoints (wo in NVFP4 too): the same rule, and the grounded model's figures.
    v2 = explore.search(**{**base, "devices": ["H800", "B200"]}, weight_dtype=("fp4_v2",))
    assert not v2[v2["device"] == "H800"]["feasible"].any()
    b200_v2 = v2[v2["device"] == "B200"]
    assert b200_v2["wo_fp4"].all() and b200_v2["experts_fp4"].all() and not b200_v2["weights_fp8"].any()
    g2 = grounded.decode("DeepSeek-V3", "B200", batch=64, ep=32, redundant_experts=32, kv_len=4096 + 512,
                         weight_dtype="fp4_v2")
    assert b200_v2["tokens_per_gpu_s"].iloc[0] == pytest.approx(g2["tokens_per_gpu_s"], rel=1e-12)
    with pytest.raises(ValueError, match="routing_load"):
        explore.search(**base, routing_load=zipf_load(256, 1000), imbalance=1.5)
    # The search's rows are the grounded model's, for these axes too.
    same = grounded.decode("DeepSeek-V3", "H800", batch=64, ep=32, kv_len=4096 + 512, weight_dtype="bf16", dense_tp=8)
    row = df[~df["weights_fp8"] & (df["dense_tp"] == 8) & (df["redundant_experts"] == 0)].iloc[0]
    assert same["tokens_per_gpu_s"] == pytest.approx(row["tokens_per_gpu_s"], rel=1e-12)
    with pytest.raises(ValueError, match="dense_tp"):
        grounded.decode("DeepSeek-V3", "H800", batch=64, ep=32, dense_tp=3)


def test_moe_tp_axis():
    """MoE TP x EP layouts are searched like the others: their rows are the grounded model's, and a
    split that does not divide the node or the EP size is kept with its reason."""
    df = explore.search(devices=["H200"], ep=(8, 12), attn_tp=(1,), moe_tp=(1, 2, 8), mtp=((0, 0.0),),
                        kv_fp8=(False,), overlap=("none",), batch=(16.0,))
    assert len(df) == 2 * 3 and set(df["moe_tp"]) == {1, 2, 8}
    bad = df[(df["ep"] == 12) & (df["moe_tp"] == 8)]
    assert list(bad["reason"]) == ["MoE TP must divide the node and the EP size"] and bad["tps_user"].isna().all()
    row = df[(df["ep"] == 8) & (df["moe_tp"] == 2)].iloc[0]
    same = grounded.decode("DeepSeek-V3", "H200", batch=16, ep=8, moe_tp=2, overlap="none", kv_len=4096 + 512)
    assert same["tokens_per_gpu_s"] == pytest.approx(row["tokens_per_gpu_s"], rel=1e-12)
    with pytest.raises(ValueError, match="moe_tp"):
        explore.search(devices=["H200"], moe_tp=(0,))


def test_cli_explore_says_which_devices_have_no_price(tmp_path):
    # Ascend 910C has no row in data/prices.csv: its rows keep no cost, and the output says so
    # (the cost figure would otherwise leave the device out without a word).
    def run(*extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert cli_main(["explore", "--devices", "Ascend910C", "--top", "2", "--out", str(tmp_path), *extra]) == 0
        return out.getvalue()

    text = run()
    assert "no price for Ascend910C" in text and "no board power for Ascend910C" in text
    # Its empty cells print empty, never as nan (the notes above say why they are empty).
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    assert "no price for" not in run("--gpu-hour-usd", "1.5")


def test_small_pages_turns_numpy_huge_page_advice_off_and_back():
    from dsperf.model import _alloc

    switch = _alloc._hugepage_switch()
    if switch is None:
        pytest.skip("this numpy has no huge-page switch")
    before = switch(True)
    try:
        with _alloc.small_pages():
            assert switch(False) is False  # off inside the block (the switch returns the old value)
        assert switch(True) is True  # back on after it
        with pytest.raises(RuntimeError):
            with _alloc.small_pages():
                raise RuntimeError("inside")
        assert switch(True) is True  # and after an error inside
    finally:
        switch(before)
