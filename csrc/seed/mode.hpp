// Which of the seed analysis' quirks the cost model fixes.
//
// "as_published" fixes none: the seed's arithmetic, quirks included, so its tables come out
// digit for digit. "corrected" fixes all. Any subset can be asked for by name, e.g.
// "as_published+decode_weight_streaming" or "corrected-overlap_bounded", which is how
// docs/DEVIATIONS.md measures each fix's effect on its own.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace dsperf {

enum class Fix : int {
    PrefillSkipCachedTokens,  // prefill computes only the tokens the prefix cache misses
    PrefillCausalAttention,   // prefill attention over the causal triangle, not the full square
    DenseLayersAtTp,          // dense layers use the same TP as the MoE layers
    RingAllReduce,            // all-reduce moves 2 (tp - 1) / tp of the buffer; none at TP1
    DecimalUnits,             // bytes / 1e9 against GB/s (the seed divides MiB or GiB by GB/s)
    OverlapBoundedByCompute,  // two micro-batches hide communication only up to the compute
    DispatchFp8Scales,        // the FP8 dispatch payload carries one FP32 scale per 128 values
    DispatchRemoteOnly,       // only copies for other nodes / GPUs cross the scale-out network
    KvTransferAllLayers,      // the KV cache a token hands to decode spans every layer
    DecodeAllReduceByBatch,   // the decode all-reduce carries the batch's tokens, not seq_len
    DecodeWeightStreaming,    // decode reads the weights every step: time = max(compute, bytes / bw)
    DecodeAverageContext,     // decode attends to prompt + half the output on average
    DecodeTpServesGroup,      // a TP group serves tp x batch requests: TP splits heads, not requests
    DecodeBestTpSearch,       // the best TP is searched over the node's TPs that fit in memory
    SharedExpertPlainGemm,    // the shared expert is a plain GEMM: no grouped-GEMM discount
    ExactParameterCounts,     // exact bias-free counts; memory limit from FP8 weights, BF16 embeddings, GiB
    DatasheetDevices,         // device files' datasheet values, not their [as_published] overrides
    Count
};

constexpr int kFixCount = static_cast<int>(Fix::Count);

struct Fixes {
    std::array<bool, kFixCount> on{};
    bool has(Fix f) const { return on[static_cast<int>(f)]; }
    static Fixes none() { return Fixes{}; }
    static Fixes all() {
        Fixes f;
        f.on.fill(true);
        return f;
    }
};

// Names in enum order, as used in mode strings ("decode_weight_streaming", ...).
const std::vector<std::string>& fix_names();
// One line per fix, in the same order: what it changes.
const std::vector<std::string>& fix_descriptions();

// "as_published" | "corrected" | either followed by "+name" / "-name" terms.
// Throws std::invalid_argument naming an unknown mode or fix.
Fixes parse_mode(const std::string& text);

// Unit helpers. The seed sizes traffic in MiB (x / 1024 / 1024) and divides by GB/s,
// reading the quotient as milliseconds; with DecimalUnits, bytes / 1e9 / (GB/s) * 1e3.
inline double seed_ms(double bytes, double gbps) { return bytes / 1024.0 / 1024.0 / gbps; }
inline double true_ms(double bytes, double gbps) { return bytes / 1e9 / gbps * 1e3; }
inline double traffic_ms(const Fixes& fx, double bytes, double gbps) {
    return fx.has(Fix::DecimalUnits) ? true_ms(bytes, gbps) : seed_ms(bytes, gbps);
}

}  // namespace dsperf
