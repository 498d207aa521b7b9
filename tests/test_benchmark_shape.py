"""A serving benchmark's workload in the simulator: lengths drawn as the benchmarks' random dataset
draws them (--random-range-ratio) and a prompt count (--num-prompts)."""
import math
import subprocess
import sys

import numpy as np
import pytest

from dsperf.serving import simulate

# A small H200 deployment: every run here takes well under a second.
SMALL = dict(ep=8, attn_tp=8, moe_tp=8, input_len=1000, output_len=50)


def test_fixed_lengths_are_the_default_and_draw_nothing():
    a = simulate("DeepSeek-V3", "H200", concurrency=4, duration_s=5, **SMALL)
    b = simulate("DeepSeek-V3", "H200", concurrency=4, duration_s=5, range_ratio=1.0, **SMALL)
    assert (a.records["input_tokens"] == 1000).all() and (a.records["output_tokens"] == 50).all()
    assert a.records.equals(b.records)


def test_drawn_lengths_span_the_benchmarks_range():
    r = simulate("DeepSeek-V3", "H200", concurrency=32, num_prompts=3000, range_ratio=0.8, **SMALL)
    inputs, outputs = r.records["input_tokens"].to_numpy(), r.records["output_tokens"].to_numpy()
    # benchmark_serving's sample_uniform: integers in [int(len x ratio), len], both ends included.
    assert inputs.min() == 800 and inputs.max() == 1000
    assert outputs.min() == 40 and outputs.max() == 50
    # Uniform: the mean is the middle of the range (3,000 draws: within 1.5 tokens of 900 at 4 sigma).
    assert abs(inputs.mean() - 900) < 1.5 * 4
    assert len(np.unique(outputs)) == 11


def test_a_prompt_count_ends_the_run_when_every_prompt_is_answered():
    closed = simulate("DeepSeek-V3", "H200", concurrency=8, num_prompts=40, range_ratio=0.8, **SMALL)
    assert len(closed.records) == 40 and closed.records["finished"].all()
    opened = simulate("DeepSeek-V3", "H200", rate=5.0, num_prompts=25, **SMALL)
    assert len(opened.records) == 25
    # A duration shorter than the prompts take still stops the arrivals first.
    cut = simulate("DeepSeek-V3", "H200", rate=5.0, num_prompts=1000, duration_s=2, **SMALL)
    assert 0 < len(cut.records) < 1000


def test_drawing_lengths_leaves_the_arrivals_of_a_seed_alone():
    fixed = simulate("DeepSeek-V3", "H200", rate=4.0, duration_s=10, seed=3, **SMALL)
    drawn = simulate("DeepSeek-V3", "H200", rate=4.0, duration_s=10, seed=3, range_ratio=0.5, **SMALL)
    assert np.array_equal(fixed.records["arrival_ms"], drawn.records["arrival_ms"])
    assert not np.array_equal(fixed.records["input_tokens"], drawn.records["input_tokens"])


def test_a_benchmarks_closed_loop_desynchronises_its_clients():
    # Fixed lengths keep a closed loop's clients in lock step: each prefill step takes them all, so
    # every request waits for the whole wave's prompts. Drawn lengths spread them out.
    kw = dict(concurrency=16, num_prompts=160, **SMALL)
    fixed = simulate("DeepSeek-V3", "H200", **kw).records["ttft_ms"]
    drawn = simulate("DeepSeek-V3", "H200", range_ratio=0.8, **kw).records["ttft_ms"]
    # Whole waves share one TTFT: a step's 8,192-token budget takes eight 1,000-token prompts at once.
    assert fixed.round(6).value_counts().min() >= 8
    assert drawn.round(6).nunique() > 40
    assert drawn.median() < fixed.median()


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, "most"])
def test_a_range_ratio_outside_0_1_is_named(bad):
    with pytest.raises((ValueError, TypeError), match="range_ratio"):
        simulate("DeepSeek-V3", "H200", concurrency=2, duration_s=1, range_ratio=bad, **SMALL)


@pytest.mark.parametrize("bad", [0, 2.5, -3, "ten"])
def test_a_prompt_count_that_is_not_a_positive_integer_is_named(bad):
    with pytest.raises((ValueError, TypeError), match="num_prompts"):
        simulate("DeepSeek-V3", "H200", concurrency=2, num_prompts=bad, **SMALL)


def test_a_trace_brings_its_own_lengths_and_requests():
    with pytest.raises(ValueError, match="range_ratio"):
        simulate("DeepSeek-V3", "H200", concurrency=2, trace="synthetic", range_ratio=0.8, **SMALL)
    with pytest.raises(ValueError, match="num_prompts"):
        simulate("DeepSeek-V3", "H200", concurrency=2, trace="synthetic", num_prompts=10, **SMALL)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dsperf.cli", "simulate", "--device", "H200", "--ep", "8",
                           "--attn-tp", "8", *args], capture_output=True, text=True)


def test_the_command_takes_both_flags_and_names_them_in_its_errors():
    out = _cli("--concurrency", "4", "--num-prompts", "12", "--range-ratio", "0.8", "--output-len", "20",
               "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 + 12
    bad = _cli("--concurrency", "4", "--range-ratio", "2")
    assert bad.returncode != 0 and "--range-ratio" in bad.stderr
    bad = _cli("--concurrency", "4", "--num-prompts", "0")
    assert bad.returncode != 0 and "--num-prompts" in bad.stderr


# SGLang's --scheduler-recv-interval (serving.simulate recv_interval).
def test_a_lone_request_is_received_at_once_whatever_the_interval():
    # An idle scheduler spins through its count: the interval costs a lone request nothing.
    runs = [simulate("DeepSeek-V3", "H200", concurrency=1, num_prompts=3, recv_interval=n, **SMALL) for n in (1, 30)]
    assert runs[0].records.equals(runs[1].records)


def test_under_load_new_requests_wait_for_the_receive_count():
    kw = dict(concurrency=16, num_prompts=160, range_ratio=0.8, **SMALL)
    runs = {n: simulate("DeepSeek-V3", "H200", recv_interval=n, **kw) for n in (1, 10, 30)}
    ttft = {n: r.records["ttft_ms"].median() for n, r in runs.items()}
    assert ttft[1] < ttft[10] < ttft[30]
    # A request arriving mid-count waits for the rest of it: between none and all of the interval's
    # decode steps, about half on the median.
    step = runs[1].records["tpot_ms"].median()
    for n in (10, 30):
        assert 0.2 * n * step < ttft[n] - ttft[1] < n * step


def test_the_interval_delays_only_requests_from_the_frontend():
    # Disaggregated: every prefill step counts the whole interval and the decode pool takes hand-offs
    # at once, so the runs are the same.
    kw = dict(concurrency=8, num_prompts=40, mode="disaggregated", prefill_ep=8, prefill_attn_tp=8,
              prefill_moe_tp=8, **SMALL)
    a = simulate("DeepSeek-V3", "H200", recv_interval=1, **kw)
    b = simulate("DeepSeek-V3", "H200", recv_interval=10, **kw)
    assert a.records.equals(b.records)


@pytest.mark.parametrize("bad", [0, 10 ** 6 + 1, 2.5, "ten"])
def test_a_receive_interval_outside_1_1000_is_named(bad):
    with pytest.raises((ValueError, TypeError), match="recv_interval"):
        simulate("DeepSeek-V3", "H200", concurrency=2, duration_s=1, recv_interval=bad, **SMALL)
    if isinstance(bad, int):
        out = _cli("--concurrency", "2", "--duration", "1", "--recv-interval", str(bad))
        assert out.returncode != 0 and "--recv-interval" in out.stderr


def test_an_interval_beyond_a_prompt_steps_weight_is_simulated_with_sglangs_weights():
    # SGLang's weights, declared once in C++ (serving_types.hpp): a decode step counts 1, a prompt
    # step 1000. An interval beyond 1000 (refused until the count read them) needs decode steps after
    # a prompt step too: with long outputs and staggered clients, requests are received at other
    # times than at 1000.
    from dsperf import _C
    assert (_C.serving.recv_weight_decode, _C.serving.recv_weight_prompt) == (1, 1000)  # scheduler_recv_skipper.py
    kw = dict(concurrency=2, num_prompts=8, range_ratio=0.5, output_len=3000,
              **{k: v for k, v in SMALL.items() if k != "output_len"})
    at, beyond = (simulate("DeepSeek-V3", "H200", recv_interval=n, **kw).records["ttft_ms"] for n in (1000, 2500))
    assert len(at) == len(beyond) == 8 and not np.allclose(at, beyond)
