"""Properties the cost model must keep in both modes."""
import numpy as np
import pytest

import dsperf

MODES = ["as_published", "corrected"]
DEVICES = ["H800", "H20", "H20_3e", "H100", "H200", "B200", "RTX4090"]


@pytest.mark.parametrize("mode", MODES)
def test_overlap_never_exceeds_sequential(mode):
    for tp, dp in ((4, 8), (8, 4), (1, 8), (2, 4)):
        df = dsperf.prefill("DeepSeek-V3", DEVICES, 4383, 0.563, tp=tp, dp=dp, mode=mode)
        assert (df["sum_overlap_ms"] <= df["sum_ms"] + 1e-12).all()
    d = dsperf.decode_sweep("DeepSeek-V3", DEVICES, batch=[1, 8, 32, 128, 512], tp=[0, 1, 4, 8], mode=mode)
    assert (d["tpot_overlap_ms"] <= d["tpot_ms"] + 1e-12).all()


@pytest.mark.parametrize("mode", MODES)
def test_decode_time_grows_with_batch_and_length(mode):
    d = dsperf.decode_sweep("DeepSeek-V3", DEVICES, batch=[1, 2, 8, 32, 64, 128, 256, 512],
                            seq_len=[512, 1024, 4383, 16384], tp=[1, 4, 8], mode=mode)
    for _, g in d.groupby(["GPU", "tp", "seq_len"], observed=True):
        assert np.all(np.diff(g["tpot_ms"].to_numpy()) >= -1e-12)
    for _, g in d.groupby(["GPU", "tp", "batch"], observed=True):
        assert np.all(np.diff(g.sort_values("seq_len")["tpot_ms"].to_numpy()) >= -1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_prefill_time_grows_with_length(mode):
    sums = [dsperf.prefill("DeepSeek-V3", ["H800"], s, 0.5, 4, 8, mode=mode)["sum_ms"].iloc[0]
            for s in (256, 1024, 4383, 16384)]
    assert sums == sorted(sums) and sums[0] < sums[-1]


@pytest.mark.parametrize("mode", MODES)
def test_tp8_compute_never_exceeds_tp4(mode):
    for s in (128, 1024, 4383, 32768):
        mla = dsperf.prefill_mla("DeepSeek-V3", DEVICES, s, 0.5, (4, 8), mode=mode)
        for gpu in mla.index:
            r4 = dsperf._C.prefill_mla(dsperf.load_model(), dsperf.load_device(gpu, mode), s, 0.5, 4, mode)
            r8 = dsperf._C.prefill_mla(dsperf.load_model(), dsperf.load_device(gpu, mode), s, 0.5, 8, mode)
            assert r8["compute_ms"] / 8 <= r4["compute_ms"] / 4
    d4 = dsperf.prefill("DeepSeek-V3", DEVICES, 4383, 0.563, tp=4, dp=8, mode=mode)
    d8 = dsperf.prefill("DeepSeek-V3", DEVICES, 4383, 0.563, tp=8, dp=4, mode=mode)
    for col in ("shared_expert_ms", "routed_expert_ms"):
        assert (d8[col] <= d4[col]).all()


@pytest.mark.parametrize("mode", MODES)
def test_batch_limit_shrinks_with_experts_and_fp16(mode):
    t = dsperf.decode_batch_limits("DeepSeek-V3", ["H800", "H20", "H20_3e"], mode=mode)
    cols = ["EP320", "EP144", "EP72", "EP34"]  # 2, 3, 5, 9 experts per GPU
    assert (np.diff(t[cols].to_numpy(), axis=1) < 0).all()
    for gpu in ("H800", "H20", "H20_3e"):
        for absorb in ("", "_Absorb"):
            assert (t.loc[f"{gpu}_FP16{absorb}", cols] < t.loc[f"{gpu}_FP8{absorb}", cols]).all()
        assert (t.loc[f"{gpu}_FP8_Absorb", cols] < t.loc[f"{gpu}_FP8", cols]).all()


def test_more_memory_more_batch():
    t = dsperf.decode_batch_limits("DeepSeek-V3", ["H20", "H20_3e"])
    assert (t.loc["H20_3e_FP8"] > t.loc["H20_FP8"]).all()


@pytest.mark.parametrize("mode", MODES)
def test_scaleout_bandwidth_only_moves_communication(mode):
    fast = dsperf.prefill("DeepSeek-V3", [dsperf.load_device("H20", mode, scaleout_gbps=50)], mode=mode).iloc[0]
    slow = dsperf.prefill("DeepSeek-V3", [dsperf.load_device("H20", mode, scaleout_gbps=12.5)], mode=mode).iloc[0]
    assert slow["dispatch_ms"] == pytest.approx(4 * fast["dispatch_ms"])
    assert slow["mla_ms"] == fast["mla_ms"] and slow["routed_expert_ms"] == fast["routed_expert_ms"]


def test_corrected_prefill_computes_only_uncached_tokens():
    cold = dsperf.prefill("DeepSeek-V3", ["H800"], 4383, 0.0, mode="corrected").iloc[0]
    warm = dsperf.prefill("DeepSeek-V3", ["H800"], 4383, 0.9, mode="corrected").iloc[0]
    assert warm["routed_expert_ms"] == pytest.approx(cold["routed_expert_ms"] * 0.1)
    assert warm["sum_ms"] < cold["sum_ms"]
    # As published, the cache hit only discounts the KV down-projection.
    pub_cold = dsperf.prefill("DeepSeek-V3", ["H800"], 4383, 0.0, mode="as_published").iloc[0]
    pub_warm = dsperf.prefill("DeepSeek-V3", ["H800"], 4383, 0.9, mode="as_published").iloc[0]
    assert pub_warm["routed_expert_ms"] == pub_cold["routed_expert_ms"]


def test_corrected_decode_is_bounded_by_weight_streaming_at_small_batch():
    d = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[1, 2], tp=1, mode="corrected")
    # At batch 1 and 2 the routed experts cost the time to read their weights, not their FLOPs.
    assert d["routed_expert_ms"].iloc[0] == pytest.approx(d["routed_expert_ms"].iloc[1])
    pub = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[1, 2], tp=1, mode="as_published")
    assert pub["routed_expert_ms"].iloc[1] == pytest.approx(2 * pub["routed_expert_ms"].iloc[0])
    assert d["tpot_ms"].iloc[0] > pub["tpot_ms"].iloc[0]


def test_corrected_decode_allreduce_follows_batch():
    d = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[8, 64], tp=4, mode="corrected")
    assert d["allreduce_ms"].iloc[1] == pytest.approx(8 * d["allreduce_ms"].iloc[0])
    pub = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[8, 64], tp=4, mode="as_published")
    assert pub["allreduce_ms"].iloc[1] == pub["allreduce_ms"].iloc[0]  # sized by seq_len as published


@pytest.mark.parametrize("mode", MODES)
def test_sweep_equals_pointwise(mode):
    grid = dsperf.decode_sweep("DeepSeek-V3", ["H800", "H20"], batch=[16, 100], seq_len=[2000, 4383],
                               decode_len=[500, 1210], tp=[0, 2], ep=[72, 144], redundant_experts=[32, 32],
                               kv_fp8=[True, False], mode=mode)
    assert len(grid) == 2 * 2 * 2 * 2 * 2 * 2 * 2
    for _, row in grid.sample(20, random_state=0).iterrows():
        one = dsperf.decode("DeepSeek-V3", [row["GPU"]], row["seq_len"], row["decode_len"], [row["batch"]],
                            tp=int(row["tp"]), ep=int(row["ep"]), redundant_experts=int(row["redundant_experts"]),
                            kv_fp8=bool(row["kv_fp8"]), mode=mode).iloc[0]
        for col in ("tpot_ms", "tpot_overlap_ms", "tokens_per_gpu_s", "batch_limit", "time_budget_ms"):
            assert row[col] == pytest.approx(one[col], rel=1e-12)
        assert row["mla_tp"] == one["mla_tp"]


@pytest.mark.parametrize("model", ["DeepSeek-V3", "DeepSeek-V2", "DeepSeek-V2-Lite", "Kimi-K2"])
@pytest.mark.parametrize("mode", MODES)
def test_every_shipped_model_runs(model, mode):
    pre = dsperf.prefill(model, DEVICES, mode=mode)
    dec = dsperf.decode(model, DEVICES, batch_sizes=[1, 64], ep=8, redundant_experts=0, mode=mode)
    assert np.isfinite(pre.select_dtypes("number").to_numpy()).all()
    assert (pre["sum_ms"] > 0).all() and (dec["tpot_ms"] > 0).all()
