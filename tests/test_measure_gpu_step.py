"""dsperf measure-gpu --step: a decode point's priced calls timed at their own shapes (with a fake
timer here; the real one runs on a lent GPU)."""
import math

import pandas as pd
import pytest

from dsperf.predict import measure_gpu_plan as MP
from dsperf.predict import measure_gpu_step as S
from test_measure_gpu import FakeClock, FakeTimer, _args
from dsperf.predict import measure_gpu as MG

POINT = "trtllm_h200_min_latency"


def test_every_timed_family_of_the_step_gets_a_whole_shape():
    calls, result = S.step_calls(S.find_point(POINT))
    pairs = S.step_shapes(calls)
    timed = {c["kernel"] for c, _ in pairs}
    assert timed == {c["kernel"] for c in calls if c["family"] in S.STEP_FIELDS}
    assert "attn_allreduce" not in timed  # one GPU: no all-reduce to time
    for c, shape in pairs:
        for field, value in shape.dims:
            assert isinstance(value, int) and value >= 1, (c["kernel"], field, value)
        if c["family"] == "grouped_masked":  # 7.6 experts touched on average: 8 run
            assert shape.get("groups") == math.ceil(c["shape"]["groups"])
    absorb = next(s for c, s in pairs if c["kernel"] == "q_absorb_w_uk")
    assert absorb.get("groups") == 16 and absorb.dtype == "bf16"  # per-head GEMM over TP8's 16 heads
    mla = [s for c, s in pairs if c["family"] == "mla_decode"]
    assert {s.kernel for s in mla} == {"production", "dsperf"} and mla[0].get("q_len") == 4  # MTP 3: 4 queries


def test_a_run_with_a_fake_timer_writes_each_call_beside_its_price(tmp_path):
    clock = FakeClock()
    timer = FakeTimer(clock, factor=3.0)
    printed = []
    code = MG.run_command(_args(tmp_path, step=POINT, out=str(tmp_path / "step")), timer_factory=lambda: timer,
                          clock_factory=lambda: clock, print_fn=printed.append)
    assert code == 0
    df = pd.read_csv(tmp_path / "step" / "step.csv")
    calls, result = S.step_calls(S.find_point(POINT))
    assert list(df["kernel"]) == [c["kernel"] for c in calls]
    price = MP.Pricer("H200")
    for c in calls:
        row = df[df["kernel"] == c["kernel"]].iloc[0]
        shape = S.call_shape(c)
        if shape is None:
            assert math.isnan(row["measured_us"])
            continue
        assert row["production_us"] == pytest.approx(3.0 * price(shape)[0], rel=1e-9)
        assert row["model_us"] == pytest.approx(c["us"], rel=1e-12)
    timed = df[df["measured_us"].notna()]
    text = (tmp_path / "step" / "step.md").read_text()
    assert f"{(timed['measured_us'] * timed['calls_per_step']).sum() / 1e3:.3f} ms" in text
    assert "Not timed: attn_allreduce, dense_allreduce, moe_allreduce" in text


def test_a_point_that_is_not_a_decode_step_is_refused_by_name():
    with pytest.raises(ValueError, match="--step: no validation point 'nope'"):
        S.find_point("nope")
    with pytest.raises(ValueError, match="--step: point 'deepseek_profile_prefill' is a prefill point"):
        S.find_point("deepseek_profile_prefill")


def test_the_shipped_h200_step_timing_is_the_one_the_docs_quote():
    df = pd.read_csv(S.shipped_step_path())
    timed = df[df["measured_us"].notna()]
    measured_ms = (timed["measured_us"] * timed["calls_per_step"]).sum() / 1e3
    assert measured_ms == pytest.approx(11.604, abs=5e-4)
    assert len(timed) == 22 and set(df.loc[df["measured_us"].isna(), "kernel"]) == {"attn_allreduce", "dense_allreduce",
                                                                             "moe_allreduce"}
    assert (timed["measured_us"] > 0).all()


def test_any_deployments_calls_round_trip_through_a_calls_file(tmp_path):
    """dsperf predict --calls-out writes a step's calls; measure-gpu --step-calls times them."""
    from dsperf.cli import main

    calls_file = tmp_path / "calls.csv"
    main(["predict", "--device", "H200", "--batch", "32", "--ep", "8", "--mtp", "1", "--mtp-accepted", "0.7",
          "--calls-out", str(calls_file)])
    calls = S.read_calls(calls_file)
    from dsperf.model import grounded as G
    direct = G.decode("DeepSeek-V3", "H200", batch=32, ep=8, mtp=1, mtp_accepted=0.7)["calls"]
    assert [c["kernel"] for c in calls] == [c["kernel"] for c in direct]
    assert [S.call_shape(c) for c in calls] == [S.call_shape(c) for c in direct]
    clock = FakeClock()
    timer = FakeTimer(clock, factor=2.0)
    code = MG.run_command(_args(tmp_path, step_calls=str(calls_file), out=str(tmp_path / "s")),
                          timer_factory=lambda: timer, clock_factory=lambda: clock, print_fn=lambda s: None)
    assert code == 0
    df = pd.read_csv(tmp_path / "s" / "step.csv")
    assert list(df["kernel"]) == [c["kernel"] for c in direct]
    assert df["measured_us"].notna().sum() == sum(c["family"] in S.STEP_FIELDS for c in direct)


def test_a_bad_calls_file_is_refused_by_file_row_and_column(tmp_path):
    with pytest.raises(ValueError, match="--step-calls: no file"):
        S.read_calls(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("kernel,family,calls_per_step,us,from_table,m\nwq_a,gemm_fp8,61,7.5,True,4\n")
    with pytest.raises(ValueError, match=r"bad.csv lacks the column 'n'"):
        S.read_calls(bad)
    cols = ",".join(S.CALL_COLUMNS + S.SHAPE_KEYS)
    bad.write_text(f"{cols}\nwq_a,gemm_fp8,61,7.5,True,four,1536,7168,1,0,0,128,1,0,1,1,True\n")
    with pytest.raises(ValueError, match=r"row 1, column 'm': expected a number >= 0, got 'four'"):
        S.read_calls(bad)
    bad.write_text(f"{cols}\nwq_a,gemm_fp8,61,7.5,True,4,1536,7168,1,0,0,128,1,0,1,1,maybe\n")
    with pytest.raises(ValueError, match=r"row 1, column 'fp8': expected True or False"):
        S.read_calls(bad)
    with pytest.raises(ValueError, match="--step and --step-calls name the calls two ways"):
        MG.run_command(_args(tmp_path, step=POINT, step_calls=str(bad)), timer_factory=lambda: None,
                       clock_factory=lambda: None, print_fn=lambda s: None)


def test_a_prefill_steps_calls_are_timed_in_their_own_families():
    from dsperf.model import grounded as G

    calls = G.prefill("DeepSeek-V3", "H200", tokens=8192, prompt_len=4096, ep=8)["calls"]
    families = {shape.family for _, shape in S.step_shapes(calls)}
    assert {"grouped_contiguous", "mla_prefill", "gemm_fp8", "elementwise"} <= families
    core = next(shape for c, shape in S.step_shapes(calls) if shape.family == "mla_prefill")
    assert core.get("heads") == 128 and core.get("m") >= 1


def test_predict_names_the_timed_one_request_gap_on_a_latency_bound_step_only(capsys):
    from dsperf.cli import main

    main(["predict", "--device", "H200", "--batch", "1", "--ep", "8", "--attn-tp", "8"])
    small = capsys.readouterr().out
    main(["predict", "--device", "H200", "--batch", "64", "--ep", "8"])
    large = capsys.readouterr().out
    ratio = S.shipped_step_ratio()
    assert ratio == pytest.approx(11.604 / 6.619, rel=1e-3)
    assert f"a one-request step's calls took {ratio:.2f}x what the model priced them at then" in small
    assert "latency-bound step" not in large


def test_a_calls_shape_names_are_the_table_columns():
    from dsperf.model import grounded as G

    calls, _ = S.step_calls(S.find_point(POINT))
    assert tuple(calls[0]["shape"]) == S.SHAPE_KEYS == tuple(G.SHAPE_COLUMNS) + ("fp8",)


def test_an_unwritable_calls_file_names_the_flag(tmp_path, capsys):
    from dsperf.cli import main

    assert main(["predict", "--device", "H200", "--calls-out", str(tmp_path / "missing" / "x.csv")]) == 2
    assert "--calls-out: cannot write" in capsys.readouterr().err


def test_a_calls_fp8_is_what_it_reads_not_the_deployments_flag():
    from dsperf.model import grounded as G

    # An FP8 deployment with a BF16 cache: FP8 weight GEMMs and experts, BF16 per-head GEMMs,
    # router, norms and attention core (the C++ table_reads_fp8 decides; measure-gpu obeys it).
    calls = G.decode("DeepSeek-V3", "H200", batch=8, kv_len=2048, ep=8)["calls"]
    dtype = {c["kernel"]: S.call_shape(c).dtype for c in calls if S.call_shape(c) is not None}
    assert dtype["wq_a"] == "fp8" and dtype["experts_up"] == "fp8"
    assert dtype["gate"] == "bf16" and dtype["q_absorb_w_uk"] == "bf16" and dtype["attn_norm"] == "bf16"
    assert dtype["attention_core"] == "bf16"
    fp8_cache = G.decode("DeepSeek-V3", "H200", batch=8, kv_len=2048, ep=8, kv_fp8=True)["calls"]
    core = next(c for c in fp8_cache if c["kernel"] == "attention_core")
    assert S.call_shape(core).dtype == "fp8"


def test_a_prefill_after_a_cached_prefix_is_timed_with_its_prefix_keys():
    from dsperf.model import grounded as G
    from dsperf.predict.measure_gpu_plan import prefill_keys

    calls = G.prefill("DeepSeek-V3", "H200", tokens=4096, prompt_len=4096, cached_prefix=2048, ep=8)["calls"]
    core = next(shape for c, shape in S.step_shapes(calls) if shape.family == "mla_prefill")
    tokens, heads, keys = prefill_keys(core)
    assert heads == 128 and keys > tokens and keys == core.get("kv_len")
    fresh = G.prefill("DeepSeek-V3", "H200", tokens=4096, prompt_len=4096, ep=8)["calls"]
    core = next(shape for c, shape in S.step_shapes(fresh) if shape.family == "mla_prefill")
    assert prefill_keys(core)[2] == prefill_keys(core)[0]
