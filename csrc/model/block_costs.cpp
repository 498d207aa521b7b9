#include "model/block_costs.hpp"

namespace dsperf {

namespace {
constexpr double kGiga = 1e9;

// Query path MACs per token up to the per-head q (nope + rope).
double q_projection_macs(const ModelConfig& m, double q_head_width) {
    if (m.q_lora_rank > 0)
        return double(m.dim) * m.q_lora_rank + double(m.q_lora_rank) * m.n_heads * q_head_width;
    return double(m.dim) * m.n_heads * q_head_width;  // no query compression
}
}  // namespace

MlaFlops mla_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit) {
    const double H = double(m.n_heads);
    const double q_proj = q_len * q_projection_macs(m, double(m.qk_head_dim()));
    const double kv_down = kv_len * m.dim * m.kv_cache_width() * (1.0 - kv_cache_hit);
    const double k_up = kv_len * double(m.kv_lora_rank) * H * m.qk_nope_head_dim;
    const double v_up = kv_len * double(m.kv_lora_rank) * H * m.v_head_dim;
    const double mha = H * q_len * kv_len * double(m.qk_rope_head_dim + m.qk_nope_head_dim + m.v_head_dim);
    const double wo = q_len * H * m.v_head_dim * m.dim;
    return {(q_proj + kv_down + k_up + v_up) * 2 / kGiga, (mha + wo) * 2 / kGiga};
}

MlaFlops mla_absorbed_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit) {
    const double H = double(m.n_heads);
    const double q_in = m.q_lora_rank > 0 ? double(m.q_lora_rank) : double(m.dim);
    // Rope part of the query projection, plus the nope part folded with W_UK into q_in x kv_lora.
    const double q_down = m.q_lora_rank > 0 ? q_len * double(m.dim) * m.q_lora_rank : 0.0;
    const double q_rope_up = q_len * q_in * H * m.qk_rope_head_dim;
    const double q_absorb = q_len * H * q_in * m.kv_lora_rank;
    const double kv_down = kv_len * m.dim * m.kv_cache_width() * (1.0 - kv_cache_hit);
    const double mqa = H * q_len * kv_len * double(m.qk_rope_head_dim + 2 * m.kv_lora_rank);
    const double o_absorb = q_len * H * m.kv_lora_rank * m.dim;
    return {(q_down + q_rope_up + q_absorb + kv_down) * 2 / kGiga, (mqa + o_absorb) * 2 / kGiga};
}

MlaFlops mla_flops_causal(double new_tokens, double cached_tokens, const ModelConfig& m) {
    const double H = double(m.n_heads);
    const double kv_len = cached_tokens + new_tokens;
    const double q_proj = new_tokens * q_projection_macs(m, double(m.qk_head_dim()));
    const double kv_down = new_tokens * m.dim * m.kv_cache_width();
    const double kv_up = kv_len * double(m.kv_lora_rank) * H * (m.qk_nope_head_dim + m.v_head_dim);
    // Sum over new queries of the keys each one sees: n*c + n(n+1)/2.
    const double score_pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2;
    const double mha = H * score_pairs * double(m.qk_head_dim() + m.v_head_dim);
    const double wo = new_tokens * H * m.v_head_dim * m.dim;
    return {(q_proj + kv_down + kv_up) * 2 / kGiga, (mha + wo) * 2 / kGiga};
}

double dense_mlp_gflop(const ModelConfig& m, double tokens) {
    return 3 * tokens * double(m.dim) * m.inter_dim * 2 / kGiga;
}

double expert_gflop(const ModelConfig& m, double tokens) {
    return 3 * tokens * double(m.dim) * m.moe_inter_dim * 2 / kGiga;
}

double gate_gflop(const ModelConfig& m, double tokens) {
    return tokens * double(m.dim) * m.n_routed_experts * 2 / kGiga;
}

double lm_head_gflop(const ModelConfig& m, double tokens) {
    return tokens * double(m.dim) * m.vocab_size * 2 / kGiga;
}

namespace {
double linear(double in, double out, bool bias) { return in * out + (bias ? out : 0.0); }
}  // namespace

ParamCounts param_counts(const ModelConfig& m, bool with_bias) {
    const double H = double(m.n_heads), D = double(m.dim);
    ParamCounts p;
    const double q_path = m.q_lora_rank > 0
                              ? linear(D, m.q_lora_rank, with_bias) +
                                    linear(m.q_lora_rank, H * m.qk_head_dim(), with_bias)
                              : linear(D, H * m.qk_head_dim(), with_bias);
    p.mla = q_path + linear(D, m.kv_cache_width(), with_bias) +
            linear(m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim), with_bias) +
            linear(H * m.v_head_dim, D, with_bias);
    const double q_in = m.q_lora_rank > 0 ? double(m.q_lora_rank) : D;
    p.mla_absorbed = (m.q_lora_rank > 0 ? D * m.q_lora_rank : 0.0) + q_in * H * m.qk_rope_head_dim +
                     H * q_in * m.kv_lora_rank + D * m.kv_cache_width() + H * m.kv_lora_rank * D;
    p.dense_mlp = 2 * linear(D, m.inter_dim, with_bias) + linear(m.inter_dim, D, with_bias);
    p.expert = 2 * linear(D, m.moe_inter_dim, with_bias) + linear(m.moe_inter_dim, D, with_bias);
    p.gate = D * m.n_routed_experts + m.n_routed_experts;
    p.embedding = double(m.vocab_size) * D;
    p.lm_head = double(m.vocab_size) * D;
    p.total = p.mla * m.n_layers + p.dense_mlp * m.n_dense_layers +
              p.expert * double(m.n_routed_experts + m.n_shared_experts) * m.n_moe_layers() +
              p.gate * m.n_moe_layers() + p.embedding + p.lm_head;
    return p;
}

double kv_cache_bytes_per_token(const ModelConfig& m, double bytes_per_element) {
    return double(m.kv_cache_width()) * m.n_layers * bytes_per_element;
}

}  // namespace dsperf
