"""The effect of each fix of the seed's quirks on the headline figures.

Each row applies one fix to the seed's arithmetic ("as_published+fix") and, separately, removes it
from the corrected model ("corrected-fix"), and reports the headline figures of both, beside the
as_published and corrected baselines. docs/DEVIATIONS.md prints this table.
"""
from __future__ import annotations

import pandas as pd

from .. import _C
from . import formulas as cm

# Decode points of the seed's TL;DR whose figures the table follows.
DECODE_POINTS = (("H800", 128), ("H20", 32), ("H20_3e", 64))


def headline(mode: str) -> dict:
    out = {}
    pre = cm.prefill("DeepSeek-V3", ["H800", "H20"], 4383, 0.563, tp=4, dp=8, mode=mode)
    out["prefill H800 tok/s/node (O)"] = pre.loc["H800", "tokens_per_s_node_overlap"]
    out["prefill H800 tok/s/node"] = pre.loc["H800", "tokens_per_s_node"]
    out["prefill H20 tok/s/node (O)"] = pre.loc["H20", "tokens_per_s_node_overlap"]
    out["prefill H800 KV GB/s (O)"] = pre.loc["H800", "kv_transfer_gbps_overlap"]
    for gpu, bs in DECODE_POINTS:
        d = cm.decode("DeepSeek-V3", [gpu], 4383, 1210, [bs], mode=mode).iloc[0]
        out[f"decode {gpu} bs{bs} TPOT(O) ms"] = d["tpot_overlap_ms"]
        if gpu == "H800":
            out[f"decode {gpu} bs{bs} TPOT ms"] = d["tpot_ms"]
        out[f"decode {gpu} bs{bs} tok/s/GPU (O)"] = d["tokens_per_gpu_s_overlap"]
    out["H800 batch limit (FP8, absorbed, EP144)"] = cm.decode_batch_limits(
        "DeepSeek-V3", ["H800"], mode=mode).loc["H800_FP8_Absorb", "EP144"]
    return out


def deviation_effects() -> pd.DataFrame:
    """One row per mode: as_published, each '+fix', corrected, each '-fix'."""
    modes = ["as_published"] + [f"as_published+{f}" for f in _C.fix_names()]
    modes += ["corrected"] + [f"corrected-{f}" for f in _C.fix_names()]
    return pd.DataFrame([{"mode": m, **headline(m)} for m in modes]).set_index("mode")
