#include "ep/ep_copy.hpp"

#include "common/require.hpp"

#include <algorithm>
#include "kernels/common/parallel.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/linear.hpp"

#include <cstring>
#if defined(_OPENMP)
#include <omp.h>
#endif
#include <stdexcept>
#include <string>
#include <vector>

namespace dsperf::ep {

using dsperf::kernels::bf16_to_f32;
using dsperf::kernels::f32_to_bf16;
using dsperf::kernels::fp8_t;

namespace {

using kernels::max_threads;

// Checks run inside per-element loops: a literal message must not build a std::string each time.
}  // namespace

namespace {

// dst[d] (=|+=) f32(src[d]): restrict-qualified so the compiler vectorises without alias checks.
void widen_row(const bf16_t* __restrict src, float* __restrict dst, int64_t dim, bool add) {
    if (add) {
        for (int64_t d = 0; d < dim; ++d) dst[d] += bf16_to_f32(src[d]);
    } else {
        for (int64_t d = 0; d < dim; ++d) dst[d] = bf16_to_f32(src[d]);
    }
}

// dst[d] += w * f32(src[d]).
void axpy_row(float w, const bf16_t* __restrict src, float* __restrict dst, int64_t dim) {
    for (int64_t d = 0; d < dim; ++d) dst[d] += w * bf16_to_f32(src[d]);
}

}  // namespace

void weighted_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int32_t* position, const float* weights,
                           int64_t tokens, int64_t top_k, bf16_t* out) {
    for (int64_t i = 0; i < tokens * top_k; ++i)
        require(weights[i] == 0.0f || (position[i] >= 0 && position[i] < rows), "position entries must index rows of y");
    std::vector<float> acc(dim);
#pragma omp parallel for schedule(static) firstprivate(acc)
    for (int64_t t = 0; t < tokens; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k = 0; k < top_k; ++k) {
            const float w = weights[t * top_k + k];
            if (w == 0.0f) continue;
            const float* src = y + int64_t(position[t * top_k + k]) * dim;
            for (int64_t d = 0; d < dim; ++d) acc[d] += w * src[d];
        }
        bf16_t* dst = out + t * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] = f32_to_bf16(acc[d]);
    }
}

void weighted_sum_bf16_rows(const bf16_t* rows, int64_t n, int64_t dim, const int32_t* position, const float* weights,
                            int64_t tokens, int64_t top_k, float* out) {
    for (int64_t i = 0; i < tokens * top_k; ++i)
        require(position[i] >= 0 && position[i] < n, "position entries must index the received rows");
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        float* dst = out + t * dim;
        std::fill(dst, dst + dim, 0.0f);
        for (int64_t k = 0; k < top_k; ++k)
            axpy_row(weights[t * top_k + k], rows + int64_t(position[t * top_k + k]) * dim, dst, dim);
    }
}

void gather_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int64_t* index, int64_t n, bf16_t* out,
                         int threads) {
    if (index) {
        for (int64_t i = 0; i < n; ++i) require(index[i] >= 0 && index[i] < rows, "index entries must index rows of y");
    } else {
        require(n <= rows, "n must not exceed the rows of y");
    }
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : max_threads())
    for (int64_t i = 0; i < n; ++i) {
        const float* src = y + (index ? index[i] : i) * dim;
        bf16_t* dst = out + i * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] = f32_to_bf16(src[d]);
    }
}

void combine_reduce(const bf16_t* rows, int64_t n, int64_t dim, const int64_t* token_rows, int64_t tokens,
                    int64_t ranks, float* out) {
    for (int64_t i = 0; i < tokens * ranks; ++i)
        require(token_rows[i] < n, "token_rows entries must index the received rows (or be negative)");
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        float* dst = out + t * dim;
        bool first = true;
        for (int64_t r = 0; r < ranks; ++r) {
            const int64_t row = token_rows[t * ranks + r];
            if (row < 0) continue;
            widen_row(rows + row * dim, dst, dim, !first);
            first = false;
        }
        if (first) std::fill(dst, dst + dim, 0.0f);
    }
}

void dequant_gather_rows(const uint8_t* values, int64_t value_stride, const float* scales, int64_t scale_stride,
                         int64_t src_rows, int64_t dim, const int64_t* source, int64_t n, bf16_t* out) {
    const int64_t groups = (dim + 127) / 128;
    require(value_stride >= dim && scale_stride >= groups, "row strides must cover a row");
    if (source) {
        for (int64_t i = 0; i < n; ++i)
            require(source[i] >= 0 && source[i] < src_rows, "source entries must index the FP8 rows");
    } else {
        require(n <= src_rows, "n must not exceed the FP8 rows");
    }
    const bool simd = dsperf::kernels::use_avx512();
    const float* table = dsperf::kernels::fp8_table();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = source ? source[i] : i;
        const uint8_t* v = values + s * value_stride;
        const float* sc = scales + s * scale_stride;
        bf16_t* dst = out + i * dim;
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t c0 = g * 128, cols = std::min<int64_t>(dim, c0 + 128) - c0;
            if (simd) {
                dsperf::kernels::avx512::fp8_block_to_bf16(v + c0, dim, sc[g], dst + c0, dim, 1, cols);
            } else {
                for (int64_t c = 0; c < cols; ++c) dst[c0 + c] = f32_to_bf16(table[v[c0 + c]] * sc[g]);
            }
        }
    }
}

void copy_rows(const uint8_t* src, int64_t src_rows, int64_t src_stride, int64_t src_col, const int64_t* src_index,
               uint8_t* dst, int64_t dst_rows, int64_t dst_stride, int64_t dst_col, const int64_t* dst_index, int64_t n,
               int64_t width, int threads) {
    require(src_col >= 0 && width >= 0 && src_col + width <= src_stride, "source columns out of range");
    require(dst_col >= 0 && dst_col + width <= dst_stride, "destination columns out of range");
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = src_index ? src_index[i] : i, d = dst_index ? dst_index[i] : i;
        require(s >= 0 && s < src_rows, "source row index out of range");
        require(d >= 0 && d < dst_rows, "destination row index out of range");
    }
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : max_threads())
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = src_index ? src_index[i] : i, d = dst_index ? dst_index[i] : i;
        std::memcpy(dst + d * dst_stride + dst_col, src + s * src_stride + src_col, size_t(width));
    }
}

}  // namespace dsperf::ep
