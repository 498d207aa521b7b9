"""One MPI job of the EP tests: `mpirun -np N python tests/ep_worker.py SCENARIO [options]`.

Rank 0 prints one line `RESULT <json>` with what it measured; tests/test_ep_mpi.py asserts on it.
Scenarios: layer (the EP layer against the single-process one), layout (dispatch layouts checked
row by row), bad_hidden, bad_experts, bad_ids, bad_combine (errors on every rank), die (a rank
exits), stuck (a rank stops answering; the watchdog ends the job), raise (a rank raises, run without
`-m mpi4py`: EpComm's excepthook ends the job), out_of_order (ranks in different calls), inplace (the window exchange's combine buffer and out=), fault (an
error inside a window exchange).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from dsperf import kernels
from dsperf.ep import alltoall, eplb
from dsperf.ep.comm import EpComm as _EpComm
from dsperf.ep.layer import EpMoeLayer, dequant_rows, local_expert_weights
from mpi4py import MPI

BF16, F32 = alltoall.BF16, alltoall.F32
EPS_BF16 = 2.0 ** -8
DIM, INTER, E, TOPK, NGROUP, TOPKGROUP = 256, 128, 16, 4, 4, 2

comm = MPI.COMM_WORLD
EXCHANGE = "auto"   # set from --exchange


def EpComm(*args, **kw):
    return _EpComm(*args, exchange=EXCHANGE, **kw)
rank, size = comm.Get_rank(), comm.Get_size()


def report(obj):
    results = comm.gather(obj, root=0)
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)


def weights(seed=0):
    rng = np.random.default_rng(seed)
    bf = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32).astype(BF16)  # noqa: E731
    return dict(gate_weight=bf(E, DIM, scale=0.05), w13=bf(E, 2 * INTER, DIM, scale=0.05),
                w2=bf(E, DIM, INTER, scale=0.05), shared_w13=bf(2 * INTER, DIM, scale=0.05),
                shared_w2=bf(DIM, INTER, scale=0.05))


GATE = dict(n_group=NGROUP, topk_group=TOPKGROUP, top_k=TOPK, route_scale=2.5)


def tokens_of(spec, r, seed):
    counts = [int(c) for c in spec.split(",")]
    counts = (counts * size)[:size] if len(counts) < size else counts[:size]
    rng = np.random.default_rng(1000 + seed)
    xs = [(rng.standard_normal((c, DIM))).astype(np.float32).astype(BF16) for c in counts]
    return xs[r], np.concatenate(xs), counts


def composed_reference(x, w, bias, fp8):
    """The single-process layer from the kernels, with the experts fed the FP8-rounded x when fp8,
    and the bound sum_k |w_k| |y_k| that BF16 rounding of partial sums stays under."""
    weights_, ids = kernels.moe_gate(x, w["gate_weight"], bias, **GATE)
    xe = dequant_rows(*kernels.act_quant(x)) if fp8 else x
    offsets, position, source = kernels.moe_route(ids, E)
    y_perm = kernels.experts_contiguous(kernels.moe_permute(xe, source), offsets, w["w13"], w["w2"])
    out = kernels.moe_unpermute(y_perm, position, weights_)
    shared = kernels.experts_contiguous(x, np.array([0, x.shape[0]], np.int64), w["shared_w13"][None], w["shared_w2"][None])
    bound = np.einsum("tk,tkd->td", np.abs(weights_), np.abs(y_perm[position])) if x.shape[0] else np.zeros_like(out)
    return out + shared, bound, np.bincount(ids.ravel(), minlength=E)


def scenario_layer(a):
    w = weights(a.seed)
    bias = None
    if a.skew:
        bias = np.zeros(E, np.float32)
        bias[:4] = 10.0         # every token picks experts 0-3: the first rank(s) get all the work
    x, x_all, counts = tokens_of(a.tokens, rank, a.seed)
    plan = None
    if a.eplb != "none":
        load = np.bincount(kernels.moe_gate(x_all, w["gate_weight"], bias, **GATE)[1].ravel(), minlength=E) \
            if x_all.shape[0] else np.ones(E)
        plan = eplb.rebalance(load.astype(float), E + 8, num_gpus=size, num_groups=NGROUP,
                              num_nodes=2 if a.eplb == "hierarchical" else 1, policy=a.eplb)
    w13, w2, _, _ = local_expert_weights(w["w13"], w["w2"], rank, size, plan)
    layer = EpMoeLayer(w["gate_weight"], w13, w2, gate_bias=bias, shared_w13=w["shared_w13"], shared_w2=w["shared_w2"],
                       plan=plan, mode=a.mode, fp8=bool(a.fp8), max_tokens=max(counts) if a.mode == "low_latency" else None,
                       timeout_s=30, exchange=EXCHANGE, **GATE)
    out = layer(x, overlap=bool(a.overlap))
    # Per-rank tokens received, for the "a rank that receives nothing" cases.
    d = layer.ep.dispatch(x, *reversed(layer.route(x)), fp8=False) if a.mode == "normal" else None
    got_rows = int(d.offsets[-1]) if d is not None else -1
    outs = comm.gather(out, root=0)
    rows = comm.gather(got_rows, root=0)
    res = None
    if rank == 0:
        ep_out = np.concatenate(outs)
        single = kernels.moe_layer(x_all, w["gate_weight"], w["w13"], w["w2"], gate_bias=bias,
                                   shared_w13=w["shared_w13"], shared_w2=w["shared_w2"], **GATE)
        comp, bound, load = composed_reference(x_all, w, bias, bool(a.fp8))
        excess = np.abs(ep_out - comp) - EPS_BF16 * bound - 1e-6
        norm = lambda v: float(np.linalg.norm(v))  # noqa: E731
        res = dict(tokens=counts, shape=list(ep_out.shape), max_excess=float(excess.max()) if excess.size else -1.0,
                   rel_err_vs_single=norm(ep_out - single) / max(norm(single), 1e-30),
                   max_abs_vs_single=float(np.abs(ep_out - single).max()) if ep_out.size else 0.0,
                   rows_per_rank=rows, expert_load=load.tolist(),
                   replicas=None if plan is None else plan.logcnt.tolist())
    layer.close()
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)


def scenario_layout(a):
    """Tokens tagged with (rank, index) in their first two values; the dispatch layouts are checked
    against the routing every rank knows (all ranks draw all ranks' ids from one seed)."""
    K, T = TOPK, 6
    ep = EpComm(E, DIM, max_tokens=T, timeout_s=30)
    rng = np.random.default_rng(a.seed)
    ids_all = np.stack([np.stack([rng.choice(E, K, replace=False) for _ in range(T)]) for _ in range(size)]).astype(np.int32)
    if a.skew:
        ids_all[:, :, :] = np.arange(K)   # everything to experts 0..K-1
    w_all = rng.random((size, T, K)).astype(np.float32)
    x = rng.standard_normal((T, DIM)).astype(np.float32)
    x[:, 0], x[:, 1] = rank, np.arange(T)
    x = x.astype(BF16)
    el = ep.local_experts
    errors = []
    # Normal mode, BF16 payload: expert e's rows are the (source, token) pairs routed to it, in order.
    d = ep.dispatch(x, ids_all[rank], w_all[rank], fp8=False)
    for e in range(el):
        g = rank * el + e
        want = [(s, t) for s in range(size) for t in range(T) if g in ids_all[s, t]]
        rows = d.x[d.offsets[e]:d.offsets[e + 1]].astype(np.float32)
        have = [(int(r[0]), int(r[1])) for r in rows]
        if have != want:
            errors.append(f"normal expert {g}: got {have[:4]}.. want {want[:4]}..")
    # Combine of an identity expert: each token comes back as (sum of its weights) * x.
    y = d.x.astype(np.float32)
    back = ep.combine(y, d.handle)
    expect = w_all[rank].sum(axis=1)[:, None] * x.astype(np.float32)
    tol = 2 * EPS_BF16 * np.abs(expect) * K + 1e-6
    if not np.all(np.abs(back - expect) <= tol):
        errors.append(f"normal combine off by {np.abs(back - expect).max():.3g}")
    # Token layout (DeepEP's): each received token once, rank 0's first; source maps expert rows to tokens.
    want_tok = [(s, t) for s in range(size) for t in range(T) if np.any(ids_all[s, t] // el == rank)]
    for fp8 in (False, True):
        dt = ep.dispatch(x, ids_all[rank], w_all[rank], fp8=fp8, layout="token")
        xt = (dequant_rows(dt.x, dt.scales) if fp8 else dt.x).astype(np.float32)
        have = [(int(np.rint(r[0])), int(np.rint(r[1]))) for r in xt]
        if have != want_tok:
            errors.append(f"token layout (fp8={fp8}): got {have[:4]}.. want {want_tok[:4]}..")
        for i, (s, t) in enumerate(want_tok):
            local = [int(e) - rank * el if e // el == rank else -1 for e in ids_all[s, t]]
            if dt.topk_ids[i].tolist() != local or not np.array_equal(dt.topk_weights[i], w_all[s, t]):
                errors.append(f"token layout (fp8={fp8}): ids/weights of token {(s, t)} wrong")
                break
        # Expert rows gathered (and dequantised) from the token rows equal the expert layout's rows.
        de = ep.dispatch(x, ids_all[rank], w_all[rank], fp8=fp8, layout="expert")
        want_rows = dequant_rows(de.x, de.scales) if fp8 else de.x
        if not np.array_equal(dt.expert_rows_bf16().view(np.uint16), want_rows.view(np.uint16)) or \
                not np.array_equal(de.expert_rows_bf16().view(np.uint16), want_rows.view(np.uint16)):
            errors.append(f"expert_rows_bf16 (fp8={fp8}) differs from the expert layout")
        # Combine of per-token partials: token t comes back as the sum over ranks of its partials.
        part = (dt.topk_weights * (dt.topk_ids >= 0)).sum(axis=1)[:, None] * xt
        for ydt in (BF16, F32):
            back = ep.combine(part.astype(ydt), dt.handle, per_token=True)
            xs = (dequant_rows(*kernels.act_quant(x)) if fp8 else x).astype(np.float32)
            expect = w_all[rank].sum(axis=1)[:, None] * xs
            if not np.all(np.abs(back - expect) <= 2 * EPS_BF16 * np.abs(expect) * size + 1e-6):
                errors.append(f"per-token combine ({np.dtype(ydt)}, fp8={fp8}) off by {np.abs(back - expect).max():.3g}")
    # Low-latency mode, FP8 payload.
    lo = ep.low_latency_dispatch(x, ids_all[rank], fp8=True)
    xv = dequant_rows(lo.x, lo.scales).astype(np.float32)
    for e in range(el):
        g = rank * el + e
        want = [(s, t) for s in range(size) for t in range(T) if g in ids_all[s, t]]
        n = int(lo.counts[e])
        have = [(int(np.rint(r[0])), int(np.rint(r[1]))) for r in xv[e, :n]]
        if have != want or np.any(lo.x[e, n:].view(np.uint8)):
            errors.append(f"low-latency expert {g}: got {have[:4]}.. want {want[:4]}..")
    back = ep.low_latency_combine(xv, w_all[rank], lo.handle)
    xq = dequant_rows(*kernels.act_quant(x)).astype(np.float32)
    expect = w_all[rank].sum(axis=1)[:, None] * xq
    if not np.all(np.abs(back - expect) <= 2 * EPS_BF16 * np.abs(xq) * w_all[rank].sum(axis=1)[:, None] + 1e-6):
        errors.append(f"low-latency combine off by {np.abs(back - expect).max():.3g}")
    # BF16 expert outputs travel as they are: the same result as the FP32 ones rounded to BF16.
    back16 = ep.low_latency_combine(xv.astype(BF16), w_all[rank], lo.handle)
    if not np.array_equal(back16, back):
        errors.append("low-latency combine of BF16 outputs differs from FP32 outputs rounded to BF16")
    report(dict(errors=errors, recv_rows=int(d.offsets[-1]), ll_counts=lo.counts.tolist()))


def expect_error(fn):
    try:
        fn()
    except ValueError as exc:
        return str(exc)
    return None


def scenario_bad(a):
    if a.scenario == "bad_hidden":
        msg = expect_error(lambda: EpComm(E, DIM if rank != 1 else DIM // 2, timeout_s=30))
    elif a.scenario == "bad_experts":
        msg = expect_error(lambda: EpComm(E if rank != 1 else 2 * E, DIM, timeout_s=30))
    elif a.scenario == "bad_ids":
        ep = EpComm(E, DIM, max_tokens=4, timeout_s=30)
        ids = np.tile(np.arange(TOPK, dtype=np.int32), (4, 1))
        if rank == 1:
            ids[2, 1] = E + 5
        x = np.zeros((4, DIM), BF16)
        w = np.ones((4, TOPK), np.float32)
        fn = (lambda: ep.dispatch(x, ids, w)) if a.mode == "normal" else (lambda: ep.low_latency_dispatch(x, ids))
        msg = expect_error(fn)
        # The communicator still works after a reported error.
        ids[:] = np.arange(TOPK)
        ok_after = (ep.dispatch(x, ids, w) if a.mode == "normal" else ep.low_latency_dispatch(x, ids)) is not None
        msg = (msg, ok_after)
    elif a.scenario == "bad_combine":
        ep = EpComm(E, DIM, max_tokens=4, timeout_s=30)
        ids = np.tile(np.arange(0, E, E // TOPK, dtype=np.int32), (4, 1))
        x = np.zeros((4, DIM), BF16)
        w = np.ones((4, TOPK), np.float32)
        if a.mode == "normal":
            d = ep.dispatch(x, ids, w, fp8=False)
            y = d.x.astype(np.float32)
            msg = expect_error(lambda: ep.combine(y[:, :DIM // 2].copy() if rank == 0 else y, d.handle))
        elif a.mode == "per_token":   # DeepEP's combine of per-token BF16 rows, one row short on rank 0
            d = ep.dispatch(x, ids, w, fp8=False, layout="token")
            y = np.ascontiguousarray(d.x)
            msg = expect_error(lambda: ep.combine(y[1:].copy() if rank == 0 else y, d.handle, per_token=True))
        else:
            d = ep.low_latency_dispatch(x, ids, fp8=False)
            y = d.x.astype(np.float32)
            msg = expect_error(lambda: ep.low_latency_combine(y, w[:, :2].copy() if rank == 0 else w, d.handle))
    report(dict(error=msg))


def _two_dispatches(a, between):
    """Two dispatches of 4 tokens; rank 1 runs `between` after the first (the others go on into
    the second and wait there)."""
    ep = EpComm(E, DIM, timeout_s=a.timeout)
    x = np.zeros((4, DIM), BF16)
    ids = np.tile(np.arange(TOPK, dtype=np.int32), (4, 1))
    w = np.ones((4, TOPK), np.float32)
    ep.dispatch(x, ids, w)
    if rank == 1:
        between()
    ep.dispatch(x, ids, w)
    print(f"rank {rank} finished", flush=True)


def scenario_die(a):
    def die_or_stall():
        if a.scenario == "die":
            sys.stderr.write("rank 1 exits on purpose\n")
            sys.stderr.flush()
            os._exit(7)
        time.sleep(a.sleep)     # stuck: alive but silent

    _two_dispatches(a, die_or_stall)


def scenario_raise(a):
    """Rank 1 raises between two exchanges; the others wait in the second. Run as a plain script."""
    def raise_():
        raise ValueError("rank 1 raises on purpose")

    _two_dispatches(a, raise_)


def scenario_out_of_order(a):
    """Rank 0 makes a normal dispatch, the others a low-latency one (a.mode == "normal"), or rank 0 a
    combine after its dispatch while the others dispatch again (a.mode == "per_token"). Every rank
    writes what it raised to a.out/rank<r>.txt, then re-raises: the excepthook ends the job."""
    ep = EpComm(E, DIM, max_tokens=4, timeout_s=a.timeout)
    x = np.zeros((4, DIM), BF16)
    ids = np.tile(np.arange(TOPK, dtype=np.int32), (4, 1))
    w = np.ones((4, TOPK), np.float32)
    try:
        if a.mode == "normal":
            ep.dispatch(x, ids, w) if rank == 0 else ep.low_latency_dispatch(x, ids)
        else:
            d = ep.dispatch(x, ids, w, fp8=False)
            ep.combine(d.x.astype(np.float32), d.handle) if rank == 0 else ep.dispatch(x, ids, w, fp8=False)
    except RuntimeError as exc:
        # A file, not stdout: mpirun may drop output still in flight when the abort kills the job.
        with open(os.path.join(a.out, f"rank{rank}.txt"), "w") as f:
            f.write(str(exc))
        ep._calls.Barrier()   # the private communicator is still in step: every rank has written
        raise
    print(f"rank {rank} finished", flush=True)


def _small_exchange(seed, T):
    """An EpComm for T tokens per rank and (rng, x, ids, w) of T random BF16 tokens."""
    ep = EpComm(E, DIM, max_tokens=T, timeout_s=30)
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(E, TOPK, replace=False) for _ in range(T)]).astype(np.int32)
    w = rng.random((T, TOPK)).astype(np.float32)
    x = rng.standard_normal((T, DIM)).astype(np.float32).astype(BF16)
    return ep, rng, x, ids, w


def scenario_inplace(a):
    """The window exchange: outputs computed in the combine buffer give the same result as copied
    ones, for every layout; a bad out= on one rank raises on every rank."""
    T = 5
    ep, rng, x, ids, w = _small_exchange(a.seed, T)
    errors = []
    for layout, per_token in (("token", True), ("token", False), ("expert", False)):
        d = ep.dispatch(x, ids, w, fp8=False, layout=layout)
        rows = d.num_recv_tokens if per_token else int(d.offsets[-1])
        y = rng.standard_normal((rows, DIM)).astype(np.float32).astype(BF16)
        copied = ep.combine(y, d.handle, per_token=per_token)
        buf = ep.combine_buffer(d.handle, per_token=per_token)
        buf[:] = y
        kept = np.full((T, DIM), np.nan, np.float32)
        in_place = ep.combine(buf, d.handle, per_token=per_token, out=kept)
        if not (np.array_equal(copied, in_place) and in_place is kept):
            errors.append(f"{layout} per_token={per_token}: in place differs from copied")
    lo = ep.low_latency_dispatch(x, ids, fp8=False)
    y = rng.standard_normal(lo.x.shape).astype(np.float32).astype(BF16)
    copied = ep.low_latency_combine(y, w, lo.handle)
    buf = ep.combine_buffer(lo.handle)
    buf[:] = y
    if not np.array_equal(copied, ep.low_latency_combine(buf, w, lo.handle)):
        errors.append("low latency: in place differs from copied")
    d = ep.dispatch(x, ids, w, fp8=False, layout="token")
    bad = np.zeros((T, DIM // 2), np.float32) if rank == 0 else None
    msg = expect_error(lambda: ep.combine(ep.combine_buffer(d.handle, per_token=True), d.handle, per_token=True,
                                          out=bad))
    report(dict(errors=errors, error=msg, exchange=type(ep).__name__))


def scenario_combine_args(a):
    """Either exchange (base.EpExchange holds the calls and their checks): combine(out=) writes into
    the given array and returns it, equal to a fresh result; a y with fewer rows than dispatch
    returned, on rank 0 only, raises the same error on every rank."""
    T = 5
    ep, rng, x, ids, w = _small_exchange(a.seed, T)
    errors = []
    d = ep.dispatch(x, ids, w, fp8=False, layout="expert")
    y = rng.standard_normal((int(d.offsets[-1]), DIM)).astype(np.float32)
    fresh = ep.combine(y, d.handle)
    kept = np.full((T, DIM), np.nan, np.float32)
    into = ep.combine(y, d.handle, out=kept)
    if into is not kept or not np.array_equal(fresh, kept):
        errors.append("combine(out=) differs from a fresh result or is not the array given")
    lo = ep.low_latency_dispatch(x, ids, fp8=False)
    yl = rng.standard_normal(lo.x.shape).astype(np.float32)
    kept = np.full((T, DIM), np.nan, np.float32)
    if not np.array_equal(ep.low_latency_combine(yl, w, lo.handle), ep.low_latency_combine(yl, w, lo.handle, out=kept)):
        errors.append("low_latency_combine(out=) differs from a fresh result")
    d = ep.dispatch(x, ids, w, fp8=False, layout="expert")
    rows = int(d.offsets[-1])
    short = np.zeros((max(rows - 1, 0), DIM), np.float32) if rank == 0 and rows else \
        np.zeros((rows, DIM), np.float32)
    msg = expect_error(lambda: ep.combine(short, d.handle))
    report(dict(errors=errors, error=msg, rows=rows, exchange=type(ep).__name__))


def scenario_fault(a):
    """An error inside a window exchange, after the first sync: with --mode normal every rank
    catches it and the next call must refuse the windows (never reused stale); with --mode
    per_token only rank 1 fails and leaves the error uncaught (run as a plain script): the job
    must end, naming the rank."""
    from dsperf.ep import exchange_combine as exchange  # the combine half holds the pull-and-sum
    ep = EpComm(E, DIM, timeout_s=a.timeout)
    x = np.zeros((4, DIM), BF16)
    ids = np.tile(np.arange(TOPK, dtype=np.int32), (4, 1))
    w = np.ones((4, TOPK), np.float32)
    d = ep.dispatch(x, ids, w, fp8=False, layout="token")
    real = exchange._C_EP

    class Faulty:
        def __getattr__(self, name):
            if name == "pull_weighted_sum":
                def fail(*args, **kw):
                    raise RuntimeError(f"rank {rank} fails inside combine on purpose")
                return fail
            return getattr(real, name)

    if a.mode == "normal" or rank == 1:
        exchange._C_EP = Faulty()
    try:
        ep.combine(np.zeros((d.num_recv_tokens, DIM), BF16), d.handle, per_token=True)
    except RuntimeError as exc:
        if a.mode != "normal":
            raise
        first = str(exc)
    exchange._C_EP = real
    try:
        ep.dispatch(x, ids, w)
        after = None
    except RuntimeError as exc:
        after = str(exc)
    report(dict(first=first, after=after))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--mode", default="normal", choices=["normal", "per_token", "low_latency"])
    p.add_argument("--fp8", type=int, default=0)
    p.add_argument("--overlap", type=int, default=0)
    p.add_argument("--eplb", default="none", choices=["none", "hierarchical", "global"])
    p.add_argument("--tokens", default="8")
    p.add_argument("--skew", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--sleep", type=float, default=40)
    p.add_argument("--out", default=".", help="folder for per-rank files (out_of_order)")
    p.add_argument("--exchange", default="auto", choices=["auto", "window", "hierarchical", "alltoallv"])
    a = p.parse_args()
    global EXCHANGE
    EXCHANGE = a.exchange
    if a.scenario == "layer":
        scenario_layer(a)
    elif a.scenario == "layout":
        scenario_layout(a)
    elif a.scenario.startswith("bad_"):
        scenario_bad(a)
    elif a.scenario in ("die", "stuck"):
        scenario_die(a)
    elif a.scenario == "raise":
        scenario_raise(a)
    elif a.scenario == "out_of_order":
        scenario_out_of_order(a)
    elif a.scenario == "inplace":
        scenario_inplace(a)
    elif a.scenario == "fault":
        scenario_fault(a)
    elif a.scenario == "combine_args":
        scenario_combine_args(a)
    else:
        raise SystemExit(f"unknown scenario {a.scenario}")


if __name__ == "__main__":
    main()
