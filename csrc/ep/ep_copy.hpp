// Row copies of the expert-parallel exchange that numpy does slowly: weighted reductions that
// write BF16 (combine's send side), BF16 rows accumulated into FP32 outputs (its receive side),
// and row gathers/scatters of raw bytes. Pure loops over caller-owned memory; no MPI here.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::ep {

using dsperf::kernels::bf16_t;

// out[t] = bf16(sum over k, in slot order, of weights[t, k] * y[position[t, k]]) for t < tokens;
// slots with weight 0 are skipped. y: FP32 [rows, dim].
void weighted_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int32_t* position, const float* weights,
                           int64_t tokens, int64_t top_k, bf16_t* out);

// out[index[i]] += f32(rows[i]) for i < n, in order (out FP32 [tokens, dim]).
void accumulate_bf16_rows(const bf16_t* rows, int64_t n, int64_t dim, const int64_t* index, int64_t tokens,
                          float* out);

// out[t] = sum over k, in slot order, of weights[t, k] * f32(rows[position[t, k]]).
void weighted_sum_bf16_rows(const bf16_t* rows, int64_t n, int64_t dim, const int32_t* position, const float* weights,
                            int64_t tokens, int64_t top_k, float* out);

// out[i] = bf16(y[index[i]]) for i < n (y FP32 [rows, dim]).
void gather_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int64_t* index, int64_t n, bf16_t* out);

// Byte rows: dst[dst_index[i]][dst_col + j] = src[src_index[i]][src_col + j], j < width, for i < n.
// A null index means the identity. Rows are dst_stride / src_stride bytes apart.
void copy_rows(const uint8_t* src, int64_t src_rows, int64_t src_stride, int64_t src_col, const int64_t* src_index,
               uint8_t* dst, int64_t dst_rows, int64_t dst_stride, int64_t dst_col, const int64_t* dst_index, int64_t n,
               int64_t width);

}  // namespace dsperf::ep
