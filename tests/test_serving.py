"""The serving simulator (dsperf.serving, csrc/serving): checks that can fail against queueing
identities and the grounded model, determinism, and bad input."""
import gzip
import json
import math

import numpy as np
import pandas as pd
import pytest

from dsperf import serving
from dsperf.cli import main as cli_main
from dsperf.model import grounded

# One H200 node (EP8): the weights fit with room for the KV cache (on H800s EP8 does not fit).
SMALL_LAYOUT = dict(device="H200", ep=8)
SMALL = dict(SMALL_LAYOUT, mode="aggregated")


def _write_trace(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def test_littles_law_over_a_steady_window():
    # Mean number in the system (the simulator's own time series) = arrival rate x mean E2E.
    r = serving.simulate(rate=4.0, duration_s=400, input_len=512, output_len=48, seed=3, **SMALL)
    assert not r.info["overloaded"]
    lo, hi = 100e3, 300e3
    s = r.series
    t = s["time_ms"].to_numpy()
    n = s["in_system"].to_numpy()
    # The count holds from one sample to the next: integrate the step function over [lo, hi].
    edges = np.clip(np.append(t, t[-1]), lo, hi)
    mean_in_system = float((n * np.diff(edges)).sum() / (hi - lo))
    rec = r.records
    window = rec[(rec["arrival_ms"] >= lo) & (rec["arrival_ms"] < hi)]
    rate_per_ms = len(window) / (hi - lo)
    little = rate_per_ms * window["e2e_ms"].mean()
    assert mean_in_system == pytest.approx(little, rel=0.02)
    assert mean_in_system > 1  # a window with queueing, not an empty system


@pytest.mark.parametrize("output_len", [128, 512])
def test_tpot_equals_the_grounded_decode_step(output_len):
    # Disaggregated, closed loop, fixed lengths: every wave's prompts are computed in one prefill
    # step and reach the decode ranks together, so each decode step holds the same batch and no
    # prompt chunk. TPOT then is the grounded model's decode step at that batch and the mean context.
    conc, ranks, isl = 64, 8, 1024
    r = serving.simulate(concurrency=conc, duration_s=5, input_len=isl, output_len=output_len,
                         mode="disaggregated", device="H200", ep=ranks, prefill_ep=8)
    rec = r.records[r.records["finished"]]
    assert len(rec) >= conc
    assert (rec.groupby("decode_rank").size() > 0).all()
    step = grounded.decode("DeepSeek-V3", "H200", batch=conc // ranks, kv_len=isl + (output_len - 2) / 2,
                           ep=ranks)["step_ms"]
    assert rec["tpot_ms"].to_numpy() == pytest.approx(step, rel=0.01)


def test_one_prompt_on_an_idle_dp_group_prices_the_experts_at_the_group_mean():
    # One client on an EP8 group with DP attention: its prompt is on one rank, the other seven are
    # idle. The experts serve the group's tokens (one prompt's, spread over 8 GPUs), the attention
    # the rank's own: TTFT is the prefill step with routed_share 1/8, not the step of 8 prompts.
    isl = 4096
    r = serving.simulate(concurrency=1, duration_s=1, input_len=isl, output_len=2, mode="aggregated",
                         device="H200", ep=8, seed=0)
    ttft = r.records["ttft_ms"].to_numpy()

    def step(share):
        dep = grounded._deployment("prefill", attn_tp=1, ep=8, redundant_experts=0, tokens=isl, prompt_len=isl)
        dep.routed_share = share
        return grounded._run("DeepSeek-V3", "H200", dep, grounded.DEFAULT_EFFICIENCY)["step_ms"]

    assert ttft == pytest.approx(step(1 / 8), rel=0.02)   # the pricer's geometric buckets
    assert (ttft < 0.8 * step(1.0)).all()


def test_zero_prefix_hits_change_nothing(tmp_path):
    rng = np.random.default_rng(0)
    rows, next_hash = [], 0
    for i in range(300):
        n_in = int(rng.integers(600, 3000))
        blocks = -(-n_in // 512)
        rows.append({"timestamp": i * 150, "input_length": n_in, "output_length": int(rng.integers(2, 60)),
                     "hash_ids": list(range(next_hash, next_hash + blocks))})
        next_hash += blocks
    path = _write_trace(tmp_path / "unique.jsonl", rows)
    runs = [serving.simulate(trace=str(path), prefix_cache=cache, routing=routing, **SMALL).records
            for cache, routing in ((True, "prefix_aware"), (False, "least_loaded"), (True, "least_loaded"))]
    assert runs[0]["cached_tokens"].sum() == 0
    pd.testing.assert_frame_equal(runs[0], runs[1])
    pd.testing.assert_frame_equal(runs[1], runs[2])
    # The control: the same requests sharing one long prefix do hit, and their prompts start sooner.
    for r in rows:
        r["hash_ids"] = list(range(-(-r["input_length"] // 512)))
    shared = _write_trace(tmp_path / "shared.jsonl", rows)
    hit = serving.simulate(trace=str(shared), routing="prefix_aware", **SMALL).records
    miss = serving.simulate(trace=str(shared), prefix_cache=False, **SMALL).records
    assert hit["cached_tokens"].sum() > 0
    assert hit["ttft_ms"].mean() < miss["ttft_ms"].mean()


def test_fixed_seed_gives_identical_records():
    kw = dict(rate=6.0, arrival="gamma", cv=3.0, duration_s=40, mtp=2, mtp_accepted=1.2, **SMALL)
    a, b = serving.simulate(seed=7, **kw), serving.simulate(seed=7, **kw)
    pd.testing.assert_frame_equal(a.records, b.records)
    np.testing.assert_array_equal(a.itl_ms, b.itl_ms)
    c = serving.simulate(seed=8, **kw)
    assert not a.records["arrival_ms"].equals(c.records["arrival_ms"])


def test_mtp_acceptance_is_drawn_at_its_mean():
    r = serving.simulate(concurrency=16, duration_s=20, output_len=400, mtp=1, mtp_accepted=0.7, **SMALL)
    # Tokens per decode emission: 1 + accepted drafts; the mean over many emissions is 1.7.
    rec = r.records[r.records["finished"]]
    emissions = len(r.itl_ms)
    tokens = int((rec["output_tokens"] - 1).sum())
    assert tokens / emissions == pytest.approx(1.7, rel=0.03)


def test_gaps_are_kept_as_distinct_values_with_counts_and_read_exactly():
    r = serving.simulate(concurrency=16, duration_s=20, output_len=400, mtp=1, mtp_accepted=0.7, **SMALL)
    v, n = r.itl_values_ms, r.itl_counts
    assert len(v) == len(n) > 1 and (np.diff(v) > 0).all() and (n >= 1).all()
    # Far fewer distinct gaps than gaps: one rank's decode step gives its requests one gap.
    assert len(v) * 10 < n.sum() == len(r.itl_ms)
    expanded = r.itl_ms
    for p in (50, 90, 99):
        assert r.percentiles().loc["itl_ms", f"p{p}"] == pytest.approx(float(np.percentile(expanded, p)), rel=1e-6)


def test_counted_percentile_is_numpys_on_the_repeated_sample():
    from dsperf.serving.result import counted_percentile

    rng = np.random.default_rng(3)
    for size in (1, 2, 7, 500):
        x = rng.choice(np.float32([0.5, 3, 7.25, 40]), size)
        values, counts = np.unique(x, return_counts=True)
        for q in (0, 37.5, 50, 90, 99, 100):
            assert counted_percentile(values, counts, q) == pytest.approx(float(np.percentile(x, q)), rel=1e-6)
    assert math.isnan(counted_percentile(np.zeros(0, np.float32), np.zeros(0, np.int64), 50))
    assert math.isnan(counted_percentile(np.float32([1, np.nan]), np.int64([1, 2]), 50))


@pytest.mark.parametrize("values,counts,q,match", [
    ([1.0, 2.0], [1, 1], 101, "q must be <= 100"),
    ([1.0, 2.0], [1, 1], float("nan"), "q must be finite"),
    ([1.0, 2.0], [1], 50, "values and counts must be 1-D and of one length"),
    ([[1.0, 2.0]], [[1, 1]], 50, "values and counts must be 1-D"),
    ([1.0, 2.0], [1, 0], 50, "counts must be integers >= 1"),
    ([1.0, 2.0], [1.0, 1.0], 50, "counts must be integers"),
    ([2.0, 1.0], [1, 1], 50, "values must be distinct and ascending"),
])
def test_counted_percentile_names_a_bad_argument(values, counts, q, match):
    from dsperf.serving.result import counted_percentile

    with pytest.raises(ValueError, match=match):
        counted_percentile(np.asarray(values), np.asarray(counts), q)
    with pytest.raises(TypeError, match="values must hold floats"):
        counted_percentile(np.int64([1, 2]), np.int64([1, 1]), 50)


def test_kv_preemption_recomputes_and_finishes():
    # A small cache (max_batch unlimited, long outputs) forces preemptions; every request still ends.
    r = serving.simulate(concurrency=600, duration_s=1, input_len=4000, output_len=3000,
                         max_num_tokens=16384, **SMALL)
    assert r.records["finished"].all()
    assert r.records["preemptions"].sum() > 0


def test_a_closed_loop_larger_than_the_waiting_guard_is_served_not_stopped():
    # Every client of a closed loop arrives at the start; its queues never hold more than its clients,
    # so a waiting guard below the concurrency must not stop it (it did, at once, as "overloaded").
    r = serving.simulate(concurrency=64, duration_s=1, input_len=256, output_len=16, max_waiting=10, **SMALL)
    assert not r.info["overloaded"] and r.info["stop_reason"] == "drained"
    assert r.records["finished"].all() and len(r.records) >= 64
    # An open loop past the guard still stops there.
    burst = serving.simulate(rate=1e5, duration_s=1, input_len=256, output_len=16, max_waiting=10, **SMALL)
    assert burst.info["overloaded"] and burst.info["stop_reason"] == "max_waiting"


def test_percentiles_and_csv(tmp_path):
    r = serving.simulate(rate=3.0, duration_s=30, sla_ttft_ms=5000, sla_tpot_ms=200, **SMALL)
    p = r.percentiles()
    assert list(p.columns) == ["p50", "p90", "p99"]
    assert (p["p50"] <= p["p90"]).all() and (p["p90"] <= p["p99"]).all()
    s = r.summary()
    assert 0 < s["goodput"] <= s["request_throughput"]
    out = tmp_path / "r.csv"
    r.to_csv(out)
    back = pd.read_csv(out)
    assert len(back) == len(r.records) and "ttft_ms" in back


@pytest.mark.parametrize("rate", [0, -1.0, math.nan, math.inf])
def test_bad_rate_names_the_argument(rate):
    with pytest.raises(ValueError, match="rate"):
        serving.simulate(rate=rate, **SMALL)


@pytest.mark.parametrize("p", [0, 100, 150, -5, math.nan])
def test_sla_percentile_outside_0_100(p):
    with pytest.raises(ValueError, match="sla_percentile"):
        serving.simulate(rate=1.0, duration_s=5, sla_ttft_ms=1000, sla_percentile=p, **SMALL)
    with pytest.raises(ValueError, match="sla_percentile"):
        serving.max_rate(sla_ttft_ms=1000, sla_percentile=p, **SMALL)


@pytest.mark.parametrize("line, field", [
    ('{"timestamp": 0, "input_length": "12", "output_length": 3}', "input_length"),
    ('{"timestamp": -1, "input_length": 12, "output_length": 3}', "timestamp"),
    ('{"timestamp": 0, "input_length": 12}', "output_length"),
    ('{"timestamp": 0, "input_length": 12, "output_length": 3, "hash_ids": [1, "x"]}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 12, "output_length": 3.5}', "output_length"),
    ('{"timestamp": 0, "input_length": ', "JSON"),
])
def test_malformed_trace_line_names_file_line_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
                    '{"timestamp": 5, "input_length": 10, "output_length": 2}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"bad\.jsonl, line 3: .*{field}"):
        serving.simulate(trace=str(path), **SMALL)


def test_shipped_traces_load():
    t = serving.load_trace("synthetic")
    assert len(t) == 3993
    assert t.hash_offsets[-1] == len(t.hashes)
    with gzip.open(serving.traces.trace_path("conversation"), "rt") as f:
        assert sum(1 for _ in f) == 12031


def test_kv_too_small_for_one_request_is_an_error():
    with pytest.raises(ValueError, match="KV capacity is too small"):
        serving.simulate(concurrency=1, input_len=2 ** 23, output_len=10, duration_s=1, **SMALL)


@pytest.mark.parametrize("layout, field", [(dict(mode="disaggregated", prefill_ep=3), "prefill_ep"),
                                           (dict(ep=2), r"\(ep\)")])
def test_a_pool_whose_weights_fill_its_memory_names_its_layout(layout, field):
    """Weights that leave a rank no KV cache: the error names the pool's GPU count and the share."""
    with pytest.raises(ValueError, match=f"weights take all of its memory share.*{field}.*mem_fraction"):
        serving.simulate(concurrency=1, input_len=256, output_len=8, num_prompts=2,
                         **{**SMALL_LAYOUT, "mode": "aggregated", **layout})


@pytest.mark.parametrize("layout, message", [
    (dict(prefill_ep=4, prefill_attn_tp=8), r"prefill_ep \(4\) must be a multiple of prefill_attn_tp \(8\)"),
    (dict(prefill_ep=16, prefill_moe_tp=3), r"prefill_moe_tp \(3\) must divide prefill_ep,"),
    (dict(prefill_ep=512), r"prefill_ep \(divided by prefill_moe_tp\) must be <="),
    (dict(ep=4, attn_tp=8), r"^ep \(4\) must be a multiple of attn_tp \(8\)"),
])
def test_a_layout_rule_names_every_field_of_its_pool(layout, message):
    """The model's layout rules (layout_rules.hpp) as simulate's arguments: a prefill pool's fields
    with their prefix, wherever the message names them."""
    with pytest.raises(ValueError, match=message):
        serving.simulate(concurrency=1, input_len=256, output_len=8, num_prompts=2,
                         **{**SMALL_LAYOUT, "mode": "disaggregated", **layout})


def test_overload_stops_at_the_bound_and_says_when():
    r = serving.simulate(rate=500.0, duration_s=600, input_len=2000, output_len=200, max_waiting=3000, **SMALL)
    assert r.info["overloaded"] and r.info["stop_reason"] == "max_waiting"
    assert r.info["end_ms"] < 600e3  # stopped long before the arrivals ended
    assert r.info["overload_since_s"] < 5
    assert r.info["overload_rate"] == pytest.approx(500, rel=0.1)
    assert not r.meets()


def test_max_rate_brackets_the_sla():
    out = serving.max_rate(sla_ttft_ms=3000, sla_percentile=90, duration_s=60, input_len=1024, output_len=64,
                           low=0.5, high=200, tolerance=0.1, **SMALL)
    rate = out["rate"]
    assert 0.5 <= rate < 200
    failed = [r for r, ok in out["tried"].items() if not ok]
    assert failed and min(failed) > rate
    assert out["result"].summary()["ttft_p90_ms"] <= 3000


def test_enums_come_from_the_binding():
    assert serving.ROUTINGS == ("round_robin", "least_loaded", "prefix_aware")
    with pytest.raises(ValueError, match="routing"):
        serving.simulate(rate=1.0, routing="random", **SMALL)


def test_cli_simulate(capsys, tmp_path):
    assert cli_main(["simulate", "--device", "H200", "--ep", "8", "--rate", "2", "--duration", "20",
                     "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("arrival_ms,") and len(out.splitlines()) > 10
    assert cli_main(["simulate", "--device", "H200", "--ep", "8", "--concurrency", "8", "--duration", "10"]) == 0
    out = capsys.readouterr().out
    assert "ttft_ms" in out and "error bands of the measured/serving regime" in out


@pytest.mark.parametrize("device, table", [("H200", "measured"), ("B200", "derived")])
def test_a_simulation_carries_its_regimes_latency_bands(device, table):
    # Every prediction prints its regime's band: a serving simulation the latency section's, by the
    # device's kind of table (its TTFT and its TPOT-like figures).
    from dsperf.model import bands

    s = serving.simulate("DeepSeek-V3", device, concurrency=4, duration_s=5, ep=8, input_len=256,
                         output_len=16).summary()
    assert s["band_regime"] == f"{table}/serving"
    for bound in ("ttft", "tpot"):
        band, points, _ = bands.lookup(table, "serving", bound)
        assert s[f"{bound}_band"] == band and math.isfinite(band) and points >= bands.MIN_POINTS


@pytest.mark.parametrize("argv, flag", [
    (["--rate", "0"], "--rate"),
    (["--rate", "nan"], "--rate"),
    (["--concurrency", "0"], "--concurrency"),
    (["--rate", "1", "--duration", "-3"], "--duration"),
    (["--rate", "1", "--sla-percentile", "100", "--sla-ttft-ms", "100"], "--sla-percentile"),
    (["--rate", "1", "--ep", "0"], "--ep"),
    (["--rate", "1", "--attn-tp", "3"], "--attn-tp"),
    (["--rate", "1", "--mtp", "1", "--mtp-accepted", "2"], "--mtp-accepted"),
    (["--trace", "/nonexistent/t.jsonl"], "/nonexistent/t.jsonl"),
    (["--concurrency", "1", "--mode", "disaggregated", "--prefill-ep", "3"], "(--prefill-ep)"),
])
def test_cli_bad_flags_named(capsys, argv, flag):
    assert cli_main(["simulate", "--device", "H200"] + argv) == 2
    assert flag in capsys.readouterr().err


def test_run_size_is_bounded_before_generating():
    with pytest.raises(ValueError, match="duration_s"):
        serving.simulate(rate=1e6, duration_s=1e6, **SMALL)
    with pytest.raises(ValueError, match="replicas"):
        serving.simulate(rate=1.0, replicas=2 ** 20, **SMALL)


def test_closed_loop_over_a_trace_sends_each_request_once_in_order(tmp_path):
    rows = [{"timestamp": 1000 * i, "input_length": 100 + i, "output_length": 5 + i % 3} for i in range(40)]
    path = _write_trace(tmp_path / "t.jsonl", rows)
    r = serving.simulate(trace=str(path), concurrency=3, **SMALL)
    assert list(r.records["input_tokens"]) == [row["input_length"] for row in rows]
    assert r.records["finished"].all()
    # Never more than 3 in the system: each answer releases the next request.
    assert r.series["in_system"].max() <= 3


def test_explorer_best_rows_rechecked_by_simulation():
    from dsperf import explore

    df = explore.search("DeepSeek-V3", ["H200"], isl=1024, osl=256, ep=(8,), batch=(32.0, 64.0))
    best = explore.best(explore.meets_sla(df, tpot_ms=60), 2)
    sim = serving.recheck(best, isl=1024, osl=256, sla_percentile=90, sla_tpot_ms=60, sla_ttft_ms=5000)
    assert len(sim) == len(best) and "sim_tpot_p90_ms" in sim
    # At a steady closed loop the simulated TPOT sits near the explorer's mean decode TPOT.
    assert sim["sim_tpot_p90_ms"].to_numpy() == pytest.approx(best["tpot_ms"].to_numpy(), rel=0.15)
    # A first token comes no sooner than one prompt's prefill step on the prefill layout.
    one = [grounded.prefill("DeepSeek-V3", "H200", tokens=1024, prompt_len=1024, ep=int(e))["step_ms"]
           for e in best["prefill_ep"]]
    assert (sim["sim_ttft_p90_ms"].to_numpy() >= np.array(one)).all()
    assert sim["sim_meets"].dtype == bool


def test_recheck_says_why_a_row_has_no_percentiles(monkeypatch):
    # A simulation that stops at an overload bound: the row carries the reason, never meets the SLA.
    import importlib

    from dsperf import explore

    recheck_module = importlib.import_module("dsperf.serving.recheck")  # the module, not the function
    overloaded = serving.simulate(rate=1e5, duration_s=1, input_len=256, output_len=16, max_waiting=10, **SMALL)
    monkeypatch.setattr(recheck_module, "simulate", lambda *a, **k: overloaded)
    df = explore.search("DeepSeek-V3", ["H200"], isl=1024, osl=256, ep=(8,), batch=(32.0,))
    sim = serving.recheck(explore.best(df, 1), isl=1024, osl=256, sla_tpot_ms=1e6, sla_ttft_ms=1e9)
    assert not sim["sim_meets"].any()
    assert sim["sim_note"].str.contains("overloaded: the simulation stopped at its max_waiting bound").all()


def test_cli_explore_slo_percentile_is_checked(capsys):
    assert cli_main(["explore", "--devices", "H200", "--tpot-ms", "50", "--slo-percentile", "100"]) == 2
    assert "--slo-percentile" in capsys.readouterr().err


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(serving.MODES), routing=st.sampled_from(serving.ROUTINGS),
       mtp=st.integers(0, 2), accept=st.floats(0, 1), budget=st.sampled_from([64, 1000, 8192]),
       max_batch=st.sampled_from([None, 2, 64]), clients=st.integers(1, 400), isl=st.integers(1, 6000),
       osl=st.integers(1, 3000), seed=st.integers(0, 2 ** 32))
def test_any_small_run_drains_and_returns_every_block(mode, routing, mtp, accept, budget, max_batch, clients, isl, osl,
                                                      seed):
    # Whatever the settings: every request finishes with its tokens, times are ordered, and with
    # the prefix cache off every KV block is back in its pool at the end.
    r = serving.simulate(concurrency=clients, duration_s=0.5, input_len=isl, output_len=osl, mode=mode,
                         routing=routing, mtp=mtp, mtp_accepted=accept * mtp, max_num_tokens=budget,
                         max_batch=max_batch, prefill_ep=8, prefix_cache=False, seed=seed, **SMALL_LAYOUT)
    rec = r.records
    assert rec["finished"].all() and (rec["generated_tokens"] == rec["output_tokens"]).all()
    assert (rec["arrival_ms"] <= rec["first_token_ms"]).all() and (rec["first_token_ms"] <= rec["finish_ms"]).all()
    assert r.series["kv_blocks"].iloc[-1] == 0 and r.series["in_system"].iloc[-1] == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(serving.MODES), routing=st.sampled_from(serving.ROUTINGS), n=st.integers(1, 150),
       families=st.integers(1, 5), gap_ms=st.floats(0, 500), budget=st.sampled_from([300, 8192]),
       seed=st.integers(0, 2 ** 16))
def test_traces_with_shared_prefixes_drain(mode, routing, n, families, gap_ms, budget, seed):
    # Prompts from a few families share leading blocks (the prefix cache hits), then diverge.
    rng = np.random.default_rng(seed)
    inputs = rng.integers(1, 5000, n).astype(np.int32)
    hashes, offsets = [], [0]
    for i, length in enumerate(inputs):
        blocks = -(-int(length) // 512)
        fam = int(rng.integers(families))
        shared = int(rng.integers(0, blocks + 1))
        hashes += [fam * 1000 + b for b in range(shared)] + [10 ** 6 + i * 100 + b for b in range(blocks - shared)]
        offsets.append(len(hashes))
    trace = serving.Trace("mem", np.arange(n) * gap_ms, inputs, rng.integers(1, 300, n).astype(np.int32),
                          np.asarray(offsets, np.int64), np.asarray(hashes, np.uint64))
    r = serving.simulate(trace=trace, mode=mode, routing=routing, max_num_tokens=budget, prefill_ep=8, **SMALL_LAYOUT)
    rec = r.records
    assert rec["finished"].all() and (rec["generated_tokens"] == rec["output_tokens"]).all()
    assert (rec["cached_tokens"] < rec["input_tokens"]).all()
    assert r.series["in_system"].iloc[-1] == 0


def test_max_running_caps_a_dp_rank_and_prefill_max_running_the_prefill_pool():
    """max_running is the stacks' own cap, requests per DP rank (an attention group): a TP8 group
    capped at 4 never runs more than 4, where max_batch=4 (requests per GPU) lets it run 32. The
    prefill pool's cap is its own: one prompt at a time on a single prefill rank finishes every prompt
    in a step of its own, where uncapped prompts share steps."""
    kw = dict(device="H200", ep=8, attn_tp=8, mode="aggregated", concurrency=16, num_prompts=48, input_len=256,
              output_len=32)
    capped, per_gpu = serving.simulate(max_running=4, **kw), serving.simulate(max_batch=4, **kw)
    assert capped.series["running"].max() == 4
    assert per_gpu.series["running"].max() == 16
    assert capped.records["finished"].all() and capped.records["ttft_ms"].median() > per_gpu.records["ttft_ms"].median()
    pd_kw = dict(device="H200", ep=8, mode="disaggregated", prefill_ep=8, prefill_attn_tp=8, concurrency=16,
                 num_prompts=32, input_len=1024, output_len=8)
    one_at_a_time = serving.simulate(prefill_max_running=1, **pd_kw).records["first_token_ms"]
    uncapped = serving.simulate(**pd_kw).records["first_token_ms"]
    assert one_at_a_time.nunique() == len(one_at_a_time)
    assert uncapped.nunique() < len(uncapped)
    with pytest.raises(ValueError, match="max_batch.*max_running"):
        serving.simulate(max_batch=4, max_running=4, **kw)
    with pytest.raises(ValueError, match="prefill_max_running.*disaggregated"):
        serving.simulate(prefill_max_running=2, **kw)


def test_a_first_token_streamed_from_the_decode_instance_carries_the_hand_off_and_the_wait_for_a_slot():
    """Disaggregated, first_token="decode" (the default: Dynamo, SGLang's PD router and vLLM's proxy
    stream from the decode worker): one client, an idle decode pool, so TTFT is the prefill TTFT plus
    the KV hand-off exactly. With decode slots short (one per rank, two clients a rank), the wait for a
    slot lands in TTFT, and TPOT is the bare decode step; streamed from prefill, the same wait lands
    in TPOT."""
    one = dict(device="H200", ep=8, mode="disaggregated", prefill_ep=8, concurrency=1, num_prompts=3,
               input_len=1024, output_len=16, kv_transfer_gbps=50.0)
    at_decode = serving.simulate(first_token="decode", **one).records
    at_prefill = serving.simulate(first_token="prefill", **one).records
    hand_off_ms = grounded.memory(device="H200", ep=8)["kv_bytes_per_token"] * 1024 / 50e9 * 1e3
    assert (at_decode["ttft_ms"] - at_prefill["ttft_ms"]).to_numpy() == pytest.approx(hand_off_ms, rel=1e-6)
    short = dict(one, concurrency=16, num_prompts=32, max_running=1, output_len=64)
    slot_wait = serving.simulate(first_token="decode", **short).records
    in_tpot = serving.simulate(first_token="prefill", **short).records
    bare = grounded.decode(device="H200", ep=8, batch=1, kv_len=1024 + 31)["step_ms"]
    assert slot_wait["tpot_ms"].median() == pytest.approx(bare, rel=0.05)
    assert in_tpot["tpot_ms"].median() > 1.5 * bare
    # Half the clients wait for most of another request's decode (63 steps) before theirs is taken in.
    assert slot_wait["ttft_ms"].median() - in_tpot["ttft_ms"].median() > 0.8 * 63 * bare
    with pytest.raises(ValueError, match="first_token"):
        serving.simulate(first_token="frontend", **one)


BAD_VALUES = [True, "2", None, -1, 0, 0.5, math.nan, math.inf, -math.inf, 2 ** 70, 1e300]
NUMERIC_ARGS = ["rate", "concurrency", "duration_s", "seed", "cv", "input_len", "output_len", "ep", "attn_tp",
                "redundant_experts", "replicas", "max_batch", "max_running", "prefill_max_running", "max_num_tokens", "mtp", "mtp_accepted", "imbalance",
                "prefill_ep", "prefill_attn_tp", "prefill_replicas", "prefill_max_num_tokens", "block_tokens",
                "kv_transfer_gbps", "sla_ttft_ms", "sla_tpot_ms", "sla_percentile", "max_waiting", "max_time_s"]


@pytest.mark.parametrize("arg", NUMERIC_ARGS)
def test_every_numeric_argument_answers_bad_values_by_name(arg):
    # Each value either runs (where it is valid for that argument) or raises ValueError / TypeError
    # naming the argument: never another exception, a hang or a NaN in the summary.
    base = dict(rate=2.0, duration_s=5, input_len=256, output_len=16, mode="disaggregated", prefill_ep=8, **SMALL_LAYOUT)
    for v in BAD_VALUES:
        kw = dict(base)
        if arg == "concurrency":
            kw.pop("rate")
        kw[arg] = v
        try:
            r = serving.simulate(**kw)
        except (ValueError, TypeError) as e:
            name = {"duration_s": "duration"}.get(arg, arg)
            assert name in str(e) or (v is None and arg in ("rate", "concurrency")), (arg, v, str(e))
            continue
        s = r.summary()
        assert s["finished"] > 0 or s["overloaded"], (arg, v)
        assert not any(isinstance(x, float) and math.isnan(x) for k, x in s.items()
                       if k.startswith(("ttft", "e2e")) and s["finished"]), (arg, v, s)


@pytest.mark.parametrize("arg", ["mode", "routing", "arrival", "overlap", "prefill_overlap", "weight_dtype",
                                 "prefix_cache", "kv_fp8"])
def test_choice_arguments_answer_bad_values_by_name(arg):
    for v in ("nonsense", 1, None, 2.5):
        with pytest.raises((ValueError, TypeError), match=arg):
            serving.simulate(**{**SMALL_LAYOUT, "rate": 1.0, "duration_s": 2, "mode": "disaggregated",
                                "prefill_ep": 8, arg: v})


def test_prefix_aware_routing_does_not_pile_one_shared_block_onto_one_rank(tmp_path):
    # Every prompt starts with the same block (a common system prompt), then differs: the router
    # must still spread them (a cached first block is not worth an unbounded queue).
    rows = [{"timestamp": 20 * i, "input_length": 3000, "output_length": 50,
             "hash_ids": [0] + list(range(1 + 10 * i, 1 + 10 * i + 5))} for i in range(400)]
    path = _write_trace(tmp_path / "sys.jsonl", rows)
    r = serving.simulate(trace=str(path), routing="prefix_aware", **SMALL)
    share = r.records["prefill_rank"].value_counts(normalize=True)
    assert len(share) == 8 and share.max() < 0.25
    assert r.records["cached_tokens"].gt(0).mean() > 0.5  # and the shared block still hits


@pytest.mark.parametrize("share", [0.0, -1.0, float("nan"), float("inf"), 2e7])
def test_step_pricer_refuses_a_share_outside_routed_share_range(share):
    from dsperf import _C
    from dsperf.model.configs import load_model
    from dsperf.model.devices import load_device

    dep = dict(attn_tp=1, ep=8, redundant_experts=0)
    p = _C.serving.StepPricer(load_model("DeepSeek-V3"), load_device("H200", "corrected"), grounded.kernel_tables("H200"),
                              grounded._deployment("decode", **dep), grounded._deployment("prefill", **dep))
    assert p.step_ms(8, 1000, 0, 0, 0, 0.5, 1.0) > 0
    for kw in ("decode_share", "chunk_share"):
        with pytest.raises(ValueError, match=kw):
            p.step_ms(8, 1000, 64, 1, 64, **{kw: share})
