"""The memory share a serving stack gives weights and the KV cache (Deployment::mem_fraction: SGLang's
--mem-fraction-static), from the step model through the simulator and its command line."""
import math

import pytest

from dsperf import _C
from dsperf.model import grounded
from dsperf.serving import simulate

# A layout whose cache is tight: DeepSeek-V3 in FP8 on four B200s leaves little room beside the weights.
TIGHT = dict(batch=8, kv_len=9216, ep=4, attn_tp=4, moe_tp=4, kv_fp8=True)


def test_default_is_the_assumed_reserve_and_the_batch_limit_follows_the_share():
    assert _C.step_model.Deployment().mem_fraction == pytest.approx(_C.step_model.memory_reserve)
    default = grounded.decode("DeepSeek-V3", "B200", **TIGHT)
    same = grounded.decode("DeepSeek-V3", "B200", **TIGHT, mem_fraction=_C.step_model.memory_reserve)
    more = grounded.decode("DeepSeek-V3", "B200", **TIGHT, mem_fraction=0.95)
    less = grounded.decode("DeepSeek-V3", "B200", **TIGHT, mem_fraction=0.82)
    assert same["batch_limit"] == default["batch_limit"]
    assert less["batch_limit"] < default["batch_limit"] < more["batch_limit"]
    # The free bytes are the share of memory less the weights: 5% more memory, 5% of 180 GiB more cache.
    per_request_gib = default["kv_bytes_per_token"] * TIGHT["kv_len"] * TIGHT["attn_tp"] / 2 ** 30
    gained = (more["batch_limit"] - default["batch_limit"]) * per_request_gib
    assert gained == pytest.approx(0.05 * 180, rel=1e-6)
    assert not default["fits_memory"] and more["fits_memory"]
    assert less["batch_limit"] == 0  # the weights alone exceed 82% of the memory
    assert default["step_ms"] == more["step_ms"]  # the share sets capacity, not speed


@pytest.mark.parametrize("bad", [0.0, 0.01, 1.5, math.nan, "half"])
def test_a_share_outside_its_range_is_named(bad):
    with pytest.raises((ValueError, TypeError), match="mem_fraction"):
        grounded.decode("DeepSeek-V3", "B200", **TIGHT, mem_fraction=bad)
    with pytest.raises((ValueError, TypeError), match="mem_fraction"):
        simulate("DeepSeek-V3", "B200", concurrency=2, duration_s=5, ep=4, attn_tp=4, moe_tp=4, mem_fraction=bad)


def test_the_simulator_queues_clients_the_cache_cannot_hold():
    # 32 clients of 8K prompts on four B200s (a TP4 rank holds its group's whole cache): at the assumed 0.9 the
    # 5.3 GiB left beside the weights hold about 140K tokens, 16 of the clients; at 0.95, 14 GiB hold them all.
    # The rest of the former wait for caches to free up.
    kw = dict(concurrency=32, input_len=8192, output_len=256, duration_s=60, mode="aggregated", ep=4, attn_tp=4,
              moe_tp=4, overlap="none", kv_fp8=True)
    tight = simulate("DeepSeek-V3", "B200", **kw).summary()
    roomy = simulate("DeepSeek-V3", "B200", **kw, mem_fraction=0.95).summary()
    assert tight["ttft_p50_ms"] > 1.5 * roomy["ttft_p50_ms"]


@pytest.mark.parametrize("command", [["simulate", "--device", "B200", "--concurrency", "2"],
                                     ["predict", "--device", "B200", "--ep", "8"],
                                     ["explore", "--devices", "B200"]])
def test_the_command_line_names_its_flag(command):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dsperf.cli", *command, "--mem-fraction", "2"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "--mem-fraction must be <= 1" in out.stderr, out.stderr


def test_predict_reads_the_share():
    import re
    import subprocess
    import sys

    def limit(*extra):
        out = subprocess.run([sys.executable, "-m", "dsperf.cli", "predict", "--device", "B200", "--ep", "4",
                              "--attn-tp", "4", "--batch", "8", "--kv-len", "9216", "--kv-fp8", *extra],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return re.search(r"memory holds ([0-9.]+) requests per GPU at this context \((fits|does NOT fit)", out.stdout)

    assert limit().groups() == ("4", "does NOT fit") and limit("--mem-fraction", "0.95").groups() == ("10", "fits")


# The explorer: the same share sets each layout's batch limit (decode grid, prefill options, AFD rows).
EXPLORE = dict(ep=(4,), attn_tp=(4,), batch=(8, 32), mtp=((0, 0.0),), kv_fp8=(True,), overlap=("none",),
               isl=8192, osl=1024, prefill_ep=(8,))


def test_explore_reads_the_share():
    from dsperf.model import explore

    default = explore.search("DeepSeek-V3", ["B200"], **EXPLORE)
    assumed = explore.search("DeepSeek-V3", ["B200"], mem_fraction=_C.step_model.memory_reserve, **EXPLORE)
    roomy = explore.search("DeepSeek-V3", ["B200"], mem_fraction=0.95, **EXPLORE)
    assert default.equals(assumed)
    assert (roomy["batch_limit"] > default["batch_limit"]).all()
    # The grid's limit is the step model's at the same share and layout.
    one = grounded.decode("DeepSeek-V3", "B200", batch=8, kv_len=8192 + 512, ep=4, attn_tp=4, kv_fp8=True,
                          overlap="none", mem_fraction=0.95)
    assert roomy["batch_limit"].iloc[0] == pytest.approx(one["batch_limit"])
    assert default["tpot_ms"].equals(roomy["tpot_ms"])  # capacity, not speed


def test_explore_afd_rows_read_the_share():
    from dsperf.model import explore

    kw = dict(EXPLORE, afd=True, afd_attn_gpus=(4,), afd_micro_batches=(2,))
    afd = lambda df: df[df["kind"] == "afd"]["batch_limit"].to_numpy()  # noqa: E731
    tight = afd(explore.search("DeepSeek-V3", ["B200"], mem_fraction=0.7, **kw))
    roomy = afd(explore.search("DeepSeek-V3", ["B200"], mem_fraction=0.95, **kw))
    assert len(tight) and (roomy > tight).all()


@pytest.mark.parametrize("bad", [0.01, 1.5, math.nan, "half"])
def test_explore_names_a_bad_share(bad):
    from dsperf.model import explore

    with pytest.raises((ValueError, TypeError), match="mem_fraction"):
        explore.search("DeepSeek-V3", ["B200"], mem_fraction=bad, **EXPLORE)
