#include "seed/decode.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "seed/decode_plan.hpp"
#include "model/block_costs.hpp"

namespace dsperf {

void DecodeParams::validate(const ModelConfig& m, const DeviceSpec& d) const {
    if (!(seq_len > 0)) throw std::invalid_argument("seq_len must be positive");
    if (!(decode_len >= 0)) throw std::invalid_argument("decode_len must be >= 0");
    if (!(batch > 0)) throw std::invalid_argument("batch must be positive");
    if (tp < 0) throw std::invalid_argument("tp must be >= 0 (0 picks the best TP)");
    if (tp > 0 && (tp & (tp - 1)) != 0)
        throw std::invalid_argument("tp (" + std::to_string(tp) + ") must be a power of two");
    if (tp > 0 && d.gpus_per_node % tp != 0)
        throw std::invalid_argument("tp (" + std::to_string(tp) + ") must divide the " +
                                    std::to_string(d.gpus_per_node) + " GPUs of a node");
    if (tp > (1 << (kPlanTps - 1))) throw std::invalid_argument("tp must be <= 64");
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

double kv_len_of(const DecodeParams& p, const Fixes& fx) {
    // Seed: the prompt length. Fixed: the average context an output token attends to.
    return fx.has(Fix::DecodeAverageContext) ? p.seq_len + p.decode_len / 2 : p.seq_len;
}

double kv_bytes_per_element(const DecodeParams& p) { return p.kv_fp8 ? 1.0 : 2.0; }

// Reading `bytes` from device memory. The seed divides GiB by GB/s.
double memory_ms(const Fixes& fx, double bytes, double mem_bw) {
    return fx.has(Fix::DecimalUnits) ? true_ms(bytes, mem_bw) : bytes / 1024 / 1024 / 1024 / mem_bw * 1000;
}

}  // namespace

double decode_batch_limit(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, const Fixes& fx) {
    const double expert_slots = experts_per_gpu(m, p.ep, p.redundant_experts) + m.n_shared_experts;
    // The latent KV is shared by all heads, so each GPU of a TP group holds the whole group's.
    const double kv_per_request = (p.seq_len + p.decode_len) * m.kv_cache_width() * m.n_layers *
                                  kv_bytes_per_element(p) * tp;
    const double mem_util = 0.9;  // the rest: framework, activations, fragmentation
    if (!fx.has(Fix::ExactParameterCounts)) {
        const ParamCounts pc = param_counts(m, /*with_bias=*/true);
        const double mla_std_m = cut2(pc.mla / 1e6);
        const double mla_m = p.absorbed ? cut2(pc.mla_absorbed / 1e6) : mla_std_m;
        const double expert_m = cut2(pc.expert / 1e6);
        // The seed subtracts from the total it quotes (671.16B), not from its blocks' exact sum.
        const double total_b = m.quoted_total_params > 0 ? m.quoted_total_params / 1e9 : cut2(pc.total / 1e9);
        const double others_b = cut2(total_b - mla_std_m * m.n_layers / 1e3 -
                                     expert_m * double(m.n_routed_experts + m.n_shared_experts) *
                                         m.n_moe_layers() / 1e3);
        const double others_gb = cut2(others_b * std::pow(1000.0 / 1024.0, 3));
        double mem = d.mem_gb * mem_util - others_gb - mla_m * m.n_layers / tp / 1024;
        mem -= expert_m * m.n_moe_layers() * expert_slots / 1024;
        return mem * 1024 * 1024 * 1024 / kv_per_request;
    }
    // FP8 weights (1 byte per parameter), BF16 embedding and LM head, memory in GiB (HBM stacks
    // come in binary sizes).
    const ParamCounts pc = param_counts(m, /*with_bias=*/false);
    const double mla = (p.absorbed ? pc.mla_absorbed : pc.mla) * m.n_layers / tp;
    const double experts = expert_slots * pc.expert * m.n_moe_layers();
    const double others = pc.dense_mlp * m.n_dense_layers + pc.gate * m.n_moe_layers() +
                          2 * (pc.embedding + pc.lm_head);
    const double free_bytes = d.mem_gb * 1024 * 1024 * 1024 * mem_util - mla - experts - others;
    return free_bytes / kv_per_request;
}

DecodeMla decode_mla(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, const Fixes& fx) {
    const int comm = d.comm_sms_decode;
    const double kv_len = kv_len_of(p, fx);
    // The seed serves every key from the cache (hit rate 1: no KV down-projection); with the
    // average-context fix the new token's own down-projection is counted.
    const double hit = fx.has(Fix::DecodeAverageContext) ? 1 - 1 / kv_len : 1.0;
    const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, kv_len, m, hit) : mla_flops(1, kv_len, m, hit);
    const double per_request = f.gemm_fp8_gflop / d.fp8_tflops_eff(comm) + f.attn_fp16_gflop / d.fp16_tflops_eff(comm);
    const double kv_request_bytes = kv_len * m.kv_cache_width() * kv_bytes_per_element(p);
    // Seed: TP divides the batch's attention work by tp. Fixed: a TP group serves tp * batch
    // requests and each GPU computes its 1/tp of the heads for all of them (the same FLOPs as
    // batch requests at TP1) and reads the whole latent cache of the group (shared by all heads).
    const bool group = fx.has(Fix::DecodeTpServesGroup);
    DecodeMla r;
    r.compute_ms = per_request * p.batch / (group ? 1 : tp);
    r.load_kv_ms = memory_ms(fx, kv_request_bytes * p.batch * (group ? tp : 1), d.mem_bw_eff());
    if (fx.has(Fix::DecodeWeightStreaming)) {
        const ParamCounts pc = param_counts(m, false);
        r.load_weights_ms = memory_ms(fx, (p.absorbed ? pc.mla_absorbed : pc.mla) / tp, d.mem_bw_eff());  // FP8
    }
    if (tp > 1) {
        // The seed sizes the decode all-reduce by the prompt length, not the batch.
        const double tokens = fx.has(Fix::DecodeAllReduceByBatch) ? (group ? tp : 1) * p.batch : p.seq_len;
        double bytes = tokens * m.dim * 2;
        if (fx.has(Fix::RingAllReduce)) bytes *= 2.0 * (tp - 1) / tp;
        r.allreduce_ms = traffic_ms(fx, bytes, d.nvlink_eff());
    }
    const double memory = r.load_kv_ms + r.load_weights_ms;
    r.time_ms = (fx.has(Fix::DecodeWeightStreaming) ? std::max(r.compute_ms, memory) : r.compute_ms + memory) +
                r.allreduce_ms;
    return r;
}

DecodePlan make_decode_plan(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx) {
    DecodePlan plan;
    plan.requested_tp = p.tp;
    plan.gpus_per_node = d.gpus_per_node;
    plan.seed_decode_tp = d.seed_decode_tp;
    plan.best_tp_search = fx.has(Fix::DecodeBestTpSearch);
    plan.dense_layers_at_tp = fx.has(Fix::DenseLayersAtTp);
    plan.overlap_bounded = fx.has(Fix::OverlapBoundedByCompute);
    plan.kv_len = kv_len_of(p, fx);
    plan.experts_per_gpu = experts_per_gpu(m, p.ep, p.redundant_experts);
    plan.n_dense = int(m.n_dense_layers);
    plan.n_moe = int(m.n_moe_layers());
    plan.kv_fp8 = p.kv_fp8;

    // Every MLA piece is linear in the batch: read the per-request slopes at batch 1.
    const bool streaming = fx.has(Fix::DecodeWeightStreaming);
    DecodeParams one = p;
    one.batch = 1;
    for (int i = 0; i < kPlanTps; ++i) {
        const int tp = 1 << i;
        const DecodeMla r = decode_mla(m, d, one, tp, fx);
        BatchTime& t = plan.mla[i];
        t.roofline = streaming;
        t.compute = r.compute_ms;
        t.mem_fixed = r.load_weights_ms;
        t.mem_per_req = r.load_kv_ms;
        // The all-reduce is per request when sized by the batch, else a constant.
        if (fx.has(Fix::DecodeAllReduceByBatch)) t.comm_per_req = r.allreduce_ms;
        else t.comm_fixed = r.allreduce_ms;
        plan.kv_per_req[i] = r.load_kv_ms;
        plan.batch_limit[i] = decode_batch_limit(m, d, p, tp, fx);
    }

    const int comm = d.comm_sms_decode;
    const double fp8_rate = d.fp8_tflops_eff(comm);
    const double disc = p.group_gemm_discount;
    plan.dense_mlp.compute = dense_mlp_gflop(m, 1) / fp8_rate;
    plan.shared_expert.compute = expert_gflop(m, 1) * m.n_shared_experts / fp8_rate;
    if (!fx.has(Fix::SharedExpertPlainGemm)) plan.shared_expert.compute /= disc;
    plan.routed_expert.compute = expert_gflop(m, m.n_activated_experts) / fp8_rate / disc;
    if (streaming) {
        // Weights stream from memory every step: a small batch is bound by them (FP8).
        const ParamCounts pc = param_counts(m, false);
        const double bw = d.mem_bw_eff();
        plan.dense_mlp.roofline = plan.shared_expert.roofline = plan.routed_expert.roofline = true;
        plan.dense_mlp.mem_fixed = memory_ms(fx, pc.dense_mlp, bw);
        plan.shared_expert.mem_fixed = memory_ms(fx, pc.expert * m.n_shared_experts, bw);
        plan.routed_expert.mem_fixed = memory_ms(fx, pc.expert * plan.experts_per_gpu, bw);
    }
    // The seed sends all top-k copies of a token over the scale-out network; copies routed to an
    // expert on this GPU stay local.
    double copies = double(m.n_activated_experts);
    if (fx.has(Fix::DispatchRemoteOnly)) copies *= 1 - std::min(1.0, plan.experts_per_gpu / m.n_routed_experts);
    const double dispatch_bytes = m.dim + (fx.has(Fix::DispatchFp8Scales) ? m.dim / 128.0 * 4 : 0.0);
    plan.dispatch.comm_per_req = traffic_ms(fx, copies * dispatch_bytes, d.scaleout_eff());
    plan.combine.comm_per_req = traffic_ms(fx, copies * m.dim * 2.0, d.scaleout_eff());  // BF16
    return plan;
}

DecodeResult decode_unchecked(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx) {
    DecodeResult r = evaluate_decode_plan(make_decode_plan(m, d, p, fx), p.batch);
    const double hit = fx.has(Fix::DecodeAverageContext) ? 1 - 1 / r.kv_len : 1.0;
    const MlaFlops f = p.absorbed ? mla_absorbed_flops(1, r.kv_len, m, hit) : mla_flops(1, r.kv_len, m, hit);
    r.mla_gemm_ms = f.gemm_fp8_gflop / d.fp8_tflops_eff(d.comm_sms_decode) * p.batch;
    r.mla_attn_ms = f.attn_fp16_gflop / d.fp16_tflops_eff(d.comm_sms_decode) * p.batch;
    return r;
}

DecodeResult decode(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx) {
    m.validate();
    d.validate();
    p.validate(m, d);
    return decode_unchecked(m, d, p, fx);
}

}  // namespace dsperf
