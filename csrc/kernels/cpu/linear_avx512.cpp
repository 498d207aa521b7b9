// AVX-512 BF16 micro-kernels for linear(): VDPBF16PS multiplies 32 BF16 pairs and accumulates
// into 16 FP32 lanes. A tile of MR rows of x and NR rows of w keeps MR x NR accumulators in
// registers and walks K once, 32 elements a step; each accumulator is summed across its lanes at
// the end. Loads per step: MR + NR vectors for MR x NR dot instructions.
#include "kernels/cpu/linear.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace dsperf::kernels::avx512 {

namespace {

template <int MR, int NR>
DSPERF_AVX512 void tile(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy,
                        int64_t K, bool accumulate) {
    __m512 c[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_loadu_si512(x + i * ldx + k);
        for (int j = 0; j < NR; ++j) {
            const __m512i b = _mm512_loadu_si512(w + j * ldw + k);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)b);
        }
    }
    if (k < K) {  // tail: masked loads zero the lanes past K
        const __mmask32 mask = static_cast<__mmask32>((1ull << (K - k)) - 1);
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_maskz_loadu_epi16(mask, x + i * ldx + k);
        for (int j = 0; j < NR; ++j) {
            const __m512i b = _mm512_maskz_loadu_epi16(mask, w + j * ldw + k);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)b);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            const float s = _mm512_reduce_add_ps(c[i][j]);
            y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
        }
}

using TileFn = void (*)(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, bool);

constexpr int kMR = 4, kNR = 4;

// tiles[mr - 1][nr - 1]: the full tile and every remainder shape.
template <int MR, int NR>
constexpr TileFn pick() { return &tile<MR, NR>; }
const TileFn kTiles[kMR][kNR] = {
    {pick<1, 1>(), pick<1, 2>(), pick<1, 3>(), pick<1, 4>()},
    {pick<2, 1>(), pick<2, 2>(), pick<2, 3>(), pick<2, 4>()},
    {pick<3, 1>(), pick<3, 2>(), pick<3, 3>(), pick<3, 4>()},
    {pick<4, 1>(), pick<4, 2>(), pick<4, 3>(), pick<4, 4>()},
};

}  // namespace

void linear_bf16_rows(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                      int64_t n0, int64_t n1, int64_t K, bool accumulate) {
    // A chunk of w rows stays in L2 while every tile of x passes over it.
    constexpr int64_t kChunk = 32;
    for (int64_t nc = n0; nc < n1; nc += kChunk) {
        const int64_t nc_end = nc + kChunk < n1 ? nc + kChunk : n1;
        for (int64_t m = 0; m < M; m += kMR) {
            const int mr = int(M - m < kMR ? M - m : kMR);
            for (int64_t n = nc; n < nc_end; n += kNR) {
                const int nr = int(nc_end - n < kNR ? nc_end - n : kNR);
                kTiles[mr - 1][nr - 1](x + m * ldx, ldx, w + n * ldw, ldw, y + m * ldy + n, ldy, K, accumulate);
            }
        }
    }
}

DSPERF_AVX512 void fp8_block_to_bf16(const fp8_t* src, int64_t ld_src, float scale, bf16_t* dst, int64_t ld_dst,
                                     int64_t rows, int64_t cols) {
    // e4m3 bits moved into BF16 position give the value times 2^-120 exactly (the exponent
    // bias differs by 120; FP8 subnormals land on BF16 subnormals), so one multiply by
    // scale * 2^120 dequantises; the result is rounded to BF16 (RNE).
    const __m512 s = _mm512_set1_ps(scale * 1.329227995784916e36f);  // 2^120
    for (int64_t r = 0; r < rows; ++r) {
        int64_t c = 0;
        for (; c < cols; c += 16) {
            const int n = int(cols - c < 16 ? cols - c : 16);
            const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
            const __m128i b = _mm_maskz_loadu_epi8(m, src + r * ld_src + c);
            const __m512i v = _mm512_cvtepu8_epi32(b);
            const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
            const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x7f)), 20);
            const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(sign, mag)), s);
            _mm256_mask_storeu_epi16(dst + r * ld_dst + c, m, (__m256i)_mm512_cvtneps_pbh(f));
        }
    }
}

}  // namespace dsperf::kernels::avx512

#else  // not x86-64: the dispatcher never selects these

namespace dsperf::kernels::avx512 {
void linear_bf16_rows(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, int64_t, int64_t,
                      int64_t, bool) {}
void fp8_block_to_bf16(const fp8_t*, int64_t, float, bf16_t*, int64_t, int64_t, int64_t) {}
}  // namespace dsperf::kernels::avx512

#endif
