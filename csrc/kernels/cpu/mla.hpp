// MLA attention over a paged latent KV cache.
//
// The cache holds, per token, the kv_lora-wide compressed latent (kv_norm output) and the
// rope_dim-wide rotated key, in blocks of block_size tokens: latent[num_blocks, block_size, kv_lora]
// and rope[num_blocks, block_size, rope_dim], BF16. A request's tokens live in the blocks its row of
// block_table lists, in order.
#pragma once
#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels {

struct PagedLatentCache {
    const bf16_t* latent = nullptr;
    const bf16_t* rope = nullptr;
    int64_t num_blocks = 0, block_size = 64, kv_lora = 512, rope_dim = 64;
};

// Absorbed MLA decode (the A_CC_ME form FlashMLA computes): W_UK is already folded into q_nope,
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
