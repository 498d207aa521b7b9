"""The Hopper (sm_90a) grouped GEMM and MLA decode without a GPU: their selection and argument checks
through the fake device (tests/cuda_fake.py), and their SASS (benchmarks/check_sass.py) where
cuobjdump and a built CUDA library are at hand. The kernels' results are checked on a GPU only
(benchmarks/gpu_validate.py --hopper); they have not run on one yet (docs/CUDA.md)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_fake import dev, install_fake


@pytest.fixture
def fake(monkeypatch):
    """The fake device as an sm_90 GPU."""
    g = install_fake(monkeypatch)
    g.cc = 90
    return g
from dsperf import cuda, kernels as K
from dsperf.cuda_array import DeviceArray
from kernel_helpers import f32, rand_bf16, rand_fp8_weight, shuffled_block_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import check_sass  # noqa: E402


def bf16_problem(rng, E=3, N=64, K=128, rows=(5, 0, 9)):
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    return rand_bf16(rng, int(offsets[-1]), K), rand_bf16(rng, E, N, K, scale=0.05), offsets


def test_wgmma_variant_takes_the_hopper_binding_with_the_same_arguments(fake):
    a, b, offsets = bf16_problem(np.random.default_rng(0))
    want = cuda.grouped_gemm(a, b, offsets=offsets, variant="mma")
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


def test_the_default_takes_wgmma_on_sm90_where_the_inputs_fit(fake, monkeypatch):
    rng = np.random.default_rng(2)
    a, b, offsets = bf16_problem(rng)
    cuda.grouped_gemm(a, b, offsets=offsets)
    assert fake.calls == ["grouped_gemm_wgmma"]
    cuda.grouped_gemm(a, b, offsets=offsets, variant="mma")  # an explicit variant wins
    assert fake.calls[-1] == "grouped_gemm"
    # FP8 x FP8 goes to the Hopper FP8 kernel too; BF16 x FP8 weights keep theirs (none on Hopper).
    w, ws = rand_fp8_weight(rng, 128, 256)
    aq, as_ = cuda.act_quant(rand_bf16(rng, 4, 256))
    cuda.grouped_gemm(aq, w[None], offsets=np.array([0, 4]), a_scale=as_, b_scale=ws[None])
    assert fake.calls[-1] == "grouped_gemm_wgmma"
    cuda.grouped_gemm(rand_bf16(rng, 4, 256), w[None], offsets=np.array([0, 4]), b_scale=ws[None])
    assert fake.calls[-1] == "grouped_gemm"
    # A K the wgmma kernel cannot take keeps the mma.sync kernel, unless DSPERF_CUDA_WGMMA=1 insists.
    a12, b12, off12 = bf16_problem(rng, K=12)
    cuda.grouped_gemm(a12, b12, offsets=off12)
    assert fake.calls[-1] == "grouped_gemm"
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "1")
    with pytest.raises(ValueError, match=r"DSPERF_CUDA_WGMMA=1 \(variant='wgmma'\) needs K % 8 == 0"):
        cuda.grouped_gemm(a12, b12, offsets=off12)
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "0")  # every call on mma.sync
    cuda.grouped_gemm(a, b, offsets=offsets)
    assert fake.calls[-1] == "grouped_gemm"
    # Off sm_90 the default is mma.sync.
    monkeypatch.delenv("DSPERF_CUDA_WGMMA")
    fake.cc = 80
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
    # MLA decode: 36 score MMAs (576 deep, k16) and 4 P V MMAs (64 tokens) per page; 9 TMA boxes per
    # tile (8 latent + 1 rope) for the queries and each page, 5 (4 FP8 latent + 1 rope) for an FP8 page.
    c = counts["mla_decode_wgmma_kernel<bf16 cache>"]
    assert c["HGMMA"] >= 40 and c["UTMALDG"] >= 18 and c["SYNCS"] >= 3, c
    c = counts["mla_decode_wgmma_kernel<fp8 cache>"]
    assert c["HGMMA"] >= 40 and c["UTMALDG"] >= 14 and c["SYNCS"] >= 3, c


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
    # 11 grouped GEMM lines; MLA: 5 ragged cases x (vs CPU, vs mma.sync), the timed shape (BF16, FP8)
    # and 4 timings of the wgmma kernel's plan and MTP; each kernel call announced before it runs.
    results = [line for line in out.splitlines() if line.startswith("hopper check:") and "running" not in line]
    assert len(results) == 27 and "WRONG" not in out and "failed" not in out
    assert out.count("hopper check: running") == 29
    assert "q_len=2 h=16 BF16 cache, automatic splits: wgmma" in out and "1 split(s): wgmma" in out
    for row in ("grouped GEMM BF16 contiguous E=2 m=64 n=128 k=256 (wgmma, sm_90a)",
                "grouped GEMM BF16 masked E=2 cap=16 n=128 k=256 (wgmma, sm_90a)",
                "grouped GEMM FP8 contiguous E=2 m=64 n=128 k=256 (wgmma, sm_90a)", "FP8 ragged contiguous",
                "of cuBLAS", "of 1297", "x mma.sync", "MLA decode B=2 s=128 q_len=1 h=16, BF16 cache (wgmma, sm_90a)",
                "MLA decode B=2 s=128 q_len=1 h=16, FP8 cache (wgmma, sm_90a)",
                "h=128 splits=None FP8 cache, wgmma vs CPU",
                "of FlashMLA's 660", "q_len=2 h=64 splits=3, wgmma vs CPU"):
        assert row in out, row
    assert "grouped_gemm_wgmma" in fake.calls and "cublas" in fake.calls and "mla_decode_wgmma" in fake.calls


# ---- MLA decode ----------------------------------------------------------------------------------
def mla_problem(rng, L=512, R=64, bs=64, fp8=False):
    seqlens = [300, 70, 5]
    table, blocks = shuffled_block_table(rng, seqlens, bs, 2)
    q = (rand_bf16(rng, 3, 1, 16, L, scale=0.05), rand_bf16(rng, 3, 1, 16, R, scale=0.05))
    lens = np.array(seqlens, np.int32)
    if not fp8:
        return q + (rand_bf16(rng, blocks, bs, L), rand_bf16(rng, blocks, bs, R), table, lens), None
    cache = K.PagedMlaCache(blocks, bs, L, R, dtype="fp8")
    requests = np.concatenate([np.full(n, b) for b, n in enumerate(lens)]).astype(np.int32)
    positions = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    K.paged_cache_write(cache, table, requests, positions, rand_bf16(rng, len(requests), L),
                        rand_bf16(rng, len(requests), R))
    return q + (cache.latent, cache.rope, table, lens), cache.latent_scale


def test_mla_wgmma_variant_takes_the_hopper_binding_with_the_same_arguments(fake):
    args, _ = mla_problem(np.random.default_rng(10))
    meta = cuda.get_mla_metadata(args[5], 1, 16, num_splits=2)
    want = cuda.mla_decode(*args, 0.1, meta, variant="mma")
    got = cuda.mla_decode(*args, 0.1, meta, variant="wgmma")
    assert fake.calls == ["mla_decode", "mla_decode_wgmma"]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    a, h = fake.last["mla_decode"], fake.last["mla_decode_wgmma"]
    fields = ("batch", "q_len", "heads", "kv_lora", "rope_dim", "num_blocks", "block_size", "max_blocks",
              "n_items", "n_partials", "items", "split_offsets", "part_out", "part_lse", "check_values")
    assert all(getattr(a, f) == getattr(h, f) for f in fields)
    # GPU arrays and preallocated outputs go through unchanged.
    o, l = DeviceArray(want[0].shape, np.float32), DeviceArray(want[1].shape, np.float32)
    r = cuda.mla_decode(*[dev(x) for x in args], 0.1, meta, out=(o, l), validate=False, variant="wgmma")
    assert r[0] is o and r[1] is l and fake.calls[-1] == "mla_decode_wgmma"
    h = fake.last["mla_decode_wgmma"]
    assert (h.out, h.lse, h.check_values) == (o.ptr, l.ptr, False)
    np.testing.assert_array_equal(o.numpy(), want[0])


def test_the_plan_follows_the_kernel_the_call_will_take(fake):
    # On sm_90 the default plan is the Hopper kernel's (one item per SM) for 64-token pages, and the
    # mma.sync kernels' (two per SM) for any other page size, which the Hopper kernel refuses.
    lens = np.full(4, 8192, np.int32)
    plan = {v: cuda.get_mla_metadata(lens, 1, 128, variant=v).num_items for v in ("mma", "wgmma")}
    assert plan["mma"] == 2 * plan["wgmma"] and cuda.get_mla_metadata(lens, 1, 128).num_items == plan["wgmma"]
    mma32 = cuda.get_mla_metadata(lens, 1, 128, block_size=32, variant="mma").num_items
    assert cuda.get_mla_metadata(lens, 1, 128, block_size=32).num_items == mma32


def test_mla_default_takes_wgmma_on_sm90_for_deepseek_shapes(fake, monkeypatch):
    rng = np.random.default_rng(11)
    args, _ = mla_problem(rng)
    cuda.mla_decode(*args, 0.1)
    assert fake.calls[-1] == "mla_decode_wgmma"
    cuda.mla_decode(*args, 0.1, variant="mma")  # an explicit variant wins
    assert fake.calls[-1] == "mla_decode"
    # An FP8 cache goes to the Hopper kernel too; other widths keep the mma.sync one.
    fargs, scale = mla_problem(rng, fp8=True)
    cuda.mla_decode(*fargs, 0.1, latent_scale=scale)
    assert fake.calls[-1] == "mla_decode_wgmma" and fake.last["mla_decode_wgmma"].latent_scale
    cuda.mla_decode(*mla_problem(rng, L=256)[0], 0.1)
    assert fake.calls[-1] == "mla_decode"
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "0")
    cuda.mla_decode(*args, 0.1)
    assert fake.calls[-1] == "mla_decode"
    monkeypatch.delenv("DSPERF_CUDA_WGMMA")
    fake.cc = 80
    cuda.mla_decode(*args, 0.1)
    assert fake.calls[-1] == "mla_decode"


def test_mla_wgmma_refuses_what_it_cannot_run_naming_the_argument(fake, monkeypatch):
    rng = np.random.default_rng(12)
    args, _ = mla_problem(rng)
    with pytest.raises(ValueError, match="variant must be one of"):
        cuda.mla_decode(*args, 0.1, variant="hopper")
    with pytest.raises(ValueError, match="variant='wgmma' needs kv_lora = 512 and rope = 64.*got 256 and 64"):
        cuda.mla_decode(*mla_problem(rng, L=256)[0], 0.1, variant="wgmma")
    with pytest.raises(ValueError, match="variant='wgmma' needs kv_lora = 512 and rope = 64.*got 512 and 32"):
        cuda.mla_decode(*mla_problem(rng, R=32)[0], 0.1, variant="wgmma")
    with pytest.raises(ValueError, match=r"variant='wgmma' needs latent_cache blocks of 64 tokens.*got 32"):
        cuda.mla_decode(*mla_problem(rng, bs=32)[0], 0.1, variant="wgmma")
    monkeypatch.setattr(fake, "compute_capability", lambda d: 80)
    with pytest.raises(ValueError, match="variant='wgmma' needs an sm_90 GPU.*GPU 0 is sm_80"):
        cuda.mla_decode(*args, 0.1, variant="wgmma")
    monkeypatch.setenv("DSPERF_CUDA_WGMMA", "1")
    with pytest.raises(ValueError, match=r"DSPERF_CUDA_WGMMA=1 \(variant='wgmma'\) needs an sm_90 GPU"):
        cuda.mla_decode(*args, 0.1)
    assert "mla_decode_wgmma" not in fake.calls


def test_mla_wgmma_takes_the_fp8_cache_with_its_scales(fake):
    args, scale = mla_problem(np.random.default_rng(14), fp8=True)
    want = cuda.mla_decode(*args, 0.1, latent_scale=scale, variant="mma")
    got = cuda.mla_decode(*args, 0.1, latent_scale=scale, variant="wgmma")
    assert fake.calls[-2:] == ["mla_decode", "mla_decode_wgmma"]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    # Each call stages the scales anew (their addresses may differ): both kernels were handed them,
    # and equal outputs from an FP8 cache say they read the same values.
    assert fake.last["mla_decode_wgmma"].latent_scale != 0 and fake.last["mla_decode"].latent_scale != 0


def test_the_real_binding_has_the_hopper_mla_entry_point():
    from dsperf import _C
    assert callable(_C.cuda.mla_decode_wgmma)
    if cuda.available()[0]:
        pytest.skip("a GPU is here: benchmarks/gpu_validate.py --hopper runs the kernel")
    args, _ = mla_problem(np.random.default_rng(13))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda.mla_decode(*args, 0.1, variant="wgmma")


def test_every_kernel_switch_is_read_where_it_is_declared():
    """cuda._base.KERNEL_SWITCHES lists each environment switch once: the Python ones are read by
    the cuda package, the rest by getenv in the .cu files (a renamed switch fails here)."""
    from dsperf.cuda import _base

    root = Path(__file__).resolve().parents[1]
    cu = "".join(p.read_text() for p in (root / "csrc" / "kernels" / "cuda").glob("*.cu"))
    py = "".join(p.read_text() for p in (root / "python" / "dsperf" / "cuda").glob("*.py"))
    assert "os.environ.get(WGMMA_ENV)" in py and "os.environ.get(MLA_MMA_ENV)" in py
    for name in _base.KERNEL_SWITCHES:
        assert f'getenv("{name}")' in cu or name in (_base.WGMMA_ENV, _base.MLA_MMA_ENV), name
    assert len(set(_base.KERNEL_SWITCHES)) == len(_base.KERNEL_SWITCHES)
