#include "costmodel/decode.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "costmodel/decode_plan.hpp"
#include "model/block_costs.hpp"

namespace dsperf {

void DecodeParams::validate(const ModelConfig& m, const DeviceSpec& d) const {
    if (!(seq_len > 0)) throw std::invalid_argument("seq_len must be positive");
    if (!(decode_len >= 0)) throw std::invalid_argument("decode_len must be >= 0");
    if (!(batch > 0)) throw std::invalid_argument("batch must be positive");
    if (tp < 0) throw std::invalid_argument("tp must be >= 0 (0 picks the best TP)");
    if (tp > 0 && (tp & (tp - 1)) != 0)
        throw std::invalid_argument("tp (" + std::to_string(tp) + ") must be a power of two");
    if (tp > 64) throw std::invalid_argument("tp must be <= 64");
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
    const double kv_elem = kv_len * m.kv_cache_width() * kv_bytes_per_element(p);
    DecodeMla r;
    if (mode == Mode::AsPublished) {
        // q_len = 1, every key served from the cache (no KV down-projection).
        const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, kv_len, m, 1) : mla_flops(1, kv_len, m, 1);
        r.compute_ms = (f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) + f.attn_fp16_gflop / d.fp16_tflops_eff(comm)) * p.batch;
        // The seed sizes the decode all-reduce by the prompt length, not the batch.
        r.allreduce_ms = seed_ms(p.seq_len * m.dim * 2, d.nvlink_eff());
        r.load_kv_ms = seed_kv_load_ms(kv_elem * p.batch, d.mem_bw_eff());
        r.time_ms = (tp == 1 ? r.compute_ms : r.compute_ms / tp + r.allreduce_ms) + r.load_kv_ms;
        return r;
    }
    // Corrected. A TP group of tp GPUs serves tp * batch requests: each GPU computes its
    // 1/tp of the heads for all of them (the same FLOPs as batch requests at TP1), holds
    // 1/tp of the MLA weights, and reads the whole latent cache of the group, since the
    // latent is shared by every head. The new token's own KV down-projection is computed.
    const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, kv_len, m, 1 - 1 / kv_len)
                                  : mla_flops(1, kv_len, m, 1 - 1 / kv_len);
    r.compute_ms = (f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) + f.attn_fp16_gflop / d.fp16_tflops_eff(comm)) * p.batch;
    const ParamCounts pc = param_counts(m, false);
    const double weight_bytes = (p.absorbed ? pc.mla_absorbed : pc.mla) / tp;  // FP8
    r.load_kv_ms = true_ms(tp * p.batch * kv_elem, d.mem_bw_eff());
    r.load_weights_ms = true_ms(weight_bytes, d.mem_bw_eff());
    const double group_tokens = double(tp) * p.batch;
    r.allreduce_ms = tp > 1 ? true_ms(2.0 * (tp - 1) / tp * group_tokens * m.dim * 2, d.nvlink_eff()) : 0;
    r.time_ms = std::max(r.compute_ms, r.load_kv_ms + r.load_weights_ms) + r.allreduce_ms;
    return r;
}


DecodePlan make_decode_plan(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    const bool seed = mode == Mode::AsPublished;
    DecodePlan plan;
    plan.mode = mode;
    plan.requested_tp = p.tp;
    plan.gpus_per_node = d.gpus_per_node;
    plan.seed_decode_tp = d.seed_decode_tp;
    plan.kv_len = kv_len_of(p, mode);
    plan.experts_per_gpu = experts_per_gpu(m, p.ep, p.redundant_experts);
    plan.n_dense = int(m.n_dense_layers);
    plan.n_moe = int(m.n_moe_layers());
    plan.kv_fp8 = p.kv_fp8;

    // Per-request MLA pieces from decode_mla at batch 1 (every piece is linear in the batch).
    DecodeParams one = p;
    one.batch = 1;
    for (int i = 0; i < kPlanTps; ++i) {
        const int tp = 1 << i;
        const DecodeMla r = decode_mla(m, d, one, tp, mode);
        BatchTime& t = plan.mla[i];
        if (seed) {
            t.compute = tp == 1 ? r.compute_ms : r.compute_ms / tp;
            t.mem_per_req = r.load_kv_ms;
            t.comm_fixed = tp == 1 ? 0 : r.allreduce_ms;
            plan.allreduce_fixed[i] = r.allreduce_ms;
        } else {
            t.roofline = true;
            t.compute = r.compute_ms;
            t.mem_fixed = r.load_weights_ms;
            t.mem_per_req = r.load_kv_ms;
            t.comm_per_req = r.allreduce_ms;
            plan.allreduce_per_req[i] = r.allreduce_ms;
        }
        plan.kv_per_req[i] = r.load_kv_ms;
        plan.batch_limit[i] = decode_batch_limit(m, d, p, tp, mode);
        if (i == 0) plan.mla_tp1_compute = r.compute_ms;
    }

    const int comm = d.comm_sms_decode;
    const double fp8_rate = d.fp8_tflops_eff(comm);
    const double disc = p.group_gemm_discount;
    plan.dense_mlp.compute = dense_mlp_gflop(m, 1) / fp8_rate;
    plan.shared_expert.compute = expert_gflop(m, 1) * m.n_shared_experts / fp8_rate / disc;
    plan.routed_expert.compute = expert_gflop(m, m.n_activated_experts) / fp8_rate / disc;
    if (seed) {
        // Every token sends all top-k copies over the scale-out network, one byte per element.
        plan.dispatch.comm_per_req = seed_ms(double(m.dim) * m.n_activated_experts, d.scaleout_eff());
        plan.combine.comm_per_req = 2 * plan.dispatch.comm_per_req;
    } else {
        // Weights stream from memory every step: a small batch is bound by them.
        const ParamCounts pc = param_counts(m, false);
        const double bw = d.mem_bw_eff();
        plan.dense_mlp.roofline = plan.shared_expert.roofline = plan.routed_expert.roofline = true;
        plan.dense_mlp.mem_fixed = true_ms(pc.dense_mlp, bw);
        // The shared expert is one plain GEMM, not grouped: no grouped-GEMM discount.
        plan.shared_expert.compute *= disc;
        plan.shared_expert.mem_fixed = true_ms(pc.expert * m.n_shared_experts, bw);
        plan.routed_expert.mem_fixed = true_ms(pc.expert * plan.experts_per_gpu, bw);
        // Copies routed to an expert on this GPU stay local.
        const double local = std::min(1.0, plan.experts_per_gpu / m.n_routed_experts);
        const double copies = m.n_activated_experts * (1 - local);
        plan.dispatch.comm_per_req = true_ms(copies * (m.dim + m.dim / 128.0 * 4), d.scaleout_eff());
        plan.combine.comm_per_req = true_ms(copies * m.dim * 2.0, d.scaleout_eff());
    }
    return plan;
}

DecodeResult decode_unchecked(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    DecodeResult r = evaluate_decode_plan(make_decode_plan(m, d, p, mode), p.batch);
    const bool seed = mode == Mode::AsPublished;
    const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, r.kv_len, m, seed ? 1 : 1 - 1 / r.kv_len)
                                  : mla_flops(1, r.kv_len, m, seed ? 1 : 1 - 1 / r.kv_len);
    r.mla_gemm_ms = f.gemm_fp8_gflop / d.fp8_tflops_eff(d.comm_sms_decode) * p.batch;
    r.mla_attn_ms = f.attn_fp16_gflop / d.fp16_tflops_eff(d.comm_sms_decode) * p.batch;
    return r;
}

DecodeResult decode(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, Mode mode) {
    m.validate();
    d.validate();
    p.validate(m, d);
    return decode_unchecked(m, d, p, mode);
}

}  // namespace dsperf
