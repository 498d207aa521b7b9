// Softmax attention over contiguous keys, chunked with an online softmax: the core the MLA
// execution variants share. Keys may come in two parts whose scores add (nope + rope without
// concatenating them); kv_heads is heads (MHA) or 1 (MQA: every head reads the same keys, and
// the heads fold into the GEMM M dimension).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels {

// Keys the kernel takes at a time: every query row's scores, probabilities and output accumulator
// pass through memory once per chunk (dsperf's kernel cost model counts that traffic).
constexpr int64_t kAttentionKeyChunk = 256;

struct AttentionArgs {
    int64_t q_len = 0, kv_len = 0, heads = 0, kv_heads = 1;
    // q part p: q_p[t * heads * dq_p + h * dq_p + i]; k part p: k_p[n * kv_heads * dq_p + g * dq_p + i].
    const bf16_t* q1 = nullptr;
    const bf16_t* k1 = nullptr;
    int64_t d1 = 0;
    const bf16_t* q2 = nullptr;  // optional second part (null: none)
    const bf16_t* k2 = nullptr;
    int64_t d2 = 0;
    const bf16_t* v = nullptr;   // v[n * kv_heads * dv + g * dv + i]
    int64_t dv = 0;
    float scale = 1;
    // Query t sits at position causal_offset + t and sees keys [0, causal_offset + t]; a negative
    // offset means no mask (every query sees every key).
    int64_t causal_offset = -1;
    void validate() const;
};

// One row of an online softmax over a chunk of n raw scores s for keys k_start .. k_start + n - 1:
// keys at or past `visible` are masked, the rest scaled; the running max m and sum l are updated,
// the row's output accumulator o (dv wide) rescaled to the new max, and the probabilities written
// to p in BF16 for the value GEMM. s is overwritten.
void online_softmax_row(float* s, int64_t n, int64_t k_start, int64_t visible, float scale, float& m, float& l,
                        bf16_t* p, float* o, int64_t dv);

// The end of an online softmax row with running max m and sum l: 1 / l to normalise the output
// and the log-sum-exp. A row that saw no key (l = 0) gives 0 and -inf; a NaN sum (a NaN score or
// key on the way) gives NaN in both, so that the NaN reaches the output.
inline float softmax_inverse_sum(float l) { return l == 0.0f ? 0.0f : 1.0f / l; }
inline float softmax_lse(float m, float l) { return l == 0.0f ? -INFINITY : m + std::log(l); }

// Split-KV: folds `splits` parts' softmax states of row r (part k's max pm[k * R + r], sum
// pl[k * R + r] and unnormalised output po[(k * R + r) * dv ...]) into the running state m[r], l[r],
// o[r * dv ...]. A part that saw no key (max -inf) weighs nothing; a NaN in a part's sum or output
// reaches the row's.
void merge_parts(int64_t r, int64_t R, int64_t dv, int64_t splits, const float* pm, const float* pl, const float* po,
                 float* m, float* l, float* o);

// out[t, h, :dv] FP32 (normalised); lse[t, h] when lse is not null.
void attention(const AttentionArgs& a, float* out, float* lse);

}  // namespace dsperf::kernels
