"""dsperf.cuda's Python layer over a fake device: host memory standing in for GPU memory, and the
CPU kernels standing in for the CUDA ones, behind the binding's exact signatures.

This runs everywhere and checks what the real GPU tests cannot check here: that every call
stages its arrays, passes the right pointers, sizes and flags in the right order (or, for the
kernels that take an argument struct, under the right field names), allocates
outputs of the right shape, returns numpy for numpy inputs and DeviceArray for GPU inputs,
composes the expert FFN, plans and feeds MLA decode, moves dispatch/combine rows through the NCCL
transport's offsets, and records / replays a CUDA graph. The CUDA kernels themselves are not
exercised (they need a GPU: tests/test_cuda.py)."""
import math

import numpy as np
import pytest

from cuda_fake import REAL, FakeG, GemmLayout, dev, fake  # noqa: F401 (fake: the fixture the tests take)
from dsperf import _C, cuda, cuda_array, cuda_nccl, kernels as K
from dsperf.cuda_array import BF16, DeviceArray
from kernel_helpers import EPS_BF16, f32, rand_bf16, rand_fp8_weight

# ---- the argument structs ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["GroupedGemmArgs", "MlaDecodeArgs", "MlaPrefillArgs", "AllToAllPart"])
def test_the_bound_argument_structs_refuse_unknown_fields_and_positional_values(name):
    cls = getattr(REAL, name)
    with pytest.raises(AttributeError):
        cls(no_such_field=1)
    with pytest.raises(TypeError):
        cls(1)
    assert repr(cls()).startswith(name + "(")
    assert set(cls.fields) <= set(dir(cls()))


def test_the_gate_configuration_is_one_bound_object():
    g = K._gate_args(4, 2, 3, 2.5, "softmax")
    assert (g.n_group, g.topk_group, g.top_k, g.route_scale, g.score_func) == (4, 2, 3, 2.5, "softmax")
    g.validate(16, False)
    with pytest.raises(ValueError, match="top_k"):
        K._gate_args(4, 2, 9, 1.0, "sigmoid").validate(16, False)   # 2 groups of 4 hold 8 experts
    with pytest.raises(ValueError, match="score_func"):
        _C.kernels.GateConfig(n_group=1, topk_group=1, top_k=1, route_scale=1.0, score_func="relu")


# ---- elementwise and routing -------------------------------------------------------------------
def test_elementwise_calls_stage_and_return_by_placement(fake):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    y = cuda.rmsnorm(x, w)
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, K.rmsnorm(x, w))
    yd = cuda.rmsnorm(dev(x), dev(w))
    assert isinstance(yd, DeviceArray)
    np.testing.assert_array_equal(yd.numpy(), y)
    gu = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_array_equal(f32(cuda.silu_mul(gu)), f32(K.silu_mul(gu)))
    xb = rand_bf16(rng, 4, 300)
    q, s = cuda.act_quant(xb)
    rq, rs = K.act_quant(xb)
    np.testing.assert_array_equal(q.view(np.uint8), rq.view(np.uint8))
    np.testing.assert_array_equal(s, rs)
    xr, pos, fr = rand_bf16(rng, 3, 4, 64), np.array([0, 5, 9]), K.rope_frequencies(64)
    got = cuda.apply_rope(xr, pos, fr)
    np.testing.assert_array_equal(f32(got), f32(K.apply_rope(xr, pos, fr)))
    np.testing.assert_array_equal(f32(xr), f32(xr.copy()))  # the input is not modified


def test_routing_calls(fake):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((16, 64)).astype(np.float32)
    bias = (rng.standard_normal(64) * 0.1).astype(np.float32)
    args = dict(n_group=8, topk_group=4, top_k=6, route_scale=2.5)
    w, ids = cuda.moe_gate(logits, bias, **args)
    rw, rids = K._K.moe_gate(logits, bias, K._gate_args(**args, score_func="sigmoid"))
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_array_equal(w, rw)
    x = rand_bf16(rng, 16, 40)
    _, position, source = K.moe_route(ids, 64)
    xp = cuda.moe_permute(x, source.astype(np.int64))  # int64 ids converted as the CPU does
    np.testing.assert_array_equal(f32(xp), f32(K.moe_permute(x, source)))
    y = rng.standard_normal((source.size, 40)).astype(np.float32)
    np.testing.assert_array_equal(cuda.moe_unpermute(y, position, w), K.moe_unpermute(y, position, w))


# ---- GEMMs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fp8", [False, True])
def test_experts_compose_two_grouped_gemms_and_silu_mul(fake, fp8):
    rng = np.random.default_rng(2)
    E, D, I = 3, 256, 128
    if fp8:
        a = [rand_fp8_weight(rng, 2 * I, D) for _ in range(E)]
        b = [rand_fp8_weight(rng, D, I) for _ in range(E)]
        w13, s13 = np.stack([w for w, _ in a]), np.stack([s for _, s in a])
        w2, s2 = np.stack([w for w, _ in b]), np.stack([s for _, s in b])
    else:
        w13, w2, s13, s2 = rand_bf16(rng, E, 2 * I, D, scale=0.05), rand_bf16(rng, E, D, I, scale=0.05), None, None
    counts = np.array([5, 0, 9])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    x = rand_bf16(rng, 14, D)
    got = cuda.experts_contiguous(x, offsets, w13, w2, s13, s2)
    want = K.experts_contiguous(x, offsets, w13, w2, s13, s2)
    assert np.linalg.norm(got - want) <= 4 * EPS_BF16 * np.linalg.norm(want)
    assert fake.calls.count("grouped_gemm") == 2 and "silu_mul" in fake.calls
    g = fake.last["grouped_gemm"]  # the second GEMM: h [rows, I] @ w2[e]^T
    assert (g.M, g.N, g.K, g.E, g.layout, g.capacity) == (14, D, I, E, GemmLayout.Contiguous, 0)
    assert g.offsets and not g.counts and not g.a_scale and bool(g.b_scale) == fp8 and g.check_values is True
    xm = np.zeros((E, 10, D), BF16)
    for e in range(E):
        xm[e, :counts[e]] = x[offsets[e]:offsets[e + 1]]
    gm = cuda.experts_masked(dev(xm), dev(counts.astype(np.int32)), dev(w13), dev(w2),
                             None if s13 is None else dev(s13), None if s2 is None else dev(s2))
    assert isinstance(gm, DeviceArray) and gm.shape == (E, 10, D)
    g = fake.last["grouped_gemm"]
    assert (g.M, g.N, g.K, g.E, g.layout, g.capacity) == (E * 10, D, I, E, GemmLayout.Masked, 10)
    assert g.counts and not g.offsets and g.check_values is True
    wm = K.experts_masked(xm, counts.astype(np.int32), w13, w2, s13, s2)
    assert np.linalg.norm(gm.numpy() - wm) <= 4 * EPS_BF16 * np.linalg.norm(wm)


def test_fp8_grouped_gemm_and_cublas_plumbing(fake):
    rng = np.random.default_rng(3)
    x = rand_bf16(rng, 20, 256)
    aq, as_ = cuda.act_quant(x)
    w, ws = rand_fp8_weight(rng, 128, 256)
    got = cuda.grouped_gemm(aq, w[None], offsets=np.array([0, 20]), a_scale=as_, b_scale=ws[None])
    g = fake.last["grouped_gemm"]
    assert (g.M, g.N, g.K, g.E, g.capacity, g.check_values) == (20, 128, 256, 1, 0, True)
    assert g.a_scale and g.b_scale and g.offsets and not g.counts
    want = (f32(aq) * np.repeat(as_, 128, 1)) @ (f32(w) * np.repeat(np.repeat(ws, 128, 0), 128, 1)).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    out = DeviceArray((20, 128), np.float32)
    r = cuda.grouped_gemm(dev(aq), dev(w[None]), offsets=dev(np.array([0, 20], np.int64)), a_scale=dev(as_),
                          b_scale=dev(ws[None]), out=out, validate=False)
    assert r is out
    np.testing.assert_array_equal(out.numpy(), got)
    assert fake.last["grouped_gemm"].c == out.ptr and fake.last["grouped_gemm"].check_values is False
    a, b = rand_bf16(rng, 2, 8, 64), rand_bf16(rng, 2, 16, 64)
    np.testing.assert_allclose(cuda.cublas_gemm_bf16(a, b), np.einsum("bmk,bnk->bmn", f32(a), f32(b)), rtol=1e-6)


# ---- MLA -----------------------------------------------------------------------------------------
def test_mla_decode_feeds_the_plan_and_its_workspace(fake):
    rng = np.random.default_rng(4)
    seqlens = [300, 70, 5]
    need = [-(-n // 64) for n in seqlens]
    table = np.zeros((3, max(need)), np.int32)
    table[0, :5], table[1, :2], table[2, :1] = [7, 1, 2, 3, 4], [5, 6], [0]
    args = (rand_bf16(rng, 3, 1, 16, 512, scale=0.05), rand_bf16(rng, 3, 1, 16, 64, scale=0.05),
            rand_bf16(rng, 8, 64, 512), rand_bf16(rng, 8, 64, 64), table, np.array(seqlens, np.int32))
    meta = cuda.get_mla_metadata(args[5], 1, 16, num_splits=2)
    out, lse = cuda.mla_decode(*args, 0.1, meta)
    a = fake.last["mla_decode"]
    assert (a.batch, a.q_len, a.heads, a.kv_lora, a.rope_dim) == (3, 1, 16, 512, 64)
    assert (a.num_blocks, a.block_size, a.max_blocks, a.softmax_scale) == (8, 64, 5, np.float32(0.1))  # the struct holds FP32
    assert (a.n_items, a.n_partials) == (meta.num_items, meta.num_partials)
    items, offs, part_o, part_lse = meta.on(0, 512)
    assert (a.items, a.split_offsets, a.part_out, a.part_lse) == (items.ptr, offs.ptr, part_o.ptr, part_lse.ptr)
    assert a.latent_scale == 0 and a.check_values is True
    np.testing.assert_array_equal(fake.last_items, meta.items)
    np.testing.assert_array_equal(fake.last_offsets, meta.split_offsets)
    want, wlse = K.mla_decode(*args, 0.1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse, wlse)
    o, l = DeviceArray(out.shape, np.float32), DeviceArray(lse.shape, np.float32)
    r = cuda.mla_decode(*[dev(a) for a in args], 0.1, meta, out=(o, l), validate=False)
    assert r[0] is o and r[1] is l
    a = fake.last["mla_decode"]
    assert (a.out, a.lse, a.check_values) == (o.ptr, l.ptr, False)
    np.testing.assert_array_equal(o.numpy(), want)


def test_mla_prefill_plumbing(fake):
    rng = np.random.default_rng(5)
    q, k, v = rand_bf16(rng, 6, 2, 192), rand_bf16(rng, 9, 2, 192), rand_bf16(rng, 9, 2, 128)
    out, lse = cuda.mla_prefill(q, k, v, 0.1)
    assert out.shape == (6, 2, 128) and lse.shape == (6, 2)
    p = fake.last["mla_prefill"]
    assert (p.q_len, p.kv_len, p.heads, p.dqk, p.dv, p.softmax_scale) == (6, 9, 2, 192, 128, np.float32(0.1))
    assert p.q and p.k and p.v and p.out and p.lse
    # The first query sits at position 3 and sees keys 0..3.
    s = (f32(q[0, 0]) @ f32(k[:4, 0]).T) * 0.1
    p = np.exp(s - s.max())
    np.testing.assert_allclose(out[0, 0], (p / p.sum()) @ f32(v[:4, 0]), rtol=1e-5)


# ---- NCCL dispatch / combine through the transport ----------------------------------------------
@pytest.mark.parametrize("low_latency", [False, True])
def test_nccl_transport_offsets_move_the_right_rows(fake, low_latency):
    rng = np.random.default_rng(6)
    n, E, T = 2, 8, [6, 3]
    xs = {r: rand_bf16(rng, T[r], 32) for r in range(n)}
    ids = {r: np.argsort(rng.random((T[r], E)), axis=1)[:, :3].astype(np.int32) for r in range(n)}
    ws = {r: rng.random((T[r], 3)).astype(np.float32) for r in range(n)}
    with cuda_nccl.Communicator.local([0, 1]) as comm:
        t = cuda_nccl.NcclTransport(comm)
        sim = cuda_nccl.SimulatedTransport(n, combine_dtype=np.float32)  # NCCL combines in FP32
        dx = {r: dev(xs[r], r) for r in range(n)}
        dw = {r: dev(ws[r], r) for r in range(n)}
        if low_latency:
            got, cnt, h = cuda_nccl.dispatch_low_latency(t, dx, ids, dw, E, 8)
            want, wcnt, _ = cuda_nccl.dispatch_low_latency(sim, xs, ids, ws, E, 8)
            for r in range(n):
                np.testing.assert_array_equal(cnt[r], wcnt[r])
                for e in range(E // n):
                    np.testing.assert_array_equal(f32(got[r].numpy()[e, :cnt[r][e]]), f32(want[r][e, :cnt[r][e]]))
        else:
            got, _, h = cuda_nccl.dispatch(t, dx, ids, dw, E)
            want, _, _ = cuda_nccl.dispatch(sim, xs, ids, ws, E)
            for r in range(n):
                np.testing.assert_array_equal(f32(got[r].numpy()), f32(want[r]))
        ys = {r: dev(f32(got[r].numpy()), r) for r in range(n)}
        out = cuda_nccl.combine(t, ys, h)
    for r in range(n):
        np.testing.assert_allclose(out[r].numpy(), ws[r].sum(1, keepdims=True) * f32(xs[r]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["expert", "token", "masked"])
def test_nccl_transport_gives_the_simulated_layouts_and_handles(fake, layout):
    """The one exchange (dsperf.ep.routed) over NCCL (a fake driver moving the bytes) and over the
    simulated transport: the same rows, the same ExchangeHandle fields, the same sums."""
    from dsperf.ep.plan import ExchangeHandle
    from kernel_helpers import make_ranks
    rng = np.random.default_rng(8)
    n, E, M = 2, 8, 7
    xs, ids, ws = make_ranks(rng, n, E, [7, 4], top_k=3, dim=32)
    sim = cuda_nccl.SimulatedTransport(n, combine_dtype=np.float32)  # NCCL combines in FP32
    with cuda_nccl.Communicator.local([0, 1]) as comm:
        t = cuda_nccl.NcclTransport(comm)
        dx, dw = ({r: dev(a[r], r) for r in range(n)} for a in (xs, ws))
        if layout == "masked":
            got, want = (cuda_nccl.low_latency_results(tr, x, ids, w, E, M)
                         for tr, x, w in ((t, dx, dw), (sim, xs, ws)))
        else:
            got, want = (cuda_nccl.dispatch_results(tr, x, ids, w, E, layout=layout)
                         for tr, x, w in ((t, dx, dw), (sim, xs, ws)))
        for r in range(n):
            g, w = got[r], want[r]
            assert type(g.handle) is type(w.handle) is ExchangeHandle
            np.testing.assert_array_equal(g.x.numpy().view(np.uint16), w.x.view(np.uint16))
            for f in ("tok_peer", "tok_row", "pair_peer", "pair_row", "send_counts", "recv_counts", "pair_rows"):
                np.testing.assert_array_equal(getattr(g.handle, f), getattr(w.handle, f))
            if layout == "token":
                np.testing.assert_array_equal(g.topk_ids, w.topk_ids)
                np.testing.assert_array_equal(g.topk_weights.numpy(), w.topk_weights)
                np.testing.assert_array_equal(g.source, w.source)
        rows = {r: (f32(want[r].x)[want[r].source] if layout == "token" else f32(want[r].x)) for r in range(n)}
        out = cuda_nccl.combine(t, {r: dev(rows[r], r) for r in range(n)}, {r: got[r].handle for r in range(n)})
        ref = cuda_nccl.combine(sim, rows, {r: want[r].handle for r in range(n)})
    for r in range(n):
        np.testing.assert_array_equal(out[r].numpy(), ref[r])


# ---- graphs --------------------------------------------------------------------------------------
def test_a_captured_graph_runs_at_replay_with_new_inputs(fake):
    rng = np.random.default_rng(7)
    x, w = dev(rng.standard_normal((4, 32)).astype(np.float32)), dev(np.ones(32, np.float32))
    g = cuda.CudaGraph()
    with g:
        y = cuda.rmsnorm(x, w)
        assert fake.sync is False  # launches do not wait while capturing
        with pytest.raises(RuntimeError, match="numpy"):
            cuda.rmsnorm(np.ones((2, 8), np.float32), np.ones(8, np.float32))
    assert fake.sync is True
    assert y in g._keep  # outputs allocated while capturing live with the graph
    assert not y.numpy().any()  # captured, not run
    g.replay()
    np.testing.assert_allclose(y.numpy(), K.rmsnorm(x.numpy(), w.numpy()))
    new = rng.standard_normal((4, 32)).astype(np.float32)
    x.set(new)
    g.replay()
    np.testing.assert_allclose(y.numpy(), K.rmsnorm(new, np.ones(32, np.float32)))
    with pytest.raises(RuntimeError, match="holds a capture already"):
        with g:
            pass


def test_an_exception_discards_the_capture(fake):
    g = cuda.CudaGraph()
    with pytest.raises(ZeroDivisionError):
        with g:
            1 / 0
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()
    assert cuda_array._capture_keep is None and fake.sync is True


# ---- the GPU benchmark script's own plumbing ---------------------------------------------------
def test_gpu_validate_runs_end_to_end_on_the_fake_device(fake, capsys):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_validate.py"
    spec = importlib.util.spec_from_file_location("gpu_validate", path)
    gv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gv)
    assert gv.main(["--size", "tiny", "--skip-tests", "--iters", "1", "--clock-seconds", "0"]) == 0
    out = capsys.readouterr().out
    for row in ("MLA decode", "FP8 cache", "MLA prefill", "CUDA graph replay", "grouped GEMM BF16 contiguous",
                "grouped GEMM BF16 masked", "BF16 x FP8 weights", "grouped GEMM FP8 contiguous", "LL dispatch EP2",
                "LL combine EP2"):
        assert row in out, row
    assert "failed" not in out


def test_gpu_validate_reads_nvidia_smi_clock_samples():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_validate.py"
    spec = importlib.util.spec_from_file_location("gpu_validate", path)
    gv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gv)
    assert gv.parse_smi_sample("1575, 1980, 699.12, 700.00") == (1575.0, 1980.0, 699.12, 700.0)
    mhz, max_mhz, watts, limit = gv.parse_smi_sample("1755, 1980, [N/A], 700.00")
    assert (mhz, max_mhz, limit) == (1755.0, 1980.0, 700.0) and math.isnan(watts)
    with pytest.raises(ValueError, match="4 comma-separated"):
        gv.parse_smi_sample("1575, 1980")
