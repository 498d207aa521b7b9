#include "kernels/cpu/elementwise.hpp"

#include "common/require.hpp"

#include "kernels/common/fast_math.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/cpu/cpu_features.hpp"

#include <algorithm>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#include <cmath>
#include <stdexcept>
#include <string>

namespace dsperf::kernels {

namespace {
inline float load(float v) { return v; }
inline float load(bf16_t v) { return bf16_to_f32(v); }
template <typename T>
inline T store(float v);
template <>
inline float store<float>(float v) { return v; }
template <>
inline bf16_t store<bf16_t>(float v) { return f32_to_bf16(v); }

}  // namespace

template <typename T>
void rmsnorm(const T* x, const float* weight, T* out, int64_t tokens, int64_t dim, float eps) {
    require(tokens >= 0 && dim >= 0, "rmsnorm: tokens and dim must be >= 0");
    require(eps >= 0, "rmsnorm: eps must be >= 0");
#pragma omp parallel for schedule(static) if (worth_threads(tokens * dim))
    for (int64_t t = 0; t < tokens; ++t) {
        const T* row = x + t * dim;
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += double(load(row[i])) * load(row[i]);
        const float r = float(1.0 / std::sqrt(ss / dim + eps));
        for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = store<T>(load(row[i]) * r * weight[i]);
    }
}
template void rmsnorm<float>(const float*, const float*, float*, int64_t, int64_t, float);
template void rmsnorm<bf16_t>(const bf16_t*, const float*, bf16_t*, int64_t, int64_t, float);

void RopeConfig::validate() const {
    require(dim > 0 && dim % 2 == 0, "rope: dim must be a positive even number");
    require(base > 1, "rope: base must be > 1");
    require(factor >= 1, "rope: factor must be >= 1");
    require(original_seq_len > 0 && max_seq_len > 0, "rope: sequence lengths must be positive");
    require(beta_fast > 0 && beta_slow > 0, "rope: beta_fast and beta_slow must be positive");
}

std::vector<float> rope_frequencies(const RopeConfig& c) {
    c.validate();
    const int64_t half = c.dim / 2;
    std::vector<float> freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        freqs[size_t(i)] = float(1.0 / std::pow(c.base, double(2 * i) / double(c.dim)));
    if (c.max_seq_len <= c.original_seq_len) return freqs;
    // YaRN: dimensions that rotate fewer than beta_slow times over the original context are
    // interpolated (freq / factor), those rotating more than beta_fast times are kept, with a
    // linear ramp between.
    auto correction_dim = [&](double rotations) {
        return double(c.dim) * std::log(double(c.original_seq_len) / (rotations * 2 * M_PI)) / (2 * std::log(c.base));
    };
    const double low = std::max(std::floor(correction_dim(c.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(c.beta_slow)), double(c.dim - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
        const double keep = 1 - ramp;  // 1: keep the original frequency
        freqs[size_t(i)] = float(freqs[size_t(i)] / c.factor * (1 - keep) + freqs[size_t(i)] * keep);
    }
    return freqs;
}

template <typename T>
void rope_inplace(T* x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head, const int32_t* positions,
                  const float* freqs, int64_t rope_dim) {
    require(tokens >= 0 && heads >= 0 && rope_dim >= 0 && rope_dim % 2 == 0,
            "rope: tokens and heads >= 0 and an even rope_dim >= 0 are required");
#pragma omp parallel for schedule(static) if (worth_threads(tokens * heads * rope_dim))
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < rope_dim / 2; ++i) {
            // The angle in float, as torch.polar over float32 freqs does.
            const float angle = float(positions[t]) * freqs[i];
            const float cs = std::cos(angle), sn = std::sin(angle);
            for (int64_t h = 0; h < heads; ++h) {
                T* p = x + t * ld_token + h * ld_head + 2 * i;
                const float a = load(p[0]), b = load(p[1]);
                p[0] = store<T>(a * cs - b * sn);
                p[1] = store<T>(a * sn + b * cs);
            }
        }
    }
}
template void rope_inplace<float>(float*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*, int64_t);
template void rope_inplace<bf16_t>(bf16_t*, int64_t, int64_t, int64_t, int64_t, const int32_t*, const float*, int64_t);

void embedding(const bf16_t* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t tokens, bf16_t* out) {
    require(vocab >= 0 && dim >= 0 && tokens >= 0, "embedding: vocab, dim and tokens must be >= 0");
    for (int64_t t = 0; t < tokens; ++t)
        if (ids[t] < 0 || ids[t] >= vocab)
            throw std::invalid_argument("embedding: ids[" + std::to_string(t) + "] = " + std::to_string(ids[t]) +
                                        " is outside [0, " + std::to_string(vocab) + ")");
#pragma omp parallel for schedule(static) if (worth_threads(tokens * dim))
    for (int64_t t = 0; t < tokens; ++t)
        std::copy(table + int64_t(ids[t]) * dim, table + int64_t(ids[t] + 1) * dim, out + t * dim);
}

#if defined(__x86_64__) || defined(_M_X64)
// GCC 12 warns that its own unmasked AVX-512 intrinsics read an uninitialised __Y once inlined
// here (a known false positive of -Wmaybe-uninitialized on _mm512_undefined_ps). Clang has no such
// warning group (and warns about the name), so only GCC is told.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {
#define DSPERF_AVX512_EW __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
// exp_approx on 16 lanes: the same clamp, rounding, polynomial and exponent bits (the compiler may
// fuse the polynomial's multiply-adds, so a result can differ from the scalar one by an ulp).
DSPERF_AVX512_EW inline __m512 exp_approx16(__m512 x) {
    // MAX/MIN return their second operand when either is NaN: NaN stays NaN through the clamp.
    const __m512 c = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    const __mmask16 num = _mm512_cmp_ps_mask(c, c, _CMP_ORD_Q);
    const __m512 t = _mm512_mul_ps(_mm512_maskz_mov_ps(num, c), _mm512_set1_ps(1.44269504f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_add_ps(_mm512_sub_ps(c, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f))),
                                   _mm512_mul_ps(n, _mm512_set1_ps(2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.0f / 720);
    for (const float k : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(k));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// Rows [t0, t1) of silu_mul, 16 columns at a time. VCVTNEPS2BF16 rounds to nearest even, as
// f32_to_bf16 does; unlike it, the instruction flushes FP32 denormals (below 1.2e-38) to zero.
DSPERF_AVX512_EW void silu_mul_avx512(const float* gu, int64_t t0, int64_t t1, int64_t inter, bf16_t* out) {
    for (int64_t t = t0; t < t1; ++t) {
        const float* g = gu + t * 2 * inter;
        const float* u = g + inter;
        for (int64_t i = 0; i < inter; i += 16) {
            const __mmask16 m = static_cast<__mmask16>(inter - i >= 16 ? 0xffff : (1u << (inter - i)) - 1);
            const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
            const __m512 e = exp_approx16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
            const __m512 v = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), uv);
            _mm256_mask_storeu_epi16(out + t * inter + i, m, (__m256i)_mm512_cvtneps_pbh(v));
        }
    }
}
}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

void silu_mul(const float* gu, int64_t tokens, int64_t inter, bf16_t* out) {
    require(tokens >= 0 && inter >= 0, "silu_mul: tokens and inter must be >= 0");
#if defined(__x86_64__) || defined(_M_X64)
    // The portable loop below is not vectorised for generic x86-64 (the rounding's NaN branch):
    // 4.6 ns per element, 4% of a 256-token expert FFN.
    if (use_avx512()) {
#pragma omp parallel for schedule(static) if (worth_threads(tokens * inter))
        for (int64_t t = 0; t < tokens; ++t) silu_mul_avx512(gu, t, t + 1, inter, out);
        return;
    }
#endif
#pragma omp parallel for schedule(static) if (worth_threads(tokens * inter))
    for (int64_t t = 0; t < tokens; ++t) {
        const float* g = gu + t * 2 * inter;
        const float* u = g + inter;
        // silu(g) = g / (1 + e^-g).
        for (int64_t i = 0; i < inter; ++i) out[t * inter + i] = f32_to_bf16(g[i] / (1.0f + exp_approx(-g[i])) * u[i]);
    }
}

template <typename T>
void act_quant(const T* x, int64_t tokens, int64_t dim, fp8_t* q, float* scales) {
    require(tokens >= 0 && dim >= 0, "act_quant: tokens and dim must be >= 0");
    constexpr int64_t kGroup = 128;
    const int64_t groups = (dim + kGroup - 1) / kGroup;
#pragma omp parallel for schedule(static) if (worth_threads(tokens * dim))
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t k0 = g * kGroup, k1 = std::min(dim, k0 + kGroup);
            // std::max skips NaN: a NaN in the block is looked for beside the max, and makes the
            // scale NaN (as the reference's amax), so that q * scale is NaN for the whole block
            // rather than a NaN token crossing FP8 as zeros.
            float amax = 0;
            bool nan = false;
            for (int64_t k = k0; k < k1; ++k) {
                const float v = load(x[t * dim + k]);
                amax = std::max(amax, std::fabs(v));
                nan |= v != v;
            }
            const float scale = nan ? NAN : amax / kFp8Max;
            scales[t * groups + g] = scale;
            for (int64_t k = k0; k < k1; ++k)
                q[t * dim + k] = scale > 0 ? f32_to_fp8(load(x[t * dim + k]) / scale) : fp8_t(0);
        }
    }
}
template void act_quant<float>(const float*, int64_t, int64_t, fp8_t*, float*);
template void act_quant<bf16_t>(const bf16_t*, int64_t, int64_t, fp8_t*, float*);

void weight_dequant(const fp8_t* w, const float* scale, int64_t rows, int64_t cols, bf16_t* out) {
    require(rows >= 0 && cols >= 0, "weight_dequant: rows and cols must be >= 0");
    constexpr int64_t kBlock = 128;
    const int64_t col_blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (worth_threads(rows * cols))
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            out[r * cols + c] = f32_to_bf16(fp8_table()[w[r * cols + c]] * scale[(r / kBlock) * col_blocks + c / kBlock]);
}

}  // namespace dsperf::kernels
