// Absorbed MLA decode, the 64-row variant on mma.sync (the default; DSPERF_MLA_MMA=0 turns it off).
//
// mla_decode.cu's kernel takes 16 query rows per block, so with 128 heads every key is read from
// L2 eight times, and its P V products go through shared memory. This one takes 64 rows (q token x
// head) per block -- the keys are read once per 64 rows, as FlashMLA's 64-head tiles do -- and keeps
// the output in registers as mma accumulators, rescaled row by row.
//
//   8 warps = 4 row groups of 16 x 2 halves.
//   Keys: 32 per chunk, BF16 caches copied by cp.async one chunk ahead into a second buffer (FP8
//   caches are dequantised on the way, synchronously).
//   Scores S[64 x 32] = Q K^T: warp (rows r, half h) sums depth steps h, h + 2, ... into shared.
//   Online softmax: 4 threads per row, probabilities rounded to BF16 (as the CPU's).
//   O[64 x L] += P V: warp (rows r, half h) owns columns h * L/2 .. in registers (L/2/8 tiles).
//   Every fragment comes from shared memory by ldmatrix (V transposed), mma_sm80.cuh.
//
// The work items and the merge kernel are mla_decode.cu's; this file adds the block kernel only.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/attention_steps.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace dsperf::cuda {
namespace {

constexpr int kRows = 64, kChunk = 32, kThreads = 256, kMaxLatent = 512;
constexpr int kPad = 8;                      // elements of padding per shared row (bank spread)
constexpr int kOTiles = kMaxLatent / 2 / 8;  // n8 tiles of one warp's half of the output

struct Layout {  // dynamic shared memory, byte offsets
    size_t q, k, s, p, stats, total;
    int64_t ldq;  // row stride of Qs and Ks (elements)
    __host__ __device__ Layout(int64_t W) {
        ldq = W + kPad;
        q = 0;
        k = q + size_t(kRows * ldq) * 2;
        s = k + size_t(2 * kChunk * ldq) * 2;  // two key buffers
        p = s + size_t(2 * kRows * kChunk) * 4;
        stats = p + size_t(kRows * (kChunk + kPad)) * 2;
        total = stats + size_t(4 * kRows) * 4;
    }
};

__global__ void __launch_bounds__(kThreads)
    mla_decode_mma_kernel(const uint16_t* q_nope, const uint16_t* q_rope, const void* latent, const float* latent_scale,
                          const uint16_t* rope, const int32_t* block_table, const int32_t* seqlens,
                          const int32_t* items, const int32_t* split_offsets, int64_t q_len, int64_t heads, int64_t L,
                          int64_t R, int64_t block_size, int64_t max_blocks, float scale, float* part_o,
                          float* part_lse) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int64_t W = L + R, QH = q_len * heads;
    const Layout lay(W);
    const int64_t ld = lay.ldq;
    uint16_t* Qs = reinterpret_cast<uint16_t*>(smem + lay.q);
    uint16_t* const Kbuf = reinterpret_cast<uint16_t*>(smem + lay.k);  // [2][kChunk][ld]
    float* Sp = reinterpret_cast<float*>(smem + lay.s);        // [2][64][32]
    uint16_t* Ps = reinterpret_cast<uint16_t*>(smem + lay.p);  // [64][32 + pad]
    float* m_s = reinterpret_cast<float*>(smem + lay.stats);
    float* l_s = m_s + kRows;
    float* alpha_s = l_s + kRows;
    int* visible_s = reinterpret_cast<int*>(alpha_s + kRows);
    constexpr int ldp = kChunk + kPad;

    const WorkItemTokens work =
        work_item_tokens(items + 4 * int64_t(blockIdx.x), seqlens, split_offsets, max_blocks, block_size);
    const int64_t b = work.b, split = work.split, len = work.len, t_begin = work.begin, t_end = work.end;
    const int64_t r0 = int64_t(blockIdx.y) * kRows;
    const bool fp8 = latent_scale != nullptr;

    // Queries [64 rows][latent | rope], 8 elements per step (L, R multiples of 16, bases aligned).
    for (int64_t u = threadIdx.x; u < kRows * W / 8; u += kThreads) {
        const int64_t i = u / (W / 8), d = (u % (W / 8)) * 8, row = r0 + i;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row < QH)
            v = d < L ? *reinterpret_cast<const uint4*>(q_nope + (b * QH + row) * L + d)
                      : *reinterpret_cast<const uint4*>(q_rope + (b * QH + row) * R + (d - L));
        *reinterpret_cast<uint4*>(Qs + i * ld + d) = v;
    }
    if (threadIdx.x < kRows) {
        const int64_t row = r0 + threadIdx.x;
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
        visible_s[threadIdx.x] = row < QH ? int(len - q_len + row / heads + 1) : 0;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rg = warp % 4, half = warp / 4;
    const int ntiles = int(L / 2 / 8);  // this warp's n8 output tiles
    float o[kOTiles][4];
#pragma unroll
    for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    __syncthreads();

    // Keys c0 .. c0 + kChunk into buffer buf: [key][latent | rope] rows, zero past t_end (their
    // probabilities are 0, and 0 x garbage could be NaN). BF16 by cp.async (committed as one
    // group, waited for below), FP8 dequantised through registers.
    // One warp per key row (its block-table lookup done once), lanes across the row's 16-byte
    // pieces: no division in the address arithmetic, which a flat index over W / 8 pieces needed.
    auto load_keys = [&](int buf, int64_t c0) {
        uint16_t* Kd = Kbuf + buf * kChunk * ld;
        const int pieces = int(W / 8), latent_pieces = int(L / 8);
        for (int j = warp; j < kChunk; j += kThreads / 32) {
            const int64_t n = c0 + j;
            const bool in = n < t_end;
            const int64_t slot =
                in ? int64_t(block_table[b * max_blocks + n / block_size]) * block_size + n % block_size : 0;
            uint16_t* dst = Kd + j * ld;
            for (int p = lane; p < pieces; p += 32) {
                if (!fp8 || p >= latent_pieces) {
                    const uint16_t* src = p >= latent_pieces ? rope + slot * R + (p - latent_pieces) * 8
                                                             : static_cast<const uint16_t*>(latent) + slot * L + p * 8;
                    cp_async16(dst + p * 8, src, in ? 16 : 0);
                    continue;
                }
                uint4 v = make_uint4(0, 0, 0, 0);
                if (in)
                    v = fp8x8_to_bf16x8(
                        *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(latent) + slot * L + p * 8),
                        latent_scale[slot * ((L + 127) / 128) + p / 16]);
                *reinterpret_cast<uint4*>(dst + p * 8) = v;
            }
        }
        cp_async_commit();
    };

    if (t_begin < t_end) load_keys(0, t_begin);
    for (int64_t c0 = t_begin, it = 0; c0 < t_end; c0 += kChunk, ++it) {
        const int buf = int(it & 1);
        // The next chunk flies while this one is used; its buffer was last read before the
        // __syncthreads that ended the previous chunk.
        if (c0 + kChunk < t_end) {
            load_keys(buf ^ 1, c0 + kChunk);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint16_t* Ks = Kbuf + buf * kChunk * ld;
        {  // Scores of rows rg * 16 .. over depth steps half, half + 2, ...: 4 key tiles of 8.
            // Two sets of accumulators (alternate depth steps) give the tensor cores 8 independent
            // chains instead of 4: with 2 warps per scheduler, 4 chains left them waiting on mma latency.
            float s[4][4] = {}, s2[4][4] = {};
            auto depth_step = [&](float(&acc)[4][4], int64_t kk) {
                uint32_t a[4], k01[4], k23[4];
                ldmatrix_x4(a, a_tile_row(Qs + (rg * 16) * ld + kk, ld, lane));
                ldmatrix_x4(k01, b_pair_row(Ks + kk, ld, lane));  // keys 0-15: K^T's columns
                ldmatrix_x4(k23, b_pair_row(Ks + 16 * ld + kk, ld, lane));
                mma_bf16_16816(acc[0], a, k01[0], k01[1]);
                mma_bf16_16816(acc[1], a, k01[2], k01[3]);
                mma_bf16_16816(acc[2], a, k23[0], k23[1]);
                mma_bf16_16816(acc[3], a, k23[2], k23[3]);
            };
            // Depth steps half, half + 2, ..., two at a time into the two sets.
            int64_t kk = int64_t(half) * 16;
            for (; kk + 32 < W; kk += 64) {
                depth_step(s, kk);
                depth_step(s2, kk + 32);
            }
            if (kk < W) depth_step(s, kk);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[nt][e] += s2[nt][e];
            float* sp = Sp + half * kRows * kChunk;
            for (int nt = 0; nt < 4; ++nt) {
                const int col = nt * 8 + 2 * t;
                sp[(rg * 16 + g) * kChunk + col] = s[nt][0];
                sp[(rg * 16 + g) * kChunk + col + 1] = s[nt][1];
                sp[(rg * 16 + g + 8) * kChunk + col] = s[nt][2];
                sp[(rg * 16 + g + 8) * kChunk + col + 1] = s[nt][3];
            }
        }
        __syncthreads();
        {  // Online softmax: 4 threads per row (aligned lane quads), 8 keys each.
            const int row = threadIdx.x / 4, q4 = threadIdx.x % 4;
            float x[8];
            for (int i = 0; i < 8; ++i) {
                const int j = q4 * 8 + i;
                const float sv = Sp[row * kChunk + j] + Sp[kRows * kChunk + row * kChunk + j];
                const int64_t n = c0 + j;
                x[i] = (n < t_end && n < visible_s[row]) ? sv * scale : -INFINITY;
            }
            online_softmax_step<4>(x, q4, m_s[row], l_s[row], alpha_s[row],
                                   [&](int i, float p) { Ps[row * ldp + q4 * 8 + i] = to_bf16_bits(p); });
        }
        __syncthreads();
        {  // O = O * alpha + P V on this warp's rows and half of the columns.
            const float a_lo = alpha_s[rg * 16 + g], a_hi = alpha_s[rg * 16 + g + 8];
#pragma unroll
            for (int i = 0; i < kOTiles; ++i) o[i][0] *= a_lo, o[i][1] *= a_lo, o[i][2] *= a_hi, o[i][3] *= a_hi;
            for (int kk = 0; kk < kChunk; kk += 16) {
                uint32_t a[4];
                ldmatrix_x4(a, a_tile_row(Ps + (rg * 16) * ldp + kk, ldp, lane));
                // V = the latent rows of the keys: B[k = key][n = column], stored [key][column].
                const uint16_t* v0 = Ks + kk * ld + half * (L / 2);
#pragma unroll
                for (int i = 0; i < kOTiles; i += 2) {
                    if (i < ntiles) {
                        uint32_t v[4];
                        ldmatrix_x4_trans(v, bt_pair_row(v0 + i * 8, ld, lane));
                        mma_bf16_16816(o[i], a, v[0], v[1]);
                        mma_bf16_16816(o[i + 1], a, v[2], v[3]);
                    }
                }
            }
        }
        __syncthreads();  // Sp, Ps and this key buffer are rewritten next
    }
    const int64_t slot = split_offsets[b] + split;
    for (int hi = 0; hi < 2; ++hi) {
        const int64_t lrow = rg * 16 + g + 8 * hi, row = r0 + lrow;
        if (row >= QH) continue;
        const float l = l_s[lrow];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* dst = part_o + (slot * QH + row) * L + half * (L / 2) + 2 * t;
#pragma unroll
        for (int i = 0; i < kOTiles; ++i)
            if (i < ntiles) dst[i * 8] = o[i][2 * hi] * inv, dst[i * 8 + 1] = o[i][2 * hi + 1] * inv;
        if (half == 0 && t == 0) part_lse[slot * QH + row] = l > 0.0f ? m_s[lrow] + logf(l) : -INFINITY;
    }
}

}  // namespace

bool mla_decode_mma_enabled(int64_t kv_lora) {
    const char* env = std::getenv("DSPERF_MLA_MMA");
    // The default since it first ran on a GPU (H200: 5.5x the 16-row kernel at B=128 s=4096 h=128);
    // DSPERF_MLA_MMA=0 selects the 16-row one. The output halves are whole pairs of n8 tiles (ldmatrix
    // loads V two tiles at a time): L a multiple of 32.
    return !(env && std::strcmp(env, "0") == 0) && kv_lora % 32 == 0;
}

void mla_decode_mma_launch(const MlaDecode& d, float* part_o, float* part_lse) {
    const int64_t QH = d.q_len * d.heads, W = d.kv_lora + d.rope_dim;
    const Layout lay(W);
    check(cudaFuncSetAttribute(mla_decode_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(lay.total)),
          "cudaFuncSetAttribute (mla_decode_mma shared memory)");
    const dim3 grid(unsigned(d.n_items), unsigned((QH + kRows - 1) / kRows));
    mla_decode_mma_kernel<<<grid, kThreads, lay.total, current_stream()>>>(
        d.q_nope, d.q_rope, d.latent, d.latent_scale, d.rope, d.block_table, d.seqlens, d.items, d.split_offsets,
        d.q_len, d.heads, d.kv_lora, d.rope_dim, d.block_size, d.max_blocks, d.softmax_scale, part_o, part_lse);
    check(cudaGetLastError(), "mla_decode (mma)");
}

}  // namespace dsperf::cuda
