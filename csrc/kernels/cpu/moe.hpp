// Mixture of experts: DeepSeek's gating, permute/unpermute, the grouped expert FFN in
// DeepGEMM's two layouts, and the whole MoE layer in one call.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/dtype.hpp"
#include "kernels/cpu/linear.hpp"

namespace dsperf::kernels {

enum class ScoreFunc { Sigmoid, Softmax };

struct GateConfig {
    int64_t n_group = 1;      // expert groups
    int64_t topk_group = 1;   // groups kept per token
    int64_t top_k = 1;        // experts per token
    float route_scale = 1.0f;
    ScoreFunc score = ScoreFunc::Sigmoid;
    void validate(int64_t n_experts, bool has_bias) const;  // std::invalid_argument naming the field
};

// Top-k routing of DeepSeek-V3 (sigmoid) and V2 (softmax) from logits[T, E]:
// scores = sigmoid(logits) or softmax(logits); selection uses scores + bias (bias may be null);
// with n_group > 1 a group scores the sum of its two best biased scores (its best without a bias)
// and only the topk_group best groups stay; then the top_k experts. weights = the unbiased scores
// of the chosen experts; with sigmoid normalised to sum 1; times route_scale. Ties go to the
// lower index. ids and weights are [T, top_k], best first.
void moe_gate(const float* logits, int64_t tokens, int64_t n_experts, const float* bias, const GateConfig& cfg,
              float* weights, int32_t* ids);

// Permutation of the (token, slot) pairs into per-expert contiguous segments, stable in token
// order: offsets[E + 1] (segment of expert e is [offsets[e], offsets[e+1])), position[t * K + k]
// = the row of pair (t, k) in the permuted order, source[row] = t. ids are checked against E.
void moe_route(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t n_experts, int64_t* offsets,
               int32_t* position, int32_t* source);

// x_perm[row] = x[source[row]].
void moe_permute(const bf16_t* x, int64_t dim, const int32_t* source, int64_t rows, bf16_t* x_perm);

// y[t] = sum over k (in order) of weights[t, k] * y_perm[position[t, k]]; accumulate adds to y.
void moe_unpermute(const float* y_perm, int64_t dim, const int32_t* position, const float* weights, int64_t tokens,
                   int64_t top_k, float* y, bool accumulate);

// Expert weights: w13[E, 2 * inter, dim] (w1 rows then w3 rows: the merged gate_up) and
// w2[E, dim, inter], BF16, or FP8 with 128x128 block scales (scale13[E, ceil(2I/128), ceil(D/128)],
// scale2[E, ceil(D/128), ceil(I/128)]) when the scale pointers are given.
// Each expert's w13 and w2 in tile order, packed once for an AMX CPU (pack_expert_tiles); empty
// where the AMX kernels are not usable.
struct ExpertTiles {
    std::vector<amx::PackedTiles> w13, w2;
    size_t bytes() const;
    ExpertTiles() = default;
    ExpertTiles(ExpertTiles&&) = default;
    ExpertTiles& operator=(ExpertTiles&&) = default;
    ExpertTiles(const ExpertTiles&) = delete;  // (the vector's copy is declared but cannot compile)
};

struct ExpertWeights {
    const void* w13 = nullptr;
    const void* w2 = nullptr;
    const float* scale13 = nullptr;
    const float* scale2 = nullptr;
    bool fp8 = false;
    int64_t n_experts = 0, dim = 0, inter = 0;
    const ExpertTiles* tiles = nullptr;  // null, or packed from these very weights
    void validate() const;
    // Expert e's gate-and-up projection [2 * inter, dim] and its down projection [dim, inter].
    LinearWeights gate_up(int64_t e) const;
    LinearWeights down(int64_t e) const;
};

ExpertTiles pack_expert_tiles(const ExpertWeights& w);

// One expert's FFN on rows x[m, dim]: y[m, dim] = w2 (silu(x w1^T) * (x w3^T)), y FP32.
void expert_ffn(const bf16_t* x, int64_t rows, const ExpertWeights& w, int64_t expert, float* y, bool accumulate);

// Contiguous layout (prefill): rows of x sorted by expert, expert e owning [offsets[e], offsets[e+1]).
void experts_contiguous(const bf16_t* x, const int64_t* offsets, const ExpertWeights& w, float* y);

// Masked layout (decode): x[E, capacity, dim] with counts[e] valid rows per expert; rows past the
// count are not read and their outputs are zero.
void experts_masked(const bf16_t* x, int64_t capacity, const int32_t* counts, const ExpertWeights& w, float* y);

// The whole layer: logits = x gate_w^T -> moe_gate -> route/permute -> experts_contiguous ->
// unpermute with the gate weights -> + shared experts (a plain FFN of n_shared * inter rows, given
// as an ExpertWeights with n_experts = 1; skipped when shared.w13 is null). y FP32 [T, dim].
void moe_layer(const bf16_t* x, int64_t tokens, const bf16_t* gate_w, const float* gate_bias, const GateConfig& cfg,
               const ExpertWeights& routed, const ExpertWeights& shared, float* y);

}  // namespace dsperf::kernels
