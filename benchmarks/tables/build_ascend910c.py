"""Write python/dsperf/data/efficiency/Ascend910C.csv: the Ascend 910C kernel table, from the
Ascend kernel figures that are published at a source this project could read.

    PYTHONPATH=python python benchmarks/tables/build_ascend910c.py [--check]

What is published, and what it can give
---------------------------------------
No per-shape benchmark of Ascend's attention or grouped-matmul kernels (a latency or TFLOPS at each
batch and context) could be read at its source for this table. What could be read is one best-case
figure of the attention core, per-EP dispatch/combine bandwidths, and the GEMMs of one W8A8
DeepSeek-V3 profile (below):

- arXiv 2509.25224 (AMLA, Huawei, 2025-09), abstract: the AMLA MLA decode kernel on "Ascend 910
  NPUs (integrated in CloudMatrix384)" reaches "up to 614 TFLOPS, reaching 86.8% of the
  theoretical maximum FLOPS". 614 / 0.868 = 707 TFLOPS, which is one 910C package's dense BF16
  peak (two dies of 353.9 TFLOPS = 707.8), not a die's (353.9, below 614) and not the FP16 peak
  (752: 614 / 752 = 81.6%). A dsperf "GPU" of this device is one die, the device a rank runs on
  (Ascend910C.toml: fp16_tflops = 353.9, gpus_per_chip = 2), so the anchor is the figure per die,
  614 / 2 = 307 TFLOPS = 0.8675 of the die's fp16_tflops. The shape of that best case is not in
  the abstract.

A best-case figure without its shape is an anchor of the transfer rule (dsperf.model.derive_table,
the same rule as the B200 table): every H800 FlashMLA decode row (InferSim, measured per shape)
keeps its efficiency relative to the best H800 row, scaled to the published Ascend best. The rows
are written with basis = derived and name both sources. The published figure is typed in below
and must agree with its row in python/dsperf/data/anchors.csv, which the rule reads.

Measured rows: dispatch and combine
------------------------------------
sgl-project/sgl-kernel-npu's README ("DeepEP-Ascend Performance", table added by commit b2e93094,
2025-09-26, "Add performace of normal and low latency dispatch/combine comm (#106)"; the same
figures at f425bdf1) gives DeepEP's Ascend port timed on an A3 384 SuperPOD over HCCS: normal
kernels at 4096 tokens per batch, hidden 7168, top-8, INT8 dispatch and BF16 combine, the
bottleneck bandwidth at EP 8, 16, 32, 64 and 128 (dispatch 146 / 107 / 102 / 81 / 57 GB/s, combine
125 / 103 / 95 / 91 / 81 GB/s). They are written as measured dispatch_normal / combine_normal rows
at the EP published, with link_gbps = 196 (one die's Unified Bus, Ascend910C.toml): a rank of that
test is one die (an A3 node exposes each 910C die as one device), which is one GPU here, and the
row is read as a fraction of the rank's link, as the H800 rows are scaled to a device's NVLink. They
price this device's calls inside its UB domain (calls between domains would read the network table's).
The same README's low-latency kernels ("Low-Latency Kernels with Pure HCCS", same commits: 128
tokens per batch, hidden 7168, top-8, INT8 dispatch and BF16 combine) are 6 measured rows too:
dispatch 58 / 55 / 49 GB/s (132 / 139 / 153 us) and combine 116 / 109 / 97 GB/s (126 / 135 / 151 us)
at EP 8 / 16 / 32, read against a die's UB link likewise. With low-latency rows of its own, the
device's decode inside its UB domain runs the low-latency kernels (as cann-recipes-infer's decode runs
npu_moe_distribute_dispatch_v2 / combine_v2) instead of the normal kernels' EP8 row; beyond EP32 the
lookup clamps to the EP32 row and says so.

Measured rows: GEMMs from a profile
-----------------------------------
Horacehxw/msModeling, a personal fork of Ascend/msmodeling (commit 39df672b), publishes the per-shape
kernel durations of a profile of DeepSeek-V3 W8A8 served by vLLM 0.15.0 on CANN 8.5 in aclgraph mode
(docs/perf_database/reports/profiling_analysis_aclgraph/per_shape_cv_output.txt; the setup in
report_op_stability_zh.md: TP=8, DP=2, EP, at most 8 sequences, 4,096-token inputs, hardware named
"Atlas 800 A3 (Ascend 910B)"). Its QuantBatchMatmulV3 (INT8) and MatMulV2 (BF16) shapes are the
PROFILE_GEMMS rows below, as printed there (mean us, calls, CV); n and k come from the weight's NZ
shape. A rank is read as one die. The INT8 rows are gemm_fp8 rows: the device's 8-bit path, priced
at its INT8 peak. Not taken from it: the absorbed per-head batched matmuls (16 heads in one call: a
GEMM row has no head count), FusedInferAttentionScore (BF16 cache; its context is not stated), and
the experts (inside the fused DispatchFFNCombine kernel, no grouped-matmul time of their own).

Not used, and why:
- the operator-level figures of the CloudMatrix384 paper (arXiv 2506.12708: MLA compute and
  memory utilisation, INT8 GEMM utilisation, dispatch/combine latency by EP size) could only be
  read here in secondary summaries, not in the paper's own tables (the stored copies of its HTML
  version hold its first page only); the AMLA paper's per-shape results likewise (abstract only);
- Ascend/msmodeling's profiling database (ATLAS_800_A3_752T_128G_DIE: GroupedMatmul,
  FusedInferAttentionScore, ... per shape) is stored as Git LFS pointers, its figures absent (so in
  the forks searched, 2026-11-27);
- cann-recipes-infer's DeepSeek-R1 documents give deployment figures only, no per-operator time;
- hw-native-sys/pypto-lib issue #1054 gives msprof per-operator decode times, but of DeepSeek-V4-Flash
  on an Ascend 950PR: another chip and model, not rows of the 910C's table;
- the deployment figures of that paper and of cann-recipes-infer (tokens/s per NPU, TPOT) are
  validation points (data/validation/points.csv) and never inputs.
So the MLA prolog's fused form, the grouped matmul, the INT8 attention core and the rest still run at
the default efficiency.
"""
from __future__ import annotations

# The installed dsperf (as the other scripts): a source tree's dsperf has no built extension.
from dsperf.model import derive_table  # noqa: E402
from dsperf.model.devices import load_device  # noqa: E402

DEVICE = "Ascend910C"
# (family, published figure, unit, fraction of peak as published, where it was published)
PUBLISHED = [
    ("mla_decode", 614.0, "TFLOPS", 0.868,
     "arXiv 2509.25224 (AMLA: MUL by ADD in FlashAttention Rescaling), abstract"),
]
# Published per die (a 910B2 die, the 910C's kind): (family, figure, unit, fraction of the die's BF16 peak as
# published, where it was published). The anchor is the figure itself.
PUBLISHED_PER_DIE = [
    ("mla_prefill", 150.78, "TFLOPS", 0.4260,
     "hw-native-sys/pto-isa kernels/manual/common/flash_atten/README.md, 910B2 table, torch_npu at 32,768 tokens"),
]
# Measured on the device: (family, EP as published, GB/s as published). sgl-project/sgl-kernel-npu
# README.md, "Normal Kernels with Pure HCCS".
DEEPEP_ASCEND_NORMAL = [
    ("dispatch_normal", 8, 146), ("dispatch_normal", 16, 107), ("dispatch_normal", 32, 102),
    ("dispatch_normal", 64, 81), ("dispatch_normal", 128, 57),
    ("combine_normal", 8, 125), ("combine_normal", 16, 103), ("combine_normal", 32, 95),
    ("combine_normal", 64, 91), ("combine_normal", 128, 81),
]
# "Low-Latency Kernels with Pure HCCS": (family, EP, GB/s as published) at 128 tokens per rank.
DEEPEP_ASCEND_LOW_LATENCY = [
    ("dispatch_ll", 8, 58), ("dispatch_ll", 16, 55), ("dispatch_ll", 32, 49),
    ("combine_ll", 8, 116), ("combine_ll", 16, 109), ("combine_ll", 32, 97),
]
DIE_UB_GBPS = 196.0  # one die's Unified Bus link (Ascend910C.toml's nvlink_gbps: a GPU here is a die)
DEEPEP_ASCEND_SOURCE = (
    "sgl-project/sgl-kernel-npu README.md, DeepEP-Ascend Performance, Normal Kernels with Pure HCCS (table added "
    "by commit b2e93094, 2025-09-26; same figures at f425bdf1): DeepEP's Ascend port on an A3 384 SuperPOD, "
    "intranode over HCCS, 4096 tokens per batch, hidden 7168, top-8 experts, INT8 dispatch, BF16 combine; "
    "bottleneck bandwidth per rank at the EP given (ranks; a rank assumed to be one 910C die) "
    "[link_gbps: one die's UB link, Ascend910C.toml]")


DEEPEP_ASCEND_LL_SOURCE = (
    "sgl-project/sgl-kernel-npu README.md, DeepEP-Ascend Performance, Low-Latency Kernels with Pure HCCS (table "
    "added by commit b2e93094, 2025-09-26; same figures at f425bdf1): DeepEP's Ascend port on an A3 384 SuperPOD, "
    "128 tokens per batch, hidden 7168, top-8 experts, INT8 dispatch, BF16 combine; bandwidth per rank at the EP "
    "given (ranks: one 910C die each) [link_gbps: one die's UB link, Ascend910C.toml]")


# GEMMs timed in a profile of DeepSeek-V3 W8A8 serving on an A3 (see PROFILE_SOURCE): (family, m, n,
# k, mean us, the operator and its input shapes as the profile prints them, calls, CV). The int8
# weights are in the NZ layout [n / 32, k / 16, 16, 32] (INT8) or [k / 16, n / 16, 16, 16] (BF16), their
# per-channel scale [n]; x is [m, k]. W8A8 runs on the device's 8-bit path, which dsperf prices as
# gemm_fp8 at the INT8 peak (Ascend910C.toml's fp8_tflops).
PROFILE_GEMMS = [
    # decode (input 4,096, output 1,536)
    ("gemm_fp8", 1, 2112, 7168, 28.202, 'QuantBatchMatmulV3 "1,7168;66,448,16,32;2112;2112"', 305, 0.0262),
    ("gemm_fp8", 1, 4096, 7168, 32.098, 'QuantBatchMatmulV3 "1,7168;128,448,16,32;4096;1"', 290, 0.0603),
    ("gemm_fp8", 8, 7168, 2048, 22.942, 'QuantBatchMatmulV3 "8,2048;224,128,16,32;7168;7168"', 305, 0.0214),
    ("gemm_fp8", 1, 7168, 2048, 19.506, 'QuantBatchMatmulV3 "1,2048;224,128,16,32;7168;1"', 290, 0.0333),
    ("gemm_fp8", 5, 3072, 1536, 15.803, 'QuantBatchMatmulV3 "5,1536;96,96,16,32;3072;3072"', 305, 0.0233),
    ("gemm_fp8", 8, 4608, 7168, 33.993, 'QuantBatchMatmulV3 "8,7168;144,448,16,32;4608;8"', 15, 0.0272),
    ("gemm_fp8", 8, 7168, 2304, 21.627, 'QuantBatchMatmulV3 "8,2304;224,144,16,32;7168;8"', 15, 0.0359),
    ("gemm_bf16", 1, 256, 7168, 10.890, 'MatMulV2 "1,7168;256,7168"', 290, 0.0493),
    ("gemm_bf16", 5, 16160, 7168, 221.064, 'MatMulV2 "5,7168;16160,7168"', 5, 0.0095),
    # prefill (input 4,096)
    ("gemm_fp8", 2048, 7168, 2048, 131.027, 'QuantBatchMatmulV3 "2048,2048;224,128,16,32;7168;7168"', 244, 0.0191),
    ("gemm_fp8", 256, 4096, 7168, 76.520, 'QuantBatchMatmulV3 "256,7168;128,448,16,32;4096;256"', 232, 0.0626),
    ("gemm_fp8", 2048, 3072, 1536, 55.079, 'QuantBatchMatmulV3 "2048,1536;96,96,16,32;3072;3072"', 244, 0.0259),
    ("gemm_fp8", 256, 7168, 2048, 47.466, 'QuantBatchMatmulV3 "256,2048;224,128,16,32;7168;256"', 232, 0.0676),
    ("gemm_fp8", 256, 2112, 7168, 40.319, 'QuantBatchMatmulV3 "256,7168;66,448,16,32;2112;2112"', 244, 0.0857),
    ("gemm_fp8", 2048, 4608, 7168, 251.846, 'QuantBatchMatmulV3 "2048,7168;144,448,16,32;4608;2048"', 12, 0.0122),
    ("gemm_fp8", 2048, 7168, 2304, 155.655, 'QuantBatchMatmulV3 "2048,2304;224,144,16,32;7168;2048"', 12, 0.0113),
    ("gemm_bf16", 256, 256, 7168, 20.990, 'MatMulV2 "256,7168;256,7168"', 232, 0.0192),
    ("gemm_bf16", 2048, 4096, 512, 53.003, 'MatMulV2 (weight NZ) "2048,512;32,256,16,16"', 366, 0.0220),
]
PROFILE_SOURCE = (
    "Horacehxw/msModeling (a fork of Ascend/msmodeling), docs/perf_database/reports/profiling_analysis_aclgraph/"
    "per_shape_cv_output.txt at commit 39df672b: mean kernel durations per operator and input shapes in an "
    "Ascend profile of DeepSeek-V3 W8A8 on vLLM 0.15.0, CANN 8.5, PyTorch 2.9.0 in aclgraph mode (FULL_DECODE_ONLY), "
    "TP=8, DP=2, EP, max_num_seqs 8, FUSED_MC2=1, 4,096-token inputs (report_op_stability_zh.md, same commit, "
    "which names the hardware 'Atlas 800 A3 (Ascend 910B)'; a rank read as one 910C die, as an A3 node exposes "
    "each die); {what}, {calls} calls, mean {us} us (CV {cv}) [n, k read from the NZ weight shape]")


def measured() -> list[dict]:
    """The measured rows, as read_table_rows gives them."""
    normal = [{"family": f, "ep": float(ep), "gbps": float(g), "link_gbps": DIE_UB_GBPS, "basis": "measured",
               "source": DEEPEP_ASCEND_SOURCE} for f, ep, g in DEEPEP_ASCEND_NORMAL]
    low_latency = [{"family": f, "ep": float(ep), "gbps": float(g), "link_gbps": DIE_UB_GBPS, "basis": "measured",
                    "source": DEEPEP_ASCEND_LL_SOURCE} for f, ep, g in DEEPEP_ASCEND_LOW_LATENCY]
    gemms = [{"family": f, "m": float(m), "n": float(n), "k": float(k), "dtype": "fp8" if f == "gemm_fp8" else "bf16",
              "latency_us": us, "basis": "measured",
              "source": PROFILE_SOURCE.format(what=what, calls=calls, us=us, cv=cv)}
             for f, m, n, k, us, what, calls, cv in PROFILE_GEMMS]
    return normal + low_latency + gemms


# A die's dense BF16 peak; the AMLA percentage is of the package's, two dies.
DIE_BF16_TFLOPS = 353.9
DIES_PER_PACKAGE = 2


def check() -> list[str]:
    """The published figures against the device file and anchors.csv; problems, one line each."""
    problems = []
    dev = load_device(DEVICE, "corrected")
    if abs(dev.nvlink_gbps - DIE_UB_GBPS) > 0.05:
        problems.append(f"{DEVICE}.toml nvlink_gbps is {dev.nvlink_gbps}, not one die's UB link ({DIE_UB_GBPS})")
    if abs(dev.fp16_tflops - DIE_BF16_TFLOPS) > 0.05 or dev.gpus_per_chip != DIES_PER_PACKAGE:
        problems.append(f"{DEVICE}.toml fp16_tflops / gpus_per_chip are {dev.fp16_tflops} / {dev.gpus_per_chip}, not "
                        f"a die's BF16 peak {DIE_BF16_TFLOPS} / {DIES_PER_PACKAGE}: the anchors are per die")
    anchors = {(a["table"], f): a for a in derive_table.read_anchors() for f in a["families"]}
    for family, figure, unit, fraction, where in PUBLISHED:
        peak = figure / fraction
        package = DIE_BF16_TFLOPS * DIES_PER_PACKAGE
        if abs(peak - package) / package > 0.005:
            problems.append(f"{where}: {figure} {unit} = {fraction:.1%} of {peak:.1f}, not the package BF16 peak")
        figure = figure / DIES_PER_PACKAGE  # per die: the anchor
        a = anchors.get((DEVICE, family))
        if a is None:
            problems.append(f"anchors.csv has no {DEVICE} row for {family} ({where}, {figure} {unit})")
        elif a["published"] != figure or a["peak_field"] != "fp16_tflops" or "2509.25224" not in a["source"]:
            problems.append(f"anchors.csv's {DEVICE} {family} row ({a['published']} of {a['peak_field']}) is not "
                            f"{figure} {unit} (per die) of fp16_tflops from {where}")
    for family, figure, unit, fraction, where in PUBLISHED_PER_DIE:
        if abs(figure / fraction - DIE_BF16_TFLOPS) / DIE_BF16_TFLOPS > 0.005:
            problems.append(f"{where}: {figure} {unit} = {fraction:.2%} of {figure / fraction:.1f}, not a die's BF16 peak")
        a = anchors.get((DEVICE, family))
        if a is None or a["published"] != figure or a["peak_field"] != "fp16_tflops" or "pto-isa" not in a["source"]:
            problems.append(f"anchors.csv's {DEVICE} {family} row is not {figure} {unit} of fp16_tflops from {where}")
    return problems + _grouped_anchor_problems(anchors)


def _grouped_anchor_problems(anchors) -> list[str]:
    """The grouped families' anchor is the profile's fastest INT8 GEMM per FLOP (PROFILE_GEMMS), in TOPS."""
    best = max((2 * m * n * k / (us * 1e-6) / 1e12, m, n, k) for family, m, n, k, us, *_ in PROFILE_GEMMS
               if family == "gemm_fp8")
    problems = []
    for family in ("grouped_contiguous", "grouped_masked"):
        a = anchors.get((DEVICE, family))
        if a is None or abs(a["published"] - best[0]) > 0.05 or a["peak_field"] != "fp8_tflops" \
                or f"M = {best[1]}, N = {best[2]}, K = {best[3]}" not in a["source"]:
            problems.append(f"anchors.csv's {DEVICE} {family} row is not the profile's fastest INT8 GEMM "
                            f"({best[0]:.1f} TOPS at M = {best[1]}, N = {best[2]}, K = {best[3]}) of fp8_tflops")
    return problems


def main(argv=None) -> int:
    return derive_table.builder_main(__doc__, DEVICE, measured, check, argv)


if __name__ == "__main__":
    raise SystemExit(main())
