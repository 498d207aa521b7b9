#include "seed/sweep.hpp"

#include "seed/decode_plan.hpp"

#include <stdexcept>
#include <string>

namespace dsperf {

size_t DecodeGrid::size() const {
    // Checked: seven axes of a few thousand values each overflow size_t, and a wrapped count would
    // size the caller's columns too small.
    size_t n = 1;
    for (size_t axis : {devices.size(), tp.size(), ep.size(), kv_fp8.size(), seq_len.size(), decode_len.size(),
                        batch.size()})
        if (__builtin_mul_overflow(n, axis, &n))
            throw std::invalid_argument("decode_sweep grid: the product of the axis sizes overflows");
    return n;
}

void DecodeGrid::validate(const ModelConfig& m) const {
    auto nonempty = [](size_t n, const char* axis) {
        if (n == 0) throw std::invalid_argument(std::string(axis) + " must not be empty");
    };
    nonempty(devices.size(), "devices");
    nonempty(tp.size(), "tp");
    nonempty(ep.size(), "ep");
    nonempty(kv_fp8.size(), "kv_fp8");
    nonempty(seq_len.size(), "seq_len");
    nonempty(decode_len.size(), "decode_len");
    nonempty(batch.size(), "batch");
    if (redundant_experts.size() != ep.size())
        throw std::invalid_argument("redundant_experts must have one entry per ep value");
    m.validate();
    // Each axis value is checked once through DecodeParams::validate, the other axes at
    // their first value.
    DecodeParams p;
    p.absorbed = absorbed;
    p.group_gemm_discount = group_gemm_discount;
    p.seq_len = seq_len[0], p.decode_len = decode_len[0], p.batch = batch[0];
    p.tp = tp[0], p.ep = ep[0], p.redundant_experts = redundant_experts[0];
    for (const DeviceSpec& d : devices) {
        d.validate();
        for (int v : tp) { DecodeParams q = p; q.tp = v; q.validate(m, d); }
        for (size_t i = 0; i < ep.size(); ++i) {
            DecodeParams q = p;
            q.ep = ep[i], q.redundant_experts = redundant_experts[i];
            q.validate(m, d);
        }
        for (double v : seq_len) { DecodeParams q = p; q.seq_len = v; q.validate(m, d); }
        for (double v : decode_len) { DecodeParams q = p; q.decode_len = v; q.validate(m, d); }
        for (double v : batch) { DecodeParams q = p; q.batch = v; q.validate(m, d); }
    }
    for (int v : kv_fp8)
        if (v != 0 && v != 1) throw std::invalid_argument("kv_fp8 values must be 0 or 1");
}

void decode_sweep(const ModelConfig& m, const DecodeGrid& g, const Fixes& fx, const DecodeSweepColumns& out) {
    g.validate(m);
    size_t row = 0;
    DecodeParams p;
    p.absorbed = g.absorbed;
    p.group_gemm_discount = g.group_gemm_discount;
    for (size_t di = 0; di < g.devices.size(); ++di) {
        const DeviceSpec& d = g.devices[di];
        for (int tp : g.tp) {
            p.tp = tp;
            for (size_t ei = 0; ei < g.ep.size(); ++ei) {
                p.ep = g.ep[ei];
                p.redundant_experts = g.redundant_experts[ei];
                for (int kv8 : g.kv_fp8) {
                    p.kv_fp8 = kv8 != 0;
                    for (double s : g.seq_len) {
                        p.seq_len = s;
                        for (double dl : g.decode_len) {
                            p.decode_len = dl;
                            // Everything but the batch is fixed here: plan once, evaluate per batch.
                            const DecodePlan plan = make_decode_plan(m, d, p, fx);
                            for (double b : g.batch) {
                                const DecodeResult r = evaluate_decode_plan(plan, b);
                                out.device_index[row] = int32_t(di);
                                out.tp[row] = tp;
                                out.ep[row] = p.ep;
                                out.redundant_experts[row] = p.redundant_experts;
                                out.kv_fp8[row] = kv8 != 0;
                                out.seq_len[row] = s;
                                out.decode_len[row] = dl;
                                out.batch[row] = b;
                                out.mla_tp[row] = r.mla_tp;
                                out.tpot_ms[row] = r.tpot_ms;
                                out.tpot_overlap_ms[row] = r.tpot_overlap_ms;
                                out.tps_user[row] = r.tps_user;
                                out.tps_user_overlap[row] = r.tps_user_overlap;
                                out.tokens_per_gpu_s[row] = r.tokens_per_gpu_s;
                                out.tokens_per_gpu_s_overlap[row] = r.tokens_per_gpu_s_overlap;
                                out.time_budget_ms[row] = r.time_budget_ms;
                                out.batch_limit[row] = r.batch_limit;
                                ++row;
                            }
                        }
                    }
                }
            }
        }
    }
}

}  // namespace dsperf
