// Steps the flash-attention kernels share (MLA decode on WMMA, mma.sync and wgmma, MLA prefill): the
// FP8 latent's dequantisation, a paged work item's token range, the online-softmax update of one
// query row, and the WMMA products S = Q K^T and P V. Each kernel keeps its own tiling, masks and shared-memory layout; these are
// the pieces whose arithmetic must agree between them (and with the CPU kernels they are tested
// against).
#pragma once
#include <mma.h>

#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {

// 8 FP8 e4m3 latent values (8 bytes, in order) times their 128-wide block's scale, as 8 BF16
// values (16 bytes): the CPU kernels' dequantisation, bf16(code x scale).
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 raw, float scale) {
    const uint32_t w[2] = {raw.x, raw.y};
    uint32_t packed[4];
    for (int i = 0; i < 4; ++i) {
        const uint32_t word = w[i / 2] >> (16 * (i % 2));
        packed[i] = uint32_t(to_bf16_bits(fp8_bits_to_f32(uint8_t(word & 0xff)) * scale)) |
                    (uint32_t(to_bf16_bits(fp8_bits_to_f32(uint8_t(word >> 8)) * scale)) << 16);
    }
    return make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// A split-KV work item of the paged decode's plan (request, first block, end block, split index) as
// the tokens [begin, end) its thread block attends to. The request's last split runs to the
// request's length even where the plan was made for fewer tokens (seqlens grown on the device
// since, as in a replayed graph), within the block table's reach.
struct WorkItemTokens {
    int64_t b, split, len, begin, end;
};
__device__ __forceinline__ WorkItemTokens work_item_tokens(const int32_t* item, const int32_t* seqlens,
                                                           const int32_t* split_offsets, int64_t max_blocks,
                                                           int64_t block_size) {
    WorkItemTokens w;
    w.b = item[0], w.split = item[3], w.len = seqlens[w.b];
    w.begin = min(int64_t(item[1]) * block_size, w.len);
    const bool last = w.split == split_offsets[w.b + 1] - split_offsets[w.b] - 1;
    const int64_t reach = min(w.len, max_blocks * block_size);
    w.end = last ? reach : min(int64_t(item[2]) * block_size, w.len);
    return w;
}

// One chunk's online-softmax step for a query row held by kLanes aligned, consecutive lanes of a
// warp, each with kKeys scaled scores x (masked keys -INFINITY). The row's running max m_row and
// sum l_row (in shared memory) move on; alpha_row gets the factor the row's output is rescaled by;
// store_p(i, p) receives each probability exp(x[i] - m_new). A row that has seen only masked keys
// keeps max -INFINITY, probabilities 0 and alpha 1 (never exp(-inf - -inf)).
template <int kLanes, int kKeys, class StoreP>
__device__ __forceinline__ void online_softmax_step(const float (&x)[kKeys], int lane_in_row, float& m_row,
                                                    float& l_row, float& alpha_row, StoreP store_p) {
    float mx = -INFINITY;
    for (int i = 0; i < kKeys; ++i) mx = fmaxf(mx, x[i]);
    for (int off = kLanes / 2; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_old = m_row, m_new = fmaxf(m_old, mx);
    float sum = 0.0f;
    for (int i = 0; i < kKeys; ++i) {
        const float p = m_new == -INFINITY ? 0.0f : __expf(x[i] - m_new);
        sum += p;
        store_p(i, p);
    }
    for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncwarp();  // every lane has read m_row before its lane 0 moves it
    if (lane_in_row == 0) {
        const float alpha = m_new == -INFINITY ? 1.0f : __expf(m_old - m_new);
        alpha_row = alpha;
        l_row = l_row * alpha + sum;
        m_row = m_new;
    }
}

namespace wmma_steps {

namespace wmma = nvcuda::wmma;

// Scores of 16 query rows (Qs, row-major, ld elements a row) against 16 keys (Ks, a key's row
// ld elements) over the depth slices kk = first, first + stride, ... < depth, 16 deep each: one
// warp's share of S = Q K^T, stored row-major into s_out (ld_s floats a row).
__device__ __forceinline__ void scores_16x16(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, int64_t ld,
                                             int64_t first, int64_t stride, int64_t depth, float* s_out,
                                             unsigned ld_s) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
    wmma::fill_fragment(s, 0.0f);
    for (int64_t kk = first; kk < depth; kk += stride) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fq;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fk;
        wmma::load_matrix_sync(fq, Qs + kk, unsigned(ld));
        wmma::load_matrix_sync(fk, Ks + kk, unsigned(ld));
        wmma::mma_sync(s, fq, fk, s);
    }
    wmma::store_matrix_sync(s_out, s, ld_s, wmma::mem_row_major);
}

// One 16-column tile of P V: P (16 rows x kChunk keys, BF16, ld kChunk) times V's rows (Vs + the
// tile's first column, ld_v elements a key), into o_out (ld_o floats a row).
template <int kChunk>
__device__ __forceinline__ void pv_tile(const __nv_bfloat16* Ps, const __nv_bfloat16* Vs, int64_t ld_v, float* o_out,
                                        int64_t ld_o) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < kChunk; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fp;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fv;
        wmma::load_matrix_sync(fp, Ps + kk, kChunk);
        wmma::load_matrix_sync(fv, Vs + kk * ld_v, unsigned(ld_v));
        wmma::mma_sync(acc, fp, fv, acc);
    }
    wmma::store_matrix_sync(o_out, acc, unsigned(ld_o), wmma::mem_row_major);
}

}  // namespace wmma_steps

}  // namespace dsperf::cuda
