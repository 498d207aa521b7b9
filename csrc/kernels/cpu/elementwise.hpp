// Building blocks: RMSNorm, DeepSeek's rotary embedding (YaRN), embedding lookup, SiLU-and-
// multiply, FP8 quantisation of activations (1x128) and dequantisation of weights (128x128).
// Activations are FP32 or BF16 (template T); every function checks its sizes.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels {

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight, computed in FP32.
template <typename T>
void rmsnorm(const T* x, const float* weight, T* out, int64_t tokens, int64_t dim, float eps);

// DeepSeek-V3's rotary frequencies (precompute_freqs_cis): base^(-2i/dim) for i < dim/2, with
// YaRN's blend towards freq/factor below the correction range when max_seq_len exceeds
// original_seq_len. Returns dim/2 frequencies.
struct RopeConfig {
    int64_t dim = 64;
    double base = 10000.0;
    double factor = 40.0;
    int64_t original_seq_len = 4096;
    int64_t max_seq_len = 16384;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    void validate() const;
};
std::vector<float> rope_frequencies(const RopeConfig& cfg);

// Rotates, in place, the rope_dim values at x[t * ld_token + h * ld_head + (0 .. rope_dim)] for
// every token t and head h: pairs (2i, 2i + 1) as complex numbers (DeepSeek-V3's
// apply_rotary_emb) turned by the angle positions[t] * freqs[i].
template <typename T>
void rope_inplace(T* x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head, const int32_t* positions,
                  const float* freqs, int64_t rope_dim);

// out[t, :] = table[ids[t], :]; every id is checked against vocab.
void embedding(const bf16_t* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t tokens, bf16_t* out);

// out[t, i] = silu(gu[t, i]) * gu[t, inter + i] for a merged gate_up output gu[t, 2 * inter].
void silu_mul(const float* gu, int64_t tokens, int64_t inter, bf16_t* out);

// Per token and 128-wide group: scale = amax / 448, q = fp8(x / scale) (DeepSeek-V3's act_quant).
// scales has ceil(dim / 128) entries per token.
template <typename T>
void act_quant(const T* x, int64_t tokens, int64_t dim, fp8_t* q, float* scales);

// w_bf16[n, k] = bf16(fp8(w[n, k]) * scale[n / 128, k / 128]) (DeepSeek-V3's weight_dequant).
void weight_dequant(const fp8_t* w, const float* scale, int64_t rows, int64_t cols, bf16_t* out);

}  // namespace dsperf::kernels
