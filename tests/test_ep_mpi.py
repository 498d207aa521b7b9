"""Expert parallelism over MPI: each test launches `mpirun -np N python -m mpi4py tests/ep_worker.py`
(or, for the abort-on-error and call-order tests, a plain `python tests/ep_worker.py`) and asserts on
the RESULT line rank 0 prints (or on how the job ended).

Skipped with the reason when mpirun or mpi4py is missing, unless DSPERF_REQUIRE_MPI=1 (CI sets it),
which turns a missing MPI into a failure.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsperf import ep

WORKER = Path(__file__).with_name("ep_worker.py")
EPS_BF16 = 2.0 ** -8
EPS_FP8 = 2.0 ** -4          # e4m3: 3 fraction bits


def _mpi_reason():
    if shutil.which("mpirun") is None:
        return "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    ok, why = ep.mpi_available()
    return None if ok else why


_REASON = _mpi_reason()
if _REASON and os.environ.get("DSPERF_REQUIRE_MPI") == "1":
    raise RuntimeError(f"DSPERF_REQUIRE_MPI=1 but MPI is unusable: {_REASON}")
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"EP tests need MPI: {_REASON}")


def run(np_, *args, timeout=120, plain=False, env_extra=None):
    """mpirun the worker; plain=True runs it as `python worker.py` (no `-m mpi4py` safety net)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", **(env_extra or {}))
    launcher = [] if plain else ["-m", "mpi4py"]
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", sys.executable, *launcher, str(WORKER), *map(str, args)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p, time.monotonic() - t0


def result(np_, *args, env_extra=None):
    p, _ = run(np_, *args, env_extra=env_extra)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"mpirun failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def check_layer(res, fp8):
    # Against the single-process composition of the same kernels (FP8-rounded expert input when
    # fp8): every element within the BF16 rounding of the combine partials, sum_k |w_k| |y_k| * 2^-8.
    assert res["max_excess"] <= 0, res
    # Against dsperf.kernels.moe_layer itself: within BF16 (or, with an FP8 payload, FP8) rounding.
    assert res["rel_err_vs_single"] <= (EPS_FP8 if fp8 else EPS_BF16), res


@pytest.mark.parametrize("np_", [2, 4])
@pytest.mark.parametrize("mode", ["normal", "low_latency"])
def test_dispatch_layouts_row_by_row(np_, mode):
    for skew in (0, 1):
        per_rank = result(np_, "layout", "--skew", skew, "--seed", np_)
        for r in per_rank:
            assert r["errors"] == []
        if skew:   # everything went to the first rank's experts; the others received nothing
            assert per_rank[0]["recv_rows"] > 0 and all(r["recv_rows"] == 0 for r in per_rank[1:])


CASES = [
    # (ranks, mode, fp8, overlap, eplb, tokens per rank, skew)
    (2, "normal", 0, 0, "none", "8", 0),
    (2, "low_latency", 1, 0, "none", "8", 0),
    (2, "normal", 1, 1, "global", "7,3", 1),
    (4, "normal", 1, 0, "none", "8", 0),
    (4, "normal", 0, 1, "hierarchical", "9,0,3,6", 1),
    (4, "low_latency", 0, 1, "none", "8", 0),
    (4, "low_latency", 1, 0, "global", "6", 1),
    (4, "normal", 0, 0, "none", "1,0,0,0", 0),          # a single token in total
    (4, "low_latency", 1, 1, "hierarchical", "0,0,1,0", 0),
]


@pytest.mark.parametrize("np_, mode, fp8, overlap, eplb, tokens, skew", CASES)
def test_ep_layer_equals_single_process(np_, mode, fp8, overlap, eplb, tokens, skew):
    res = result(np_, "layer", "--mode", mode, "--fp8", fp8, "--overlap", overlap, "--eplb", eplb,
                 "--tokens", tokens, "--skew", skew)
    check_layer(res, fp8)
    assert res["shape"] == [sum(res["tokens"]), 256]
    if skew and mode == "normal" and eplb == "none":
        assert 0 in res["rows_per_rank"]
    if eplb != "none":
        assert res["replicas"] is not None and sum(res["replicas"]) == 16 + 8


def test_skewed_routing_leaves_ranks_without_tokens():
    res = result(4, "layer", "--mode", "normal", "--tokens", "8", "--skew", "1")
    check_layer(res, 0)
    assert res["rows_per_rank"][0] == 4 * 8 * 4 and res["rows_per_rank"][1:] == [0, 0, 0]


@pytest.mark.parametrize("scenario, needle", [("bad_hidden", "hidden differs between ranks: rank 0 has 256, rank 1 has 128"),
                                              ("bad_experts", "num_experts differs between ranks")])
def test_mismatched_sizes_fail_on_every_rank(scenario, needle):
    per_rank = result(2, scenario)
    assert all(needle in r["error"] for r in per_rank)


@pytest.mark.parametrize("mode", ["normal", "low_latency"])
def test_bad_ids_fail_on_every_rank_and_the_comm_survives(mode):
    per_rank = result(4, "bad_ids", "--mode", mode)
    for r in per_rank:
        msg, ok_after = r["error"]
        assert msg.startswith("rank 1: topk_ids must lie in [0, num_experts = 16)") and ok_after


@pytest.mark.parametrize("mode, needle", [("normal", "rank 0: y must have shape"),
                                          ("per_token", "rank 0: y must have shape"),
                                          ("low_latency", "rank 0: topk_weights must have shape")])
def test_bad_combine_input_fails_on_every_rank(mode, needle):
    per_rank = result(2, "bad_combine", "--mode", mode)
    assert all(r["error"] and needle in r["error"] for r in per_rank)


def test_a_dying_rank_ends_the_job_with_an_error():
    p, elapsed = run(4, "die", "--timeout", 50)
    assert p.returncode != 0 and elapsed < 60
    assert "finished" not in p.stdout


def test_a_stuck_rank_trips_the_watchdog():
    p, elapsed = run(4, "stuck", "--timeout", 3, "--sleep", 40)
    assert p.returncode != 0 and elapsed < 30
    assert "no progress for 3 s" in p.stderr


def test_an_exception_on_one_rank_ends_a_plain_python_job():
    # No `-m mpi4py`: the excepthook EpComm installs aborts the job long before the 50 s watchdog.
    p, elapsed = run(2, "raise", "--timeout", 50, plain=True)
    assert p.returncode != 0 and elapsed < 20, (p.returncode, elapsed, p.stderr[-2000:])
    assert "rank 1 raises on purpose" in p.stderr and "aborting the MPI job" in p.stderr
    assert "finished" not in p.stdout


@pytest.mark.parametrize("np_, mode, needle", [
    (2, "normal", "calls out of order at call 1 on this communicator: rank 0 called dispatch(normal), "
                  "rank 1 called dispatch(low_latency)"),
    (4, "normal", "rank 0 called dispatch(normal), ranks 1, 2, 3 called dispatch(low_latency)"),
    (2, "per_token", "calls out of order at call 2 on this communicator: rank 0 called combine(normal), "
                     "rank 1 called dispatch(normal)"),
])
def test_ranks_in_different_calls_are_named_on_every_rank(tmp_path, np_, mode, needle):
    p, elapsed = run(np_, "out_of_order", "--mode", mode, "--timeout", 50, "--out", tmp_path, plain=True)
    for r in range(np_):
        f = tmp_path / f"rank{r}.txt"
        assert f.exists(), (r, p.stdout[-2000:], p.stderr[-2000:])
        text = f.read_text()
        assert text.startswith("dsperf.ep: ") and needle in text, (r, text)
    # Found at once, not by the 50 s watchdog; the re-raised error then aborts the job.
    assert p.returncode != 0 and elapsed < 20
    assert "no progress" not in p.stderr


# ---- the exchanges: windows on one node (the default here), the previous MPI_Alltoallv one ------
def test_the_default_exchange_on_one_node_is_the_window_one():
    per_rank = result(2, "inplace")
    assert all(r["exchange"] == "WindowEpComm" for r in per_rank)


@pytest.mark.parametrize("np_, mode, fp8, overlap, eplb, tokens, skew", [CASES[2], CASES[4], CASES[6]])
def test_previous_exchange_still_equals_single_process(np_, mode, fp8, overlap, eplb, tokens, skew):
    res = result(np_, "layer", "--mode", mode, "--fp8", fp8, "--overlap", overlap, "--eplb", eplb,
                 "--tokens", tokens, "--skew", skew, "--exchange", "alltoallv")
    check_layer(res, fp8)


@pytest.mark.parametrize("np_", [2, 4])
def test_alltoallv_exchange_layouts_row_by_row(np_):
    # The alltoallv exchange is dsperf.ep.routed over the MPI transport: the same layouts.
    for skew in (0, 1):
        for r in result(np_, "layout", "--skew", skew, "--seed", np_ + 20, "--exchange", "alltoallv"):
            assert r["errors"] == []


@pytest.mark.parametrize("mode", ["normal", "low_latency"])
def test_alltoallv_exchange_bad_ids_fail_on_every_rank(mode):
    for r in result(4, "bad_ids", "--mode", mode, "--exchange", "alltoallv"):
        msg, ok_after = r["error"]
        assert msg.startswith("rank 1: topk_ids must lie in [0, num_experts = 16)") and ok_after


@pytest.mark.parametrize("mode, needle", [("normal", "rank 0 called dispatch(normal), rank 1 called dispatch(low_latency)"),
                                          ("per_token", "rank 0 called combine(normal), rank 1 called dispatch(normal)")])
def test_alltoallv_exchange_names_ranks_in_different_calls(tmp_path, mode, needle):
    p, elapsed = run(2, "out_of_order", "--mode", mode, "--timeout", 50, "--out", tmp_path, "--exchange", "alltoallv",
                     plain=True)
    for r in range(2):
        text = (tmp_path / f"rank{r}.txt").read_text()
        assert text.startswith("dsperf.ep: calls out of order") and needle in text, (r, text)
    assert p.returncode != 0 and elapsed < 20 and "no progress" not in p.stderr


@pytest.mark.parametrize("np_", [2, 4])
def test_outputs_in_the_combine_buffer_equal_copied_ones(np_):
    per_rank = result(np_, "inplace", "--seed", np_)
    for r in per_rank:
        assert r["errors"] == [], r
        assert r["error"].startswith("rank 0: out must be a writable C-contiguous float32 array"), r


@pytest.mark.parametrize("exchange, cls", [("window", "WindowEpComm"), ("alltoallv", "AlltoallvEpComm")])
def test_both_exchanges_share_the_combine_checks_and_out(exchange, cls):
    per_rank = result(2, "combine_args", "--seed", 3, "--exchange", exchange)
    assert per_rank[0]["rows"] > 0, "rank 0 received no rows: the short-y check would not be exercised"
    for r in per_rank:
        assert r["exchange"] == cls and r["errors"] == [], r
        assert r["error"] and r["error"].startswith("rank 0: y must have the"), r


def test_an_error_inside_a_window_exchange_invalidates_the_windows():
    per_rank = result(2, "fault", "--mode", "normal")
    for r in per_rank:
        assert "fails inside combine on purpose" in r["first"]
        assert r["after"] and "invalidated by an earlier error" in r["after"], r


def test_an_uncaught_error_inside_a_window_exchange_ends_the_job_naming_the_rank():
    p, elapsed = run(4, "fault", "--mode", "per_token", "--timeout", 50, plain=True)
    assert p.returncode != 0 and elapsed < 60, (p.returncode, elapsed, p.stderr[-2000:])
    assert "rank 1 fails inside combine on purpose" in p.stderr
    assert "dsperf.ep: rank 1: uncaught RuntimeError; aborting the MPI job" in p.stderr


def test_a_stuck_peer_of_a_window_exchange_is_named():
    p, elapsed = run(4, "stuck", "--timeout", 3, "--sleep", 40)
    assert p.returncode != 0 and elapsed < 30
    assert "while waiting for rank 1 to reach dispatch(normal)" in p.stderr, p.stderr[-2000:]


# ---- hierarchical: pretend nodes on this machine (DSPERF_EP_NODES) ------------------------------
NODES2 = {"DSPERF_EP_NODES": "2"}


@pytest.mark.parametrize("np_", [2, 4])
def test_hierarchical_dispatch_layouts_row_by_row(np_):
    for skew in (0, 1):
        per_rank = result(np_, "layout", "--skew", skew, "--seed", np_ + 10, env_extra=NODES2)
        for r in per_rank:
            assert r["errors"] == []


@pytest.mark.parametrize("np_, mode, fp8, overlap, eplb, tokens, skew", [CASES[0], CASES[2], CASES[4], CASES[5],
                                                                        CASES[6], CASES[8]])
def test_hierarchical_ep_layer_equals_single_process(np_, mode, fp8, overlap, eplb, tokens, skew):
    res = result(np_, "layer", "--mode", mode, "--fp8", fp8, "--overlap", overlap, "--eplb", eplb,
                 "--tokens", tokens, "--skew", skew, "--exchange", "hierarchical", env_extra=NODES2)
    check_layer(res, fp8)


@pytest.mark.parametrize("mode", ["normal", "low_latency"])
def test_hierarchical_bad_ids_fail_on_every_rank(mode):
    per_rank = result(4, "bad_ids", "--mode", mode, env_extra=NODES2)
    for r in per_rank:
        msg, ok_after = r["error"]
        assert msg.startswith("rank 1: topk_ids must lie in [0, num_experts = 16)") and ok_after


def test_hierarchical_bad_combine_input_fails_on_every_rank():
    per_rank = result(4, "bad_combine", "--mode", "per_token", env_extra=NODES2)
    assert all(r["error"] and "rank 0: y must have shape" in r["error"] for r in per_rank)
