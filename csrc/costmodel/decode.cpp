#include "costmodel/decode.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/block_costs.hpp"

namespace dsperf {

void DecodeParams::validate(const ModelConfig& m, const DeviceSpec& d) const {
    if (!(seq_len > 0)) throw std::invalid_argument("seq_len must be positive");
    if (!(decode_len >= 0)) throw std::invalid_argument("decode_len must be >= 0");
    if (!(batch > 0)) throw std::invalid_argument("batch must be positive");
    if (tp < 0) throw std::invalid_argument("tp must be >= 0 (0 picks the best TP)");
    if (tp > 0 && d.gpus_per_node % tp != 0)
        throw std::invalid_argument("tp (" + std::to_string(tp) + ") must divide the " +
                                    std::to_string(d.gpus_per_node) + " GPUs of a node");
    if (ep < 1) throw std::invalid_argument("ep must be >= 1");
    if (redundant_experts < 0) throw std::invalid_argument("redundant_experts must be >= 0");
    if (!(group_gemm_discount > 0 && group_gemm_discount <= 1))
        throw std::invalid_argument("group_gemm_discount must lie in (0, 1]");
    if (double(m.n_routed_experts + redundant_experts) < ep)
        throw std::invalid_argument("ep (" + std::to_string(ep) +
                                    ") exceeds the routed plus redundant experts (" +
                                    std::to_string(m.n_routed_experts + redundant_experts) + ")");
}

double experts_per_gpu(const ModelConfig& m, int ep, int redundant_experts) {
    return double(m.n_routed_experts + redundant_experts) / ep;
}

namespace {

// The seed quotes parameter counts cut to two decimals (187.17M, 598.14M, 44.05M, 2.91GB)
// and its batch-size function uses those cut figures.
double cut2(double x) { return std::floor(x * 100 + 1e-9) / 100; }

double seed_kv_load_ms(double bytes, double mem_bw) { return bytes / 1024 / 1024 / 1024 / mem_bw * 1000; }

double kv_len_of(const DecodeParams& p, Mode mode) {
    // Seed: the prompt length. Corrected: the average context an output token attends to.
    return mode == Mode::AsPublished ? p.seq_len : p.seq_len + p.decode_len / 2;
}

double kv_bytes_per_element(const DecodeParams& p) { return p.kv_fp8 ? 1.0 : 2.0; }

}  // namespace

double decode_batch_limit(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, Mode mode) {
    const double expert_slots = experts_per_gpu(m, p.ep, p.redundant_experts) + m.n_shared_experts;
    const double kv_per_request = (p.seq_len + p.decode_len) * m.kv_cache_width() * m.n_layers *
                                  kv_bytes_per_element(p) * tp;
    const double mem_util = 0.9;  // the rest: framework, activations, fragmentation
    if (mode == Mode::AsPublished) {
        const ParamCounts pc = param_counts(m, /*with_bias=*/true);
        const double mla_std_m = cut2(pc.mla / 1e6);
        const double mla_m = p.absorbed ? cut2(pc.mla_absorbed / 1e6) : mla_std_m;
        const double expert_m = cut2(pc.expert / 1e6);
        const double others_b = cut2(cut2(pc.total / 1e9) - mla_std_m * m.n_layers / 1e3 -
                                     expert_m * double(m.n_routed_experts + m.n_shared_experts) *
                                         m.n_moe_layers() / 1e3);
        const double others_gb = cut2(others_b * std::pow(1000.0 / 1024.0, 3));
        double mem = d.mem_gb * mem_util - others_gb - mla_m * m.n_layers / tp / 1024;
        mem -= expert_m * m.n_moe_layers() * expert_slots / 1024;
        return mem * 1024 * 1024 * 1024 / kv_per_request;
    }
    // Corrected: FP8 weights (1 byte per parameter), BF16 embedding and LM head, memory in GiB
    // (HBM stacks come in binary sizes).
    const ParamCounts pc = param_counts(m, /*with_bias=*/false);
    const double mla = (p.absorbed ? pc.mla_absorbed : pc.mla) * m.n_layers / tp;
    const double experts = expert_slots * pc.expert * m.n_moe_layers();
    const double others = pc.dense_mlp * m.n_dense_layers + pc.gate * m.n_moe_layers() +
                          2 * (pc.embedding + pc.lm_head);
    const double free_bytes = d.mem_gb * 1024 * 1024 * 1024 * mem_util - mla - experts - others;
    return free_bytes / kv_per_request;
}

DecodeMla decode_mla(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, Mode mode) {
    const int comm = d.comm_sms_decode;
    const double kv_len = kv_len_of(p, mode);
    DecodeMla r;
    if (mode == Mode::AsPublished) {
        // q_len = 1, every key served from the cache (no KV down-projection).
        const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, kv_len, m, 1) : mla_flops(1, kv_len, m, 1);
        r.compute_ms = (f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) + f.attn_fp16_gflop / d.fp16_tflops_eff(comm)) * p.batch;
        // The seed sizes the decode all-reduce by the prompt length, not the batch.
        r.allreduce_ms = seed_ms(p.seq_len * m.dim * 2, d.nvlink_eff());
        r.load_kv_ms = seed_kv_load_ms(kv_len * m.kv_cache_width() * p.batch * kv_bytes_per_element(p), d.mem_bw_eff());
        r.time_ms = (tp == 1 ? r.compute_ms : r.compute_ms / tp + r.allreduce_ms) + r.load_kv_ms;
        return r;
    }
    // Corrected. A TP group of tp GPUs serves tp * batch requests: each GPU computes its
    // 1/tp of the heads for all of them (the same FLOPs as batch requests at TP1), holds
    // 1/tp of the MLA weights, and reads the whole latent cache of the group, since the
    // latent is shared by every head.
    const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, kv_len, m, 1 - 1 / kv_len)
                                  : mla_flops(1, kv_len, m, 1 - 1 / kv_len);
    r.compute_ms = (f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) + f.attn_fp16_gflop / d.fp16_tflops_eff(comm)) * p.batch;
    const ParamCounts pc = param_counts(m, false);
    const double weight_bytes = (p.absorbed ? pc.mla_absorbed : pc.mla) / tp;
    const double kv_bytes = tp * p.batch * kv_len * m.kv_cache_width() * kv_bytes_per_element(p);
    r.load_kv_ms = true_ms(kv_bytes, d.mem_bw_eff());
    r.load_weights_ms = true_ms(weight_bytes, d.mem_bw_eff());
    const double group_tokens = double(tp) * p.batch;
    r.allreduce_ms = tp > 1 ? true_ms(2.0 * (tp - 1) / tp * group_tokens * m.dim * 2, d.nvlink_eff()) : 0;
    r.time_ms = std::max(r.compute_ms, r.load_kv_ms + r.load_weights_ms) + r.allreduce_ms;
    return r;
}

namespace {

int pick_tp(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    if (p.tp > 0) return p.tp;
    if (mode == Mode::AsPublished) {
        // The seed's rule: split attention when TP4 beats TP1, at the device's preferred TP.
        const DecodeMla one = decode_mla(m, d, p, 1, mode);
        const double tp1 = one.compute_ms, tp4 = one.compute_ms / 4 + one.allreduce_ms;
        return tp1 > tp4 ? d.seed_decode_tp : 1;
    }
    // Corrected: the fastest attention among the TPs whose KV cache still fits the batch.
    int best = 0, best_any = 1;
    double best_t = 0, best_any_t = 0;
    for (int tp = 1; tp <= d.gpus_per_node; tp *= 2) {
        if (d.gpus_per_node % tp != 0) continue;
        const double t = decode_mla(m, d, p, tp, mode).time_ms;
        if (tp == 1 || t < best_any_t) best_any = tp, best_any_t = t;
        if (decode_batch_limit(m, d, p, tp, mode) >= p.batch && (best == 0 || t < best_t)) best = tp, best_t = t;
    }
    return best > 0 ? best : best_any;
}

}  // namespace

DecodeResult decode_unchecked(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    const bool seed = mode == Mode::AsPublished;
    const int comm = d.comm_sms_decode;
    const double bs = p.batch;
    DecodeResult r;
    r.kv_len = kv_len_of(p, mode);
    r.experts_per_gpu = experts_per_gpu(m, p.ep, p.redundant_experts);

    const DecodeMla one = decode_mla(m, d, p, 1, mode);
    {
        const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, r.kv_len, m, seed ? 1 : 1 - 1 / r.kv_len)
                                      : mla_flops(1, r.kv_len, m, seed ? 1 : 1 - 1 / r.kv_len);
        r.mla_gemm_ms = f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) * bs;
        r.mla_attn_ms = f.attn_fp16_gflop / d.fp16_tflops_eff(comm) * bs;
    }
    if (seed) {
        r.mla_tp1_ms = one.compute_ms;
        r.mla_tp4_ms = one.compute_ms / 4 + one.allreduce_ms;
        r.mla_tp8_ms = one.compute_ms / 8 + one.allreduce_ms;
    } else {
        r.mla_tp1_ms = one.time_ms;
        r.mla_tp4_ms = decode_mla(m, d, p, 4, mode).time_ms;
        r.mla_tp8_ms = decode_mla(m, d, p, 8, mode).time_ms;
    }

    r.mla_tp = pick_tp(m, d, p, mode);
    const DecodeMla at_tp = decode_mla(m, d, p, r.mla_tp, mode);
    r.allreduce_ms = at_tp.allreduce_ms;
    DecodeParams fp8 = p, fp16 = p;
    fp8.kv_fp8 = true;
    fp16.kv_fp8 = false;
    r.load_kv_fp8_ms = decode_mla(m, d, fp8, r.mla_tp, mode).load_kv_ms;
    r.load_kv_fp16_ms = decode_mla(m, d, fp16, r.mla_tp, mode).load_kv_ms;
    r.sparse_mla_ms = at_tp.time_ms;
    // The seed runs the dense layers' attention at TP1 whatever the sparse layers use.
    r.dense_mla_ms = seed ? one.time_ms : at_tp.time_ms;

    const double fp8_rate = d.fp8_tflops_eff(comm);
    const double disc = p.group_gemm_discount;
    r.dense_mlp_ms = dense_mlp_gflop(m, bs) / fp8_rate;
    r.shared_expert_ms = expert_gflop(m, bs) * m.n_shared_experts / fp8_rate / disc;
    r.routed_expert_ms = expert_gflop(m, bs * m.n_activated_experts) / fp8_rate / disc;
    if (seed) {
        // Every token sends all top-k copies over the scale-out network, one byte per element.
        r.dispatch_ms = seed_ms(bs * m.dim * m.n_activated_experts, d.scaleout_eff());
        r.combine_ms = 2 * r.dispatch_ms;
    } else {
        // Weights stream from memory every step: a small batch is bound by them.
        const ParamCounts pc = param_counts(m, false);
        const double bw = d.mem_bw_eff();
        r.dense_mlp_ms = std::max(r.dense_mlp_ms, true_ms(pc.dense_mlp, bw));
        // The shared expert is one plain GEMM, not grouped: no grouped-GEMM discount.
        r.shared_expert_ms = std::max(r.shared_expert_ms * disc, true_ms(pc.expert * m.n_shared_experts, bw));
        r.routed_expert_ms = std::max(r.routed_expert_ms, true_ms(pc.expert * r.experts_per_gpu, bw));
        // Copies routed to an expert on this GPU stay local.
        const double local = std::min(1.0, r.experts_per_gpu / m.n_routed_experts);
        const double copies = bs * m.n_activated_experts * (1 - local);
        r.dispatch_ms = true_ms(copies * (m.dim + m.dim / 128.0 * 4), d.scaleout_eff());
        r.combine_ms = true_ms(copies * m.dim * 2.0, d.scaleout_eff());
    }

    const double n_dense = double(m.n_dense_layers), n_moe = double(m.n_moe_layers());
    const double moe_compute = r.sparse_mla_ms + r.shared_expert_ms + r.routed_expert_ms;
    const double moe_comm = r.dispatch_ms + r.combine_ms;
    const double dense = n_dense * (r.dense_mla_ms + r.dense_mlp_ms);
    r.tpot_overlap_ms = dense + n_moe * (seed ? moe_compute : std::max(moe_compute, moe_comm));
    r.tpot_ms = dense + n_moe * (moe_compute + moe_comm);
    r.tps_user_overlap = 1000 / r.tpot_overlap_ms;
    r.tps_user = 1000 / r.tpot_ms;
    r.tokens_per_gpu_s_overlap = r.tps_user_overlap * bs;
    r.tokens_per_gpu_s = r.tps_user * bs;
    r.time_budget_ms = r.sparse_mla_ms + r.shared_expert_ms - moe_comm;
    r.batch_limit = decode_batch_limit(m, d, p, r.mla_tp, mode);
    return r;
}

DecodeResult decode(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    m.validate();
    d.validate();
    p.validate(m, d);
    return decode_unchecked(m, d, p, mode);
}

}  // namespace dsperf
