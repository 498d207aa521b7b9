"""Fuzzing the grounded model, the explorer, the kernel tables, their CLI and the EP exchange
(issue 32's surfaces).

Two parts: the fixed census (benchmarks/fuzz_grounded_census.py; every case in a forked child
under a time limit) must give a clean error for every invalid input and the right answer for every
valid one; and hypothesis draws device fields, efficiencies and table latencies over the whole
range of doubles: a value outside a field's declared bounds (DeviceSpec.BOUNDS, the tables'
TABLE_BOUNDS) is an error naming it, a value inside gives finite results. Derandomised (CI runs the
same cases every time); DSPERF_FUZZ_RANDOM=1 explores fresh ones. A few seconds on 2 cores.
"""
import math
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import fuzz_grounded_census as census  # noqa: E402
from benchmarks.forked import run_forked  # noqa: E402

import dsperf  # noqa: E402
from dsperf import grounded  # noqa: E402

RANDOM = os.environ.get("DSPERF_FUZZ_RANDOM") == "1"
FUZZ = settings(max_examples=60, deadline=None, derandomize=not RANDOM, database=None)
CASES = census._cases()


@pytest.mark.parametrize("api", sorted({c[0] for c in CASES}))
def test_census(api):
    """Every case of the API: a clean error naming its argument, file or flag (invalid input), or
    the right answer (valid input); never another exception, a wrong result, a crash or a hang."""
    for _, names, fn, check in (c for c in CASES if c[0] == api):
        out = run_forked(lambda: census._classify_in_child(api, names, fn, check), 60.0, 4 << 30)
        assert out[0] == "ok", (api, names, out)
        cls, detail = out[1]
        assert cls == ("right result" if check else "clean error"), (api, names, cls, detail)


# Doubles from the smallest subnormal to the largest, both signs.
doubles = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([5e-324, 1e-310, 1e-308, 1e-300, 1e-3, 0.01, 0.5, 1.0, 1e9, 1e10, 1e308, -1e-300]))
FLOAT_FIELDS = [f for f, kind, _ in dsperf.DeviceSpec.FIELDS if kind == "float"]


def _decode_with(field, value):
    spec = dsperf.load_device("H800", **{field: value})
    r = grounded.decode(device=spec, batch=64, kv_len=2048, ep=64)
    p = grounded.prefill(device=spec, tokens=8192, ep=32)
    return [r["step_ms"], r["tokens_per_gpu_s"], p["step_ms"], p["tokens_per_gpu_s"]]


@FUZZ
@given(field=st.sampled_from(FLOAT_FIELDS), value=doubles)
def test_device_fields(field, value):
    lo, hi, zero_ok = dsperf.DeviceSpec.BOUNDS[field]
    inside = lo <= value <= hi or (zero_ok and value == 0)
    out = run_forked(lambda: _decode_with(field, value), 30.0)
    if inside:
        assert out[0] == "ok" and all(math.isfinite(v) and v > 0 for v in out[1]), (field, value, out)
    else:
        assert out[0] == "error" and out[1] == "ValueError" and field in out[2], (field, value, out)


@FUZZ
@given(value=doubles)
def test_default_efficiency(value):
    lo, hi = grounded.SM.TABLE_BOUNDS["default_efficiency"]
    out = run_forked(lambda: grounded.decode(device="B200", default_efficiency=value)["step_ms"], 30.0)
    if lo <= value <= hi:
        assert out[0] == "ok" and math.isfinite(out[1]), (value, out)
    else:
        assert out[0] == "error" and "default_efficiency" in out[2], (value, out)


@FUZZ
@given(value=doubles)
def test_table_latency(value):
    lo, hi = grounded.SM.TABLE_BOUNDS["latency_us"]
    csv = census._csv_with(lambda r: census._set_field(r, census.LATENCY, repr(value)))
    path = census._device_files(csv_text=csv)
    out = run_forked(lambda: grounded.decode(device=path)["step_ms"], 30.0)
    if lo <= value <= hi:
        assert out[0] == "ok" and math.isfinite(out[1]), (value, out)
    else:
        assert out[0] == "error" and "mine.csv" in out[2] and "latency_us" in out[2] and "row" in out[2], (value, out)
