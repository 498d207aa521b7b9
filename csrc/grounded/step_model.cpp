#include "grounded/step_model.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/block_costs.hpp"
#include "grounded/layer_calls.hpp"
#include "grounded/routing_skew.hpp"

namespace dsperf {

// A layer's calls (grounded/layer_calls.*), which the step below composes.
using layer::CallBuilder;
using layer::attention_calls;
using layer::dense_group_tp;
using layer::dense_mlp_calls;
using layer::moe_calls;
using layer::shared_expert_tp;

namespace {

// Bytes one token's latent cache entry takes in one layer: BF16, or FlashMLA's FP8 layout
// (FP8 latent + one FP32 scale per 128 + BF16 rope key).
double kv_entry_bytes(const ModelConfig& m, bool fp8) {
    return fp8 ? double(m.kv_lora_rank) + 4.0 * std::ceil(m.kv_lora_rank / 128.0) + 2.0 * m.qk_rope_head_dim
               : 2.0 * m.kv_cache_width();
}

// The link the all-reduce latency rows were measured on: H100 SXM, NVLink 4, 450 GB/s per direction
// (NVIDIA H100 datasheet: 900 GB/s bidirectional).
constexpr double kAllReduceTableNvlinkGbps = 450;

// The LM head for `rows` tokens per GPU: vocabulary-parallel over the attention TP group (each GPU
// 1/attn_tp of the vocabulary for the group's rows; the gather of the logits is not priced).
KernelShape lm_head_shape(const ModelConfig& m, const Deployment& dep, double rows) {
    KernelShape lm;
    lm.m = rows * dep.attn_tp, lm.n = double(m.vocab_size) / dep.attn_tp, lm.k = double(m.dim), lm.fp8 = false;
    return lm;
}

}  // namespace

AllReduceLatency tp_allreduce_latency(const KernelTables& t, const DeviceSpec& d, double tp, double message_bytes) {
    const double g = d.gpus_per_node, link_scale = d.nvlink_gbps / kAllReduceTableNvlinkGbps;
    const double large_gbps = d.nvlink_gbps * kLargeAllReduceLinkShare;
    if (tp <= g) return t.allreduce.latency_us(tp, message_bytes, link_scale, large_gbps);
    // Over whole nodes. The pass inside each node moves the bytes a one-node all-reduce of the
    // message moves: the table's rise above its smallest message (or, without rows, ring traffic).
    const AllReduceLatency node = t.allreduce.latency_us(g, message_bytes, link_scale, large_gbps);
    const double inside = node.found ? node.us - t.allreduce.latency_us(g, 0, link_scale, large_gbps).us
                                     : 2 * (g - 1) / g * message_bytes / (large_gbps * 1e3);  // GB/s = 1e3 B/us
    const double nodes = tp / g;
    const double between = 2 * (nodes - 1) / nodes * (message_bytes / g) / (d.scaleout_gbps * 1e3);
    AllReduceLatency r;
    r.found = true;  // priced from NCCL's published model and the table, not the flat default
    r.clamped = node.clamped;
    r.us = kNcclTreeBaseUs + 2 * ((g - 1) * kNcclTreeNvlinkHopUs + std::floor(std::log2(nodes)) * kNcclTreeNetHopUs) +
           std::max(inside, between);
    return r;
}

double expected_remote_nodes(const ModelConfig& m, int ep, int gpus_per_node) {
    const double nodes = std::ceil(double(ep) / gpus_per_node);
    if (nodes <= 1) return 0;
    const double G = double(m.n_expert_groups), g = double(m.n_limited_groups), K = double(m.n_activated_experts);
    double reached;
    if (G > 1 && g < G && nodes <= G) {
        // Groups live whole on nodes (G / nodes per node); a token picks g groups: the chance a
        // node holds none of them is C(G - G/nodes, g) / C(G, g).
        reached = nodes * (1 - chance_none_drawn(G, G / nodes, int64_t(g)));
    } else {
        // Experts spread uniformly over more nodes than groups: top-k draws among the nodes.
        reached = nodes * (1 - std::pow(1 - 1 / nodes, K));
    }
    return reached * (nodes - 1) / nodes;
}

namespace {
// The micro-batch a step runs its layers on: tokens and requests per micro-batch, and the compute
// slowdown of two-batch overlap, whose communication kernels hold SMs beside the compute.
struct MicroBatch {
    int micro = 1;
    double step_tokens = 0, tokens = 0, requests = 0, slowdown = 1;
};
MicroBatch micro_batch(const DeviceSpec& d, const Deployment& dep) {
    MicroBatch mb;
    const bool decode = dep.phase == Phase::kDecode;
    mb.micro = dep.overlap == Overlap::kTwoBatch ? 2 : 1;
    const double q_len = decode ? 1 + dep.mtp : 1;
    // Tokens this GPU runs through a layer per step, and per micro-batch.
    mb.step_tokens = decode ? dep.batch * q_len : dep.tokens;
    mb.tokens = mb.step_tokens / mb.micro;
    mb.requests = decode ? dep.batch / mb.micro : 0;
    // The communication kernels of the normal (prefill) mode hold SMs while compute runs beside
    // them; the low-latency kernels do not.
    const int comm_sms = dep.comm_sms >= 0 ? dep.comm_sms : (decode ? d.comm_sms_decode : d.comm_sms_prefill);
    mb.slowdown = dep.overlap == Overlap::kTwoBatch ? double(d.sm_count) / double(d.sm_count - comm_sms) : 1.0;
    return mb;
}

// A draft pass: the MTP module over the batch, one token a request.
Deployment draft_pass(const Deployment& dep) {
    Deployment draft = dep;
    draft.mtp = 0;
    return draft;
}

// The step's LM head: on its tokens in decode, on the last token of each prompt in prefill.
void lm_head_call(CallBuilder& head, const ModelConfig& m, const Deployment& dep, double step_tokens) {
    const bool decode = dep.phase == Phase::kDecode;
    const double prompts = decode ? 0 : dep.tokens / (dep.prompt_len - dep.cached_prefix);
    head.compute("lm_head", TableFamily::kGemmBf16, Stage::kHead, lm_head_shape(m, dep, decode ? step_tokens : prompts));
}

// A draft pass's head, on the batch.
void draft_head_call(CallBuilder& pass, const ModelConfig& m, const Deployment& dep) {
    pass.compute("mtp_lm_head", TableFamily::kGemmBf16, Stage::kHead, lm_head_shape(m, dep, dep.batch));
}
}  // namespace

EpFreeParts ep_free_parts(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep) {
    const MicroBatch mb = micro_batch(d, dep);
    CallBuilder b(d, t, mb.slowdown, false), head(d, t, 1.0, false);
    attention_calls(b, m, dep, mb.tokens, mb.requests);
    dense_mlp_calls(b, m, dep, mb.tokens);
    lm_head_call(head, m, dep, mb.step_tokens);
    EpFreeParts p;
    p.attn_us = b.stage_us[int(Stage::kAttention)], p.dense_mlp_us = b.stage_us[int(Stage::kDenseMlp)];
    p.lm_head_us = head.stage_us[int(Stage::kHead)];
    return p;
}

EpFreeParts mtp_draft_ep_free_parts(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t,
                                    const Deployment& dep) {
    EpFreeParts p;
    if (dep.phase != Phase::kDecode || dep.mtp == 0) return p;
    CallBuilder pass(d, t, 1.0, false);
    attention_calls(pass, m, draft_pass(dep), dep.batch, dep.batch);
    draft_head_call(pass, m, dep);
    p.attn_us = pass.stage_us[int(Stage::kAttention)], p.lm_head_us = pass.stage_us[int(Stage::kHead)];
    return p;
}

double mtp_draft_ms(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep,
                    const EpFreeParts* known) {
    if (dep.phase != Phase::kDecode || dep.mtp == 0) return 0;
    // Each draft token is one pass of the MTP module over the batch: one MoE layer and the head.
    // Each part adds to its own stage, so a known part is that stage's sum.
    const Deployment draft = draft_pass(dep);
    CallBuilder pass(d, t, 1.0, false);
    if (known) pass.stage_us[int(Stage::kAttention)] = known->attn_us;
    else attention_calls(pass, m, draft, dep.batch, dep.batch);
    moe_calls(pass, m, draft, d, dep.batch);
    if (known) pass.stage_us[int(Stage::kHead)] = known->lm_head_us;
    else draft_head_call(pass, m, dep);
    double pass_us = 0;
    for (double v : pass.stage_us) pass_us += v;
    return dep.mtp * pass_us / 1e3;
}

StepStages step_stages(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep,
                       std::vector<KernelCall>* calls, double mtp_ms, const EpFreeParts* known) {
    StepStages st;
    const MicroBatch mb = micro_batch(d, dep);
    st.micro = mb.micro;
    const double t_mb = mb.tokens, slowdown = mb.slowdown;
    const bool keep = calls != nullptr;
    if (keep) known = nullptr;

    // Each part adds to its own stage, so a known part is that stage's sum.
    CallBuilder moe(d, t, slowdown, keep);
    if (known) moe.stage_us[int(Stage::kAttention)] = known->attn_us;
    else attention_calls(moe, m, dep, t_mb, mb.requests);
    moe_calls(moe, m, dep, d, t_mb);
    // A dense layer runs the same attention calls as a MoE layer, then the dense MLP.
    CallBuilder dense(d, t, slowdown, keep);
    if (known) dense.stage_us[int(Stage::kDenseMlp)] = known->dense_mlp_us;
    else dense_mlp_calls(dense, m, dep, t_mb);
    auto us = [](const CallBuilder& b, Stage s) { return b.stage_us[int(s)]; };
    st.attn = us(moe, Stage::kAttention);
    st.dispatch = us(moe, Stage::kDispatch);
    st.moe_shared = us(moe, Stage::kMoeShared);
    st.moe = us(moe, Stage::kMoe) + st.moe_shared;
    st.combine = us(moe, Stage::kCombine);
    st.dense = st.attn + us(dense, Stage::kDenseMlp);

    // The head: LM head on the step's tokens (prefill: the last token of each prompt), and in
    // decode each MTP draft pass (one MoE layer and the head, for the batch).
    CallBuilder head(d, t, 1.0, keep);
    if (known) head.stage_us[int(Stage::kHead)] = known->lm_head_us;
    else lm_head_call(head, m, dep, mb.step_tokens);
    st.head_ms = us(head, Stage::kHead) / 1e3 + (mtp_ms >= 0 ? mtp_ms : mtp_draft_ms(m, d, t, dep));

    if (keep) {
        // One call of each kind, counted per step.
        const double n_moe = double(m.n_moe_layers()), n_dense = double(m.n_dense_layers);
        for (auto& c : moe.calls) c.calls = st.micro * (c.stage == Stage::kAttention ? n_moe + n_dense : n_moe);
        for (auto& c : dense.calls)
            if (c.stage == Stage::kDenseMlp) c.calls = st.micro * n_dense, moe.calls.push_back(c);
        for (auto& c : head.calls) moe.calls.push_back(c);
        *calls = std::move(moe.calls);
    }
    return st;
}

namespace {
// Kernels one step launches: each priced call as often as the step runs it, and each MTP draft
// pass (one MoE layer's calls of a micro-batch and the LM head).
double launches_per_step(const std::vector<KernelCall>& calls, const Deployment& dep) {
    double n = 0, layer_calls = 0;
    for (const KernelCall& c : calls) {
        n += c.calls;
        if (c.stage != Stage::kHead && c.stage != Stage::kDenseMlp) layer_calls += 1;
    }
    return n + double(dep.mtp) * (layer_calls + 1);
}
}  // namespace

StepResult step(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep) {
    m.validate();
    d.validate();
    dep.validate(m, d);
    StepResult r;
    const bool decode = dep.phase == Phase::kDecode;
    const StepStages st = step_stages(m, d, t, dep, &r.calls);
    const int n_moe = int(m.n_moe_layers());
    r.compute_ms = st.micro * (st.attn + st.moe) / 1e3;
    r.comm_ms = st.micro * (st.dispatch + st.combine) / 1e3;
    r.dense_layer_ms = st.micro * st.dense / 1e3;
    r.head_ms = st.head_ms;
    r.overhead_ms = dep.step_overhead_ms >= 0 ? dep.step_overhead_ms
                                              : (decode ? kDecodeStepOverheadMs : kPrefillStepOverheadMs);
    const double layers_ms = schedule_ms(m, st, dep.overlap);
    // A model without MoE layers (all dense) has no MoE layer to time: 0, not 0 / 0.
    r.moe_layer_ms = n_moe > 0 ? (layers_ms - double(m.n_dense_layers) * r.dense_layer_ms - r.head_ms) / n_moe : 0.0;
    // Eager execution: the host launches every kernel in turn, ahead of the GPU. The GPU waits
    // wherever its kernels are shorter than their launches, so the step takes at least the host's
    // launch time (the larger of the two; graph mode replays the step with no host bound).
    r.launches = launches_per_step(r.calls, dep);
    r.launch_ms = r.launches * dep.eager_launch_us / 1e3;
    r.step_ms = std::max(layers_ms, r.launch_ms) + r.overhead_ms;

    if (decode) {
        r.tokens_per_step = dep.batch * (1 + dep.mtp_accepted);
        r.tpot_ms = r.step_ms / (1 + dep.mtp_accepted);
        r.tps_user = 1e3 / r.tpot_ms;
    } else {
        r.tokens_per_step = dep.tokens;
    }
    r.tokens_per_gpu_s = r.tokens_per_step / (r.step_ms / 1e3);
    memory(m, d, dep, r);
    for (const auto& c : r.calls) {
        if (!c.from_table) ++r.calls_default;
        else if (c.clamped) ++r.calls_clamped;
        else ++r.calls_from_table;
    }
    return r;
}

void memory(const ModelConfig& m, const DeviceSpec& d, const Deployment& dep, StepResult& r) {
    // FP8 weights as stored (the standard MLA weights, not the absorbed products), BF16 embedding
    // and LM head, the latent cache of the batch at its average context.
    const ParamCounts pc = param_counts(m, false);
    // With MoE TP a GPU holds moe_tp times more experts, each a 1/moe_tp slice: the same bytes.
    const double local = double(m.n_routed_experts + dep.redundant_experts) / dep.ep;
    const double per_param = dep.weights_fp8 ? 1.0 : 2.0;
    const double per_expert_param = dep.experts_fp4 ? kNvfp4Bytes : per_param;
    // An NVFP4 wo (the FP4-v2 checkpoints) takes its share of the MLA block at the NVFP4 bytes.
    const double mla_bytes = per_param * pc.mla + (dep.wo_fp4 ? (kNvfp4Bytes - per_param) * pc.mla_wo : 0.0);
    // Under attention TP the dense MLP, the embedding and the LM head are split over the group too.
    const double weights = mla_bytes * m.n_layers / dep.attn_tp + per_param * pc.dense_mlp * m.n_dense_layers / dense_group_tp(dep) +
                           per_expert_param * (local + m.n_shared_experts / shared_expert_tp(dep)) * pc.expert * m.n_moe_layers() +
                           pc.gate * m.n_moe_layers() + 2.0 * (pc.embedding + pc.lm_head) / dep.attn_tp;
    r.weights_gib = weights / double(1 << 30);
    r.kv_bytes_per_token = kv_entry_bytes(m, dep.kv_fp8) * m.n_layers;
    const double free_bytes = d.mem_gb * double(1 << 30) * dep.mem_fraction - weights;
    if (dep.phase == Phase::kDecode) {
        // A TP group holds its whole batch's latent cache on every GPU (the latent is shared by heads).
        const double per_request = r.kv_bytes_per_token * dep.kv_len * dep.attn_tp;
        r.batch_limit = std::max(0.0, free_bytes / per_request);
        r.kv_gib = per_request * dep.batch / double(1 << 30);
        r.fits_memory = dep.batch <= r.batch_limit;
    } else {
        r.kv_gib = r.kv_bytes_per_token * dep.tokens / (1 - dep.cached_prefix / dep.prompt_len) / double(1 << 30);
        r.fits_memory = r.kv_gib * double(1 << 30) <= free_bytes;
    }
}

}  // namespace dsperf
