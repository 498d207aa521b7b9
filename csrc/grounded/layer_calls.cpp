#include "grounded/layer_calls.hpp"

#include <cmath>

#include "model/block_costs.hpp"
#include "model/mla_calls.hpp"
#include "grounded/routing_skew.hpp"

namespace dsperf::layer {

double dense_group_tp(const Deployment& dep) { return std::max(double(dep.dense_tp), double(dep.attn_tp)); }
bool experts_share_attention_group(const Deployment& dep) { return dep.attn_tp > 1 && dep.ep == dep.attn_tp; }
double shared_expert_tp(const Deployment& dep) { return experts_share_attention_group(dep) ? double(dep.attn_tp) : 1.0; }

namespace {

// Bytes a token's dispatch payload takes: NVFP4 values + one FP8 scale per 16 (TensorRT-LLM quantises
// the tokens for NVFP4 experts before its all-to-all), FP8 values + one FP32 scale per 128, or BF16.
double dispatch_payload(const ModelConfig& m, const Deployment& dep) {
    if (dep.dispatch_fp4) return double(m.dim) * kNvfp4Bytes;
    return dep.dispatch_fp8 ? double(m.dim) + std::ceil(m.dim / 128.0) * 4 : 2.0 * m.dim;
}

// The GEMM family of the weights: DeepGEMM's FP8 block-scaled GEMMs, or BF16 GEMMs (priced at the
// default efficiency where the tables have no BF16 rows).
TableFamily weight_gemm(const Deployment& dep) { return dep.weights_fp8 ? TableFamily::kGemmFp8 : TableFamily::kGemmBf16; }

// Bytes per value an activation takes as the input of a GEMM of this family: NVFP4 or FP8 once
// quantised, BF16 as it is (a BF16 GEMM reads the activations unquantised).
double input_bytes(TableFamily f) {
    if (f == TableFamily::kGemmFp4) return kNvfp4Bytes;
    return f == TableFamily::kGemmBf16 ? 2.0 : 1.0;
}

// The weights' format of the routed and shared experts, as the family of a plain GEMM over them.
TableFamily expert_gemm(const Deployment& dep) { return dep.experts_fp4 ? TableFamily::kGemmFp4 : weight_gemm(dep); }

// The family of the attention output projection: NVFP4 where the checkpoint stores it so (FP4-v2).
TableFamily wo_gemm(const Deployment& dep) { return dep.wo_fp4 ? TableFamily::kGemmFp4 : weight_gemm(dep); }

// The EP size of the network table's intranode (NVLink) rows.
constexpr double kIntranodeTableEp = 8;

// The other GPUs of the EP group one token reaches when each is sent a token once: every GPU of
// each expert group holding one of its experts (an expert group: moe_tp GPUs, each holding a slice
// of the same E x moe_tp / ep experts; one GPU under pure EP). With one group (moe_tp == ep) that
// is every other GPU: an all-gather.
double normal_copies(const ModelConfig& m, const Deployment& dep) {
    const double E = double(m.n_routed_experts), per_group = E * dep.moe_tp / dep.ep;
    return (dep.ep - 1) * (1 - chance_none_drawn(E, per_group, m.n_activated_experts));
}

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

}  // namespace

void attention_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, double t,
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
        // The attention output is BF16; an FP8 or NVFP4 wo GEMM quantises it first (a BF16 one reads it).
        if (c.id == MlaCallId::kWo && wo_gemm(dep) != TableFamily::kGemmBf16)
            elementwise("wo_act_quant", T * H * V * (2 + input_bytes(wo_gemm(dep))));
        if (c.id == MlaCallId::kCore) {
            attention_core(b, dep, H, requests * tp, decode ? 0 : prompts);
            continue;
        }
        KernelShape s;
        const TableFamily f = c.per_head ? TableFamily::kGemmBf16 : c.id == MlaCallId::kWo ? wo_gemm(dep) : weight_gemm(dep);
        s.m = c.m, s.n = c.n, s.k = c.k, s.groups = c.count;  // a plain GEMM's family says its operands' format
        b.compute(c.name(), f, A, s);
        if (c.id == MlaCallId::kWkvA) elementwise("q_kv_norm_rope", T * ((QL > 0 ? QL : 0) + L + R) * 4 + T * H * R * 4);
    }
    if (tp > 1) b.allreduce("attn_allreduce", A, tp, T * D * 2);  // BF16 activations
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
    // MoE TP every GPU of a destination expert group gets the token, and each returns its partial
    // sum. The low-latency kernels send a token once per (token, expert) pair: moe_tp times the
    // payload each way. The normal kernels send it once per GPU it reaches.
    const double tp = double(dep.moe_tp);
    const double payload = dispatch_payload(m, dep);
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
        b.allreduce("moe_allreduce", Stage::kCombine, dep.attn_tp, t * dep.attn_tp * D * 2);
    } else if (dep.phase == Phase::kDecode && (internode || domain_ll)) {
        // Every (token, expert) pair is sent, as DeepEP's low-latency bandwidth counts it: over the NICs
        // between nodes, or the scale-up link where the device's rows were timed (as NIC fractions).
        const double ll_gbps = internode ? d.scaleout_gbps : d.nvlink_gbps;
        b.comm("dispatch", TableFamily::kDispatchLowLatency, Stage::kDispatch, link, t * K * payload * tp, ll_gbps,
               kTableNicGbps, domain_ll);
        b.comm("combine", TableFamily::kCombineLowLatency, Stage::kCombine, link, t * K * 2 * D * tp, ll_gbps,
               kTableNicGbps, domain_ll);
    } else if (dep.phase == Phase::kDecode) {
        // Inside one NVLink domain (a node, an NVL72 rack) with the normal kernels.
        KernelShape nvlink;
        nvlink.ep = domain_normal ? double(dep.ep) : kIntranodeTableEp;
        // The (token, expert) pairs that leave the GPU, as the tables' rows count them, each sent to
        // the moe_tp GPUs of its expert group; but a token goes to a GPU once: at most every other
        // GPU of the EP group (one expert group over them all: the all-gather the stacks run).
        const double remote = t * std::min(K * tp * (dep.ep - 1) / dep.ep, dep.ep - 1.0);
        b.comm("dispatch", TableFamily::kDispatchNormal, Stage::kDispatch, nvlink, remote * payload, d.nvlink_gbps,
               kTableNvlinkGbps, domain_normal);
        b.comm("combine", TableFamily::kCombineNormal, Stage::kCombine, nvlink, remote * 2 * D, d.nvlink_gbps,
               kTableNvlinkGbps, domain_normal);
    } else {
        // A token crosses the NIC once per remote node it reaches (then NVLink forwards it; a node
        // holds the same experts' share with or without MoE TP); within a node, once per other GPU
        // it reaches.
        const double copies = internode ? expected_remote_nodes(m, dep.ep, d.gpus_per_node) : normal_copies(m, dep);
        const double link_gbps = internode ? d.scaleout_gbps : d.nvlink_gbps;
        const double table_gbps = internode ? kTableNicGbps : kTableNvlinkGbps;
        KernelShape row = link;
        if (!internode && !domain_normal) row.ep = kIntranodeTableEp;
        b.comm("dispatch", TableFamily::kDispatchNormal, Stage::kDispatch, row, t * copies * payload, link_gbps,
               table_gbps, domain_normal);
        b.comm("combine", TableFamily::kCombineNormal, Stage::kCombine, row, t * copies * 2 * D, link_gbps,
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
        const TableFamily f = expert_gemm(dep);
        b.compute("shared_up", f, Stage::kMoeShared, up);
        KernelShape act;
        act.bytes = t_shared * shared_inter * (2 * 2 + input_bytes(f));  // SiLU-mul (+ requantisation)
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
        perm.bytes = rows * dispatch_payload(m, dep) * 2;  // one token's payload a row (not x moe_tp)
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
    act.bytes = rows * I_gpu * (2 * 2 + input_bytes(expert_gemm(dep)));  // SiLU-mul (+ requantisation)
    b.compute("experts_act_quant", TableFamily::kElementwise, M, act);
    b.compute("experts_down", g, M, down);
}

// The dense MLP, data-parallel (each GPU its own tokens) or split over dense_tp GPUs of a node
// (each GPU a 1/dense_tp slice of the intermediate for the group's tokens, then an all-reduce);
// under attention TP, over at least the attention group (dense_group_tp).
void dense_mlp_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, double t) {
    const double tp = dense_group_tp(dep), T = t * tp, I = double(m.inter_dim) / tp;
    KernelShape up, down;
    up.m = down.m = T, up.n = 2.0 * I, up.k = double(m.dim), down.n = double(m.dim), down.k = I;
    b.compute("dense_up", weight_gemm(dep), Stage::kDenseMlp, up);
    KernelShape act;
    act.bytes = T * I * (2 * 2 + input_bytes(weight_gemm(dep)));  // SiLU-mul (+ requantisation)
    b.compute("dense_act_quant", TableFamily::kElementwise, Stage::kDenseMlp, act);
    b.compute("dense_down", weight_gemm(dep), Stage::kDenseMlp, down);
    if (tp > 1) b.allreduce("dense_allreduce", Stage::kDenseMlp, tp, T * m.dim * 2);
}

}  // namespace dsperf::layer
