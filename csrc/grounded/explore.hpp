// The deployment explorer's inner loop: the grounded decode model over the Cartesian product of
// devices, EP sizes, attention TP, batch, MTP, KV dtype and overlap, written into caller-owned
// columns. Infeasible points are kept, with the reason as a code (never dropped).
#pragma once
#include <cstdint>
#include <vector>

#include "grounded/layout_rules.hpp"
#include "grounded/step_model.hpp"

namespace dsperf {

// The explorer's names and texts of the reasons a point cannot run (the codes: layout_rules.hpp).
struct InfeasibleReason {
    Infeasible code;
    const char* name;  // the code's key for Python
    const char* text;  // what the explorer's frame prints
};
// Indexed by the code (checked below).
inline constexpr InfeasibleReason kInfeasibleReasons[] = {
    {Infeasible::kNone, "none", ""},
    {Infeasible::kTpDoesNotDivideNode, "tp_does_not_divide_node", "attention TP must divide the node (or span whole nodes) and the heads"},
    {Infeasible::kEpExceedsExperts, "ep_exceeds_experts", "EP exceeds routed + redundant experts"},
    {Infeasible::kEpNotMultipleOfTp, "ep_not_multiple_of_tp", "EP must be a multiple of attention TP"},
    {Infeasible::kNoRequest, "no_request", "fewer than one request per attention-TP group"},
    {Infeasible::kTooFewTokens, "too_few_tokens", "fewer than one token per GPU per micro-batch"},
    {Infeasible::kMoeTpDoesNotDivide, "moe_tp_does_not_divide", "MoE TP must divide the node and the EP size"},
    {Infeasible::kNoFp4, "no_fp4", "NVFP4 weights need FP4 tensor cores"},
    {Infeasible::kKvDoesNotFit, "kv_does_not_fit", "KV cache does not fit beside the weights"},
};
constexpr bool reasons_in_code_order() {
    int i = 0;
    for (const InfeasibleReason& r : kInfeasibleReasons)
        if (static_cast<int>(r.code) != i++) return false;
    return i == static_cast<int>(Infeasible::kKvDoesNotFit) + 1;
}
static_assert(reasons_in_code_order(), "kInfeasibleReasons: one entry per code, at the code's index");

struct ExploreGrid {
    std::vector<DeviceSpec> devices;
    std::vector<const KernelTables*> tables;  // one per device
    std::vector<int> ep;
    std::vector<int> redundant_experts;       // paired with ep
    std::vector<int> attn_tp;
    std::vector<int> mtp;
    std::vector<double> mtp_accepted;         // paired with mtp
    std::vector<int> kv_fp8;                  // 0 / 1
    std::vector<int> overlap;                 // Overlap values
    std::vector<double> batch;                // innermost
    double kv_len = 4096;                     // average context of a request
    double imbalance = 1.0;
    double step_overhead_ms = kDecodeStepOverheadMs;
    WeightFlags weights;                      // one format per call: the explorer loops over the rest
    int dense_tp = 1;
    int moe_tp = 1;                           // each routed expert split over this many GPUs
    double mem_fraction = kMemoryReserve;     // of each GPU's memory for weights and KV cache (Deployment's)

    // Rows in the order device > ep > attn_tp > mtp > kv_fp8 > overlap > batch.
    size_t size() const;
    void validate(const ModelConfig& m) const;  // every axis non-empty and in range; names the axis
};

struct ExploreColumns {
    int32_t *device_index, *ep, *redundant_experts, *attn_tp, *mtp, *overlap, *infeasible;
    bool *kv_fp8, *fits_memory;
    double *mtp_accepted, *batch, *step_ms, *tpot_ms, *tps_user, *tokens_per_gpu_s, *batch_limit, *weights_gib, *kv_gib;
};

void explore_decode(const ModelConfig& m, const ExploreGrid& grid, const ExploreColumns& out);

}  // namespace dsperf
