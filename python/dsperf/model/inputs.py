"""Every number the model reads, with where it comes from, and the guard that none of them is a
published validation figure.

The model's inputs are: the device files (data/devices/*.toml, each numeric field with its
`sources` entry, checked by dsperf.model.devices.check_sources), the kernel tables
(data/efficiency/*.csv, each row with its source), the anchors of the transfer rule
(data/anchors.csv), the settings and assumed values of the validation points
(data/validation/points.csv, latency_points.csv), and the model's own constants, listed here in
INPUT_CONSTANTS with their source or an `assumed:` tag. `model_inputs()` gathers them all;
`guard()` says which of them equals a published figure, or (for a dimensionless input) the ratio of
two different published figures, at 4 significant digits (tests/test_input_guard.py).
"""
from __future__ import annotations

import inspect
import itertools
import math
import re
from pathlib import Path
from typing import Iterable, NamedTuple

from .. import _C
from . import bands, devices, grounded, table_files, validation, validation_latency
from .derive_table import read_anchors

SM = _C.step_model
SV = _C.serving
ASSUMED = devices.ASSUMED
DIGITS = 4  # "equal" means equal when both are rounded to this many significant digits


class Constant(NamedTuple):
    value: float
    source: str            # where the value comes from, or 'assumed: <why>'
    declared: str          # where it is declared (file, and the name there)
    dimensionless: bool    # every value is read from where it is declared (the binding or the module)


def _simulate_defaults() -> dict:
    return {k: p.default for k, p in inspect.signature(_serving().simulate).parameters.items()
            if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}


def _serving():
    """The module dsperf.serving.simulate (the package exports its function under the same name)."""
    import importlib

    return importlib.import_module("dsperf.serving.simulate")


# The sources of the serving simulator's numeric defaults (dsperf.serving.simulate's arguments):
# docs/SERVING.md, "Assumed". A new numeric default without an entry fails the guard's test.
SIMULATE_DEFAULT_SOURCES = {
    "seed": "assumed: the random stream's seed (no figure: any seed gives the same statistics)",
    "cv": "assumed: gamma arrivals as bursty as Poisson (cv 1) unless asked",
    "input_len": "assumed: a 1K prompt for generated requests, a common benchmark length",
    "output_len": "assumed: 256 output tokens for generated requests",
    "range_ratio": "assumed: the neutral value (fixed lengths; the benchmarks' random dataset is a setting)",
    "recv_interval": "SGLang's default --scheduler-recv-interval (1: new requests received every step); a setting",
    "ep": "assumed: an API default layout (EP16, two 8-GPU nodes), not a deployment's",
    "attn_tp": "assumed: the neutral value (no attention TP)",
    "redundant_experts": "assumed: the neutral value (no redundant experts)",
    "replicas": "assumed: the neutral value (one instance)",
    "mtp": "assumed: the neutral value (no MTP)",
    "mtp_accepted": "assumed: the neutral value (no draft accepted)",
    "imbalance": "assumed: the neutral value (balanced routing)",
    "dense_tp": "assumed: the neutral value (no dense-layer TP)",
    "moe_tp": "assumed: the neutral value (no expert TP)",
    "prefill_ep": "assumed: an API default prefill layout (EP32, DeepSeek's prefill EP)",
    "prefill_attn_tp": "assumed: the neutral value (no attention TP)",
    "prefill_redundant_experts": "assumed: the neutral value (no redundant experts)",
    "prefill_replicas": "assumed: the neutral value (one prefill instance)",
    "prefill_max_num_tokens": "DeepSeek's profile: 16K prompt tokens per GPU per step (points.csv deepseek_profile_prefill)",
    "block_tokens": "the traces' block (512 tokens); assumed: the same granularity for KV paging",
    "sla_percentile": "assumed: goodput at the P90 of TTFT and TPOT, a common SLA percentile",
    "max_waiting": "assumed: overload guard, 10,000 requests waiting",
    "default_efficiency": "grounded.DEFAULT_EFFICIENCY (listed there)",
}


def _constants() -> dict[str, Constant]:
    S = _serving()
    hpp = "csrc/grounded/step_model.hpp"
    stypes = "csrc/serving/serving_types.hpp"
    out = {
        "step_model.decode_step_overhead_ms": Constant(
            SM.decode_step_overhead_ms,
            "assumed: scheduler, sampling and launch gaps per decode step; not measured (docs/VALIDATION.md)",
            f"{hpp}: kDecodeStepOverheadMs", False),
        "step_model.prefill_step_overhead_ms": Constant(
            SM.prefill_step_overhead_ms,
            "assumed: scheduler and launch gaps per prefill step; not measured (docs/VALIDATION.md)",
            f"{hpp}: kPrefillStepOverheadMs", False),
        # Not exposed by the binding (csrc/bindings/step_model.cpp): the declared value, checked
        # against the header by the test.
        "step_model.min_kernel_us": Constant(
            SM.min_kernel_us, "assumed: the floor of a call priced without a table row (one kernel launch)",
            f"{hpp}: kMinKernelUs", False),
        "step_model.graph_kernel_gap_us": Constant(
            SM.graph_kernel_gap_us,
            "measured: a compute kernel's boundary inside a CUDA graph, 0.36 us (a one-request DeepSeek-V3 step "
            "replayed from one graph on an H200 against its kernels alone: 0.29, 0.36 and 0.63 us in three runs, "
            "their median; dsperf "
            "measure-gpu --chain, data/devices/measured/chains/H200-trtllm_h200_min_latency*.md)",
            f"{hpp}: kGraphKernelGapUs", False),
        "step_model.memory_reserve": Constant(
            SM.memory_reserve, "assumed: 90% of device memory usable for weights and KV cache (docs/VALIDATION.md)",
            f"{hpp}: kMemoryReserve", True),
        "step_model.large_allreduce_link_share": Constant(
            SM.large_allreduce_link_share,
            "NCCL's effective NVLink bandwidth, 370 of 450 GB/s per direction (an NCCL maintainer, "
            "NVIDIA/nccl-tests issue #212, 2024-05-06): the rate of an all-reduce's bytes past the "
            "all-reduce table's largest message", f"{hpp}: kLargeAllReduceLinkShare", True),
        "grounded.DEFAULT_EFFICIENCY": Constant(
            grounded.DEFAULT_EFFICIENCY,
            "assumed: a flat share of the datasheet roofline for a compute call without a table row; "
            "not fitted to any deployment figure",
            "python/dsperf/model/table_files.py: DEFAULT_EFFICIENCY", True),
        "table_files._DEEPEP_HIDDEN": Constant(
            table_files._DEEPEP_HIDDEN, "DeepEP's benchmark: hidden 7168 (DeepSeek-V3), the shape its network rows were timed at",
            "python/dsperf/model/table_files.py: _DEEPEP_HIDDEN", False),
        "table_files._DEEPEP_TOP_K": Constant(
            table_files._DEEPEP_TOP_K, "DeepEP's benchmark: top-8 routing, the shape its network rows were timed at",
            "python/dsperf/model/table_files.py: _DEEPEP_TOP_K", False),
        "bands.LATENCY_BATCH": Constant(
            bands.LATENCY_BATCH, "assumed: requests per GPU below which a decode step is called latency-bound",
            "python/dsperf/model/bands.py: LATENCY_BATCH", False),
        "bands.BAND_QUANTILE": Constant(
            bands.BAND_QUANTILE, "assumed: the share of points in a regime a band is meant to hold",
            "python/dsperf/model/bands.py: BAND_QUANTILE", True),
        "bands.MIN_POINTS": Constant(
            bands.MIN_POINTS, "assumed: fewer check points than this in a regime fall back to a coarser regime",
            "python/dsperf/model/bands.py: MIN_POINTS", False),
        "serving.DEFAULT_DURATION_S": Constant(
            S.DEFAULT_DURATION_S, "assumed: 60 s of arrivals unless asked",
            "python/dsperf/serving/simulate.py: DEFAULT_DURATION_S", False),
        "serving.DEFAULT_MAX_NUM_TOKENS": Constant(
            S.DEFAULT_MAX_NUM_TOKENS, "assumed: a common chunked-prefill size, not read from a deployment (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_MAX_NUM_TOKENS", False),
        "serving.DEFAULT_PREFILL_TOKENS": Constant(
            S.DEFAULT_PREFILL_TOKENS, "DeepSeek's profile: 16K prompt tokens per GPU per step (points.csv deepseek_profile_prefill)",
            "python/dsperf/serving/simulate.py: DEFAULT_PREFILL_TOKENS", False),
        "serving.DEFAULT_MAX_WAITING": Constant(
            S.DEFAULT_MAX_WAITING, "assumed: overload guard (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_MAX_WAITING", False),
        "serving.DEFAULT_DRAIN_S": Constant(
            S.DEFAULT_DRAIN_S, "assumed: overload guard, simulated time after the last arrival (docs/SERVING.md)",
            "python/dsperf/serving/simulate.py: DEFAULT_DRAIN_S", False),
        "serving.max_batch_cap": Constant(
            S.MAX_BATCH_CAP, "assumed: requests per GPU when max_batch is not given, beyond what a KV cache holds "
            "(docs/SERVING.md)", "python/dsperf/serving/simulate.py: MAX_BATCH_CAP", False),
        "serving.ctx_ratio": Constant(
            SV.decode_context_ratio, "assumed: a numerical grid, decode contexts 2% apart (linear interpolation between them)",
            f"{stypes}: ServeConfig::ctx_ratio", True),
        "serving.prefill_ratio": Constant(
            SV.prefill_bucket_ratio, "assumed: a numerical grid, prefill chunks in buckets +-2.2% wide",
            f"{stypes}: ServeConfig::prefill_ratio", True),
        "serving.prefix_slack_min": Constant(
            SV.prefix_slack_min, "assumed: prefix-aware routing's slack of at least 2 requests (docs/SERVING.md)",
            "csrc/serving/router.hpp: kPrefixSlackMin", False),
        "serving.prefix_slack_divisor": Constant(
            SV.prefix_slack_divisor, "assumed: prefix-aware routing's slack of a quarter of the least load (docs/SERVING.md)",
            "csrc/serving/router.hpp: kPrefixSlackDivisor", False),
    }
    for k, v in _simulate_defaults().items():
        out[f"serving.simulate({k}=)"] = Constant(
            v, SIMULATE_DEFAULT_SOURCES.get(k, ""), "python/dsperf/serving/simulate.py: simulate()",
            k in ("mtp_accepted", "imbalance", "default_efficiency", "cv", "range_ratio"))
    return out


INPUT_CONSTANTS: dict[str, Constant] = _constants()


class Input(NamedTuple):
    where: str
    value: float
    dimensionless: bool
    # Computed from other inputs rather than written down (a table row's efficiency: its latency
    # over its GPU's datasheet roofline); see computed_inputs_at_chance().
    computed: bool = False


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# Fields of a device file that are dimensionless (a ratio could pass as one of them).
DIMENSIONLESS_DEVICE_FIELDS = ("compute_derate", "discount", "sustained_clock_ratio")


def device_inputs(device) -> list[Input]:
    """The numbers of one device file (a shipped name or a .toml path), after the loader has
    accepted it in both modes (which checks every number's source)."""
    name = str(device)
    for mode in ("corrected", "as_published"):
        devices.load_device(device, mode)
    data = devices._catalogue().get(name.lower())
    if data is None:
        data = devices._read_toml(name)
    label = Path(name).name if name.endswith(".toml") else f"devices/{data.get('name', name)}.toml"
    return [Input(f"{label} {k}", float(v), k.rsplit(".", 1)[-1] in DIMENSIONLESS_DEVICE_FIELDS)
            for k, v in devices.numeric_fields(data).items()]


def _table_files():
    """The shipped kernel tables: data/efficiency/*.csv, and the GPUs' own tables that measure-gpu
    timed (data/devices/measured/*.csv), each as (label folder, file)."""
    for folder, label in ((grounded.tables_dir(), "efficiency"), (grounded.measured_tables_dir(), "measured")):
        for f in sorted(folder.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".csv"):
                yield label, f


def table_inputs() -> list[Input]:
    """Every numeric cell of the kernel tables, and the efficiency each compute row implies on the
    GPU that timed it (its datasheet roofline time over its latency: dimensionless)."""
    out = []
    specs = {}
    for label, f in _table_files():
        table = f.name[:-4]
        for row in grounded.read_table_rows(f):
            where = f"{label}/{f.name} {grounded.row_label(row)}"
            out += [Input(f"{where} {k}", v, False) for k, v in row.items() if _is_number(v)]
            if SM.is_comm_family(row["family"]) or "latency_us" not in row:
                continue
            on = row.get("measured_on", table)
            spec = specs.setdefault(on, devices.load_device(on, "corrected"))
            work = SM.table_work(row["family"], grounded.row_shape(row))
            eff = SM.datasheet_roofline_s(work, spec) / (row["latency_us"] * 1e-6)
            out.append(Input(f"{where} efficiency on {on}", eff, True, True))
    return out


def anchor_inputs() -> list[Input]:
    """The anchors' published kernel figures, and each as a fraction of its device's peak (the
    factor the transfer rule applies: dimensionless)."""
    out = []
    for a in read_anchors():
        where = f"anchors.csv {a['table']} {' '.join(a['families'])}"
        peak = getattr(devices.load_device(a["table"], "corrected"), a["peak_field"])
        out += [Input(f"{where} published", a["published"], False),
                Input(f"{where} published / {a['peak_field']}", a["published"] / peak, True)]
    return out


# Settings of a validation point that are not inputs: its figure, and its bookkeeping.
_NOT_INPUTS = ("published",)
DIMENSIONLESS_SETTINGS = ("mtp_accepted", "imbalance")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:\.\d+)?")


def _point_inputs(points, file) -> list[Input]:
    out = []
    for p in points:
        for k, v in p.items():
            if k not in _NOT_INPUTS and _is_number(v):
                out.append(Input(f"{file} {p['point']} {k}", float(v), k in DIMENSIONLESS_SETTINGS))
        for m in _NUMBER.finditer(p.get("assumed", "")):
            out.append(Input(f"{file} {p['point']} assumed text", float(m.group().replace(",", "")), False))
    return out


def point_inputs() -> list[Input]:
    """The settings the validation points are predicted with (batch, context, layout, MTP
    acceptance, imbalance, ...) and the numbers in their `assumed` texts."""
    return (_point_inputs(validation.load_points(), "points.csv")
            + _point_inputs(validation_latency.load_latency_points(), "latency_points.csv"))


def constant_inputs() -> list[Input]:
    return [Input(f"constant {k}", float(c.value), c.dimensionless) for k, c in INPUT_CONSTANTS.items()]


def model_inputs(device_files: Iterable = None) -> list[Input]:
    """Every number the model reads: the device files (all shipped devices unless given), the
    kernel tables, the anchors, the validation points' settings and the constants."""
    files = devices.list_devices() if device_files is None else list(device_files)
    return (list(itertools.chain.from_iterable(device_inputs(d) for d in files))
            + table_inputs() + anchor_inputs() + point_inputs() + constant_inputs())


# Matches the guard finds that were looked into: (input, the point whose figure it equals) -> why it
# stays. A coincidence is a number with its own source that happens to share 4 digits with a
# figure; a finding is a real dependence on a figure, kept visible here until it is resolved.
EXEMPT = {
    ("efficiency/RTX4090.csv gemm_bf16 bf16 m=32 n=7168 k=2048 latency_us", "latency_points.csv ix_h200_trt_1k1k_c3584_tpot"):
        "coincidence: a derived RTX 4090 row (the H200-timed cuBLAS BF16 row at M 32, N 7168, K 2048 scaled by a "
        "published RTX 4090 best case, dsperf.model.derive_table: 49.212 us) against an H200 TPOT (49.205 ms, "
        "InferenceX); other units, and the row is what the rule computes, not a figure written down",
    ("efficiency/RTX4090.csv gemm_fp8 fp8 m=64 n=4096 k=7168 latency_us", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: a derived RTX 4090 row (DeepGEMM's H800 row at M 64, N 4096, K 7168 scaled by the part's "
        "published FP8 figure: 100.05 us) against an ITL of 'approximately 100 ms'; other units, a computed row",
    ("efficiency/RTX4090.csv mla_decode bf16 batch=32 kv_len=1024 heads=128 latency_us",
     "latency_points.csv ix_mi325x_sglang_fp8_1k1k_c4_ttft"):
        "coincidence: a derived RTX 4090 MLA decode row (FlashMLA's H800 row at batch 32, 1,024 tokens scaled by "
        "FlashInfer's published RTX 4090 decode bandwidth: 114.817 us) against an MI325X TTFT (114.814 ms, "
        "InferenceX); other units, a computed row",
    ("anchors.csv RTX4090 gemm_fp8 grouped_contiguous grouped_masked published / fp8_tflops",
     "latency_points.csv ix_h200_trt_1k1k_c3584_tpot / latency_points.csv dstack_h200_sglang_3k8_c128_tpot"):
        "coincidence: TransformerEngine's FP8 figure on an RTX 4090 over its FP8 peak (150 / 330.3 = 0.4541, "
        "NVIDIA/TransformerEngine issue #606) against the ratio of two H200 TPOTs of unrelated runs (InferenceX "
        "and dstack): no H200 serving figure enters an RTX 4090 anchor",
    ("measured/H200.csv gemm_fp8 fp8 m=8192 n=1536 k=7168 latency_us", "latency_points.csv dstack_mi300x_sglang_3k8_c128_tpot"):
        "coincidence: cuBLASLt's FP8 GEMM timed on an H200 by measure-gpu (135.91 us, 2026-11-26) against an "
        "MI300X TPOT (135.929 ms, dstackai/benchmarks, 2025-03); other units, other sources",
    ("devices/B300.toml scaleout_gbps", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: ConnectX-8's 800 Gb/s = 100 GB/s (NVIDIA datasheet) against an ITL of 'approximately 100 ms'",
    ("devices/GB300.toml scaleout_gbps", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: ConnectX-8's 800 Gb/s = 100 GB/s (NVIDIA datasheet) against an ITL of 'approximately 100 ms'",
    ("latency_points.csv sglang_h100_pd_decode_itl output_len", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: the blog's EPLB decode case study runs 100 output tokens; its ITL is 'approximately 100 ms'",
    ("latency_points.csv sglang_h100_pd_decode_itl assumed text", "latency_points.csv sglang_h100_pd_decode_itl"):
        "the text quotes the figure ('approximately 100 ms' read as the median) and the 100 output tokens above",
    ("efficiency/H20.csv gemm_fp8 fp8 m=128 n=5120 k=2048 latency_us", "latency_points.csv ix_gb200_trt_8k1k_c256_tpot"):
        "coincidence: a DeepGEMM time on H20 (15.312 us, alibaba/InferSim bench_data) against a GB200 TPOT "
        "(15.305 ms, InferenceX); other units, other sources",
    ("efficiency/H800.csv gemm_fp8 fp8 m=512 n=4096 k=7168 latency_us", "latency_points.csv ix_b200_sglang_1k1k_c1024_tpot"):
        "coincidence: a DeepGEMM time on H800 (M 512, N 4096, K 7168: 30.034 us, alibaba/InferSim bench_data) "
        "against a B200 TPOT (30.034 ms, InferenceX run 23266829671); other units, other sources, the table "
        "row was imported before the latency point was added",
    ("efficiency/MI300X.csv mla_decode bf16 batch=16 kv_len=32768 heads=128 latency_us",
     "latency_points.csv ix_mi325x_sglang_fp8_8k1k_c4_ttft"):
        "coincidence: a derived MLA decode row (the H800 FlashMLA row at batch 16, 32,768 tokens scaled by aiter's "
        "published MI300X best case, dsperf.model.derive_table: 428.01 us) against an MI325X TTFT (428.031 ms, "
        "InferenceX); other units, and the row is what the rule computes, not a figure written down",
    ("efficiency/MI300X.csv gemm_fp8 fp8 m=192 n=256 k=7168 latency_us", "latency_points.csv ix_mi355x_mori_fp8_8k1k_c8_tpot"):
        "coincidence: a tuned aiter FP8 GEMM time on MI325X (M 192, N 256: 12.254 us, ROCm/aiter "
        "a8w8_blockscale_tuned_gemm_ds_v3.csv) against an MI355X TPOT (12.254 ms, InferenceX run 22047502000); "
        "other units, other sources, the table row was imported before the latency point was added",
    ("efficiency/MI300X.csv gemm_fp8 fp8 m=224 n=256 k=7168 latency_us", "latency_points.csv ix_mi355x_mori_fp8_8k1k_c8_tpot"):
        "coincidence: a tuned aiter FP8 GEMM time on MI325X (M 224, N 256: 12.245 us, ROCm/aiter "
        "a8w8_blockscale_tuned_gemm_ds_v3.csv) against an MI355X TPOT (12.254 ms, InferenceX run 22047502000); "
        "other units, other sources, the table row was imported before the latency point was added",
    ("points.csv cloudmatrix384_decode assumed text", "points.csv cloudmatrix384_decode"):
        "the text quotes the figure it relates the batch to: the paper gives batch 96 and TPOT 49.4 ms with "
        "1,943 tokens/s = batch / TPOT (as quoted from its decode table, not yet checked against the PDF), "
        "so the point checks the model's TPOT at the paper's batch",
    ("constant grounded.DEFAULT_EFFICIENCY",
     "latency_points.csv sglang_h100_pd_decode_itl / latency_points.csv ix_mi300x_sglang_fp8_1k1k_c4_ttft"):
        "coincidence: the assumed flat efficiency (0.6, set 2026-11-23) against the ratio of an ITL of "
        "'approximately 100 ms' to an MI300X TTFT (166.676 ms, InferenceX run 22469096331), a point added on "
        "2026-11-26",
    ("constant serving.simulate(default_efficiency=)",
     "latency_points.csv sglang_h100_pd_decode_itl / latency_points.csv ix_mi300x_sglang_fp8_1k1k_c4_ttft"):
        "coincidence: grounded.DEFAULT_EFFICIENCY as the simulator's default (above)",
    ("efficiency/B200.csv grouped_masked fp8 m=256 n=7168 k=2048 groups=2 latency_us",
     "latency_points.csv ix_b300_sglang_8k1k_c8_tpot"):
        "coincidence: a derived B200 masked grouped GEMM time (14.838 us, the H800 DeepGEMM curve scaled to vllm PR "
        "#19566's B200 figure) against a B300 TPOT (14.842 ms, InferenceX run 26306422380, a point added 2026-11-28 "
        "after the table was derived); other units, other sources",
    ("efficiency/MI355X.csv gemm_fp8 fp8 m=1 n=7168 k=4608 latency_us", "latency_points.csv ix_b300_sglang_1k1k_c16_tpot"):
        "coincidence: a tuned aiter FP8 GEMM time on MI355X (M 1, N 7168, K 4608: 12.4013 us, ROCm/aiter "
        "a8w8_blockscale_tuned_gemm_ds_v3.csv) against a B300 TPOT (12.398 ms, InferenceX run 26306422380); other "
        "units, other sources, the table row was imported before the latency point was added (2026-11-28)",
    ("constant serving.ctx_ratio",
     "latency_points.csv ix_mi355x_mori_fp8_8k1k_c8_ttft / latency_points.csv ix_b300_sglang_8k1k_c8_ttft"):
        "coincidence: the simulator's numerical grid of decode contexts 2% apart (1.02) against an MI355X TTFT over a B300 "
        "TTFT (491.095 / 481.285 ms, the latter added 2026-11-28): two unrelated runs on different GPUs",
    # Run 26306422380's B200 rows (added 2026-11-28, after every table row and constant below was set):
    # table times in microseconds and small assumed constants sharing four digits with latencies in ms.
    **{(row, f"latency_points.csv {point}"): f"coincidence: {what}; a B200 SGLang latency of InferenceX run 26306422380 "
       "(added 2026-11-28, after the input was set): other units, other sources"
       for row, point, what in (
           ("efficiency/B200.csv grouped_masked fp8 m=1024 n=4096 k=7168 groups=1 latency_us",
            "ix_b200_sglang_8k1k_c32_agg_tpot", "a derived B200 masked grouped GEMM time (33.655 us)"),
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=4096 n=4608 k=7168 latency_us", "ix_b200_sglang_8k1k_c1_agg_ttft",
            "a tuned aiter FP8 GEMM time (314.124 us)"),
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=2048 n=7168 k=256 latency_us", "ix_b200_sglang_1k1k_c64_agg_tpot",
            "a tuned aiter FP8 GEMM time (21.8014 us)"),
           ("efficiency/MI300X.csv grouped_masked fp8 m=34.9091 n=7168 k=2048 groups=33 latency_us",
            "ix_b200_sglang_1k1k_c1_agg_ttft", "aiter's fused-MoE time on MI325X (157.433 us)"),
           ("efficiency/MI300X.csv grouped_contiguous fp8 m=34.9091 n=7168 k=2048 groups=33 latency_us",
            "ix_b200_sglang_1k1k_c1_agg_ttft", "aiter's fused-MoE time on MI325X (157.433 us)"),
           ("efficiency/RTX4090.csv gemm_bf16 bf16 m=64 n=7168 k=18432 latency_us", "ix_b200_sglang_8k1k_c1_agg_ttft",
            "a derived RTX 4090 BF16 GEMM time (314.081 us)"))},
    **{(f"{where} mtp_accepted",
        "latency_points.csv ix_b300_sglang_8k1k_c1_ttft / latency_points.csv ix_b200_sglang_1k1k_c1_agg_ttft"):
       "coincidence: TensorRT-LLM's published MTP acceptance (1.82 drafts a step) against a B300 8K TTFT over a B200 1K "
       "TTFT (286.387 / 157.384 ms, InferenceX run 26306422380, added 2026-11-28)"
       for where in ("points.csv trtllm_h200_min_latency", "points.csv trtllm_b200_min_latency",
                     "latency_points.csv trtllm_h200_min_latency_tpot", "latency_points.csv trtllm_b200_min_latency_tpot")},
    ("constant serving.ctx_ratio",
     "latency_points.csv ix_b200_sglang_1k1k_c1_agg_tpot / latency_points.csv ix_b300_sglang_1k1k_c1_tpot"):
        "coincidence: the simulator's decode-context grid ratio (1.02) against a B200 TPOT over a B300 TPOT of the same "
        "run (7.183 / 7.041 ms, added 2026-11-28)",
    ("anchors.csv Ascend910C mla_prefill published / fp16_tflops",
     "latency_points.csv ix_b200_trt_1k1k_c16_agg_tpot / latency_points.csv ix_h200_trt_1k1k_c1536_tpot"):
        "coincidence: torch_npu's flash attention on a 910B2 over the die's BF16 peak (150.78 / 353.9 = 0.4261) against a "
        "B200 TPOT over an H200 TPOT (17.118 / 40.172 ms, the former added 2026-11-28): unrelated runs on other hardware",
    ("constant serving.prefill_ratio",
     "latency_points.csv ix_b200_sglang_1k1k_c1024_tpot / latency_points.csv ix_mi300x_sglang_fp8_8k1k_c4_tpot"):
        "coincidence: the simulator's numerical grid of prefill buckets +-2.2% wide (1.0442) against a B200 TPOT over an MI300X "
        "TPOT (30.034 / 28.779 ms, the latter added 2026-11-26), two unrelated runs on different GPUs",
    ("efficiency/B200.csv gemm_fp8 fp8 m=32768 n=576 k=7168 latency_us",
     "latency_points.csv trtllm5929_b200_fp4_1600_epnone_ttft"):
        "coincidence: a derived B200 FP8 GEMM time (160.989 us, the H800 DeepGEMM curve scaled to vllm PR #19566's "
        "B200 figure) against a B200 TTFT (161.04 ms, TensorRT-LLM issue #5929, a point added 2026-11-27 after the "
        "table was derived); other units, other sources",
    ("anchors.csv Ascend910C mla_decode published / fp16_tflops",
     "latency_points.csv trtllm5929_b200_fp4_1600_ep8_ttft / latency_points.csv ix_mi300x_sglang_fp8_1k1k_c64_ttft"):
        "coincidence: the AMLA paper's Ascend MLA decode per die over the die's BF16 peak (0.8675) against a B200 "
        "TTFT over an MI300X TTFT (172.65 / 199.019 ms, the first added 2026-11-27): unrelated runs on other hardware",
    ("points.csv cannrecipes_a3_decode assumed text", "latency_points.csv trtllm5929_h200_fp8_1600_ep8_itl"):
        "coincidence: the month in the text's dates (2026-11-27) against an H200 ITL of 0.011 s (11 ms, "
        "TensorRT-LLM issue #5929)",
    ("points.csv cannrecipes_a3_prefill assumed text", "latency_points.csv trtllm5929_h200_fp8_1600_ep8_itl"):
        "coincidence: the month in the text's dates (2026-11-27) against an H200 ITL of 0.011 s (11 ms, "
        "TensorRT-LLM issue #5929)",
    # Run 21831958748's GB300 rows (added 2026-11-29, after every table row, anchor and constant below was set):
    # table times in microseconds sharing four digits with latencies in ms, and ratios of unrelated latencies.
    **{(where, figure): f"coincidence: {what}, where a GB300 SGLang latency of InferenceX run 21831958748 was added "
       "2026-11-29, after the input was set: other units or other runs, other sources"
       for where, figure, what in (
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=208 n=7168 k=2048 latency_us",
            "latency_points.csv ix_gb300_sglang_1k1k_c2048_tpot", "a tuned aiter FP8 GEMM time (20.2983 us)"),
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=144 n=8192 k=1536 latency_us",
            "latency_points.csv ix_gb300_sglang_8k1k_c128_tpot", "a tuned aiter FP8 GEMM time (15.2497 us)"),
           ("efficiency/MI355X.csv gemm_fp8 fp8 m=1 n=7168 k=4608 latency_us",
            "latency_points.csv ix_gb300_sglang_1k1k_c32_tpot", "a tuned aiter FP8 GEMM time (12.4013 us)"),
           ("measured/H200.csv mla_prefill bf16 m=8192 kv_len=8192 heads=128 latency_us",
            "latency_points.csv ix_gb300_sglang_1k1k_c6144_ttft", "an MLA prefill time timed on an H200 (4376.17 us)"),
           ("anchors.csv B200 mla_prefill published / fp16_tflops",
            "latency_points.csv ix_gb300_sglang_8k1k_c4_ttft / latency_points.csv ix_mi300x_sglang_fp8_8k1k_c64_ttft",
            "FlashMLA's B200 prefill figure over the BF16 peak (0.6489) against a GB300 TTFT over an MI300X TTFT"),
           ("anchors.csv RTX4090 gemm_fp8 grouped_contiguous grouped_masked published / fp8_tflops",
            "latency_points.csv ix_gb300_sglang_1k1k_c2048_tpot / latency_points.csv ix_mi325x_sglang_fp8_1k1k_c64_tpot",
            "an RTX 4090 FP8 GEMM figure over its peak (0.4541) against a GB300 TPOT over an MI325X TPOT"),
           ("constant serving.prefill_ratio",
            "latency_points.csv trtllm5929_b200_fp4_8192_ep8_ttft / latency_points.csv ix_gb300_sglang_8k1k_c4_ttft",
            "the simulator's prefill bucket grid (1.0442) against a B200 TTFT over a GB300 TTFT"),
           ("constant serving.prefill_ratio",
            "latency_points.csv ix_b300_sglang_1k1k_c64_tpot / latency_points.csv ix_gb300_sglang_1k1k_c2048_tpot",
            "the simulator's prefill bucket grid (1.0442) against a B300 TPOT over a GB300 TPOT"),
           *((f"{where} mtp_accepted", ratio, "TensorRT-LLM's published MTP acceptance (1.82 drafts a step) against a "
              "ratio of two latencies or rates of other runs")
             for where in ("points.csv trtllm_h200_min_latency", "points.csv trtllm_b200_min_latency",
                           "latency_points.csv trtllm_h200_min_latency_tpot",
                           "latency_points.csv trtllm_b200_min_latency_tpot")
             for ratio in ("latency_points.csv ix_gb300_sglang_1k1k_c32_tpot / latency_points.csv "
                           "trtllm5929_b200_fp4_1600_ep8_itl",)))},
    # The H200 SGLang single-node rows of InferenceX runs 25980019087 and 23552373331 (added 2026-11-29,
    # after every input below was set): table times in microseconds sharing four digits with TPOTs in ms,
    # and ratios of unrelated latencies.
    **{(where, figure): f"coincidence: {what}, where an H200 SGLang latency of InferenceX was added 2026-11-29, "
       "after the input was set: other units or other runs, other sources"
       for where, figure, what in (
           ("efficiency/B200.csv grouped_masked fp8 m=128 n=7168 k=2048 groups=1 latency_us",
            "latency_points.csv ix_h200_sglang_1k8k_c4_agg_tpot", "a derived B200 masked grouped GEMM time (10.265 us)"),
           ("efficiency/H800.csv gemm_fp8 fp8 m=128 n=1536 k=7168 latency_us",
            "latency_points.csv ix_h200_sglang_1k1k_c8_agg_tpot", "an H800 DeepGEMM time (11.714 us)"),
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=128 n=7168 k=2048 latency_us",
            "latency_points.csv ix_h200_sglang_1k1k_c8_agg_tpot", "a tuned aiter FP8 GEMM time (11.7098 us)"),
           ("anchors.csv B200 mla_prefill published / fp16_tflops",
            "latency_points.csv ix_h200_sglang_1k8k_c16_agg_tpot / latency_points.csv ix_mi300x_sglang_fp8_1k1k_c4_tpot",
            "FlashMLA's B200 prefill figure over the BF16 peak (0.6489) against an H200 TPOT over an MI300X TPOT"),
           ("anchors.csv Ascend910C mla_prefill published / fp16_tflops",
            "latency_points.csv ix_b300_sglang_1k1k_c1_ttft / latency_points.csv ix_h200_sglang_1k8k_c32_agg_ttft",
            "torch_npu's flash attention over the die's BF16 peak (0.4261) against a B300 TTFT over an H200 TTFT"),
           ("points.csv sglang_h20_ep16_bs12_mtp2 mtp_accepted",
            "latency_points.csv ix_h200_sglang_1k8k_c32_agg_ttft / latency_points.csv ix_mi355x_sglang_fp4_1k1k_c4_ttft",
            "SGLang's published H20 MTP acceptance (1.55) against an H200 TTFT over an MI355X TTFT"),
           *((f"constant {c}", "latency_points.csv ix_h200_sglang_1k8k_c4_agg_tpot / latency_points.csv "
              "ix_b200_trt_1k1k_c16_agg_tpot", "the default efficiency (0.6) against an H200 TPOT over a B200 TPOT")
             for c in ("grounded.DEFAULT_EFFICIENCY", "serving.simulate(default_efficiency=)")),
           *(("constant serving.prefill_ratio", ratio, "the simulator's prefill bucket grid (1.0442) against a ratio "
              "of two latencies") for ratio in (
               "latency_points.csv ix_h200_sglang_1k8k_c16_agg_ttft / latency_points.csv ix_h200_sglang_1k8k_c8_agg_ttft",
               "latency_points.csv ix_h200_sglang_1k8k_c32_agg_tpot / latency_points.csv ix_b300_sglang_1k1k_c64_tpot")),
           *((f"{where} mtp_accepted", ratio, "TensorRT-LLM's published MTP acceptance (1.82 drafts a step) against a "
              "ratio of two latencies of other runs")
             for where in ("points.csv trtllm_h200_min_latency", "points.csv trtllm_b200_min_latency",
                           "latency_points.csv trtllm_h200_min_latency_tpot",
                           "latency_points.csv trtllm_b200_min_latency_tpot")
             for ratio in ("latency_points.csv ix_b200_trt_8k1k_c16_agg_tpot / latency_points.csv "
                           "ix_h200_sglang_8k1k_c4_agg_tpot",
                           "latency_points.csv ix_h200_sglang_8k1k_c8_agg_ttft / latency_points.csv "
                           "trtllm5929_b200_fp4_1600_ep8_ttft")))},
    ("points.csv cannrecipes_a3_decode assumed text", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: cann-recipes-infer's benchmark config generates 100 new tokens (max_new_tokens, "
        "decode_r1_rank_128_128ep_a8w8c8_mtp_benchmark.yaml), against an ITL of 'approximately 100 ms'",
}


def exemption(m: "Match") -> str | None:
    """Why a match stays (EXEMPT), or None."""
    return EXEMPT.get((m.where, m.figure.split(" = ")[0]))


class Figure(NamedTuple):
    name: str      # "<file> <point>"
    value: float
    unit: str      # what it counts, from its metric's declaration (tokens/s or ms)


def published_figures() -> list[Figure]:
    """Every published validation figure, peak and latency sections, with its unit."""
    return ([Figure(f"points.csv {p['point']}", p["published"], validation.PEAK_METRICS[p["metric"]].unit)
             for p in validation.load_points()]
            + [Figure(f"latency_points.csv {p['point']}", p["published"],
                      validation_latency.METRIC_READS[p["metric"]].unit)
               for p in validation_latency.load_latency_points()])


def sig(v: float, digits: int = DIGITS) -> float:
    """v rounded to `digits` significant digits."""
    return float(f"{v:.{digits - 1}e}")


class Match(NamedTuple):
    where: str
    value: float
    figure: str   # the published figure, or the ratio of two, it equals


def guard(inputs: Iterable[Input], figures: list[Figure] = None) -> list[Match]:
    """The inputs equal (at DIGITS significant digits) to a published figure, and the dimensionless
    inputs equal to a ratio of two different published figures in the same unit; empty when none is.

    Only like figures make a ratio an input could have been taken from (a speed-up, a share of a
    peak): a TTFT in ms over a throughput in tokens/s is no fraction of anything. Across units the
    ~30,000 ratios of the figures fill about a quarter of the 4-digit values in each decade, so every
    batch of new figures met some dimensionless input by chance alone."""
    figures = published_figures() if figures is None else figures
    by_value = {}
    for f in figures:
        by_value.setdefault(sig(f.value), []).append(f"{f.name} = {f.value:g}")
    ratios = {}
    for fa, fb in itertools.permutations(figures, 2):
        if fa.unit == fb.unit and sig(fa.value) != sig(fb.value):
            ratios.setdefault(sig(fa.value / fb.value), []).append(
                f"{fa.name} / {fb.name} = {fa.value:g} / {fb.value:g}")
    out = []
    for x in inputs:
        if x.value == 0:
            continue
        key = sig(abs(x.value))
        for name in by_value.get(key, ()):
            out.append(Match(x.where, x.value, name))
        # 1 is the neutral value of a dimensionless input (a clock at its rating, balanced routing):
        # any two published figures within 0.05% of each other give it, which says nothing of where
        # the input came from, so it is held to the published figures alone.
        if x.dimensionless and key != 1:
            for name in ratios.get(key, ()):
                out.append(Match(x.where, x.value, name))
    return out
