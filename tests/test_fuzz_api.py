"""Fuzzing the public API outside dsperf.kernels: the cost model, the model and device loaders,
kernel_cost, EPLB and the CLI (hypothesis).

Each case runs in a forked child under a time limit (a crash or a hang fails the test instead of
killing or stalling the run) and is held to the documented contract: a value outside it raises
ValueError or TypeError naming the argument (or the file); a value inside it returns a finite
result or raises a clean error (a combination the model refuses, such as a TP that does not divide
the node). Kept small for CI: a few hundred cases in well under a minute on 2 cores.
"""
import json
import math
import numbers
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.forked import run_forked  # noqa: E402

import dsperf  # noqa: E402
from dsperf import ep as dep
from dsperf import kernel_cost as kc

# Derandomized so that CI runs the same cases every time (a new random find must not fail an
# unrelated change); DSPERF_FUZZ_RANDOM=1 explores fresh cases.
RANDOM = os.environ.get("DSPERF_FUZZ_RANDOM") == "1"
FUZZ = settings(max_examples=40, deadline=None, derandomize=not RANDOM, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
MAX_TOKENS, MAX_COUNT = 2 ** 30, 2 ** 20


# ---- running a case in its own process ---------------------------------------------------------------
def isolated(fn, timeout=20.0):
    """Run fn() in a forked child (benchmarks.forked). Returns ("ok", value) with fn's (picklable)
    return value, ("error", type name, message), ("crash", signal) or ("hang", None)."""
    return run_forked(fn, timeout)


def assert_clean_error(out, *names):
    """The case raised ValueError or TypeError whose message names one of `names`."""
    assert out[0] == "error", f"expected an error naming {names}, got {out!r}"
    assert out[1] in ("ValueError", "TypeError"), out
    assert "incompatible function arguments" not in out[2], out
    assert any(n in out[2] for n in names), f"the message does not name {names}: {out[2]!r}"


def finite_frame(df):
    """A result summary the parent can check: False if any numeric value is inf or NaN."""
    num = df.select_dtypes(include=[np.number])
    return bool(np.isfinite(num.to_numpy(dtype=np.float64)).all())


# ---- values -------------------------------------------------------------------------------------------
anything = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([2 ** 31, 2 ** 32 + 3, 2 ** 63, 2 ** 64, -(2 ** 31) - 1, 1e300, 1e308, 0, 1, 4, 8, 144]),
    st.booleans(), st.none(), st.text(max_size=4), st.binary(max_size=2),
    st.lists(st.integers(-3, 300), max_size=2))


def is_real(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


# (api, argument, is the value inside the documented contract?)
SCALAR_ARGS = [
    ("prefill", "seq_len", lambda v: is_real(v) and 0 < v <= MAX_TOKENS),
    ("prefill", "kv_cache_hit", lambda v: is_real(v) and 0 <= v < 1),
    ("prefill", "tp", lambda v: is_int(v) and 1 <= v <= MAX_COUNT),
    ("prefill", "dp", lambda v: is_int(v) and 1 <= v <= MAX_COUNT),
    ("prefill", "dispatch_nodes", lambda v: is_int(v) and 1 <= v <= MAX_COUNT),
    ("prefill_mla", "seq_len", lambda v: is_real(v) and 0 < v <= MAX_TOKENS),
    ("decode", "seq_len", lambda v: is_real(v) and 0 < v <= MAX_TOKENS),
    ("decode", "decode_len", lambda v: is_real(v) and 0 <= v <= MAX_TOKENS),
    ("decode", "batch_sizes", lambda v: (is_real(v) and 0 < v <= MAX_TOKENS) or (
        isinstance(v, list) and len(v) > 0 and all(is_real(x) and 0 < x <= MAX_TOKENS for x in v))),
    ("decode", "tp", lambda v: is_int(v) and 0 <= v <= MAX_COUNT),
    ("decode", "ep", lambda v: is_int(v) and 1 <= v <= MAX_COUNT),
    ("decode", "redundant_experts", lambda v: is_int(v) and 0 <= v <= MAX_COUNT),
    ("decode", "group_gemm_discount", lambda v: is_real(v) and 0 < v <= 1),
    ("decode", "absorbed", lambda v: isinstance(v, bool)),
    ("decode", "kv_fp8", lambda v: isinstance(v, bool)),
    ("decode_batch_limits", "seq_len", lambda v: is_real(v) and 0 < v <= MAX_TOKENS),
    ("decode_batch_limits", "tp", lambda v: is_int(v) and 1 <= v <= MAX_COUNT),
    ("flops_summary", "kv_len_avg", lambda v: is_real(v) and 0 < v <= MAX_TOKENS),
]
DEVICES = {"flops_summary": {}, "prefill_mla": dict(devices=["H800"]), "decode": dict(devices=["H800"])}


@FUZZ
@given(case=st.sampled_from(SCALAR_ARGS), value=anything, mode=st.sampled_from(["as_published", "corrected"]))
@example(case=SCALAR_ARGS[0], value=1e300, mode="as_published")      # printed inf before
@example(case=SCALAR_ARGS[13], value="no", mode="as_published")       # absorbed='no' was True
@example(case=SCALAR_ARGS[14], value="false", mode="as_published")    # kv_fp8='false' was True
@example(case=SCALAR_ARGS[2], value=2 ** 31, mode="as_published")     # pybind11's "incompatible function arguments"
def test_cost_model_scalar_arguments(case, value, mode):
    api, arg, valid = case
    kw = dict(DEVICES.get(api, dict(devices=["H800"])), **{arg: value})
    if api != "flops_summary":
        kw["mode"] = mode
    out = isolated(lambda: finite_frame(getattr(dsperf, api)(**kw)))
    if valid(value):
        assert out == ("ok", True) or (out[0] == "error" and out[1] == "ValueError"), out
    else:
        assert_clean_error(out, arg)


axis_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2 ** 66), 2 ** 66),
                       st.booleans(), st.none(), st.text(max_size=2))
SWEEP_AXES = {
    "batch": lambda v: is_real(v) and 0 < v <= MAX_TOKENS,
    "seq_len": lambda v: is_real(v) and 0 < v <= MAX_TOKENS,
    "decode_len": lambda v: is_real(v) and 0 <= v <= MAX_TOKENS,
    "tp": lambda v: is_int(v) and 0 <= v <= MAX_COUNT,
    "ep": lambda v: is_int(v) and 1 <= v <= MAX_COUNT,
    "kv_fp8": lambda v: isinstance(v, bool),
}


@FUZZ
@given(axis=st.sampled_from(sorted(SWEEP_AXES)), values=st.lists(axis_value, min_size=1, max_size=4))
def test_decode_sweep_axis_values(axis, values):
    out = isolated(lambda: finite_frame(dsperf.decode_sweep(devices=["H800"], **{axis: values})))
    if all(SWEEP_AXES[axis](v) for v in values):
        assert out == ("ok", True) or (out[0] == "error" and out[1] == "ValueError"), out
    else:
        assert_clean_error(out, axis)


# The row count of a grid of these axis lengths is either small (it runs) or beyond the 2**24 rows
# allowed (a ValueError before any allocation); the product may overflow 64 bits.
@settings(max_examples=25, deadline=None, derandomize=not RANDOM, database=None)
@given(lengths=st.lists(st.integers(1, 2500), min_size=7, max_size=7), direct=st.booleans())
@example(lengths=[3, 59, 379, 653, 937, 1723, 2393], direct=True)     # rows x 109 bytes wraps to ~1 MB
@example(lengths=[3, 59, 379, 653, 937, 1723, 2393], direct=False)
@example(lengths=[1000] * 7, direct=True)                             # rows overflow 64 bits
def test_decode_sweep_grid_sizes(lengths, direct):
    rows = math.prod(lengths)
    if 5000 < rows <= 2 ** 24:
        lengths = [min(n, 2) for n in lengths]  # a mid-size grid only costs time
        rows = math.prod(lengths)
    nd, ntp, nep, nkv, ns, ndl, nb = lengths
    axes = dict(tp=[0] * ntp, ep=[144] * nep, kv_fp8=[True] * nkv, seq_len=[float(v) for v in range(1, ns + 1)],
                decode_len=[float(v) for v in range(ndl)], batch=[float(v) for v in range(1, nb + 1)])

    def call():
        if direct:   # the C++ binding on its own: its checked arithmetic, not the Python bound
            m, spec = dsperf.load_model(), dsperf.load_device("H800")
            cols = dsperf._C.decode_sweep(m, [spec] * nd, axes["tp"], axes["ep"], [32] * nep, [1] * nkv,
                                          axes["seq_len"], axes["decode_len"], axes["batch"])
            return len(cols["tpot_ms"])
        return len(dsperf.decode_sweep(devices=["H800"] * nd, **axes))

    out = isolated(call, timeout=60)
    if rows <= 2 ** 24:
        assert out == ("ok", rows), out
    else:
        assert_clean_error(out, "decode_sweep grid")


# ---- loaders ------------------------------------------------------------------------------------------
V3 = dsperf.model.configs._shipped_config("DeepSeek-V3")
field_value = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([2 ** 31, 2 ** 32 + 61, 2 ** 63, 2 ** 24 + 1, True, None, "61", [61]]))


def _model_field_ok(key, v):
    if v is None:
        return key in dsperf.model.configs._NULLABLE
    if key == "routed_scaling_factor":
        return is_real(v) and 0 < v <= 1e6
    return is_real(v) and float(v) == int(v) and 0 <= v <= dsperf.model.MODEL_FIELD_MAX


@FUZZ
@given(key=st.sampled_from(sorted(dsperf.model.HF_FIELDS)), value=field_value, as_file=st.booleans())
@example(key="num_hidden_layers", value=2 ** 31, as_file=True)     # was a negative TPOT
@example(key="routed_scaling_factor", value=float("nan"), as_file=True)
def test_config_json_fields(tmp_path, key, value, as_file):
    cfg = dict(V3, **{key: value})
    path = None
    if as_file:
        path = tmp_path / f"m{abs(hash((key, repr(value))))}" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(cfg, allow_nan=True))
    model = str(path) if as_file else cfg
    out = isolated(lambda: finite_frame(dsperf.decode(model, devices=["H800"], batch_sizes=[32])))
    if _model_field_ok(key, value):
        # Well typed and in range: a result, or a clean refusal (an inconsistent config, or an EP
        # the model's experts cannot fill).
        assert out == ("ok", True) or (out[0] == "error" and out[1] == "ValueError"), out
    else:
        # Named by its key and the file (or "config.json" for a dict), unless the file is not JSON
        # at all (NaN, Infinity), which names the file.
        assert_clean_error(out, str(path) if as_file else "config.json")
        if not (as_file and isinstance(value, float) and not math.isfinite(value)):
            assert key in out[2], out


def _nested(depth):
    return "[" * depth + "]" * depth


@FUZZ
@given(content=st.one_of(
    st.binary(max_size=200),
    st.integers(1000, 300000).map(_nested),
    st.sampled_from([json.dumps(V3).replace('"num_hidden_layers": 61', '"num_hidden_layers": NaN'),
                     json.dumps(V3).replace('"num_hidden_layers": 61', '"num_hidden_layers": -Infinity'),
                     json.dumps(V3).encode() + b"\xff", "[1, 2]", "", "null"])))
def test_broken_config_files_name_the_file(tmp_path, content):
    path = tmp_path / "config.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    out = isolated(lambda: dsperf.load_model(str(path)).name)
    assert_clean_error(out, str(path))


H800 = (dsperf.hardware._devices_dir() / "H800.toml").read_text()
DEVICE_FIELDS = ["sm_count", "discount", "mem_gb", "gpus_per_node", "fp16_tflops"]
toml_value = st.sampled_from(["nan", "inf", "-inf", "2147483648", "9223372036854775807", "132.7", "true", '"8"',
                              "1e308", "-1", "0", "[1]", "{a = 1}", "1e-320"])


@FUZZ
@given(field=st.sampled_from(DEVICE_FIELDS), value=toml_value)
def test_device_toml_fields(tmp_path, field, value):
    text, n = re.subn(rf"^{field} = .*$", f"{field} = {value}", H800, flags=re.M)
    assert n == 1
    path = tmp_path / "X1.toml"
    path.write_text(text)
    out = isolated(lambda: finite_frame(dsperf.decode(devices=[str(path)], batch_sizes=[32])))
    if out[0] == "ok":
        assert out[1] is True, out
    else:
        # Named by the file and the field, or (a valid but extreme value) a result the model refuses.
        assert_clean_error(out, "X1.toml", "the result")
        assert field in out[2] or "the result" in out[2], out


@FUZZ
@given(content=st.one_of(st.binary(max_size=200), st.integers(1000, 300000).map(lambda d: "a = " + _nested(d)),
                         st.just(H800.encode() + b"\n# \xff\xfe\n")))
def test_broken_device_files_name_the_file(tmp_path, content):
    path = tmp_path / "X2.toml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    assert_clean_error(isolated(lambda: dsperf.load_device(str(path)).name), str(path))


@FUZZ
@given(field=st.sampled_from(["sm_count", "gpus_per_node", "seed_decode_tp", "scaleout_gbps", "mem_gb", "name"]),
       value=anything)
@example(field="sm_count", value=132.7)      # was truncated to 132
def test_device_overrides(field, value):
    out = isolated(lambda: finite_frame(dsperf.decode(devices=[dsperf.load_device("H800", **{field: value})],
                                                      batch_sizes=[32])))
    kind = dsperf.hardware.SPEC_FIELDS[field]
    typed = isinstance(value, str) if kind is str else (is_int(value) if kind is int else is_real(value))
    if out[0] == "ok":
        assert out[1] is True and typed, (field, value, out)
    else:
        assert_clean_error(out, field)


# ---- kernel_cost ----------------------------------------------------------------------------------------
POINTS = {
    "linear": dict(m=16, n=64, k=64),
    "gate": dict(tokens=16, dim=64, experts=8, top_k=2),
    "experts_masked": dict(rows=16, active=4, dim=64, inter=32),
    "mla_decode": dict(keys=100, batch=2, q_len=1, heads=4),
    "mla_layer_prefill": dict(variant="A_CC", tokens=8, prefix=0, heads=4),
    "moe_layer": dict(tokens=8, dim=64, inter=32, experts=8, top_k=2, active=4, shared_inter=32),
}
PARAMS = [(f, k) for f, p in POINTS.items() for k in p if k != "variant"]


@FUZZ
@given(point=st.sampled_from(PARAMS), value=anything)
def test_kernel_cost_parameters(point, value):
    family, key = point
    params = dict(POINTS[family], **{key: value})
    out = isolated(lambda: kc.predict_ms(family, params, "H800"))
    if out[0] == "ok":
        assert is_int(value) and value >= 0 and math.isfinite(out[1]) and out[1] > 0, (params, out)
    else:
        assert_clean_error(out, key, key.split("_")[-1], "active_experts")


@FUZZ
@given(arg=st.sampled_from(["tokens", "hidden", "top_k", "experts", "ranks", "link_gbps", "latency_us", "fp8"]),
       value=anything)
@example(arg="top_k", value=2 ** 62)       # looped 2**62 times
def test_ep_exchange_ms(arg, value):
    kw = dict(tokens=64, ranks=4, link_gbps=50.0, latency_us=5.0)
    kw[arg] = value
    if arg == "top_k":
        kw["experts"] = 2 ** 20
    out = isolated(lambda: kc.ep_exchange_ms(**kw)["ms"])
    if out[0] == "ok":
        assert math.isfinite(out[1]) and out[1] >= 0, out
    else:
        assert_clean_error(out, arg, "experts must be", "hidden, top_k and ranks")


@FUZZ
@given(table=st.dictionaries(st.sampled_from(["linear", "gate", "mla_decode/bf16"]),
                             st.one_of(st.dictionaries(st.sampled_from(["compute", "memory", "overhead_us", "overlap"]),
                                                       anything, max_size=4), anything), max_size=3))
def test_efficiency_tables(table):
    out = isolated(lambda: kc.predict_ms("linear", dict(m=4, n=8, k=8), "H800", kc.efficiencies_from_dict(table)))
    if out[0] == "ok":
        assert math.isfinite(out[1]) and out[1] > 0, out
    else:
        assert_clean_error(out, "efficiency")


# ---- EPLB -------------------------------------------------------------------------------------------
count = st.one_of(st.integers(-3, 300), st.sampled_from([2 ** 20 + 1, 2 ** 31, 2 ** 63, 2 ** 64]), st.booleans(),
                  st.floats(allow_nan=True), st.none())


@FUZZ
@given(layers=st.integers(0, 3), experts=st.integers(1, 40), num_physical=count, num_gpus=count,
       num_nodes=st.one_of(st.just(1), count), num_groups=st.one_of(st.just(1), count))
@example(layers=0, experts=8, num_physical=2 ** 31, num_gpus=1, num_nodes=1, num_groups=1)  # 50 s, 10 GB before
def test_eplb_rebalance(layers, experts, num_physical, num_gpus, num_nodes, num_groups):
    load = np.arange(experts, dtype=np.float64) if layers == 0 else np.ones((layers, experts))

    def call():
        plan = dep.rebalance(load, num_physical, num_gpus=num_gpus, num_nodes=num_nodes, num_groups=num_groups)
        p2l = plan.phy2log.reshape(-1, plan.num_physical)
        cnt = plan.logcnt.reshape(-1, experts)
        ok = all(np.array_equal(np.bincount(row, minlength=experts), c) for row, c in zip(p2l, cnt))
        return ok and bool((cnt >= 1).all())

    out = isolated(call, timeout=20)
    if out[0] == "ok":
        assert out[1] is True, out
        assert all(is_int(v) and v >= 1 for v in (num_physical, num_gpus, num_nodes, num_groups))
    else:
        assert_clean_error(out, "num_physical", "num_gpus", "num_nodes", "num_groups", "policy")


@FUZZ
@given(api=st.sampled_from(["ep_strategies", "decode_batch_limits"]), ep=anything, redundant=anything,
       key=st.one_of(st.text(max_size=3), st.integers(0, 3)))
def test_ep_strategy_tables(api, ep, redundant, key):
    kw = dict(strategies={key: (ep, redundant)})
    if api == "decode_batch_limits":
        kw["devices"] = ["H800"]
    out = isolated(lambda: finite_frame(getattr(dsperf, api)(**kw)))
    if out[0] == "ok":
        assert out[1] is True and isinstance(key, str) and is_int(ep) and is_int(redundant), out
    else:
        assert_clean_error(out, "strategies", "ep (")


@FUZZ
@given(num_experts=count, tokens=st.one_of(count, st.integers(0, 2 ** 70)), alpha=anything)
def test_zipf_load(num_experts, tokens, alpha):
    out = isolated(lambda: float(dep.zipf_load(num_experts, tokens, alpha=alpha).sum()))
    if out[0] == "ok":
        assert out[1] == tokens, out
    else:
        assert_clean_error(out, "num_experts", "tokens", "alpha")


# ---- the CLI --------------------------------------------------------------------------------------------
def _cli(argv):
    """main(argv) in this process (the caller forks): (exit status, stderr lines)."""
    import contextlib
    import io

    from dsperf.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


CLI_FLAGS = {"--seq-len": "prefill", "--decode-len": "decode", "--kv-cache-hit": "prefill", "--tp": "prefill",
             "--dp": "prefill", "--ep": "decode", "--redundant-experts": "decode", "--batch-sizes": "decode",
             "--dispatch-nodes": "prefill"}
cli_value = st.one_of(st.sampled_from(["1e308", "inf", "-inf", "nan", "2147483648", "99999999999999999999", "-1",
                                       "1e300", "4.5", "abc", "", "1,nan"]),
                      st.floats(allow_nan=True, allow_infinity=True).map(repr),
                      st.integers(-(2 ** 70), 2 ** 70).map(str))


@settings(max_examples=30, deadline=None, derandomize=not RANDOM, database=None)
@given(flag=st.sampled_from(sorted(CLI_FLAGS)), value=cli_value)
def test_cli_numeric_flags(flag, value):
    out = isolated(lambda: _cli(["tables", "--sections", CLI_FLAGS[flag], f"{flag}={value}"]), timeout=60)
    assert out[0] == "ok", out
    code, stderr = out[1]
    if code == 0:
        v = float(value.split(",")[0])
        assert math.isfinite(v) and abs(v) <= MAX_TOKENS, (flag, value)
    else:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in stderr, stderr
        name = flag.lstrip("-").replace("-", "_")
        assert flag in lines[0] or name in lines[0] or "tp (" in lines[0] or "dp:" in lines[0], lines[0]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "dsperf.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, word", [
    (["tables", "--seq-len", "1e308"], "--seq-len"),
    (["tables", "--tp", "99999999999999999999"], "--tp"),
    (["tables", "--batch-sizes", "32,nan"], "--batch-sizes"),
])
def test_cli_entry_point_bounds(args, word):
    r = run_cli(*args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and word in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_cli_deeply_nested_config_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(_nested(200000))
    r = run_cli("tables", "--sections", "model", "--model", str(path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and str(path) in lines[0] and "Traceback" not in r.stderr, r.stderr
