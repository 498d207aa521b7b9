"""Attention-FFN disaggregation in the explorer (`dsperf explore --afd`, `search(afd=True)`):
attention GPUs and expert GPUs apart, micro-batches ping-ponged between them; the rows the grid
appends for it (kind "afd")."""
from __future__ import annotations

import numpy as np

from .. import _C
from . import grounded
from .explore import WHY, _Axes, _ints, format_columns

SM = grounded.SM

def afd_columns(m, pairs, tables, eps, reds, attn_gpus, micro_batches, kvs, batches, kv_len, overhead_ms,
                mem_fraction) -> dict:
    """Attention-FFN disaggregation: A attention GPUs (DP attention, `batch` requests each, the
    dense layers and the head) and F expert GPUs (the routed experts over F, the shared expert),
    the step cut into `micro` micro-batches that ping-pong between the two clusters over the
    network (seed 000's backbone + MoE cluster). Per MoE layer a micro-batch costs the slowest of
    the attention stage, the expert stage and the exchange (dispatch A -> F and combine F -> A run
    on opposite directions of the links); the pipeline fills once per step. The exchange is priced
    as the low-latency all-to-all over A + F ranks at the NIC (a pair per (token, expert) from each
    attention GPU, received spread over the F expert GPUs)."""
    names = ("device_index", "ep", "redundant_experts", "attn_tp", "mtp", "mtp_accepted", "kv_fp8", "overlap", "batch",
             "infeasible", "step_ms", "tpot_ms", "tps_user", "tokens_per_gpu_s", "batch_limit", "fits_memory",
             "weights_gib", "kv_gib", "kind", "attn_gpus")
    parts = {k: [] for k in names}  # arrays over the batches, one per (device, F, A, micro, KV) in row order
    pc = _C.param_counts(m, False)
    attn_weights = (pc["mla"] * m.n_layers + pc["dense_mlp"] * m.n_dense_layers + pc["gate"] * m.n_moe_layers
                    + 2 * (pc["embedding"] + pc["lm_head"]))
    K, dim = m.n_activated_experts, m.dim
    payload = dim + dim / 128 * 4  # FP8 + 1x128 FP32 scales
    b = np.asarray(batches, dtype=float)
    n = len(b)
    for di, ((_, spec), tables) in enumerate(zip(pairs, tables)):
        # Each row reads the attention GPUs' attention, dense and head stages, which depend on their
        # tokens and KV format only, and the expert GPUs' MoE stage, which depends on their tokens and
        # the expert layout only: each priced once per device (rows share them across A, the
        # micro-batches, the batches and the other side's layout). The deployment is checked field by
        # field once per layout; each call then sets its batch, which step_stages checks again at the
        # C++ boundary.
        attn_side, expert_side, layouts = {}, {}, {}

        def stages(t, kv, F, r):
            if (F, r, kv) not in layouts:
                layouts[F, r, kv] = grounded._deployment("decode", batch=1, kv_len=kv_len, ep=F, overlap="none",
                                                         kv_fp8=kv, redundant_experts=r, attn_tp=1)
            dep = layouts[F, r, kv]
            dep.batch = t
            return SM.step_stages(m, spec, tables, dep)

        def attention_stages(t_attn, kv, F, r):
            if (t_attn, kv) not in attn_side:
                attn_side[t_attn, kv] = stages(t_attn, kv, F, r)
            return attn_side[t_attn, kv]

        def expert_stages(t_ffn, kv, F, r):
            if (t_ffn, F, r) not in expert_side:
                expert_side[t_ffn, F, r] = stages(t_ffn, kv, F, r)
            return expert_side[t_ffn, F, r]

        mem = spec.mem_gb * 2**30 * mem_fraction  # the search's share (explore._Axes.mem_fraction)
        kv_per_token = {kv: grounded.decode(m, spec, batch=1, kv_len=kv_len, ep=8, kv_fp8=kv)["kv_bytes_per_token"]
                        for kv in kvs}
        for F, r in zip(eps, reds):
            breach = SM.layout_breach(m, spec, grounded._deployment(  # EP F with r redundant experts
                "decode", batch=1, kv_len=kv_len, ep=F, overlap="none", redundant_experts=r, attn_tp=1))
            ffn_weights = ((m.n_routed_experts + r) / F + m.n_shared_experts) * pc["expert"] * m.n_moe_layers
            gbps = {}
            for A in attn_gpus:
                link = SM.KernelShape(ep=float(A + F))
                scale = spec.scaleout_gbps / 50.0  # network rows were measured on 50 GB/s NICs
                gbps[A] = (tables.lookup("dispatch_ll", link)["value"] * scale,
                           tables.lookup("combine_ll", link)["value"] * scale)
            for A in attn_gpus:
                for mb in micro_batches:
                    t_attn = b / mb            # tokens per attention GPU per micro-batch
                    t_ffn = A * b / (mb * F)   # tokens per expert GPU per micro-batch
                    # The model's layout rules for the expert GPUs, then AFD's own: at least a token
                    # a GPU on each side of a micro-batch.
                    if breach != "none":
                        why = np.full(n, WHY[breach], np.int32)
                    else:
                        why = np.where((t_attn < 1) | (t_ffn < 1), WHY["too_few_tokens"], WHY["none"]).astype(np.int32)
                    ok = why == WHY["none"]
                    for kv in kvs:
                        limit = max(0.0, (mem - attn_weights) / (kv_per_token[kv] * kv_len))
                        step_ms = np.full(n, np.nan)
                        if ok.any():
                            sa = [attention_stages(t, kv, F, r) for t in t_attn[ok].tolist()]
                            sf = [expert_stages(t, kv, F, r) for t in t_ffn[ok].tolist()]
                            attn = np.array([x["attn_us"] for x in sa])
                            dense = np.array([x["dense_us"] for x in sa])
                            head = np.array([x["head_ms"] for x in sa])
                            moe = np.array([x["moe_us"] for x in sf])
                            tokens = np.maximum(t_attn[ok], t_ffn[ok])
                            disp = tokens * K * payload / (gbps[A][0] * 1e3)  # us
                            comb = tokens * K * 2 * dim / (gbps[A][1] * 1e3)
                            stage = np.maximum(np.maximum(np.maximum(attn, moe), disp), comb)
                            fill = attn + moe + disp + comb - stage
                            step_ms[ok] = ((m.n_moe_layers * mb * stage + fill + m.n_dense_layers * mb * dense) / 1e3
                                           + mb * head + overhead_ms)
                        columns = dict(
                            device_index=np.full(n, di, np.int32), ep=np.full(n, F, np.int32),
                            redundant_experts=np.full(n, r, np.int32), attn_tp=np.ones(n, np.int32),
                            mtp=np.zeros(n, np.int32), mtp_accepted=np.zeros(n), kv_fp8=np.full(n, kv, bool),
                            overlap=np.full(n, 3, np.int32), batch=b, infeasible=why, step_ms=step_ms,
                            tpot_ms=step_ms, tps_user=1e3 / step_ms,
                            tokens_per_gpu_s=A * b / (step_ms / 1e3) / (A + F), batch_limit=np.full(n, limit),
                            fits_memory=(b <= limit) & (ffn_weights <= mem),
                            weights_gib=np.full(n, attn_weights / 2**30), kv_gib=kv_per_token[kv] * kv_len * b / 2**30,
                            kind=np.ones(n, np.int8), attn_gpus=np.full(n, float(A)))
                        for k in names:
                            parts[k].append(columns[k])
    return {k: np.concatenate(v) for k, v in parts.items()}  # each column's dtype as built above


def with_afd(cols, m, pairs, pricing, ax: _Axes, afd_attn_gpus, afd_micro_batches, *, kv_len) -> dict:
    """cols with the attention-FFN disaggregated rows appended (kind 1; see afd_columns)."""
    a_gpus = _ints("afd_attn_gpus", afd_attn_gpus, 1, 4096)
    micro = _ints("afd_micro_batches", afd_micro_batches, 1, 8)
    extra = afd_columns(m, pairs, [p["tables"] for p in pricing], ax.eps, ax.reds, a_gpus, micro, ax.kvs, ax.batches,
                        kv_len, ax.overhead, ax.mem_fraction)
    n = len(extra["ep"])  # FP8 weights, data-parallel dense MLP, the first imbalance value
    extra.update(format_columns("fp8", n))
    extra["dense_tp"] = np.ones(n, np.int32)
    extra["moe_tp"] = np.ones(n, np.int32)
    extra["imbalance"] = np.full(n, ax.imbalances[0])
    cols = {k: np.concatenate([cols[k], extra[k]]) for k in cols}
    return cols
