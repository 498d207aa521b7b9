// AVX-512 BF16 micro-kernels for linear(): VDPBF16PS multiplies 32 BF16 pairs and accumulates
// into 16 FP32 lanes. A tile of MR rows of x and NR rows of w keeps MR x NR accumulators in
// registers and walks K once, 32 elements a step; each accumulator is summed across its lanes at
// the end. Loads per step: MR + NR vectors for MR x NR dot instructions.
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/bf16_widen_avx512.hpp"
#include "kernels/cpu/transpose_avx512.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <cmath>

#include <array>
#include <utility>
#include <vector>

#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace dsperf::kernels::avx512 {

namespace {

// One tile over one K chunk [k0, k0 + klen). Accumulators live in registers for the chunk and in
// acc (MR x NR vectors of 16 floats) between chunks; the last chunk reduces them into y.
template <int MR, int NR>
DSPERF_AVX512 void tile(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy,
                        int64_t klen, bool first, bool last, float* acc, bool accumulate) {
    __m512 c[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * NR + j) * 16);
    int64_t k = 0;
    for (; k + 32 <= klen; k += 32) {
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_loadu_si512(x + i * ldx + k);
        // Streaming w from memory (decode): ask for the next tile's rows while this one computes.
        for (int j = 0; j < NR; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * ldw + k), _MM_HINT_T1);
        for (int j = 0; j < NR; ++j) {
            const __m512i b = _mm512_loadu_si512(w + j * ldw + k);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)b);
        }
    }
    if (k < klen) {  // tail: masked loads zero the lanes past the chunk
        const __mmask32 mask = static_cast<__mmask32>((1ull << (klen - k)) - 1);
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_maskz_loadu_epi16(mask, x + i * ldx + k);
        for (int j = 0; j < NR; ++j) {
            const __m512i b = _mm512_maskz_loadu_epi16(mask, w + j * ldw + k);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)b);
        }
    }
    if (!last) {
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NR; ++j) _mm512_storeu_ps(acc + (i * NR + j) * 16, c[i][j]);
        return;
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            const float s = _mm512_reduce_add_ps(c[i][j]);
            y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
        }
}

using TileFn = void (*)(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, bool, bool, float*,
                        bool);

// 4 x 6 accumulators + 4 rows of x + 1 row of w = 29 of the 32 vector registers; 10 loads feed
// 24 dot instructions per step.
constexpr int kMR = 4, kNR = 6;

// tiles[mr - 1][nr - 1]: the full tile and every remainder shape.
template <int MR, int... NR>
constexpr std::array<TileFn, sizeof...(NR)> row_of_tiles(std::integer_sequence<int, NR...>) {
    return {&tile<MR, NR + 1>...};
}
const std::array<TileFn, kNR> kTiles[kMR] = {
    row_of_tiles<1>(std::make_integer_sequence<int, kNR>{}),
    row_of_tiles<2>(std::make_integer_sequence<int, kNR>{}),
    row_of_tiles<3>(std::make_integer_sequence<int, kNR>{}),
    row_of_tiles<4>(std::make_integer_sequence<int, kNR>{}),
};

}  // namespace

void linear_bf16_rows(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                      int64_t n0, int64_t n1, int64_t K, bool accumulate) {
    // Blocking: a chunk of kNChunk rows of w and kKChunk columns of K. Within a K chunk, 4 rows of
    // x (8 KB) stay in L1 while the w chunk (96 KB) streams from L2 past them; partial sums carry
    // across K chunks in acc. For small M (decode) the same loop streams w once from memory.
    constexpr int64_t kNChunk = 8 * kNR, kKChunk = 1024;
    const int64_t m_tiles = (M + kMR - 1) / kMR;
    std::vector<float> acc(static_cast<size_t>(m_tiles * (kNChunk / kNR) * kMR * kNR * 16));
    for (int64_t nc = n0; nc < n1; nc += kNChunk) {
        const int64_t nc_end = nc + kNChunk < n1 ? nc + kNChunk : n1;
        for (int64_t kc = 0; kc < K; kc += kKChunk) {
            const int64_t klen = K - kc < kKChunk ? K - kc : kKChunk;
            const bool first = kc == 0, last = kc + klen >= K;
            for (int64_t mt = 0; mt < m_tiles; ++mt) {
                const int64_t m = mt * kMR;
                const int mr = int(M - m < kMR ? M - m : kMR);
                for (int64_t n = nc; n < nc_end; n += kNR) {
                    const int nr = int(nc_end - n < kNR ? nc_end - n : kNR);
                    float* tile_acc = acc.data() + (mt * (kNChunk / kNR) + (n - nc) / kNR) * kMR * kNR * 16;
                    kTiles[mr - 1][nr - 1](x + m * ldx + kc, ldx, w + n * ldw + kc, ldw, y + m * ldy + n, ldy, klen,
                                           first, last, tile_acc, accumulate);
                }
            }
        }
    }
}

DSPERF_AVX512 void fp8_block_to_bf16(const fp8_t* src, int64_t ld_src, float scale, bf16_t* dst, int64_t ld_dst,
                                     int64_t rows, int64_t cols) {
    // One block shares one scale, so every code's BF16 value bf16(fp8 x scale) is a table lookup.
    // Rounding is symmetric, so bf16(-v x scale) = -bf16(v x scale): the table holds the 128
    // magnitudes (built with the scalar conversion: bit-identical to it), looked up with two
    // 64-entry permutes picked by bit 6, and the code's sign bit becomes the BF16 sign bit.
    alignas(64) bf16_t table[128];
    const float* decoded = fp8_table();
    const __m512 sv = _mm512_set1_ps(std::fabs(scale));
    for (int i = 0; i < 128; i += 16)  // VCVTNEPS2BF16 rounds to nearest even, as f32_to_bf16 does
        _mm256_store_si256(reinterpret_cast<__m256i*>(table + i),
                           (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(decoded + i), sv)));
    __m512i t[4];
    for (int i = 0; i < 4; ++i) t[i] = _mm512_load_si512(table + 32 * i);
    // A negative scale flips every sign.
    const __m512i flip = _mm512_set1_epi16(std::signbit(scale) ? short(0x8000) : 0);
    const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; c += 32) {
            const int n = int(cols - c < 32 ? cols - c : 32);
            const __mmask32 m = static_cast<__mmask32>(n == 32 ? ~0u : (1u << n) - 1);
            const __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + r * ld_src + c));
            const __m512i q0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);  // magnitudes of codes 0-63
            const __m512i q1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);  // 64-127
            const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(idx, bit6), q0, q1);
            const __m512i sign = _mm512_xor_si512(_mm512_slli_epi16(_mm512_and_si512(idx, bit7), 8), flip);
            _mm512_mask_storeu_epi16(dst + r * ld_dst + c, m, _mm512_or_si512(mag, sign));
        }
    }
}

namespace {
constexpr int kPanel = 32;  // output columns per panel: two vectors of 16
constexpr int kFmaMR = 12;  // rows per tile: 24 accumulators + 2 panel vectors + 1 broadcast

// y[MR rows, panel] (+)= xf[MR rows, kc] * wp[kc][32]; cols < 32 masks the last panel.
template <int MR>
DSPERF_AVX512 void fma_tile(const float* xf, int64_t ldx, const float* wp, float* y, int64_t ldy, int64_t kc,
                            bool load_y, __mmask16 m0, __mmask16 m1) {
    __m512 c[MR][2];
    for (int i = 0; i < MR; ++i) {
        c[i][0] = load_y ? _mm512_maskz_loadu_ps(m0, y + i * ldy) : _mm512_setzero_ps();
        c[i][1] = load_y ? _mm512_maskz_loadu_ps(m1, y + i * ldy + 16) : _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
        const __m512 b0 = _mm512_loadu_ps(wp + k * kPanel), b1 = _mm512_loadu_ps(wp + k * kPanel + 16);
        for (int i = 0; i < MR; ++i) {
            const __m512 a = _mm512_set1_ps(xf[i * ldx + k]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
    for (int i = 0; i < MR; ++i) {
        _mm512_mask_storeu_ps(y + i * ldy, m0, c[i][0]);
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, c[i][1]);
    }
}

// The panel chunk widened: wp[k * 32 + j] = w[j * ldw + k] as FP32 for j < cols (0 past them),
// k < klen. 16 rows x 16 columns at a time: each row's 16 BF16 widened into a vector of words,
// then a 16 x 16 transpose (a scalar loop here took a fifth of the prefill GEMM's time).
DSPERF_AVX512 void widen_panel(const bf16_t* w, int64_t ldw, int cols, int64_t klen, float* wp) {
    for (int j0 = 0; j0 < kPanel; j0 += 16) {
        for (int64_t k0 = 0; k0 < klen; k0 += 16) {
            const int64_t n = klen - k0 < 16 ? klen - k0 : 16;
            const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; ++i) {
                if (j0 + i >= cols) {  // rows past the panel's last are not read (they may not exist)
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                const __m256i row = _mm256_maskz_loadu_epi16(m, w + (j0 + i) * ldw + k0);
                r[i] = _mm512_castps_si512(bf16x16_to_f32(row));
            }
            transpose16x16(r);
            for (int64_t kk = 0; kk < n; ++kk) _mm512_storeu_si512(wp + (k0 + kk) * kPanel + j0, r[kk]);
        }
    }
}

using FmaFn = void (*)(const float*, int64_t, const float*, float*, int64_t, int64_t, bool, __mmask16, __mmask16);
template <int... MR>
constexpr std::array<FmaFn, sizeof...(MR)> fma_tiles(std::integer_sequence<int, MR...>) {
    return {&fma_tile<MR + 1>...};
}
const std::array<FmaFn, kFmaMR> kFmaTiles = fma_tiles(std::make_integer_sequence<int, kFmaMR>{});
}  // namespace

void linear_bf16_rows_fma(const float* xf, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M, int64_t n0,
                          int64_t n1, int64_t K, bool accumulate) {
    constexpr int64_t kKChunk = 512;  // a widened panel chunk is 64 KB: L2, streamed past L1-hot rows of x
    std::vector<float> wp(static_cast<size_t>(kKChunk * kPanel));
    for (int64_t n = n0; n < n1; n += kPanel) {
        const int cols = int(n1 - n < kPanel ? n1 - n : kPanel);
        const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
        const __mmask16 m1 = static_cast<__mmask16>(cols <= 16 ? 0 : cols >= 32 ? 0xffff : (1u << (cols - 16)) - 1);
        for (int64_t kc = 0; kc < K; kc += kKChunk) {
            const int64_t klen = K - kc < kKChunk ? K - kc : kKChunk;
            widen_panel(w + n * ldw + kc, ldw, cols, klen, wp.data());
            const bool load_y = accumulate || kc > 0;
            for (int64_t m = 0; m < M; m += kFmaMR) {
                const int mr = int(M - m < kFmaMR ? M - m : kFmaMR);
                kFmaTiles[size_t(mr - 1)](xf + m * K + kc, K, wp.data(), y + m * ldy + n, ldy, klen, load_y, m0, m1);
            }
        }
    }
}

}  // namespace dsperf::kernels::avx512

#else  // not x86-64: the dispatcher never selects these

namespace dsperf::kernels::avx512 {
void linear_bf16_rows(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, int64_t, int64_t,
                      int64_t, bool) {}
void fp8_block_to_bf16(const fp8_t*, int64_t, float, bf16_t*, int64_t, int64_t, int64_t) {}
void linear_bf16_rows_fma(const float*, const bf16_t*, int64_t, float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          bool) {}
}  // namespace dsperf::kernels::avx512

#endif
