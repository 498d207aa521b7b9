// A whole transformer block of DeepSeek-V3 in one call (seed 003's graph mode, against per-op
// host overhead): x + MLA(RMSNorm(x)), then + MoE(RMSNorm(.)), for the new tokens of one sequence.
#pragma once
#include <cstdint>

#include "kernels/cpu/mla.hpp"
#include "kernels/cpu/moe.hpp"

namespace dsperf::kernels {

struct DecodeLayerWeights {
    const float* attn_norm = nullptr;  // [dim]
    const float* ffn_norm = nullptr;   // [dim]
    MlaWeights mla;
    const bf16_t* gate_w = nullptr;    // [experts, dim]
    const float* gate_bias = nullptr;  // [experts] or null
    GateConfig gate;
    ExpertWeights routed, shared;      // shared.w13 null: no shared expert
};

// x BF16 [T, dim] (the residual stream) -> out BF16 [T, dim]; the MLA cache gains the T tokens.
// Residual additions in FP32, the stream rounded to BF16 after each, as DeepSeek-V3 keeps it.
void decode_layer(MlaVariant variant, const DecodeLayerWeights& w, const bf16_t* x, int64_t tokens,
                  const float* freqs, float softmax_scale, MlaSequenceCache& cache, bf16_t* out);

}  // namespace dsperf::kernels
