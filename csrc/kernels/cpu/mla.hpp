// MLA attention over a paged latent KV cache.
//
// The cache holds, per token, the kv_lora-wide compressed latent (kv_norm output) and the
// rope_dim-wide rotated key, in blocks of block_size tokens: latent[num_blocks, block_size, kv_lora]
// and rope[num_blocks, block_size, rope_dim], BF16. A request's tokens live in the blocks its row of
// block_table lists, in order.
#pragma once
#include "model/mla_variant.hpp"
#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels {

struct PagedLatentCache {
    const bf16_t* latent = nullptr;      // BF16 latent, or null when latent_fp8 is given
    const fp8_t* latent_fp8 = nullptr;   // FP8 e4m3 latent with one FP32 scale per 128 values of a token:
    const float* latent_scale = nullptr; //   latent_scale[num_blocks, block_size, kv_lora / 128]
    const bf16_t* rope = nullptr;        // the rope key stays BF16
    int64_t num_blocks = 0, block_size = 64, kv_lora = 512, rope_dim = 64;
};

// Writes T new tokens into a paged cache: token t of request[t] at position[t] goes to block
// block_table[request[t], position[t] / block_size], row position[t] % block_size. With an FP8
// latent (latent_fp8 non-null) each token's latent is quantised per 128 values (scale = amax / 448).
// Block ids and positions are checked against the table and the cache.
void paged_cache_write(bf16_t* latent, fp8_t* latent_fp8, float* latent_scale, bf16_t* rope, int64_t num_blocks,
                       int64_t block_size, int64_t kv_lora, int64_t rope_dim, const int32_t* block_table,
                       int64_t batch, int64_t max_blocks, const int32_t* request, const int32_t* position,
                       int64_t tokens, const bf16_t* new_latent, const bf16_t* new_rope);

// Absorbed MLA decode (the absorbed form FlashMLA computes): W_UK is already folded into q_nope,
// so every head attends to the shared latent as a multi-query attention with keys
// [latent | rope] (kv_lora + rope_dim wide) and values = latent; the caller applies W_UV.
// q_nope[B, Q, H, kv_lora], q_rope[B, Q, H, rope_dim] (BF16): Q new tokens per request, the last Q
// positions of its seqlens[b] tokens, causal among themselves. Heads and query tokens fold into the
// GEMM M dimension. Each request's keys are cut into num_splits pieces computed independently
// (in parallel) and merged by log-sum-exp. out[B, Q, H, kv_lora] FP32; lse[B, Q, H] FP32 (natural log
// of the sum of exp(scaled scores)). Probabilities are rounded to BF16 for the value GEMM.
void mla_decode_absorbed(const bf16_t* q_nope, const bf16_t* q_rope, int64_t batch, int64_t q_len, int64_t heads,
                         const PagedLatentCache& cache, const int32_t* block_table, int64_t max_blocks,
                         const int32_t* seqlens, float softmax_scale, int64_t num_splits, float* out, float* lse);

}  // namespace dsperf::kernels

namespace dsperf::kernels {

// The five execution variants: model/mla_variant.hpp.
using dsperf::MlaVariant;

// One MLA layer's weights, BF16 in nn.Linear layout [out, in] (norm weights FP32).
struct MlaWeights {
    const bf16_t* wq_a = nullptr;    // [q_lora, dim]
    const float* q_norm = nullptr;   // [q_lora]
    const bf16_t* wq_b = nullptr;    // [heads * (nope + rope), q_lora]
    const bf16_t* wkv_a = nullptr;   // [kv_lora + rope, dim]
    const float* kv_norm = nullptr;  // [kv_lora]
    const bf16_t* wkv_b = nullptr;   // [heads * (nope + v), kv_lora]: W_UK then W_UV per head
    const bf16_t* wo = nullptr;      // [dim, heads * v]
    const bf16_t* q_absorb = nullptr;  // AM_CC_ME: [heads * kv_lora, q_lora]
    const bf16_t* o_absorb = nullptr;  // AM_CC_ME: [dim, heads * kv_lora]
    int64_t dim = 0, heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v = 0;
    float eps = 1e-6f;
    void validate(MlaVariant variant) const;
};

// The fused MLA prolog (seed 003) for T tokens at positions[t]: x -> wq_a -> q_norm (qa, kept for
// AM_CC_ME) -> wq_b -> RoPE on each head's rope part (q); x -> wkv_a -> kv_norm on the latent, RoPE on
// k_pe. Every output BF16, as DeepSeek-V3's activations: qa [T, q_lora], q [T, heads, nope + rope],
// latent [T, kv_lora], k_pe [T, rope].
void mla_prolog(const MlaWeights& w, const bf16_t* x, int64_t tokens, const int32_t* positions, const float* freqs,
                bf16_t* qa, bf16_t* q, bf16_t* latent, bf16_t* k_pe);

// q_absorb [heads * kv_lora, q_lora] and o_absorb [dim, heads * kv_lora], computed in FP32 from the
// BF16 weights and rounded to BF16.
void mla_absorb_weights(const MlaWeights& w, bf16_t* q_absorb, bf16_t* o_absorb);

// The latent cache of one sequence, contiguous: rows [0, prefix) hold earlier tokens, and the
// layer writes its tokens' latent (kv_norm output) and rotated k_pe at rows [prefix, prefix + T).
// CD also keeps the decompressed keys [rows, heads, nope + rope] and values [rows, heads, v], and
// appends its tokens' rows the same way.
struct MlaSequenceCache {
    bf16_t* latent = nullptr;  // [capacity, kv_lora]
    bf16_t* k_pe = nullptr;    // [capacity, rope]
    bf16_t* k_full = nullptr;  // CD: [capacity, heads, nope + rope]
    bf16_t* v_full = nullptr;  // CD: [capacity, heads, v]
    int64_t prefix = 0, capacity = 0;
};

// Decompressed keys and values of cache rows [r0, r1) (CD's append, CC's run-time decompression).
void mla_decompress(const MlaWeights& w, const MlaSequenceCache& c, int64_t r0, int64_t r1, bf16_t* k_full,
                    bf16_t* v_full);

// The MLA layer for T new tokens of one sequence at positions prefix .. prefix + T - 1 (prefill:
// T > 1, causal; decode: T = 1): the prolog (wq_a -> q_norm -> wq_b -> RoPE; wkv_a -> kv_norm,
// RoPE'd k_pe appended to the cache), attention in the chosen variant, and wo. x BF16 [T, dim];
// freqs FP32 [rope / 2]; y FP32 [T, dim]. Intermediate activations are BF16, as DeepSeek-V3's.
void mla_forward(MlaVariant variant, const MlaWeights& w, const bf16_t* x, int64_t tokens, const float* freqs,
                 float softmax_scale, MlaSequenceCache& cache, float* y);

}  // namespace dsperf::kernels
