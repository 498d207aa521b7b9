"""The busiest rank of an expert-parallel group (csrc/grounded/routing_skew.hpp): its expected routed
rows over the mean, a set's load Poisson or, where a token's rows cluster on few sets, negative
binomial; and the step it sets (docs/GROUNDED_MODEL.md, "The busiest rank")."""
import math

import numpy as np
import pytest

from dsperf import _C
from dsperf.model import grounded
from dsperf.model.configs import load_model

SM = _C.step_model
skew, dispersion = SM.routing_skew, SM.routing_dispersion
V3 = load_model("DeepSeek-V3")


def _pmf(mean, disp):
    """Successive probabilities of the load, from their definitions (Poisson, or negative binomial
    with variance disp x mean)."""
    if disp <= 1:
        p, m = math.exp(-mean), 0
        while True:
            yield p
            p *= mean / (m + 1)
            m += 1
    r, q = mean / (disp - 1), 1 - 1 / disp
    p, m = (1 - q) ** r, 0
    while True:
        yield p
        p *= (r + m) / (m + 1) * q
        m += 1


def _expected_max(mean, ranks, disp=1.0):
    """E[max of `ranks` such loads] by its definition, summed in Python to 1e-13."""
    total, cdf = 0.0, 0.0
    for m, p in enumerate(_pmf(mean, disp)):
        cdf += p
        tail = 1 - min(cdf, 1.0) ** ranks
        total += tail
        if m > 3 * mean + 50 and tail < 1e-13:
            return total


@pytest.mark.parametrize("mean, ranks, disp", [(1, 8, 1), (8, 4, 1), (0.5, 2, 1), (64, 32, 1), (300, 256, 1),
                                               (2, 16, 1), (1, 8, 1.71), (8, 4, 1.46), (40, 16, 1.33), (0.3, 8, 3.0)])
def test_the_sum_is_the_expected_busiest_load(mean, ranks, disp):
    assert skew(mean, ranks, disp) == pytest.approx(_expected_max(mean, ranks, disp) / mean, rel=1e-9)


def test_a_draw_of_loads_agrees():
    rng = np.random.default_rng(0)
    for mean, ranks in ((1, 8), (8, 4), (512, 128)):
        drawn = rng.poisson(mean, size=(20000, ranks)).max(axis=1).mean() / mean
        assert skew(mean, ranks) == pytest.approx(drawn, rel=0.01)
    r, q = 8 / 0.46, 1 - 1 / 1.46  # negative binomial, mean 8, variance 1.46 x 8
    drawn = rng.negative_binomial(r, 1 - q, size=(20000, 4)).max(axis=1).mean() / 8
    assert skew(8, 4, 1.46) == pytest.approx(drawn, rel=0.01)


@pytest.mark.parametrize("disp", [1.0, 1.71])
def test_a_few_rows_over_many_sets_keep_their_digits(disp):
    # With a mean of a millionth of a row each set is almost surely empty, F(0) rounds to 1, and the busiest
    # of `ranks` sets holds about `ranks` times the mean (at most one set gets a row): the sum is taken over
    # the load's survival, not 1 - F (which returned 0 here before 2026-11-28).
    for mean in (1e-300, 1e-12, 1e-6):
        assert skew(mean, 2, disp) == pytest.approx(2.0, rel=1e-5)
        assert skew(mean, 8, disp) == pytest.approx(8.0, rel=1e-4)
    assert skew(1e-3, 8) == pytest.approx(_expected_max(1e-3, 8) / 1e-3, rel=1e-6)


def test_the_largest_means_stay_finite_and_near_balanced():
    # Past the summed means the busiest set is mean + c sd; the sd alone overflowed at 1e308 rows
    # (dispersion 1000) and the ratio came out inf before 2026-11-28.
    for disp in (1.0, 1000.0):
        for mean in (1e6, 1e300, 1e308):
            v = skew(mean, 2.0 ** 20, disp)
            assert math.isfinite(v) and 1.0 <= v < 1.6


def test_one_expert_set_or_no_rows_is_balanced():
    assert skew(100, 1) == 1.0 and skew(0, 8) == 1.0 and skew(0, 8, 2.0) == 1.0


@pytest.mark.parametrize("disp", [1.0, 1.71])
def test_the_busiest_load_grows_with_the_mean_and_is_continuous_where_the_sum_stops(disp):
    means = np.concatenate([np.geomspace(1e-3, 399.9, 200), [400, 400.001], np.geomspace(401, 1e6, 100)])
    for ranks in (2, 8, 128, 4096):
        busiest = [m * skew(m, ranks, disp) for m in means]
        assert all(b2 > b1 for b1, b2 in zip(busiest, busiest[1:])), ranks
        assert skew(400, ranks, disp) == pytest.approx(skew(400.001, ranks, disp), rel=1e-6)
    assert 1 < skew(1e6, 128, disp) < 1.01  # many rows even out


def _token_loads(ranks, tokens, rng):
    """DeepSeek-V3's group-limited routing, balanced: each token picks 4 of the 8 groups of 32
    experts, then 8 distinct experts among those 128; rows per contiguous set of 256 / ranks."""
    per = 256 // ranks
    loads = np.zeros((tokens, ranks))
    for t in range(tokens):
        groups = rng.choice(8, 4, replace=False)
        experts = rng.choice((groups[:, None] * 32 + np.arange(32)).ravel(), 8, replace=False)
        np.add.at(loads[t], experts // per, 1)
    return loads


@pytest.mark.parametrize("ranks, expected", [(8, 1.71), (4, 1.46), (16, 1.33), (32, 1.14), (128, 1.0)])
def test_a_token_s_rows_cluster_as_group_limited_routing_places_them(ranks, expected):
    assert dispersion(V3, ranks, 0) == pytest.approx(expected, abs=0.01)
    if ranks <= 32:
        loads = _token_loads(ranks, 20000, np.random.default_rng(ranks))
        assert dispersion(V3, ranks, 0) == pytest.approx(loads.var(axis=0).mean() / loads.mean(), rel=0.04)


def test_redundant_experts_or_one_set_leave_the_rows_independent():
    assert dispersion(V3, 8, 32) == 1.0 and dispersion(V3, 1, 0) == 1.0
    assert dispersion(V3, 2, 0) == 1.0  # half the experts each: under-dispersed, taken as Poisson


def test_the_clustered_estimate_is_nearer_a_draw_of_deepseek_routing():
    """One token over 8 sets: the busiest set's rows, drawn with the routing above, against the
    Poisson and the negative-binomial estimates (both below the draw; the sets' loads are taken as
    independent)."""
    drawn = _token_loads(8, 20000, np.random.default_rng(1)).max(axis=1).mean()
    clustered, independent = skew(1, 8, dispersion(V3, 8, 0)), skew(1, 8)
    assert independent < clustered <= drawn * 1.02
    assert abs(clustered - drawn) < 0.5 * abs(independent - drawn)


def test_a_small_ep_step_reads_the_busiest_sets_experts():
    """One request per GPU over EP8 (DP attention): 8 routed rows per expert set on average (each
    GPU's token, 8 experts), about 14 on the busiest set, which reads that many experts' weights."""
    r = grounded.decode("DeepSeek-V3", "H200", batch=1, ep=8, overlap="none")
    up = {c["kernel"]: c for c in r["calls"]}["experts_up"]["shape"]
    local = 256 / 8

    def active(rows):
        return local * (1 - (1 - 1 / local) ** rows)

    assert up["groups"] == pytest.approx(active(8 * skew(8, 8, dispersion(V3, 8, 0))), rel=1e-9)
    assert up["groups"] > 1.3 * active(8)


@pytest.mark.parametrize("args, name", [((float("nan"), 8), "mean_rows"), ((-1.0, 8), "mean_rows"),
                                        ((1.0, 0.5), "ranks"), ((1.0, float("inf")), "ranks"),
                                        ((1.0, 8, float("nan")), "dispersion"),
                                        # Beyond these the sum runs for ever (a dispersion of 1e300 hung before
                                        # 2026-11-28): kMaxSkewRanks, kMaxSkewDispersion.
                                        ((1.0, 2.0 ** 21), "ranks"), ((1.0, 8, 1e300), "dispersion"),
                                        ((1.0, 8, 1001.0), "dispersion")])
def test_bad_skew_arguments_from_python_are_named(args, name):
    with pytest.raises(ValueError, match=name):
        skew(*args)


def test_bad_dispersion_arguments_from_python_are_named():
    with pytest.raises(ValueError, match="ranks"):
        dispersion(V3, 0, 0)
    with pytest.raises(ValueError, match="redundant_experts"):
        dispersion(V3, 8, -1)
    with pytest.raises(ValueError, match="ranks"):
        dispersion(V3, 2.0 ** 21, 0)
