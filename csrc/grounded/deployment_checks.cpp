// The boundary check of a Deployment: each field within its declared range, and the rules that
// relate fields to each other, to the model and to the device. The step model trusts what passes.
#include "common/require.hpp"
#include "grounded/layout_rules.hpp"
#include "grounded/step_model.hpp"

#include <cstdio>
#include <string>

namespace dsperf {

Infeasible layout_breach(const ModelConfig& m, const DeviceSpec& d, const Deployment& dep, std::string* message) {
    const auto breach = [message](Infeasible code, auto&& text) {
        if (message) *message = text();
        return code;
    };
    if (dep.experts_fp4 && d.fp4_tflops <= 0)
        return breach(Infeasible::kNoFp4, [&] { return "experts_fp4 needs a device with FP4 tensor cores (" + d.name + " has fp4_tflops = 0)"; });
    if (dep.wo_fp4 && d.fp4_tflops <= 0)
        return breach(Infeasible::kNoFp4, [&] { return "wo_fp4 needs a device with FP4 tensor cores (" + d.name + " has fp4_tflops = 0)"; });
    if (!tp_group_fits_nodes(dep.attn_tp, d.gpus_per_node))
        return breach(Infeasible::kTpDoesNotDivideNode, [&] {
            return "attn_tp (" + std::to_string(dep.attn_tp) + ") must divide the " + std::to_string(d.gpus_per_node) +
                   " GPUs of a node or be a multiple of them (a TP group over whole nodes)";
        });
    if (m.n_heads % dep.attn_tp != 0)
        return breach(Infeasible::kTpDoesNotDivideNode, [] { return std::string("attn_tp must divide the model's heads"); });
    if (d.gpus_per_node % dep.dense_tp != 0 || m.inter_dim % dep.dense_tp != 0)
        return breach(Infeasible::kTpDoesNotDivideNode, [&] {
            return "dense_tp (" + std::to_string(dep.dense_tp) + ") must divide the GPUs of a node and the dense MLP";
        });
    if (dep.ep % dep.moe_tp != 0 || d.gpus_per_node % dep.moe_tp != 0 || m.moe_inter_dim % dep.moe_tp != 0)
        return breach(Infeasible::kMoeTpDoesNotDivide, [&] {
            return "moe_tp (" + std::to_string(dep.moe_tp) +
                   ") must divide ep, the GPUs of a node and the experts' intermediate";
        });
    if (m.n_routed_experts + dep.redundant_experts < dep.ep / dep.moe_tp)
        return breach(Infeasible::kEpExceedsExperts,
                      [] { return std::string("ep (divided by moe_tp) must be <= routed + redundant experts"); });
    // The deployment's GPUs (ep) are whole attention-TP groups.
    if (dep.ep % dep.attn_tp != 0)
        return breach(Infeasible::kEpNotMultipleOfTp, [&] {
            return "ep (" + std::to_string(dep.ep) + ") must be a multiple of attn_tp (" + std::to_string(dep.attn_tp) +
                   "): the deployment's GPUs are whole attention-TP groups";
        });
    // With attention TP a group of attn_tp GPUs serves batch x attn_tp requests: at least one.
    if (dep.phase == Phase::kDecode && dep.batch * dep.attn_tp < 1)
        return breach(Infeasible::kNoRequest, [] { return std::string("batch must lie in [1 / attn_tp, 1e6] requests per GPU"); });
    return Infeasible::kNone;
}

void Deployment::validate(const ModelConfig& m, const DeviceSpec& d) const {
    // Each field within its declared range (DSPERF_DEPLOYMENT_FIELDS), or at its sentinel.
    // "%g", as an ostream prints a double; not an ostringstream, which crashed every step on an H200
    // host (GCC 13.3, Ubuntu 24.04: docs/CUDA.md). The message is built for a failing field only.
    auto fmt = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
#define DSPERF_CHECK_DEPLOYMENT_FIELD(type, field, init, lo, hi, sentinel)                                    \
    if (!((double(field) >= double(lo) && double(field) <= double(hi)) ||                                      \
          (double(sentinel) != 0 && double(field) == double(sentinel))))                                       \
        require(false, std::string(#field " must lie in [") + fmt(lo) + ", " + fmt(hi) + "]" +                 \
                           (double(sentinel) != 0 ? " (" + fmt(sentinel) + ": the default)" : std::string()) + \
                           ", got " + fmt(double(field)));
    DSPERF_DEPLOYMENT_FIELDS(DSPERF_CHECK_DEPLOYMENT_FIELD)
#undef DSPERF_CHECK_DEPLOYMENT_FIELD
    // The layout rules (layout_rules.hpp), then those the explorer's grid never breaks.
    std::string breach;
    require(layout_breach(m, d, *this, &breach) == Infeasible::kNone, breach);
    require(cached_prefix < prompt_len, "cached_prefix must lie in [0, prompt_len)");
    require(mtp_accepted <= mtp, "mtp_accepted must lie in [0, mtp]");
    require(!attn_fp8 || (kv_fp8 && d.fp8_tflops > 0),
            "attn_fp8 needs an FP8 cache (kv_fp8) and a device with FP8 tensor cores");
    require(!dispatch_fp4 || experts_fp4, "dispatch_fp4 needs NVFP4 experts (the tokens are quantised for them)");
    require(comm_sms < d.sm_count, "comm_sms must lie in [0, sm_count) (-1: the device's)");
    require(overlap == Overlap::kNone || overlap == Overlap::kTwoBatch || overlap == Overlap::kSingleBatch,
            "overlap must be none, two_batch or single_batch");
}

}  // namespace dsperf
