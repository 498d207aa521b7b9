"""The explorer's best configurations re-checked by simulation: the explorer judges an SLA on mean
TPOT and one prefill step's TTFT; serving them with a closed loop at the configuration's
concurrency (batch x decode GPUs) gives the percentiles, queueing and interference included."""
from __future__ import annotations

import math

import pandas as pd

from ..model import grounded
from .simulate import check_sla, simulate

RECHECKED = 5  # configurations re-checked at most: each is a full simulation


def _weight_dtype(row) -> str:
    return grounded.weight_dtype_of_row(row)


def recheck(rows: pd.DataFrame, model="DeepSeek-V3", *, isl, osl, sla_percentile=90.0, sla_tpot_ms=None,
            sla_ttft_ms=None, serving="disaggregated", waves=3) -> pd.DataFrame:
    """Simulate each of the first RECHECKED rows of the explorer's frame (dsperf.explore.search /
    best): ``waves`` rounds of a closed loop of batch x GPUs clients with isl / osl tokens. Returns
    the rows' layout columns with the simulated P<sla_percentile> TTFT and TPOT (ms) and whether they
    meet the SLA's limits at that percentile (``sim_meets``); attention-FFN rows are not simulated."""
    sla = check_sla(sla_ttft_ms, sla_tpot_ms, sla_percentile)
    from ..model.explore import DEFAULT_REDUNDANT

    out = []
    for _, row in rows.head(RECHECKED).iterrows():
        rec = {k: row[k] for k in ("device", "ep", "attn_tp", "mtp", "batch", "tpot_ms", "ttft_ms") if k in row}
        if str(row.get("kind", "ep")) != "ep":
            rec["sim_note"] = "attention-FFN disaggregation is not simulated"
            out.append(rec)
            continue
        gpus = int(row["ep"])
        clients = max(1, int(round(float(row["batch"]) * gpus)))
        round_ms = float(row["ttft_ms"]) + osl * float(row["tpot_ms"])
        layout = dict(ep=gpus, attn_tp=int(row["attn_tp"]), redundant_experts=int(row["redundant_experts"]),
                      moe_tp=int(row.get("moe_tp", 1)), dense_tp=int(row.get("dense_tp", 1)), mtp=int(row["mtp"]),
                      mtp_accepted=float(row.get("mtp_accepted", 0.0)), kv_fp8=bool(row["kv_fp8"]),
                      overlap=str(row["overlap"]), weight_dtype=_weight_dtype(row),
                      max_batch=max(1, math.ceil(float(row["batch"]))), input_len=int(isl), output_len=int(osl))
        if serving == "disaggregated":
            pep = int(row["prefill_ep"])
            layout.update(mode="disaggregated", prefill_ep=pep, prefill_redundant_experts=DEFAULT_REDUNDANT.get(pep, 0),
                          prefill_replicas=max(1, math.ceil(float(row["prefill_gpus"]) / pep)),
                          prefill_max_num_tokens=int(row["prefill_tokens"]))
        else:
            layout.update(mode="aggregated", max_num_tokens=int(isl))
        r = simulate(model, str(row["device"]), concurrency=clients, duration_s=waves * round_ms / 1e3,
                     sla_ttft_ms=sla.ttft_ms, sla_tpot_ms=sla.tpot_ms, sla_percentile=sla.percentile, **layout)
        # The first round arrives at once (every client's first request): a burst, not the steady
        # state the explorer prices; the later requests arrive as answers come back.
        steady = r.records[r.records["arrival_ms"] > 0]
        steady = steady if steady["finished"].any() else r.records
        got = sla.percentile_values(steady)
        rec[f"sim_ttft_p{sla.percentile:g}_ms"] = got["ttft_ms"]
        rec[f"sim_tpot_p{sla.percentile:g}_ms"] = got["tpot_ms"]
        finished = bool(steady["finished"].any())
        rec["sim_meets"] = bool(finished and not r.info["overloaded"] and sla.met_at_percentile(steady))
        # Why a row has no percentiles (NaN) or cannot meet the SLA whatever they are.
        if r.info["overloaded"]:
            rec["sim_note"] = (f"overloaded: the simulation stopped at its {r.info['stop_reason']} bound "
                               f"({clients} clients)")
        elif not finished:
            rec["sim_note"] = f"no request finished within {waves} rounds ({waves * round_ms / 1e3:.4g} s simulated)"
        out.append(rec)
    return pd.DataFrame(out)
