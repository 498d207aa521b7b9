"""The kernel cost model: work counts checked by hand and by their scaling laws, the roofline
arithmetic, composites as the sum of their parts, GPU specs, and bad input."""
import math

import pytest

import dsperf
from dsperf import kernel_cost as kc

KC = dsperf._C.kernel_cost


def test_linear_work_by_hand():
    w = KC.linear_work(2, 3, 4, False)
    assert w.flops == 2 * 2 * 3 * 4
    assert w.bytes == 3 * 4 * 2 + 2 * 4 * 2 + 2 * 3 * 4  # BF16 weight and x, FP32 y
    f8 = KC.linear_work(1, 256, 384, True)
    # FP8: one byte per weight plus one FP32 scale per 128x128 block (2 x 3 blocks).
    assert f8.fp8 and f8.bytes == 256 * 384 + 6 * 4 + 384 * 2 + 256 * 4


def test_experts_work_skips_idle_experts_and_scales_with_rows():
    assert KC.experts_work(0, 0, 64, 32, False).flops == 0
    assert KC.experts_work(0, 0, 64, 32, False).bytes == 0
    one, two = KC.experts_work(10, 2, 64, 32), KC.experts_work(20, 2, 64, 32)
    assert two.flops == 2 * one.flops == 2 * 10 * 6 * 64 * 32
    # Doubling the active experts adds exactly one more set of weights per expert.
    more = KC.experts_work(10, 4, 64, 32)
    assert more.bytes - one.bytes == 2 * (2 * 32 * 64 + 64 * 32) * 2
    with pytest.raises(ValueError, match="active_experts"):
        KC.experts_work(1, 2, 64, 32)


@pytest.mark.parametrize("variant", kc.VARIANTS)
def test_mla_attention_work_grows_linearly_with_the_context(variant):
    shape = KC.MlaShape(dim=512, heads=4)
    w = [KC.mla_forward_work(kc.VARIANTS.index(variant), 1, p, shape) for p in (100, 200, 300)]
    assert w[2].flops - w[1].flops == pytest.approx(w[1].flops - w[0].flops)
    per_key = (w[1].flops - w[0].flops) / 100
    H, L, R, N, V = 4, 512, 64, 128, 128
    expected = {"CD": 2 * H * (N + R + V), "A_CC": 2 * H * (L + R + L), "A_CC_ME": 2 * H * (L + R + L),
                "AM_CC_ME": 2 * H * (L + R + L),
                "CC": 2 * H * (N + R + V) + 2 * L * H * (N + V)}[variant]  # CC decompresses every key
    assert per_key == pytest.approx(expected)


def test_materialised_absorption_trades_flops_for_weights():
    shape = KC.MlaShape()
    a = KC.mla_forward_work(3, 1, 4096, shape)   # A_CC_ME
    am = KC.mla_forward_work(4, 1, 4096, shape)  # AM_CC_ME
    assert am.bytes > a.bytes  # q_absorb and o_absorb are larger than wq_b's nope part and wo


def test_roofline_max_or_sum_overhead_and_cache():
    spec = dsperf.load_device("H800", "corrected", call_overhead_us=5, cache_bw_gbps=10000)
    w = KC.KernelWork(1e12, 1e9)
    peak = spec.fp16_tflops * spec.compute_derate * 1e12
    tc, tm = 1e12 / (peak * 0.5), 1e9 / (spec.mem_bw_gbps * 1e9 * 0.25)
    assert KC.kernel_seconds(w, spec, KC.KernelEfficiency(0.5, 0.25, 10)) == pytest.approx(15e-6 + max(tc, tm))
    assert KC.kernel_seconds(w, spec, KC.KernelEfficiency(0.5, 0.25, 10, 1.0)) == pytest.approx(15e-6 + tc + tm)
    # Between: the longer term plus that share of the shorter (a GEMM that hides part of its stream).
    assert KC.kernel_seconds(w, spec, KC.KernelEfficiency(0.5, 0.25, 10, 0.3)) == pytest.approx(
        15e-6 + max(tc, tm) + 0.3 * min(tc, tm))
    hot = KC.kernel_seconds(KC.KernelWork(0, 1e9), spec, KC.KernelEfficiency(), True)
    assert hot == pytest.approx(5e-6 + 1e9 / 10000e9)
    # FP8 work runs at the FP8 peak where the device has one.
    f8 = KC.kernel_seconds(KC.KernelWork(1e12, 0, True), spec, KC.KernelEfficiency())
    assert f8 == pytest.approx(5e-6 + 1e12 / (spec.fp8_tflops * spec.compute_derate * 1e12))


def test_mla_decode_on_h800_is_bandwidth_bound_as_flashmla_reports():
    # FlashMLA's decode shape: 128 heads, 64 requests of 4096 keys, BF16 latent cache.
    p = dict(keys=64 * 4096, batch=64, q_len=1, heads=128, dtype="bf16")
    w = kc.work("mla_decode", p)
    spec = dsperf.load_device("H800", "corrected")
    ms = kc.predict_ms("mla_decode", p, spec)
    assert ms == pytest.approx(w.bytes / (spec.mem_bw_gbps * 1e9) * 1e3)
    # The latent cache dominates; queries in and FP32 outputs add 8%.
    assert w.bytes / 1e6 == pytest.approx(64 * 4096 * 576 * 2 / 1e6, rel=0.1)


def test_composites_are_the_sum_of_their_parts_with_one_call_overhead():
    spec = dsperf.load_device("H800", "corrected", call_overhead_us=7)
    effs = {"gate": KC.KernelEfficiency(0.3, 0.5, 4), "experts_contiguous/bf16": KC.KernelEfficiency(0.6, 0.8, 9)}
    p = dict(tokens=16, dim=7168, inter=2048, experts=256, top_k=8, active=100, shared_inter=2048, dtype="bf16")
    parts = kc.parts("moe_layer", p)
    assert [f for f, _, _ in parts] == ["gate", "dispatch_combine", "experts_contiguous", "experts_contiguous"]
    total = sum(kc.predict_ms(f, q, spec, effs) for f, q, _ in parts)
    assert kc.predict_ms("moe_layer", p, spec, effs) == pytest.approx(total - 3 * 7e-3)
    layer = dict(p, variant="A_CC_ME", prefix=100, heads=16, tokens=1, active=8)
    names = [f for f, _, _ in kc.parts("decode_layer", layer)]
    n_gemms = len(KC.mla_gemms(3, 1, 100, KC.MlaShape(heads=16)))
    assert names == ["linear"] * n_gemms + ["mla_layer_step", "gate", "dispatch_combine", "experts_contiguous",
                                            "experts_contiguous"]


@pytest.mark.parametrize("family, params, match", [
    ("nope", {}, "unknown kernel family"),
    ("linear", dict(m=1, n=2), "needs the parameter 'k'"),
    ("linear", dict(m=1, n=2, k=3, dtype="fp16"), "dtype"),
    ("mla_layer_step", dict(variant="XX", tokens=1, prefix=0, heads=1), "variant"),
    ("linear", dict(m=-1, n=2, k=3), "m must be"),
    ("experts_masked", dict(rows=2, active=3, dim=4, inter=4), "active_experts"),
])
def test_bad_points_are_named(family, params, match):
    with pytest.raises(ValueError, match=match):
        kc.predict_ms(family, params, "H800")


def test_non_integer_sizes_are_named():
    with pytest.raises(TypeError, match="parameter 'm' must be an integer"):
        kc.predict_ms("linear", dict(m=1.5, n=2, k=3), "H800")
    with pytest.raises(TypeError, match="parameter 'tokens' must be an integer"):
        kc.work("gate", dict(tokens="8", dim=2, experts=4, top_k=1))


def test_bad_efficiency_is_named():
    with pytest.raises(ValueError, match="memory"):
        KC.kernel_seconds(KC.KernelWork(1, 1), dsperf.load_device("H800"), KC.KernelEfficiency(1, 0))
    with pytest.raises(ValueError, match="efficiency 'x'"):
        kc.efficiencies_from_dict({"x": {"compute": "fast"}})
    with pytest.raises(ValueError, match="efficiency 'y'.*memory"):
        kc.efficiencies_from_dict({"y": {"compute": 1, "memory": -1}})
    # The serial share is a fraction: 1.5 or NaN is named, in the file and in the C++ core.
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="efficiency 'z'.*serial"):
            kc.efficiencies_from_dict({"z": {"compute": 1, "memory": 1, "serial": bad}})
    with pytest.raises(ValueError, match="serial"):
        KC.kernel_seconds(KC.KernelWork(1, 1), dsperf.load_device("H800"), KC.KernelEfficiency(1, 1, 0, 2.0))


def test_roofline_terms_are_the_kernel_time_at_ideal_efficiency():
    spec = dsperf.load_device("H800", "corrected")
    w = KC.KernelWork(2e11, 3e9)
    c, m = KC.roofline_times(w, spec)
    assert c == pytest.approx(2e11 / (spec.fp16_tflops * spec.compute_derate * 1e12))
    assert m == pytest.approx(3e9 / (spec.mem_bw_gbps * 1e9))
    assert KC.kernel_seconds(w, spec, KC.KernelEfficiency()) == pytest.approx(max(c, m))


@pytest.mark.parametrize("variant", range(5))
def test_mla_layer_is_its_gemms_plus_its_attention(variant):
    shape = KC.MlaShape(heads=16)
    total = KC.mla_forward_work(variant, 3, 500, shape)
    gemms = KC.mla_gemms(variant, 3, 500, shape)
    parts = KC.mla_attention_work(variant, 3, 500, shape)
    for g in gemms:
        w = KC.linear_work(g.m, g.n, g.k)
        parts.flops += w.flops * g.count
        parts.bytes += w.bytes * g.count
    assert parts.flops == pytest.approx(total.flops) and parts.bytes == pytest.approx(total.bytes)
    # CC decompresses every cached key (a GEMM with prefix + tokens rows); CD only the new ones.
    rows = [g.m for g in gemms if g.n == 16 * (128 + 128)]
    assert rows == ([3] if variant == 0 else [503] if variant == 1 else [])
    # The kernel-cost parts price the GEMMs as the linear family and the rest as the MLA family.
    fam = [f for f, _, _ in kc.parts("mla_layer_step", dict(variant=kc.VARIANTS[variant], tokens=3, prefix=500, heads=16))]
    assert fam == ["linear"] * len(gemms) + ["mla_layer_step"]


def test_ep_exchange_bytes_by_hand():
    from dsperf.kernel_cost import ep_exchange_ms
    # One token, one expert of two, two ranks: the other rank holds it with probability 1/2.
    # FP8 record: 128 values + one FP32 scale + one id + one weight = 140 bytes; payload 132.
    t = ep_exchange_ms(1, hidden=128, top_k=1, experts=2, ranks=2, layout="token", fp8=True, link_gbps=1.0,
                       latency_us=0.0)
    # Plus dsperf.ep's fixed messages to the one peer: a count block of 36 + 1 int64, a 256-byte status.
    assert t["dispatch_bytes"] == pytest.approx(0.5 * 140 + 37 * 8)
    assert t["combine_bytes"] == pytest.approx(0.5 * 256 + 256)
    assert t["local_bytes"] == pytest.approx(2 * 132 + 256 + 4 * 128)   # pack (read + write), BF16 partial, FP32 out
    assert t["exchanges"] == 3 and t["local_ms"] == 0 and t["ms"] == pytest.approx(t["link_ms"])
    m = ep_exchange_ms(1, hidden=128, top_k=1, experts=2, ranks=2, layout="masked", fp8=False, link_gbps=1.0,
                       latency_us=2.0)
    # Low latency: a header of ceil(36 int64 / 256-byte rows) = 2 payload rows, a status row back.
    assert m["dispatch_bytes"] == pytest.approx(0.5 * 256 + 2 * 256) and m["exchanges"] == 2
    assert m["combine_bytes"] == pytest.approx(0.5 * 256 + 256)
    assert m["ms"] == pytest.approx((m["dispatch_bytes"] + m["combine_bytes"]) / 1e6 + 2 * 2e-3)
    # The per-expert layout adds copies, never link bytes; local traffic priced when a rate is given.
    e = ep_exchange_ms(64, ranks=4, layout="expert", link_gbps=10.0, latency_us=1.0, local_gbps=5.0)
    k = ep_exchange_ms(64, ranks=4, layout="token", link_gbps=10.0, latency_us=1.0, local_gbps=5.0)
    assert e["dispatch_bytes"] == k["dispatch_bytes"] and e["local_bytes"] > k["local_bytes"] > 0
    assert k["ms"] == pytest.approx(k["link_ms"] + k["local_ms"] + 3e-3)
    o = ep_exchange_ms(64, ranks=4, layout="token", link_gbps=10.0, latency_us=1.0, local_gbps=5.0, overhead_us=250.0)
    assert o["ms"] == pytest.approx(k["ms"] + 0.25)


def test_ep_exchange_rejects_bad_arguments():
    from dsperf.kernel_cost import ep_exchange_ms
    with pytest.raises(ValueError, match="multiple of ranks"):
        ep_exchange_ms(8, experts=10, ranks=4, link_gbps=1.0, latency_us=1.0)
    with pytest.raises(ValueError, match="link_gbps"):
        ep_exchange_ms(8, ranks=4, link_gbps=0.0, latency_us=1.0)
    with pytest.raises(ValueError, match="layout"):
        ep_exchange_ms(8, ranks=4, layout="packed", link_gbps=1.0, latency_us=1.0)


def test_window_exchange_term():
    """The shared-memory exchange moves no link bytes: each record (token layout) or pair row is
    copied once into its destination (read + write), each BF16 row read once by combine and each FP32
    token written once; three syncs."""
    from dsperf.kernel_cost import ep_exchange_ms

    H, K, T = 7168, 8, 128
    w = ep_exchange_ms(T, ranks=4, layout="expert", transport="window", link_gbps=1.0, latency_us=10.0, local_gbps=5.0)
    assert w["dispatch_bytes"] == w["combine_bytes"] == 0 and w["exchanges"] == 3
    row = H + 4 * (H // 128)  # FP8 values + FP32 scales per 128
    assert w["local_bytes"] == pytest.approx(2 * T * K * row + T * K * 2 * H + T * 4 * H, rel=1e-12)
    assert w["ms"] == pytest.approx(w["local_bytes"] / 5e6 + 3 * 10.0 / 1e3, rel=1e-12)
    a2a = ep_exchange_ms(T, ranks=4, layout="expert", link_gbps=1.0, latency_us=10.0, local_gbps=5.0)
    assert a2a["dispatch_bytes"] > 0 and a2a["local_bytes"] > w["local_bytes"]
    with pytest.raises(ValueError, match="transport must be one of"):
        ep_exchange_ms(T, ranks=4, transport="nvlink", link_gbps=1.0, latency_us=0.0)
