"""One MPI job of tests/test_ep_transport.py: `mpirun -np N python -m mpi4py tests/ep_transport_worker.py`.

Every rank builds every rank's inputs from one seed, then, in each layout (expert, token, masked),
runs dispatch + combine of dsperf.ep.routed over the MPI transport (its own rank), over the
simulated transport (every rank, in this process) and through the window exchange (EpComm, BF16
payload, its own rank), and compares: the rows, offsets, counts, ids and weights byte for byte, the
handles' type and fields, and the combined outputs (MPI and simulated exactly; the window exchange,
which rounds the outputs it sends to BF16, within that rounding: the identity experts used here
give BF16 outputs, so it is exact for the per-expert and masked layouts). Rank 0 prints
`RESULT <json>`: each rank's list of differences.
"""
import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).parent))
from kernel_helpers import EPS_BF16, f32, make_ranks  # noqa: E402

from dsperf.ep import routed as R  # noqa: E402
from dsperf.ep.comm import EpComm  # noqa: E402
from dsperf.ep.plan import ExchangeHandle  # noqa: E402
from dsperf.ep.transport import MpiTransport, SimulatedTransport  # noqa: E402

FIELDS = ("mode", "layout", "num_tokens", "top_k", "hidden", "tok_peer", "tok_row", "tok_rows", "pair_peer", "pair_row",
          "pair_rows", "send_counts", "recv_counts", "own_slots")
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()


def same(errors, what, a, b):
    a, b = (None if v is None else np.asarray(v) for v in (a, b))
    if (a is None) != (b is None) or (a is not None and (a.shape != b.shape or a.tobytes() != b.tobytes())):
        errors.append(f"rank {rank}: {what} differs")


def same_handles(errors, layout, handles):
    for name, h in handles.items():
        if type(h) is not ExchangeHandle:
            errors.append(f"rank {rank}: {layout}: the {name} handle is a {type(h).__name__}")
    ref = handles["simulated"]
    for name, h in handles.items():
        for f in FIELDS:
            same(errors, f"{layout}: handle.{f} ({name} vs simulated)", getattr(h, f), getattr(ref, f))


def close(errors, what, got, want, rtol):
    err = np.abs(got - want).max() if want.size else 0.0
    if err > rtol * max(np.abs(want).max() if want.size else 0.0, 1e-30):
        errors.append(f"rank {rank}: {what}: max difference {err}")


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    rng = np.random.default_rng(seed)
    E, dim, M = 4 * n, 256, 12
    tokens = [int(v) for v in rng.integers(0, M + 1, n)]
    tokens[min(1, n - 1)] = 0                       # a rank without tokens
    xs, ids, ws = make_ranks(rng, n, E, tokens, dim=dim)
    sim, mpi = SimulatedTransport(n), MpiTransport(comm)
    mine = lambda d: {rank: d[rank]}                  # noqa: E731
    ep = EpComm(E, dim, max_tokens=M, exchange="window")
    errors = []
    for layout in ("expert", "token", "masked"):
        if layout == "masked":
            s = R.low_latency_results(sim, xs, ids, ws, E, M)
            m = R.low_latency_results(mpi, mine(xs), mine(ids), mine(ws), E, M)[rank]
            w = ep.low_latency_dispatch(xs[rank], ids[rank], fp8=False)
            fields = ("x", "counts")
        else:
            s = R.dispatch_results(sim, xs, ids, ws, E, layout=layout)
            m = R.dispatch_results(mpi, mine(xs), mine(ids), mine(ws), E, layout=layout)[rank]
            w = ep.dispatch(xs[rank], ids[rank], ws[rank], fp8=False, layout=layout)
            fields = ("x", "offsets") + (("topk_ids", "topk_weights", "source") if layout == "token" else ())
        for f in fields:
            same(errors, f"{layout}: {f} (MPI vs simulated)", getattr(m, f), getattr(s[rank], f))
            same(errors, f"{layout}: {f} (window vs simulated)", getattr(w, f), getattr(s[rank], f))
        same_handles(errors, layout, {"simulated": s[rank].handle, "MPI": m.handle, "window": w.handle})

        # Combine with identity experts: every pair's output is its BF16 input row.
        def expert_rows(o):
            return f32(o.x)[o.source] if layout == "token" else f32(o.x)
        want = R.combine(sim, {r: expert_rows(o) for r, o in s.items()}, {r: o.handle for r, o in s.items()})[rank]
        got = R.combine(mpi, {rank: expert_rows(m)}, {rank: m.handle})[rank]
        same(errors, f"{layout}: combine (MPI vs simulated)", got, want)
        if layout == "masked":
            win = ep.low_latency_combine(expert_rows(w), ws[rank], w.handle)
        else:
            win = ep.combine(expert_rows(w), w.handle)
        # Both round each expert row to BF16 in the expert and masked layouts; in the token layout
        # the host transports round each token's partial over this rank's experts instead.
        close(errors, f"{layout}: combine (window vs simulated)", win, want, 2 * EPS_BF16 if layout == "token" else 1e-6)
        if layout == "token":      # DeepEP's combine: per-token partials, summed over ranks
            def partials(o):
                w = np.where(o.topk_ids >= 0, o.topk_weights, 0).sum(1, keepdims=True)
                return (w * f32(o.x)).astype(np.float32)
            want = R.combine(sim, {r: partials(o) for r, o in s.items()}, {r: o.handle for r, o in s.items()},
                             per_token=True)[rank]
            got = R.combine(mpi, {rank: partials(m)}, {rank: m.handle}, per_token=True)[rank]
            same(errors, "token: per-token combine (MPI vs simulated)", got, want)
            win = ep.combine(partials(w), w.handle, per_token=True)
            close(errors, "token: per-token combine (window vs simulated)", win, want, 2 * EPS_BF16)
    ep.close()
    results = comm.gather(dict(errors=errors, tokens=tokens[rank]), root=0)
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
