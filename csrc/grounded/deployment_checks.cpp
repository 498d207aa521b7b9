// The boundary check of a Deployment: each field within its declared range, and the rules that
// relate fields to each other, to the model and to the device. The step model trusts what passes.
#include "common/require.hpp"
#include "grounded/step_model.hpp"

#include <cstdio>
#include <string>

namespace dsperf {

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
    // The rules that relate fields.
    require(tp_group_fits_nodes(attn_tp, d.gpus_per_node),
            "attn_tp (" + std::to_string(attn_tp) + ") must divide the " + std::to_string(d.gpus_per_node) +
                " GPUs of a node or be a multiple of them (a TP group over whole nodes)");
    require(m.n_heads % attn_tp == 0, "attn_tp must divide the model's heads");
    // With attention TP a group of attn_tp GPUs serves batch x attn_tp requests: at least one.
    require(phase != Phase::kDecode || batch * attn_tp >= 1, "batch must lie in [1 / attn_tp, 1e6] requests per GPU");
    require(cached_prefix < prompt_len, "cached_prefix must lie in [0, prompt_len)");
    require(mtp_accepted <= mtp, "mtp_accepted must lie in [0, mtp]");
    require(d.gpus_per_node % dense_tp == 0 && m.inter_dim % dense_tp == 0,
            "dense_tp (" + std::to_string(dense_tp) + ") must divide the GPUs of a node and the dense MLP");
    require(ep % moe_tp == 0 && d.gpus_per_node % moe_tp == 0 && m.moe_inter_dim % moe_tp == 0,
            "moe_tp (" + std::to_string(moe_tp) + ") must divide ep, the GPUs of a node and the experts' intermediate");
    require(m.n_routed_experts + redundant_experts >= ep / moe_tp,
            "ep (divided by moe_tp) must be <= routed + redundant experts");
    require(!attn_fp8 || (kv_fp8 && d.fp8_tflops > 0),
            "attn_fp8 needs an FP8 cache (kv_fp8) and a device with FP8 tensor cores");
    require(!experts_fp4 || d.fp4_tflops > 0,
            "experts_fp4 needs a device with FP4 tensor cores (" + d.name + " has fp4_tflops = 0)");
    require(!dispatch_fp4 || experts_fp4, "dispatch_fp4 needs NVFP4 experts (the tokens are quantised for them)");
    require(!wo_fp4 || d.fp4_tflops > 0,
            "wo_fp4 needs a device with FP4 tensor cores (" + d.name + " has fp4_tflops = 0)");
    require(comm_sms < d.sm_count, "comm_sms must lie in [0, sm_count) (-1: the device's)");
    require(overlap == Overlap::kNone || overlap == Overlap::kTwoBatch || overlap == Overlap::kSingleBatch,
            "overlap must be none, two_batch or single_batch");
}

}  // namespace dsperf
