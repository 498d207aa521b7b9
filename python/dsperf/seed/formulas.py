"""The seed analysis' cost model: pandas DataFrames over the C++ pure functions of its formulas.

Every function takes a model (name, config.json path, dict or ModelConfig), one or more devices
(shipped names, .toml paths or DeviceSpec) and one of the seed's modes:

- "corrected" (the default here): the seed's formulas with its quirks fixed (docs/DEVIATIONS.md);
- "as_published": the seed analysis' arithmetic, digit for digit (`dsperf tables`).

The public dsperf.prefill, decode and decode_sweep (model/api.py) answer with either this model or
the grounded one ("grounded", their default: model/grounded_frames.py).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import _C
from ..model.devices import resolve_devices
from .._checks import MAX_COUNT, MAX_TOKENS, finite_results, flag, number, number_list, text
from ..model.configs import load_model

SEED_TABLE_MODE = "corrected"  # the seed's formulas' default (dsperf.prefill & co. default to grounded: model/api.py)

# The seed's EP strategies: name -> (EP size, redundant experts).
EP_STRATEGIES: Mapping[str, tuple[int, int]] = {
    "EP34": (34, 16),
    "EP72": (72, 32),
    "EP144": (144, 32),
    "EP320": (320, 64),
}


# The largest decode_sweep result: 2**24 rows of 109 bytes each (~1.8 GB of columns).
MAX_SWEEP_ROWS = 2 ** 24


def _tokens(name, value):
    """A token count (float): finite, <= MAX_TOKENS; the core checks the lower bound."""
    return number(name, value, hi=MAX_TOKENS)


def _count(name, value, lo=1):
    """An integer count in [lo, MAX_COUNT] (it is passed to the core as a C++ int)."""
    return number(name, value, integer=True, lo=lo, hi=MAX_COUNT)


def _finite(name, value):
    """A float whose range the core checks (it names the range): here, type and finiteness."""
    return number(name, value)


def seed_mode(mode) -> str:
    """A mode of the seed's formulas, checked: 'as_published' or 'corrected' (+fix/-fix; the C++
    parser names a bad fix). 'grounded' belongs to dsperf.prefill/decode/decode_sweep (model/api.py)."""
    mode = text("mode", mode)
    if mode == "grounded":
        raise ValueError("mode 'grounded' is a mode of dsperf.prefill, decode and decode_sweep (dsperf.model.api); "
                         "the seed's formulas take 'as_published' or 'corrected' (optionally +fix/-fix)")
    return mode


def prefill_args(seq_len, kv_cache_hit, tp, dp, dispatch_nodes, gpus):
    """prefill's layout arguments, checked (both models take them): (seq_len, kv_cache_hit, tp, dp,
    dispatch_nodes); ``gpus``, when given, must equal tp * dp."""
    seq_len = _tokens("seq_len", seq_len)
    kv_cache_hit = _finite("kv_cache_hit", kv_cache_hit)
    tp, dp = _count("tp", tp), _count("dp", dp)
    dispatch_nodes = _count("dispatch_nodes", dispatch_nodes)
    if gpus is not None:
        gpus = _count("gpus", gpus)
        if tp < 1 or gpus % tp:
            raise ValueError(f"tp ({tp}) must divide gpus ({gpus})")
        if tp * dp != gpus:
            raise ValueError(f"dp ({dp}) must equal gpus / tp = {gpus // tp}")
    return seq_len, kv_cache_hit, tp, dp, dispatch_nodes


def prefill(model="DeepSeek-V3", devices=("H800", "H20"), seq_len=4383, kv_cache_hit=0.563, tp=4, dp=8,
            dispatch_nodes=4, mode=SEED_TABLE_MODE, gpus=None) -> pd.DataFrame:
    """The seed's prefill: per-layer times (ms), layer sums, tokens/s per node and KV transfer per
    device, one row per device; ``gpus``, when given, must equal tp * dp."""
    m = load_model(model)
    mode = seed_mode(mode)
    seq_len, kv_cache_hit, tp, dp, dispatch_nodes = prefill_args(seq_len, kv_cache_hit, tp, dp, dispatch_nodes, gpus)
    rows = []
    for label, spec in resolve_devices(devices, mode):
        r = _C.prefill(m, spec, seq_len, kv_cache_hit, tp, dp, dispatch_nodes, mode)
        finite_results(f"prefill on {label}", r)
        rows.append({"GPU": label, **r})
    return pd.DataFrame(rows).set_index("GPU")


def prefill_mla(model="DeepSeek-V3", devices=("H800", "H20"), seq_len=4383, kv_cache_hit=0.563,
                tps: Sequence[int] = (1, 4, 8), mode=SEED_TABLE_MODE) -> pd.DataFrame:
    """Prefill MLA time per TP (the seed's 2.1 table), with its GEMM and attention parts and the
    all-reduce per TP (``allreduce_ms`` is the first TP above 1's, the seed's single figure)."""
    m = load_model(model)
    mode = text("mode", mode)
    tps = number_list("tps", tps, integer=True, lo=1, hi=MAX_COUNT)
    seq_len, kv_cache_hit = _tokens("seq_len", seq_len), _finite("kv_cache_hit", kv_cache_hit)
    rows = []
    for label, spec in resolve_devices(devices, mode):
        row = {"GPU": label}
        for tp in tps:
            r = _C.prefill_mla(m, spec, seq_len, kv_cache_hit, tp, mode)
            finite_results(f"prefill_mla on {label} at TP{tp}", r)
            row.update(gemm_ms=r["gemm_ms"], attn_ms=r["attn_ms"])  # the same at every TP
            row[f"TP{tp}"] = r["time_ms"]
            if tp > 1:
                row[f"allreduce_tp{tp}_ms"] = r["allreduce_ms"]
                # The seed prints one all-reduce figure; it does not depend on TP as published.
                row.setdefault("allreduce_ms", r["allreduce_ms"])
        rows.append(row)
    return pd.DataFrame(rows).set_index("GPU")


def decode(model="DeepSeek-V3", devices=("H800", "H20", "H20_3e"), seq_len=4383, decode_len=1210,
           batch_sizes: Iterable[float] = (32, 64, 128, 256), tp=0, ep=144, redundant_experts=32,
           absorbed=True, kv_fp8=True, group_gemm_discount=0.7, mode=SEED_TABLE_MODE) -> pd.DataFrame:
    """The seed's decode step breakdown per (device, batch): per-layer times (ms), TPOT, TPS per
    user, tokens/s per GPU, overlap time budget and the memory-limited batch. tp=0 applies the
    best-TP rule of the mode."""
    m = load_model(model)
    mode = seed_mode(mode)
    batches = number_list("batch_sizes", batch_sizes, lo=0, lo_open=True, hi=MAX_TOKENS)
    args = (_tokens("seq_len", seq_len), _tokens("decode_len", decode_len))
    opts = (_count("tp", tp, 0), _count("ep", ep), _count("redundant_experts", redundant_experts, 0),
            flag("absorbed", absorbed), flag("kv_fp8", kv_fp8), _finite("group_gemm_discount", group_gemm_discount))
    rows = []
    for label, spec in resolve_devices(devices, mode):
        for bs in batches:
            r = _C.decode(m, spec, *args, bs, *opts, mode)
            finite_results(f"decode on {label} at batch {bs:g}", r)
            rows.append({"GPU": label, "batch": bs, **r})
    df = pd.DataFrame(rows)
    df["fits_memory"] = df["batch"] <= df["batch_limit"]
    _integer_columns(df, ("batch",))
    return df


def decode_batch_limits(model="DeepSeek-V3", devices=("H800", "H20", "H20_3e"), seq_len=4383, decode_len=1210,
                        tp=1, strategies: Mapping[str, tuple[int, int]] | None = None,
                        mode=SEED_TABLE_MODE) -> pd.DataFrame:
    """The memory-limited batch per GPU (the seed's 3.2 table): rows device x KV dtype x
    absorbed, one column per EP strategy."""
    m = load_model(model)
    mode = text("mode", mode)
    strategies = _strategies(strategies)
    order = sorted(strategies, key=lambda k: -strategies[k][0])  # EP320 first, as the seed
    seq_len, decode_len, tp = _tokens("seq_len", seq_len), _tokens("decode_len", decode_len), _count("tp", tp)
    rows = []
    for kv_fp16 in (False, True):
        for label, spec in resolve_devices(devices, mode):
            for absorbed in (False, True):
                name = label + ("_FP16" if kv_fp16 else "_FP8") + ("_Absorb" if absorbed else "")
                row = {"GPU": name}
                for key in order:
                    ep, red = strategies[key]
                    row[key] = _C.decode_batch_limit(m, spec, seq_len, decode_len, tp, ep, red, absorbed,
                                                     not kv_fp16, mode)
                finite_results(f"decode_batch_limits for {name}", row)
                rows.append(row)
    return pd.DataFrame(rows).set_index("GPU")


def _strategies(strategies) -> dict[str, tuple[int, int]]:
    """EP strategies {name: (ep, redundant experts)}, checked; None gives EP_STRATEGIES."""
    if strategies is None:
        return dict(EP_STRATEGIES)
    if not isinstance(strategies, Mapping):
        raise TypeError(f"strategies must be a mapping name -> (ep, redundant experts), got {strategies!r}")
    if not strategies:
        raise ValueError("strategies must name at least one strategy")
    out = {}
    for key, value in strategies.items():
        if not isinstance(key, str):
            raise TypeError(f"strategies: names must be strings, got {key!r}")
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
            raise TypeError(f"strategies[{key!r}] must be a pair (ep, redundant experts), got {value!r}")
        out[key] = (_count(f"strategies[{key!r}] ep", value[0]), _count(f"strategies[{key!r}] redundant", value[1], 0))
    return out


def ep_strategies(model="DeepSeek-V3", strategies: Mapping[str, tuple[int, int]] | None = None) -> pd.DataFrame:
    """Redundant experts, routed experts per GPU and the per-request token counts of each strategy."""
    m = load_model(model)
    rows = []
    for key, (ep, red) in _strategies(strategies).items():
        per_gpu = (m.n_routed_experts + red) / ep
        rows.append({"EP": key, "ep": ep, "redundant_experts": red, "experts_per_gpu": per_gpu,
                     "comm_tokens_per_request": m.n_activated_experts * (1 - per_gpu / m.n_routed_experts),
                     "compute_tokens_per_request": m.n_activated_experts})
    return pd.DataFrame(rows).set_index("EP")


def decode_sweep(model="DeepSeek-V3", devices=("H800",), batch=(32,), seq_len=(4383,), decode_len=(1210,),
                 tp=(0,), ep=(144,), redundant_experts=None, kv_fp8=(True,), absorbed=True,
                 group_gemm_discount=0.7, mode=SEED_TABLE_MODE) -> pd.DataFrame:
    """The seed's decode over the Cartesian product of the axes in one C++ call; one row per point.

    ``redundant_experts`` pairs element-wise with ``ep`` (default: 32 each). ``tp`` is the attention
    TP; 0 applies the mode's best-TP rule, whose rows then equal those of the TP it picked
    (``mla_tp`` says which). Row order: device > tp > ep > kv_fp8 > seq_len > decode_len > batch
    (innermost). Columns include ``fits_memory`` (the batch fits beside the weights).
    """
    m = load_model(model)
    mode = seed_mode(mode)
    pairs = resolve_devices(devices, mode)
    axes = dict(
        tp=number_list("tp", tp, integer=True, lo=0, hi=MAX_COUNT),
        ep=number_list("ep", ep, integer=True, lo=1, hi=MAX_COUNT),
        kv_fp8=[flag("kv_fp8", v) for v in np.atleast_1d(np.asarray(kv_fp8, dtype=object))],
        seq_len=number_list("seq_len", seq_len, hi=MAX_TOKENS),
        decode_len=number_list("decode_len", decode_len, hi=MAX_TOKENS),
        batch=number_list("batch", batch, hi=MAX_TOKENS))
    if not axes["kv_fp8"]:
        raise ValueError("kv_fp8 must not be empty")
    eps = axes["ep"]
    reds = ([32] * len(eps) if redundant_experts is None else
            number_list("redundant_experts", redundant_experts, integer=True, lo=0, hi=MAX_COUNT))
    if len(reds) != len(eps):
        raise ValueError("redundant_experts must have one entry per ep value")
    # Python ints do not overflow: the row count is exact here, and bounded before anything is allocated.
    rows = len(pairs)
    for values in axes.values():
        rows *= len(values)
    if rows > MAX_SWEEP_ROWS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in [("devices", pairs), *axes.items()])
        raise ValueError(f"decode_sweep grid has {sizes} = {rows} rows, more than the {MAX_SWEEP_ROWS} allowed "
                         "(split the sweep)")
    cols = _C.decode_sweep(
        m, [s for _, s in pairs], axes["tp"], eps, reds, [int(v) for v in axes["kv_fp8"]], axes["seq_len"],
        axes["decode_len"], axes["batch"], flag("absorbed", absorbed),
        _finite("group_gemm_discount", group_gemm_discount), mode)
    finite_results("decode_sweep", {k: v for k, v in cols.items() if v.dtype.kind == "f"})
    # Codes come from the C++ loop over `pairs`, so they need no range check. A device given twice
    # gives two rows per point under one label (categories must be unique).
    names = [label for label, _ in pairs]
    categories = list(dict.fromkeys(names))
    codes = cols.pop("device_index")
    if len(categories) < len(names):
        codes = np.array([categories.index(n) for n in names], np.int32)[codes]
    labels = pd.Categorical.from_codes(codes, categories=categories, validate=False)
    df = pd.DataFrame(cols, copy=False)
    df.insert(0, "GPU", labels)
    df["fits_memory"] = df["batch"] <= df["batch_limit"]
    _integer_columns(df, ("batch", "seq_len", "decode_len"), axes)
    return df


def _integer_columns(df: pd.DataFrame, names, axes=None) -> None:
    """Axes given as whole numbers come back as integers (a batch of 32, not 32.0). axes: the
    values each column was swept over, where known: whole-ness is then read from the few axis
    values instead of the million rows."""
    for name in names:
        v = df[name].to_numpy()
        if v.dtype.kind != "f":
            continue
        whole = all(float(x).is_integer() for x in axes[name]) if axes is not None else np.all(v == np.round(v))
        if whole:
            df[name] = v.astype(np.int64)


def flops_summary(model="DeepSeek-V3", kv_len_avg=4989) -> pd.DataFrame:
    """The seed's 1.1 figures: single-token MLA FLOPs (standard, absorbed) and their ratios."""
    m = load_model(model)
    kv_len_avg = _tokens("kv_len_avg", kv_len_avg)
    if kv_len_avg <= 0:
        raise ValueError(f"kv_len_avg must be positive, got {kv_len_avg}")
    std1, abs1 = _C.mla_flops(1, 1, m, 0), _C.mla_absorbed_flops(1, 1, m, 0)
    rows = [
        {"quantity": "mla_flops(1,1) total_gflop", "value": std1[0]},
        {"quantity": "mla_flops(1,1) gemm_fp8_gflop", "value": std1[1]},
        {"quantity": "mla_flops(1,1) attn_fp16_gflop", "value": std1[2]},
        {"quantity": "mla_absorbed_flops(1,1) total_gflop", "value": abs1[0]},
        {"quantity": "mla_absorbed_flops(1,1) gemm_fp8_gflop", "value": abs1[1]},
        {"quantity": "mla_absorbed_flops(1,1) attn_fp16_gflop", "value": abs1[2]},
        {"quantity": "absorbed/standard, 1 token", "value": abs1[0] / std1[0]},
        {"quantity": f"absorbed/standard, prefill {kv_len_avg:g}/{kv_len_avg:g}",
         "value": _C.mla_absorbed_flops(kv_len_avg, kv_len_avg, m, 0)[0] / _C.mla_flops(kv_len_avg, kv_len_avg, m, 0)[0]},
        {"quantity": f"absorbed/standard, decode q=1 kv={kv_len_avg:g} cache rate 1",
         "value": _C.mla_absorbed_flops(1, kv_len_avg, m, 1)[0] / _C.mla_flops(1, kv_len_avg, m, 1)[0]},
        {"quantity": "absorbed MLA parameters (M)", "value": _C.param_counts(m, False)["mla_absorbed"] / 1e6},
    ]
    finite_results("flops_summary", {r["quantity"]: r["value"] for r in rows})
    return pd.DataFrame(rows).set_index("quantity")


def _seed_quoted(block: str, count: float) -> float:
    """A per-block parameter count as the seed quotes it, in parameters.

    The seed measured MLA, DenseMLP and Expert with ptflops (rounded to 0.01M: 396.4058M ->
    396.41M) and computed Gate and Embedding/Output by hand, cutting the digits
    (1.835264M -> 1.83M, 926.679M -> 926.67M).
    """
    millions = count / 1e6
    if block in ("mla", "dense_mlp", "expert"):
        return round(millions, 2) * 1e6
    return np.floor(millions * 100 + 1e-9) / 100 * 1e6


def parameter_table(model="DeepSeek-V3", mode=SEED_TABLE_MODE) -> pd.DataFrame:
    """The seed's 1.4 parameter table: parameters per block instance, instances per layer, layers, total.

    as_published counts a bias on every linear layer (the seed measured nn.Linear with bias=True)
    and uses the per-block counts as the seed quotes them (187.17M, 396.41M, 44.05M, 1.83M,
    926.67M). Their exact sum is 671.18B; the seed prints 671.16B, the sum of its rounded row
    totals, and SUM is that quoted total (ModelConfig.quoted_total_params; docs/DEVIATIONS.md). With the exact_parameter_counts fix (corrected mode) the
    bias-free linears of DeepSeek-V3 are counted exactly.
    """
    m = load_model(model)
    seed = not _C.parse_mode(text("mode", mode))["exact_parameter_counts"]
    p = _C.param_counts(m, seed)
    per = {k: (_seed_quoted(k, v) if seed else v) for k, v in p.items()}
    experts = m.n_routed_experts + m.n_shared_experts
    rows = [
        ("MLA", per["mla"], 1, m.n_layers),
        ("DenseMLP", per["dense_mlp"], 1, m.n_dense_layers),
        ("Expert", per["expert"], experts, m.n_moe_layers),
        ("Gate", per["gate"], 1, m.n_moe_layers),
        ("Embedding", per["embedding"], 1, 1),
        ("Output", per["lm_head"], 1, 1),
    ]
    df = pd.DataFrame(rows, columns=["Block", "params_per_block", "blocks_per_layer", "layers"]).set_index("Block")
    df["params_total"] = df["params_per_block"] * df["blocks_per_layer"] * df["layers"]
    # as_published prints the total the seed quotes where the model has one (671.16B, the sum of
    # its rounded row totals); otherwise the sum of the rows.
    total = m.quoted_total_params if seed and m.quoted_total_params > 0 else df["params_total"].sum()
    df.loc["SUM"] = [np.nan, np.nan, np.nan, total]
    return df


def block_complexity(model="DeepSeek-V3") -> pd.DataFrame:
    """Per block: parameters (bias-free), weight bytes in FP8 and BF16, FLOPs of one token, and
    KV-cache elements per token (the seed's 1.4 summary, extended to every block)."""
    m = load_model(model)
    p = _C.param_counts(m, False)
    rows = [
        ("MLA", p["mla"], _C.mla_flops(1, 1, m, 0)[0], m.kv_cache_width),
        ("MLA_absorb", p["mla_absorbed"], _C.mla_absorbed_flops(1, 1, m, 0)[0], m.kv_cache_width),
        ("DenseMLP", p["dense_mlp"], _C.dense_mlp_gflop(m, 1), 0),
        ("Expert", p["expert"], _C.expert_gflop(m, 1), 0),
        ("Gate", p["gate"], _C.gate_gflop(m, 1), 0),
        ("Embedding", p["embedding"], 0.0, 0),
        ("LMHead", p["lm_head"], _C.lm_head_gflop(m, 1), 0),
    ]
    df = pd.DataFrame(rows, columns=["Block", "params", "gflop_per_token", "kv_cache_elements_per_token"])
    df.insert(2, "weight_bytes_fp8", df["params"])
    df.insert(3, "weight_bytes_bf16", df["params"] * 2)
    df["flops_per_token"] = df.pop("gflop_per_token") * 1e9
    return df.set_index("Block")


def kv_cache_per_token(model="DeepSeek-V3") -> pd.DataFrame:
    """KV-cache bytes per token over all layers, FP16 and FP8, in KB (1024 bytes) as the seed."""
    m = load_model(model)
    rows = [{"dtype": dt, "bytes_per_token": _C.kv_cache_bytes_per_token(m, b),
             "kb_per_token": _C.kv_cache_bytes_per_token(m, b) / 1024} for dt, b in (("FP16", 2.0), ("FP8", 1.0))]
    return pd.DataFrame(rows).set_index("dtype")
