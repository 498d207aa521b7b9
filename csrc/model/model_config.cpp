#include "model/model_config.hpp"

#include <cmath>
#include <stdexcept>

namespace dsperf {

namespace {
void require_at_most(int64_t value, const char* field) {
    if (value > kMaxModelField)
        throw std::invalid_argument(std::string("model field '") + field + "' must be <= " +
                                    std::to_string(kMaxModelField) + ", got " + std::to_string(value));
}
void require_positive(int64_t value, const char* field) {
    if (value <= 0)
        throw std::invalid_argument(std::string("model field '") + field +
                                    "' must be positive, got " + std::to_string(value));
    require_at_most(value, field);
}
}  // namespace

void ModelConfig::validate() const {
    require_positive(vocab_size, "vocab_size");
    require_positive(dim, "dim");
    require_positive(inter_dim, "inter_dim");
    require_positive(moe_inter_dim, "moe_inter_dim");
    require_positive(n_layers, "n_layers");
    require_positive(n_heads, "n_heads");
    require_positive(n_routed_experts, "n_routed_experts");
    require_positive(n_activated_experts, "n_activated_experts");
    require_positive(n_expert_groups, "n_expert_groups");
    require_positive(n_limited_groups, "n_limited_groups");
    require_positive(kv_lora_rank, "kv_lora_rank");
    require_positive(qk_nope_head_dim, "qk_nope_head_dim");
    require_positive(qk_rope_head_dim, "qk_rope_head_dim");
    require_positive(v_head_dim, "v_head_dim");
    require_at_most(q_lora_rank, "q_lora_rank");
    require_at_most(n_shared_experts, "n_shared_experts");
    if (q_lora_rank < 0)
        throw std::invalid_argument("model field 'q_lora_rank' must be >= 0 (0 = no query compression)");
    if (n_shared_experts < 0)
        throw std::invalid_argument("model field 'n_shared_experts' must be >= 0");
    if (n_dense_layers < 0 || n_dense_layers > n_layers)
        throw std::invalid_argument("model field 'n_dense_layers' must lie in [0, n_layers]");
    if (n_activated_experts > n_routed_experts)
        throw std::invalid_argument("model field 'n_activated_experts' (" +
                                    std::to_string(n_activated_experts) +
                                    ") exceeds 'n_routed_experts' (" +
                                    std::to_string(n_routed_experts) + ")");
    if (n_routed_experts % n_expert_groups != 0)
        throw std::invalid_argument("model field 'n_expert_groups' must divide 'n_routed_experts'");
    if (n_limited_groups > n_expert_groups)
        throw std::invalid_argument("model field 'n_limited_groups' exceeds 'n_expert_groups'");
    if (n_activated_experts > n_limited_groups * (n_routed_experts / n_expert_groups))
        throw std::invalid_argument(
            "model field 'n_activated_experts' exceeds the experts in the 'n_limited_groups' kept groups");
    if (!(route_scale > 0 && route_scale <= 1e6))
        throw std::invalid_argument("model field 'route_scale' must lie in (0, 1e6]");
    if (!(quoted_total_params >= 0 && quoted_total_params <= 1e15))
        throw std::invalid_argument("model field 'quoted_total_params' must lie in [0, 1e15] (0: none quoted)");
}

}  // namespace dsperf
