// Architecture of an MLA + fine-grained MoE model (DeepSeek-V2/V3/R1, Kimi-K2).
// Field names follow DeepSeek-V3's reference ModelArgs; the Python side maps
// Hugging Face config.json keys onto them.
#pragma once
#include <cstdint>
#include <string>

namespace dsperf {

// Upper bound on every integer field: far above any real model (DeepSeek-V3's largest is the
// 129280-entry vocabulary), and low enough that the cost model's int conversions and products of
// a few fields stay exact and finite.
constexpr int64_t kMaxModelField = int64_t(1) << 24;

struct ModelConfig {
    std::string name = "DeepSeek-V3";
    int64_t vocab_size = 129280;
    int64_t dim = 7168;              // hidden_size
    int64_t inter_dim = 18432;       // dense MLP intermediate size
    int64_t moe_inter_dim = 2048;    // one expert's intermediate size
    int64_t n_layers = 61;
    int64_t n_dense_layers = 3;      // first_k_dense_replace
    int64_t n_heads = 128;
    int64_t n_routed_experts = 256;
    int64_t n_shared_experts = 1;
    int64_t n_activated_experts = 8; // num_experts_per_tok
    int64_t n_expert_groups = 8;     // n_group
    int64_t n_limited_groups = 4;    // topk_group
    double route_scale = 2.5;        // routed_scaling_factor
    int64_t q_lora_rank = 1536;      // 0: queries projected straight from x (DeepSeek-V2-Lite)
    int64_t kv_lora_rank = 512;
    int64_t qk_nope_head_dim = 128;
    int64_t qk_rope_head_dim = 64;
    int64_t v_head_dim = 128;
    // The total parameter count the seed analysis quotes for this model (its 1.4 table's SUM row,
    // the sum of its own rounded row totals: 671.16e9 for DeepSeek-V3), from which its batch-size
    // code derives the "other" parameters (2.91 GB). Read by the as_published mode only; 0: none
    // quoted, the total is computed.
    double quoted_total_params = 0;

    int64_t n_moe_layers() const { return n_layers - n_dense_layers; }
    int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
    // Width of one token's latent KV-cache entry per layer: the compressed KV plus the rope key.
    int64_t kv_cache_width() const { return kv_lora_rank + qk_rope_head_dim; }

    // Throws std::invalid_argument naming the first inconsistent field.
    void validate() const;
};

}  // namespace dsperf
