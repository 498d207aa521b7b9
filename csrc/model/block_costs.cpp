#include "model/block_costs.hpp"

#include "model/mla_calls.hpp"

namespace dsperf {

namespace {
constexpr double kGiga = 1e9;

// The seed's split of a layer's FLOPs (model/mla_calls.hpp lists the calls): the projections
// (prolog and decompression) against the attention core and the output projection. `pairs`: the
// query-key pairs per head the core computes.
MlaFlops seed_split(const MlaCallList& calls, double heads, double pairs) {
    double projections = 0, attention = 0;
    for (const MlaCall& c : calls) {
        if (!c.gemm())
            attention += 2 * heads * pairs * (c.qk + c.v);
        else if (c.part == MlaPart::kOutput)
            attention += c.gemm_flops();
        else
            projections += c.gemm_flops();
    }
    return {projections / kGiga, attention / kGiga};
}

// The seed's plain and absorbed layers: the KV down-projection runs over every key that is not
// already cached (kv_len x (1 - kv_cache_hit) rows), not over the new tokens only.
MlaFlops seed_layer(MlaVariant v, double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit) {
    const MlaDims d = mla_dims(m);
    MlaRows r = mla_rows(v, q_len, kv_len);
    r.compressed = kv_len * (1.0 - kv_cache_hit);
    return seed_split(mla_layer_calls(v, d, r), d.heads, q_len * kv_len);  // the full q x kv rectangle
}
}  // namespace

MlaFlops mla_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit) {
    return seed_layer(MlaVariant::CC, q_len, kv_len, m, kv_cache_hit);
}

// The seed's absorbed block is the materialised form: q_absorb and o_absorb are weights.
MlaFlops mla_absorbed_flops(double q_len, double kv_len, const ModelConfig& m, double kv_cache_hit) {
    return seed_layer(MlaVariant::AM_CC_ME, q_len, kv_len, m, kv_cache_hit);
}

MlaFlops mla_flops_causal(double new_tokens, double cached_tokens, const ModelConfig& m) {
    const MlaDims d = mla_dims(m);
    // Sum over new queries of the keys each one sees: n*c + n(n+1)/2.
    const double pairs = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) / 2;
    return seed_split(mla_layer_calls(MlaVariant::CC, d, mla_rows(MlaVariant::CC, new_tokens, new_tokens + cached_tokens)),
                      d.heads, pairs);
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
    p.mla_wo = linear(H * m.v_head_dim, D, with_bias);
    p.mla = q_path + linear(D, m.kv_cache_width(), with_bias) +
            linear(m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim), with_bias) + p.mla_wo;
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
