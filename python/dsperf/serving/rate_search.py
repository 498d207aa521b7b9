"""The highest request rate a deployment serves within a percentile SLA (bisection over
simulations), and latency against rate."""
from __future__ import annotations

import pandas as pd

from .._checks import number
from .simulate import _rate, check_sla, simulate


def max_rate(model="DeepSeek-V3", device="H800", *, sla_ttft_ms=None, sla_tpot_ms=None, sla_percentile=90.0,
             low=0.1, high=100.0, tolerance=0.05, **kw) -> dict:
    """Bisection for the highest rate (requests/s) whose run meets the SLA at its percentile without
    overload; every other keyword goes to simulate(). Returns rate, the run at that rate
    (``result``) and the rates tried (``tried``: rate -> met). rate is 0 when even ``low`` fails;
    ``high`` when it passes (raise ``high``: the search does not look beyond it)."""
    sla = check_sla(sla_ttft_ms, sla_tpot_ms, sla_percentile)
    if sla.ttft_ms is None and sla.tpot_ms is None:
        raise ValueError("max_rate needs an SLA: sla_ttft_ms, sla_tpot_ms or both")
    low, high = _rate(low, "low"), _rate(high, "high")
    if low >= high:
        raise ValueError(f"low ({low}) must be below high ({high})")
    tolerance = number("tolerance", tolerance, lo=1e-4, hi=0.5)
    if "rate" in kw or "concurrency" in kw:
        raise ValueError("max_rate searches the rate: give neither rate nor concurrency")
    tried = {}

    def run(rate):
        r = simulate(model, device, rate=rate, sla_ttft_ms=sla.ttft_ms, sla_tpot_ms=sla.tpot_ms,
                     sla_percentile=sla.percentile, **kw)
        tried[rate] = r.meets()
        return r

    best = run(low)
    if not tried[low]:
        return {"rate": 0.0, "result": best, "tried": tried}
    top = run(high)
    if tried[high]:
        return {"rate": high, "result": top, "tried": tried}
    lo, hi = low, high
    while hi / lo - 1 > tolerance:
        mid = (lo * hi) ** 0.5  # geometric: rates span decades
        r = run(mid)
        if tried[mid]:
            lo, best = mid, r
        else:
            hi = mid
    return {"rate": lo, "result": best, "tried": tried}


def rate_sweep(rates, model="DeepSeek-V3", device="H800", **kw) -> pd.DataFrame:
    """One row per rate: the summary of simulate(rate=...) (percentiles, throughput, goodput, overload)."""
    rows = []
    for rate in rates:
        s = simulate(model, device, rate=rate, **kw).summary()
        s["rate"] = rate
        rows.append(s)
    return pd.DataFrame(rows)
