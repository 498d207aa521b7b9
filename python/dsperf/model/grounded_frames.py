"""The grounded model behind the public prefill, decode and decode_sweep (dsperf.model.api): its
steps (dsperf.model.grounded, the explorer's grid) laid out in the frames the seed's modes return,
so either mode answers the same three calls."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import _C
from .._checks import MAX_COUNT, MAX_TOKENS, finite_results, flag, number_list
from .devices import device_list, resolve_devices
from ..seed.formulas import MAX_SWEEP_ROWS, _count, _integer_columns, _tokens

SM = _C.step_model


def _seed_only(name, value, default):
    if isinstance(value, bool) or value != default:
        raise ValueError(f"{name} is a parameter of the seed's modes (as_published, corrected); the grounded "
                         f"model does not take it (got {value!r})")


def grounded_prefill(m, devices, seq_len, kv_cache_hit, tp, dp, dispatch_nodes) -> pd.DataFrame:
    """One prompt of seq_len per DP group (kv_cache_hit of it cached), its new tokens spread over the
    group's tp GPUs; routed experts over tp x dp GPUs; node-limited routing from the model config."""
    from . import grounded

    _seed_only("dispatch_nodes", dispatch_nodes, 4)
    if not (seq_len > 0 and 0 <= kv_cache_hit < 1):
        raise ValueError(f"seq_len must be > 0 and kv_cache_hit in [0, 1), got {seq_len}, {kv_cache_hit}")
    cached = seq_len * kv_cache_hit
    rows = []
    for label, spec in resolve_devices(devices, "corrected"):
        r = grounded.prefill(m, spec, tokens=(seq_len - cached) / tp, prompt_len=seq_len, cached_prefix=cached,
                             ep=tp * dp, attn_tp=tp)
        prompt_per_gpu = r["tokens_per_gpu_s"] * seq_len / (seq_len - cached)
        rows.append({"GPU": label, "step_ms": r["step_ms"], "ttft_ms": r["step_ms"],
                     "moe_layer_ms": r["moe_layer_ms"], "dense_layer_ms": r["dense_layer_ms"],
                     "compute_ms": r["compute_ms"], "comm_ms": r["comm_ms"],
                     "tokens_per_s_node": prompt_per_gpu * spec.gpus_per_node,
                     "computed_tokens_per_s_node": r["tokens_per_gpu_s"] * spec.gpus_per_node,
                     "fits_memory": r["fits_memory"], "error_band": r["error_band"],
                     "calls_default": r["calls_default"]})
    df = pd.DataFrame(rows).set_index("GPU")
    finite_results("prefill", {k: df[k].to_numpy() for k in ("step_ms", "tokens_per_s_node")})
    return df


def grounded_decode(m, devices, seq_len, decode_len, batches, tp, ep, redundant_experts, absorbed, kv_fp8,
                     group_gemm_discount) -> pd.DataFrame:
    """Each (device, batch): the grounded decode step at the average context seq_len + decode_len / 2,
    DP attention (tp=0 or 1) or attention TP, two-batch overlap."""
    from . import grounded

    _seed_only("group_gemm_discount", group_gemm_discount, 0.7)
    if not flag("absorbed", absorbed):
        raise ValueError("absorbed: the grounded model prices absorbed MLA decode (FlashMLA); use a seed mode "
                         f"for the standard form (got {absorbed!r})")
    seq_len, decode_len = _tokens("seq_len", seq_len), _tokens("decode_len", decode_len)
    if not (seq_len > 0 and decode_len >= 0):
        raise ValueError(f"seq_len must be positive and decode_len >= 0, got {seq_len}, {decode_len}")
    kv_len = seq_len + decode_len / 2
    attn_tp = max(1, _count("tp", tp, 0))
    rows = []
    for label, spec in resolve_devices(devices, "corrected"):
        for bs in batches:
            r = grounded.decode(m, spec, batch=bs, kv_len=kv_len, ep=_count("ep", ep), attn_tp=attn_tp,
                                redundant_experts=_count("redundant_experts", redundant_experts, 0),
                                kv_fp8=kv_fp8)
            rows.append({"GPU": label, "batch": bs, "kv_len": kv_len, "mla_tp": attn_tp,
                         **{k: r[k] for k in ("tpot_ms", "tps_user", "tokens_per_gpu_s", "step_ms", "moe_layer_ms",
                                              "dense_layer_ms", "batch_limit", "fits_memory", "weights_gib",
                                              "kv_gib", "error_band", "calls_default")}})
    df = pd.DataFrame(rows)
    finite_results("decode", {k: df[k].to_numpy() for k in ("tpot_ms", "tokens_per_gpu_s", "batch_limit")})
    _integer_columns(df, ("batch",))
    return df


def grounded_sweep(m, devices, batch, seq_len, decode_len, tp, ep, redundant_experts, kv_fp8, absorbed,
                    group_gemm_discount) -> pd.DataFrame:
    """The grounded decode over the grid (two-batch overlap, no MTP; tp 0 = DP attention). Rows:
    seq_len > decode_len > device > ep > tp > kv_fp8 > batch (innermost)."""
    from . import explore, grounded

    _seed_only("group_gemm_discount", group_gemm_discount, 0.7)
    if not flag("absorbed", absorbed):
        raise ValueError("absorbed: the grounded model prices absorbed MLA decode only")
    pairs = resolve_devices(devices, "corrected")
    eps = number_list("ep", ep, integer=True, lo=1, hi=MAX_COUNT)
    reds = ([32] * len(eps) if redundant_experts is None else
            number_list("redundant_experts", redundant_experts, integer=True, lo=0, hi=MAX_COUNT))
    if len(reds) != len(eps):
        raise ValueError("redundant_experts must have one entry per ep value")
    tps = [max(1, t) for t in number_list("tp", tp, integer=True, lo=0, hi=MAX_COUNT)]
    for t in tps:
        for label, spec in pairs:
            if not SM.tp_group_fits_nodes(t, spec.gpus_per_node) or m.n_heads % t:
                raise ValueError(f"tp ({t}) must divide the {spec.gpus_per_node} GPUs of a {label} node (or be a "
                                 "multiple of them) and the heads")
    for e, r in zip(eps, reds):
        if not 1 <= e <= m.n_routed_experts + r:
            raise ValueError(f"ep ({e}) must lie in [1, routed + redundant experts = {m.n_routed_experts + r}]")
    kv = [flag("kv_fp8", v) for v in np.atleast_1d(np.asarray(kv_fp8, dtype=object))]
    if not kv:
        raise ValueError("kv_fp8 must not be empty")
    batches = number_list("batch", batch, lo=0, lo_open=True, hi=MAX_TOKENS)
    labels = [label for label, _ in pairs]
    categories = list(dict.fromkeys(labels))
    seqs = number_list("seq_len", seq_len, hi=MAX_TOKENS)
    decs = number_list("decode_len", decode_len, hi=MAX_TOKENS)
    rows = len(pairs) * len(tps) * len(eps) * len(kv) * len(batches) * len(seqs) * len(decs)
    if rows > MAX_SWEEP_ROWS:
        raise ValueError(f"decode_sweep grid has {rows} rows, more than the {MAX_SWEEP_ROWS} allowed (split the sweep)")
    frames = []
    if min(seqs) <= 0 or min(decs) < 0:
        raise ValueError("seq_len values must be positive and decode_len values >= 0")
    for s in seqs:
        for d in decs:
            cols = explore.SM.explore_decode(m, [sp for _, sp in pairs], [grounded.kernel_tables(d) for d in device_list(devices)],
                                             eps, reds, tps, [0], [0.0], [int(x) for x in kv],
                                             [explore.OVERLAP_CODES["two_batch"]], batches, kv_len=s + d / 2,
                                             imbalance=1.0, step_overhead_ms=explore.SM.decode_step_overhead_ms)
            code = cols.pop("device_index")
            if len(categories) < len(labels):  # a device given twice: one label (categories are unique)
                code = np.array([categories.index(n) for n in labels], np.int32)[code]
            frames.append(pd.DataFrame({
                "GPU": pd.Categorical.from_codes(code, categories=categories, validate=False), "tp": cols["attn_tp"],
                "ep": cols["ep"], "redundant_experts": cols["redundant_experts"], "kv_fp8": cols["kv_fp8"],
                "seq_len": s, "decode_len": d, "batch": cols["batch"], "mla_tp": cols["attn_tp"],
                "tpot_ms": cols["tpot_ms"], "tps_user": cols["tps_user"], "tokens_per_gpu_s": cols["tokens_per_gpu_s"],
                "batch_limit": cols["batch_limit"], "fits_memory": cols["fits_memory"]}, copy=False))
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    finite_results("decode_sweep", {k: out[k].to_numpy() for k in ("tpot_ms", "tokens_per_gpu_s")})
    _integer_columns(out, ("batch", "seq_len", "decode_len"))
    kinds = dict(zip(labels, (grounded.table_kind(d) for d in device_list(devices))))
    out["error_band"] = grounded.error_bands("decode", [kinds[c] for c in out["GPU"].cat.categories],
                                             out["GPU"].cat.codes.to_numpy(), out["batch"].to_numpy())
    return out
