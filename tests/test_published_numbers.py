"""Every figure of published-numbers.md section A (the seed analysis), from the public API,
to the precision the seed prints it."""
import math

import pytest

import dsperf
from dsperf import _C

SEQ, HIT, DECODE = 4383, 0.563, 1210


def printed(value, digits):
    """The value as the seed prints it with floatfmt '.{digits}f'."""
    return round(value, digits)


def test_single_token_mla_flops(v3):
    assert _C.mla_flops(1, 1, v3, 0) == pytest.approx((0.37429248, 0.139329536, 0.234962944), abs=1e-12)
    assert _C.mla_absorbed_flops(1, 1, v3, 0) == pytest.approx((1.196572672, 0.256770048, 0.939802624), abs=1e-12)


def cut(value, digits):
    """The value's leading digits, as the seed quotes some figures in its prose."""
    return math.floor(value * 10**digits) / 10**digits


@pytest.mark.parametrize("row, shown, digits, expected", [
    ("absorbed/standard, 1 token", printed, 3, 3.197),
    # 3.302898...: the seed's prose quotes the leading digits.
    ("absorbed/standard, prefill 4989/4989", cut, 4, 3.3028),
    ("absorbed/standard, decode q=1 kv=4989 cache rate 1", printed, 3, 0.015),
    ("absorbed MLA parameters (M)", printed, 6, 598.147072),
])
def test_flops_summary(v3, row, shown, digits, expected):
    assert shown(dsperf.flops_summary(v3).loc[row, "value"], digits) == expected


@pytest.mark.parametrize("block, per_block_m, total, unit, digits", [
    ("MLA", 187.17, None, None, None),
    ("DenseMLP", 396.41, 1.19, 1e9, 2),
    ("Expert", 44.05, 656.6, 1e9, 1),
    ("Gate", 1.83, 106.14, 1e6, 2),
    ("Embedding", 926.67, 926.67, 1e6, 2),
    ("Output", 926.67, 926.67, 1e6, 2),
])
def test_parameter_table(v3, block, per_block_m, total, unit, digits):
    t = dsperf.parameter_table(v3, mode="as_published")
    assert printed(t.loc[block, "params_per_block"] / 1e6, 2) == per_block_m
    if total is not None:
        assert printed(t.loc[block, "params_total"] / unit, digits) == total


def test_parameter_totals_within_seed_rounding(v3):
    # The seed prints MLA x61 = 11.41B and SUM = 671.16B: sums of its own rounded row figures.
    # From its quoted per-block counts they are 11.417B and 671.18B (docs/DEVIATIONS.md, S1).
    t = dsperf.parameter_table(v3, mode="as_published")
    assert abs(t.loc["MLA", "params_total"] / 1e9 - 11.41) < 0.01
    # SUM is the total the seed quotes (ModelConfig.quoted_total_params, from the model's data file).
    assert printed(t.loc["SUM", "params_total"] / 1e9, 2) == 671.16
    assert printed(t.iloc[:-1]["params_total"].sum() / 1e9, 2) == 671.18   # its rows' exact sum
    # The seed's own rounded row totals do add up to its printed SUM.
    assert printed(11.41 + 1.19 + 656.6 + 0.10614 + 2 * 0.92667, 2) == 671.16


def test_kv_cache_per_token(v3):
    kv = dsperf.kv_cache_per_token(v3)
    assert v3.kv_cache_width == 576 and v3.n_layers == 61
    assert printed(kv.loc["FP16", "kb_per_token"], 2) == 68.62
    assert printed(kv.loc["FP8", "kb_per_token"], 2) == 34.31


PREFILL_MLA = {  # GEMM_FP8, ATTN_FP16, total (TP1), AR, TP4, TP8
    "H800": (0.536, 4.729, 5.265, 0.352, 1.669, 1.011),
    "H20": (3.364, 29.671, 33.035, 0.176, 8.435, 4.306),
}


@pytest.mark.parametrize("gpu", sorted(PREFILL_MLA))
def test_prefill_mla(gpu):
    t = dsperf.prefill_mla("DeepSeek-V3", [gpu], SEQ, HIT, mode="as_published").loc[gpu]
    got = tuple(printed(t[c], 3) for c in ("gemm_ms", "attn_ms", "TP1", "allreduce_ms", "TP4", "TP8"))
    assert got == PREFILL_MLA[gpu]


@pytest.mark.parametrize("tp, dp, column, expected", [
    (4, 8, "dense_mlp_ms", {"H800": 3.156, "H20": 19.801}),
    (4, 8, "shared_expert_ms", {"H800": 0.088, "H20": 0.550}),
    (4, 8, "routed_expert_ms", {"H800": 0.701, "H20": 4.400}),
    (8, 4, "shared_expert_ms", {"H800": 0.044, "H20": 0.275}),
    (8, 4, "routed_expert_ms", {"H800": 0.351, "H20": 2.200}),
    (4, 8, "dispatch_ms", {"H800": 0.529, "H20": 0.529}),
    (4, 8, "combine_ms", {"H800": 1.057, "H20": 1.057}),
    (8, 4, "dispatch_ms", {"H800": 0.264, "H20": 0.264}),
    (8, 4, "combine_ms", {"H800": 0.529, "H20": 0.529}),
    (4, 8, "sum_overlap_ms", {"H800": 167.802, "H20": 934.839}),
    (4, 8, "sum_ms", {"H800": 259.803, "H20": 1026.840}),
    (8, 4, "sum_overlap_ms", {"H800": 106.754, "H20": 551.784}),
    (8, 4, "sum_ms", {"H800": 152.754, "H20": 597.784}),
])
def test_prefill_components(tp, dp, column, expected):
    df = dsperf.prefill("DeepSeek-V3", ["H800", "H20"], SEQ, HIT, tp=tp, dp=dp, mode="as_published")
    assert {g: printed(df.loc[g, column], 3) for g in expected} == expected


@pytest.mark.parametrize("tp, dp, expected", [
    (4, 8, {"H800": (52240.1, 33741.0), "H20": (9377.0, 8536.9)}),
    (8, 4, {"H800": (41057.0, 28693.1), "H20": (7943.3, 7332.1)}),
])
def test_prefill_tokens_per_node(tp, dp, expected):
    df = dsperf.prefill("DeepSeek-V3", ["H800", "H20"], SEQ, HIT, tp=tp, dp=dp, mode="as_published")
    got = {g: (printed(df.loc[g, "tokens_per_s_node_overlap"], 1), printed(df.loc[g, "tokens_per_s_node"], 1))
           for g in expected}
    assert got == expected


@pytest.mark.parametrize("scaleout, dispatch, combine, sum_overlap, total", [
    (50, 0.529, 1.057, 934.839, 1026.840),
    (25, 1.057, 2.115, 934.839, 1118.841),
    (12.5, 2.115, 4.230, 934.839, 1302.842),
])
def test_prefill_scaleout_variants(scaleout, dispatch, combine, sum_overlap, total):
    h20 = dsperf.load_device("H20", "as_published", scaleout_gbps=scaleout)
    r = dsperf.prefill("DeepSeek-V3", [h20], SEQ, HIT, tp=4, dp=8, mode="as_published").iloc[0]
    assert (printed(r["dispatch_ms"], 3), printed(r["combine_ms"], 3)) == (dispatch, combine)
    assert (printed(r["sum_overlap_ms"], 3), printed(r["sum_ms"], 3)) == (sum_overlap, total)


def test_prefill_kv_transfer():
    df = dsperf.prefill("DeepSeek-V3", ["H800", "H20"], SEQ, HIT, tp=4, dp=8, mode="as_published")
    got = {g: (printed(df.loc[g, "kv_transfer_gbps_overlap"], 1), printed(2 * df.loc[g, "kv_transfer_gbps_overlap"], 1),
               printed(df.loc[g, "kv_transfer_gbps"], 1), printed(2 * df.loc[g, "kv_transfer_gbps"], 1))
           for g in ("H800", "H20")}
    assert got == {"H800": (28.7, 57.4, 18.5, 37.1), "H20": (5.2, 10.3, 4.7, 9.4)}


# The seed's decode TL;DR: (label, batch) -> TPOT(O), TPOT, TPS(O), TPS, Total(O), Total.
DECODE_TLDR = {
    ("H800(TP1)", 32): (9.858, 17.023, 101.442, 58.746, 3246.137, 1879.856),
    ("H800(TP1)", 64): (19.716, 34.045, 50.721, 29.373, 3246.137, 1879.856),
    ("H800(TP1)", 128): (39.431, 68.090, 25.360, 14.686, 3246.137, 1879.856),
    ("H20(TP4)", 32): (35.367, 42.532, 28.275, 23.512, 904.803, 752.383),
    ("H20_3e(TP8)", 32): (29.613, 36.778, 33.768, 27.190, 1080.591, 870.082),
    ("H20_3e(TP8)", 64): (49.005, 63.334, 20.406, 15.789, 1306.001, 1010.516),
}
COLUMNS = ("tpot_overlap_ms", "tpot_ms", "tps_user_overlap", "tps_user", "tokens_per_gpu_s_overlap",
           "tokens_per_gpu_s")


def test_decode_tldr_rows_and_figures():
    df = dsperf.decode("DeepSeek-V3", ["H800", "H20", "H20_3e"], SEQ, DECODE, [32, 64, 128, 256], mode="as_published")
    df["label"] = df["GPU"] + "(TP" + df["mla_tp"].astype(str) + ")"
    kept = df[df["tps_user_overlap"] > 20]  # the seed's TPS > 20 filter picks exactly its TL;DR columns
    assert sorted(zip(kept["label"], kept["batch"].astype(int))) == sorted(DECODE_TLDR)
    for _, row in kept.iterrows():
        got = tuple(printed(row[c], 3) for c in COLUMNS)
        assert got == DECODE_TLDR[(row["label"], int(row["batch"]))]


def test_decode_sweep_matches_tldr():
    for (label, bs), expected in DECODE_TLDR.items():
        gpu = label.split("(")[0]
        r = dsperf.decode_sweep("DeepSeek-V3", [gpu], batch=[bs], seq_len=[SEQ], decode_len=[DECODE], mode="as_published").iloc[0]
        assert tuple(printed(r[c], 3) for c in COLUMNS) == expected
        assert f"{gpu}(TP{r['mla_tp']})" == label


def test_absorbed_matches_reference_formula_for_long_kv(v3):
    # Decode with q=1 and every key cached: the absorbed form does ~1.5% of the standard work.
    ratio = _C.mla_absorbed_flops(1, 4989, v3, 1)[0] / _C.mla_flops(1, 4989, v3, 1)[0]
    assert math.isclose(ratio, 0.01533, rel_tol=1e-3)


def _seed_decoding_batchsize(mem_gb, seq_len, decode_len, tp, expert_num, absorb, kvcache_fp16):
    """The seed's _decoding_batchsize (section 3.2), transcribed with its literals."""
    mla = 598.14 if absorb else 187.17
    expert_mem, others_parameter = 44.05, 2.91
    kv_cache = (seq_len + decode_len) * (512 + 64) * 61 * tp * (2 if kvcache_fp16 else 1)
    mem = mem_gb * 0.9 - others_parameter - mla * 61 / tp / 1024
    mem -= expert_mem * (61 - 3) * expert_num / 1024
    return mem * 1024 * 1024 * 1024 / kv_cache


def test_batch_size_table_prints_as_the_seeds_code(v3):
    """The 3.2 table the seed omitted, printed as its own code would (floatfmt ".0f"): every cell."""
    t = dsperf.decode_batch_limits(v3, mode="as_published")
    slots = {"EP320": 2, "EP144": 3, "EP72": 5, "EP34": 9}   # routed per GPU + the shared expert, as the seed
    for name, row in t.iterrows():
        device = name.split("_FP")[0]
        mem = dsperf.load_device(device, "as_published").mem_gb
        for col, n in slots.items():
            want = _seed_decoding_batchsize(mem, 4383, 1210, 1, n, name.endswith("_Absorb"), "_FP16" in name)
            assert f"{row[col]:.0f}" == f"{want:.0f}", (name, col, row[col], want)
