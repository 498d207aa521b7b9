"""Fuzzing every public call of dsperf.kernels with hypothesis: bad input gives ValueError or
TypeError naming the argument, NaN and Inf come out where dsperf.reference has them, and nothing
crashes or hangs.

Every case runs in its own forked process (benchmarks/fuzz_kernels_census.py --serve, a fork
server that imports dsperf but never runs a kernel itself, as libgomp's threads do not survive a
fork), so a crash or a hang fails the case instead of the test run. The census script runs the
whole fixed catalogue and counts outcomes per class; here hypothesis samples that catalogue and
draws its own invalid values (integers past int64, indices past int32, NaN at any position, ...).
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CENSUS = ROOT / "benchmarks" / "fuzz_kernels_census.py"
GOOD = ("clean error", "correct result")
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)

_spec = importlib.util.spec_from_file_location("fuzz_kernels_census", CENSUS)
census = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = census  # dataclasses look their module up there
_spec.loader.exec_module(census)
FUNCTIONS = census.functions()


@pytest.fixture(scope="module")
def server():
    """The fork server: one JSON case per line in, [class, detail, name] per line out."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__import__("dsperf").__file__).parents[1])] +
                                        env.get("PYTHONPATH", "").split(os.pathsep))
    proc = subprocess.Popen([sys.executable, str(CENSUS), "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)

    def run(spec):
        proc.stdin.write(json.dumps(spec) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, f"the fork server died on {spec}"
        return json.loads(line)
    yield run
    proc.stdin.close()
    proc.wait(timeout=30)


def check(server, spec):
    cls, detail, name = server(spec)
    assert cls in GOOD, f"{cls}: {name}: {detail}"


def _args(kind, pred=lambda spec: True):
    return [(fn.name, arg, spec) for fn in FUNCTIONS for arg, spec in fn.args.items() if spec.kind == kind and pred(spec)]


# ---- the fixed catalogue, sampled ----------------------------------------------------------------
@pytest.fixture(scope="module")
def catalogue(server):
    # Listed by the server: listing runs kernels in a fork, and this process may have run OpenMP.
    return server("list")


def test_catalogue_covers_every_public_function(catalogue):
    from dsperf import kernels
    public = {n for n in dir(kernels) if not n.startswith("_") and callable(getattr(kernels, n))
              and getattr(getattr(kernels, n), "__module__", "") == "dsperf.kernels"}
    covered = {spec["fn"].split("[")[0] for spec in catalogue}
    assert public - covered == set()
    assert len(catalogue) > 2000


@settings(FUZZ, max_examples=250)
@given(data=st.data())
def test_catalogue_sample(server, catalogue, data):
    spec = data.draw(st.sampled_from(catalogue))
    check(server, {"fn": spec["fn"], "index": spec["index"]})


# ---- drawn invalid values ------------------------------------------------------------------------
def _bad_ints(spec):
    big = st.integers(min_value=2 ** 63, max_value=2 ** 200)
    wrong_type = st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3), st.none())
    low = st.integers(min_value=-2 ** 70, max_value=spec.minimum - 1) if spec.minimum is not None else st.nothing()
    return st.one_of(big, wrong_type, low)


def _bad_reals(spec):
    f32_max = 3.4028234663852886e38
    out = [st.booleans(), st.text(max_size=3), st.none(), st.sampled_from([float("nan"), float("inf"), float("-inf")]),
           st.floats(min_value=f32_max * 1.01, allow_infinity=False), st.floats(max_value=-f32_max * 1.01, allow_infinity=False)]
    if spec.positive:
        out += [st.floats(max_value=0.0, allow_nan=False, allow_infinity=False), st.floats(min_value=0.0, max_value=1e-46)]
    elif spec.minimum is not None:
        out.append(st.floats(max_value=spec.minimum, exclude_max=True, allow_nan=False, allow_infinity=False))
    return st.one_of(*out)


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_drawn_integer_arguments(server, data):
    fn, arg, spec = data.draw(st.sampled_from(_args("int")))
    check(server, {"fn": fn, "arg": arg, "how": "scalar", "value": data.draw(_bad_ints(spec))})


@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_drawn_real_arguments(server, data):
    fn, arg, spec = data.draw(st.sampled_from(_args("real")))
    check(server, {"fn": fn, "arg": arg, "how": "scalar", "value": data.draw(_bad_reals(spec))})


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_drawn_out_of_range_indices(server, data):
    """int64 indices, counts and positions outside their range (past int32 included) are refused
    naming the argument: never narrowed first into a valid-looking index."""
    fn, arg, spec = data.draw(st.sampled_from(_args("ids")))
    lo, hi = (0, spec.bound - 1) if spec.bound is not None else (-2 ** 31, 2 ** 31 - 1)
    value = data.draw(st.one_of(st.integers(min_value=-2 ** 63, max_value=lo - 1),
                                st.integers(min_value=hi + 1, max_value=2 ** 63 - 1),
                                st.sampled_from([2 ** 32 + lo, 2 ** 32 + hi, lo - 2 ** 32])))
    check(server, {"fn": fn, "arg": arg, "how": "id", "value": value})


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_drawn_nonfinite_inputs(server, data):
    """NaN or Inf anywhere in the data: non-finite outputs exactly where the reference has them."""
    fn, arg, _ = data.draw(st.sampled_from(_args("array", lambda spec: spec.nan)))
    where = data.draw(st.floats(min_value=0, max_value=1, exclude_max=True))
    value = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    check(server, {"fn": fn, "arg": arg, "how": "nan-at", "value": [where, value]})


# ---- the harness itself ----------------------------------------------------------------------------
def test_harness_sees_crashes_and_hangs():
    """A crash and a hang in a case are classified, not suffered (the classes the census counts).
    The forked children here run no kernel (this process may have run OpenMP regions)."""
    import signal
    import time
    assert census._in_child(lambda: os.kill(os.getpid(), signal.SIGSEGV), 5)[1][0] == "crash"
    assert census._in_child(lambda: time.sleep(30), 1)[1][0] == "hang"
    assert census._in_child(lambda: os._exit(3), 5)[1][0] == "crash"
    assert census._in_child(lambda: ["clean error", "x"], 5) == (["clean error", "x"], None)
