"""`mpirun -np 4 python -m dsperf.ep.bench [--quick] [--previous]`: check the EP MoE layer against
the single-process one, then time dispatch + combine by tokens and mode against a raw MPI_Alltoallv
of the same bytes (the exchange EpComm picks: shared-memory windows on one node; --previous adds
the MPI_Alltoallv exchange in the same run), with the copy passes per byte the exchange's code
made, beside its cost term fed with this machine's probes, and the two-batch overlap against none.
The last line is `worst dispatch+combine / raw from 1 MB: X` (the largest ratio from 1 MB per
rank up, over every mode).

Rank 0 prints the tables; every rank takes part. Figures are medians of a few repetitions, each
started after a barrier; on an oversubscribed machine (more ranks than cores) they are noisy.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from .. import kernels
from ..predict.kernel_cost import ep_exchange_ms
from .alltoall import BF16, F32, install_abort_on_error, raw_alltoallv
from .comm import EpComm

# DeepSeek-V3's MoE shape for the communication table.
HIDDEN, EXPERTS, TOP_K = 7168, 256, 8


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def loopback(comm=None, *, small_bytes=8, large_bytes=8 << 20, alltoall_bytes=32 << 20, copy_bytes=128 << 20,
             repeats=20) -> dict:
    """Point-to-point latency and bandwidth between ranks 0 and 1 of comm (the others wait), by
    ping-pong: latency_us = half the round trip of a small message, bandwidth_gbps = large message
    bytes / half its round trip (1e9 bytes/s); and alltoall_gbps: the bytes each rank sends to the
    others per second while every rank sends alltoall_bytes / (ranks - 1) to each other rank at once
    (MPI_Alltoall; the bandwidth an EP exchange sees, where ranks share memory or links); and
    copy_gbps: each rank's memory rate (read + write bytes per second) gathering copy_bytes of
    7424-byte rows in a shuffled order while every rank does the same (the rate of the packing and
    reductions around an exchange).
    Collective over comm (>= 2 ranks); every rank gets the same dict."""
    comm = _comm() if comm is None else comm
    if comm.Get_size() < 2:
        raise ValueError("loopback needs a communicator of at least 2 ranks (mpirun -np 2 ...)")
    rank = comm.Get_rank()
    out = {}
    for key, nbytes, reps in (("latency_us", small_bytes, repeats * 10), ("bandwidth_gbps", large_bytes, repeats)):
        buf = np.zeros(max(1, nbytes), np.uint8)
        times = []
        comm.Barrier()
        for i in range(reps + 2):
            t0 = time.perf_counter()
            if rank == 0:
                comm.Send(buf, dest=1, tag=7)
                comm.Recv(buf, source=1, tag=7)
            elif rank == 1:
                comm.Recv(buf, source=0, tag=7)
                comm.Send(buf, dest=0, tag=7)
            if i >= 2:
                times.append((time.perf_counter() - t0) / 2)
        half = float(np.median(times)) if rank == 0 else 0.0
        half = comm.bcast(half, root=0)
        out[key] = half * 1e6 if key == "latency_us" else nbytes / half / 1e9
    out.update(rate_probes(comm, alltoall_bytes=alltoall_bytes, copy_bytes=copy_bytes, repeats=repeats))
    comm.Barrier()
    return out


def rate_probes(comm, *, alltoall_bytes=32 << 20, copy_bytes=128 << 20, repeats=20) -> dict:
    """The two rates the EP cost term needs, measured with every rank busy at once: alltoall_gbps
    (bytes each rank sends to the others per second in an MPI_Alltoall of alltoall_bytes per rank)
    and copy_gbps (each rank's read + write bytes per second gathering copy_bytes of 7424-byte rows
    in a shuffled order, as the packing does). Collective; every rank gets the same dict."""
    rank = comm.Get_rank()
    out = {}
    size = comm.Get_size()
    per_peer = max(1, alltoall_bytes // (size - 1))
    send = np.ones(per_peer * size, np.uint8)
    recv = np.zeros_like(send)
    times = []
    for i in range(max(5, repeats // 2) + 2):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Alltoall(send, recv)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    slowest = comm.allreduce(float(np.median(times)), op=_max())
    out["alltoall_gbps"] = per_peer * (size - 1) / slowest / 1e9
    # Each rank's own memory rate while every rank copies at once (read + write bytes per second),
    # copying rows of DeepSeek-V3's FP8 record width in a shuffled order, as the packing does.
    from .. import _C
    width = 7424
    n = max(1, copy_bytes // width)
    src = np.ones((n, width), np.uint8)
    dst = np.zeros_like(src)
    order = np.random.default_rng(rank).permutation(n).astype(np.int64)
    # On the threads the window exchange's copies use: this rank's share of the cores (ranks that
    # outnumber the cores copy on one thread each).
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, min(mine, (os.cpu_count() or 1) // size))
    times = []
    for i in range(max(3, repeats // 4) + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        _C.ep.copy_rows(src, 0, order, dst, 0, None, n, width, threads)
        if i >= 1:
            times.append(time.perf_counter() - t0)
    slowest = comm.allreduce(float(np.median(times)), op=_max())
    out["copy_gbps"] = 2 * src.nbytes / slowest / 1e9
    return out


def _median_time(comm, fn, repeats, warmup=2):
    for _ in range(warmup):   # first calls fault in the exchange buffers (kept for later calls)
        comm.Barrier()
        fn()
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    # The collective finishes when its slowest rank does.
    return comm.allreduce(float(np.median(times)), op=_max())


def _median_times(comm, fns, repeats, warmup=2):
    """Medians of each fn's time (the slowest rank's), the fns called in turn, each after a barrier."""
    for _ in range(warmup):
        for fn in fns:
            comm.Barrier()
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, t in zip(fns, times):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [comm.allreduce(float(np.median(t)), op=_max()) for t in times]


def _max():
    from mpi4py import MPI
    return MPI.MAX


def _routing(rng, tokens, experts, top_k):
    ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k].astype(np.int32)
    w = rng.random((tokens, top_k)).astype(np.float32)
    return ids, w


def _fill_combine_buffers(ep, dispatch, per_token=False):
    """Put data (BF16 1.0) in the rows combine reads from the window exchange's combine buffers of
    both turns, as an expert kernel writing its outputs there would: never-written zeros all map the
    kernel's one zero page, which would make reading them faster than any real exchange."""
    for _ in range(2):
        h = dispatch().handle
        buf = ep.combine_buffer(h, per_token=per_token)
        if h.own_slots is not None:
            buf.reshape(-1, buf.shape[-1]).view(np.uint16)[h.own_slots] = 0x3f80
        else:
            buf.view(np.uint16)[...] = 0x3f80


def _exchange_call(comm, mode, ep_n, T, rng, exchange):
    """(run, handle) for one dispatch + combine of T random tokens per rank in `mode`. The window
    exchange's expert outputs sit in its combine buffer, as an expert kernel would write them
    (combine copies nothing); the previous exchange sends them from a BF16 (token, low-latency) or
    FP32 (per-expert) array, as it always did."""
    x = (rng.standard_normal((T, HIDDEN)) * 0.5).astype(np.float32).astype(BF16)
    q = kernels.act_quant(x)
    ids, w = _routing(rng, T, EXPERTS, TOP_K)
    in_place = hasattr(ep_n, "combine_buffer")
    # The window exchange writes combine's FP32 tokens into a kept array (out=), as the raw
    # exchange receives into a kept buffer; the previous exchange has no out= and allocates.
    out = np.empty((T, HIDDEN), F32)
    if mode == "normal/expert":
        d = ep_n.dispatch(q, ids, w)
        if in_place:
            _fill_combine_buffers(ep_n, lambda: ep_n.dispatch(q, ids, w))

            def run():
                h = ep_n.dispatch(q, ids, w).handle
                return ep_n.combine(ep_n.combine_buffer(h), h, out=out), h
        else:
            y = np.ones((d.x.shape[0], HIDDEN), F32)

            def run():
                h = ep_n.dispatch(q, ids, w).handle
                return ep_n.combine(y, h), h
        return run, d.handle
    if mode == "normal/token":
        d = ep_n.dispatch(q, ids, w, layout="token")
        if in_place:
            _fill_combine_buffers(ep_n, lambda: ep_n.dispatch(q, ids, w, layout="token"), per_token=True)

            def run():
                h = ep_n.dispatch(q, ids, w, layout="token").handle
                return ep_n.combine(ep_n.combine_buffer(h, per_token=True), h, per_token=True, out=out), h
        else:
            y = np.ones((d.num_recv_tokens, HIDDEN), BF16)

            def run():
                h = ep_n.dispatch(q, ids, w, layout="token").handle
                return ep_n.combine(y, h, per_token=True), h
        return run, d.handle
    ep_l = EpComm(EXPERTS, HIDDEN, comm=comm, max_tokens=max(T, 1), exchange=exchange)
    lo = ep_l.low_latency_dispatch(q, ids)
    if in_place:
        _fill_combine_buffers(ep_l, lambda: ep_l.low_latency_dispatch(q, ids))
    y = None
    if not in_place:   # DeepEP's low-latency combine takes BF16 outputs; data in the rows it reads
        y = np.zeros(lo.x.shape, BF16)
        y.reshape(-1, HIDDEN)[lo.handle.own_slots] = 1

    def run():
        h = ep_l.low_latency_dispatch(q, ids).handle
        if in_place:
            return ep_l.low_latency_combine(ep_l.combine_buffer(h), w, h, out=out), h
        return ep_l.low_latency_combine(y, w, h), h
    run.comm = ep_l
    return run, lo.handle


MODES = ("normal/expert", "normal/token", "low_latency")
LAYOUTS = {"normal/expert": "expert", "normal/token": "token", "low_latency": "masked"}


def comm_table(comm, token_list, repeats, ll_max=256, seed=0, exchanges=("auto",)):
    """Rows of dispatch + combine timings (rank 0's list; others get []), three ways: normal mode
    into the per-expert layout (expert outputs reduced inside combine), normal mode in DeepEP's
    token layout (combine of per-token BF16 rows), and the low-latency mode (tokens <= ll_max).

    The model's probes: loopback first, each mode's fixed cost per call (an exchange of no tokens:
    the count exchange, empty messages, Python; the model adds it beyond the per-exchange latency
    it already counts), and the two rates (all-ranks bandwidth, row-copy rate) again before every
    token count. This machine's rates drift by 2x over minutes, so the model uses the medians of
    all those rounds, and the returned probes give their range."""
    rank, size = comm.Get_rank(), comm.Get_size()
    lb = loopback(comm)
    rounds = {"alltoall_gbps": [lb["alltoall_gbps"]], "copy_gbps": [lb["copy_gbps"]]}
    rows = []
    comms = {ex: EpComm(EXPERTS, HIDDEN, comm=comm, exchange=ex) for ex in exchanges}
    names = {ex: comms[ex].exchange if hasattr(comms[ex], "exchange") else "alltoallv" for ex in exchanges}
    rng = np.random.default_rng(seed + rank)
    fixed_us = {}
    for ex, ep_n in comms.items():
        for mode in MODES:
            run, _ = _exchange_call(comm, mode, ep_n, 0, rng, ex)
            empty_ms = _median_time(comm, run, max(repeats, 5)) * 1e3
            exchanges_ = ep_exchange_ms(0, ranks=size, layout=LAYOUTS[mode], link_gbps=1.0, latency_us=0.0)["exchanges"]
            fixed_us[(names[ex], mode)] = max(0.0, empty_ms * 1e3 - exchanges_ * lb["latency_us"])
            _close(run)
    lb["fixed_us"] = {f"{e} {m}": v for (e, m), v in fixed_us.items()}
    for T in token_list:
        for key, v in rate_probes(comm).items():
            rounds[key].append(v)
        for (ex, ep_n), mode in ((c, m) for c in comms.items() for m in (MODES if T <= ll_max else MODES[:2])):
            run, _ = _exchange_call(comm, mode, ep_n, T, rng, ex)
            t_one = time.perf_counter()
            _, handle = run()
            # Rows of well under a millisecond get more samples (about 0.2 s of calls, at most
            # 201), so that their medians are as steady as the large rows'; every rank takes the
            # same count (the timed calls are collective).
            t_one = comm.allreduce(time.perf_counter() - t_one, op=_max())
            reps = int(min(201, max(repeats, 0.2 / max(t_one, 1e-6))))
            wb = handle.wire_bytes
            passes = getattr(handle, "passes", None) or {}
            # Send buffers that hold data: never-written zeros all map the kernel's one zero page,
            # which makes reading them (and so the raw exchange) faster than any real exchange.
            bufs = [(np.full(int(wb[a].sum()), 0x3c, np.uint8), wb[a], np.zeros(int(wb[b].sum()), np.uint8), wb[b])
                    for a, b in (("dispatch_send", "dispatch_recv"), ("combine_send", "combine_recv"))]

            def raw():
                for sb, sc, rb, rc in bufs:
                    raw_alltoallv(comm, sb, sc, rb, rc)
            # Ours and the raw exchange alternate, so that both see the same load from other work.
            ours, raw_t = _median_times(comm, (run, raw), reps)
            _close(run)
            # Bytes leaving this rank for other ranks, dispatch + combine, the largest over ranks.
            remote = np.array(wb["dispatch_send"] + wb["combine_send"], np.int64)
            remote[rank] = 0
            mb = comm.allreduce(float(remote.sum()), op=_max()) / 1e6
            # Copy passes per payload byte our code made (bytes it wrote or read / bytes delivered),
            # the largest over ranks; the previous exchange does not count them.
            disp = comm.allreduce(float(passes.get("dispatch", np.nan)), op=_max())
            comb = comm.allreduce(float(passes.get("combine", np.nan)), op=_max())
            rows.append(dict(exchange=names[ex], mode=mode, tokens=T, remote_mb_per_rank=mb, ours_ms=ours * 1e3,
                             raw_alltoallv_ms=raw_t * 1e3, ratio=ours / raw_t, gbps=mb / 1e3 / ours,
                             dispatch_passes=disp, combine_passes=comb))
    for key, vals in rounds.items():
        lb[key] = float(np.median(vals))
        lb[key.replace("_gbps", "_range_gbps")] = (float(min(vals)), float(max(vals)))
    for row in rows:
        shape = dict(hidden=HIDDEN, top_k=TOP_K, experts=EXPERTS, ranks=size, layout=LAYOUTS[row["mode"]], fp8=True,
                     link_gbps=lb["alltoall_gbps"], local_gbps=lb["copy_gbps"],
                     overhead_us=fixed_us[(row["exchange"], row["mode"])])
        pred = ep_exchange_ms(row["tokens"], latency_us=lb["latency_us"], **shape)
        link_ms = pred["link_ms"] + pred["exchanges"] * lb["latency_us"] / 1e3
        model_ms = pred["ms"]
        if row["exchange"] == "window":
            # No link: the ranks' own copies through the windows at their copy rate; the syncs are
            # in the fixed cost measured as an exchange of no tokens.
            model_ms = ep_exchange_ms(row["tokens"], latency_us=0.0, transport="window", **shape)["ms"]
        row.update(model_ms=model_ms, model_err=(model_ms - row["ours_ms"]) / row["ours_ms"], link_model_ms=link_ms,
                   link_vs_raw_err=(link_ms - row["raw_alltoallv_ms"]) / row["raw_alltoallv_ms"])
    return (rows, lb) if rank == 0 else ([], lb)


def _close(run):
    """Free the windows of a low-latency communicator made for one call (collective)."""
    ep = getattr(run, "comm", None)
    if ep is not None and hasattr(ep, "close"):
        ep.close()


def worst_ratio(rows, min_mb=1.0, exchange=None):
    """The largest dispatch + combine / raw ratio over rows of at least min_mb MB per rank (of one
    exchange, default: the first row's)."""
    exchange = exchange or (rows[0]["exchange"] if rows else None)
    big = [r["ratio"] for r in rows if r["remote_mb_per_rank"] >= min_mb and r["exchange"] == exchange]
    return max(big) if big else float("nan")


def _layer_weights(rng, experts, dim, inter):
    bf = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32).astype(BF16)  # noqa: E731
    return dict(gate_weight=bf(experts, dim), w13=bf(experts, 2 * inter, dim), w2=bf(experts, dim, inter),
                shared_w13=bf(2 * inter, dim), shared_w2=bf(dim, inter))


def check_layer(comm, tokens=32, dim=1024, inter=256, experts=32, top_k=8, seed=0):
    """EP layer (both modes, FP8 and BF16 payloads, with and without overlap) against
    kernels.moe_layer on the gathered tokens; rank 0 returns rows of the relative errors."""
    from .layer import EpMoeLayer, local_expert_weights
    rank, size = comm.Get_rank(), comm.Get_size()
    w = _layer_weights(np.random.default_rng(seed), experts, dim, inter)   # the same on every rank
    gate = dict(n_group=8, topk_group=4, top_k=top_k, route_scale=2.5)
    x = (np.random.default_rng(100 + rank).standard_normal((tokens, dim))).astype(np.float32).astype(BF16)
    w13, w2, _, _ = local_expert_weights(w["w13"], w["w2"], rank, size)
    xs = comm.gather(x, root=0)
    single = kernels.moe_layer(np.concatenate(xs), w["gate_weight"], w["w13"], w["w2"], shared_w13=w["shared_w13"],
                               shared_w2=w["shared_w2"], **gate) if rank == 0 else None
    rows = []
    for mode in ("normal", "low_latency"):
        for fp8 in (False, True):
            layer = EpMoeLayer(w["gate_weight"], w13, w2, shared_w13=w["shared_w13"], shared_w2=w["shared_w2"],
                               mode=mode, fp8=fp8, max_tokens=tokens, comm=comm, **gate)
            for overlap in (False, True):
                outs = comm.gather(layer(x, overlap=overlap), root=0)
                if rank == 0:
                    out = np.concatenate(outs)
                    rel = float(np.linalg.norm(out - single) / np.linalg.norm(single))
                    tol = 2.0 ** -4 if fp8 else 2.0 ** -8
                    rows.append(dict(mode=mode, payload="fp8" if fp8 else "bf16", overlap=overlap, rel_err=rel,
                                     tolerance=tol, ok=rel <= tol))
            layer.close()
    return rows


def overlap_table(comm, tokens, repeats, dim=2048, inter=512, experts=32, top_k=8, seed=0):
    """The EP layer (normal mode, FP8 dispatch) with and without two-batch overlap, and the cost
    model's overlap bound: communication hidden up to the compute, (compute + comm) / max(compute, comm)."""
    from .layer import EpMoeLayer, local_expert_weights
    rank, size = comm.Get_rank(), comm.Get_size()
    w = _layer_weights(np.random.default_rng(seed), experts, dim, inter)
    gate = dict(n_group=8, topk_group=4, top_k=top_k, route_scale=2.5)
    w13, w2, _, _ = local_expert_weights(w["w13"], w["w2"], rank, size)
    layer = EpMoeLayer(w["gate_weight"], w13, w2, shared_w13=w["shared_w13"], shared_w2=w["shared_w2"],
                       mode="normal", fp8=True, comm=comm, **gate)
    x = (np.random.default_rng(7 + rank).standard_normal((tokens, dim))).astype(np.float32).astype(BF16)
    plain = _median_time(comm, lambda: layer(x), repeats)
    tbo = _median_time(comm, lambda: layer(x, overlap=True), repeats)
    # The parts, timed alone: communication (dispatch + combine) and computation (gate, experts, shared).
    weights, ids = layer.route(x)
    d = layer.ep.dispatch(x, ids, weights, layout="token")
    y = np.zeros((int(d.offsets[-1]), dim), F32)
    comm_t = _median_time(comm, lambda: layer.ep.combine(y, layer.ep.dispatch(x, ids, weights, layout="token").handle),
                          repeats)

    def compute():
        layer.route(x)
        kernels.experts_contiguous(d.expert_rows_bf16(), d.offsets, w13, w2)
        layer._shared(x)
    comp_t = _median_time(comm, compute, repeats)
    layer.close()
    model_speedup = (comp_t + comm_t) / max(comp_t, comm_t)
    return dict(tokens=tokens, dim=dim, no_overlap_ms=plain * 1e3, overlap_ms=tbo * 1e3, speedup=plain / tbo,
                comm_ms=comm_t * 1e3, compute_ms=comp_t * 1e3, model_speedup=model_speedup)


def eplb_table(experts=256, slots=288, gpus=32, groups=8, nodes=4, tokens=4096, seed=0):
    """Imbalance (max / mean tokens per GPU) before and after EPLB: Zipf-like loads, and the gate's
    own routing of random inputs (random gate weights, DeepSeek-V3's group-limited top-8)."""
    from . import eplb
    loads = {f"zipf alpha={a}": eplb.zipf_load(experts, tokens * 8, alpha=a, seed=seed) for a in (0.8, 1.2)}
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, 1024)).astype(np.float32).astype(BF16)
    g = (rng.standard_normal((experts, 1024)) * 0.05).astype(np.float32).astype(BF16)
    ids = kernels.moe_gate(x, g, n_group=8, topk_group=4, top_k=8, route_scale=2.5)[1]
    loads["gate routing"] = np.bincount(ids.ravel(), minlength=experts).astype(float)
    rows = []
    for name, load in loads.items():
        row = dict(load=name, before=eplb.imbalance(load, num_gpus=gpus))
        for policy, kw in (("hierarchical", dict(num_groups=groups, num_nodes=nodes)), ("global", {})):
            row[f"after_{policy}"] = eplb.imbalance(load, eplb.rebalance(load, slots, num_gpus=gpus, policy=policy, **kw))
        rows.append(row)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m dsperf.ep.bench",
                                description="EP layer check and dispatch/combine timings (run under mpirun)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions (under a minute on 2 cores)")
    p.add_argument("--tokens", default=None, help="comma-separated tokens per rank for the timing table")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", default=None, help="folder for CSV/JSON copies of the tables (ep_comm.csv, "
                                               "ep_loopback.json, ep_overlap.csv, ep_layer_check.csv)")
    p.add_argument("--no-overlap", action="store_true", help="skip the two-batch overlap timing")
    p.add_argument("--exchange", default="auto", choices=["auto", "window", "hierarchical", "alltoallv"],
                   help="the exchange to time (auto: shared-memory windows on one node)")
    p.add_argument("--previous", action="store_true",
                   help="also time the previous exchange (MPI_Alltoallv, AlltoallvEpComm) in the same run")
    a = p.parse_args(argv)
    comm = _comm()
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        print("dsperf.ep.bench needs at least 2 ranks: mpirun -np 4 python -m dsperf.ep.bench", file=sys.stderr)
        return 2
    tokens = [int(t) for t in a.tokens.split(",")] if a.tokens else ([1, 128, 1024] if a.quick else
                                                                       [1, 16, 128, 256, 1024, 4096])
    repeats = a.repeats or (3 if a.quick else 7)
    import pandas as pd

    # More ranks than cores time the scheduler as much as the exchange: say so, and mark the figures.
    cores = os.cpu_count() or 1
    oversubscribed = size > cores
    if rank == 0 and oversubscribed:
        print(f"warning: {size} ranks on {cores} cores: ranks share cores, so the timings below include "
              "waiting for a core (the 'oversubscribed' column marks them)", file=sys.stderr)

    checks = check_layer(comm, tokens=16 if a.quick else 64)
    if rank == 0:
        df = pd.DataFrame(checks)
        print(f"EP layer on {size} ranks vs the single-process dsperf.kernels.moe_layer (relative error, Frobenius)")
        print(df.to_markdown(index=False, floatfmt=".3g"))
        print()
    exchanges = (a.exchange, "alltoallv") if a.previous and a.exchange != "alltoallv" else (a.exchange,)
    rows, lb = comm_table(comm, tokens, repeats, exchanges=exchanges)
    if rank == 0:
        print(f"loopback (ranks 0-1 ping-pong): latency {lb['latency_us']:.1f} us, bandwidth {lb['bandwidth_gbps']:.2f} GB/s; "
              f"all {size} ranks at once (medians of {len(tokens) + 1} rounds, range in brackets): MPI_Alltoall "
              f"{lb['alltoall_gbps']:.2f} [{lb['alltoall_range_gbps'][0]:.2f}-{lb['alltoall_range_gbps'][1]:.2f}] GB/s "
              f"out of each rank, row copies {lb['copy_gbps']:.2f} [{lb['copy_range_gbps'][0]:.2f}-"
              f"{lb['copy_range_gbps'][1]:.2f}] GB/s per rank")
        print(f"dispatch (FP8 + scales) + combine (BF16), hidden {HIDDEN}, {EXPERTS} experts, top-{TOP_K}, {size} ranks; "
              "ratio = ours / raw MPI_Alltoallv of the same bytes per peer (token layout: records out, BF16 "
              "partials back; per-expert and masked layouts: pair rows out, BF16 pair rows back); model = for the "
              "window exchange, its copies at the row-copy rate + its fixed cost per call (kernel_cost.ep_exchange_ms, transport window); for "
              "alltoallv, the cost model's EP all-to-all term (kernel_cost.ep_exchange_ms): link bytes at the all-ranks MPI_Alltoall bandwidth + one ping-pong "
              "latency per exchange + the rank's own copies at its memory copy rate + the mode's fixed cost per call "
              "(an exchange of no tokens: " + ", ".join(f"{m} {v:.0f} us" for m, v in lb["fixed_us"].items()) +
              "); link_model = link bytes and latencies only, against the raw exchange (link_vs_raw_err)")
        print(pd.DataFrame(rows).assign(oversubscribed=oversubscribed).to_markdown(index=False, floatfmt=".3g"))
        print()
    ov = None if a.no_overlap else overlap_table(comm, 256 if a.quick else 1024, repeats)
    if rank == 0 and ov is not None:
        print("two-batch overlap (normal mode, FP8 dispatch): measured speed-up vs the cost model's bound")
        print(pd.DataFrame([ov]).to_markdown(index=False, floatfmt=".3g"))
    if rank == 0 and a.out:
        import json
        from pathlib import Path
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).assign(ranks=size, oversubscribed=oversubscribed).to_csv(out / "ep_comm.csv", index=False)
        pd.DataFrame(checks).to_csv(out / "ep_layer_check.csv", index=False)
        (out / "ep_loopback.json").write_text(json.dumps(dict(lb, ranks=size), indent=1))
        if ov is not None:
            pd.DataFrame([ov]).assign(ranks=size).to_csv(out / "ep_overlap.csv", index=False)
    if rank == 0:
        print()
        print("EPLB: max / mean tokens per GPU, 256 experts on 288 slots over 32 GPUs (4 nodes, 8 groups)")
        print(pd.DataFrame(eplb_table()).to_markdown(index=False, floatfmt=".3f"))
    if rank == 0:
        print()
        print("copy passes per payload byte (dispatch_passes, combine_passes): bytes the exchange's own code "
              "wrote (dispatch) or wrote and read (combine) over the bytes it delivered; the raw MPI_Alltoallv "
              "and the previous exchange's MPI calls make copies of their own that are not counted")
        for ex in exchanges[1:]:
            print(f"worst dispatch+combine / raw from 1 MB ({ex}, the previous exchange): "
                  f"{worst_ratio(rows, exchange=ex):.2f}")
        print(f"worst dispatch+combine / raw from 1 MB: {worst_ratio(rows, exchange=rows[0]['exchange'] if rows else None):.2f}")
    ok = all(r["ok"] for r in checks) if rank == 0 else True
    ok = comm.bcast(ok, root=0)
    return 0 if ok else 1


if __name__ == "__main__":
    # One rank failing must end the job, not leave the others waiting.
    install_abort_on_error(_comm())
    sys.exit(main())
