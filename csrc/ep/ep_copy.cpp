#include "ep/ep_copy.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsperf::ep {

using dsperf::kernels::bf16_to_f32;
using dsperf::kernels::f32_to_bf16;

namespace {

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
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

void accumulate_bf16_rows(const bf16_t* rows, int64_t n, int64_t dim, const int64_t* index, int64_t tokens,
                          float* out) {
    for (int64_t i = 0; i < n; ++i) require(index[i] >= 0 && index[i] < tokens, "index entries must be tokens");
    // Rows are added in order; the same token may appear more than once, so this stays serial.
    for (int64_t i = 0; i < n; ++i) {
        const bf16_t* src = rows + i * dim;
        float* dst = out + index[i] * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += bf16_to_f32(src[d]);
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
        for (int64_t k = 0; k < top_k; ++k) {
            const float w = weights[t * top_k + k];
            const bf16_t* src = rows + int64_t(position[t * top_k + k]) * dim;
            for (int64_t d = 0; d < dim; ++d) dst[d] += w * bf16_to_f32(src[d]);
        }
    }
}

void gather_rows_to_bf16(const float* y, int64_t rows, int64_t dim, const int64_t* index, int64_t n, bf16_t* out) {
    for (int64_t i = 0; i < n; ++i) require(index[i] >= 0 && index[i] < rows, "index entries must index rows of y");
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const float* src = y + index[i] * dim;
        bf16_t* dst = out + i * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] = f32_to_bf16(src[d]);
    }
}

void copy_rows(const uint8_t* src, int64_t src_rows, int64_t src_stride, int64_t src_col, const int64_t* src_index,
               uint8_t* dst, int64_t dst_rows, int64_t dst_stride, int64_t dst_col, const int64_t* dst_index, int64_t n,
               int64_t width) {
    require(src_col >= 0 && width >= 0 && src_col + width <= src_stride, "source columns out of range");
    require(dst_col >= 0 && dst_col + width <= dst_stride, "destination columns out of range");
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = src_index ? src_index[i] : i, d = dst_index ? dst_index[i] : i;
        require(s >= 0 && s < src_rows, "source row index out of range");
        require(d >= 0 && d < dst_rows, "destination row index out of range");
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = src_index ? src_index[i] : i, d = dst_index ? dst_index[i] : i;
        std::memcpy(dst + d * dst_stride + dst_col, src + s * src_stride + src_col, size_t(width));
    }
}

}  // namespace dsperf::ep
