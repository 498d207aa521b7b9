"""One exchange over every transport: dsperf.ep.routed's dispatch/combine over the simulated
transport (here), the MPI transport and the window exchange (under mpirun: tests/ep_transport_worker.py)
and NCCL (tests/test_cuda_fake.py through a fake driver; tests/test_cuda_nccl.py on GPUs) share one
plan, one handle type (ExchangeHandle) and one set of layouts, and give the same rows and sums."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsperf import cuda_nccl
from dsperf.ep import routed as R
from dsperf.ep import transport as T
from dsperf.ep.plan import ExchangeHandle
from kernel_helpers import f32, make_ranks
from test_ep_mpi import _REASON

WORKER = Path(__file__).with_name("ep_transport_worker.py")


def test_the_nccl_module_is_the_one_exchange():
    for name in ("dispatch", "dispatch_low_latency", "combine", "alltoall_baseline", "dispatch_results",
                 "low_latency_results"):
        assert getattr(cuda_nccl, name) is getattr(R, name)
    assert cuda_nccl.SimulatedTransport is T.SimulatedTransport
    assert cuda_nccl.DispatchHandle is ExchangeHandle
    assert issubclass(cuda_nccl.NcclTransport, T.Transport) and issubclass(T.MpiTransport, T.Transport)


@pytest.mark.parametrize("n, E, tokens", [(2, 8, [5, 7]), (4, 16, [9, 0, 3, 12])])
def test_token_layout_row_by_row(n, E, tokens):
    rng = np.random.default_rng(n + 20)
    xs, ids, ws = make_ranks(rng, n, E, tokens)
    res = R.dispatch_results(T.SimulatedTransport(n), xs, ids, ws, E, layout="token")
    epr = E // n
    for r, o in res.items():
        assert type(o.handle) is ExchangeHandle and o.handle.layout == "token"
        # Each token once per destination, sources in rank order, tokens ascending.
        want = [(s, i) for s in range(n) for i in range(tokens[s]) if np.any(ids[s][i] // epr == r)]
        assert o.num_recv_tokens == len(want) == len(o.x)
        for row, (s, i) in enumerate(want):
            np.testing.assert_array_equal(f32(o.x[row]), f32(xs[s][i]))
            here = ids[s][i] // epr == r
            np.testing.assert_array_equal(o.topk_ids[row], np.where(here, ids[s][i] % epr, -1))
            np.testing.assert_array_equal(o.topk_weights[row], ws[s][i])
        for e in range(epr):   # source names each local expert's rows
            got = o.source[o.offsets[e]:o.offsets[e + 1]]
            assert [want[j] for j in got] == [(s, i) for s, i in want if r * epr + e in ids[s][i]]


def test_masked_layout_is_zero_past_the_counts_and_handles_agree_across_layouts():
    rng = np.random.default_rng(3)
    n, E, M = 2, 8, 6
    xs, ids, ws = make_ranks(rng, n, E, [6, 2])
    t = T.SimulatedTransport(n)
    ll = R.low_latency_results(t, xs, ids, ws, E, M)
    ex = R.dispatch_results(t, xs, ids, ws, E)
    for r in range(n):
        x, c = ll[r].x, ll[r].counts
        assert x.shape == (E // n, n * M, 64)
        for e in range(E // n):
            assert not f32(x[e, c[e]:]).any()
            np.testing.assert_array_equal(f32(x[e, :c[e]]), f32(ex[r].x[ex[r].offsets[e]:ex[r].offsets[e + 1]]))
        a, b = ll[r].handle, ex[r].handle
        assert (a.mode, a.layout, b.mode, b.layout) == ("low_latency", "masked", "normal", "expert")
        np.testing.assert_array_equal(a.tok_peer, b.tok_peer)
        np.testing.assert_array_equal(a.pair_peer, b.pair_peer)


def test_combine_checks_its_handles_and_rows():
    rng = np.random.default_rng(4)
    xs, ids, ws = make_ranks(rng, 2, 8, [3, 4])
    t = T.SimulatedTransport(2)
    x, _, h = R.dispatch(t, xs, ids, ws, 8)
    with pytest.raises(ValueError, match="per_token=True needs a token-layout dispatch"):
        R.combine(t, {r: f32(x[r]) for r in x}, h, per_token=True)
    with pytest.raises(ValueError, match="handles\\[0\\] must be the handle"):
        R.combine(t, {r: f32(x[r]) for r in x}, {0: None, 1: h[1]})
    with pytest.raises(ValueError, match="ys\\[0\\] must have the"):
        R.combine(t, {r: f32(x[r])[:1] for r in x}, h)
    with pytest.raises(ValueError, match="layout must be"):
        R.dispatch(t, xs, ids, ws, 8, layout="masked")


@pytest.mark.skipif(_REASON is not None, reason=f"needs MPI: {_REASON}")
@pytest.mark.parametrize("np_, seed", [(2, 3), (4, 0)])
def test_mpi_simulated_and_window_exchanges_agree(np_, seed):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe", sys.executable, "-m", "mpi4py", str(WORKER),
                        str(seed)], capture_output=True, text=True, timeout=180, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout[-3000:] + p.stderr[-3000:]
    per_rank = json.loads(lines[-1][len("RESULT "):])
    assert len(per_rank) == np_ and any(r["tokens"] == 0 for r in per_rank)
    for r in per_rank:
        assert r["errors"] == [], r


def test_simulated_transport_refuses_a_wire_dtype_it_cannot_sum():
    with pytest.raises(ValueError, match="combine_dtype"):
        T.SimulatedTransport(2, combine_dtype=np.int8)
