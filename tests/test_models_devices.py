"""Shipped model configs, config.json loading, device files."""
import json

import pytest

import dsperf

PUBLIC = {  # (hidden, layers, dense layers, heads, routed, shared, top-k, q_lora_rank)
    "DeepSeek-V3": (7168, 61, 3, 128, 256, 1, 8, 1536),
    "DeepSeek-V2": (5120, 60, 1, 128, 160, 2, 6, 1536),
    "DeepSeek-V2-Lite": (2048, 27, 1, 16, 64, 2, 6, 0),
    "Kimi-K2": (7168, 61, 1, 64, 384, 1, 8, 1536),
}


def test_shipped_models_listed():
    assert set(PUBLIC) <= set(dsperf.list_models())


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_shipped_model_values(name):
    m = dsperf.load_model(name)
    got = (m.dim, m.n_layers, m.n_dense_layers, m.n_heads, m.n_routed_experts, m.n_shared_experts,
           m.n_activated_experts, m.q_lora_rank)
    assert got == PUBLIC[name]


def test_r1_is_v3_and_names_are_case_insensitive():
    r1, v3 = dsperf.load_model("DeepSeek-R1"), dsperf.load_model("deepseek-v3")
    assert dsperf.model.model_summary(r1) == dsperf.model.model_summary(v3)


def test_seed_model_args_are_the_v3_defaults():
    # The seed's ModelArgs.
    m = dsperf.load_model("DeepSeek-V3")
    assert (m.vocab_size, m.dim, m.inter_dim, m.moe_inter_dim, m.n_layers, m.n_dense_layers, m.n_heads) == \
        (129280, 7168, 18432, 2048, 61, 3, 128)
    assert (m.n_routed_experts, m.n_shared_experts, m.n_activated_experts, m.n_expert_groups,
            m.n_limited_groups, m.route_scale) == (256, 1, 8, 8, 4, 2.5)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == \
        (1536, 512, 128, 64, 128)


def test_load_config_json_from_folder(tmp_path):
    src = dsperf.model.configs.resources.files("dsperf") / "data" / "models" / "Kimi-K2.json"
    (tmp_path / "kimi").mkdir()
    (tmp_path / "kimi" / "config.json").write_text(src.read_text())
    m = dsperf.load_model(str(tmp_path / "kimi"))
    assert m.name == "kimi" and m.n_routed_experts == 384


def test_v2_lite_without_query_compression():
    m = dsperf.load_model("DeepSeek-V2-Lite")
    p = dsperf._C.param_counts(m, False)
    # wq: 2048 x 16 x 192, wkv_a: 2048 x 576, wkv_b: 512 x 16 x 256, wo: 16 x 128 x 2048
    assert p["mla"] == 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048


def test_corrected_v3_total_is_671b():
    # Bias-free linears (norms aside): DeepSeek-V3's published 671B without the MTP module.
    total = dsperf.parameter_table("DeepSeek-V3", mode="corrected").loc["SUM", "params_total"]
    assert 670.9e9 < total < 671.1e9


def test_shipped_devices_load_in_both_modes():
    names = dsperf.list_devices()
    assert {"H800", "H20", "H20-3e", "H100", "H200", "B200", "RTX4090"} <= set(names)
    for name in names:
        for mode in ("as_published", "corrected"):
            d = dsperf.load_device(name, mode)
            assert d.fp8_tflops_eff(d.comm_sms_prefill) > 0


def test_as_published_overrides_only_in_that_mode():
    assert dsperf.load_device("H20", "as_published").mem_bw_gbps == 3350
    assert dsperf.load_device("H20", "corrected").mem_bw_gbps == 4000
    assert dsperf.load_device("H20_3e", "as_published").seed_decode_tp == 8
    assert dsperf.load_device("H20").mem_bw_gbps == 4000  # datasheet values by default
    # The seed's GPU_perf: 791.6 / 1583.2 TFLOPS for H800 before its 0.85 discount.
    h800 = dsperf.load_device("H800")
    assert h800.fp16_tflops * h800.compute_derate == pytest.approx(791.6)
    assert h800.fp8_tflops * h800.compute_derate == pytest.approx(1583.2)


def test_user_device_file(tmp_path):
    text = (dsperf.hardware._devices_dir() / "H800.toml").read_text().replace('name = "H800"', 'name = "MyGPU"')
    f = tmp_path / "mygpu.toml"
    f.write_text(text.replace("mem_gb = 80", "mem_gb = 160"))
    df = dsperf.decode("DeepSeek-V3", [str(f), "H800"], batch_sizes=[32])
    assert list(df["GPU"]) == ["MyGPU", "H800"]
    assert df["batch_limit"].iloc[0] > df["batch_limit"].iloc[1]


@pytest.mark.parametrize("bad", [-1, float("nan"), "671e9", True, 1e16])
def test_quoted_total_is_checked_naming_the_key(bad):
    cfg = dict(dsperf.model.configs._shipped_config("DeepSeek-V3"), dsperf_quoted_total_params=bad)
    with pytest.raises(ValueError, match="dsperf_quoted_total_params"):
        dsperf.from_hf_config(cfg)


def test_only_the_seeds_model_quotes_a_total():
    assert dsperf.load_model("DeepSeek-V3").quoted_total_params == 671.16e9
    assert dsperf.load_model("Kimi-K2").quoted_total_params == 0


def test_from_hf_config_roundtrip():
    cfg = json.loads((dsperf.model.configs.resources.files("dsperf") / "data" / "models" / "DeepSeek-V2.json").read_text())
    m = dsperf.from_hf_config(cfg, name="v2")
    assert m.route_scale == 16.0 and m.n_expert_groups == 8 and m.n_limited_groups == 3


def test_device_fields_are_declared_once():
    """DeviceSpec's fields come from one C++ list: the binding's attributes, the device-file keys
    and the calibration file writer all follow it."""
    from dsperf import calibrate, hardware

    fields = dsperf.DeviceSpec.FIELDS
    assert [f for f, _, _ in fields] == list(hardware.SPEC_FIELDS)
    spec = dsperf.DeviceSpec()
    for name, kind, required in fields:
        assert isinstance(getattr(spec, name), {"int": int, "float": float, "str": str}[kind]), name
    assert set(hardware.OPTIONAL) == {f for f, _, r in fields if not r}
    lines = calibrate._spec_lines({f: ("x" if k == "str" else 3) for f, k, _ in fields})
    assert [line.split(" = ")[0] for line in lines] == [f for f, _, _ in fields]
    with pytest.raises(ValueError, match="no value for the device field 'sm_count'"):
        calibrate._spec_lines({"name": "x"})
