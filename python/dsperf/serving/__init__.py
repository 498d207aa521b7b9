"""Request-level serving simulation on the grounded step model (docs/SERVING.md).

    >>> from dsperf import serving
    >>> r = serving.simulate("DeepSeek-V3", "H800", rate=2.0, ep=16, duration_s=30)
    >>> r.percentiles()          # P50 / P90 / P99 of TTFT, TPOT, ITL, E2E (ms)
    >>> serving.max_rate("DeepSeek-V3", "H800", ep=16, sla_ttft_ms=2000, sla_percentile=90)
"""
from . import plots
from .rate_search import max_rate, rate_sweep
from .recheck import recheck
from .result import PERCENTILES, ServingResult, Sla
from .simulate import ARRIVALS, MODES, ROUTINGS, simulate
from .traces import SHIPPED, Trace, load_trace

__all__ = ["plots", "simulate", "max_rate", "rate_sweep", "recheck", "ServingResult", "Sla", "load_trace", "Trace", "SHIPPED",
           "ARRIVALS", "ROUTINGS", "MODES", "PERCENTILES"]
