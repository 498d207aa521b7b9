#include "costmodel/prefill.hpp"

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

double allreduce_ms(const ModelConfig& m, const DeviceSpec& d, double tokens, int tp, Mode mode) {
    const double bytes = tokens * m.dim * 2;  // BF16 activations
    if (mode == Mode::AsPublished) return seed_ms(bytes, d.nvlink_eff());
    // Ring all-reduce: each GPU sends and receives 2 (tp - 1) / tp of the buffer.
    if (tp <= 1) return 0;
    return true_ms(bytes * 2.0 * (tp - 1) / tp, d.nvlink_eff());
}

}  // namespace

PrefillMla prefill_mla(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, int tp, Mode mode) {
    const int comm = d.comm_sms_prefill;
    PrefillMla r;
    MlaFlops f;
    double ar_tokens;
    if (mode == Mode::AsPublished) {
        // The seed's printed table: q_len = kv_len = seq_len, the hit rate discounting only
        // the KV down-projection.
        f = mla_flops(p.seq_len, p.seq_len, m, p.kv_cache_hit);
        ar_tokens = p.seq_len;
    } else {
        const double fresh = p.seq_len * (1 - p.kv_cache_hit);
        f = mla_flops_causal(fresh, p.seq_len - fresh, m);
        ar_tokens = fresh;
    }
    r.gemm_ms = f.gemm_fp8_gflop / d.fp8_tflops_eff(comm);
    r.attn_ms = f.attn_fp16_gflop / d.fp16_tflops_eff(comm);
    r.compute_ms = r.gemm_ms + r.attn_ms;
    // The seed prints one all-reduce figure per device, whatever the TP; TP1 never adds it.
    r.allreduce_ms = allreduce_ms(m, d, ar_tokens, tp, mode);
    r.time_ms = tp == 1 ? r.compute_ms : r.compute_ms / tp + r.allreduce_ms;
    return r;
}

PrefillResult prefill(const ModelConfig& m, const DeviceSpec& d, const PrefillParams& p, Mode mode) {
    m.validate();
    d.validate();
    p.validate(d);
    const int comm = d.comm_sms_prefill;
    const bool seed = mode == Mode::AsPublished;
    const double gpus = double(p.tp) * p.dp;
    const double dp_per_node = double(d.gpus_per_node) / p.tp;
    // Tokens the layers compute: the seed computes the whole prompt past the MLA.
    const double tokens = seed ? p.seq_len : p.seq_len * (1 - p.kv_cache_hit);

    PrefillResult r;
    r.nodes = gpus / d.gpus_per_node;
    r.mla = prefill_mla(m, d, p, p.tp, mode);
    // The seed runs the dense layers' MLA and MLP on one GPU (TP1) per DP group; corrected
    // mode splits them over the TP group like the sparse layers.
    r.dense_mla_ms = seed ? r.mla.compute_ms : r.mla.time_ms;
    r.dense_mlp_ms = dense_mlp_gflop(m, seed ? tokens : tokens / p.tp) / d.fp8_tflops_eff(comm);

    const double shared_tokens = p.dp * tokens / gpus;
    const double routed_tokens = tokens * p.dp * m.n_activated_experts / gpus;
    r.shared_expert_ms = expert_gflop(m, shared_tokens) * m.n_shared_experts / d.fp8_tflops_eff(comm);
    r.routed_expert_ms = expert_gflop(m, routed_tokens) / d.fp8_tflops_eff(comm);

    const double node_bw = d.scaleout_eff() * d.gpus_per_node;
    if (seed) {
        // Every token goes to dispatch_nodes - 1 other nodes, one FP8 byte per element.
        const double bytes = (p.dispatch_nodes - 1) * dp_per_node * tokens * m.dim;
        r.dispatch_ms = seed_ms(bytes, node_bw);
        r.combine_ms = 2 * r.dispatch_ms;
    } else {
        // A token reaches min(dispatch_nodes, nodes) nodes; its own is among them with
        // probability reached / nodes. FP8 payload carries one FP32 scale per 128 elements.
        const double reached = std::min<double>(p.dispatch_nodes, r.nodes);
        const double remote = reached - reached / r.nodes;
        const double tokens_out = remote * dp_per_node * tokens;
        r.dispatch_ms = true_ms(tokens_out * (m.dim + m.dim / 128.0 * 4), node_bw);
        r.combine_ms = true_ms(tokens_out * m.dim * 2.0, node_bw);
    }

    const double dense = double(m.n_dense_layers) * (r.dense_mla_ms + r.dense_mlp_ms);
    const double moe_compute = r.mla.time_ms + r.shared_expert_ms + r.routed_expert_ms;
    const double moe_comm = r.dispatch_ms + r.combine_ms;
    const double n_moe = double(m.n_moe_layers());
    // Seed: overlap hides all communication. Corrected: two micro-batches hide it only up to
    // the computation running beside it.
    r.sum_overlap_ms = dense + n_moe * (seed ? moe_compute : std::max(moe_compute, moe_comm));
    r.sum_ms = dense + n_moe * (moe_compute + moe_comm);

    const double prompt_tokens = p.dp * p.seq_len;
    const double fresh_tokens = p.dp * p.seq_len * (1 - p.kv_cache_hit);
    r.tokens_per_s_node_overlap = prompt_tokens * 1000 / r.sum_overlap_ms / r.nodes;
    r.tokens_per_s_node = prompt_tokens * 1000 / r.sum_ms / r.nodes;
    r.computed_tokens_per_s_node_overlap = fresh_tokens * 1000 / r.sum_overlap_ms / r.nodes;
    r.computed_tokens_per_s_node = fresh_tokens * 1000 / r.sum_ms / r.nodes;
    if (seed) {
        // The seed multiplies by one layer's 576 bytes and divides by 2^20: MiB/s, printed as GB/s.
        const double per_token = double(m.kv_cache_width()) / 1024 / 1024;
        r.kv_transfer_gbps_overlap = r.tokens_per_s_node_overlap * per_token;
        r.kv_transfer_gbps = r.tokens_per_s_node * per_token;
    } else {
        const double per_token = kv_cache_bytes_per_token(m, 1.0) / 1e9;  // all layers, FP8
        r.kv_transfer_gbps_overlap = r.tokens_per_s_node_overlap * per_token;
        r.kv_transfer_gbps = r.tokens_per_s_node * per_token;
    }
    return r;
}

}  // namespace dsperf
