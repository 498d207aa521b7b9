"""The cost model beside DeepSeek's published per-node throughput (a printed comparison, not a test).

DeepSeek-V3/R1 Inference System Overview (Feb 2025): per H800 node ~73.7k input tokens/s in
prefill (cache hits included) and ~14.8k output tokens/s in decode, at 20-22 tokens/s per user;
prefill EP32 on 4 nodes, decode EP144 on 18 nodes. These are daily averages over peaks and
troughs, so a peak-rate model is expected to land above them: model/deepseek is the inverse of the
utilisation. The grounded model's rows carry its error band (docs/VALIDATION.md).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import formulas as cm
from .._checks import flag, number

DEEPSEEK_PREFILL_TOKENS_PER_NODE = 73_700
DEEPSEEK_DECODE_TOKENS_PER_NODE = 14_800
DEEPSEEK_TPS_PER_USER = 20.0


def best_decode_point(mode: str, device: str = "H800", ep: int = 144, redundant: int = 32,
                      min_tps_user: float = DEEPSEEK_TPS_PER_USER, overlap: bool = True) -> pd.Series:
    """The largest batch per GPU that keeps TPS per user >= min_tps_user and fits in memory
    (the seed's rule for choosing a decode operating point)."""
    min_tps_user = number("min_tps_user", min_tps_user)
    overlap = flag("overlap", overlap)
    df = cm.decode_sweep("DeepSeek-V3", [device], batch=np.arange(1, 513), ep=[ep], redundant_experts=[redundant],
                         mode=mode, seq_len=[4383], decode_len=[1210])
    suffix = "_overlap" if overlap else ""
    ok = df[(df["tps_user" + suffix] >= min_tps_user) & (df["batch"] <= df["batch_limit"])]
    if ok.empty:
        raise ValueError(f"no batch reaches {min_tps_user} tokens/s per user on {device}")
    return ok.loc[ok["batch"].idxmax()]


def deepseek_comparison() -> pd.DataFrame:
    rows = []
    for mode in ("as_published", "corrected"):
        pre = cm.prefill("DeepSeek-V3", ["H800"], 4383, 0.563, tp=4, dp=8, mode=mode).iloc[0]
        for overlap, sfx in ((True, "_overlap"), (False, "")):
            rows.append({"phase": "prefill, input tokens/s per node", "mode": mode, "overlap": overlap,
                         "batch_per_gpu": np.nan, "model": pre["tokens_per_s_node" + sfx],
                         "deepseek": DEEPSEEK_PREFILL_TOKENS_PER_NODE})
            rows.append({"phase": "prefill, computed (uncached) tokens/s per node", "mode": mode,
                         "overlap": overlap, "batch_per_gpu": np.nan,
                         "model": pre["computed_tokens_per_s_node" + sfx],
                         "deepseek": DEEPSEEK_PREFILL_TOKENS_PER_NODE * (1 - 0.563)})
        for overlap in (True, False):
            best = best_decode_point(mode, overlap=overlap)
            per_gpu = best["tokens_per_gpu_s_overlap" if overlap else "tokens_per_gpu_s"]
            rows.append({"phase": "decode, output tokens/s per node (TPS/user >= 20)", "mode": mode,
                         "overlap": overlap, "batch_per_gpu": best["batch"], "model": per_gpu * 8,
                         "deepseek": DEEPSEEK_DECODE_TOKENS_PER_NODE})
    rows += grounded_rows()
    df = pd.DataFrame(rows)
    df["model/deepseek"] = df["model"] / df["deepseek"]
    return df


def grounded_rows() -> list[dict]:
    """The grounded model at DeepSeek's layouts (docs/VALIDATION.md): prefill EP32 (+32 redundant)
    with 16K new tokens per GPU per step of 4,383-token prompts, 56.3% of them cached; decode EP144
    (+32) at the largest batch per GPU that keeps 20 tokens/s per user, context 4,383 + 1,210 / 2,
    BF16 cache, two-batch overlap, no MTP. `band` is the phase's median |error| in the validation."""
    from ..model import explore, grounded

    prompt, cached = 4383.0, round(4383 * 0.563)
    pre = grounded.prefill("DeepSeek-V3", "H800", tokens=16384, prompt_len=prompt, cached_prefix=cached, ep=32,
                           redundant_experts=32)
    per_node = pre["tokens_per_gpu_s"] * prompt / (prompt - cached) * 8
    df = explore.search(devices=["H800"], isl=prompt, osl=1210, ep=(144,), redundant_experts={144: 32},
                        attn_tp=(1,), mtp=((0, 0.0),), kv_fp8=(False,), overlap=("two_batch",),
                        batch=tuple(float(b) for b in range(1, 513)))
    ok = df[df["feasible"] & (df["tps_user"] >= DEEPSEEK_TPS_PER_USER)]
    if ok.empty:
        raise ValueError(f"no batch reaches {DEEPSEEK_TPS_PER_USER} tokens/s per user on H800 (grounded)")
    best = ok.loc[ok["batch"].idxmax()]
    return [
        {"phase": "prefill, input tokens/s per node", "mode": "grounded", "overlap": True, "batch_per_gpu": np.nan,
         "model": per_node, "deepseek": DEEPSEEK_PREFILL_TOKENS_PER_NODE, "band": grounded.error_band("prefill")},
        {"phase": "decode, output tokens/s per node (TPS/user >= 20)", "mode": "grounded", "overlap": True,
         "batch_per_gpu": best["batch"], "model": best["tokens_per_gpu_s"] * 8,
         "deepseek": DEEPSEEK_DECODE_TOKENS_PER_NODE, "band": grounded.error_band("decode")},
    ]
