"""A TP attention group over whole nodes (H100 TP16 on two 8-GPU nodes, as TensorRT-LLM's TEP16 recipes
run it): the layout checks accept it, and its all-reduces are priced as NCCL's over the network, not
as the one-node custom all-reduce table's."""
import math

import pytest

from dsperf import _C
from dsperf.model import explore, grounded

SM = _C.step_model
D = 7168  # DeepSeek-V3's hidden size: a token's BF16 activations are 2 D bytes


def _nccl_over_nodes_us(t, device, tp, message):
    """The price tp_allreduce_latency gives over nodes, written out from its documented terms."""
    g, nodes = device.gpus_per_node, tp / device.gpus_per_node
    fixed = SM.nccl_tree_base_us + 2 * ((g - 1) * SM.nccl_tree_nvlink_hop_us
                                        + math.floor(math.log2(nodes)) * SM.nccl_tree_net_hop_us)
    inside = t.allreduce_us(g, message, device)["us"] - t.allreduce_us(g, 0, device)["us"]
    between = 2 * (nodes - 1) / nodes * message / g / (device.scaleout_gbps * 1e3)
    return fixed + max(inside, between)


def test_the_nccl_constants_are_the_tuners():
    # NVIDIA/nccl src/graph/tuning.cc: Tree base latency (LL) 6.8 us; hardware latencies (LL) 0.6 us
    # over NVLink, 5.0 us over the network.
    assert (SM.nccl_tree_base_us, SM.nccl_tree_nvlink_hop_us, SM.nccl_tree_net_hop_us) == (6.8, 0.6, 5.0)


@pytest.mark.parametrize("batch", [1 / 16, 4.0])
def test_attention_allreduce_over_two_nodes_is_nccls(batch):
    h100 = grounded.load_device("H100")
    r = grounded.decode("DeepSeek-V3", "H100", batch=batch, kv_len=2048, ep=16, attn_tp=16, overlap="none")
    calls = grounded.calls_frame(r).set_index("kernel")
    t = grounded.kernel_tables("H100")
    message = batch * 16 * D * 2  # every GPU of the group holds the group's tokens
    want = _nccl_over_nodes_us(t, h100, 16, message)
    for name in ("attn_allreduce", "moe_allreduce", "dense_allreduce"):
        assert calls.loc[name, "us"] == pytest.approx(want), name
        assert calls.loc[name, "from_table"] and not calls.loc[name, "clamped"]
    # Over two nodes NCCL's fixed cost (25.2 us) replaces one node's custom all-reduce's (5.9 us).
    assert t.allreduce_us(16, message, h100)["us"] == pytest.approx(want)
    assert t.allreduce_us(16, message, h100)["us"] - t.allreduce_us(8, message, h100)["us"] == pytest.approx(25.2 - 5.9)


def test_a_large_message_over_two_nodes_is_bound_by_nvlink_not_the_nics():
    # Two nodes: each GPU's NIC carries 1/8 of the message once each way, NVLink 7/4 of it.
    h100, t = grounded.load_device("H100"), grounded.kernel_tables("H100")
    m = 64e6
    big = t.allreduce_us(16, m, h100)
    nvlink_us = t.allreduce_us(8, m, h100)["us"] - 5.9  # the one-node price above its smallest message
    assert big["us"] == pytest.approx(25.2 + nvlink_us) and big["clamped"]
    assert nvlink_us > m / 8 / (50 * 1e3)


def test_tp16_decode_costs_more_than_tp8_for_the_group_fixed_costs():
    one = grounded.decode("DeepSeek-V3", "H100", batch=1 / 8, kv_len=2048, ep=16, attn_tp=8, overlap="none")
    two = grounded.decode("DeepSeek-V3", "H100", batch=1 / 16, kv_len=2048, ep=16, attn_tp=16, overlap="none")
    ar = lambda r: grounded.calls_frame(r).set_index("kernel").loc["attn_allreduce", "us"]  # noqa: E731
    assert ar(two) > ar(one)
    assert math.isfinite(two["tpot_ms"]) and two["tpot_ms"] > 0


def test_a_tp_group_neither_inside_a_node_nor_over_whole_nodes_is_refused():
    with pytest.raises(ValueError, match=r"attn_tp \(12\) must divide the 8 GPUs of a node or be a multiple of them"):
        grounded.decode("DeepSeek-V3", "H100", batch=1, kv_len=2048, ep=24, attn_tp=12)
    assert SM.tp_group_fits_nodes(16, 8) and SM.tp_group_fits_nodes(4, 8) and not SM.tp_group_fits_nodes(12, 8)


def test_the_explorer_prices_tp16_and_refuses_tp12():
    df = explore.search(devices=["H100"], ep=[16], attn_tp=[12, 16], batch=[1.0], mtp=[(0, 0.0)], kv_fp8=[True],
                        overlap=["none"])
    ok, bad = df[df["attn_tp"] == 16], df[df["attn_tp"] == 12]
    assert ok["feasible"].all() and ok["tpot_ms"].gt(0).all()
    assert (bad["reason"] == "attention TP must divide the node (or span whole nodes) and the heads").all()


def test_bad_arguments_of_the_bound_rule_and_price_are_named():
    t, h100 = grounded.kernel_tables("H100"), grounded.load_device("H100")
    with pytest.raises(ValueError, match="tp must be >= 1, got 0"):
        SM.tp_group_fits_nodes(0, 8)  # was a division by zero
    with pytest.raises(ValueError, match="gpus_per_node must be >= 1, got 0"):
        SM.tp_group_fits_nodes(8, 0)
    with pytest.raises(ValueError, match="tp must be >= 1, got 0"):
        t.allreduce_us(0, 1024, h100)
    with pytest.raises(ValueError, match=r"tp \(12\) must divide the 8 GPUs of a node or be a multiple of them"):
        t.allreduce_us(12, 1024, h100)
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="message_bytes must be finite and >= 0"):
            t.allreduce_us(16, bad, h100)
