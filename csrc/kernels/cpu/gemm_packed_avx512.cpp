// The packed prefill GEMM (see gemm_avx512.hpp).
//
// Blocking: a thread owns a slice of kPackedSliceRows (48) rows of w. For each K block of up to
// kKBlock columns (a multiple of 128, so FP8 scale blocks never straddle two K blocks; every
// DeepSeek-V3 GEMM fits in one) the slice is packed into panels of 6 rows laid out step by step:
// panel[step][row][32 BF16]. A 48 x 7168 slice is 688 KB and stays in L2 while every 4-row tile of
// x streams past it (x comes from L3 once per slice: 48-row slices read it a quarter as often as
// 12-row ones, which ran 5-10% slower on the expert FFN with the L3 shared). The tile keeps 4 x 6 FP32 accumulators in registers along the whole K block;
// per 32-wide K step it loads 4 vectors of x and 6 of the panel (one contiguous 384-byte run) for
// 24 VDPBF16PS. Measured on a 2-core Zen 4 (M = 256, N = 4096, K = 7168): whole-K blocks of 12 to 48
// rows ran at 370-410 GFLOPS, 2048-wide K blocks whose partial sums go through memory at 260-340.
// Partial sums carry across K blocks (K > kKBlock) in a per-thread buffer; the last block sums
// each accumulator's 16 lanes into y.
#include "kernels/cpu/gemm_avx512.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <utility>
#include <vector>

#include "kernels/cpu/fp8_convert_avx512.hpp"

#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace dsperf::kernels::avx512 {

namespace {

constexpr int kMR = 4, kNR = 6, kStep = 32;
constexpr int64_t kKBlock = 8192;
constexpr int64_t kPanels = kPackedSliceRows / kNR;
static_assert(kPackedSliceRows % kNR == 0, "a slice is whole panels");

DSPERF_AVX512 inline __mmask32 first_n(int64_t n) {
    return n >= 32 ? __mmask32(~0u) : static_cast<__mmask32>((1u << n) - 1);
}

// BF16 rows [0, rows) of w, columns [0, klen), into `panels` panels of `steps` steps (zeros past
// the last row and column).
DSPERF_AVX512 void pack_bf16(const bf16_t* w, int64_t ldw, int64_t rows, int64_t klen, int64_t steps,
                             bf16_t* dst) {
    const int64_t panels = (rows + kNR - 1) / kNR;
    for (int64_t p = 0; p < panels; ++p)
        for (int j = 0; j < kNR; ++j) {
            const int64_t r = p * kNR + j;
            bf16_t* out = dst + (p * steps * kNR + j) * kStep;
            if (r >= rows) {
                for (int64_t s = 0; s < steps; ++s) _mm512_store_si512(out + s * kNR * kStep, _mm512_setzero_si512());
                continue;
            }
            const bf16_t* src = w + r * ldw;
            for (int64_t s = 0; s < steps; ++s)
                _mm512_store_si512(out + s * kNR * kStep, _mm512_maskz_loadu_epi16(first_n(klen - s * kStep), src + s * kStep));
        }
}

// FP8 rows [n, n + rows) of w, columns [k0, k0 + klen) (k0 a multiple of 128): each 128 x 128
// block is dequantised with its own scale's table as it is packed, once per slice and K block.
DSPERF_AVX512 void pack_fp8(const fp8_t* w, const float* scale, int64_t K, int64_t n, int64_t rows, int64_t k0,
                            int64_t klen, int64_t steps, bf16_t* dst) {
    const int64_t k_blocks = (K + 127) / 128, panels = (rows + kNR - 1) / kNR;
    for (int64_t r = rows; r < panels * kNR; ++r) {  // padding rows
        bf16_t* out = dst + ((r / kNR) * steps * kNR + r % kNR) * kStep;
        for (int64_t s = 0; s < steps; ++s) _mm512_store_si512(out + s * kNR * kStep, _mm512_setzero_si512());
    }
    for (int64_t kb0 = 0; kb0 < klen; kb0 += 128) {
        const int64_t kb = (k0 + kb0) / 128;
        int64_t block_row = n / 128;
        Fp8WordTable table(scale[block_row * k_blocks + kb]);
        for (int64_t r = 0; r < rows; ++r) {
            if ((n + r) / 128 != block_row) {  // a new 128-row block: its scale's table
                block_row = (n + r) / 128;
                table = Fp8WordTable(scale[block_row * k_blocks + kb]);
            }
            const fp8_t* src = w + (n + r) * K + k0 + kb0;
            bf16_t* out = dst + ((r / kNR) * steps * kNR + r % kNR) * kStep;
            for (int64_t c = kb0; c < std::min(klen, kb0 + 128); c += kStep) {
                const __mmask32 m = first_n(klen - c);
                const __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + (c - kb0)));
                // Columns past K are zeros, not the value of code 0 (which a NaN scale makes NaN).
                _mm512_store_si512(out + (c / kStep) * kNR * kStep, _mm512_maskz_mov_epi16(m, table.convert(idx)));
            }
        }
    }
}

// {sum of a's 16 lanes, of b's, of c's, of d's}.
DSPERF_AVX512 inline __m128 sum_lanes4(__m512 a, __m512 b, __m512 c, __m512 d) {
    // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], the same for c and d.
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    // Per lane: [a, b, c, d] summed over the lane's four elements.
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    // Across the four lanes.
    const __m512 v = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 w = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castps512_ps128(w);
}

// One 4 x 6 (or smaller) tile over one K block. x rows are masked past klen; the panel is
// zero-padded. Accumulators: from acc (or zero) at the start, to acc, or summed into y (nr
// columns) on the last K block.
template <int MR>
DSPERF_AVX512 void tile(const bf16_t* x, int64_t ldx, const bf16_t* panel, int64_t klen, float* acc, bool first,
                        bool last, float* y, int64_t ldy, int nr, bool accumulate) {
    __m512 c[MR][kNR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < kNR; ++j) c[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + (i * kNR + j) * 16);
    const int64_t full = klen / kStep;
    for (int64_t s = 0; s < full; ++s) {
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_loadu_si512(x + i * ldx + s * kStep);
        const bf16_t* b = panel + s * kNR * kStep;
        for (int j = 0; j < kNR; ++j) {
            const __m512i bj = _mm512_load_si512(b + j * kStep);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)bj);
        }
    }
    if (full * kStep < klen) {
        const __mmask32 m = first_n(klen - full * kStep);
        __m512i a[MR];
        for (int i = 0; i < MR; ++i) a[i] = _mm512_maskz_loadu_epi16(m, x + i * ldx + full * kStep);
        const bf16_t* b = panel + full * kNR * kStep;
        for (int j = 0; j < kNR; ++j) {
            const __m512i bj = _mm512_load_si512(b + j * kStep);
            for (int i = 0; i < MR; ++i) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a[i], (__m512bh)bj);
        }
    }
    if (!last) {
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < kNR; ++j) _mm512_store_ps(acc + (i * kNR + j) * 16, c[i][j]);
        return;
    }
    // The 16 lanes of each accumulator summed four accumulators at a time (13 instructions per
    // four sums instead of about 8 per sum): short products such as attention's 576-deep scores
    // spend a noticeable part of their time here.
    constexpr int kAcc = MR * kNR, kGroups = (kAcc + 3) / 4;
    alignas(16) float sums[kGroups * 4];
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) {
        __m512 v[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            const int k = 4 * g + t;
            v[t] = k < kAcc ? c[k / kNR][k % kNR] : _mm512_setzero_ps();
        }
        _mm_store_ps(sums + 4 * g, sum_lanes4(v[0], v[1], v[2], v[3]));
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < nr; ++j) y[i * ldy + j] = accumulate ? y[i * ldy + j] + sums[i * kNR + j] : sums[i * kNR + j];
}

using TileFn = void (*)(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, bool, bool, float*, int64_t, int, bool);
constexpr std::array<TileFn, kMR> kTiles = {&tile<1>, &tile<2>, &tile<3>, &tile<4>};

// 64-byte aligned scratch that grows and is kept between calls (every element used is written
// before it is read).
template <typename T>
T* scratch(std::vector<T>& v, size_t n) {
    const size_t pad = 64 / sizeof(T);
    if (v.size() < n + pad) v.resize(n + pad);
    const auto addr = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - addr % 64) % 64) / sizeof(T);
}

}  // namespace

void linear_packed_rows(const bf16_t* x, int64_t ldx, const GemmWeights& w, float* y, int64_t ldy, int64_t M,
                        int64_t n0, int64_t n1, int64_t K, bool accumulate) {
    thread_local std::vector<bf16_t> packed_store;
    thread_local std::vector<float> acc_store;
    const int64_t m_tiles = (M + kMR - 1) / kMR;
    const int64_t max_steps = (std::min(K, kKBlock) + kStep - 1) / kStep;
    bf16_t* packed = scratch(packed_store, size_t(kPanels * max_steps * kNR * kStep));
    float* acc = K > kKBlock ? scratch(acc_store, size_t(m_tiles * kPanels * kMR * kNR * 16)) : nullptr;
    for (int64_t nc = n0; nc < n1; nc += kPackedSliceRows) {
        const int64_t rows = std::min(kPackedSliceRows, n1 - nc), panels = (rows + kNR - 1) / kNR;
        for (int64_t kc = 0; kc < K; kc += kKBlock) {
            const int64_t klen = std::min(kKBlock, K - kc), steps = (klen + kStep - 1) / kStep;
            const bool first = kc == 0, last = kc + klen >= K;
            if (w.fp8) pack_fp8(w.fp8, w.scale, K, nc, rows, kc, klen, steps, packed);
            else pack_bf16(w.bf16 + nc * w.ld + kc, w.ld, rows, klen, steps, packed);
            for (int64_t mt = 0; mt < m_tiles; ++mt) {
                const int64_t m = mt * kMR;
                const int mr = int(std::min<int64_t>(kMR, M - m));
                for (int64_t p = 0; p < panels; ++p) {
                    const int nr = int(std::min<int64_t>(kNR, rows - p * kNR));
                    kTiles[size_t(mr - 1)](x + m * ldx + kc, ldx, packed + p * steps * kNR * kStep, klen,
                                           acc ? acc + (mt * kPanels + p) * kMR * kNR * 16 : nullptr, first, last,
                                           y + m * ldy + nc + p * kNR, ldy, nr, accumulate);
                }
            }
        }
    }
}

DSPERF_AVX512 void interleave_rows(const bf16_t* a, const bf16_t* b, int64_t n, bf16_t* dst) {
    // Word i of the first output is a[i / 2] (even i) or b[i / 2] (odd i); of the second, 16 on.
    alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t d = 0; d < n; d += 32) {
        const __mmask32 m = first_n(n - d);
        const __m512i va = _mm512_maskz_loadu_epi16(m, a + d);
        const __m512i vb = b ? _mm512_maskz_loadu_epi16(m, b + d) : _mm512_setzero_si512();
        const int64_t left = 2 * (n - d);  // output words still to write
        _mm512_mask_storeu_epi16(dst + 2 * d, first_n(left), _mm512_permutex2var_epi16(va, lo, vb));
        if (left > 32) _mm512_mask_storeu_epi16(dst + 2 * d + 32, first_n(left - 32), _mm512_permutex2var_epi16(va, hi, vb));
    }
}

namespace {
// r[i] = column i of the 16 x 16 matrix of 32-bit words whose row i was r[i].
DSPERF_AVX512 inline void transpose16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 4; ++k) {
            t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
            t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
        }
    for (int k = 0; k < 8; ++k) {
        r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
        r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);
    }
}
}  // namespace

DSPERF_AVX512 void transpose_pairs(const bf16_t* src, int64_t ld, int64_t n, int64_t pairs, bf16_t* dst) {
    // A pair of BF16 values is one 32-bit word: a 32-bit transpose, 16 x 16 words in registers.
    const auto word = [](const bf16_t* p) {
        uint32_t w;
        std::memcpy(&w, p, sizeof w);
        return w;
    };
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        int64_t p = 0;
        for (; p + 16 <= pairs; p += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + (j + i) * ld + 2 * p);
            transpose16x16(r);
            for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + ((p + i) * n + j) * 2, r[i]);
        }
        for (; p < pairs; ++p)
            for (int i = 0; i < 16; ++i) {
                const uint32_t w = word(src + (j + i) * ld + 2 * p);
                std::memcpy(dst + (p * n + j + i) * 2, &w, sizeof w);
            }
    }
    for (; j < n; ++j)
        for (int64_t p = 0; p < pairs; ++p) {
            const uint32_t w = word(src + j * ld + 2 * p);
            std::memcpy(dst + (p * n + j) * 2, &w, sizeof w);
        }
}

}  // namespace dsperf::kernels::avx512

#else  // not x86-64: the dispatcher never selects these

namespace dsperf::kernels::avx512 {
void linear_packed_rows(const bf16_t*, int64_t, const GemmWeights&, float*, int64_t, int64_t, int64_t, int64_t,
                        int64_t, bool) {}
void interleave_rows(const bf16_t*, const bf16_t*, int64_t, bf16_t*) {}
void transpose_pairs(const bf16_t*, int64_t, int64_t, int64_t, bf16_t*) {}
}  // namespace dsperf::kernels::avx512

#endif
