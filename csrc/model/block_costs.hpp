// FLOPs and parameter counts of each block, as pure functions of the model config.
// FLOPs are 2 x multiply-accumulates, returned in GFLOP (1e9), the seed analysis' unit.
#pragma once
#include "model/model_config.hpp"

namespace dsperf {

// MLA FLOPs split the way the seed splits them: projections run as FP8 GEMMs,
// the attention core and the output projection in BF16/FP16.
struct MlaFlops {
    double gemm_fp8_gflop = 0;
    double attn_fp16_gflop = 0;
    double total_gflop() const { return gemm_fp8_gflop + attn_fp16_gflop; }
};

// Standard (non-absorbed) MLA for q_len query tokens attending to kv_len keys.
// kv_cache_hit discounts the KV down-projection of keys already in the cache.
// Attention is counted over the full q_len x kv_len rectangle, as the seed does.
MlaFlops mla_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit);

// Absorbed MLA: W_UK folded into the query side, W_UV into the output projection,
// attention run as multi-query attention over the latent cache.
MlaFlops mla_absorbed_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit);

// Causal variant for corrected prefill: new_tokens queries appended after cached_tokens
// cached keys; query i attends to cached_tokens + i + 1 keys. The up-projections
// decompress every key (new and cached); the down-projection runs on new tokens only.
MlaFlops mla_flops_causal(double new_tokens, double cached_tokens, const ModelConfig& m);

double dense_mlp_gflop(const ModelConfig& m, double tokens);  // w1, w3, w2
double expert_gflop(const ModelConfig& m, double tokens);     // one expert's w1, w3, w2
double gate_gflop(const ModelConfig& m, double tokens);       // router logits x @ W^T
double lm_head_gflop(const ModelConfig& m, double tokens);    // output projection to the vocabulary

// Parameter counts. with_bias counts a bias on every linear layer: the seed measured its
// blocks as torch nn.Linear with the default bias=True, which its 187.17M / 44.05M /
// 671.16B figures include. DeepSeek-V3's own linears have no bias.
struct ParamCounts {
    double mla = 0;           // one MLA block (standard weights)
    double mla_wo = 0;        // of which the output projection wo
    double mla_absorbed = 0;  // one MLA block with the absorbed products materialised
    double dense_mlp = 0;     // one dense MLP block
    double expert = 0;        // one expert
    double gate = 0;          // one router: weight + per-expert correction bias
    double embedding = 0;
    double lm_head = 0;
    double total = 0;         // the whole model, the seed's parameter table
};
ParamCounts param_counts(const ModelConfig& m, bool with_bias);

// Bytes of latent KV cache one token occupies over all layers.
double kv_cache_bytes_per_token(const ModelConfig& m, double bytes_per_element);

}  // namespace dsperf
