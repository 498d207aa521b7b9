// MLA prefill attention, non-absorbed (the form prefill uses: keys and values decompressed per
// head), causal: plain multi-head attention with q/k [tokens, heads, nope + rope] and
// v [tokens, heads, v_dim], FlashAttention-style on WMMA.
//
// One thread block takes 16 query tokens of one head and walks the keys they may see (causal) 32
// at a time: S = Q K^T (4 warps: 2 column tiles x 2 slices of the depth), an online softmax with
// probabilities rounded to BF16, O = O * alpha + P V with O in registers (FP32).
#include <cmath>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/attention_steps.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {
namespace {

constexpr int kRows = 16, kChunk = 32, kThreads = 128, kMaxQk = 256, kMaxV = 128;

// 8 BF16 values (16 bytes) from row-major [rows, heads, dim] storage, zero past `rows`.
__device__ __forceinline__ uint4 load8(const uint16_t* base, int64_t row, int64_t rows, int64_t h, int64_t heads,
                                       int64_t dim, int64_t d) {
    if (row >= rows) return make_uint4(0, 0, 0, 0);
    return *reinterpret_cast<const uint4*>(base + (row * heads + h) * dim + d);
}

__global__ void __launch_bounds__(kThreads)
    mla_prefill_kernel(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t q_len, int64_t kv_len,
                       int64_t heads, int64_t dqk, int64_t dv, float scale, float* out, float* lse) {
    __shared__ __align__(32) __nv_bfloat16 Qs[kRows * kMaxQk];
    __shared__ __align__(32) __nv_bfloat16 Ks[kChunk * kMaxQk];
    __shared__ __align__(32) __nv_bfloat16 Vs[kChunk * kMaxV];
    __shared__ __align__(32) float Spart[2 * kRows * kChunk];
    __shared__ __align__(32) __nv_bfloat16 Ps[kRows * kChunk];
    __shared__ __align__(32) float Otmp[kRows * kMaxV];
    __shared__ float m_s[kRows], l_s[kRows], alpha_s[kRows];

    const int64_t h = blockIdx.y, t0 = int64_t(blockIdx.x) * kRows;
    const int64_t offset = kv_len - q_len;  // query t sits at position offset + t
    for (int64_t u = threadIdx.x; u < kRows * dqk / 8; u += kThreads) {
        const int64_t i = u / (dqk / 8), d = (u % (dqk / 8)) * 8;
        *reinterpret_cast<uint4*>(Qs + i * dqk + d) = load8(q, t0 + i, q_len, h, heads, dqk, d);
    }
    if (threadIdx.x < kRows) m_s[threadIdx.x] = -INFINITY, l_s[threadIdx.x] = 0.0f;
    const int my_row = threadIdx.x / 8, lane8 = threadIdx.x % 8, warp = threadIdx.x / 32;
    const int per_thread = int(dv / 8);  // output columns lane8 + 8 j
    float o[kMaxV / 8];
#pragma unroll
    for (int j = 0; j < kMaxV / 8; ++j) o[j] = 0.0f;
    __syncthreads();

    // Keys past the last query's position are never visible.
    const int64_t last = offset + (t0 + kRows < q_len ? t0 + kRows : q_len);
    for (int64_t c0 = 0; c0 < last; c0 += kChunk) {
        for (int64_t u = threadIdx.x; u < kChunk * dqk / 8; u += kThreads) {
            const int64_t j = u / (dqk / 8), d = (u % (dqk / 8)) * 8;
            *reinterpret_cast<uint4*>(Ks + j * dqk + d) = load8(k, c0 + j, kv_len, h, heads, dqk, d);
        }
        for (int64_t u = threadIdx.x; u < kChunk * dv / 8; u += kThreads) {
            const int64_t j = u / (dv / 8), d = (u % (dv / 8)) * 8;
            *reinterpret_cast<uint4*>(Vs + j * dv + d) = load8(v, c0 + j, kv_len, h, heads, dv, d);
        }
        __syncthreads();
        {  // Scores: warp (nt, kq) sums key columns nt*16.. over every other 16-deep slice.
            const int nt = warp % 2, kq = warp / 2;
            wmma_steps::scores_16x16(Qs, Ks + nt * 16 * dqk, dqk, int64_t(kq) * 16, 32, dqk,
                                     Spart + kq * kRows * kChunk + nt * 16, kChunk);
        }
        __syncthreads();
        {  // 8 threads per row, 4 keys each; the shuffles stay within aligned groups of 8 lanes.
            const int64_t visible = offset + t0 + my_row + 1;
            float x[4];
            for (int i = 0; i < 4; ++i) {
                const int j = lane8 + 8 * i;
                const float s = Spart[my_row * kChunk + j] + Spart[kRows * kChunk + my_row * kChunk + j];
                const int64_t n = c0 + j;
                x[i] = (n < kv_len && n < visible && t0 + my_row < q_len) ? s * scale : -INFINITY;
            }
            online_softmax_step<8>(x, lane8, m_s[my_row], l_s[my_row], alpha_s[my_row], [&](int i, float p) {
                Ps[my_row * kChunk + lane8 + 8 * i] = __float2bfloat16_rn(p);
            });
        }
        __syncthreads();
        for (int64_t tile = warp; tile < dv / 16; tile += kThreads / 32)
            wmma_steps::pv_tile<kChunk>(Ps, Vs + tile * 16, dv, Otmp + tile * 16, dv);
        __syncthreads();
        const float alpha = alpha_s[my_row];
#pragma unroll
        for (int j = 0; j < kMaxV / 8; ++j)
            if (j < per_thread) o[j] = o[j] * alpha + Otmp[my_row * dv + lane8 + 8 * j];
        __syncthreads();  // Ks / Vs are reloaded next
    }
    const int64_t t = t0 + my_row;
    if (t >= q_len) return;
    const float l = l_s[my_row];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxV / 8; ++j)
        if (j < per_thread) out[(t * heads + h) * dv + lane8 + 8 * j] = o[j] * inv;
    if (lane8 == 0) lse[t * heads + h] = l > 0.0f ? m_s[my_row] + logf(l) : -INFINITY;
}

}  // namespace

void MlaPrefill::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("mla_prefill: " + what);
    };
    need(q_len >= 0 && kv_len >= q_len && heads >= 1, "q_len >= 0, kv_len >= q_len and heads >= 1 are required");
    need(heads <= 65535, "at most 65535 heads");
    need(dqk >= 16 && dqk % 16 == 0 && dqk <= kMaxQk,
         "the query/key width must be a multiple of 16 in [16, 256], got " + std::to_string(dqk));
    need(dv >= 16 && dv % 16 == 0 && dv <= kMaxV,
         "the value width must be a multiple of 16 in [16, 128], got " + std::to_string(dv));
    need(std::isfinite(softmax_scale) && softmax_scale > 0, "softmax_scale must be positive");
    need(q_len == 0 || (q && k && v && out && lse), "every array is required");
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    need(aligned(q) && aligned(k) && aligned(v), "q, k and v must start at 16-byte aligned addresses");
}

void mla_prefill(const MlaPrefill& p) {
    if (p.q_len == 0) return;
    const dim3 grid(unsigned((p.q_len + kRows - 1) / kRows), unsigned(p.heads));
    mla_prefill_kernel<<<grid, kThreads, 0, current_stream()>>>(p.q, p.k, p.v, p.q_len, p.kv_len, p.heads, p.dqk, p.dv,
                                                                p.softmax_scale, p.out, p.lse);
    check_launch("mla_prefill");
}

}  // namespace dsperf::cuda
