#include "seed/mode.hpp"

#include <stdexcept>

namespace dsperf {

namespace {
// Each fix, in enum order: its name in mode strings and what it changes (`dsperf fixes`).
struct FixInfo {
    const char* name;
    const char* description;
};
constexpr FixInfo kFixes[kFixCount] = {
    {"prefill_skip_cached_tokens", "prefill computes only the prompt tokens the prefix cache misses"},
    {"prefill_causal_attention", "prefill attention over the causal triangle, not the full square"},
    {"dense_layers_at_tp", "the dense layers run at the same TP as the MoE layers"},
    {"ring_allreduce", "an all-reduce moves 2 (tp - 1) / tp of the buffer, and none at TP1"},
    {"decimal_units", "bytes / 1e9 against GB/s (the seed divides MiB or GiB by GB/s)"},
    {"overlap_bounded_by_compute", "two micro-batches hide communication only up to the compute"},
    {"dispatch_fp8_scales", "the FP8 dispatch payload carries one FP32 scale per 128 values"},
    {"dispatch_remote_only", "only copies for other nodes / GPUs cross the scale-out network"},
    {"kv_transfer_all_layers", "the KV cache a token hands to decode spans every layer"},
    {"decode_allreduce_by_batch", "the decode all-reduce carries the batch's tokens, not seq_len"},
    {"decode_weight_streaming", "decode reads the weights every step: time = max(compute, bytes / bandwidth)"},
    {"decode_average_context", "decode attends to the prompt + half the output on average"},
    {"decode_tp_serves_group", "a TP group serves tp x batch requests: TP splits heads, not requests"},
    {"decode_best_tp_search", "the best TP is searched over the node's TPs that fit in memory"},
    {"shared_expert_plain_gemm", "the shared expert is a plain GEMM: no grouped-GEMM discount"},
    {"exact_parameter_counts", "exact bias-free counts; the memory limit from FP8 weights, BF16 embeddings, GiB"},
    {"datasheet_devices", "device files' datasheet values, not their [as_published] overrides"},
};
}  // namespace

namespace {
std::vector<std::string> column(const char* FixInfo::*field) {
    std::vector<std::string> v;
    for (const auto& f : kFixes) v.emplace_back(f.*field);
    return v;
}
}  // namespace

const std::vector<std::string>& fix_names() {
    static const std::vector<std::string> names = column(&FixInfo::name);
    return names;
}

const std::vector<std::string>& fix_descriptions() {
    static const std::vector<std::string> text = column(&FixInfo::description);
    return text;
}

Fixes parse_mode(const std::string& text) {
    size_t end = text.find_first_of("+-");
    const std::string base = text.substr(0, end);
    Fixes fx;
    if (base == "as_published") fx = Fixes::none();
    else if (base == "corrected") fx = Fixes::all();
    else
        throw std::invalid_argument(
            "mode must be 'as_published' or 'corrected' (optionally +fix/-fix), the seed's modes, got '" + text +
            "' ('grounded' is a mode of prefill, decode and decode_sweep only)");
    while (end != std::string::npos) {
        const bool add = text[end] == '+';
        const size_t next = text.find_first_of("+-", end + 1);
        const std::string name = text.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1);
        int index = -1;
        for (int i = 0; i < kFixCount; ++i)
            if (fix_names()[i] == name) index = i;
        if (index < 0) throw std::invalid_argument("mode names an unknown fix '" + name + "'");
        fx.on[index] = add;
        end = next;
    }
    return fx;
}

}  // namespace dsperf
