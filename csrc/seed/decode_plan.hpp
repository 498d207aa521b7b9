// The decode model factored by batch: every per-layer time is an affine-or-roofline function
// of the per-GPU batch b, so a plan built once per (device, model, lengths, EP, TP, KV dtype)
// evaluates any batch in a few dozen flops. decode() and decode_sweep() both go through it,
// so there is one implementation of the formulas.
#pragma once
#include <algorithm>
#include <array>

#include "seed/decode.hpp"

namespace dsperf {

// t(b) = combine(compute * b, mem_fixed + mem_per_req * b) + comm_fixed + comm_per_req * b,
// where combine is a sum (the seed) or a max (the roofline, with DecodeWeightStreaming).
struct BatchTime {
    double compute = 0, mem_fixed = 0, mem_per_req = 0, comm_fixed = 0, comm_per_req = 0;
    bool roofline = false;
    double at(double b) const {
        const double c = compute * b, m = mem_fixed + mem_per_req * b;
        return (roofline ? (c > m ? c : m) : c + m) + comm_fixed + comm_per_req * b;
    }
    // The same without memory traffic (the seed's TP1/TP4/TP8 columns exclude the KV load).
    double compute_and_comm(double b) const { return compute * b + comm_fixed + comm_per_req * b; }
};

// TPs a plan prepares: 1, 2, 4, ..., 64 (index = log2 tp); those dividing the node are valid.
constexpr int kPlanTps = 7;

struct DecodePlan {
    int requested_tp = 0;
    int gpus_per_node = 8;
    int seed_decode_tp = 4;
    bool best_tp_search = false;     // Fix::DecodeBestTpSearch
    bool dense_layers_at_tp = false; // Fix::DenseLayersAtTp
    bool overlap_bounded = false;    // Fix::OverlapBoundedByCompute
    bool kv_fp8 = true;              // the dtype kv_per_req is in
    double kv_len = 0;
    double experts_per_gpu = 0;
    int n_dense = 0, n_moe = 0;
    std::array<BatchTime, kPlanTps> mla;        // per TP, memory traffic included
    std::array<double, kPlanTps> kv_per_req{};  // KV load per request at this TP
    std::array<double, kPlanTps> batch_limit{};
    BatchTime dense_mlp, shared_expert, routed_expert, dispatch, combine;
};

DecodePlan make_decode_plan(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx);

// Index of a power-of-two TP in the plan's arrays.
inline int tp_index(int tp) {
    int i = 0;
    while ((1 << i) < tp) ++i;
    return i;
}

// Evaluate at batch b (> 0): every DecodeResult field but the MLA GEMM/attention split.
// Inline so that a sweep that keeps a few columns compiles down to just those.
inline DecodeResult evaluate_decode_plan(const DecodePlan& plan, double b) {
    DecodeResult r;
    r.kv_len = plan.kv_len;
    r.experts_per_gpu = plan.experts_per_gpu;

    // Attention TP: as requested, else the best-TP rule.
    int ti;
    if (plan.requested_tp > 0) {
        ti = tp_index(plan.requested_tp);
    } else if (!plan.best_tp_search) {
        // The seed's rule: split attention when TP4 beats TP1, at the device's preferred TP.
        ti = plan.mla[0].at(b) > plan.mla[2].at(b) ? tp_index(plan.seed_decode_tp) : 0;
    } else {
        // The fastest attention among the node's TPs whose KV cache still fits the batch.
        int best = -1, best_any = 0;
        double best_t = 0, best_any_t = plan.mla[0].at(b);
        for (int i = 0; i < kPlanTps && (1 << i) <= plan.gpus_per_node; ++i) {
            if (plan.gpus_per_node % (1 << i) != 0) continue;
            const double t = plan.mla[i].at(b);
            if (t < best_any_t) best_any = i, best_any_t = t;
            if (plan.batch_limit[i] >= b && (best < 0 || t < best_t)) best = i, best_t = t;
        }
        ti = best >= 0 ? best : best_any;
    }
    r.mla_tp = 1 << ti;

    const bool roofline = plan.mla[0].roofline;
    auto column = [&](int i) { return roofline ? plan.mla[i].at(b) : plan.mla[i].compute_and_comm(b); };
    r.mla_tp1_ms = column(0);
    r.mla_tp4_ms = column(2);
    r.mla_tp8_ms = column(3);
    r.allreduce_ms = plan.mla[ti].comm_fixed + plan.mla[ti].comm_per_req * b;
    const double kv = plan.kv_per_req[ti] * b;
    r.load_kv_fp8_ms = plan.kv_fp8 ? kv : kv / 2;
    r.load_kv_fp16_ms = r.load_kv_fp8_ms * 2;
    r.sparse_mla_ms = plan.mla[ti].at(b);
    // The seed runs the dense layers' attention at TP1 whatever the MoE layers use.
    r.dense_mla_ms = plan.dense_layers_at_tp ? r.sparse_mla_ms : plan.mla[0].at(b);

    r.dense_mlp_ms = plan.dense_mlp.at(b);
    r.shared_expert_ms = plan.shared_expert.at(b);
    r.routed_expert_ms = plan.routed_expert.at(b);
    r.dispatch_ms = plan.dispatch.at(b);
    r.combine_ms = plan.combine.at(b);

    const double moe_compute = r.sparse_mla_ms + r.shared_expert_ms + r.routed_expert_ms;
    const double moe_comm = r.dispatch_ms + r.combine_ms;
    const double dense = plan.n_dense * (r.dense_mla_ms + r.dense_mlp_ms);
    // The seed's overlap hides all communication.
    r.tpot_overlap_ms = dense + plan.n_moe * (plan.overlap_bounded ? std::max(moe_compute, moe_comm) : moe_compute);
    r.tpot_ms = dense + plan.n_moe * (moe_compute + moe_comm);
    r.tps_user_overlap = 1000 / r.tpot_overlap_ms;
    r.tps_user = 1000 / r.tpot_ms;
    r.tokens_per_gpu_s_overlap = r.tps_user_overlap * b;
    r.tokens_per_gpu_s = r.tps_user * b;
    r.time_budget_ms = r.sparse_mla_ms + r.shared_expert_ms - moe_comm;
    r.batch_limit = plan.batch_limit[ti];
    return r;
}

}  // namespace dsperf
