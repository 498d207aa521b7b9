#include "costmodel/mode.hpp"

#include <stdexcept>

namespace dsperf {

const std::vector<std::string>& fix_names() {
    static const std::vector<std::string> names = {
        "prefill_skip_cached_tokens", "prefill_causal_attention", "dense_layers_at_tp",
        "ring_allreduce",             "decimal_units",            "overlap_bounded_by_compute",
        "dispatch_fp8_scales",        "dispatch_remote_only",     "kv_transfer_all_layers",
        "decode_allreduce_by_batch",  "decode_weight_streaming",  "decode_average_context",
        "decode_tp_serves_group",     "decode_best_tp_search",    "shared_expert_plain_gemm",
        "exact_parameter_counts",          "datasheet_devices",
    };
    return names;
}

Fixes parse_mode(const std::string& text) {
    size_t end = text.find_first_of("+-");
    const std::string base = text.substr(0, end);
    Fixes fx;
    if (base == "as_published") fx = Fixes::none();
    else if (base == "corrected") fx = Fixes::all();
    else throw std::invalid_argument("mode must be 'as_published' or 'corrected' (optionally +fix/-fix), got '" + text + "'");
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
