#include "model/mla_calls.hpp"

namespace dsperf {

MlaDims mla_dims(const ModelConfig& m, double attn_tp) {
    return {double(m.dim),         double(m.n_heads) / attn_tp, double(m.q_lora_rank), double(m.kv_lora_rank),
            double(m.qk_nope_head_dim), double(m.qk_rope_head_dim), double(m.v_head_dim)};
}

MlaRows mla_rows(MlaVariant v, double tokens, double keys) {
    // CD decompresses each token once, into its per-head cache; CC decompresses every key it attends
    // to from the latent cache, every call.
    return {tokens, tokens, v == MlaVariant::CD ? tokens : keys};
}

const MlaCall& MlaCallList::core() const {
    for (const MlaCall& c : *this)
        if (!c.gemm()) return c;
    return items_[0];  // unreachable: every list has its core
}

MlaCallList mla_layer_calls(MlaVariant variant, const MlaDims& d, const MlaRows& r) {
    const double T = r.queries, H = d.heads, L = d.kv_lora, N = d.nope, R = d.rope, V = d.v, D = d.dim;
    const double q_in = d.q_lora > 0 ? d.q_lora : D;  // what wq_b (and the absorbed query) reads
    const bool absorbed = dsperf::absorbed(variant), materialised = variant == MlaVariant::AM_CC_ME;
    auto gemm = [](MlaCallId id, MlaPart part, double m, double n, double k) {
        MlaCall c;
        c.id = id, c.part = part;
        c.m = m, c.n = n, c.k = k;
        return c;
    };
    auto per_head = [&](MlaCallId id, MlaPart part, double n, double k) {
        MlaCall c = gemm(id, part, T, n, k);
        c.count = H, c.per_head = true;
        return c;
    };
    MlaCallList calls;
    const MlaPart P = MlaPart::kProlog, O = MlaPart::kOutput;
    if (d.q_lora > 0) calls.push_back(gemm(MlaCallId::kWqA, P, T, d.q_lora, D));
    calls.push_back(gemm(MlaCallId::kWkvA, P, r.compressed, L + R, D));
    // The materialised form keeps only wq_b's rope columns; W_UK^T wq_b_nope gives the latent query.
    calls.push_back(gemm(MlaCallId::kWqB, P, T, H * (materialised ? R : N + R), q_in));
    if (materialised) calls.push_back(gemm(MlaCallId::kQAbsorb, P, T, H * L, q_in));
    if (!absorbed) calls.push_back(gemm(MlaCallId::kWkvB, MlaPart::kDecompress, r.decompressed, H * (N + V), L));
    if (absorbed && !materialised) calls.push_back(per_head(MlaCallId::kQNopeWuk, P, L, N));
    MlaCall core;  // the core's id and part are the defaults
    core.m = T;
    // Decompressed MHA: [nope | rope] keys and per-head values. Absorbed MQA: [latent | rope] keys,
    // the latent as values.
    core.qk = absorbed ? L + R : N + R;
    core.v = absorbed ? L : V;
    calls.push_back(core);
    if (absorbed && !materialised) calls.push_back(per_head(MlaCallId::kOLatentWuv, O, V, L));
    if (materialised)
        calls.push_back(gemm(MlaCallId::kOAbsorb, O, T, D, H * L));
    else
        calls.push_back(gemm(MlaCallId::kWo, O, T, D, H * V));
    return calls;
}

}  // namespace dsperf
