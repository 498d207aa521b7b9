"""The MoE layer across the ranks of an MPI communicator (expert parallelism).

Each rank holds the gate, the shared expert and its slice of the routed experts (with an EPLB plan:
the physical slots the plan gives it, replicas included). A forward pass gates this rank's tokens,
sends each to the ranks of its experts (dispatch), runs the local experts, brings the weighted
outputs back (combine) and adds the shared expert: the same function as the single-process
dsperf.kernels.moe_layer, up to the BF16 rounding of the combine payload (and the FP8 rounding of
the dispatch payload when fp8=True).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import _C, kernels
from .alltoall import BF16, F32, FP8
from .comm import EpComm
from .eplb import EplbPlan

MODES = ("normal", "low_latency")


def dequant_rows(values, scales):
    """BF16 rows from FP8 values [..., hidden] and their 1x128 FP32 scales [..., ceil(hidden/128)]:
    bf16(fp8 x scale), one rounding."""
    h = values.shape[-1]
    v = np.ascontiguousarray(values).view(np.uint8).reshape(-1, h)
    out = np.empty(values.shape, BF16)
    _C.ep.dequant_rows(v, np.ascontiguousarray(scales, F32).reshape(v.shape[0], scales.shape[-1]), out.view(np.uint16).reshape(-1, h))
    return out


def local_slots(num_physical, rank, ranks):
    per = num_physical // ranks
    return np.arange(rank * per, (rank + 1) * per)


def local_expert_weights(w13, w2, rank, ranks, plan: EplbPlan | None = None, w13_scale=None, w2_scale=None):
    """This rank's slice of the full routed-expert weights: experts [r E / R, (r + 1) E / R), or
    with a plan the logical experts of its physical slots (replicas are copies)."""
    E = w13.shape[0]
    if plan is None:
        if E % ranks:
            raise ValueError(f"the routed experts ({E}) must split evenly over the {ranks} ranks")
        which = local_slots(E, rank, ranks)
    else:
        if plan.phy2log.ndim != 1:
            raise ValueError("plan must be a one-layer EplbPlan")
        if plan.num_gpus != ranks:
            raise ValueError(f"plan was made for {plan.num_gpus} ranks, the communicator has {ranks}")
        if plan.logcnt.shape[0] != E:
            raise ValueError(f"plan places {plan.logcnt.shape[0]} logical experts, w13 holds {E}")
        which = plan.phy2log[local_slots(plan.num_physical, rank, ranks)]
    pick = lambda a: None if a is None else np.ascontiguousarray(a[which])  # noqa: E731
    return pick(w13), pick(w2), pick(w13_scale), pick(w2_scale)


class EpMoeLayer:
    """An MoE layer whose routed experts are spread over the ranks of `comm`.

    gate_weight BF16 [E, dim] (E logical experts), gate_bias FP32 [E] or None; w13 [slots, 2I, dim]
    and w2 [slots, dim, I]: this rank's routed experts (local_expert_weights cuts them from the
    full set), BF16 or FP8 with 128x128 block scales; shared_w13 / shared_w2: the shared expert.
    plan: an EplbPlan over this communicator's ranks (None: rank r holds experts
    [r E / R, (r + 1) E / R)). mode: "normal" (DeepEP's prefill layout) or "low_latency" (decode;
    needs max_tokens per call and rank). fp8: FP8 dispatch payload (else BF16). exchange: EpComm's
    ("auto": shared-memory windows on one node, else MPI_Alltoallv).
    Construction is collective (the ranks check they agree on the sizes).
    """

    def __init__(self, gate_weight, w13, w2, *, n_group, topk_group, top_k, route_scale, score_func="sigmoid",
                 gate_bias=None, shared_w13=None, shared_w2=None, w13_scale=None, w2_scale=None,
                 shared_w13_scale=None, shared_w2_scale=None, plan: EplbPlan | None = None, mode="normal",
                 fp8=True, max_tokens=None, comm=None, timeout_s=60.0, exchange="auto"):
        if mode not in MODES:
            raise ValueError(f"mode must be 'normal' or 'low_latency', got {mode!r}")
        if not isinstance(gate_weight, np.ndarray) or gate_weight.ndim != 2:
            raise ValueError("gate_weight must be a 2-D BF16 array [experts, dim]")
        if not isinstance(w13, np.ndarray) or w13.ndim != 3:
            raise ValueError("w13 must be a 3-D array [local experts, 2 * inter, dim]")
        num_logical, dim = gate_weight.shape
        slots = w13.shape[0]
        self.mode, self.fp8 = mode, bool(fp8)
        self.gate = dict(n_group=n_group, topk_group=topk_group, top_k=top_k, route_scale=route_scale,
                         score_func=score_func)
        self.gate_weight, self.gate_bias = gate_weight, gate_bias
        self.w = (w13, w2, w13_scale, w2_scale)
        self.shared = None
        if (shared_w13 is None) != (shared_w2 is None):
            raise ValueError("shared_w13 and shared_w2 go together")
        if shared_w13 is not None:
            self.shared = (shared_w13[None], shared_w2[None],
                           None if shared_w13_scale is None else shared_w13_scale[None],
                           None if shared_w2_scale is None else shared_w2_scale[None])
        # The communicator checks that every rank agrees on the physical experts and the width.
        if comm is None:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        ranks = comm.Get_size()
        self.ep = EpComm(slots * ranks, dim, comm=comm, max_tokens=max_tokens, timeout_s=timeout_s, exchange=exchange)
        self.plan = plan
        if plan is not None:
            if plan.phy2log.ndim != 1 or plan.num_gpus != ranks or plan.num_physical != slots * ranks \
                    or plan.logcnt.shape[0] != num_logical:
                raise ValueError(f"plan must be a one-layer EplbPlan of {num_logical} logical experts on "
                                 f"{slots * ranks} slots over {ranks} ranks")
        elif slots * ranks != num_logical:
            raise ValueError(f"without a plan the ranks must hold the {num_logical} experts evenly: "
                             f"w13 has {slots} per rank x {ranks} ranks")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsperf-ep-compute")

    # -- pieces ----------------------------------------------------------------------------------
    def route(self, x):
        """(weights FP32 [T, K], physical expert ids int32 [T, K]) of this rank's tokens."""
        weights, ids = kernels.moe_gate(x, self.gate_weight, self.gate_bias, **self.gate)
        if self.plan is not None and ids.size:
            # A token routed to a replicated expert goes to one of its replicas, spread by position.
            cnt = self.plan.logcnt[ids]
            spread = (np.arange(ids.size).reshape(ids.shape) + self.ep.rank) % cnt
            ids = self.plan.log2phy[ids, spread].astype(np.int32)
        return weights, ids

    def _experts_normal(self, d):
        # Token layout: the expert rows are gathered (and dequantised) from the receive buffer in one pass.
        return kernels.experts_contiguous(d.expert_rows_bf16(), d.offsets, *self.w)

    def _experts_masked(self, d):
        x = d.x if d.scales is None else dequant_rows(d.x, d.scales)
        return kernels.experts_masked(np.ascontiguousarray(x), d.counts, *self.w)

    def _shared(self, x):
        if self.shared is None:
            return None
        return kernels.experts_contiguous(x, np.array([0, x.shape[0]], np.int64), *self.shared)

    def _start_dispatch(self, x, routed):
        weights, ids = routed
        if self.mode == "normal":
            return self.ep.dispatch(x, ids, weights, fp8=self.fp8, layout="token", async_op=True)
        return self.ep.low_latency_dispatch(x, ids, fp8=self.fp8, async_op=True)

    def _experts(self, d):
        return self._experts_normal(d) if self.mode == "normal" else self._experts_masked(d)

    def _start_combine(self, y, d, routed):
        if self.mode == "normal":
            return self.ep.combine(y, d.handle, async_op=True)
        return self.ep.low_latency_combine(y, routed[0], d.handle, async_op=True)

    # -- forward ---------------------------------------------------------------------------------
    def __call__(self, x, *, overlap=False):
        """FP32 [T, dim] for this rank's tokens x BF16 [T, dim]. overlap=True runs two micro-batches,
        one's communication under the other's computation (two-batch overlap)."""
        if not isinstance(x, np.ndarray) or x.dtype != BF16 or x.ndim != 2:
            # Still take part in the exchange so that the error reaches every rank.
            routed = (np.zeros((0, self.gate["top_k"]), F32), np.zeros((0, self.gate["top_k"]), np.int32))
            self._start_dispatch(x, routed).wait()  # raises the error on every rank
        if overlap:
            return self._forward_overlap(x)
        routed = self._safe_route(x)
        d = self._start_dispatch(x, routed).wait()
        y = self._experts(d)
        out = self._start_combine(y, d, routed).wait()
        shared = self._shared(x)
        return out if shared is None else out + shared

    def _safe_route(self, x):
        # A gating error on one rank must not strand the others: route empty, let dispatch report it.
        try:
            return self.route(x)
        except (TypeError, ValueError):
            if x.shape[1] == self.gate_weight.shape[1]:
                raise
            K = self.gate["top_k"]
            return np.zeros((x.shape[0], K), F32), np.zeros((x.shape[0], K), np.int32)

    def _forward_overlap(self, x):
        T = x.shape[0]
        h = (T + 1) // 2
        x0, x1 = x[:h], x[h:]
        pool = self._pool
        r0 = self._safe_route(x0)
        p0 = self._start_dispatch(x0, r0)
        f = pool.submit(self._safe_route, x1)          # gate micro-batch 1 under dispatch 0
        d0 = p0.wait()
        r1 = f.result()
        p1 = self._start_dispatch(x1, r1)
        f = pool.submit(self._experts, d0)             # experts of 0 under dispatch 1
        d1 = p1.wait()
        y0 = f.result()
        c0 = self._start_combine(y0, d0, r0)
        f = pool.submit(self._experts, d1)             # experts of 1 under combine 0
        out0 = c0.wait()
        y1 = f.result()
        c1 = self._start_combine(y1, d1, r1)
        f = pool.submit(self._shared, x)               # shared expert under combine 1
        out1 = c1.wait()
        shared = f.result()
        out = np.concatenate([out0, out1])
        return out if shared is None else out + shared

    def close(self):
        self._pool.shutdown(wait=False)
