"""The Ascend 910C kernel table: derived MLA decode rows and measured dispatch/combine rows
(benchmarks/tables/build_ascend910c.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from dsperf.model import derive_table, grounded, table_files

ROOT = Path(__file__).resolve().parents[1]


def test_ascend_table_loads_with_both_sources():
    rows = grounded.read_table_rows(grounded.tables_dir() / "Ascend910C.csv")
    assert rows and {r["family"] for r in rows} == {"mla_decode", "dispatch_normal", "combine_normal",
                                                    "dispatch_ll", "combine_ll", "gemm_fp8", "gemm_bf16",
                                                    "grouped_contiguous", "grouped_masked", "mla_prefill"}
    comm = [r for r in rows if r["family"].startswith(("dispatch", "combine"))]
    # DeepEP-Ascend's normal (EP 8-128) and low-latency (EP 8-32) kernels on an A3 SuperPOD, per EP as
    # published, each read against one die's link.
    assert len(comm) == 16 and all(r["basis"] == "measured" and r["link_gbps"] == 196 for r in comm)
    assert all("sgl-kernel-npu" in r["source"] and "b2e93094" in r["source"] for r in comm)
    gbps = {(r["family"], r["ep"]): r["gbps"] for r in comm}
    assert gbps[("dispatch_normal", 8)] == 146 and gbps[("dispatch_ll", 32)] == 49 and gbps[("combine_ll", 8)] == 116
    for r in (r for r in rows if r["family"] == "mla_decode"):
        assert r["basis"] == "derived"
        assert "InferSim" in r["source"]                      # the H800 curve over shapes
        assert "2509.25224" in r["source2"] and "614" in r["source2"]   # the AMLA paper's best case
    # GEMMs timed in a W8A8 DeepSeek-V3 profile on an A3 (vLLM 0.15.0, CANN 8.5): 14 INT8 (on the 8-bit
    # path, gemm_fp8) and 4 BF16, decode (1-8 rows) and prefill (256 and 2,048 rows), each with its
    # operator, input shapes, call count and CV as the profile prints them.
    gemms = [r for r in rows if r["family"] in ("gemm_fp8", "gemm_bf16")]
    assert len(gemms) == 18 and all(r["basis"] == "measured" and "msModeling" in r["source"]
                                    and "39df672b" in r["source"] for r in gemms)
    assert sum(r["family"] == "gemm_fp8" for r in gemms) == 14
    qkv_a = [r for r in gemms if (r["m"], r["n"], r["k"]) == (1, 2112, 7168)]
    assert len(qkv_a) == 1 and qkv_a[0]["latency_us"] == 28.202 and '"1,7168;66,448,16,32;2112;2112"' in qkv_a[0]["source"]
    assert grounded.device_pricing("Ascend910C")["kernel_table"] == "Ascend910C"
    # No grouped-matmul time (the profile's fused DispatchFFNCombine hides it): the grouped rows are
    # derived, the H800 curves scaled to the profile's fastest INT8 GEMM (2026-11-28), which makes the
    # table "derived". No INT8 attention rows: the INT8 attention core stays at the default efficiency.
    grouped = [r for r in rows if r["family"].startswith("grouped")]
    assert grouped and all(r["basis"] == "derived" and "DeepGEMM" in r["source"]
                           for r in grouped)
    assert all("M = 2048, N = 4608, K = 7168" in r["source2"] and "537.2" in r["source2"] for r in grouped)
    assert grounded.table_kind("Ascend910C") == "derived"
    # The prefill attention core: torch_npu's flash attention timed on a 910B2 die (pto-isa's README), 2026-11-28.
    prefill = [r for r in rows if r["family"] == "mla_prefill"]
    assert prefill and all(r["basis"] == "derived" and "pto-isa" in r["source2"] and "150.78" in r["source2"]
                           for r in prefill)
    calls = grounded.calls_frame(grounded.prefill("DeepSeek-V3", "Ascend910C", ep=32))
    assert calls.loc[calls["family"] == "mla_prefill", "from_table"].all()


def test_ascend_mla_decode_priced_from_the_table():
    out = grounded.decode(device="Ascend910C", batch=48, kv_len=4224, ep=320, redundant_experts=64, mtp=1,
                          mtp_accepted=0.7)
    core = [c for c in out["calls"] if c["family"] == "mla_decode"]
    assert len(core) == 1 and core[0]["from_table"]
    # Compute-bound on a die's roofline; at most the published best, 614 of the package's 707.8
    # TFLOPS = 307 of the die's 353.9.
    assert 0.6 < core[0]["efficiency"] <= 307 / 353.9 + 1e-9
    # The attention core from its rows; dispatch and combine from the low-latency rows, clamped to
    # their largest EP (32) at EP320; the GEMMs from the profile's rows (those past its shapes clamped).
    gemm_calls = [c for c in out["calls"] if c["family"] in ("gemm_fp8", "gemm_bf16")]
    assert gemm_calls and all(c["from_table"] for c in gemm_calls)
    grouped_calls = [c for c in out["calls"] if c["family"].startswith("grouped")]
    assert grouped_calls and all(c["from_table"] for c in grouped_calls)
    grouped_clamped = sum(c["clamped"] for c in grouped_calls)
    assert out["calls_from_table"] == 1 + sum(not c["clamped"] for c in gemm_calls) + len(grouped_calls) - grouped_clamped
    assert out["calls_clamped"] == 2 + sum(c["clamped"] for c in gemm_calls) + grouped_clamped


def test_ascend_dispatch_combine_priced_from_its_own_rows():
    """Inside the UB domain a decode runs the low-latency kernels timed there (the device's own rows:
    49 and 97 GB/s of a die's 196 GB/s link at EP32, clamped beyond it; a GPU here is a die), every
    (token, expert) pair sent; a prefill the normal kernels' row at its own EP (timed in the domain too),
    where a device reading the network table's rows takes the EP8 NVLink row whatever its EP."""
    out = grounded.decode(device="Ascend910C", batch=48, kv_len=4224, ep=320, redundant_experts=64, mtp=1,
                          mtp_accepted=0.7)
    calls = {c["family"]: c for c in out["calls"] if c["stage"] in ("dispatch", "combine")}
    assert set(calls) == {"dispatch_ll", "combine_ll"}
    assert calls["dispatch_ll"]["efficiency"] == pytest.approx(49) and calls["dispatch_ll"]["clamped"]
    assert calls["combine_ll"]["efficiency"] == pytest.approx(97)
    tokens = 48 * 2 / 2  # MTP 1: two query tokens per request; two micro-batches (two_batch overlap)
    assert calls["dispatch_ll"]["bytes"] == pytest.approx(tokens * 8 * (7168 + 7168 / 128 * 4))
    assert grounded.device_pricing("Ascend910C")["tables"].has_domain_rows("dispatch_ll")
    pre = grounded.prefill(device="Ascend910C", tokens=8192, prompt_len=4096, ep=32)
    gbps = {c["family"]: c["efficiency"] for c in pre["calls"]}
    assert (gbps["dispatch_normal"], gbps["combine_normal"]) == (pytest.approx(102), pytest.approx(95))
    # A device whose low-latency rows are the network table's (timed over RDMA NICs) prices a decode
    # inside its NVLink domain at the normal kernels' H800 row (153 of 200 GB/s).
    assert not grounded.device_pricing("H800")["tables"].has_domain_rows("dispatch_ll")
    h = grounded.decode(device="H800", batch=64, kv_len=4224, ep=8, redundant_experts=0)
    assert {c["family"]: c["efficiency"] for c in h["calls"]}["dispatch_normal"] == pytest.approx(153 / 200 * 200)
    # A prefill at EP16 crosses an H100's 8-GPU node: the network table's RDMA row (43 of 50 GB/s),
    # scaled to its NIC.
    h = grounded.prefill(device="H100", tokens=8192, prompt_len=4096, ep=16)
    assert {c["family"]: c["efficiency"] for c in h["calls"]}["dispatch_normal"] == pytest.approx(43)


def test_a_regeneration_keeps_the_measured_rows():
    """python -m dsperf.model.derive_table Ascend910C rewrites the derived rows and keeps the measured ones."""
    shipped = (grounded.tables_dir() / "Ascend910C.csv").read_text()
    assert derive_table.render("Ascend910C") == shipped


def test_regenerating_every_table_keeps_their_measured_rows(tmp_path, monkeypatch):
    # `python -m dsperf.model.derive_table` rewrites each anchor target in turn; it once opened a
    # table for writing before reading the measured rows it keeps, and emptied the Ascend table.
    targets = ("B200.csv", "Ascend910C.csv", "MI300X.csv", "MI355X.csv")
    for name in ("H800.csv",) + targets:
        (tmp_path / name).write_text((grounded.tables_dir() / name).read_text())
    monkeypatch.setattr(derive_table, "_data", lambda name: tmp_path / name)
    assert derive_table.main([]) == 0
    for name in targets:
        assert (tmp_path / name).read_text() == (grounded.tables_dir() / name).read_text()


def test_a_device_comm_row_needs_its_link_and_a_scale_up_family(tmp_path):
    head = "family,ep,gbps,basis,source\n"
    bad = tmp_path / "t.csv"
    bad.write_text(head + "dispatch_normal,8,146,measured,somewhere\n")
    with pytest.raises(ValueError, match="link_gbps"):
        table_files._add_latencies(grounded.SM.KernelTables(0.5), bad, grounded.load_device("H800", "corrected"))
    bad.write_text("family,tp,gbps,link_gbps,basis,source\nallreduce,8,58,196,measured,somewhere\n")
    with pytest.raises(ValueError, match="network table"):
        table_files._add_latencies(grounded.SM.KernelTables(0.5), bad, grounded.load_device("H800", "corrected"))


def test_ascend_table_is_what_the_builder_writes():
    anchor = [a for a in derive_table.read_anchors() if a["table"] == "Ascend910C"]
    # The AMLA paper's 614 TFLOPS per package of two dies, per die (a GPU here): 307; the grouped matmul's,
    # the W8A8 profile's fastest INT8 GEMM per FLOP (2 x 2048 x 4608 x 7168 / 251.846 us = 537.2 TOPS).
    assert [(a["families"], a["published"], a["peak_field"]) for a in anchor] == [
        (["mla_decode"], 307.0, "fp16_tflops"), (["grouped_contiguous", "grouped_masked"], 537.2, "fp8_tflops"),
        (["mla_prefill"], 150.78, "fp16_tflops")]   # torch_npu's flash attention on a 910B2 die: 42.6% of 353.9
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables" / "build_ascend910c.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _point(name):
    from dsperf.model import validation
    return next(p for p in validation.load_points() if p["point"] == name)


def test_ascend_points_count_a_die_as_a_gpu_and_compare_per_chip():
    """cann-recipes-infer's A3 figures are per chip (a 910C package of two dies) while its ranks are dies,
    and a GPU here is a die: the decode's 128 ranks and global batch 6144 are 128 dies of 48 requests,
    the prefill's 32 ranks 32 dies of 2 x 4K prompts; the figures compare as tokens_per_chip_s (per
    GPU x gpus_per_chip). The decode's throughput is batch per chip over TPOT (96 / 44.9 ms, rounded)."""
    from dsperf.model import validation
    from dsperf.model.devices import load_device

    assert load_device("Ascend910C").gpus_per_chip == 2
    d = _point("cannrecipes_a3_decode")
    assert (d["device"], d["metric"]) == ("Ascend910C", "tokens_per_chip_s")
    assert d["ep"] == 128 and d["batch"] * d["ep"] == 6144 and (d["mtp"], d["mtp_accepted"]) == (1, 0.7)
    assert d["published"] == pytest.approx(2 * d["batch"] / 44.9e-3, abs=0.5)
    per_gpu = validation._decode(d)["tokens_per_gpu_s"]
    assert validation.predict_point(d) == pytest.approx(2 * per_gpu)
    for name, overlap in (("cannrecipes_a3_prefill", "none"), ("cannrecipes_a3_prefill_microbatch", "two_batch")):
        p = _point(name)
        assert p["ep"] == 32 and p["tokens"] * p["ep"] == 64 * 4096 and p["overlap"] == overlap
        assert "eager" in p["assumed"] and "die" in p["assumed"] and p["metric"] == "tokens_per_chip_s"


def test_a_package_priced_as_one_gpu_would_read_replicated_weights_once():
    """Why a die is the GPU: with DP attention each rank reads its own copy of the LM head (and the
    attention projections) from its own HBM; a package with both dies' bandwidth read it once."""
    from dsperf.model.devices import load_device

    die = load_device("Ascend910C")
    package = load_device("Ascend910C", fp16_tflops=2 * die.fp16_tflops, fp8_tflops=2 * die.fp8_tflops,
                          mem_gb=2 * die.mem_gb, mem_bw_gbps=2 * die.mem_bw_gbps, nvlink_gbps=2 * die.nvlink_gbps)
    kw = dict(kv_len=4146, mtp=1, mtp_accepted=0.7, kv_fp8=True, attn_fp8=True, overlap="single_batch")
    head = lambda r: next(c["us"] for c in r["calls"] if c["kernel"] == "lm_head")  # noqa: E731
    per_die = grounded.decode(device=die, batch=48, ep=128, **kw)
    as_package = grounded.decode(device=package, batch=96, ep=64, **kw)
    assert head(per_die) == pytest.approx(2 * head(as_package), rel=0.05)
    assert 2 * per_die["tokens_per_gpu_s"] < as_package["tokens_per_gpu_s"]


def test_ascend_eager_decode_pays_every_launch_graph_mode_none():
    """Graph mode (ge_graph, as the cann-recipes-infer decode ran) is the default, eager_launch_us = 0: no
    host bound. No per-operator launch cost of torch_npu on a 910C is published, so Ascend910C.toml
    carries none; given one, an eager step takes at least launches x that cost."""
    d = _point("cannrecipes_a3_decode")
    kw = dict(device="Ascend910C", batch=d["batch"], kv_len=d["kv_len"], ep=int(d["ep"]), mtp=1, mtp_accepted=0.7,
              kv_fp8=True, attn_fp8=True, overlap="single_batch")
    graph = grounded.decode(**kw)
    assert graph["launch_ms"] == 0 and graph["launches"] > 1000
    gpu_ms = graph["step_ms"] - graph["overhead_ms"]
    for us in (10.0, 50.0, 100.0):  # test values, not a published cost
        eager = grounded.decode(**kw, eager_launch_us=us)
        assert eager["launch_ms"] == pytest.approx(graph["launches"] * us / 1e3)
        assert eager["step_ms"] - graph["step_ms"] == pytest.approx(max(0.0, eager["launch_ms"] - gpu_ms))
    eager = grounded.decode(**kw, eager_launch_us=100.0)
    assert eager["launch_ms"] > gpu_ms and eager["step_ms"] >= eager["launch_ms"]  # launch-bound
    assert "eager_launch_us" not in (ROOT / "python" / "dsperf" / "data" / "devices" / "Ascend910C.toml").read_text()


def test_ascend_910b_parts_read_the_910c_table():
    """The three Atlas 800 A2 parts of Ascend/msmodeling's device list, one die each, listed with their
    sources and priced from the Ascend 910C table (a 910B-class die) through their own roofline: the
    projections, the attention core and the experts' grouped matmul (derived rows) from its rows."""
    from dsperf.model.devices import list_devices, load_device

    peaks = {"Ascend910B-376T": (353.9, 752), "Ascend910B-313T": (294.9, 626), "Ascend910B-280T": (245.8, 560)}
    assert set(peaks) <= set(list_devices())
    steps = {}
    for name, (bf16, int8) in peaks.items():
        d = load_device(name)
        assert (d.fp16_tflops, d.fp8_tflops, d.gpus_per_chip, d.gpus_per_node) == (bf16, int8, 1, 8)
        assert grounded.kernel_table_name(name) == "Ascend910C" and grounded.table_kind(name) == "derived"
        r = grounded.decode(device=name, batch=32, kv_len=2048, ep=16)
        calls = {c["kernel"]: c for c in r["calls"]}
        assert calls["wq_a"]["from_table"] and calls["attention_core"]["from_table"]
        assert calls["experts_up"]["from_table"]
        assert "msmodeling" in (ROOT / "python" / "dsperf" / "data" / "devices" / f"{name}.toml").read_text()
        steps[name] = r["step_ms"]
    # Fewer TFLOPS on the same rows: never faster.
    assert steps["Ascend910B-376T"] <= steps["Ascend910B-313T"] <= steps["Ascend910B-280T"]


def test_predict_prints_per_chip_throughput_where_a_chip_holds_several_gpus(capsys):
    from dsperf.cli import main

    main(["predict", "--device", "Ascend910C", "--batch", "48", "--ep", "128", "--kv-len", "4096"])
    out = capsys.readouterr().out
    per_gpu = grounded.decode(device="Ascend910C", batch=48, ep=128, kv_len=4096)["tokens_per_gpu_s"]
    assert f"{per_gpu * 2:.0f} tokens/s per chip (Ascend910C: a GPU here is one of a chip's 2 devices" in out
    main(["predict", "--device", "H200", "--batch", "48", "--ep", "8"])
    assert "per chip" not in capsys.readouterr().out
