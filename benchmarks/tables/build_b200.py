"""Write python/dsperf/data/efficiency/B200.csv: the Blackwell kernel table (B200.toml and GB200.toml
both read it), its derived rows (dsperf.model.derive_table) and the rows measured on Blackwell.

    PYTHONPATH=python python benchmarks/tables/build_b200.py [--check]

Measured rows: dispatch and combine inside an NVLink domain
------------------------------------------------------------
The network table's NVLink rows are DeepEP's normal kernels timed on H800 (153 / 158 GB/s at EP8,
deepseek-ai/DeepEP README), and a device without rows of its own scales them to its link: 900 / 200
of them on a Blackwell part (688 / 711 GB/s). DeepEP's hybrid-ep branch publishes the same kernels
timed on Blackwell (docs/README_Hybrid-EP.md, "Performance Results", read at branch head 94a9f8f6,
2026-07-10; the table's last change 17cfb81, 2026-05-13): 4,096 tokens, hidden 7,168, top-8,
uniformly random routing, 8 local experts, FP8 dispatch and BF16 combine, "algorithm bandwidth"
through the Torch API:

- B200 (one 8-GPU NVLink node), DeepEP at 16-48 SMs: 349 / 420 GB/s at 24 SMs;
- GB200 (NVL72; 4 GPUs a tray, so 8 ranks and more cross trays over the rack's NVLink), DeepEP at
  16 / 24 / 32 SMs and 8 / 16 / 24 ranks: 351 / 426, 339 / 378 and 351 / 164 GB/s at 24 SMs.

So the kernels the H800 rows measure do not scale with the link on Blackwell: at 24 SMs they move half
of what the link ratio gives (48 SMs move 554 / 586 on B200). The rows below are the 24-SM figures,
the SM count the device files hold for the normal kernels (comm_sms_prefill = 24): EP8 from the B200
platform's table (GB200's 8-rank figure agrees within 2%), 16 and 24 from GB200's. They are read as
fractions of one GPU's NVLink 5 link (900 GB/s per direction, link_gbps), inside the device's
NVLink domain at the call's own EP (a B200 node: EP8; a GB200 rack: up to 72, clamped to the EP24
row beyond it, and dsperf predict counts the call as clamped); calls between domains still read the
network table's RDMA rows. With no low-latency rows timed over NVLink, a decode inside the domain
runs at these normal kernels' rows too.

Measured rows: the routed experts in NVFP4 (grouped_fp4)
--------------------------------------------------------
The derived grouped_fp4 rows take the H800's DeepGEMM grouped curve (masked layout below 512 rows an
expert) scaled to CUTLASS's NVFP4 GEMM at M = 16,384: at a few rows an expert they stream the experts'
weights at about 2.7 TB/s (8 experts at 16 rows: 73 us for 198 MB). FlashInfer publishes the fused NVFP4
MoE that SGLang's `--moe-runner-backend flashinfer_trtllm` and TensorRT-LLM run, timed on a B200 at
DeepSeek-V3's geometry (flashinfer-ai/flashinfer, docs/design_docs/flashinfer_moe_api.md, read at
01363a68, tables "Cross-backend autotune value" and "Wide-EP: local-only MVP proxy", regenerated
2026-06-01 with benchmarks/flashinfer_benchmark.py --routine unified_nvfp4_moe; hidden 7,168,
intermediate 2,048, 256 experts, top-8, NVFP4 with SwiGLU, CUDA-graph timing): `trtllm_fp4_routed`
(pre-routed: the gate-up GEMM, the activation, the down GEMM and the finalize) at 1-16,384 tokens over
256 local experts, and at 1, 16 and 4,096 tokens routed within 16 local experts. Those stream 4.4-6.9
TB/s at a few rows an expert. The rows below are those times, read as grouped GEMMs:

- groups: the experts a step touches under uniform routing, 256 x (1 - (1 - 8/256)^tokens) (16 x
  (1 - 1/2^tokens) for the 16-expert runs), rounded to a whole expert (assumed: the benchmark draws
  its routing logits at random and prints no count); m: the rows an expert gets, 8 x tokens / groups;
- the fused block's time is split between the gate-up GEMM (n 4,096, k 7,168) and the down GEMM
  (n 7,168, k 2,048) two to one: their weight bytes and their FLOPs are both in that ratio, so the
  split holds whether a shape is memory- or compute-bound (assumed; the activation and the finalize
  ride along, and the model's separate activation-quantization call, a few us, is counted twice);
- one time per shape: at one token both runs touch 8 experts with one row each (42 and 45 us), and
  the 256-expert run's is kept.

Fewer experts a GPU: the B200 runs start at 8 experts with a row each, while the busiest GPU of an EP8
step at one request holds about 3, and a wide-EP decode GPU a handful. FlashInfer's DeepSeek MoE
benchmark (PR #4985, bench_moe_deepseek.py, its description's "Inference per-tensor run 1", printed
for `GPU: NVIDIA B300 SXM6 AC`: EP8 simulated as 32 local experts of 256, top-8, CUDA graphs and
CUPTI, its TensorRT-LLM NVFP4 column with routing and the input's FP4 quantization timed in) prints
the experts each token count touched, from 2 at one token to all 32 from 256 tokens: at 2 experts
the block takes 26 us, 13 us an expert against about 5 at 8 and more, the fixed part of a launch
that the 8-expert rows cannot show. Those thirteen times are rows too, timed on a B300 (measured_on
B300: the lookup reads each row against the roofline of the GPU that timed it, as the H800 table's
BF16 rows timed on an H200), at groups = the printed active experts and m = the rows an active
expert gets, max(tokens, active) / active (the benchmark counts tokens x 8 x 32/256 = tokens local
rows; at least one an active expert); the same 2:1 split. Routing is inside these times, as it is
where SGLang's flashinfer_trtllm runner and TensorRT-LLM call the kernel (the router's logits in, the
top-k bypassed outside it); the B200 runs leave it out (about 6 us at one token and 0.11 ms at 1,024
tokens, by the design document's own cross-check of the two entry points), so those rows price a step
a little low.

These rows replace every derived row at their two widths (derive_table.render: a measured width is
the measurement's alone), since the two curves would meet at a step. B300, GB200 and GB300 read them
as they read the rest of this table (moved by their datasheet rooflines).

Not used, and why:
- FlashInfer's PR #5301 (the same benchmark against an MXFP8 baseline; its GPU was not read): its
  TensorRT-LLM NVFP4 column agrees with PR #4985's within 9% at every token count, so it adds no shape.
- DeepEP V2 (main branch README, 2026-04): 643 / 675 GB/s at 24 SMs on an SM100 EP8 node, "logical
  bandwidth" (local traffic included), no larger EP. A different kernel released after the
  deployments this table is validated on were run (their stacks pinned DeepEP V1); a user on V2
  can add its rows the same way.
- HybridEP's own rows (same tables: 404-455 / 484-569 GB/s at 32 SMs up to 36 ranks): NVIDIA's
  kernel, not the one the H800 rows measure.
"""
from __future__ import annotations

# The installed dsperf (as the other scripts): a source tree's dsperf has no built extension.
from dsperf.model import derive_table  # noqa: E402
from dsperf.model.devices import load_device  # noqa: E402

DEVICE = "B200"
NVLINK5_GBPS = 900.0  # one Blackwell GPU's NVLink 5, per direction (B200.toml, GB200.toml nvlink_gbps)
HYBRID_EP_README = ("deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md (read at 94a9f8f6, 2026-07-10; "
                    "table last changed in 17cfb81, 2026-05-13), Performance Results, {platform} platform, DeepEP "
                    "(V1 normal kernels) through the Torch API at 24 SMs: 4,096 tokens, hidden 7,168, top-8, random "
                    "uniform routing, 8 local experts, FP8 dispatch, BF16 combine; {ranks} ranks{note} [link_gbps: one "
                    "GPU's NVLink 5 per direction]")
# (family, ranks, GB/s at 24 SMs, platform, note)
DEEPEP_BLACKWELL = [
    ("dispatch_normal", 8, 349.0, "B200", " (one 8-GPU node; GB200's 8-rank figure: 350.97)"),
    ("combine_normal", 8, 420.0, "B200", " (one 8-GPU node; GB200's 8-rank figure: 425.95)"),
    ("dispatch_normal", 16, 338.87, "GB200", " (four 4-GPU trays over the rack's NVLink)"),
    ("combine_normal", 16, 378.32, "GB200", " (four 4-GPU trays over the rack's NVLink)"),
    ("dispatch_normal", 24, 351.05, "GB200", " (six 4-GPU trays over the rack's NVLink)"),
    ("combine_normal", 24, 163.62, "GB200", " (six 4-GPU trays over the rack's NVLink)"),
]


FLASHINFER_MOE_DOC = ("flashinfer-ai/flashinfer docs/design_docs/flashinfer_moe_api.md (read at 01363a68; "
                      "regenerated 2026-06-01 on a B200 with benchmarks/flashinfer_benchmark.py --routine "
                      "unified_nvfp4_moe, CUDA-graph timing): trtllm_fp4_routed, DeepSeek-V3 geometry (hidden 7168, "
                      "intermediate 2048, 256 experts, top-8), NVFP4 + SwiGLU, {tokens} tokens over {local} local "
                      "experts: {ms} ms for the fused block [groups: experts touched under uniform routing; m: "
                      "8 x tokens / groups; the block split {share} to this GEMM by weight bytes and FLOPs, 2:1 "
                      "between gate-up and down]")
MOE_TOP_K = 8
# (tokens, local experts, ms): the table's TensorRT-LLM column. The 16-expert run's one-token time
# (0.045 ms) is at the same shape as the 256-expert run's (8 experts, one row each): the latter is kept.
FLASHINFER_FUSED_MOE = [
    (1, 256, 0.042), (16, 256, 0.365), (64, 256, 0.822), (128, 256, 0.901), (256, 256, 0.936),
    (512, 256, 0.942), (1024, 256, 1.306), (2048, 256, 1.311), (4096, 256, 1.711), (16384, 256, 4.613),
    (16, 16, 0.073), (4096, 16, 0.975),
]
# The two GEMMs of a routed expert: (n, k, share of the fused block), gate-up then down.
MOE_GEMMS = [(4096, 7168, 2 / 3), (7168, 2048, 1 / 3)]
FLASHINFER_MOE_B300 = ("flashinfer-ai/flashinfer PR #4985 (bench: compare DeepSeek MoE against pure TRTLLM BF16), "
                       "description, Inference per-tensor run 1, GPU: NVIDIA B300 SXM6 AC, bench_moe_deepseek.py with "
                       "CUDA graphs and CUPTI: TRTLLM NVFP4 (routing and the input's FP4 quantization timed), "
                       "DeepSeek-V3 geometry, EP=8 simulated as 32 local experts, {tokens} tokens touching {active} "
                       "local experts: {ms} ms for the fused block [m: max(tokens, active) / active, the benchmark's "
                       "tokens x 8 x 32/256 local rows; the block split {share} to this GEMM, 2:1 between gate-up and "
                       "down]")
# (tokens, local experts the run printed as active, ms): PR #4985's run 1, TRTLLM NVFP4.
FLASHINFER_FUSED_MOE_B300 = [
    (1, 2, 0.026), (2, 4, 0.036), (4, 7, 0.051), (8, 10, 0.064), (16, 13, 0.076), (32, 21, 0.106),
    (64, 29, 0.139), (128, 30, 0.144), (256, 32, 0.154), (512, 32, 0.164), (1024, 32, 0.295),
    (2048, 32, 0.299), (4096, 32, 0.309),
]


def experts_touched(tokens: int, local: int) -> int:
    """Experts of `local` a step of `tokens` touches under uniform top-8 routing, to a whole expert."""
    return round(local * (1 - (1 - MOE_TOP_K / local) ** tokens))


def measured() -> list[dict]:
    """The measured rows, as read_table_rows gives them."""
    rows = [{"family": f, "ep": float(ranks), "gbps": gbps, "link_gbps": NVLINK5_GBPS, "basis": "measured",
             "source": HYBRID_EP_README.format(platform=platform, ranks=ranks, note=note)}
            for f, ranks, gbps, platform, note in DEEPEP_BLACKWELL]
    share_name = lambda share: "two thirds" if share > 0.5 else "one third"  # noqa: E731
    for tokens, local, ms in FLASHINFER_FUSED_MOE:
        groups = experts_touched(tokens, local)
        for n, k, share in MOE_GEMMS:
            rows.append({"family": "grouped_fp4", "m": round(MOE_TOP_K * tokens / groups, 4), "n": float(n),
                         "k": float(k), "groups": float(groups), "dtype": "fp8",
                         "latency_us": round(ms * 1e3 * share, 3), "basis": "measured",
                         "source": FLASHINFER_MOE_DOC.format(tokens=tokens, local=local, ms=ms, share=share_name(share))})
    for tokens, active, ms in FLASHINFER_FUSED_MOE_B300:
        for n, k, share in MOE_GEMMS:
            rows.append({"family": "grouped_fp4", "m": round(max(tokens, active) / active, 4), "n": float(n),
                         "k": float(k), "groups": float(active), "dtype": "fp8",
                         "latency_us": round(ms * 1e3 * share, 3), "basis": "measured", "measured_on": "B300",
                         "source": FLASHINFER_MOE_B300.format(tokens=tokens, active=active, ms=ms,
                                                              share=share_name(share))})
    return rows


def check() -> list[str]:
    """The devices that read this table have the link its rows are read against."""
    problems = []
    for name in ("B200", "GB200"):
        dev = load_device(name, "corrected")
        if abs(dev.nvlink_gbps - NVLINK5_GBPS) > 0.05:
            problems.append(f"{name}.toml nvlink_gbps is {dev.nvlink_gbps}, not NVLink 5's {NVLINK5_GBPS}")
    return problems


def main(argv=None) -> int:
    return derive_table.builder_main(__doc__, DEVICE, measured, check, argv)


if __name__ == "__main__":
    raise SystemExit(main())
