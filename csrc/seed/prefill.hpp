// Prefill cost of one DP group's batch on a TP x DP layout with routed experts spread
// over all tp * dp GPUs (DeepSeek's EP32 prefill unit), per layer and summed over layers.
#pragma once
#include "seed/mode.hpp"
#include "hardware/device_spec.hpp"
#include "model/model_config.hpp"

namespace dsperf {

struct PrefillParams {
    double seq_len = 4383;       // prompt tokens per DP group (cache hits included)
    double kv_cache_hit = 0.563; // fraction of the prompt served by the prefix cache, in [0, 1)
    int tp = 4;                  // attention tensor parallelism, within a node
    int dp = 8;                  // attention data parallelism; tp * dp GPUs in all
    int dispatch_nodes = 4;      // node limit of DeepSeek-V3's routing (a token reaches <= 4 nodes)
    void validate(const DeviceSpec& device) const;
};

struct PrefillMla {
    double gemm_ms = 0;       // FP8 projections on one GPU (TP1)
    double attn_ms = 0;       // attention core + output projection on one GPU (TP1)
    double compute_ms = 0;    // gemm + attn (the seed's "TP1" column)
    double allreduce_ms = 0;  // TP all-reduce of the layer output
    double time_ms = 0;       // at the requested TP: compute / tp + all-reduce (tp > 1)
};
PrefillMla prefill_mla(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, int tp, const Fixes& fx);

struct PrefillResult {
    PrefillMla mla;                // at p.tp
    double dense_mla_ms = 0;       // MLA of a dense layer
    double dense_mlp_ms = 0;
    double shared_expert_ms = 0;   // per GPU, per MoE layer
    double routed_expert_ms = 0;
    double dispatch_ms = 0;        // scale-out all-to-all, per MoE layer
    double combine_ms = 0;
    double sum_overlap_ms = 0;     // all layers, communication hidden by two micro-batches
    double sum_ms = 0;             // all layers, communication exposed
    double nodes = 0;
    double tokens_per_s_node_overlap = 0;  // prompt tokens (cache hits included) per node
    double tokens_per_s_node = 0;
    double computed_tokens_per_s_node_overlap = 0;  // the tokens the cache did not serve
    double computed_tokens_per_s_node = 0;
    double kv_transfer_gbps_overlap = 0;   // KV cache produced per node (FP8), GB/s
    double kv_transfer_gbps = 0;
};
PrefillResult prefill(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, const Fixes& fx);

}  // namespace dsperf
