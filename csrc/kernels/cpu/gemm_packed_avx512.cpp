// The packed prefill GEMM (see gemm_avx512.hpp) and the VNNI-layout kernel it shares with attention.
//
// Blocking: a thread owns a slice of kPackedSliceRows (48) rows of w. For each K block of up to
// kKBlock columns (a multiple of 128, so FP8 scale blocks never straddle two K blocks; every
// DeepSeek-V3 GEMM fits in one) the slice is packed into the VNNI pair layout of gemm_bf16_vnni,
// with the slice's rows as its 48 columns: pair p of row j at packed[(p * 48 + j) * 2], so one K
// pair of the whole slice is 192 contiguous bytes. A 48 x 7168 slice is 688 KB and stays in L2
// while every 8-row tile of x passes it (x comes from L3 once per slice). The tile keeps 8 x 3
// FP32 accumulators (8 rows x 48 columns) in registers along the whole K block; per K pair it loads
// 3 vectors of the panel and broadcasts one pair of each of the 8 rows for 24 VDPBF16PS, and ends
// with plain stores: no horizontal sums. Partial sums carry across K blocks (K > kKBlock) in y.
// Measured on a 2-core Zen 4 against the previous design (4 x 6 tiles of dot products along K over
// 6-row panels, each accumulator summed across its lanes at the end), 8 experts' weights streamed
// from memory, M = 256: N 4096 x K 7168 383-403 -> 415-423 GFLOPS, N 7168 x K 2048 376-379 ->
// 421-429 (of a 466 GFLOPS VDPBF16PS peak).
#include "kernels/cpu/gemm_avx512.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16_widen_avx512.hpp"
#include "kernels/cpu/fp8_convert_avx512.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/transpose_avx512.hpp"

#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace dsperf::kernels::avx512 {
namespace {
DSPERF_AVX512 inline __m512i load_pairs(const bf16_t* src, bool partial, __mmask32 mask) {
    return partial ? _mm512_maskz_loadu_epi16(mask, src) : _mm512_loadu_si512(src);
}

// A tile's MR x ND accumulators from y (accumulate) or zero, and back to y; the last of the ND
// 16-column blocks holds the columns of last_mask.
template <int MR, int ND>
DSPERF_AVX512 __attribute__((always_inline)) inline void start_tile(__m512 (&c)[MR][ND], const float* y, int64_t ldy,
                                                                    bool accumulate, __mmask16 last_mask) {
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
        #pragma GCC unroll 8
        for (int j = 0; j < ND; ++j) {
            const __mmask16 mk = j == ND - 1 ? last_mask : __mmask16(0xffff);
            c[i][j] = accumulate ? _mm512_maskz_loadu_ps(mk, y + i * ldy + j * 16) : _mm512_setzero_ps();
        }
}
template <int MR, int ND>
DSPERF_AVX512 __attribute__((always_inline)) inline void end_tile(__m512 (&c)[MR][ND], float* y, int64_t ldy,
                                                                  __mmask16 last_mask) {
    #pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
        #pragma GCC unroll 8
        for (int j = 0; j < ND; ++j) {
            const __mmask16 mk = j == ND - 1 ? last_mask : __mmask16(0xffff);
            _mm512_mask_storeu_ps(y + i * ldy + j * 16, mk, c[i][j]);
        }
}
// The last block may be partial: its loads of B stop at column N (two BF16 per column).
inline __mmask32 pairs_mask(__mmask16 last_mask) {
    const int tail_cols = __builtin_popcount(unsigned(last_mask));
    return static_cast<__mmask32>(tail_cols >= 16 ? ~0ull : (1ull << (2 * tail_cols)) - 1);
}

// MR rows of x times ND 16-column blocks of B: MR x ND accumulators, ND vectors of B and one
// broadcast pair of x live in registers; K advances two at a time.
template <int MR, int ND>
DSPERF_AVX512 void vnni_tile(const bf16_t* x, int64_t ldx, const bf16_t* bp, int64_t N, float* y, int64_t ldy,
                             int64_t K, bool accumulate, __mmask16 last_mask) {
    __m512 c[MR][ND];
    start_tile<MR, ND>(c, y, ldy, accumulate, last_mask);
    const __mmask32 last_pairs = pairs_mask(last_mask);
    const int64_t pairs = K / 2;
    for (int64_t kp = 0; kp < pairs; ++kp) {
        __m512i b[ND];
        #pragma GCC unroll 8
        for (int j = 0; j < ND; ++j) b[j] = load_pairs(bp + (kp * N + j * 16) * 2, j == ND - 1, last_pairs);
        #pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            int32_t pair;
            __builtin_memcpy(&pair, x + i * ldx + 2 * kp, 4);
            const __m512i a = _mm512_set1_epi32(pair);
            #pragma GCC unroll 8
            for (int j = 0; j < ND; ++j) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a, (__m512bh)b[j]);
        }
    }
    if (K % 2) {  // the last x column pairs with B's zero row
        __m512i b[ND];
        #pragma GCC unroll 8
        for (int j = 0; j < ND; ++j) b[j] = load_pairs(bp + (pairs * N + j * 16) * 2, j == ND - 1, last_pairs);
        #pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512i a = _mm512_set1_epi32(int32_t(x[i * ldx + K - 1]));
            #pragma GCC unroll 8
            for (int j = 0; j < ND; ++j) c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a, (__m512bh)b[j]);
        }
    }
    end_tile<MR, ND>(c, y, ldy, last_mask);
}

// The same tile on FP32 FMAs, for CPUs that issue them at twice the VDPBF16PS rate: x comes widened
// to FP32 (xf, row stride ldx, zero-padded to whole pairs), each vector of B's pairs is widened in
// registers into its even-k and odd-k halves (a shift, a mask), and each dot product becomes two
// FMAs against two broadcasts of x. Per K pair at 8 x 3: 48 FMAs and 6 widenings against 24
// dot products at half the rate.
template <int MR, int ND>
DSPERF_AVX512 void vnni_tile_fma(const float* xf, int64_t ldx, const bf16_t* bp, int64_t N, float* y, int64_t ldy,
                                 int64_t K, bool accumulate, __mmask16 last_mask) {
    __m512 c[MR][ND];
    start_tile<MR, ND>(c, y, ldy, accumulate, last_mask);
    const __mmask32 last_pairs = pairs_mask(last_mask);
    const int64_t pairs = (K + 1) / 2;  // an odd K's last pair: x's zero pad against B's zero row
    for (int64_t kp = 0; kp < pairs; ++kp) {
        __m512 even[ND], odd[ND];
        #pragma GCC unroll 8
        for (int j = 0; j < ND; ++j) {
            const __m512i b = load_pairs(bp + (kp * N + j * 16) * 2, j == ND - 1, last_pairs);
            even[j] = bf16_pair_first(b);
            odd[j] = bf16_pair_second(b);
        }
        #pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512 xe = _mm512_set1_ps(xf[i * ldx + 2 * kp]), xo = _mm512_set1_ps(xf[i * ldx + 2 * kp + 1]);
            #pragma GCC unroll 8
            for (int j = 0; j < ND; ++j) {
                c[i][j] = _mm512_fmadd_ps(xe, even[j], c[i][j]);
                c[i][j] = _mm512_fmadd_ps(xo, odd[j], c[i][j]);
            }
        }
    }
    end_tile<MR, ND>(c, y, ldy, last_mask);
}

using VnniFn = void (*)(const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, bool, __mmask16);
using VnniFmaFn = void (*)(const float*, int64_t, const bf16_t*, int64_t, float*, int64_t, int64_t, bool, __mmask16);
// 8 rows x 3 column blocks: 24 accumulators, 3 vectors of B and a broadcast pair of x. A 48-column
// panel of B for a 256-deep product is 24 KB and stays in L1 while every 8-row tile passes it.
constexpr int kVMR = 8, kVND = 3;
template <int MR, int... ND>
constexpr std::array<VnniFn, sizeof...(ND)> vnni_row(std::integer_sequence<int, ND...>) {
    return {&vnni_tile<MR, ND + 1>...};
}
const std::array<VnniFn, kVND> kVnni[kVMR] = {
    vnni_row<1>(std::make_integer_sequence<int, kVND>{}), vnni_row<2>(std::make_integer_sequence<int, kVND>{}),
    vnni_row<3>(std::make_integer_sequence<int, kVND>{}), vnni_row<4>(std::make_integer_sequence<int, kVND>{}),
    vnni_row<5>(std::make_integer_sequence<int, kVND>{}), vnni_row<6>(std::make_integer_sequence<int, kVND>{}),
    vnni_row<7>(std::make_integer_sequence<int, kVND>{}), vnni_row<8>(std::make_integer_sequence<int, kVND>{}),
};
template <int MR, int... ND>
constexpr std::array<VnniFmaFn, sizeof...(ND)> vnni_fma_row(std::integer_sequence<int, ND...>) {
    return {&vnni_tile_fma<MR, ND + 1>...};
}
const std::array<VnniFmaFn, kVND> kVnniFma[kVMR] = {
    vnni_fma_row<1>(std::make_integer_sequence<int, kVND>{}), vnni_fma_row<2>(std::make_integer_sequence<int, kVND>{}),
    vnni_fma_row<3>(std::make_integer_sequence<int, kVND>{}), vnni_fma_row<4>(std::make_integer_sequence<int, kVND>{}),
    vnni_fma_row<5>(std::make_integer_sequence<int, kVND>{}), vnni_fma_row<6>(std::make_integer_sequence<int, kVND>{}),
    vnni_fma_row<7>(std::make_integer_sequence<int, kVND>{}), vnni_fma_row<8>(std::make_integer_sequence<int, kVND>{}),
};
}  // namespace

// x [M, K] widened into FP32 rows of stride ld (>= K rounded up to whole pairs), zero past K.
DSPERF_AVX512 void widen_rows(const bf16_t* x, int64_t ldx, int64_t M, int64_t K, int64_t ld, float* xf) {
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < ld; k += 16) {
            const int64_t n = K - k >= 16 ? 16 : K - k > 0 ? K - k : 0;
            const __mmask16 mk = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
            const __m512 w = bf16x16_to_f32(_mm256_maskz_loadu_epi16(mk, x + m * ldx + k));
            const __mmask16 to_ld = static_cast<__mmask16>(ld - k >= 16 ? 0xffff : (1u << (ld - k)) - 1);
            _mm512_mask_storeu_ps(xf + m * ld + k, to_ld, w);
        }
    }
}

void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate, bool fma) {
    // Column blocks outside, rows inside: a 48-column panel of B (K / 2 x 192 bytes, 24 KB for a
    // 256-key attention chunk) stays in L1 while every 8-row tile of x passes it; rows outside
    // would stream the whole of B from L2 or beyond once per tile of rows.
    const int64_t blocks = (N + 15) / 16;
    // FMAs: x widened once per call (attention's rows x 576 or x 256: well under 1% of the products).
    thread_local std::vector<float> widened;
    const int64_t ldxf = (K + 1) / 2 * 2;
    if (fma) {
        if (widened.size() < size_t(M * ldxf)) widened.resize(size_t(M * ldxf));
        widen_rows(x, ldx, M, K, ldxf, widened.data());
    }
    for (int64_t jb = 0; jb < blocks; jb += kVND) {
        const int nd = int(blocks - jb < kVND ? blocks - jb : kVND);
        const int64_t tail = N - (jb + nd - 1) * 16;  // columns in the last block of this tile
        const __mmask16 last = static_cast<__mmask16>(tail >= 16 ? 0xffff : (1u << tail) - 1);
        for (int64_t m = 0; m < M; m += kVMR) {
            const int mr = int(M - m < kVMR ? M - m : kVMR);
            if (fma)
                kVnniFma[mr - 1][nd - 1](widened.data() + m * ldxf, ldxf, bp + jb * 16 * 2, N, y + m * ldy + jb * 16,
                                         ldy, K, accumulate, last);
            else
                kVnni[mr - 1][nd - 1](x + m * ldx, ldx, bp + jb * 16 * 2, N, y + m * ldy + jb * 16, ldy, K,
                                      accumulate, last);
        }
    }
    // Kept between calls up to 64 MB (attention calls it per chunk); a long prefill's rows are freed.
    if (widened.size() * sizeof(float) > (size_t(64) << 20)) std::vector<float>().swap(widened);
}


namespace {

constexpr int64_t kKBlock = 8192;
// A slice is whole 16-row transpose groups (so an FP8 group never straddles a 128-row scale block)
// and at most one 8 x 3 tile wide.
static_assert(kPackedSliceRows % 16 == 0 && kPackedSliceRows <= 16 * kVND, "a slice is one panel of whole groups");

// 16 rows of w, 32 columns each (as 16 registers of 16 pairs, row i in rows[i]), transposed into
// the pair layout: pair p0 + i of the 16 rows at dst + ((p0 + i) * width + j0) * 2, for the pairs
// below `pairs`. `n` rows of the 16 are real; the stores stop there (columns past `width` belong
// to no row).
DSPERF_AVX512 inline void store_pairs16(__m512i rows[16], int64_t p0, int64_t pairs, int64_t width, int64_t j0, int n,
                                        bf16_t* dst) {
    transpose16x16(rows);
    const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
    const int64_t count = std::min<int64_t>(16, pairs - p0);
    for (int64_t i = 0; i < count; ++i) _mm512_mask_storeu_epi32(dst + ((p0 + i) * width + j0) * 2, m, rows[i]);
}

DSPERF_AVX512 inline __mmask32 first_n(int64_t n) {
    return n >= 32 ? __mmask32(~0u) : n <= 0 ? __mmask32(0) : static_cast<__mmask32>((1u << n) - 1);
}

// BF16 rows [0, rows) of w (stride ldw), columns [0, klen), into the pair layout of width `rows`
// (zeros past klen, so an odd klen's last pair is (w, 0), as gemm_bf16_vnni reads it).
DSPERF_AVX512 void pack_bf16(const bf16_t* w, int64_t ldw, int64_t rows, int64_t klen, bf16_t* dst) {
    for (int64_t j0 = 0; j0 < rows; j0 += 16) {
        const int n = int(std::min<int64_t>(16, rows - j0));
        for (int64_t c = 0; c < klen; c += 32) {
            const __mmask32 m = first_n(klen - c);
            __m512i r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = i < n ? _mm512_maskz_loadu_epi16(m, w + (j0 + i) * ldw + c) : _mm512_setzero_si512();
            store_pairs16(r, c / 2, (klen + 1) / 2, rows, j0, n, dst);
        }
    }
}

// FP8 rows [n, n + rows) of w (row stride K), columns [k0, k0 + klen) (k0 a multiple of 128), into
// the same layout: each 128 x 128 block dequantised with its own scale's table as it is packed. A
// 16-row group never straddles two 128-row blocks (n is a multiple of 16).
DSPERF_AVX512 void pack_fp8(const fp8_t* w, const float* scale, int64_t K, int64_t n, int64_t rows, int64_t k0,
                            int64_t klen, bf16_t* dst) {
    const int64_t k_blocks = (K + 127) / 128;
    for (int64_t j0 = 0; j0 < rows; j0 += 16) {
        const int cnt = int(std::min<int64_t>(16, rows - j0));
        const int64_t block_row = (n + j0) / 128;
        for (int64_t kb0 = 0; kb0 < klen; kb0 += 128) {
            const Fp8WordTable table(scale[block_row * k_blocks + (k0 + kb0) / 128]);
            for (int64_t c = kb0; c < std::min(klen, kb0 + 128); c += 32) {
                const __mmask32 m = first_n(klen - c);
                __m512i r[16];
                for (int i = 0; i < 16; ++i) {
                    if (i >= cnt) {
                        r[i] = _mm512_setzero_si512();
                        continue;
                    }
                    const __m512i idx = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, w + (n + j0 + i) * K + k0 + c));
                    // Columns past K are zeros, not the value of code 0 (which a NaN scale makes NaN).
                    r[i] = _mm512_maskz_mov_epi16(m, table.convert(idx));
                }
                store_pairs16(r, c / 2, (klen + 1) / 2, rows, j0, cnt, dst);
            }
        }
    }
}

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
    const int64_t max_pairs = (std::min(K, kKBlock) + 1) / 2;
    bf16_t* packed = scratch(packed_store, size_t(max_pairs * kPackedSliceRows * 2));
    for (int64_t nc = n0; nc < n1; nc += kPackedSliceRows) {
        const int64_t rows = std::min(kPackedSliceRows, n1 - nc);
        const int nd = int((rows + 15) / 16);
        const __mmask16 last = static_cast<__mmask16>(rows % 16 == 0 ? 0xffff : (1u << (rows % 16)) - 1);
        for (int64_t kc = 0; kc < K; kc += kKBlock) {
            const int64_t klen = std::min(kKBlock, K - kc);
            if (w.fp8) pack_fp8(w.fp8, w.scale, K, nc, rows, kc, klen, packed);
            else pack_bf16(w.bf16 + nc * w.ld + kc, w.ld, rows, klen, packed);
            // Later K blocks add to the partial sums the earlier ones left in y.
            const bool acc = accumulate || kc > 0;
            for (int64_t m = 0; m < M; m += kVMR) {
                const int mr = int(std::min<int64_t>(kVMR, M - m));
                kVnni[mr - 1][nd - 1](x + m * ldx + kc, ldx, packed, rows, y + m * ldy + nc, ldy, klen, acc, last);
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


DSPERF_AVX512 void transpose_pairs(const bf16_t* src, int64_t ld, int64_t n, int64_t pairs, bf16_t* dst) {
    // The packed GEMM's layout with the n rows as its columns: the same 16 x 16 word transposes.
    pack_bf16(src, ld, n, 2 * pairs, dst);
}

}  // namespace dsperf::kernels::avx512

#else  // not x86-64: the dispatcher never selects these

namespace dsperf::kernels::avx512 {
void linear_packed_rows(const bf16_t*, int64_t, const GemmWeights&, float*, int64_t, int64_t, int64_t, int64_t,
                        int64_t, bool) {}
void interleave_rows(const bf16_t*, const bf16_t*, int64_t, bf16_t*) {}
void transpose_pairs(const bf16_t*, int64_t, int64_t, int64_t, bf16_t*) {}
void gemm_bf16_vnni(const bf16_t*, int64_t, const bf16_t*, float*, int64_t, int64_t, int64_t, int64_t, bool, bool) {}
void widen_rows(const bf16_t*, int64_t, int64_t, int64_t, int64_t, float*) {}
}  // namespace dsperf::kernels::avx512

#endif
