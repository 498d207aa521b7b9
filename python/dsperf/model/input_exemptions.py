"""The matches of the input guard (dsperf.model.inputs.guard) that were looked into and stay, each
with its reason: kept apart from the guard itself because it grows with every batch of published
figures (tests/test_input_guard.py checks that each entry is still needed)."""

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
    # The B200 FP4 SGLang rows of InferenceX runs 26306422380 and 23552373331 (added 2026-11-29, after
    # every input below was set).
    **{(where, figure): f"coincidence: {what}, where a B200 FP4 SGLang latency of InferenceX was added 2026-11-29, "
       "after the input was set: other units or other runs, other sources"
       for where, figure, what in (
           ("efficiency/B200.csv gemm_fp8 fp8 m=64 n=1536 k=7168 latency_us",
            "latency_points.csv ix_b200_sglang_fp4_8k1k_c1_tpot", "a derived B200 FP8 GEMM time (6.035 us)"),
           ("anchors.csv MI300X mla_decode published / mem_bw_gbps",
            "latency_points.csv ix_mi300x_sglang_fp8_1k1k_c4_ttft / latency_points.csv ix_b200_sglang_fp4_1k8k_c128_ttft",
            "aiter's MI300X MLA decode bandwidth over the datasheet's (0.2879) against an MI300X TTFT over a B200 TTFT"),
           ("anchors.csv Ascend910C grouped_contiguous grouped_masked published / fp8_tflops",
            "latency_points.csv ix_b200_trt_8k1k_c16_agg_tpot / latency_points.csv ix_b200_sglang_fp4_1k8k_c128_tpot",
            "an Ascend grouped GEMM figure over the die's peak (0.7144) against a ratio of two B200 TPOTs of other runs"),
           ("points.csv sglang_h20_ep16_bs12_mtp2 mtp_accepted",
            "latency_points.csv trtllm5929_h200_fp8_1600_epnone_itl / latency_points.csv ix_b200_sglang_fp4_1k8k_c8_tpot",
            "SGLang's published H20 MTP acceptance (1.55) against an H200 ITL over a B200 TPOT"),
           ("constant serving.prefill_ratio",
            "latency_points.csv ix_b200_sglang_fp4_1k8k_c8_ttft / latency_points.csv ix_mi300x_sglang_fp8_1k1k_c64_ttft",
            "the simulator's prefill bucket grid (1.0442) against a B200 TTFT over an MI300X TTFT"),
       )},
    # The GB200 FP8 TensorRT-LLM rows of InferenceX run 21701654125 (added 2026-11-29, after the input was set).
    **{("constant serving.prefill_ratio", figure): "coincidence: the simulator's prefill bucket grid (1.0442, set "
       f"2026-11-26) against {what}, a GB200 FP8 TensorRT-LLM latency of InferenceX added 2026-11-29: other runs"
       for figure, what in (
           ("latency_points.csv ix_gb300_sglang_1k1k_c2048_tpot / latency_points.csv ix_gb200_trt_fp8_1k1k_c1127_tpot",
            "a GB300 SGLang TPOT over a GB200 TensorRT-LLM TPOT"),
           ("latency_points.csv ix_gb200_trt_fp8_1k1k_c27_ttft / latency_points.csv ix_mi355x_mori_fp8_1k1k_c1024_ttft",
            "a GB200 TensorRT-LLM TTFT over an MI355X TTFT"),
       )},
    **{(where, figure): f"coincidence: {what}, against a GB200 FP8 TensorRT-LLM latency of InferenceX added "
       "2026-11-29, after the input was set: other units or other runs, other sources"
       for where, figure, what in (
           ("efficiency/Ascend910C.csv gemm_bf16 bf16 m=1 n=256 k=7168 latency_us",
            "latency_points.csv ix_gb200_trt_fp8_1k1k_c27_tpot", "an Ascend router GEMM time in us (10.89)"),
           ("efficiency/MI300X.csv gemm_fp8 fp8 m=224 n=8192 k=1536 latency_us",
            "latency_points.csv ix_gb200_trt_fp8_8k1k_c333_tpot", "an aiter MI300X GEMM time in us (15.97)"),
           ("efficiency/RTX4090.csv grouped_masked fp8 m=4 n=7168 k=2048 groups=32 latency_us",
            "latency_points.csv ix_gb200_trt_fp8_1k8k_c8192_ttft", "an RTX 4090 grouped GEMM time in us (1,193)"),
           ("efficiency/RTX4090.csv grouped_masked fp8 m=32 n=7168 k=2048 groups=32 latency_us",
            "latency_points.csv ix_gb200_trt_fp8_1k8k_c8192_ttft", "an RTX 4090 grouped GEMM time in us (1,193)"),
           ("anchors.csv B200 gemm_fp8 grouped_contiguous grouped_masked published / fp8_tflops",
            "latency_points.csv ix_gb200_trt_fp8_8k1k_c6_ttft / latency_points.csv dstack_h200_sglang_3k8_c32_ttft",
            "a B200 FP8 GEMM figure over the datasheet's peak (0.5655) against a GB200 TTFT over an H200 TTFT"),
           ("anchors.csv B200 gemm_bf16 published / fp16_tflops",
            "latency_points.csv ix_b200_trt_8k1k_c1_tpot / latency_points.csv ix_gb200_trt_fp8_1k1k_c27_tpot",
            "a B200 BF16 GEMM figure over the datasheet's peak (0.6724) against a B200 TPOT over a GB200 TPOT"),
           ("points.csv sglang_h20_ep16_bs12_mtp2 mtp_accepted",
            "latency_points.csv ix_gb200_trt_fp8_1k8k_c8192_tpot / latency_points.csv ix_b200_trt_8k1k_c64_agg_tpot",
            "SGLang's published H20 MTP acceptance (1.55) against a GB200 TPOT over a B200 TPOT"),
       )},
    # The GB300 TensorRT-LLM rows of InferenceX runs 21785935852 and 21640109636 (added 2026-11-29, after every
    # input below was set; a prefill worker count of 11 is a recipe's setting): chance matches of 34 new figures.
    **{(where, figure): f"coincidence: {where} ({value}), set before a GB300 TensorRT-LLM latency of InferenceX was "
       "added on 2026-11-29, against that figure or a ratio with it: other units, runs or sources"
       for where, figure, value in (
           ('devices/B200.toml sustained_clock_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft / latency_points.csv trtllm5929_b200_fp4_8192_ep4_ttft', '0.8041'),
           ('devices/B300.toml sustained_clock_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft / latency_points.csv trtllm5929_b200_fp4_8192_ep4_ttft', '0.8041'),
           ('devices/GB200.toml sustained_clock_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft / latency_points.csv trtllm5929_b200_fp4_8192_ep4_ttft', '0.8041'),
           ('devices/GB300.toml sustained_clock_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft / latency_points.csv trtllm5929_b200_fp4_8192_ep4_ttft', '0.8041'),
           ('efficiency/H800.csv mla_prefill bf16 m=8192 kv_len=8192 heads=128 latency_us',
            'latency_points.csv ix_gb300_trt_fp4_8k1k_c72_ttft', '4538.83'),
           ('efficiency/MI300X.csv gemm_fp8 fp8 m=32 n=576 k=7168 latency_us',
            'latency_points.csv ix_gb300_trt_fp8_1k8k_c36_tpot', '11.2944'),
           ('efficiency/MI300X.csv gemm_fp8 fp8 m=48 n=576 k=7168 latency_us',
            'latency_points.csv ix_gb300_trt_fp8_1k8k_c36_tpot', '11.2859'),
           ('efficiency/RTX4090.csv gemm_fp8 fp8 m=32 n=7168 k=18432 latency_us',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft', '313.713'),
           ('anchors.csv B200 gemm_fp4 grouped_fp4 published / fp4_tflops',
            'latency_points.csv ix_h200_trt_1k1k_c3584_ttft / latency_points.csv ix_gb300_trt_fp4_1k1k_c192_ttft', '0.433814'),
           ('anchors.csv B200 gemm_fp4 grouped_fp4 published / fp4_tflops',
            'latency_points.csv ix_b200_trt_8k1k_c16_agg_tpot / latency_points.csv ix_gb300_trt_fp8_1k8k_c8192_tpot', '0.433814'),
           ('anchors.csv MI300X mla_decode published / mem_bw_gbps',
            'latency_points.csv ix_gb300_trt_fp8_8k1k_c4_tpot / latency_points.csv ix_gb300_trt_fp8_8k1k_c1229_tpot', '0.287925'),
           ('anchors.csv Ascend910C grouped_contiguous grouped_masked published / fp8_tflops',
            'latency_points.csv ix_gb300_trt_fp4_8k1k_c15_tpot / latency_points.csv trtllm5929_h200_fp8_1600_ep4_itl', '0.714362'),
           ('anchors.csv RTX4090 gemm_fp8 grouped_contiguous grouped_masked published / fp8_tflops',
            'latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_tpot / latency_points.csv sglang_h100_pd_decode_itl', '0.454133'),
           ('points.csv cloudmatrix384_decode mtp_accepted',
            'latency_points.csv ix_gb300_sglang_1k1k_c6144_tpot / latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_tpot', '0.7'),
           ('points.csv cannrecipes_a3_decode mtp_accepted',
            'latency_points.csv ix_gb300_sglang_1k1k_c6144_tpot / latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_tpot', '0.7'),
           ('latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_ttft prefill_replicas',
            'latency_points.csv trtllm5929_h200_fp8_1600_ep8_itl', '11'),
           ('latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_tpot prefill_replicas',
            'latency_points.csv trtllm5929_h200_fp8_1600_ep8_itl', '11'),
           ('constant serving.ctx_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k1k_c12_ttft / latency_points.csv ix_b300_sglang_1k1k_c16_ttft', '1.02'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_b200_sglang_fp4_8k1k_c16_tpot / latency_points.csv ix_gb300_trt_fp8_1k8k_c36_tpot', '1.0442'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot / latency_points.csv ix_b200_sglang_1k1k_c64_agg_tpot', '1.0442'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_gb300_trt_fp4_8k1k_c15_ttft / latency_points.csv trtllm5929_b200_fp4_8192_ep4_ttft', '1.0442'),
       )},
    # The B200 TensorRT-LLM disaggregated rows of InferenceX run 23438524239 (added 2026-11-29, after every input
    # below was set): chance matches of 8 new figures.
    **{(where, figure): f"coincidence: {where} ({value}), set before a B200 TensorRT-LLM latency of InferenceX was "
       "added on 2026-11-29, against that figure or a ratio with it: other units, runs or sources"
       for where, figure, value in (
           ('efficiency/B200.csv gemm_fp8 fp8 m=256 n=7168 k=18432 latency_us',
            'latency_points.csv ix_b200_trt_1k1k_c5152_tpot', '37.842'),
           ('efficiency/MI300X.csv gemm_fp8 fp8 m=128 n=8192 k=1536 latency_us',
            'latency_points.csv ix_b200_trt_8k1k_c32_tpot', '10.2882'),
           ('efficiency/MI355X.csv gemm_fp8 fp8 m=1 n=32768 k=1536 latency_us',
            'latency_points.csv ix_b200_trt_1k1k_c32_tpot', '11.0399'),
           ('anchors.csv B200 gemm_bf16 published / fp16_tflops',
            'latency_points.csv ix_b200_trt_1k1k_c4_ttft / latency_points.csv ix_h200_trt_1k1k_c1536_ttft', '0.672373'),
           ('anchors.csv RTX4090 mla_prefill published / fp16_tflops',
            'latency_points.csv ix_b200_trt_1k1k_c4_tpot / latency_points.csv ix_gb200_trt_fp8_8k1k_c6_tpot', '0.915194'),
           ('points.csv sglang_h20_ep16_bs12_mtp2 mtp_accepted',
            'latency_points.csv ix_b200_trt_1k1k_c16_agg_tpot / latency_points.csv ix_b200_trt_1k1k_c32_tpot', '1.55'),
           ('points.csv sglang_h20_ep16_bs12_mtp2 mtp_accepted',
            'latency_points.csv ix_b200_trt_1k1k_c32_ttft / latency_points.csv ix_h200_sglang_1k8k_c16_agg_ttft', '1.55'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_b200_trt_8k1k_c1_tpot / latency_points.csv ix_b200_trt_1k1k_c4_tpot', '1.0442'),
       )},
    # The GB200 NVFP4, B300 and H100 TensorRT-LLM disaggregated rows of InferenceX (added 2026-11-29 by
    # benchmarks/tables/build_ix_dynamo_trt.py, after every input below was set): chance matches of 26 new figures.
    **{(where, figure): f"coincidence: {where} ({value}), set before a GB200, B300 or H100 TensorRT-LLM latency of "
       "InferenceX was added on 2026-11-29, against that figure or a ratio with it: other units, runs or sources"
       for where, figure, value in (
           ('devices/B200.toml sustained_clock_ratio',
            'latency_points.csv dstack_h200_sglang_3k8_c32_ttft / latency_points.csv ix_h100_trt_8k1k_c308_ttft', '0.8041'),
           ('devices/B300.toml sustained_clock_ratio',
            'latency_points.csv dstack_h200_sglang_3k8_c32_ttft / latency_points.csv ix_h100_trt_8k1k_c308_ttft', '0.8041'),
           ('devices/GB200.toml sustained_clock_ratio',
            'latency_points.csv dstack_h200_sglang_3k8_c32_ttft / latency_points.csv ix_h100_trt_8k1k_c308_ttft', '0.8041'),
           ('devices/GB300.toml sustained_clock_ratio',
            'latency_points.csv dstack_h200_sglang_3k8_c32_ttft / latency_points.csv ix_h100_trt_8k1k_c308_ttft', '0.8041'),
           ('efficiency/B200.csv gemm_fp8 fp8 m=32768 n=7168 k=2048 latency_us',
            'latency_points.csv ix_gb200_trt_fp4_8k1k_c12_ttft', '422.28'),
           ('efficiency/MI355X.csv mla_decode fp8 batch=32 kv_len=23333 heads=128 q_len=1 math=fp8 latency_us',
            'latency_points.csv ix_b300_trt_1k1k_c128_ttft', '199.795'),
           ('anchors.csv B200 gemm_fp4 grouped_fp4 published / fp4_tflops',
            'latency_points.csv ix_h200_sglang_1k8k_c4_agg_tpot / latency_points.csv ix_gb200_trt_fp4_1k8k_c4096_tpot', '0.433814'),
           ('anchors.csv Ascend910C mla_decode published / fp16_tflops',
            'latency_points.csv ix_gb200_trt_fp4_1k1k_c24_tpot / latency_points.csv ix_b200_trt_1k1k_c4_agg_tpot', '0.867477'),
           ('anchors.csv MI300X mla_decode published / mem_bw_gbps',
            'latency_points.csv ix_gb200_trt_fp4_1k8k_c563_tpot / latency_points.csv ix_gb300_trt_fp8_1k8k_c8192_tpot', '0.287925'),
           ('anchors.csv MI300X mla_prefill published / fp16_tflops',
            'latency_points.csv ix_gb300_sglang_8k1k_c4_tpot / latency_points.csv ix_gb200_trt_fp4_1k8k_c4096_tpot', '0.428813'),
           ('anchors.csv MI300X mla_prefill published / fp16_tflops',
            'latency_points.csv ix_h100_trt_8k1k_c308_ttft / latency_points.csv dstack_h200_sglang_3k8_c128_ttft', '0.428813'),
           ('anchors.csv RTX4090 gemm_fp8 grouped_contiguous grouped_masked published / fp8_tflops',
            'latency_points.csv ix_mi300x_sglang_fp8_8k1k_c64_tpot / latency_points.csv ix_gb200_trt_fp4_1k1k_c24_ttft', '0.454133'),
           ('anchors.csv RTX4090 mla_decode published / mem_bw_gbps',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft / latency_points.csv dstack_h200_sglang_3k8_c4_ttft', '0.899802'),
           ('points.csv trtllm_h200_min_latency mtp_accepted',
            'latency_points.csv ix_b200_sglang_fp4_1k1k_c1_ttft / latency_points.csv ix_b300_trt_8k1k_c3072_tpot', '1.82'),
           ('points.csv trtllm_b200_min_latency mtp_accepted',
            'latency_points.csv ix_b200_sglang_fp4_1k1k_c1_ttft / latency_points.csv ix_b300_trt_8k1k_c3072_tpot', '1.82'),
           ('latency_points.csv trtllm_h200_min_latency_tpot mtp_accepted',
            'latency_points.csv ix_b200_sglang_fp4_1k1k_c1_ttft / latency_points.csv ix_b300_trt_8k1k_c3072_tpot', '1.82'),
           ('latency_points.csv trtllm_b200_min_latency_tpot mtp_accepted',
            'latency_points.csv ix_b200_sglang_fp4_1k1k_c1_ttft / latency_points.csv ix_b300_trt_8k1k_c3072_tpot', '1.82'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c4_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c4_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c32_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c32_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c128_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_mi300x_sglang_3k8_c128_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c4_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c4_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c32_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c32_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c128_ttft input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('latency_points.csv dstack_h200_sglang_3k8_c128_tpot input_len',
            'latency_points.csv ix_b300_trt_1k1k_c1280_ttft', '3200'),
           ('constant serving.ctx_ratio',
            'latency_points.csv ix_gb200_trt_fp4_1k8k_c60_ttft / latency_points.csv ix_gb300_sglang_1k1k_c2048_ttft', '1.02'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_gb300_trt_fp4_8k1k_c3228_ttft / latency_points.csv ix_b300_trt_8k1k_c3072_ttft', '1.0442'),
           ('constant serving.prefill_ratio',
            'latency_points.csv ix_gb200_trt_fp4_1k8k_c60_tpot / latency_points.csv ix_gb200_trt_fp8_1k1k_c3_tpot', '1.0442'),
       )},
    # The H100 TensorRT-LLM TEP16 rows of InferenceX run 21790074782 (added 2026-11-29 by
    # benchmarks/tables/build_ix_dynamo_trt.py once a TP group may span nodes, after every input below
    # was set): chance matches of 10 new figures.
    **{(where, figure): f"coincidence: {where} ({value}), set before an H100 TEP16 TensorRT-LLM latency of "
       "InferenceX was added on 2026-11-29, against that figure or a ratio with it: other units, runs or sources"
       for where, figure, value in (
           ('devices/Ascend910B-280T.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/Ascend910B-313T.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/Ascend910B-376T.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/Ascend910C.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/B200.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/B300.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/GB200.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/GB300.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H100.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H100.toml sustained_clock_ratio',
            'latency_points.csv ix_gb200_trt_fp8_1k1k_c2151_ttft / latency_points.csv ix_h100_trt_1k1k_c30_ttft', '0.8081'),
           ('devices/H20.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H20-3e.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H200.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H200.toml sustained_clock_ratio',
            'latency_points.csv ix_gb200_trt_fp8_1k1k_c2151_ttft / latency_points.csv ix_h100_trt_1k1k_c30_ttft', '0.8081'),
           ('devices/H800.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/H800.toml sustained_clock_ratio',
            'latency_points.csv ix_gb200_trt_fp8_1k1k_c2151_ttft / latency_points.csv ix_h100_trt_1k1k_c30_ttft', '0.8081'),
           ('devices/MI300X.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/MI325X.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/MI355X.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('devices/RTX4090.toml discount',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('efficiency/MI300X.csv gemm_fp8 fp8 m=224 n=512 k=7168 latency_us',
            'latency_points.csv ix_h100_trt_8k1k_c9_tpot', '15.704'),
           ('anchors.csv B200 gemm_fp4 grouped_fp4 published / fp4_tflops',
            'latency_points.csv ix_gb200_trt_fp8_1k8k_c564_ttft / latency_points.csv ix_h100_trt_8k1k_c6_ttft', '0.433814'),
           ('anchors.csv MI300X mla_decode published / mem_bw_gbps',
            'latency_points.csv ix_gb200_trt_fp8_1k1k_c6144_ttft / latency_points.csv ix_h100_trt_8k1k_c6_ttft', '0.287925'),
           ('anchors.csv Ascend910C grouped_contiguous grouped_masked published / fp8_tflops',
            'latency_points.csv ix_gb300_trt_fp8_8k1k_c1229_tpot / latency_points.csv ix_h100_trt_8k1k_c154_tpot', '0.714362'),
           ('points.csv sglang_h20_ep16_bs48 mtp_accepted',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('points.csv sglang_h20_ep16_bs32 mtp_accepted',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('points.csv sglang_h20_ep32_bs32 mtp_accepted',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('points.csv sglang_h20_ep32_bs8 mtp_accepted',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('points.csv sglang_h20_ep16_bs8 mtp_accepted',
            'latency_points.csv ix_h100_trt_1k1k_c30_tpot / latency_points.csv ix_gb300_trt_fp4_1k8k_c4096_tpot', '0.85'),
           ('constant step_model.memory_reserve',
            'latency_points.csv ix_gb300_trt_fp8_8k1k_c512_tpot / latency_points.csv ix_h100_trt_1k1k_c30_tpot', '0.9'),
           ('constant grounded.DEFAULT_EFFICIENCY',
            'latency_points.csv ix_h100_trt_1k1k_c30_ttft / latency_points.csv ix_gb200_trt_fp8_1k8k_c36_ttft', '0.6'),
           ('constant serving.ctx_ratio',
            'latency_points.csv ix_b200_trt_1k1k_c5152_tpot / latency_points.csv ix_h100_trt_8k1k_c154_tpot', '1.02'),
           ('constant serving.prefill_ratio',
            'latency_points.csv trtllm5929_h200_fp8_8192_epnone_itl / latency_points.csv ix_h100_trt_1k1k_c6_tpot', '1.0442'),
           ('constant serving.simulate(default_efficiency=)',
            'latency_points.csv ix_h100_trt_1k1k_c30_ttft / latency_points.csv ix_gb200_trt_fp8_1k8k_c36_ttft', '0.6'),
       )},
    ("points.csv cannrecipes_a3_decode assumed text", "latency_points.csv sglang_h100_pd_decode_itl"):
        "coincidence: cann-recipes-infer's benchmark config generates 100 new tokens (max_new_tokens, "
        "decode_r1_rank_128_128ep_a8w8c8_mtp_benchmark.yaml), against an ITL of 'approximately 100 ms'",
}
