"""The Hopper (sm_90a) grouped GEMM without a GPU: its selection and argument checks through the fake
device (tests/cuda_fake.py), and its SASS (benchmarks/check_sass.py) where cuobjdump and a built CUDA
library are at hand. The kernel's results are checked on a GPU only (benchmarks/gpu_validate.py
--hopper); it has not run on one yet (docs/CUDA.md)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_fake import dev, fake  # noqa: F401 (fake: the fixture the tests take)
from dsperf import cuda
from dsperf.cuda_array import DeviceArray
from kernel_helpers import f32, rand_bf16, rand_fp8_weight

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import check_sass  # noqa: E402


def bf16_problem(rng, E=3, N=64, K=128, rows=(5, 0, 9)):
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    return rand_bf16(rng, int(offsets[-1]), K), rand_bf16(rng, E, N, K, scale=0.05), offsets


def test_wgmma_variant_takes_the_hopper_binding_with_the_same_arguments(fake):
    a, b, offsets = bf16_problem(np.random.default_rng(0))
    want = cuda.grouped_gemm(a, b, offsets=offsets)
    got = cuda.grouped_gemm(a, b, offsets=offsets, variant="wgmma")
    assert fake.calls == ["grouped_gemm", "grouped_gemm_wgmma"]
    np.testing.assert_array_equal(got, want)
    g, h = fake.last["grouped_gemm"], fake.last["grouped_gemm_wgmma"]
    assert all(getattr(g, f) == getattr(h, f) for f in ("M", "N", "K", "E", "layout", "capacity", "check_values"))
    # GPU arrays, the masked layout and a preallocated output go through unchanged.
    counts = np.array([3, 0, 7], np.int32)
    am = rand_bf16(np.random.default_rng(1), 3, 8, 128)
    out = DeviceArray((3, 8, 64), np.float32)
    r = cuda.grouped_gemm(dev(am), dev(b), counts=dev(counts), out=out, validate=False, variant="wgmma")
    assert r is out and fake.calls[-1] == "grouped_gemm_wgmma"
    h = fake.last["grouped_gemm_wgmma"]
    assert h.counts and not h.offsets and h.capacity == 8 and h.check_values is False and h.c == out.ptr
    for e in range(3):
        np.testing.assert_allclose(out.numpy()[e, :counts[e]], f32(am[e, :counts[e]]) @ f32(b[e]).T, rtol=1e-5)


def test_the_default_stays_mma_and_the_environment_opts_bf16_calls_in(fake, monkeypatch):
    rng = np.random.default_rng(2)
    a, b, offsets = bf16_problem(rng)
    cuda.grouped_gemm(a, b, offsets=offsets)
    assert fake.calls == ["grouped_gemm"]
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "1")
    cuda.grouped_gemm(a, b, offsets=offsets)
    assert fake.calls[-1] == "grouped_gemm_wgmma"
    cuda.grouped_gemm(a, b, offsets=offsets, variant="mma")  # an explicit variant wins
    assert fake.calls[-1] == "grouped_gemm"
    # FP8 x FP8 goes to the Hopper FP8 kernel too; BF16 x FP8 weights keep theirs (none on Hopper).
    w, ws = rand_fp8_weight(rng, 128, 256)
    aq, as_ = cuda.act_quant(rand_bf16(rng, 4, 256))
    cuda.grouped_gemm(aq, w[None], offsets=np.array([0, 4]), a_scale=as_, b_scale=ws[None])
    assert fake.calls[-1] == "grouped_gemm_wgmma"
    cuda.grouped_gemm(rand_bf16(rng, 4, 256), w[None], offsets=np.array([0, 4]), b_scale=ws[None])
    assert fake.calls[-1] == "grouped_gemm"
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "0")
    cuda.grouped_gemm(a, b, offsets=offsets)
    assert fake.calls[-1] == "grouped_gemm"


def test_wgmma_refuses_what_it_cannot_run_naming_the_argument(fake, monkeypatch):
    rng = np.random.default_rng(3)
    a, b, offsets = bf16_problem(rng)
    with pytest.raises(ValueError, match="variant must be one of"):
        cuda.grouped_gemm(a, b, offsets=offsets, variant="hopper")
    w, ws = rand_fp8_weight(rng, 128, 256)
    with pytest.raises(TypeError, match="variant='wgmma' takes BF16 x BF16 or FP8 x FP8"):
        cuda.grouped_gemm(rand_bf16(rng, 4, 256), w[None], offsets=np.array([0, 4]), b_scale=ws[None],
                          variant="wgmma")
    a12, b12, off12 = bf16_problem(rng, K=12)
    with pytest.raises(ValueError, match=r"variant='wgmma' needs K % 8 == 0 for BF16.*K = 12"):
        cuda.grouped_gemm(a12, b12, offsets=off12, variant="wgmma")
    w8, ws8 = rand_fp8_weight(rng, 128, 136)
    aq, as_ = cuda.act_quant(rand_bf16(rng, 4, 136))
    with pytest.raises(ValueError, match=r"variant='wgmma' needs K % 16 == 0 for FP8.*K = 136"):
        cuda.grouped_gemm(aq, w8[None], offsets=np.array([0, 4]), a_scale=as_, b_scale=ws8[None], variant="wgmma")
    monkeypatch.setattr(fake, "compute_capability", lambda d: 80)
    with pytest.raises(ValueError, match="variant='wgmma' needs an sm_90 GPU.*GPU 0 is sm_80"):
        cuda.grouped_gemm(a, b, offsets=offsets, variant="wgmma")
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "1")
    with pytest.raises(ValueError, match=r"DSPERF_CUDA_WGMMA=1 \(variant='wgmma'\) needs an sm_90 GPU"):
        cuda.grouped_gemm(a, b, offsets=offsets)
    assert "grouped_gemm_wgmma" not in fake.calls


def test_the_real_binding_has_the_hopper_entry_points():
    # In every build: without a GPU (or without CUDA) the calls say why, as the others do.
    from dsperf import _C
    assert callable(_C.cuda.grouped_gemm_wgmma) and callable(_C.cuda.wgmma_unsupported_reason)
    if cuda.available()[0]:
        pytest.skip("a GPU is here: tests/test_cuda.py runs the kernel")
    a, b, offsets = bf16_problem(np.random.default_rng(4))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda.grouped_gemm(a, b, offsets=offsets, variant="wgmma")


def test_sass_of_the_hopper_kernel_has_wgmma_tma_and_mbarriers():
    tool, why = check_sass.find_cuobjdump()
    if not tool:
        pytest.skip(f"cannot read SASS here: {why}")
    lib = check_sass.find_library()
    if not lib:
        pytest.skip("no built CUDA library (cmake --build build/cuda --target dsperf_cuda)")
    if check_sass.stale(lib):
        pytest.skip(f"{lib} is older than the Hopper sources: rebuild it to check them")
    counts = check_sass.kernel_counts(lib)
    assert check_sass.missing(counts) == [], counts
    # 4 wgmma per K step (BF16 k16 x 4 = 64 deep, FP8 k32 x 4 = 128), two TMA loads (A and B) per
    # slot, and the waits, arrivals and initialisations of the full / empty barriers.
    for kernel, mma in (("grouped_gemm_wgmma_kernel<Bf16Tiles>", "HGMMA"), ("grouped_gemm_wgmma_kernel<Fp8Tiles>",
                                                                           "QGMMA")):
        c = counts[kernel]
        assert c[mma] >= 4 and c["UTMALDG"] >= 2 and c["SYNCS"] >= 3, (kernel, c)


def test_fp8_wgmma_takes_the_block_scaled_contract(fake):
    rng = np.random.default_rng(5)
    x = rand_bf16(rng, 20, 256)
    aq, as_ = cuda.act_quant(x)
    w, ws = rand_fp8_weight(rng, 128, 256)
    want = cuda.grouped_gemm(aq, w[None], offsets=np.array([0, 20]), a_scale=as_, b_scale=ws[None])
    got = cuda.grouped_gemm(aq, w[None], offsets=np.array([0, 20]), a_scale=as_, b_scale=ws[None], variant="wgmma")
    np.testing.assert_array_equal(got, want)
    g = fake.last["grouped_gemm_wgmma"]
    assert g.a_scale and g.b_scale and (g.M, g.N, g.K, g.E) == (20, 128, 256, 1)


def test_gpu_validate_hopper_runs_on_the_fake_device(fake, capsys):
    # The device script's Hopper check end to end (the fake's "wgmma" is the CPU reference, so
    # this checks the plumbing -- shapes, comparisons, rows -- not the kernel).
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_validate.py"
    spec = importlib.util.spec_from_file_location("gpu_validate", path)
    gv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gv)
    assert gv.main(["--hopper", "--size", "tiny", "--iters", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("hopper check:") == 11 and "WRONG" not in out and "failed" not in out
    for row in ("grouped GEMM BF16 contiguous E=2 m=64 n=128 k=256 (wgmma, sm_90a)",
                "grouped GEMM BF16 masked E=2 cap=16 n=128 k=256 (wgmma, sm_90a)",
                "grouped GEMM FP8 contiguous E=2 m=64 n=128 k=256 (wgmma, sm_90a)", "FP8 ragged contiguous",
                "of cuBLAS", "of 1297", "x mma.sync"):
        assert row in out, row
    assert "grouped_gemm_wgmma" in fake.calls and "cublas" in fake.calls
