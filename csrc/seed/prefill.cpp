#include "seed/prefill.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/block_costs.hpp"

namespace dsperf {

void PrefillParams::validate(const DeviceSpec& device) const {
    if (!(seq_len > 0)) throw std::invalid_argument("seq_len must be positive");
    if (!(kv_cache_hit >= 0 && kv_cache_hit < 1))
        throw std::invalid_argument("kv_cache_hit must lie in [0, 1), got " + std::to_string(kv_cache_hit));
    if (tp < 1) throw std::invalid_argument("tp must be >= 1");
    if (dp < 1) throw std::invalid_argument("dp must be >= 1");
    if (device.gpus_per_node % tp != 0)
        throw std::invalid_argument("tp (" + std::to_string(tp) + ") must divide the " +
                                    std::to_string(device.gpus_per_node) + " GPUs of a node");
    if ((tp * dp) % device.gpus_per_node != 0)
        throw std::invalid_argument("dp: tp * dp = " + std::to_string(tp * dp) +
                                    " GPUs must fill whole nodes of " +
                                    std::to_string(device.gpus_per_node));
    if (dispatch_nodes < 1) throw std::invalid_argument("dispatch_nodes must be >= 1");
}

namespace {

// Tokens the layers after the prefix cache compute.
double computed_tokens(const PrefillParams& p, const Fixes& fx) {
    return fx.has(Fix::PrefillSkipCachedTokens) ? p.seq_len * (1 - p.kv_cache_hit) : p.seq_len;
}

double allreduce_ms(const ModelConfig& m, const DeviceSpec& d, double tokens, int tp, const Fixes& fx) {
    double bytes = tokens * m.dim * 2;  // BF16 activations
    // The seed charges the whole buffer once, whatever the TP; a ring moves 2 (tp - 1) / tp of it.
    if (fx.has(Fix::RingAllReduce)) bytes *= 2.0 * (tp - 1) / tp;
    return traffic_ms(fx, bytes, d.nvlink_eff());
}

}  // namespace

PrefillMla prefill_mla(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, int tp, const Fixes& fx) {
    const int comm = d.comm_sms_prefill;
    const double fresh = p.seq_len * (1 - p.kv_cache_hit);
    MlaFlops f;
    if (fx.has(Fix::PrefillCausalAttention)) {
        f = fx.has(Fix::PrefillSkipCachedTokens) ? mla_flops_causal(fresh, p.seq_len - fresh, m)
                                                 : mla_flops_causal(p.seq_len, 0, m);
    } else {
        // The seed's printed table: q_len = kv_len = seq_len over the full square, the hit rate
        // discounting only the KV down-projection.
        const double q_len = fx.has(Fix::PrefillSkipCachedTokens) ? fresh : p.seq_len;
        f = mla_flops(q_len, p.seq_len, m, p.kv_cache_hit);
    }
    PrefillMla r;
    r.gemm_ms = f.gemm_fp8_gflop / d.fp8_tflops_eff(comm);
    r.attn_ms = f.attn_fp16_gflop / d.fp16_tflops_eff(comm);
    r.compute_ms = r.gemm_ms + r.attn_ms;
    // The seed prints one all-reduce figure per device, whatever the TP; TP1 never adds it.
    r.allreduce_ms = allreduce_ms(m, d, computed_tokens(p, fx), tp, fx);
    r.time_ms = tp == 1 ? r.compute_ms : r.compute_ms / tp + r.allreduce_ms;
    return r;
}

PrefillResult prefill(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, const Fixes& fx) {
    m.validate();
    d.validate();
    p.validate(d);
    const int comm = d.comm_sms_prefill;
    const double gpus = double(p.tp) * p.dp;
    const double dp_per_node = double(d.gpus_per_node) / p.tp;
    const double tokens = computed_tokens(p, fx);

    PrefillResult r;
    r.nodes = gpus / d.gpus_per_node;
    r.mla = prefill_mla(m, d, p, p.tp, fx);
    // The seed runs the dense layers on one GPU (TP1) per DP group.
    const bool dense_tp = fx.has(Fix::DenseLayersAtTp);
    r.dense_mla_ms = dense_tp ? r.mla.time_ms : r.mla.compute_ms;
    r.dense_mlp_ms = dense_mlp_gflop(m, dense_tp ? tokens / p.tp : tokens) / d.fp8_tflops_eff(comm);

    const double shared_tokens = p.dp * tokens / gpus;
    const double routed_tokens = tokens * p.dp * m.n_activated_experts / gpus;
    r.shared_expert_ms = expert_gflop(m, shared_tokens) * m.n_shared_experts / d.fp8_tflops_eff(comm);
    r.routed_expert_ms = expert_gflop(m, routed_tokens) / d.fp8_tflops_eff(comm);

    // A token reaches dispatch_nodes nodes (DeepSeek-V3's node-limited routing). The seed sends
    // it to dispatch_nodes - 1 others; with the fix, min(dispatch_nodes, nodes) are reached and
    // its own node is among them with probability reached / nodes.
    double remote = p.dispatch_nodes - 1;
    if (fx.has(Fix::DispatchRemoteOnly)) {
        const double reached = std::min<double>(p.dispatch_nodes, r.nodes);
        remote = reached - reached / r.nodes;
    }
    const double tokens_out = remote * dp_per_node * tokens;
    const double dispatch_bytes = m.dim + (fx.has(Fix::DispatchFp8Scales) ? m.dim / 128.0 * 4 : 0.0);
    const double node_bw = d.scaleout_eff() * d.gpus_per_node;
    r.dispatch_ms = traffic_ms(fx, tokens_out * dispatch_bytes, node_bw);
    r.combine_ms = traffic_ms(fx, tokens_out * m.dim * 2.0, node_bw);  // BF16

    const double dense = double(m.n_dense_layers) * (r.dense_mla_ms + r.dense_mlp_ms);
    const double moe_compute = r.mla.time_ms + r.shared_expert_ms + r.routed_expert_ms;
    const double moe_comm = r.dispatch_ms + r.combine_ms;
    const double n_moe = double(m.n_moe_layers());
    // The seed's overlap hides all communication.
    const double overlapped = fx.has(Fix::OverlapBoundedByCompute) ? std::max(moe_compute, moe_comm) : moe_compute;
    r.sum_overlap_ms = dense + n_moe * overlapped;
    r.sum_ms = dense + n_moe * (moe_compute + moe_comm);

    const double prompt_tokens = p.dp * p.seq_len;
    const double fresh_tokens = prompt_tokens * (1 - p.kv_cache_hit);
    r.tokens_per_s_node_overlap = prompt_tokens * 1000 / r.sum_overlap_ms / r.nodes;
    r.tokens_per_s_node = prompt_tokens * 1000 / r.sum_ms / r.nodes;
    r.computed_tokens_per_s_node_overlap = fresh_tokens * 1000 / r.sum_overlap_ms / r.nodes;
    r.computed_tokens_per_s_node = fresh_tokens * 1000 / r.sum_ms / r.nodes;
    // KV cache produced per second, FP8. The seed multiplies by one layer's 576 bytes and divides
    // by 2^20 (MiB/s, printed as GB/s).
    double per_token = double(m.kv_cache_width());
    if (fx.has(Fix::KvTransferAllLayers)) per_token *= m.n_layers;
    per_token = fx.has(Fix::DecimalUnits) ? per_token / 1e9 : per_token / 1024 / 1024;
    r.kv_transfer_gbps_overlap = r.tokens_per_s_node_overlap * per_token;
    r.kv_transfer_gbps = r.tokens_per_s_node * per_token;
    return r;
}

}  // namespace dsperf
