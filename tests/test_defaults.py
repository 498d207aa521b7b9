"""What a user meets first: the grounded model by default, datasheet devices, the seed one argument away."""
import warnings

import pytest

import dsperf


def test_decode_prefill_and_sweep_default_to_the_grounded_model():
    d = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[64], ep=144)
    assert {"tpot_ms", "tokens_per_gpu_s", "batch_limit", "fits_memory", "error_band"} <= set(d.columns)
    p = dsperf.prefill("DeepSeek-V3", ["H800"])
    assert {"tokens_per_s_node", "ttft_ms", "error_band"} <= set(p.columns)
    s = dsperf.decode_sweep("DeepSeek-V3", ["H800"], batch=[16, 64], tp=[0, 8])
    assert len(s) == 4 and (s["error_band"] > 0).all()
    # The sweep and the per-point call are the same model.
    assert s.iloc[1]["tokens_per_gpu_s"] == pytest.approx(d[d.batch == 64]["tokens_per_gpu_s"].iloc[0], rel=1e-12)


def test_the_seed_is_one_argument_away():
    d = dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[32], mode="as_published")
    assert d["tpot_overlap_ms"].iloc[0] == pytest.approx(9.858, abs=5e-4)  # the seed's TL;DR table
    assert dsperf.prefill_mla("DeepSeek-V3", ["H800"], mode="as_published")["TP1"].iloc[0] == pytest.approx(5.265, abs=5e-4)


def test_devices_load_datasheet_values_by_default():
    assert dsperf.load_device("H20").mem_bw_gbps == 4000
    assert dsperf.load_device("H20", "as_published").mem_bw_gbps == 3350


def test_a_spec_used_under_the_other_kind_of_mode_is_warned_about():
    seed_h20 = dsperf.load_device("H20", "as_published")
    with pytest.warns(UserWarning, match="H20"):
        dsperf.decode("DeepSeek-V3", [seed_h20], batch_sizes=[32], mode="corrected")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dsperf.decode("DeepSeek-V3", [seed_h20], batch_sizes=[32], mode="as_published")
        dsperf.decode("DeepSeek-V3", [dsperf.load_device("H20")], batch_sizes=[32], mode="corrected")


@pytest.mark.parametrize("kwargs, name", [
    (dict(group_gemm_discount=0.5), "group_gemm_discount"),
    (dict(absorbed=False), "absorbed"),
])
def test_seed_only_parameters_are_refused_by_the_grounded_model(kwargs, name):
    with pytest.raises(ValueError, match=name):
        dsperf.decode("DeepSeek-V3", ["H800"], batch_sizes=[32], **kwargs)


def test_grounded_prefill_refuses_dispatch_nodes():
    with pytest.raises(ValueError, match="dispatch_nodes"):
        dsperf.prefill("DeepSeek-V3", ["H800"], dispatch_nodes=2)


@pytest.mark.parametrize("call, kwargs, name", [
    ("decode", dict(batch_sizes=[32, 0]), "batch"),
    ("decode", dict(seq_len=0), "seq_len"),
    ("decode_sweep", dict(seq_len=[0]), "seq_len"),
    ("decode", dict(tp=3), "attn_tp"),
    ("decode", dict(ep=0), "ep"),
    ("decode", dict(ep=400, redundant_experts=0), "ep"),
    ("decode", dict(redundant_experts=-1), "redundant_experts"),
    ("decode", dict(kv_fp8="no"), "kv_fp8"),
    ("decode", dict(mode="exact"), "mode"),
    ("prefill", dict(seq_len=0), "seq_len"),
    ("prefill", dict(kv_cache_hit=1.0), "kv_cache_hit"),
    ("prefill", dict(tp=3, dp=8), "tp"),
    ("decode_sweep", dict(tp=[0, 3]), "tp"),
    ("decode_sweep", dict(ep=[400], redundant_experts=[0]), "ep"),
    ("decode_sweep", dict(kv_fp8=[]), "kv_fp8"),
])
def test_grounded_bad_input_names_the_argument(call, kwargs, name):
    args = dict(devices=["H800"], **kwargs)
    if call == "decode_sweep":
        args.setdefault("batch", [32])
    with pytest.raises((ValueError, TypeError), match=name):
        getattr(dsperf, call)("DeepSeek-V3", **args)


def test_dsperf_fixes_describes_each_fix():
    import contextlib
    import io

    from dsperf import _C
    from dsperf.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fixes"]) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == len(_C.fix_names())
    for name, line in zip(_C.fix_names(), lines):
        assert line.startswith(name) and len(line.split(None, 1)[1]) > 20


def test_readable_output():
    spec = dsperf.load_device("H800")
    assert repr(spec).startswith("DeviceSpec(name='H800'") and "mem_bw_gbps=3350" in repr(spec)
    assert repr(dsperf.load_model()).startswith("ModelConfig(name='DeepSeek-V3'")
    # Two variants of one device print under different names.
    variant = dsperf.load_device("H20", scaleout_gbps=25)
    df = dsperf.decode("DeepSeek-V3", [variant, "H20"], batch_sizes=[32], mode="corrected")
    assert list(df["GPU"]) == ["H20 (scaleout_gbps=25)", "H20"]
    # The seed's sweep: a fits_memory column and whole-number axes as integers.
    s = dsperf.decode_sweep("DeepSeek-V3", ["H800"], batch=[32, 512], mode="corrected")
    assert s["batch"].dtype.kind == "i" and s["seq_len"].dtype.kind == "i"
    assert list(s["fits_memory"]) == [True, False]


def test_seed_headers_in_english_outside_as_published():
    from dsperf.tables import SEED_HEADERS, TableOptions, model_tables

    seed = {c for t in model_tables(TableOptions(mode="as_published")) for c in t.frame.columns}
    corrected = {c for t in model_tables(TableOptions(mode="corrected")) for c in t.frame.columns}
    assert set(SEED_HEADERS) <= seed
    assert not set(SEED_HEADERS) & corrected and set(SEED_HEADERS.values()) <= corrected


def test_tables_print_a_layout_once():
    import contextlib
    import io

    from dsperf.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["tables", "--tp", "8", "--dp", "4", "--sections", "prefill"]) == 0
    titles = [line for line in out.getvalue().splitlines() if "TP=8 DP=4" in line]
    assert titles and len(titles) == len(set(titles))
