"""The seed analysis' tables, in its order, layout and precision.

Each table is a (title, DataFrame, floatfmt) triple; ``render`` prints them as markdown (the
seed's ``to_markdown(floatfmt=...)``) or CSV. Tables the seed computes but omits
("以下为原统计表,略") are printed too, flagged in their titles.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from .. import _C
from . import formulas as cm
from .._checks import number
from ..model.devices import device_table
from ..model.configs import load_model


@dataclass
class Table:
    title: str
    frame: pd.DataFrame
    floatfmt: str = ".3f"


@dataclass
class TableOptions:
    model: object = "DeepSeek-V3"
    mode: str = "as_published"
    prefill_devices: Sequence[str] = ("H800", "H20")
    decode_devices: Sequence[str] = ("H800", "H20", "H20_3e")
    seq_len: float = 4383
    decode_len: float = 1210
    kv_cache_hit: float = 0.563
    tp: int = 4                      # the prefill layout of the headline tables
    dp: int = 8
    alt_tp: int = 8                  # the seed's second prefill layout
    alt_dp: int = 4
    dispatch_nodes: int = 4
    batch_sizes: Sequence[float] = (32, 64, 128, 256)
    ep: int = 144                    # decode EP (DeepSeek's EP144 with 32 redundant experts)
    redundant_experts: int = 32
    scaleout_variants: Sequence[tuple[str, float]] = (("H20-3.2T", 50), ("H20-1.6T", 25), ("H20-800G", 12.5))
    scaleout_device: str = "H20"
    tps_filter: float = 20.0


def _prefill_detail(o: TableOptions, df: pd.DataFrame):
    """The seed's 2.5 layout of a prefill() frame: per-layer times with layer counts, sums, tokens/s per node."""
    m = load_model(o.model)
    detail = pd.DataFrame({
        "MLA": df["dense_mla_ms"], "DenseMLP": df["dense_mlp_ms"], "TP_MLA": df["mla_ms"],
        "Shared Expert": df["shared_expert_ms"], "Routed Expert": df["routed_expert_ms"],
        "Dispatch": df["dispatch_ms"], "Combine": df["combine_ms"]}).T
    detail.columns = [str(c) for c in df.index]
    layers = [m.n_dense_layers] * 2 + [m.n_moe_layers] * 5
    detail.insert(0, "Layers", [str(x) for x in layers])
    sums = pd.DataFrame({"Sum(Overlap)": df["sum_overlap_ms"], "Sum": df["sum_ms"]}).T
    tps = pd.DataFrame({"Sum(Overlap)": df["tokens_per_s_node_overlap"], "Sum": df["tokens_per_s_node"]}).T
    return detail, sums, tps


def prefill_tables(o: TableOptions) -> list[Table]:
    out = []
    mla = cm.prefill_mla(o.model, o.prefill_devices, o.seq_len, o.kv_cache_hit, (1, 4, 8), o.mode)
    out.append(Table("2.1 Prefill MLA: GEMM (FP8), attention (FP16) and all-reduce per GPU (ms)",
                     mla[["gemm_ms", "attn_ms", "TP1", "allreduce_ms", "TP4", "TP8"]]))
    out.append(Table("2.1 Prefill MLA time per TP (ms)", mla[["TP1", "TP4", "TP8"]]))
    main = cm.prefill(o.model, o.prefill_devices, o.seq_len, o.kv_cache_hit, o.tp, o.dp, o.dispatch_nodes, o.mode)
    alt = cm.prefill(o.model, o.prefill_devices, o.seq_len, o.kv_cache_hit, o.alt_tp, o.alt_dp, o.dispatch_nodes,
                     o.mode)
    out.append(Table("2.2 Prefill DenseMLP (ms)", main[["dense_mlp_ms"]].rename(columns={"dense_mlp_ms": "DenseMLP"})))
    # The second layout only when it differs from the first (the same one twice printed every table twice).
    layouts = [(o.tp, o.dp, main)] + ([(o.alt_tp, o.alt_dp, alt)] if (o.alt_tp, o.alt_dp) != (o.tp, o.dp) else [])
    for tp, dp, df in layouts:
        out.append(Table(f"2.3 Prefill MoE, TP={tp} DP={dp} (ms)", df[["shared_expert_ms", "routed_expert_ms"]]
                         .rename(columns={"shared_expert_ms": "Shared Expert", "routed_expert_ms": "Routed Expert"})))
    for tp, _, df in layouts:
        out.append(Table(f"2.4 Prefill all-to-all, TP={tp}, dispatch to {o.dispatch_nodes} nodes (ms)",
                         df[["dispatch_ms", "combine_ms"]].rename(columns={"dispatch_ms": "Dispatch",
                                                                           "combine_ms": "Combine"})))
    for tp, dp, df in layouts:
        detail, sums, tps = _prefill_detail(o, df)
        out.append(Table(f"2.5 Prefill per-layer times, TP={tp} DP={dp} (ms)", detail))
        out.append(Table(f"2.5 Prefill sum over layers, TP={tp} DP={dp} (ms)", sums))
        out.append(Table(f"2.5 Prefill tokens/s per node, TP={tp} DP={dp}", tps, ".1f"))
    from ..model.devices import load_device
    variants = [load_device(o.scaleout_device, o.mode, scaleout_gbps=bw, name=label)
                for label, bw in o.scaleout_variants]
    detail, sums, _ = _prefill_detail(o, cm.prefill(o.model, variants, o.seq_len, o.kv_cache_hit, o.tp, o.dp,
                                                    o.dispatch_nodes, o.mode))
    order = ["TP_MLA", "Shared Expert", "Dispatch", "Routed Expert", "Combine"]
    out.append(Table(f"2.6 {o.scaleout_device} scale-out bandwidth variants, TP={o.tp} DP={o.dp} (ms)",
                     detail.loc[order]))
    out.append(Table(f"2.6 {o.scaleout_device} scale-out bandwidth variants, sums (ms)", sums))
    kv = pd.DataFrame({f"{g}(FP8)": main.loc[g, ["kv_transfer_gbps_overlap", "kv_transfer_gbps"]].values
                       for g in main.index}, index=["Sum(Overlap)", "Sum"])
    for g in main.index:
        kv[f"{g}(FP16)"] = kv[f"{g}(FP8)"] * 2
    kv.index.name = "GB/s"
    out.append(Table(f"2.7 KV-cache transfer per node, TP={o.tp} (GB/s)", kv, ".1f"))
    return out


def _decode_full(o: TableOptions) -> pd.DataFrame:
    df = cm.decode(o.model, o.decode_devices, o.seq_len, o.decode_len, o.batch_sizes, ep=o.ep,
                   redundant_experts=o.redundant_experts, mode=o.mode)
    df["GPU(TP)"] = df["GPU"] + "(TP" + df["mla_tp"].astype(str) + ")"
    return df


_FULL_COLUMNS = {
    "batch": "BatchSize", "dense_mla_ms": "DenseMLA", "dense_mlp_ms": "DenseMLP", "sparse_mla_ms": "SparseMLA",
    "combine_ms": "Combine", "shared_expert_ms": "SharedExpert", "routed_expert_ms": "RoutedExpert",
    "dispatch_ms": "Dispatch", "tpot_overlap_ms": "TPOT(Overlap)", "tpot_ms": "TPOT",
    "tps_user_overlap": "TPS_O", "tps_user": "TPS", "tokens_per_gpu_s_overlap": "Total_O",
    "tokens_per_gpu_s": "Total",
}


def decode_tables(o: TableOptions) -> list[Table]:
    out = []
    eps = cm.ep_strategies(o.model)
    eps[["ep", "redundant_experts"]] = eps[["ep", "redundant_experts"]].astype(str)
    out.append(Table("3.1 EP strategies", eps, ".3f"))
    strategies = dict(cm.EP_STRATEGIES)
    if (o.ep, o.redundant_experts) not in strategies.values():
        strategies[f"EP{o.ep}"] = (o.ep, o.redundant_experts)
    out.append(Table("3.2 Memory-limited batch size per GPU, TP=1 (omitted in the seed)",
                     cm.decode_batch_limits(o.model, o.decode_devices, o.seq_len, o.decode_len, 1, strategies,
                                            mode=o.mode), ".0f"))
    df = _decode_full(o)
    one = cm.decode(o.model, o.decode_devices, o.seq_len, o.decode_len, o.batch_sizes, tp=1, ep=o.ep,
                    redundant_experts=o.redundant_experts, mode=o.mode)
    key = ["GPU", "batch"]
    mla = one[key + ["mla_tp1_ms", "mla_tp4_ms", "mla_tp8_ms", "load_kv_fp8_ms", "load_kv_fp16_ms"]].rename(
        columns={"batch": "BatchSize", "mla_tp1_ms": "TP1", "mla_tp4_ms": "TP4", "mla_tp8_ms": "TP8",
                 "load_kv_fp8_ms": "LoadKV_FP8", "load_kv_fp16_ms": "LoadKV_FP16"})
    mla["BatchSize"] = mla["BatchSize"].astype(int).astype(str)
    out.append(Table("3.3 Decode MLA (absorbed) per TP and KV load (ms) (omitted in the seed)", mla.set_index("GPU")))
    for title, cols in (("3.4 Decode DenseMLP (ms)", {"dense_mlp_ms": "DenseMLP"}),
                        ("3.5 Decode MoE experts (ms)", {"shared_expert_ms": "SharedExpert",
                                                         "routed_expert_ms": "RoutedExpert"}),
                        ("3.5 Decode all-to-all (ms)", {"dispatch_ms": "Dispatch", "combine_ms": "Combine"})):
        t = df[key + list(cols)].rename(columns={"batch": "BatchSize", **cols})
        t["BatchSize"] = t["BatchSize"].astype(int).astype(str)
        out.append(Table(title + " (omitted in the seed)", t.set_index("GPU")))
    full = df[["GPU(TP)"] + list(_FULL_COLUMNS)].rename(columns=_FULL_COLUMNS).set_index("GPU(TP)").T
    out.append(Table(f"3.6 Decode, full table at the best TP, EP{o.ep} (ms, tokens/s) (omitted in the seed)", full))
    kept = df[df["tps_user_overlap"] > o.tps_filter]
    tldr = kept[["GPU(TP)", "batch", "tpot_overlap_ms", "tpot_ms", "tps_user_overlap", "tps_user",
                 "tokens_per_gpu_s_overlap", "tokens_per_gpu_s"]].rename(columns={
                     "batch": "BatchSize", "tpot_overlap_ms": "TPOT(Overlap)", "tpot_ms": "TPOT",
                     "tps_user_overlap": "TPS(Overlap)", "tps_user": "TPS",
                     "tokens_per_gpu_s_overlap": "Total(Overlap)", "tokens_per_gpu_s": "Total"})
    out.append(Table(f"3.6 Decode with TPS(Overlap) > {o.tps_filter:g} (the seed's TL;DR)",
                     tldr.set_index("GPU(TP)").T))
    budget = kept[["GPU(TP)", "batch", "time_budget_ms"]].rename(
        columns={"GPU(TP)": "GPU", "batch": "BatchSize", "time_budget_ms": "TimeBudget"})
    budget["BatchSize"] = budget["BatchSize"].astype(int).astype(str)
    out.append(Table("3.7 Overlap time budget: SparseMLA + SharedExpert - (Dispatch + Combine) (ms) "
                     "(omitted in the seed)", budget.set_index("GPU")))
    return out


# The seed's column headers and their English: as_published prints the seed's own, every other mode
# the English ones.
SEED_HEADERS = {"单层参数量": "params per layer", "层数": "layers", "累计参数": "params total",
                "参数量": "params", "运算复杂度(FLops)": "FLOPs per token", "KVCache用量": "KV-cache elements per token"}


def _headers(df: pd.DataFrame, mode: str) -> pd.DataFrame:
    return df if mode == "as_published" else df.rename(columns=SEED_HEADERS)


def model_tables(o: TableOptions) -> list[Table]:
    m = load_model(o.model)
    out = [Table(f"1.1 MLA complexity, {m.name} (GFLOP; ratios; M parameters)", cm.flops_summary(m), ".10g")]
    params = cm.parameter_table(m, o.mode)
    per_layer = []
    for block, row in params.iterrows():
        if pd.isna(row["params_per_block"]):
            per_layer.append("-")
        elif row["blocks_per_layer"] > 1:
            per_layer.append(f"{row['params_per_block'] / 1e6:.2f}Mx({m.n_routed_experts}_routed+"
                             f"{m.n_shared_experts}_shared)")
        else:
            per_layer.append(f"{row['params_per_block'] / 1e6:.2f}M")
    shown = pd.DataFrame({
        "单层参数量": per_layer,
        "层数": [str(int(v)) if pd.notna(v) else "-" for v in params["layers"]],
        "累计参数": [_human(v) for v in params["params_total"]],
    }, index=params.index)
    exact = _C.parse_mode(o.mode)["exact_parameter_counts"]
    note = "exact, bias-free" if exact else "every linear with a bias, counts as the seed quotes them"
    out.append(Table(f"1.4 Parameters per block ({note})", _headers(shown, o.mode)))
    cx = cm.block_complexity(m).loc[["MLA", "MLA_absorb", "DenseMLP", "Expert"]]
    shown = pd.DataFrame({"参数量": [f"{v / 1e6:.2f}M" for v in cx["params"]],
                          "运算复杂度(FLops)": [f"{v / 1e6:.2f}M" for v in cx["flops_per_token"]],
                          "KVCache用量": [str(int(v)) if v else "-" for v in cx["kv_cache_elements_per_token"]]},
                         index=cx.index)
    out.append(Table("1.4 Per-block parameters, FLOPs of one token, KV-cache elements per token",
                     _headers(shown, o.mode)))
    kv = cm.kv_cache_per_token(m)
    kv["bytes_per_token"] = kv["bytes_per_token"].astype(int).astype(str)
    out.append(Table("1.4 KV cache per token over all layers (KB = 1024 bytes)", kv, ".2f"))
    return out


def _human(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def all_tables(o: TableOptions | None = None, sections: Sequence[str] = ("model", "devices", "prefill", "decode")):
    o = TableOptions() if o is None else o
    if not isinstance(o, TableOptions):
        raise TypeError(f"options must be a TableOptions, got {type(o).__name__}")
    # The other options are checked by the cost-model calls they feed; this one only filters.
    o.tps_filter = number("tps_filter", o.tps_filter)
    if isinstance(sections, str):
        sections = [sections]
    known = ("model", "devices", "prefill", "decode")
    if not isinstance(sections, (list, tuple)) or not sections or any(x not in known for x in sections):
        raise ValueError(f"sections must be a non-empty list of {', '.join(known)}, got {sections!r}")
    out = []
    if "model" in sections:
        out += model_tables(o)
    if "devices" in sections:
        devs = list(dict.fromkeys(list(o.prefill_devices) + list(o.decode_devices)))
        out.append(Table(f"1.4 Devices ({o.mode})", device_table(devs, o.mode), ".4g"))
    if "prefill" in sections:
        out += prefill_tables(o)
    if "decode" in sections:
        out += decode_tables(o)
    return out


def render(tables: Sequence[Table], fmt: str = "markdown") -> str:
    """Render tables as markdown (the seed's layout) or CSV (full precision)."""
    if fmt not in ("markdown", "csv"):
        raise ValueError(f"format must be 'markdown' or 'csv', got {fmt!r}")
    buf = io.StringIO()
    for t in tables:
        if fmt == "markdown":
            buf.write(f"## {t.title}\n\n{t.frame.to_markdown(floatfmt=t.floatfmt)}\n\n")
        else:
            buf.write(f"# {t.title}\n{t.frame.to_csv()}\n")
    return buf.getvalue()
