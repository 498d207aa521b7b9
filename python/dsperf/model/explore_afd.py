"""Attention-FFN disaggregation in the explorer (`dsperf explore --afd`, `search(afd=True)`):
attention GPUs and expert GPUs apart, micro-batches ping-ponged between them; the rows the grid
appends for it (kind "afd")."""
from __future__ import annotations

import math

import numpy as np

from .. import _C
from . import grounded
from .explore import WHY, _Axes, _ints

SM = grounded.SM

def afd_columns(m, pairs, tables, eps, reds, attn_gpus, micro_batches, kvs, batches, kv_len, overhead_ms) -> dict:
    """Attention-FFN disaggregation: A attention GPUs (DP attention, `batch` requests each, the
    dense layers and the head) and F expert GPUs (the routed experts over F, the shared expert),
    the step cut into `micro` micro-batches that ping-pong between the two clusters over the
    network (seed 000's backbone + MoE cluster). Per MoE layer a micro-batch costs the slowest of
    the attention stage, the expert stage and the exchange (dispatch A -> F and combine F -> A run
    on opposite directions of the links); the pipeline fills once per step. The exchange is priced
    as the low-latency all-to-all over A + F ranks at the NIC (a pair per (token, expert) from each
    attention GPU, received spread over the F expert GPUs)."""
    rows = {k: [] for k in ("device_index", "ep", "redundant_experts", "attn_tp", "mtp", "mtp_accepted", "kv_fp8",
                            "overlap", "batch", "infeasible", "step_ms", "tpot_ms", "tps_user", "tokens_per_gpu_s",
                            "batch_limit", "fits_memory", "weights_gib", "kv_gib", "kind", "attn_gpus")}
    pc = _C.param_counts(m, False)
    attn_weights = (pc["mla"] * m.n_layers + pc["dense_mlp"] * m.n_dense_layers + pc["gate"] * m.n_moe_layers
                    + 2 * (pc["embedding"] + pc["lm_head"]))
    K, dim = m.n_activated_experts, m.dim
    payload = dim + dim / 128 * 4  # FP8 + 1x128 FP32 scales
    nan = math.nan
    for di, ((_, spec), tables) in enumerate(zip(pairs, tables)):
        # Each row reads the attention GPUs' attention, dense and head stages, which depend on their
        # tokens and KV format only, and the expert GPUs' MoE stage, which depends on their tokens and
        # the expert layout only: each priced once per device (rows share them across A, the
        # micro-batches, the batches and the other side's layout).
        # The deployment is checked field by field once per layout; each call then sets its batch,
        # which step_stages checks again at the C++ boundary.
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

        mem = spec.mem_gb * 2**30 * 0.9
        kv_per_token = {kv: grounded.decode(m, spec, batch=1, kv_len=kv_len, ep=8, kv_fp8=kv)["kv_bytes_per_token"]
                        for kv in kvs}
        for F, r in zip(eps, reds):
            ffn_weights = ((m.n_routed_experts + r) / F + m.n_shared_experts) * pc["expert"] * m.n_moe_layers
            gbps = {}
            for A in attn_gpus:
                link = SM.KernelShape(ep=float(A + F))
                scale = spec.scaleout_gbps / 50.0  # network rows were measured on 50 GB/s NICs
                gbps[A] = (tables.lookup("dispatch_ll", link)["value"] * scale,
                           tables.lookup("combine_ll", link)["value"] * scale)
            for A in attn_gpus:
                for mb in micro_batches:
                    for kv in kvs:
                        for b in batches:
                            t_attn = b / mb                  # tokens per attention GPU per micro-batch
                            t_ffn = A * b / (mb * F)          # tokens per expert GPU per micro-batch
                            why = WHY["none"]
                            if m.n_routed_experts + r < F:
                                why = WHY["ep_exceeds_experts"]
                            elif t_attn < 1 or t_ffn < 1:
                                why = WHY["too_few_tokens"]
                            limit = max(0.0, (mem - attn_weights) / (kv_per_token[kv] * kv_len))
                            fits = b <= limit and ffn_weights <= mem
                            rows["device_index"].append(di), rows["ep"].append(F), rows["redundant_experts"].append(r)
                            rows["attn_tp"].append(1), rows["mtp"].append(0), rows["mtp_accepted"].append(0.0)
                            rows["kv_fp8"].append(kv), rows["overlap"].append(3), rows["batch"].append(b)
                            rows["infeasible"].append(why), rows["kind"].append(1), rows["attn_gpus"].append(A)
                            rows["batch_limit"].append(limit), rows["fits_memory"].append(fits)
                            rows["weights_gib"].append(attn_weights / 2**30)
                            rows["kv_gib"].append(kv_per_token[kv] * kv_len * b / 2**30)
                            if why:
                                for k in ("step_ms", "tpot_ms", "tps_user", "tokens_per_gpu_s"):
                                    rows[k].append(nan)
                                continue
                            sa, sf = attention_stages(t_attn, kv, F, r), expert_stages(t_ffn, kv, F, r)
                            disp = max(t_attn, t_ffn) * K * payload / (gbps[A][0] * 1e3)  # us
                            comb = max(t_attn, t_ffn) * K * 2 * dim / (gbps[A][1] * 1e3)
                            stage = max(sa["attn_us"], sf["moe_us"], disp, comb)
                            fill = sa["attn_us"] + sf["moe_us"] + disp + comb - stage
                            step_ms = ((m.n_moe_layers * mb * stage + fill + m.n_dense_layers * mb * sa["dense_us"]) / 1e3
                                       + mb * sa["head_ms"] + overhead_ms)
                            rows["step_ms"].append(step_ms), rows["tpot_ms"].append(step_ms)
                            rows["tps_user"].append(1e3 / step_ms)
                            rows["tokens_per_gpu_s"].append(A * b / (step_ms / 1e3) / (A + F))
    types = {"device_index": np.int32, "ep": np.int32, "redundant_experts": np.int32, "attn_tp": np.int32,
             "mtp": np.int32, "overlap": np.int32, "infeasible": np.int32, "kind": np.int8, "kv_fp8": bool,
             "fits_memory": bool}
    return {k: np.asarray(v, dtype=types.get(k, float)) for k, v in rows.items()}


def with_afd(cols, m, pairs, pricing, ax: _Axes, afd_attn_gpus, afd_micro_batches, *, kv_len) -> dict:
    """cols with the attention-FFN disaggregated rows appended (kind 1; see afd_columns)."""
    a_gpus = _ints("afd_attn_gpus", afd_attn_gpus, 1, 4096)
    micro = _ints("afd_micro_batches", afd_micro_batches, 1, 8)
    extra = afd_columns(m, pairs, [p["tables"] for p in pricing], ax.eps, ax.reds, a_gpus, micro, ax.kvs, ax.batches,
                        kv_len, ax.overhead)
    n = len(extra["ep"])  # FP8 weights, data-parallel dense MLP, the first imbalance value
    extra["weights_fp8"], extra["dense_tp"] = np.ones(n, bool), np.ones(n, np.int32)
    extra["experts_fp4"] = np.zeros(n, bool)
    extra["moe_tp"] = np.ones(n, np.int32)
    extra["imbalance"] = np.full(n, ax.imbalances[0])
    cols = {k: np.concatenate([cols[k], extra[k]]) for k in cols}
    return cols
