"""The grounded model (dsperf.grounded) and its validation against published deployments
(dsperf.validation, data/validation/points.csv, docs/VALIDATION.md)."""
import csv
import io
import math
import re
from importlib import resources

import numpy as np
import pytest

from dsperf import _C, grounded, validation
from dsperf.cli import main as cli_main


@pytest.fixture(scope="module")
def table():
    return validation.validate()


def test_every_point_is_predicted(table):
    points = validation.load_points()
    assert len(table) == len(points) >= 15
    assert table["predicted"].map(math.isfinite).all()
    assert (table["predicted"] > 0).all()
    peaks = table[table["kind"] == "peak"]
    assert (peaks["error"] - (peaks["predicted"] / peaks["published"] - 1)).abs().max() < 1e-12
    # Daily averages are utilisation, not error.
    daily = table[table["kind"] == "daily_average"]
    assert len(daily) >= 2 and daily["error"].isna().all() and (daily["utilisation"] > 0).all()


def test_every_point_names_its_source_and_settings():
    for p in validation.load_points():
        assert p["source"] and p["device"] and p["published"] > 0, p["point"]
        assert p["kind"] in ("peak", "daily_average"), p["point"]


def test_deepseek_profile_decode_within_10_percent(table):
    row = table.set_index("point").loc["deepseek_profile_decode"]
    assert abs(row["error"]) <= 0.10


def test_deepseek_profile_prefill_within_10_percent(table):
    row = table.set_index("point").loc["deepseek_profile_prefill"]
    assert abs(row["error"]) <= 0.10


def test_median_error_over_every_peak_point_within_15_percent(table):
    assert validation.summary(table)["median_abs_error"] <= 0.15


def test_decode_points_median_error_within_15_percent(table):
    decode = table[(table["kind"] == "peak") & (table["phase"] == "decode")]
    assert len(decode) >= 8
    assert decode["error"].abs().median() <= 0.15


def test_every_point_beyond_30_percent_names_a_missing_input(table):
    s = validation.summary(table)
    assert s["beyond_30pct_unexplained"] == [], s
    assert len(s["beyond_30pct"]) <= 7, s


def test_cli_validate_csv_has_one_row_per_point_and_the_error_recomputes():
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        assert cli_main(["validate", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    from dsperf.model.validation_latency import load_latency_points

    # The peak rows, then the latency section's under the same header.
    assert len(rows) == len(validation.load_points()) + len(load_latency_points())
    for col in ("point", "source", "published", "predicted", "error"):
        assert col in rows[0]
    for r in rows:
        if r["error"]:
            # Each number is printed at 6 significant digits, so predicted / published carries up to
            # 1e-5 of itself in rounding, and the printed error 5e-6 of itself.
            ratio = float(r["predicted"]) / float(r["published"])
            assert float(r["error"]) == pytest.approx(ratio - 1, abs=1e-5 + 1e-5 * ratio)


def _data_numbers(text: str) -> set[float]:
    return {float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)}


def test_no_deployment_figure_is_an_input():
    # Every efficiency comes from a kernel benchmark: no published deployment figure appears as a
    # number in the efficiency tables (sources' text excluded: only the CSV fields before it).
    published = {p["published"] for p in validation.load_points()}
    folder = resources.files("dsperf") / "data" / "efficiency"
    for f in folder.iterdir():
        if not f.name.endswith(".csv"):
            continue
        for row in grounded.read_table_rows(f):
            values = {v for k, v in row.items() if isinstance(v, float)}
            assert not (values & published), (f.name, row)


def test_efficiency_rows_all_have_sources():
    folder = resources.files("dsperf") / "data" / "efficiency"
    names = [f.name for f in folder.iterdir() if f.name.endswith(".csv")]
    assert {"H800.csv", "H20.csv", "network.csv"} <= set(names)
    for name in names:
        rows = grounded.read_table_rows(folder / name)
        assert rows and all(r["source"] for r in rows)


def test_a_row_is_read_against_the_gpu_that_timed_it():
    """The MI300X table holds rows timed on MI325X (aiter's commit says so): each names its GPU, and a
    memory-bound row timed on the faster-memory MI325X prices slower on the MI300X than it would as
    an MI300X measurement."""
    rows = grounded.read_table_rows(resources.files("dsperf") / "data" / "efficiency" / "MI300X.csv")
    rows = [r for r in rows if r["basis"] == "measured"]   # the derived attention rows are read on the GPU priced
    on = {r.get("measured_on") for r in rows}
    assert on == {"MI300X", "MI325X"}
    assert all(f"({r['measured_on']}, 304 CUs)" in r["source"] for r in rows)
    mi300x, mi325x = (grounded.load_device(d, "corrected") for d in ("MI300X", "MI325X"))
    assert mi325x.mem_bw_gbps > mi300x.mem_bw_gbps
    shape = grounded.SM.KernelShape(m=1, n=3072, k=1536, fp8=True)   # a weight read: memory-bound

    def efficiency(timed_on):
        t = grounded.SM.KernelTables(0.6)
        t.add_latency("gemm_fp8", shape, 10.0, timed_on)
        return t.lookup("gemm_fp8", shape, mi300x)["value"]

    assert efficiency(mi325x) < efficiency(mi300x)


@pytest.mark.parametrize("text, field", [
    ("family,source,m,n,k,latency_us\ngemm_int4,x,1,2,3,4\n", "family"),
    ("family,m,n,k,latency_us\ngemm_fp8,1,2,3,4\n", "source"),
    ("family,source,m,n,k,latency_us\ngemm_fp8,x,1,2,3,-4\n", "latency_us"),
    ("family,source,m,n,latency_us\ngemm_fp8,x,1,2,4\n", "k"),
    ("family,source,ep\ndispatch_ll,x,8\n", "gbps"),
    ("family,source,m,n,k,latency_us,dtype\ngemm_fp8,x,1,2,3,4,fp4\n", "dtype"),
    ("family,source,m,n,k,latency_us,measured_on\ngemm_fp8,x,1,2,3,4,MI999\n", "measured_on"),
])
def test_bad_table_names_file_row_and_field(tmp_path, text, field):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        grounded.read_table_rows(path)
    msg = str(e.value)
    assert "bad.csv" in msg and field in msg
    if field != "source" or "row" in msg:
        assert "row 1" in msg or "column" in msg


@pytest.mark.parametrize("kwargs, name, exc", [
    (dict(overlap="three_batch"), "overlap", ValueError),
    (dict(mtp=9), "mtp", ValueError),
    (dict(mtp=1, mtp_accepted=1.5), "mtp_accepted", ValueError),
    (dict(batch=0), "batch", ValueError),
    (dict(batch=True), "batch", TypeError),
    (dict(ep=128.0), "ep", TypeError),
    (dict(kv_fp8="false"), "kv_fp8", TypeError),
    (dict(imbalance=0.5), "imbalance", ValueError),
    (dict(attn_tp=3), "attn_tp", ValueError),
    (dict(kv_len=float("inf")), "kv_len", ValueError),
])
def test_bad_deployment_names_the_argument(kwargs, name, exc):
    with pytest.raises(exc, match=name):
        grounded.decode("DeepSeek-V3", "H800", **kwargs)


def test_cached_prefix_must_be_below_the_prompt():
    with pytest.raises(ValueError, match="cached_prefix"):
        grounded.prefill("DeepSeek-V3", "H800", prompt_len=1024, cached_prefix=1024)


def test_decode_physics():
    small = grounded.decode("DeepSeek-V3", "H800", batch=16, kv_len=4096, ep=128)
    large = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=128)
    assert large["tpot_ms"] > small["tpot_ms"]
    assert large["tokens_per_gpu_s"] > small["tokens_per_gpu_s"]
    fp8 = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=128, kv_fp8=True)
    assert fp8["step_ms"] < large["step_ms"] and fp8["kv_bytes_per_token"] < large["kv_bytes_per_token"]
    serial = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=128, overlap="none")
    assert serial["step_ms"] > large["step_ms"]
    h200 = grounded.decode("DeepSeek-V3", "H200", batch=128, kv_len=4096, ep=128)
    assert h200["step_ms"] < large["step_ms"]
    # MTP: more work per step, more tokens per step.
    mtp = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=128, mtp=1, mtp_accepted=0.85)
    assert mtp["step_ms"] > large["step_ms"] and mtp["tokens_per_step"] == pytest.approx(128 * 1.85)


def test_decode_memory_limit_uses_the_stored_weights():
    # DeepSeek ran 128 requests per H800 at EP128; the stored (not absorbed) MLA weights leave room.
    r = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4989, ep=128)
    assert r["fits_memory"] and r["batch_limit"] >= 128
    assert 15 < r["weights_gib"] < 40
    too_many = grounded.decode("DeepSeek-V3", "H800", batch=400, kv_len=4989, ep=128)
    assert not too_many["fits_memory"]


@pytest.mark.parametrize("kw", [dict(device="H800", ep=128, batch=128, kv_len=4989),
                                dict(device="B200", ep=8, attn_tp=8, moe_tp=2, weight_dtype="fp4_bf16", batch=4,
                                     kv_len=2048, kv_fp8=True, dense_tp=8, mem_fraction=0.85)])
def test_memory_alone_gives_the_memory_fields_decode_prices(kw):
    """grounded.memory computes a deployment's memory without pricing a kernel: the same figures as
    decode's memory fields, and its arguments are checked the same way."""
    alone, step = grounded.memory(**kw), grounded.decode(**kw)
    assert set(alone) == {"weights_gib", "kv_gib", "kv_bytes_per_token", "batch_limit", "fits_memory"}
    for key, value in alone.items():
        assert value == step[key], key
    with pytest.raises(ValueError, match="mem_fraction"):
        grounded.memory(**{**kw, "mem_fraction": 1.5})
    with pytest.raises(ValueError, match="ep"):
        grounded.memory(**{**kw, "ep": 0})


def test_prefill_physics():
    base = grounded.prefill("DeepSeek-V3", "H800", tokens=16384, prompt_len=4096, ep=32)
    longer = grounded.prefill("DeepSeek-V3", "H800", tokens=16384, prompt_len=16384, ep=32)
    assert longer["tokens_per_gpu_s"] < base["tokens_per_gpu_s"]  # attention grows with the prompt
    cached = grounded.prefill("DeepSeek-V3", "H800", tokens=16384, prompt_len=8192, cached_prefix=4096, ep=32)
    assert cached["step_ms"] > base["step_ms"]  # each new token attends to a longer context


def test_step_lists_every_kernel_of_a_layer():
    r = grounded.decode("DeepSeek-V3", "H800", batch=64, kv_len=2048, ep=64)
    kernels = set(grounded.calls_frame(r)["kernel"])
    for k in ("wq_a", "wq_b", "wkv_a", "q_absorb_w_uk", "attention_core", "o_absorb_w_uv", "wo", "gate", "dispatch",
              "shared_up", "shared_down", "experts_up", "experts_down", "combine", "dense_up", "dense_down", "lm_head"):
        assert k in kernels, k
    df = grounded.calls_frame(r)
    assert df["us"].gt(0).all()
    assert r["calls_from_table"] + r["calls_clamped"] + r["calls_default"] == len(df)
    assert 0 < r["error_band"] < 1


def test_device_without_a_table_prices_at_the_default_and_says_so(tmp_path):
    # A user's device file that names no kernel table (the shipped RTX 4090's, without its table).
    from dsperf.model.devices import _devices_dir, load_device
    text = (_devices_dir() / "RTX4090.toml").read_text()
    assert 'kernel_table = "RTX4090"' in text
    f = tmp_path / "MyCard.toml"
    f.write_text(text.replace('kernel_table = "RTX4090"', "").replace('name = "RTX4090"', 'name = "MyCard"')
                 .replace('aliases = ["4090", "RTX-4090"]', "aliases = []"))
    r = grounded.decode("DeepSeek-V3", load_device(str(f)), batch=4, kv_len=1024, ep=256)
    assert r["regime"].startswith("default/") and r["band_regime"].startswith("worst of all")
    compute = grounded.calls_frame(r)
    compute = compute[~compute["family"].str.startswith(("dispatch", "combine", "allreduce"))]
    assert not compute["from_table"].any()
    assert (compute["efficiency"] == grounded.DEFAULT_EFFICIENCY).all()


def test_cli_predict_prints_the_band():
    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        assert cli_main(["predict", "--phase", "decode", "--device", "H800", "--batch", "64"]) == 0
    text = out.getvalue()
    assert "tokens/s per GPU" in text and "+/-" in text and "attention_core" in text
    assert "has no kernel table" not in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["predict", "--device", "B200", "--weight-dtype", "fp4", "--kv-fp8", "--attn-fp8",
                         "--ep", "8", "--batch", "256", "--kv-len", "2048"]) == 0
    text = out.getvalue()
    assert "grouped_fp4" in text and "B200's kernel table holds derived rows" in text and "regime derived/decode" in text


def test_eplb_imbalance_from_a_routing_distribution():
    from dsperf.ep.eplb import zipf_load

    flat = zipf_load(256, 500_000, alpha=0.0, seed=1)
    skewed = zipf_load(256, 500_000, alpha=1.2, seed=1)
    assert grounded.eplb_imbalance(flat, ep=32, redundant_experts=32) < 1.05
    with_replicas = grounded.eplb_imbalance(skewed, ep=32, redundant_experts=32)
    without = grounded.eplb_imbalance(skewed, ep=32, redundant_experts=0)
    assert 1.05 < with_replicas < without
    slow = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=32, redundant_experts=32,
                           imbalance=with_replicas)
    fast = grounded.decode("DeepSeek-V3", "H800", batch=128, kv_len=4096, ep=32, redundant_experts=32)
    assert slow["step_ms"] > fast["step_ms"]
    with pytest.raises(ValueError, match="ep"):
        grounded.eplb_imbalance(skewed, ep=30)


@pytest.mark.parametrize("device", ["B300", "GB200", "GB300"])
def test_blackwell_devices_load_and_predict(device):
    r = grounded.decode("DeepSeek-V3", device, batch=64, kv_len=2048, ep=64)
    assert r["tokens_per_gpu_s"] > 0 and r["calls_default"] > 0


def test_moe_tensor_parallelism():
    """moe_tp splits each routed expert over GPUs of a node: the same weight bytes per GPU, twice the
    rows per GPU on half-width expert GEMMs. Every GPU of an expert group gets the token and returns
    its partial sum: the low-latency kernels' bytes double (between nodes), while inside a node a
    token goes to a GPU once, so at EP8 (its 8 experts already reach 7 GPUs by the tables' pair count)
    MoE TP2 sends no more. The busiest expert set carries the step: of 8 sets with 256 rows on
    average against 4 sets with 512."""
    kw = dict(device="H200", batch=32, kv_len=2048, ep=8, overlap="none")
    ep, tp = grounded.decode(**kw), grounded.decode(**kw, moe_tp=2)
    assert tp["weights_gib"] == pytest.approx(ep["weights_gib"], rel=1e-12)
    calls = {r["kernel"]: r for r in ep["calls"]}, {r["kernel"]: r for r in tp["calls"]}
    from dsperf.model.configs import load_model

    m, SM = load_model("DeepSeek-V3"), _C.step_model

    def skew(rows, sets):
        return SM.routing_skew(rows, sets, SM.routing_dispersion(m, sets, 0))

    assert calls[1]["experts_up"]["flops"] / calls[0]["experts_up"]["flops"] == \
        pytest.approx(skew(512, 4) / skew(256, 8), rel=1e-9)
    assert skew(512, 4) < skew(256, 8)  # fewer, fuller sets: a less busy busiest one
    assert calls[1]["dispatch"]["bytes"] == pytest.approx(calls[0]["dispatch"]["bytes"], rel=1e-12)
    assert calls[1]["combine"]["bytes"] == pytest.approx(calls[0]["combine"]["bytes"], rel=1e-12)
    wide = dict(kw, ep=16)
    ll = [{r["kernel"]: r for r in grounded.decode(**wide, moe_tp=t)["calls"]} for t in (1, 2)]
    assert ll[0]["dispatch"]["family"] == "dispatch_ll"
    assert ll[1]["dispatch"]["bytes"] == pytest.approx(2 * ll[0]["dispatch"]["bytes"], rel=1e-12)
    assert ll[1]["combine"]["bytes"] == pytest.approx(2 * ll[0]["combine"]["bytes"], rel=1e-12)
    assert calls[1]["experts_act_quant"]["bytes"] / calls[0]["experts_act_quant"]["bytes"] == \
        pytest.approx(skew(512, 4) / skew(256, 8), rel=1e-9)
    with pytest.raises(ValueError, match=r"moe_tp \(3\) must divide ep"):
        grounded.decode(**dict(kw, ep=8), moe_tp=3)
    with pytest.raises(ValueError, match="moe_tp"):
        grounded.decode(**kw, moe_tp=0)
    # 512 GPUs over 256 experts: possible only with the experts split in two.
    grounded.decode(batch=32, kv_len=2048, ep=512, moe_tp=2)
    with pytest.raises(ValueError, match="routed \\+ redundant experts"):
        grounded.decode(batch=32, kv_len=2048, ep=512)


def test_lockstep_with_one_rank_is_the_prefill_share():
    # One rank: every output token pays isl / osl prompt tokens at the chunk's rate.
    step, share = grounded.lockstep_step_ms(40.0, 100.0, 128.0, isl=1024, osl=2048, chunk_tokens=1024, ranks=1)
    assert share == pytest.approx(128 / 2048)
    assert step == pytest.approx(40.0 + 128 / 2048 * 100.0)
    # More lock-stepped ranks: more steps hold a chunk; a full rank holds every step.
    step8, share8 = grounded.lockstep_step_ms(40.0, 100.0, 128.0, isl=1024, osl=2048, chunk_tokens=1024, ranks=8)
    assert share8 == pytest.approx(1 - (1 - 128 / 2048) ** 8) and step8 > step
    _, full = grounded.lockstep_step_ms(40.0, 100.0, 4096.0, isl=1024, osl=2048, chunk_tokens=1024, ranks=1)
    assert full == 1.0
    # A prompt in two chunks: twice the chunk steps.
    _, two = grounded.lockstep_step_ms(40.0, 100.0, 128.0, isl=2048, osl=2048, chunk_tokens=1024, ranks=1)
    assert two == pytest.approx(2 * 128 / 2048)


def test_aggregated_serving():
    kw = dict(isl=1024, osl=2048, batch=128, max_num_tokens=1151, overlap="none")
    one = grounded.aggregated("DeepSeek-V3", "H200", ep=8, attn_tp=8, **kw)  # one DP rank: TP8 attention
    eight = grounded.aggregated("DeepSeek-V3", "H200", ep=8, **kw)           # eight lock-stepped DP ranks
    decode = grounded.decode("DeepSeek-V3", "H200", batch=128, kv_len=2048, ep=8, overlap="none")
    for r in (one, eight):
        assert 0 < r["steps_with_chunk"] < 1 and r["chunk_tokens"] == 1024
        assert r["step_ms"] > r["decode_step_ms"]
        assert r["tokens_per_gpu_s"] < decode["tokens_per_gpu_s"]
        assert r["tpot_ms"] == pytest.approx(r["step_ms"])  # no MTP: one token a step
    assert eight["steps_with_chunk"] > one["steps_with_chunk"]
    assert eight["decode_step_ms"] == pytest.approx(decode["step_ms"])
    # The published H200 point: within the table's e2e band.
    row = validation.validate().set_index("point").loc["trtllm_h200_max_throughput"]
    assert abs(row["error"]) <= 0.15


@pytest.mark.parametrize("kwargs, name", [
    (dict(isl=0), "isl"), (dict(osl=-1), "osl"), (dict(max_num_tokens=0), "max_num_tokens"),
    (dict(isl=float("nan")), "isl"), (dict(batch=0), "batch"),
])
def test_aggregated_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        grounded.aggregated("DeepSeek-V3", "H200", **kwargs)


def test_nvfp4_experts_on_blackwell():
    # NVFP4 work: half a byte per value plus an FP8 scale per 16, at the FP4 peak.
    w = grounded.SM.table_work("grouped_fp4", grounded.SM.KernelShape(m=16, n=4096, k=7168, groups=32))
    rows = 16 * 32
    assert w.flops == 2 * rows * 4096 * 7168
    assert w.bytes == pytest.approx((32 * 4096 * 7168 + rows * 7168) * (0.5 + 1 / 16) + rows * 4096 * 2)
    b200 = grounded.load_device("B200")
    assert b200.fp4_tflops == 9000
    assert grounded.SM.datasheet_roofline_s(w, b200) == pytest.approx(
        max(w.flops / 9000e12, w.bytes / (b200.mem_bw_gbps * 1e9)))
    kw = dict(batch=128, kv_len=2048, ep=8, overlap="none")
    fp8 = grounded.decode("DeepSeek-V3", "B200", **kw)
    fp4 = grounded.decode("DeepSeek-V3", "B200", weight_dtype="fp4", **kw)
    # Only the experts shrink: (256 / 8 routed + 1 shared) experts x 58 layers x 44.04M parameters.
    expert_params = 3 * 7168 * 2048
    saved = (1 - (0.5 + 1 / 16)) * (256 / 8 + 1) * 58 * expert_params / 2**30
    assert fp8["weights_gib"] - fp4["weights_gib"] == pytest.approx(saved, rel=1e-9)
    assert fp4["batch_limit"] > fp8["batch_limit"] and fp4["tokens_per_gpu_s"] > fp8["tokens_per_gpu_s"]
    calls = {c["kernel"]: c["family"] for c in fp4["calls"]}
    assert calls["experts_up"] == "grouped_fp4" and calls["shared_up"] == "gemm_fp4" and calls["wq_b"] == "gemm_fp8"
    with pytest.raises(ValueError, match="fp4_tflops"):
        grounded.decode("DeepSeek-V3", "H800", weight_dtype="fp4")
    with pytest.raises(ValueError, match="weight_dtype"):
        grounded.decode("DeepSeek-V3", "B200", weight_dtype="nvfp4")


def test_nvfp4_experts_with_bf16_weights_elsewhere():
    # nvidia/DeepSeek-R1-FP4 as stored: NVFP4 experts, the attention (and the rest) in BF16.
    kw = dict(batch=128, kv_len=2048, ep=8, overlap="none")
    fp4 = grounded.decode("DeepSeek-V3", "B200", weight_dtype="fp4", **kw)
    mixed = grounded.decode("DeepSeek-V3", "B200", weight_dtype="fp4_bf16", **kw)
    bf16 = grounded.decode("DeepSeek-V3", "B200", weight_dtype="bf16", **kw)
    calls = {c["kernel"]: c["family"] for c in mixed["calls"]}
    assert calls["experts_up"] == "grouped_fp4" and calls["shared_up"] == "gemm_fp4"
    assert calls["wq_a"] == calls["wq_b"] == calls["wo"] == calls["dense_up"] == "gemm_bf16"
    # The experts as fp4's, the FP8 weights outside them at two bytes a parameter: what BF16 adds
    # to FP8 less what it adds on the (256 / 8 routed + 1 shared) x 58 experts.
    assert fp4["weights_gib"] < mixed["weights_gib"] < bf16["weights_gib"]
    fp8 = grounded.decode("DeepSeek-V3", "B200", **kw)
    experts_gib = (256 / 8 + 1) * 58 * 3 * 7168 * 2048 / 2**30
    assert mixed["weights_gib"] - fp4["weights_gib"] == pytest.approx(
        bf16["weights_gib"] - fp8["weights_gib"] - experts_gib, rel=1e-9)
    with pytest.raises(ValueError, match="fp4_tflops"):
        grounded.decode("DeepSeek-V3", "H800", weight_dtype="fp4_bf16")
    for name, flags in grounded.WEIGHT_FORMATS.items():
        assert grounded.weight_dtype_of(*flags) == name


def _at_clock(tmp_path, name, ratio):
    text = (resources.files("dsperf") / "data" / "devices" / f"{name}.toml").read_text()
    path = tmp_path / f"{name}_{ratio}.toml"
    path.write_text(re.sub(r"(?m)^sustained_clock_ratio = .*$", f"sustained_clock_ratio = {ratio}", text))
    return str(path)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_sustained_clock_prices_the_flops_not_the_bytes(tmp_path, phase):
    """sustained_clock_ratio (the SM clock under a sustained full load over the clock the kernel
    tables ran at) prices each call's FLOPs at that clock, against the tables' efficiencies taken at
    the datasheet roofline: call by call, a compute-bound call (table row or default efficiency)
    takes 1 / ratio of its time at the tables' clock, a memory-bound call and a transfer the same."""
    h800 = grounded.load_device("H800")
    r = h800.sustained_clock_ratio
    assert r == pytest.approx(1600 / 1980, rel=1e-3)
    assert grounded.load_device("H20").sustained_clock_ratio == 1.0       # no published clock reading
    kw = dict(mtp=1, mtp_accepted=0.8, kv_fp8=True) if phase == "decode" else {}
    run = grounded.prefill if phase == "prefill" else grounded.decode
    now = grounded.calls_frame(run(device="H800", **kw)).set_index("kernel")
    boost = grounded.calls_frame(run(device=_at_clock(tmp_path, "H800", 1.0), **kw)).set_index("kernel")
    assert (now.index == boost.index).all()
    comm = now["family"].isin(["dispatch_normal", "combine_normal", "dispatch_low_latency", "combine_low_latency",
                               "all_reduce"]) | (now["flops"] == 0)
    fp8 = now["family"].str.contains("fp8") | now["family"].str.startswith("grouped")
    flops_s = now["flops"] / (fp8.map({True: h800.fp8_tflops, False: h800.fp16_tflops}) * 1e12)
    bytes_s = now["bytes"] / (h800.mem_bw_gbps * 1e9)
    # What the roofline says the clock does to each call: max(FLOPs at the boost clock, bytes) over
    # max(FLOPs at the sustained clock, bytes).
    expected = (np.maximum(flops_s, bytes_s) / np.maximum(flops_s / r, bytes_s)).where(~comm, 1.0)
    # Each compute call also pays the graph boundary (kGraphKernelGapUs), which no clock changes.
    gap = np.where(comm, 0.0, grounded.SM.graph_kernel_gap_us)
    ratio = (boost["us"] - gap) / (now["us"] - gap)
    assert (expected[~comm] == r).sum() >= 1 and (expected[~comm] == 1).sum() >= 1
    assert ratio.to_numpy() == pytest.approx(expected.to_numpy(), rel=1e-9)


@pytest.mark.parametrize("table_clock_mhz", [1830, 1980])
def test_profile_prefill_target_holds_whatever_clock_the_tables_ran_at(tmp_path, table_clock_mhz):
    """The tables' clock is not published: between the datasheet tensor peak's 1830 MHz and the
    1980 MHz maximum, with DeepSeek's ~1600 MHz sustained, the profile's prefill stays within 10%."""
    p = next(q for q in validation.load_points() if q["point"] == "deepseek_profile_prefill")
    p = dict(p, device=_at_clock(tmp_path, "H800", round(1600 / table_clock_mhz, 4)))
    assert abs(validation.predict_point(p) / p["published"] - 1) <= 0.10


def test_sustained_clock_must_lie_in_0_1(tmp_path):
    for bad in ("0", "1.5", "nan"):
        with pytest.raises(ValueError, match="sustained_clock_ratio"):
            grounded.load_device(_at_clock(tmp_path, "H800", bad))
    work = grounded.SM.table_work("gemm_fp8", grounded.SM.KernelShape(m=16, n=4096, k=7168))
    for bad in (0.0, 1.5, math.nan, -1.0):
        with pytest.raises(ValueError, match="clock_ratio"):
            grounded.SM.datasheet_roofline_s(work, grounded.load_device("H800"), bad)


def test_a_table_row_math_field_is_checked(tmp_path):
    path = tmp_path / "t.csv"
    head = "family,batch,kv_len,heads,dtype,math,latency_us,source\n"
    path.write_text(head + "mla_decode,1,1024,128,fp8,fp4,20,somewhere\n")
    with pytest.raises(ValueError, match=r"t.csv, row 1 \(line 2\): field 'math' must be fp8 or bf16"):
        grounded.read_table_rows(path)
    path.write_text("family,m,n,k,dtype,math,latency_us,source\ngemm_fp8,16,256,7168,fp8,fp8,10,somewhere\n")
    with pytest.raises(ValueError, match="field 'math' must be fp8 or bf16 on an attention row .* on gemm_fp8"):
        grounded.read_table_rows(path)
    path.write_text(head + "mla_decode,1,1024,128,fp8,fp8,20,somewhere\n")
    (row,) = grounded.read_table_rows(path)
    assert row["math"] == "fp8" and grounded.row_shape(row).fp8_math and "math=fp8" in grounded.row_label(row)


def test_fp8_attention_math():
    kw = dict(batch=64, kv_len=4096, ep=128, kv_fp8=True)
    cache_only = grounded.decode("DeepSeek-V3", "H800", **kw)
    fp8_math = grounded.decode("DeepSeek-V3", "H800", attn_fp8=True, **kw)
    core = {r["kernel"]: r for r in cache_only["calls"]}["attention_core"]
    core8 = {r["kernel"]: r for r in fp8_math["calls"]}["attention_core"]
    # Both read FlashMLA's rows (BF16 math, timed on H800): FP8 math is assumed to reach the same fraction
    # of its own roofline, the FP8-peak one, so it is never slower (2026-11-28; the flat default before).
    assert core["from_table"] and core8["from_table"]
    assert core8["efficiency"] == pytest.approx(core["efficiency"]) and core8["us"] <= core["us"]
    h800 = grounded.load_device("H800")
    roofline = max(core8["flops"] / (h800.fp8_tflops * 1e12), core8["bytes"] / (h800.mem_bw_gbps * 1e9))
    assert core8["us"] == pytest.approx(roofline / core8["efficiency"] * 1e6 + grounded.SM.graph_kernel_gap_us)
    with pytest.raises(ValueError, match="attn_fp8"):
        grounded.decode("DeepSeek-V3", "H800", attn_fp8=True, kv_fp8=False)
    with pytest.raises(TypeError, match="attn_fp8"):
        grounded.decode("DeepSeek-V3", "H800", attn_fp8="yes", kv_fp8=True)


@pytest.mark.parametrize("kwargs, name", [
    (dict(chunk_tokens=0), "chunk_tokens"), (dict(ranks=0), "ranks"), (dict(osl=float("nan")), "osl"),
    (dict(isl=-1), "isl"),
])
def test_lockstep_bad_input_names_the_argument(kwargs, name):
    args = dict(isl=1024, osl=2048, chunk_tokens=1024, ranks=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        grounded.lockstep_step_ms(40.0, 100.0, 128.0, **args)
    with pytest.raises(ValueError, match="chunk_ms"):
        grounded.lockstep_step_ms(40.0, -1.0, 128.0, isl=1024, osl=2048, chunk_tokens=1024, ranks=8)
    # A NaN step (an infeasible row of the explorer) stays NaN.
    step, _ = grounded.lockstep_step_ms(float("nan"), 100.0, 128.0, isl=1024, osl=2048, chunk_tokens=1024, ranks=8)
    assert math.isnan(step)


def test_points_file_refuses_a_boolean_that_is_not_true_or_false(monkeypatch, tmp_path):
    text = validation._points_path().read_text().replace(",true,", ",yes,", 1)
    bad = tmp_path / "points.csv"
    bad.write_text(text)
    monkeypatch.setattr(validation, "_points_path", lambda: bad)
    with pytest.raises(ValueError, match="must be true or false"):
        validation.load_points()


def test_eager_launches_bound_the_step_from_below():
    """Without CUDA graphs the host launches every kernel in turn: the step takes at least its
    launches x eager_launch_us, and no less than the GPU's own time; 0 (graph replay) changes nothing."""
    kw = dict(device="H200", batch=0.125, attn_tp=8, ep=8, moe_tp=2, mtp=3, mtp_accepted=1.82, kv_len=2048, overlap="none")
    graph = grounded.decode(**kw)
    assert graph["launch_ms"] == 0
    gpu_ms = graph["step_ms"] - graph["overhead_ms"]
    layer_calls = sum(1 for c in graph["calls"] if c["stage"] not in ("head", "dense_mlp"))
    assert graph["launches"] == sum(c["calls_per_step"] for c in graph["calls"]) + 3 * (layer_calls + 1)
    steps = []
    for us in (1.0, 5.0, 15.0, 40.0):
        r = grounded.decode(**kw, eager_launch_us=us)
        assert r["launch_ms"] == pytest.approx(r["launches"] * us / 1e3)
        assert r["step_ms"] == pytest.approx(max(gpu_ms, r["launch_ms"]) + r["overhead_ms"])
        steps.append(r["step_ms"])
    assert steps == sorted(steps) and steps[0] == graph["step_ms"] and steps[-1] > 2 * graph["step_ms"]
    with pytest.raises(ValueError, match="eager_launch_us"):
        grounded.decode(**kw, eager_launch_us=-1.0)


def test_every_band_phase_is_priced_once_and_an_unknown_phase_is_named():
    # The band regimes hold every phase the pricing registry declares, in its order, and no other.
    from dsperf.model import bands
    table = bands.band_table(validation.validate())
    assert tuple(table["phase"].unique()) == tuple(validation.POINT_PHASES) == ("decode", "prefill", "e2e")
    p = dict(validation.load_points()[0], phase="serving")
    with pytest.raises(ValueError, match=rf"point {p['point']}: phase must be one of decode, prefill, e2e"):
        validation.predict_point(p)
    with pytest.raises(ValueError, match="unknown metric 'tokens_per_rack_s'"):
        validation.predict_point(dict(validation.load_points()[0], metric="tokens_per_rack_s"))
