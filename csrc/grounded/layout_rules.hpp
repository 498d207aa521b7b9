// The rules that relate a Deployment's fields to each other, to the model and to the device: one
// home, read by Deployment::validate (which raises with the rule's message) and by the explorer
// (which keeps the point with the rule's code).
#pragma once
#include <cstdint>
#include <string>

#include "grounded/step_model.hpp"

namespace dsperf {

// Why a point cannot run (0: it can), the one list of reasons: the explorer's frame reads the
// names and texts from here (infeasible_reasons). Two are set by the Python side of the explorer:
// kTooFewTokens by its attention-FFN disaggregation pricing, kKvDoesNotFit where a feasible point's
// KV cache does not fit beside the weights (the C++ loop reports memory as fits_memory).
enum class Infeasible : int32_t {
    kNone = 0,
    kTpDoesNotDivideNode = 1,    // attention TP must divide the GPUs of a node and the heads
    kEpExceedsExperts = 2,       // more GPUs than routed + redundant experts
    kEpNotMultipleOfTp = 3,      // the EP group is made of whole attention-TP groups
    kNoRequest = 4,              // batch x attention TP < 1: a TP group without a request
    kTooFewTokens = 5,           // fewer than one token per GPU per micro-batch (AFD, in Python)
    kMoeTpDoesNotDivide = 6,     // MoE TP must divide the GPUs of a node and the EP size
    kNoFp4 = 7,                  // NVFP4 weights (experts or wo) on a device without FP4 tensor cores
    kKvDoesNotFit = 8,           // the KV cache does not fit beside the weights (set in Python)
};

// The first layout rule the deployment breaks (kNone: none), in the explorer's order of reasons.
// `message`, where given, receives the rule's error text naming the field (built only on a breach).
// The fields' own ranges are checked before (Deployment::validate, ExploreGrid::validate).
Infeasible layout_breach(const ModelConfig& m, const DeviceSpec& d, const Deployment& dep,
                         std::string* message = nullptr);

}  // namespace dsperf
