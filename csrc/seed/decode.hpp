// Decode cost of one step on one GPU of a wide-EP deployment: attention (absorbed MLA,
// DP across GPUs, optional TP), dense MLP, shared and routed experts, dispatch/combine.
#pragma once
#include "seed/mode.hpp"
#include "hardware/device_spec.hpp"
#include "model/model_config.hpp"

namespace dsperf {

struct DecodeParams {
    double seq_len = 4383;          // prompt length
    double decode_len = 1210;       // output length
    double batch = 32;              // requests per GPU
    int tp = 0;                     // attention TP; 0 picks it by the best-TP rule
    int ep = 144;                   // GPUs sharing the routed experts
    int redundant_experts = 32;     // extra expert replicas for load balancing (EPLB)
    bool absorbed = true;           // absorbed MLA (W_UK, W_UV folded in)
    bool kv_fp8 = true;             // KV cache in FP8 (else FP16)
    double group_gemm_discount = 0.7;  // grouped GEMM efficiency at small per-expert batch
    void validate(const ModelConfig& m, const DeviceSpec& d) const;
};

// Routed experts each GPU holds (fractional when they do not divide evenly).
double experts_per_gpu(const ModelConfig& m, int ep, int redundant_experts);

// Largest per-GPU batch whose KV cache fits beside the weights (may be <= 0: nothing fits).
double decode_batch_limit(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, const Fixes& fx);

struct DecodeMla {
    double compute_ms = 0;    // TP1 projections + attention for the batch
    double allreduce_ms = 0;
    double load_kv_ms = 0;    // reading the batch's KV cache
    double load_weights_ms = 0;  // streaming this GPU's share of the MLA weights
    double time_ms = 0;       // the layer's MLA time at this TP, memory traffic included
};
DecodeMla decode_mla(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, int tp, const Fixes& fx);

struct DecodeResult {
    double kv_len = 0;              // KV length attention reads
    double mla_gemm_ms = 0, mla_attn_ms = 0;
    double mla_tp1_ms = 0, mla_tp4_ms = 0, mla_tp8_ms = 0;  // compute (+ all-reduce), the seed's columns
    double allreduce_ms = 0;
    double load_kv_fp8_ms = 0, load_kv_fp16_ms = 0;
    double dense_mlp_ms = 0, shared_expert_ms = 0, routed_expert_ms = 0;
    double dispatch_ms = 0, combine_ms = 0;
    int mla_tp = 1;                 // TP the layers run at
    double dense_mla_ms = 0, sparse_mla_ms = 0;  // per layer, KV load included
    double tpot_overlap_ms = 0, tpot_ms = 0;
    double tps_user_overlap = 0, tps_user = 0;   // tokens/s per request
    double tokens_per_gpu_s_overlap = 0, tokens_per_gpu_s = 0;
    double time_budget_ms = 0;      // sparse MLA + shared expert - (dispatch + combine)
    double batch_limit = 0;         // memory-limited batch at mla_tp
    double experts_per_gpu = 0;
};
DecodeResult decode(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx);

// The same without argument checks, for sweeps whose inputs were checked once.
DecodeResult decode_unchecked(const ModelConfig& m, const DeviceSpec& d, const DecodeParams& p, const Fixes& fx);

}  // namespace dsperf
