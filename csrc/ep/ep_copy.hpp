// Row copies of the expert-parallel exchange that numpy does slowly: weighted reductions that
// write BF16 (combine's send side), BF16 partials summed into FP32 outputs (its receive side), FP8 rows
// dequantised as they are gathered,
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

// out[t] = sum over k, in slot order, of weights[t, k] * f32(rows[position[t, k]]).
void weighted_sum_bf16_rows(const bf16_t* rows, int64_t n, int64_t dim, const int32_t* position, const float* weights,
                            int64_t tokens, int64_t top_k, float* out);

// out[i] = bf16(y[index[i]]) for i < n (y FP32 [rows, dim]); a null index means the identity.
// threads: OpenMP threads at most (0: OpenMP's default), here and in copy_rows.
void gather_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int64_t* index, int64_t n, bf16_t* out,
                         int threads = 0);

// Combine's receive side in one pass: out[t] = sum over ranks r in order of f32(rows[token_rows[t, r]])
// (entries < 0 skipped; zero where a token has none). Each output row is written once and each
// received row read once, instead of one read-modify-write pass over out per rank.
void combine_reduce(const bf16_t* rows, int64_t n, int64_t dim, const int64_t* token_rows, int64_t tokens,
                    int64_t ranks, float* out);

// FP8 rows with 1x128 FP32 scales to BF16, gathered: out[i] = bf16(fp8(values[source[i]]) * scale) for
// i < n (null source: the identity). Rows of values are value_stride bytes apart, of scales
// scale_stride floats apart, so both can be read in place from an exchange's receive buffer.
void dequant_gather_rows(const uint8_t* values, int64_t value_stride, const float* scales, int64_t scale_stride,
                         int64_t src_rows, int64_t dim, const int64_t* source, int64_t n, bf16_t* out);

// Byte rows: dst[dst_index[i]][dst_col + j] = src[src_index[i]][src_col + j], j < width, for i < n.
// A null index means the identity. Rows are dst_stride / src_stride bytes apart.
void copy_rows(const uint8_t* src, int64_t src_rows, int64_t src_stride, int64_t src_col, const int64_t* src_index,
               uint8_t* dst, int64_t dst_rows, int64_t dst_stride, int64_t dst_col, const int64_t* dst_index, int64_t n,
               int64_t width, int threads = 0);

}  // namespace dsperf::ep
