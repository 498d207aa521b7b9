"""Weight and payload formats as stored and sent: the FP4-v2 checkpoints' NVFP4 wo, the quantisation
a GEMM's input takes (none before a BF16 GEMM), and TensorRT-LLM's NVFP4 dispatch payload.
docs/GROUNDED_MODEL.md (the call table) and docs/VALIDATION_LATENCY.md (their dated entries)."""
import pytest

from dsperf import grounded


def test_nvfp4_dispatch_sends_the_quantised_tokens():
    # TensorRT-LLM's all-to-all after quantisation: each token as NVFP4 values and an FP8 scale per 16
    # (7168 x 0.5625 = 4,032 bytes against FP8's 7,168 + 56 x 4); the combine stays BF16.
    kw = dict(batch=128, kv_len=2048, ep=32, overlap="none", weight_dtype="fp4_v2")
    fp8 = {c["kernel"]: c for c in grounded.decode("DeepSeek-V3", "GB200", **kw)["calls"]}
    fp4 = {c["kernel"]: c for c in grounded.decode("DeepSeek-V3", "GB200", dispatch_fp4=True, **kw)["calls"]}
    assert fp4["dispatch"]["bytes"] / fp8["dispatch"]["bytes"] == pytest.approx(7168 * 0.5625 / (7168 + 56 * 4))
    assert fp4["combine"]["bytes"] == fp8["combine"]["bytes"]
    with pytest.raises(ValueError, match="dispatch_fp4 needs NVFP4 experts"):
        grounded.decode("DeepSeek-V3", "GB200", dispatch_fp4=True, batch=128, ep=32)
    with pytest.raises(TypeError, match="dispatch_fp4"):
        grounded.decode("DeepSeek-V3", "GB200", dispatch_fp4="yes", **kw)


def test_fp4_v2_prices_wo_as_nvfp4_and_bf16_gemms_read_their_input_unquantised():
    # nvidia/DeepSeek-R1-0528-FP4-v2 "additionally quantizes the wo module": wo on the FP4 tensor
    # cores, its input quantised to NVFP4 first; everything else as fp4_bf16. A BF16 GEMM reads its
    # BF16 input as it is: no quantisation call before a BF16 wo.
    kw = dict(batch=64, kv_len=2048, ep=8, overlap="none")
    v1 = grounded.decode("DeepSeek-V3", "B200", weight_dtype="fp4_bf16", **kw)
    v2 = grounded.decode("DeepSeek-V3", "B200", weight_dtype="fp4_v2", **kw)
    calls1 = {c["kernel"]: c for c in v1["calls"]}
    calls2 = {c["kernel"]: c for c in v2["calls"]}
    assert calls2["wo"]["family"] == "gemm_fp4" and calls1["wo"]["family"] == "gemm_bf16"
    assert calls2["wq_b"]["family"] == calls2["dense_up"]["family"] == "gemm_bf16"
    assert "wo_act_quant" not in calls1
    assert calls2["wo_act_quant"]["bytes"] == pytest.approx(64 * 128 * 128 * (2 + 0.5 + 1 / 16))
    assert calls2["wo"]["us"] < calls1["wo"]["us"] and v2["step_ms"] < v1["step_ms"]
    # Only wo's weights change: 128 heads x 128 x 7168 per layer, 61 layers, BF16 -> NVFP4.
    saved = (2 - (0.5 + 1 / 16)) * 128 * 128 * 7168 * 61 / 2**30
    assert v1["weights_gib"] - v2["weights_gib"] == pytest.approx(saved, rel=1e-9)
    with pytest.raises(ValueError, match="fp4_tflops"):
        grounded.decode("DeepSeek-V3", "H800", weight_dtype="fp4_v2")
    # The FP8 wo still quantises its input to FP8 (three bytes a value: read BF16, write FP8).
    fp8 = {c["kernel"]: c for c in grounded.decode("DeepSeek-V3", "B200", **kw)["calls"]}
    assert fp8["wo_act_quant"]["bytes"] == pytest.approx(64 * 128 * 128 * 3)


def test_a_rows_flags_name_its_format_or_the_error_names_them():
    for name, fmt in grounded.WEIGHT_FORMATS.items():
        assert grounded.weight_dtype_of(*fmt) == name
        assert grounded.weight_dtype_of_row(fmt._asdict()) == name
    assert grounded.weight_dtype_of_row({}) == "fp8"  # DeepSeek's own checkpoint where a row says nothing
    with pytest.raises(ValueError, match="weights_fp8=True, experts_fp4=False, wo_fp4=True name no weight format"):
        grounded.weight_dtype_of(True, False, True)


def test_the_formats_are_declared_once_in_cpp_and_a_deployment_reads_them_by_name():
    # Python's table is the C++ declaration's (weight_format.hpp), in its order.
    assert tuple(grounded.WeightFormat._fields) == tuple(grounded.SM.WEIGHT_FLAGS)
    assert [(n, tuple(f)) for n, f in grounded.WEIGHT_FORMATS.items()] == [
        (n, tuple(f)) for n, f in grounded.SM.WEIGHT_FORMATS]
    d = grounded.SM.Deployment()
    assert d.weight_dtype == "fp8"  # the flags' defaults are DeepSeek's own checkpoint
    for name, fmt in grounded.WEIGHT_FORMATS.items():
        d.weight_dtype = name
        assert _flags_of(d) == fmt and d.weight_dtype == name
    d.weight_dtype, d.wo_fp4 = "fp8", True  # flags set one by one may name no format
    assert d.weight_dtype is None
    with pytest.raises(ValueError, match="weight_dtype must be one of fp8, bf16, fp4, fp4_bf16, fp4_v2, got 'int4'"):
        d.weight_dtype = "int4"
    with pytest.raises(ValueError, match="weight_dtype_of takes the 3 flags"):
        grounded.weight_dtype_of(True, False)
    # The one reverse lookup is C++'s: Python's weight_dtype_of and Deployment.weight_dtype both read it.
    assert grounded.SM.weight_dtype_of([False, True, True]) == "fp4_v2"
    assert grounded.SM.weight_dtype_of([True, False, True]) is None
    with pytest.raises(ValueError, match="one value per WEIGHT_FLAGS flag"):
        grounded.SM.weight_dtype_of([True])


def _flags_of(deployment):
    """A Deployment's weight flags, as a WeightFormat."""
    return grounded.WeightFormat(*(getattr(deployment, f) for f in grounded.WeightFormat._fields))
