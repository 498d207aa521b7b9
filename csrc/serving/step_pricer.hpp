// Step times of one DP rank from the grounded step model (grounded/step_model.hpp), priced once
// per bucket and cached for the whole run, so the event loop never calls the model per step.
//
// Decode part: exact in the rank's batch (an integer), linear interpolation between points of a
// geometric context grid (decode time is close to linear in the context the attention reads).
// Prompt-chunk part: nearest bucket of (chunk tokens, mean end position, new tokens per chunk)
// on a geometric grid, exact below 64.
// Both parts take the rank's routed share: its lock-stepped DP group's mean tokens over its own
// (Deployment::routed_share: the experts serve the group's tokens, the attention the rank's own),
// on the prefill grid's geometric buckets, 1 exactly.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grounded/kernel_table.hpp"
#include "grounded/step_model.hpp"
#include "hardware/device_spec.hpp"
#include "model/model_config.hpp"

namespace dsperf::serving {

// A rank's last decode lookup: contexts move slowly and batches change seldom, so the next step
// usually falls between the same two grid points and needs neither a logarithm nor the table.
struct DecodeHint {
    int batch = -1;
    int share = 0;  // the routed share's bucket
    double lo = 0, hi = 0, v_lo = 0, v_hi = 0;  // the grid interval and its priced points
};

class StepPricer {
public:
    // decode_dep: phase decode; prefill_dep: phase prefill (the same GPUs' layout for the chunks).
    StepPricer(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& decode_dep,
               const Deployment& prefill_dep, double ctx_ratio, double prefill_ratio);

    // Milliseconds of the decode layers (no step overhead) for `batch` requests on the rank
    // attending on average to `ctx` tokens, the experts serving `share` times its tokens per GPU.
    // hint: the caller's last lookup for this rank (updated).
    double decode_ms(int batch, double ctx, double share = 1, DecodeHint* hint = nullptr);
    // Milliseconds of the layers for `tokens` prompt tokens on the rank in `chunks` chunks whose
    // ends lie on average at position `end_pos` (the attention reads the prefix before each chunk).
    double prefill_ms(double tokens, int chunks, double end_pos, double share = 1);
    // The rank's whole step: decode part, chunk part, and one step overhead (the decode step's
    // when any request decodes, else the prefill step's). decode_share / chunk_share: each part's
    // routed share.
    double step_ms(int batch, double ctx, double chunk_tokens, int chunks, double end_pos, double decode_share = 1,
                   double chunk_share = 1, DecodeHint* hint = nullptr) {
        if (batch == 0 && chunk_tokens <= 0) return 0;
        double ms = batch > 0 ? decode_ms(batch, ctx, decode_share, hint) + decode_overhead_ms_ : prefill_overhead_ms_;
        if (chunk_tokens > 0) ms += prefill_ms(chunk_tokens, chunks, end_pos, chunk_share);
        return ms;
    }

    // KV capacity of one rank in tokens (every GPU of an attention-TP group holds the group's
    // cache), and bytes one token's cache takes (all layers), from the memory model.
    double kv_tokens_per_rank() const { return kv_tokens_per_rank_; }
    double kv_bytes_per_token() const { return kv_bytes_per_token_; }
    size_t priced_points() const { return priced_; }

private:
    int share_bucket(double share) const;
    double share_value(int bucket) const;
    double decode_point(int share, int batch, int ctx_index);
    double price_decode(int batch, double ctx, double share);
    double price_prefill(double tokens, double new_per_chunk, double end_pos, double share);

    const ModelConfig& m_;
    const DeviceSpec& d_;
    const KernelTables& t_;
    Deployment decode_dep_, prefill_dep_;
    double log_ctx_ratio_, ctx_ratio_, prefill_log_ratio_;
    double decode_overhead_ms_, prefill_overhead_ms_;
    double kv_tokens_per_rank_ = 0, kv_bytes_per_token_ = 0;
    // decode_[share bucket][batch][ctx index]: priced points, NaN where not priced yet.
    std::unordered_map<int, std::vector<std::vector<double>>> decode_;
    std::vector<double> grid_;  // the context grid's points, ctx_ratio^i
    std::unordered_map<uint64_t, double> prefill_;
    size_t priced_ = 0;
};

}  // namespace dsperf::serving
