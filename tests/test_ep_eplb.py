"""EPLB (csrc/ep/eplb.cpp through dsperf.ep): hand-checked plans and properties. No MPI needed."""
import numpy as np
import pytest

from dsperf import ep


def test_global_policy_hand_checked():
    # 4 experts, 6 slots, 2 GPUs. Extra slots go to the largest load per replica: expert 0 (8 -> 4),
    # then expert 0 again (tie 4 vs expert 1's 4, lower index). Replica loads 8/3 x3, 4, 2, 2 packed
    # heaviest first onto the lighter GPU: GPU0 = [e1, e0, e3] = 8.67, GPU1 = [e0, e0, e2] = 7.33.
    plan = ep.rebalance([8, 4, 2, 2], 6, num_gpus=2, policy="global")
    assert plan.phy2log.tolist() == [1, 0, 3, 0, 0, 2]
    assert plan.logcnt.tolist() == [3, 1, 1, 1]
    assert plan.log2phy.tolist() == [[1, 3, 4], [0, -1, -1], [5, -1, -1], [2, -1, -1]]
    assert not plan.hierarchical
    assert ep.imbalance([8, 4, 2, 2], num_gpus=2) == pytest.approx(12 / 8)
    assert ep.imbalance([8, 4, 2, 2], plan) == pytest.approx((4 + 8 / 3 + 2) / 8)


def test_hierarchical_policy_hand_checked():
    # Groups {0,1} (load 2) and {2,3} (load 10): the heavy group goes to node 0 first.
    plan = ep.rebalance([1, 1, 5, 5], 4, num_gpus=2, num_groups=2, num_nodes=2)
    assert plan.hierarchical
    assert plan.phy2log.tolist() == [2, 3, 0, 1]
    assert plan.logcnt.tolist() == [1, 1, 1, 1]


def _check_plan(load, plan, num_physical, num_gpus):
    L = len(load)
    assert plan.phy2log.shape == (num_physical,)
    assert plan.logcnt.min() >= 1                       # every logical expert has a replica
    assert plan.logcnt.sum() == num_physical            # replica counts fill the slots
    assert np.array_equal(np.bincount(plan.phy2log, minlength=L), plan.logcnt)
    for e in range(L):                                  # log2phy lists exactly e's slots
        slots = plan.log2phy[e, :plan.logcnt[e]]
        assert np.all(plan.phy2log[slots] == e) and np.all(plan.log2phy[e, plan.logcnt[e]:] == -1)
    assert num_physical % num_gpus == 0                 # every GPU holds the same number of slots


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["hierarchical", "global"])
def test_properties_on_skewed_loads(seed, policy):
    L, groups, nodes, gpus = 64, 8, 2, 8
    load = ep.zipf_load(L, 20000, alpha=1.0 + 0.1 * seed, seed=seed)
    for extra in (0, 16, 64):
        plan = ep.rebalance(load, L + extra, num_gpus=gpus, num_groups=groups, num_nodes=nodes, policy=policy)
        _check_plan(load, plan, L + extra, gpus)
        before, after = ep.imbalance(load, num_gpus=gpus), ep.imbalance(load, plan)
        assert 1.0 <= after <= before + 1e-12
    if policy == "hierarchical":
        # A group's experts all land on one node.
        plan = ep.rebalance(load, L + 16, num_gpus=gpus, num_groups=groups, num_nodes=nodes, policy=policy)
        node_of_slot = np.arange(L + 16) // ((L + 16) // nodes)
        for g in range(groups):
            nodes_of_group = {int(node_of_slot[s]) for s in range(L + 16) if plan.phy2log[s] // (L // groups) == g}
            assert len(nodes_of_group) == 1


def test_replication_helps_a_hot_expert():
    load = np.ones(16)
    load[3] = 100.0
    plan = ep.rebalance(load, 32, num_gpus=4, policy="global")
    assert plan.logcnt[3] == plan.logcnt.max() > 1
    assert ep.imbalance(load, plan) < 0.5 * ep.imbalance(load, num_gpus=4)


def test_layers_plan_independently():
    loads = np.stack([ep.zipf_load(32, 5000, seed=s) for s in range(3)])
    plan = ep.rebalance(loads, 40, num_gpus=4)
    assert plan.phy2log.shape == (3, 40) and plan.logcnt.shape == (3, 32)
    one = ep.rebalance(loads[1], 40, num_gpus=4)
    assert np.array_equal(plan.phy2log[1], one.phy2log)


@pytest.mark.parametrize("kwargs, match", [
    (dict(load=[1, 2, 3, 4], num_physical=3, num_gpus=1), "num_physical"),
    (dict(load=[1, 2, 3, 4], num_physical=6, num_gpus=4), "multiple of num_gpus"),
    (dict(load=[1, 2, 3, 4], num_physical=4, num_gpus=2, num_groups=3), "num_groups"),
    (dict(load=[1, 2, 3, 4], num_physical=4, num_gpus=2, num_groups=1, num_nodes=2, policy="hierarchical"),
     "divisible by num_nodes"),
    (dict(load=[1, -2, 3, 4], num_physical=4, num_gpus=2), "load"),
    (dict(load=[1, np.nan, 3, 4], num_physical=4, num_gpus=2), "load"),
    (dict(load=[1, 2, 3, 4], num_physical=4, num_gpus=2, policy="best"), "policy"),
    (dict(load=[], num_physical=4, num_gpus=2), "load"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    load = kwargs.pop("load")
    with pytest.raises(ValueError, match=match):
        ep.rebalance(load, **kwargs)


def test_bad_counts_are_type_errors():
    with pytest.raises(TypeError, match="num_gpus"):
        ep.rebalance([1, 2], 2, num_gpus=1.5)


def test_auto_policy_falls_back_to_global():
    load = ep.zipf_load(12, 1000, seed=1)
    auto = ep.rebalance(load, 16, num_gpus=4, num_groups=3, num_nodes=2)   # 3 groups on 2 nodes: global
    assert not auto.hierarchical
    assert np.array_equal(auto.phy2log, ep.rebalance(load, 16, num_gpus=4, policy="global").phy2log)
