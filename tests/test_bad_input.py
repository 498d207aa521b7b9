"""Bad input raises ValueError (or TypeError for a wrong type) naming the argument."""
import json

import pytest

import dsperf


def raises(match, exc=ValueError):
    return pytest.raises(exc, match=match)


def test_unknown_device():
    with raises("unknown device 'H900'"):
        dsperf.prefill(devices=["H800", "H900"])
    with raises("unknown device"):
        dsperf.decode(devices="nope")


def test_unknown_device_field():
    with raises("unknown device field 'tflops'"):
        dsperf.load_device("H800", tflops=1)


def test_unknown_model():
    with raises("model 'NoSuchModel'"):
        dsperf.load_model("NoSuchModel")


@pytest.mark.parametrize("kwargs, match", [
    (dict(tp=3, dp=8), "tp \\(3\\) must divide"),
    (dict(tp=4, dp=3), "dp: tp \\* dp = 12"),
    (dict(tp=0, dp=8), "tp must be >= 1"),
    (dict(tp=4, dp=0), "dp must be >= 1"),
    (dict(tp=4, dp=4, gpus=32), "dp \\(4\\) must equal gpus / tp = 8"),
    (dict(tp=3, dp=8, gpus=32), "tp \\(3\\) must divide gpus \\(32\\)"),
    (dict(seq_len=0), "seq_len must be positive"),
    (dict(seq_len=-5), "seq_len must be positive"),
    (dict(seq_len=float("inf")), "seq_len must be finite"),
    (dict(kv_cache_hit=1.0), "kv_cache_hit must lie in \\[0, 1\\)"),
    (dict(kv_cache_hit=-0.1), "kv_cache_hit must lie in \\[0, 1\\)"),
    (dict(kv_cache_hit=float("nan")), "kv_cache_hit must be finite"),
    (dict(dispatch_nodes=0), "dispatch_nodes must be >= 1"),
    (dict(mode="exact"), "mode must be"),
])
def test_prefill_bad_values(kwargs, match):
    with raises(match):
        dsperf.prefill("DeepSeek-V3", ["H800"], **{"mode": "as_published", **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_sizes=[32, 0]), "batch_sizes must be > 0"),
    (dict(batch_sizes=[]), "batch_sizes must not be empty"),
    (dict(seq_len=0), "seq_len must be positive"),
    (dict(decode_len=-1), "decode_len must be >= 0"),
    (dict(tp=3), "tp \\(3\\) must be a power of two"),
    (dict(tp=16), "tp \\(16\\) must divide"),
    (dict(tp=-1), "tp must be >= 0"),
    (dict(ep=0), "ep must be >= 1"),
    (dict(ep=400, redundant_experts=0), "ep \\(400\\) exceeds"),
    (dict(redundant_experts=-1), "redundant_experts must be >= 0"),
    (dict(group_gemm_discount=0), "group_gemm_discount must lie in"),
    (dict(mode="bogus"), "mode must be"),
])
def test_decode_bad_values(kwargs, match):
    with raises(match):
        dsperf.decode("DeepSeek-V3", ["H800"], **{"mode": "as_published", **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch=[]), "batch must not be empty"),
    (dict(batch=[1, -2]), "batch must be positive"),
    (dict(ep=[144, 72], redundant_experts=[32]), "redundant_experts must have one entry per ep"),
    (dict(seq_len=[4383, 0]), "seq_len must be positive"),
    (dict(tp=[0, 5]), "tp \\(5\\) must be a power of two"),
    (dict(tp=[0, 16]), "tp \\(16\\) must divide"),
    (dict(devices=[]), "devices must name at least one device"),
    (dict(kv_fp8=[]), "kv_fp8 must not be empty"),
])
def test_sweep_bad_values(kwargs, match):
    args = dict(devices=["H800"], batch=[32], mode="as_published")
    args.update(kwargs)
    with raises(match):
        dsperf.decode_sweep("DeepSeek-V3", **args)


def test_wrong_types_name_the_argument():
    with raises("seq_len must be a number", TypeError):
        dsperf.prefill(seq_len="4383")
    with raises("tp must be an integer", TypeError):
        dsperf.prefill(tp=4.5)
    with raises("tp must be an integer", TypeError):  # floats are not integers, even whole ones
        dsperf.prefill(tp=4.0)
    with raises("model must be", TypeError):
        dsperf.load_model(3.14)


def _v3_config():
    with open(dsperf.model.configs.resources.files("dsperf") / "data" / "models" / "DeepSeek-V3.json") as f:
        return json.load(f)


@pytest.mark.parametrize("edit, match", [
    (lambda c: c.pop("kv_lora_rank"), "missing the field 'kv_lora_rank'"),
    (lambda c: c.update(num_experts_per_tok=300), "n_activated_experts.*exceeds.*n_routed_experts"),
    (lambda c: c.update(n_group=7), "n_expert_groups.*config.json 'n_group'"),
    (lambda c: c.update(topk_group=9), "n_limited_groups"),
    (lambda c: c.update(first_k_dense_replace=62), "n_dense_layers.*first_k_dense_replace"),
    (lambda c: c.update(hidden_size=0), "'dim' must be positive.*hidden_size"),
    (lambda c: c.update(hidden_size="7168"), "'hidden_size' must be a number"),
    (lambda c: c.update(num_hidden_layers=61.5), "'num_hidden_layers' must be an integer"),
    (lambda c: c.update(num_experts_per_tok=200), "kept groups"),
])
def test_bad_config_json(edit, match):
    cfg = _v3_config()
    edit(cfg)
    with raises(match):
        dsperf.from_hf_config(cfg)


def test_config_json_file_errors(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with raises("not valid JSON"):
        dsperf.load_model(str(tmp_path))
    with raises("neither a shipped model"):
        dsperf.load_model(str(tmp_path / "missing.json"))


def test_device_file_errors(tmp_path):
    f = tmp_path / "X1.toml"
    f.write_text('name = "X1"\nsm_count = 10\n')
    with raises("missing the field 'comm_sms_prefill'"):
        dsperf.load_device(str(f))
    good = (dsperf.hardware._devices_dir() / "H800.toml").read_text()
    f.write_text(good.replace("sm_count = 132", 'sm_count = "many"'))
    with raises("field 'sm_count' must be int"):
        dsperf.load_device(str(f))
    f.write_text(good.replace("discount = 0.85", "discount = 1.5"))
    with raises("field 'discount' must lie in \\[0.01, 1\\]"):
        dsperf.load_device(str(f))
    f.write_text(good + "\nwarp_size = 32\n")
    with raises("unknown field 'warp_size'"):
        dsperf.load_device(str(f))
    # A malformed [as_published] is refused in every mode, also where the mode reads datasheet values.
    f.write_text("as_published = 3\n" + good)
    for mode in ("as_published", "corrected"):
        with raises("field 'as_published' must be a table"):
            dsperf.load_device(str(f), mode)
    with raises("field 'as_published' must be a table"):
        dsperf.decode(devices=[str(f)])


def test_strict_types_and_bounds_name_the_argument():
    from dsperf import compare, tables

    with raises("absorbed must be True or False", TypeError):
        dsperf.decode(devices=["H800"], absorbed="no")
    with raises("kv_fp8 must be True or False", TypeError):
        dsperf.decode_sweep(devices=["H800"], kv_fp8=["false"])
    with raises("seq_len must be <= 2\\*\\*30"):
        dsperf.prefill(devices=["H800"], seq_len=1e300)
    with raises("tp must be <= 2\\*\\*20"):
        dsperf.prefill(devices=["H800"], tp=2 ** 31)
    with raises("device override 'sm_count' must be int, got 132.7"):  # was truncated to 132
        dsperf.load_device("H800", sm_count=132.7)
    with raises("strategies must name at least one strategy"):
        dsperf.ep_strategies(strategies={})
    with raises("sections must be a non-empty list"):
        tables.all_tables(sections="x")
    with raises("min_tps_user must be a number", TypeError):
        compare.best_decode_point("as_published", min_tps_user=True)


def test_a_device_listed_twice_in_a_sweep():
    df = dsperf.decode_sweep(devices=["H800", "H20", "H800"], batch=[1, 2])
    assert list(df["GPU"]) == ["H800", "H800", "H20", "H20", "H800", "H800"]
    assert (df["tpot_ms"].to_numpy()[:2] == df["tpot_ms"].to_numpy()[4:]).all()


def test_model_config_layer_count_beyond_int32(tmp_path):
    m = dsperf.load_model("DeepSeek-V3")
    m.n_layers = 2 ** 31  # fits the int64 field; the bound refuses it before any int narrowing
    with raises("model field 'n_layers' must be <= 16777216"):
        dsperf.decode(m, devices=["H800"])
    cfg = json.loads((dsperf.model.configs.resources.files("dsperf") / "data" / "models" / "DeepSeek-V3.json").read_text())
    cfg["num_hidden_layers"] = 2 ** 31
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with raises(f"config.json '{path}' field 'num_hidden_layers' must lie in \\[0, 16777216\\]"):
        dsperf.load_model(str(path))
