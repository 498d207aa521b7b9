"""Expert-parallel dispatch/combine: the routing plan checked end to end over the simulated
transport (numpy, every rank in this process) on any machine; the same code over NCCL where two or
more GPUs exist (skipped otherwise, with the reason)."""
import numpy as np
import pytest

from dsperf import cuda, cuda_nccl as N
from kernel_helpers import f32, make_ranks

OK, WHY = N.available()
GPUS = cuda.device_count() if OK else 0
needs_2_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs >= 2 GPUs with NCCL: "
                                  f"{WHY or f'{GPUS} GPU(s) present'}")


def expected_rows(xs, ids, g):
    """Every rank's tokens routed to global expert g, in (source rank, token) order."""
    return np.concatenate([f32(xs[s])[np.any(ids[s] == g, axis=1)] for s in sorted(xs)])


def expected_combine(xs, ids, ws, r):
    # Expert g's "FFN" is x * (g + 1): the combine is sum_k w * (g + 1) * x.
    return (ws[r] * (ids[r] + 1)).sum(1, keepdims=True) * f32(xs[r])


def fake_experts_contiguous(x, offsets, first_expert):
    y = f32(x).copy()
    for e in range(len(offsets) - 1):
        y[offsets[e]:offsets[e + 1]] *= first_expert + e + 1
    return y


@pytest.mark.parametrize("n, E, tokens", [(2, 8, [5, 7]), (4, 16, [9, 0, 3, 12]), (8, 64, [16] * 8)])
def test_normal_dispatch_and_combine_route_every_row(n, E, tokens):
    rng = np.random.default_rng(n)
    xs, ids, ws = make_ranks(rng, n, E, tokens)
    t = N.SimulatedTransport(n, combine_dtype=np.float32)
    xl, offs, handles = N.dispatch(t, xs, ids, ws, E)
    epr = E // n
    ys = {}
    for r in range(n):
        assert offs[r][0] == 0 and offs[r][-1] == len(xl[r])
        for e in range(epr):
            got = f32(xl[r][offs[r][e]:offs[r][e + 1]])
            np.testing.assert_array_equal(got, expected_rows(xs, ids, r * epr + e))
        ys[r] = fake_experts_contiguous(xl[r], offs[r], r * epr)
    out = N.combine(t, ys, handles)
    for r in range(n):
        np.testing.assert_allclose(out[r], expected_combine(xs, ids, ws, r), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n, E, tokens, cap", [(2, 8, [5, 7], 8), (4, 16, [9, 0, 3, 12], 12)])
def test_low_latency_dispatch_gives_the_masked_layout(n, E, tokens, cap):
    rng = np.random.default_rng(10 + n)
    xs, ids, ws = make_ranks(rng, n, E, tokens)
    t = N.SimulatedTransport(n, combine_dtype=np.float32)
    xm, counts, handles = N.dispatch_low_latency(t, xs, ids, ws, E, cap)
    epr = E // n
    ys = {}
    for r in range(n):
        assert xm[r].shape == (epr, n * cap, 64)
        y = np.zeros(xm[r].shape, np.float32)
        for e in range(epr):
            want = expected_rows(xs, ids, r * epr + e)
            assert counts[r][e] == len(want)
            np.testing.assert_array_equal(f32(xm[r][e, :counts[r][e]]), want)
            y[e, :counts[r][e]] = f32(xm[r][e, :counts[r][e]]) * (r * epr + e + 1)
        ys[r] = y
    out = N.combine(t, ys, handles)
    for r in range(n):
        np.testing.assert_allclose(out[r], expected_combine(xs, ids, ws, r), rtol=1e-6, atol=1e-6)


def test_dispatch_rejects_bad_plans():
    rng = np.random.default_rng(0)
    xs, ids, ws = make_ranks(rng, 2, 8, [3, 4])
    t = N.SimulatedTransport(2, combine_dtype=np.float32)
    with pytest.raises(ValueError, match="split evenly"):
        N.dispatch(t, xs, ids, ws, 7)
    with pytest.raises(ValueError, match="more than max_tokens = 3"):
        N.dispatch_low_latency(t, xs, ids, ws, 8, 3)
    bad = dict(ids)
    bad[1] = bad[1] + 8
    with pytest.raises(ValueError, match="ids\\[1\\] must lie in \\[0, 8\\)"):
        N.dispatch(t, xs, bad, ws, 8)
    with pytest.raises(ValueError, match="xs must map each local rank"):
        N.dispatch(t, {0: xs[0]}, ids, ws, 8)
    with pytest.raises(ValueError, match="multiple of nranks"):
        N.alltoall_baseline(t, {0: np.zeros(3), 1: np.zeros(4)})


def test_communicator_arguments_are_checked():
    with pytest.raises(TypeError, match="uid must be bytes"):
        N.Communicator.from_unique_id("abc", 2, 0, 0)
    with pytest.raises(ValueError, match="rank must lie in"):
        N.Communicator.from_unique_id(b"x" * 128, 2, 2, 0)


@needs_2_gpus
@pytest.mark.parametrize("low_latency", [False, True])
def test_nccl_dispatch_and_combine_match_the_simulation(low_latency):
    n = min(GPUS, 8)
    E = 8 * n
    rng = np.random.default_rng(42)
    xs, ids, ws = make_ranks(rng, n, E, [int(v) for v in rng.integers(1, 20, n)])
    with N.Communicator.local(list(range(n))) as comm:
        t = N.NcclTransport(comm)
        dx = {r: cuda.DeviceArray.from_numpy(xs[r], r) for r in range(n)}
        dw = {r: cuda.DeviceArray.from_numpy(ws[r], r) for r in range(n)}
        sim = N.SimulatedTransport(n, combine_dtype=np.float32)
        if low_latency:
            got, cnt, h = N.dispatch_low_latency(t, dx, ids, dw, E, 20)
            want, wcnt, _ = N.dispatch_low_latency(sim, xs, ids, ws, E, 20)
            for r in range(n):
                np.testing.assert_array_equal(cnt[r], wcnt[r])
                for e in range(E // n):
                    np.testing.assert_array_equal(got[r].numpy()[e, :cnt[r][e]].view(np.uint16),
                                                  want[r][e, :cnt[r][e]].view(np.uint16))
        else:
            got, offs, h = N.dispatch(t, dx, ids, dw, E)
            want, _, _ = N.dispatch(sim, xs, ids, ws, E)
            for r in range(n):
                np.testing.assert_array_equal(got[r].numpy().view(np.uint16), want[r].view(np.uint16))
        # Combine with the identity FFN (outputs = inputs in FP32).
        ys = {r: cuda.DeviceArray.from_numpy(f32(got[r].numpy()), r) for r in range(n)}
        out = N.combine(t, ys, h)
        for r in range(n):
            want_y = ws[r].sum(1, keepdims=True) * f32(xs[r])
            np.testing.assert_allclose(out[r].numpy(), want_y, rtol=1e-5, atol=1e-5)


# ---- one process per GPU (mpirun) -------------------------------------------------------------
def _mpi_worker():
    """Run under mpirun, one rank per GPU: every process builds every rank's inputs from the same
    seed, runs its own rank over NCCL (Communicator.from_unique_id) and checks it against the
    simulated transport run over all ranks."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    rank, n = world.Get_rank(), world.Get_size()
    uid = world.bcast(N.unique_id() if rank == 0 else None, root=0)
    E = 8 * n
    rng = np.random.default_rng(7)
    xs, ids, ws = make_ranks(rng, n, E, [int(v) for v in rng.integers(1, 20, n)])
    sim = N.SimulatedTransport(n, combine_dtype=np.float32)
    want, _, hs = N.dispatch(sim, xs, ids, ws, E)
    want_y = N.combine(sim, {r: f32(want[r]) for r in range(n)}, hs)
    with N.Communicator.from_unique_id(uid, n, rank, rank) as comm:
        t = N.NcclTransport(comm)
        got, _, h = N.dispatch(t, {rank: cuda.DeviceArray.from_numpy(xs[rank], rank)}, {rank: ids[rank]},
                               {rank: cuda.DeviceArray.from_numpy(ws[rank], rank)}, E)
        np.testing.assert_array_equal(got[rank].numpy().view(np.uint16), want[rank].view(np.uint16))
        y = N.combine(t, {rank: cuda.DeviceArray.from_numpy(f32(got[rank].numpy()), rank)}, h)
        np.testing.assert_allclose(y[rank].numpy(), want_y[rank], rtol=1e-5, atol=1e-5)
    world.Barrier()
    if rank == 0:
        print("cuda_nccl mpi worker: ok")


@needs_2_gpus
def test_one_process_per_gpu_over_mpirun():
    import shutil
    import subprocess
    import sys
    pytest.importorskip("mpi4py")
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    from pathlib import Path
    here = Path(__file__).resolve()
    r = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", sys.executable, str(here)], capture_output=True,
                       text=True, timeout=300, cwd=here.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cuda_nccl mpi worker: ok" in r.stdout


if __name__ == "__main__":
    _mpi_worker()
