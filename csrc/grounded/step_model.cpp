#include "grounded/step_model.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/block_costs.hpp"
#include "model/mla_calls.hpp"
#include "grounded/routing_skew.hpp"

namespace dsperf {

namespace {

// Bytes a token's dispatch payload takes: FP8 values + one FP32 scale per 128, or BF16.
double dispatch_payload(const ModelConfig& m, bool fp8) {
    return fp8 ? double(m.dim) + std::ceil(m.dim / 128.0) * 4 : 2.0 * m.dim;
}

// Bytes one token's latent cache entry takes in one layer: BF16, or FlashMLA's FP8 layout
// (FP8 latent + one FP32 scale per 128 + BF16 rope key).
double kv_entry_bytes(const ModelConfig& m, bool fp8) {
    return fp8 ? double(m.kv_lora_rank) + 4.0 * std::ceil(m.kv_lora_rank / 128.0) + 2.0 * m.qk_rope_head_dim
               : 2.0 * m.kv_cache_width();
}

// The link the all-reduce latency rows were measured on: H100 SXM, NVLink 4, 450 GB/s per direction
// (NVIDIA H100 datasheet: 900 GB/s bidirectional).
constexpr double kAllReduceTableNvlinkGbps = 450;

// Under attention TP every GPU of the group holds its activations, and the stacks split the dense
// MLP (over at least attn_tp), LM head and embedding over the group too (docs/GROUNDED_MODEL.md).
double dense_group_tp(const Deployment& dep) { return std::max(double(dep.dense_tp), double(dep.attn_tp)); }

// The experts share the attention TP group: its GPUs hold every token after the attention
// all-reduce, so the MoE needs no dispatch (moe_calls) and the shared experts split over it too.
bool experts_share_attention_group(const Deployment& dep) { return dep.attn_tp > 1 && dep.ep == dep.attn_tp; }
double shared_expert_tp(const Deployment& dep) { return experts_share_attention_group(dep) ? double(dep.attn_tp) : 1.0; }

// The LM head for `rows` tokens per GPU: vocabulary-parallel over the attention TP group (each GPU
// 1/attn_tp of the vocabulary for the group's rows; the gather of the logits is not priced).
KernelShape lm_head_shape(const ModelConfig& m, const Deployment& dep, double rows) {
    KernelShape lm;
    lm.m = rows * dep.attn_tp, lm.n = double(m.vocab_size) / dep.attn_tp, lm.k = double(m.dim), lm.fp8 = false;
    return lm;
}

}  // namespace

AllReduceLatency tp_allreduce_latency(const KernelTables& t, double tp, double message_bytes, double link_gbps) {
    return t.allreduce.latency_us(tp, message_bytes, link_gbps / kAllReduceTableNvlinkGbps,
                                  link_gbps * kLargeAllReduceLinkShare);
}

namespace {

// The calls of one layer for one micro-batch; each priced on its own.
class CallBuilder {
public:
    CallBuilder(const DeviceSpec& d, const KernelTables& t, double compute_slowdown, bool keep_calls = true)
        : d_(d), t_(t), slowdown_(compute_slowdown), keep_(keep_calls) {}

    std::vector<KernelCall> calls;  // kept only when asked for
    std::array<double, 7> stage_us{};  // per Stage
    const KernelTables& tables() const { return t_; }

    void compute(const char* name, TableFamily f, Stage stage, const KernelShape& s) {
        KernelCall c{name, f, stage};
        c.shape = s;
        // The table's efficiency is against the datasheet roofline at the clock its benchmarks ran
        // at; a deployment under sustained load runs its FLOPs at sustained_clock_ratio of it (the
        // roofline time in `w`, priced there).
        CallWork w;
        const TableLookup e = t_.lookup(f, s, &d_, d_.sustained_clock_ratio, &w);
        c.flops = w.work.flops, c.bytes = w.work.bytes;
        c.efficiency = e.value, c.from_table = e.found, c.clamped = e.clamped;
        double us = w.roofline_s / e.value * 1e6;
        if (!e.found) us = std::max(us, kMinKernelUs);
        c.us = us * slowdown_ + kGraphKernelGapUs;
        add(c);
    }

    // A transfer of `bytes` per GPU at the family's measured bandwidth at this EP (TP) size,
    // scaled by the device's link against the link the table was measured on.
    // domain_rows: read the device's own rows timed inside its scale-up domain
    // (KernelTables::add_domain_bandwidth) instead of the network table's.
    void comm(const char* name, TableFamily f, Stage stage, const KernelShape& s, double bytes,
              double link_gbps, double table_link_gbps, bool domain_rows = false) {
        KernelCall c{name, f, stage};
        c.shape = s;
        const TableLookup e = domain_rows ? t_.lookup_domain(f, s) : t_.lookup(f, s);
        const double gbps = e.found ? e.value * link_gbps / table_link_gbps : link_gbps * t_.default_efficiency;
        c.bytes = bytes, c.efficiency = gbps, c.from_table = e.found, c.clamped = e.clamped;
        c.us = bytes / (gbps * 1e9) * 1e6;
        if (!e.found) c.us = std::max(c.us, kMinKernelUs);
        add(c);
    }

    // A TP all-reduce of a `message` of bytes across `tp` GPUs: at the all-reduce table's measured
    // latency for that size where it has rows (the fixed cost of a small all-reduce dominates a
    // decode step's), else as ring traffic at the all-reduce bandwidth (the old pricing).
    void allreduce(const char* name, Stage stage, double tp, double message, double link_gbps) {
        const AllReduceLatency lat = tp_allreduce_latency(t_, tp, message, link_gbps);
        if (!lat.found) {
            KernelShape s;
            s.tp = tp;
            return comm(name, TableFamily::kAllReduce, stage, s, message * 2 * (tp - 1) / tp, link_gbps,
                        kTableNvlinkGbps);
        }
        KernelCall c{name, TableFamily::kAllReduce, stage};
        c.shape.tp = tp, c.shape.bytes = message;
        c.bytes = message * 2 * (tp - 1) / tp;
        c.us = lat.us;
        c.efficiency = c.bytes / (c.us * 1e-6) / 1e9;  // GB/s of ring traffic, as the bandwidth rows
        c.from_table = true, c.clamped = lat.clamped;
        add(c);
    }

    void keep_all() { keep_ = true; }

    // A call priced elsewhere (a multiple of one priced here).
    void add(const KernelCall& c) {
        stage_us[int(c.stage)] += c.us;
        if (keep_) calls.push_back(c);
    }

private:
    const DeviceSpec& d_;
    const KernelTables& t_;
    double slowdown_;
    bool keep_;
};

// The GEMM family of the weights: DeepGEMM's FP8 block-scaled GEMMs, or BF16 GEMMs (priced at the
// default efficiency where the tables have no BF16 rows).
TableFamily weight_gemm(const Deployment& dep) { return dep.weights_fp8 ? TableFamily::kGemmFp8 : TableFamily::kGemmBf16; }

// Bytes per value the experts' SiLU-mul writes for their down projection: NVFP4, or FP8.
double quant_bytes(const Deployment& dep) { return dep.experts_fp4 ? kNvfp4Bytes : 1.0; }

// The EP size of the network table's intranode (NVLink) rows.
constexpr double kIntranodeTableEp = 8;

struct LayerTokens {
    double moe_tokens;  // tokens this GPU feeds the MoE per micro-batch
    double requests;    // decode: requests per micro-batch on this GPU
};

// The attention core: FlashMLA's decode over `requests` requests of the TP group, or `prompts`
// causal prefills of the deployment's prompts (priced as one, counted `prompts` times).
void attention_core(CallBuilder& b, const Deployment& dep, double heads, double requests, double prompts) {
    const char* name = kMlaCallNames[int(MlaCallId::kCore)];
    KernelShape s;
    s.heads = heads, s.fp8_math = dep.attn_fp8;
    if (dep.phase == Phase::kDecode) {
        s.batch = requests, s.kv_len = dep.kv_len, s.q_len = 1 + dep.mtp, s.fp8 = dep.kv_fp8;
        return b.compute(name, TableFamily::kMlaDecode, Stage::kAttention, s);
    }
    s.m = dep.prompt_len - dep.cached_prefix, s.kv_len = dep.prompt_len;
    CallBuilder one = b;  // price one prompt, count it `prompts` times
    one.calls.clear();
    one.keep_all();
    one.compute(name, TableFamily::kMlaPrefill, Stage::kAttention, s);
    KernelCall c = one.calls.front();
    // The prompts' work, in one (variable-length) launch: one graph boundary, not one per prompt.
    c.us = (c.us - kGraphKernelGapUs) * prompts + kGraphKernelGapUs, c.flops *= prompts, c.bytes *= prompts;
    b.add(c);
}

void attention_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, const DeviceSpec& d, double t,
                     double requests) {
    const double tp = dep.attn_tp;
    const double T = t * tp;  // tokens the TP group's attention sees
    const MlaDims dims = mla_dims(m, tp);
    const double H = dims.heads, D = dims.dim, QL = dims.q_lora, L = dims.kv_lora, R = dims.rope, V = dims.v;
    const Stage A = Stage::kAttention;
    auto elementwise = [&](const char* name, double bytes) {
        KernelShape s;
        s.bytes = bytes;
        b.compute(name, TableFamily::kElementwise, A, s);
    };
    // Decode runs absorbed MLA over the latent cache (FlashMLA: W_UK on the queries, W_UV on the
    // output, at run time); prefill the decompressed form, every key of the prompts (cached prefix
    // included) decompressed from the latent.
    const bool decode = dep.phase == Phase::kDecode;
    const MlaVariant variant = decode ? MlaVariant::A_CC_ME : MlaVariant::CC;
    const double new_per_prompt = dep.prompt_len - dep.cached_prefix;
    const double prompts = T / new_per_prompt;
    const MlaRows rows = mla_rows(variant, T, decode ? T : prompts * dep.prompt_len);
    elementwise("attn_norm", T * D * 4);
    for (const MlaCall& c : mla_layer_calls(variant, dims, rows)) {
        // The attention output is BF16; the FP8 wo GEMM quantises it first (per-token 1x128 scales).
        if (c.id == MlaCallId::kWo) elementwise("wo_act_quant", T * H * V * 3);
        if (c.id == MlaCallId::kCore) {
            attention_core(b, dep, H, requests * tp, decode ? 0 : prompts);
            continue;
        }
        KernelShape s;
        const TableFamily f = c.per_head ? TableFamily::kGemmBf16 : weight_gemm(dep);
        s.m = c.m, s.n = c.n, s.k = c.k, s.groups = c.count, s.fp8 = f == TableFamily::kGemmFp8;
        b.compute(c.name(), f, A, s);
        if (c.id == MlaCallId::kWkvA) elementwise("q_kv_norm_rope", T * ((QL > 0 ? QL : 0) + L + R) * 4 + T * H * R * 4);
    }
    if (tp > 1) b.allreduce("attn_allreduce", A, tp, T * D * 2, d.nvlink_gbps);  // BF16 activations
}

void moe_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, const DeviceSpec& d, double t) {
    const double D = double(m.dim), E = double(m.n_routed_experts), K = double(m.n_activated_experts);
    const double I = double(m.moe_inter_dim);
    const Stage M = Stage::kMoe;
    KernelShape norm;
    norm.bytes = t * D * 4;
    b.compute("moe_norm", TableFamily::kElementwise, Stage::kMoeShared, norm);
    KernelShape gate;
    gate.m = t, gate.n = E, gate.k = D, gate.fp8 = false;
    b.compute("gate", TableFamily::kGemmBf16, Stage::kMoeShared, gate);

    // Dispatch and combine: DeepEP low-latency kernels in decode, normal kernels in prefill. With
    // MoE TP every GPU of the destination expert group gets the token, and each returns its
    // partial sum: moe_tp times the payload each way.
    const double tp = double(dep.moe_tp);
    const double payload = dispatch_payload(m, dep.dispatch_fp8) * tp;
    KernelShape link;
    link.ep = dep.ep;
    const bool internode = dep.ep > d.gpus_per_node;
    const KernelTables& tables = b.tables();
    // Inside one scale-up domain the device's own rows, where its benchmarks timed that kernel there
    // (at the call's own EP); else the network table's (between nodes at this EP over the NICs,
    // inside a node the normal kernels' EP8 NVLink row scaled to this device's link).
    const bool domain_ll = !internode && tables.has_domain_rows(TableFamily::kDispatchLowLatency);
    const bool domain_normal = !internode && tables.has_domain_rows(TableFamily::kDispatchNormal);
    // Attention TP over the same GPUs as the experts (TensorRT-LLM's and SGLang's one-node default):
    // after the attention all-reduce every GPU holds every token of the group, so each picks the
    // rows of its own experts locally (no dispatch) and the partial outputs are summed by one
    // all-reduce of the group's tokens (no combine).
    if (experts_share_attention_group(dep)) {
        b.allreduce("moe_allreduce", Stage::kCombine, dep.attn_tp, t * dep.attn_tp * D * 2, d.nvlink_gbps);
    } else if (dep.phase == Phase::kDecode && (internode || domain_ll)) {
        // Every (token, expert) pair is sent, as DeepEP's low-latency bandwidth counts it: over the NICs
        // between nodes, or the scale-up link where the device's rows were timed (as NIC fractions).
        const double ll_gbps = internode ? d.scaleout_gbps : d.nvlink_gbps;
        b.comm("dispatch", TableFamily::kDispatchLowLatency, Stage::kDispatch, link, t * K * payload, ll_gbps,
               kTableNicGbps, domain_ll);
        b.comm("combine", TableFamily::kCombineLowLatency, Stage::kCombine, link, t * K * 2 * D * tp, ll_gbps,
               kTableNicGbps, domain_ll);
    } else if (dep.phase == Phase::kDecode) {
        // Inside one NVLink domain (a node, an NVL72 rack) with the normal kernels.
        KernelShape nvlink;
        nvlink.ep = domain_normal ? double(dep.ep) : kIntranodeTableEp;
        const double remote = t * K * (dep.ep - 1) / dep.ep;
        b.comm("dispatch", TableFamily::kDispatchNormal, Stage::kDispatch, nvlink, remote * payload, d.nvlink_gbps,
               kTableNvlinkGbps, domain_normal);
        b.comm("combine", TableFamily::kCombineNormal, Stage::kCombine, nvlink, remote * 2 * D * tp, d.nvlink_gbps,
               kTableNvlinkGbps, domain_normal);
    } else {
        // A token crosses the NIC once per remote node it reaches (then NVLink forwards it);
        // within a node, once per other GPU it reaches.
        double copies;
        if (internode) {
            copies = expected_remote_nodes(m, dep.ep, d.gpus_per_node);
        } else {
            const double per_gpu = E / dep.ep;
            double miss = 1;  // P(a given GPU holds none of the token's experts)
            for (int i = 0; i < m.n_activated_experts; ++i) miss *= std::max(0.0, (E - per_gpu - i) / (E - i));
            copies = (dep.ep - 1) * (1 - miss);
        }
        const double link_gbps = internode ? d.scaleout_gbps : d.nvlink_gbps;
        const double table_gbps = internode ? kTableNicGbps : kTableNvlinkGbps;
        KernelShape row = link;
        if (!internode && !domain_normal) row.ep = kIntranodeTableEp;
        b.comm("dispatch", TableFamily::kDispatchNormal, Stage::kDispatch, row, t * copies * payload, link_gbps,
               table_gbps, domain_normal);
        b.comm("combine", TableFamily::kCombineNormal, Stage::kCombine, row, t * copies * 2 * D * tp, link_gbps,
               table_gbps, domain_normal);
    }

    // Shared experts on this GPU's own tokens (plain GEMMs), routed experts as one grouped GEMM
    // per projection over the experts this GPU holds.
    // Split over the attention group where the experts share it (shared_expert_tp): a slice of
    // their intermediate for all the group's tokens, summed with the routed ones in moe_allreduce.
    const double shared_tp = shared_expert_tp(dep), t_shared = t * shared_tp;
    const double shared_inter = I * double(m.n_shared_experts) / shared_tp;
    if (shared_inter > 0) {
        KernelShape up, down;
        up.m = down.m = t_shared, up.n = 2 * shared_inter, up.k = D, down.n = D, down.k = shared_inter;
        up.fp8 = down.fp8 = dep.weights_fp8;
        const TableFamily f = dep.experts_fp4 ? TableFamily::kGemmFp4 : weight_gemm(dep);
        b.compute("shared_up", f, Stage::kMoeShared, up);
        KernelShape act;
        act.bytes = t_shared * (2 * shared_inter * 2 + shared_inter * quant_bytes(dep));  // SiLU-mul + requantisation
        b.compute("shared_act_quant", TableFamily::kElementwise, Stage::kMoeShared, act);
        b.compute("shared_down", f, Stage::kMoeShared, down);
    }
    // The masked and contiguous kernels skip experts that received no rows, so a small batch
    // reads the weights of the experts its rows reach: each row lands on one of the `local`
    // experts, uniformly under balanced routing.
    // With MoE TP the moe_tp GPUs of an expert group hold the same experts, each a 1/moe_tp slice
    // of their intermediate, and each sees all the group's rows.
    const double ranks = dep.ep / tp, local = (E + dep.redundant_experts) / ranks;
    // The experts serve the whole EP group's tokens: t per GPU where every rank carries this one's
    // load, routed_share times that where the group's ranks carry less (or more) on average. The step
    // waits for the busiest rank: `imbalance` where the deployment states it, and at least the
    // busiest load that routing balanced in expectation leaves (routing_skew: 2.6x at one row per
    // rank over 8 ranks; more where a token's rows cluster on few ranks, routing_dispersion).
    const double mean_rows = t * K * tp * dep.routed_share;
    const double skew = routing_skew(mean_rows, ranks, routing_dispersion(m, ranks, dep.redundant_experts));
    const double rows = mean_rows * std::max(dep.imbalance, skew);
    const double I_gpu = I / tp;
    const double active = local * (1 - std::pow(1 - 1 / local, rows));
    const double rows_per_expert = rows / active;
    const TableFamily g = dep.experts_fp4                ? TableFamily::kGroupedFp4
                          : dep.phase == Phase::kDecode ? TableFamily::kGroupedMasked
                                                        : TableFamily::kGroupedContiguous;
    if (dep.phase == Phase::kPrefill) {
        // The normal kernels deliver each token once; the contiguous layout wants one row per
        // (token, expert) pair grouped by expert: a permute before the GEMMs and a weighted
        // un-permute after them (the low-latency kernels write the masked layout directly).
        KernelShape perm, unperm;
        perm.bytes = rows * dispatch_payload(m, dep.dispatch_fp8) * 2;  // one token's payload a row (not x moe_tp)
        unperm.bytes = rows * D * 2 + t * D * 2;
        b.compute("permute", TableFamily::kElementwise, M, perm);
        b.compute("unpermute_reduce", TableFamily::kElementwise, M, unperm);
    }
    KernelShape up, down;
    up.m = down.m = rows_per_expert, up.groups = down.groups = active;
    up.fp8 = down.fp8 = dep.weights_fp8;
    up.n = 2 * I_gpu, up.k = D, down.n = D, down.k = I_gpu;
    b.compute("experts_up", g, M, up);
    KernelShape act;
    act.bytes = rows * (2 * I_gpu * 2 + I_gpu * quant_bytes(dep));  // SiLU-mul + requantisation
    b.compute("experts_act_quant", TableFamily::kElementwise, M, act);
    b.compute("experts_down", g, M, down);
}

// The dense MLP, data-parallel (each GPU its own tokens) or split over dense_tp GPUs of a node
// (each GPU a 1/dense_tp slice of the intermediate for the group's tokens, then an all-reduce);
// under attention TP, over at least the attention group (dense_group_tp).
void dense_mlp_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, const DeviceSpec& d, double t) {
    const double tp = dense_group_tp(dep), T = t * tp, I = double(m.inter_dim) / tp;
    KernelShape up, down;
    up.m = down.m = T, up.n = 2.0 * I, up.k = double(m.dim), down.n = double(m.dim), down.k = I;
    up.fp8 = down.fp8 = dep.weights_fp8;
    b.compute("dense_up", weight_gemm(dep), Stage::kDenseMlp, up);
    KernelShape act;
    act.bytes = T * (2.0 * I * 2 + I);  // SiLU-mul + FP8 requantisation
    b.compute("dense_act_quant", TableFamily::kElementwise, Stage::kDenseMlp, act);
    b.compute("dense_down", weight_gemm(dep), Stage::kDenseMlp, down);
    if (tp > 1) b.allreduce("dense_allreduce", Stage::kDenseMlp, tp, T * m.dim * 2, d.nvlink_gbps);
}

}  // namespace

double expected_remote_nodes(const ModelConfig& m, int ep, int gpus_per_node) {
    const double nodes = std::ceil(double(ep) / gpus_per_node);
    if (nodes <= 1) return 0;
    const double G = double(m.n_expert_groups), g = double(m.n_limited_groups), K = double(m.n_activated_experts);
    double reached;
    if (G > 1 && g < G && nodes <= G) {
        // Groups live whole on nodes (G / nodes per node); a token picks g groups: the chance a
        // node holds none of them is C(G - G/nodes, g) / C(G, g).
        const double per_node = G / nodes;
        double miss = 1;
        for (int i = 0; i < int(g); ++i) miss *= std::max(0.0, (G - per_node - i) / (G - i));
        reached = nodes * (1 - miss);
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
    attention_calls(b, m, dep, d, mb.tokens, mb.requests);
    dense_mlp_calls(b, m, dep, d, mb.tokens);
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
    attention_calls(pass, m, draft_pass(dep), d, dep.batch, dep.batch);
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
    else attention_calls(pass, m, draft, d, dep.batch, dep.batch);
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
    else attention_calls(moe, m, dep, d, t_mb, mb.requests);
    moe_calls(moe, m, dep, d, t_mb);
    // A dense layer runs the same attention calls as a MoE layer, then the dense MLP.
    CallBuilder dense(d, t, slowdown, keep);
    if (known) dense.stage_us[int(Stage::kDenseMlp)] = known->dense_mlp_us;
    else dense_mlp_calls(dense, m, dep, d, t_mb);
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
    // Under attention TP the dense MLP, the embedding and the LM head are split over the group too.
    const double weights = per_param * (pc.mla * m.n_layers / dep.attn_tp + pc.dense_mlp * m.n_dense_layers / dense_group_tp(dep)) +
                           per_expert_param * (local + m.n_shared_experts / shared_expert_tp(dep)) * pc.expert * m.n_moe_layers() +
                           pc.gate * m.n_moe_layers() + 2.0 * (pc.embedding + pc.lm_head) / dep.attn_tp;
    r.weights_gib = weights / double(1 << 30);
    r.kv_bytes_per_token = kv_entry_bytes(m, dep.kv_fp8) * m.n_layers;
    const double free_bytes = d.mem_gb * double(1 << 30) * kMemoryReserve - weights;
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
