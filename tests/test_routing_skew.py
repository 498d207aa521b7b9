"""The busiest rank of an expert-parallel group (csrc/grounded/routing_skew.hpp): its expected routed
rows over the mean, the loads Poisson with routing balanced in expectation, and the step it sets
(docs/GROUNDED_MODEL.md, "The busiest rank")."""
import math

import numpy as np
import pytest

from dsperf import _C
from dsperf.model import grounded

skew = _C.step_model.routing_skew


def _poisson_max(mean, ranks):
    """E[max of `ranks` Poisson(mean)] by its definition, summed in Python to 1e-13."""
    total, cdf, pmf, m = 0.0, 0.0, math.exp(-mean), 0
    while True:
        cdf += pmf
        tail = 1 - min(cdf, 1.0) ** ranks
        total += tail
        pmf *= mean / (m + 1)
        m += 1
        if m > mean and tail < 1e-13:
            return total


@pytest.mark.parametrize("mean, ranks", [(1, 8), (8, 4), (0.5, 2), (64, 32), (300, 256), (2, 16)])
def test_the_sum_is_the_expected_busiest_poisson_load(mean, ranks):
    assert skew(mean, ranks) == pytest.approx(_poisson_max(mean, ranks) / mean, rel=1e-9)


def test_a_draw_of_poisson_loads_agrees():
    rng = np.random.default_rng(0)
    for mean, ranks in ((1, 8), (8, 4), (512, 128)):
        drawn = rng.poisson(mean, size=(20000, ranks)).max(axis=1).mean() / mean
        assert skew(mean, ranks) == pytest.approx(drawn, rel=0.01)


def test_one_expert_set_or_no_rows_is_balanced():
    assert skew(100, 1) == 1.0 and skew(0, 8) == 1.0


def test_the_busiest_load_grows_with_the_mean_and_is_continuous_where_the_sum_stops():
    means = np.concatenate([np.geomspace(1e-3, 399.9, 200), [400, 400.001], np.geomspace(401, 1e6, 100)])
    for ranks in (2, 8, 128, 4096):
        busiest = [m * skew(m, ranks) for m in means]
        assert all(b2 > b1 for b1, b2 in zip(busiest, busiest[1:])), ranks
        assert skew(400, ranks) == pytest.approx(skew(400.001, ranks), rel=1e-6)
    # Many rows even out: the busiest of 128 sets is within 1% of the mean at 10^6 rows each.
    assert 1 < skew(1e6, 128) < 1.01


def test_a_small_ep_step_reads_the_busiest_sets_experts():
    """One request per GPU over EP8 (DP attention): 8 routed rows per expert set on average (each
    GPU's token, 8 experts), about 12 on the busiest set, which reads that many experts' weights."""
    r = grounded.decode("DeepSeek-V3", "H200", batch=1, ep=8, overlap="none")
    up = {c["kernel"]: c for c in r["calls"]}["experts_up"]["shape"]
    local = 256 / 8

    def active(rows):
        return local * (1 - (1 - 1 / local) ** rows)

    assert up["groups"] == pytest.approx(active(8 * skew(8, 8)), rel=1e-9)
    assert up["groups"] > 1.3 * active(8)
