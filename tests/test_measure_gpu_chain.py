"""measure-gpu --chain's pure parts: the step's layers and the figures derived from its timings
(the GPU parts run on a lent GPU: docs/VALIDATION_GPU_MEASURED.md)."""
import math
import types

import pytest

from dsperf.predict import measure_gpu, measure_gpu_chain as C


def _call(name, n):
    return {"kernel": name, "family": "gemm_fp8", "calls_per_step": n}


def test_layer_plan_runs_each_call_as_often_as_the_step_does():
    calls = [_call("attn", 61.0), _call("moe", 58.0), _call("dense", 3.0), _call("head", 1.0), _call("never", 0.0)]
    plan = C.layer_plan(calls)
    assert len(plan) == 61
    counts = [sum(i in layer for layer in plan) for i in range(len(calls))]
    assert counts == [61, 58, 3, 1, 0]
    assert plan[0] == [0, 1, 2, 3] and plan[-1] == [0]   # listed order kept inside a layer


def test_chain_summary_gap_is_graph_minus_kernels_alone_per_kernel():
    plan = [[0, 1], [0, 1], [0]]
    alone = {0: 10.0, 1: 20.0}   # us
    kernels = {0: 1, 1: 2}
    s = C.chain_summary(alone, kernels, plan, graph_us=80.0, eager_us=200.0, eager_host_us=160.0)
    assert s["calls"] == 5 and s["kernels"] == 7
    assert s["alone_ms"] == pytest.approx(0.07)
    assert s["graph_gap_us"] == pytest.approx((80.0 - 70.0) / 7)
    assert s["eager_launch_us"] == pytest.approx(160.0 / 7)
    assert s["graph_over_alone"] == pytest.approx(80.0 / 70.0)


def test_chain_summary_leaves_out_calls_without_a_timing():
    s = C.chain_summary({0: 10.0}, {0: 1}, [[0, 1]], graph_us=12.0, eager_us=0.0, eager_host_us=0.0)
    assert s["calls"] == 1 and s["graph_gap_us"] == pytest.approx(2.0)
    empty = C.chain_summary({}, {}, [[0]], graph_us=1.0, eager_us=1.0, eager_host_us=1.0)
    assert math.isnan(empty["graph_gap_us"])


def test_chain_without_a_gpu_says_so_and_measures_nothing():
    printed = []
    args = types.SimpleNamespace(chain="trtllm_h200_min_latency", dry_run=False, out=None, verbose=False)
    assert C.run_chain(args, "H200", 5, None, None, printed.append) == 0
    assert "1206 calls over 61 layers" in printed[0] and "Nothing measured" in printed[0]


def test_chain_names_an_unknown_point():
    args = types.SimpleNamespace(chain="no_such_point", dry_run=True, out=None, verbose=False)
    with pytest.raises(ValueError, match="--chain: no validation point 'no_such_point'"):
        C.run_chain(args, "H200", 5, None, None, print)


def test_the_cli_offers_chain():
    import argparse
    parser = argparse.ArgumentParser()
    measure_gpu.add_parser(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["measure-gpu", "--chain", "p"]).chain == "p"


class _FakeSampler:
    """ClockSampler's interface on a fake clock: each now() advances 0.5 s; a sample per replay."""
    available = True

    def __init__(self):
        self.t, self.samples = 0.0, []

    def now(self):
        self.t += 0.5
        self.samples.append((self.t, (1500.0 + self.t, 1980.0, 690.0, 700.0)))
        return self.t

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def summary(self, after_s=0.0):
        late = [v for t, v in self.samples if t >= after_s]
        import statistics
        return (statistics.median(v[0] for v in late), 1980.0, 690.0, 700.0, len(late)) if late else None


class _FakeEvent:
    def __init__(self, enable_timing=True):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 9.9


def test_clock_under_replay_reads_the_second_half():
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=_FakeEvent))
    replays = []
    graph = types.SimpleNamespace(replay=lambda: replays.append(1))
    c = C.clock_under_replay(torch, graph, 4.0, _FakeSampler())
    assert replays and c["replays"] == len(replays)
    assert c["sm_mhz"] > 1500.0 + 2.0 and c["ratio"] == pytest.approx(c["sm_mhz"] / 1980.0)
    assert c["replay_ms"] == pytest.approx(9.9) and c["power_limit_w"] == 700.0


def test_clock_under_replay_without_nvidia_smi_is_empty():
    sampler = types.SimpleNamespace(available=False)
    assert C.clock_under_replay(None, None, 4.0, sampler) == {}


def test_chain_refuses_a_bad_clock_time():
    args = types.SimpleNamespace(chain="trtllm_h200_min_latency", dry_run=False, out=None, verbose=False,
                                 clock_seconds=-1.0)
    fake_timer = lambda: None  # noqa: E731 - never reached: the flag is checked first
    with pytest.raises(ValueError, match="--clock-seconds"):
        C.run_chain(args, "H200", 5, types.SimpleNamespace(), fake_timer, print)


@pytest.mark.parametrize("extra, match", [(["--step", "trtllm_h200_min_latency"], "--chain and --step"),
                                          (["--clock-seconds", "5"], "needs --chain")])
def test_chain_flags_that_do_not_go_together_are_refused(extra, match):
    import argparse
    parser = argparse.ArgumentParser()
    measure_gpu.add_parser(parser.add_subparsers(dest="command"))
    argv = ["measure-gpu", "--dry-run"] + (["--chain", "trtllm_h200_min_latency"] if "--step" in extra else []) + extra
    with pytest.raises(ValueError, match=match):
        measure_gpu.run_command(parser.parse_args(argv), timer_factory=lambda: None, print_fn=lambda s: None)
