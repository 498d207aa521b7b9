// The streaming decode GEMM (see gemm_avx512.hpp).
//
// A thread walks its slice of w two rows (a panel) at a time, and every row of x (up to 8 in one
// tile, DeepSeek-V3's decode batch per expert) meets each weight vector as soon as it arrives: w
// crosses the memory bus once. K is walked in blocks small enough that the block of x (M rows)
// stays in L1 while every panel of the slice passes it (stream_k_block); the accumulators of each
// (panel, tile) wait in L2 between blocks. Per 64-wide K step the tile turns one 64-byte load
// (FP8) or two (BF16) per weight row into two BF16 vectors, then loads each row of x's two vectors
// once (from L1, 64-byte aligned) for 2 x 2 VDPBF16PS: 2 x 8 accumulators, 4 weight vectors and the
// FP8 table fit the 32 registers, and loads stay at half the dot products (a 3-row panel with x as
// memory operands needed one load per dot product and ran ~25% slower on Zen 4). The rows two
// panels ahead are prefetched into L2 at the columns being read. For FP8 the 128-code table of the
// current 128 x 128 block (4 vectors) is reloaded every 128 columns from the slice's tables, built
// once per call; x was permuted once so that its order matches the order the byte lookups leave the
// weights in.
//
// On CPUs that issue FP32 FMAs at twice the VDPBF16PS rate (two FMA ports, one for the dot
// products; the same probe as the prefill kernels decides, linear.cpp), calls of 2 rows and more
// run on FMAs instead: each BF16 weight vector is widened into its even and odd halves (a shift and a mask),
// x was widened once per call into the matching FP32 halves, and each dot product becomes two FMAs.
// At 8 rows of x that is 64 FMAs against 32 dot products per step, at twice the rate, plus 8
// widenings shared by all rows.
#include "kernels/cpu/gemm_avx512.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include <unistd.h>

#include "kernels/cpu/bf16_widen_avx512.hpp"
#include "kernels/cpu/fp8_convert_avx512.hpp"

#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace dsperf::kernels::avx512 {

namespace {

constexpr int kMR = 8, kNR = 2;
// Measured on Zen 4 (BF16, N 4096 x K 7168 streamed, 2 threads): prefetching both lines of the
// panel two ahead, and nothing further along the current rows, read 27-31 GB/s at 1 row of x and
// 18.5-22 at 8 rows, against 22-26 and 14-16.5 with one line of the next panel and 4 KB ahead in
// the current rows (which, with K blocked, fetched columns the thread reads only a block later).
constexpr int kPrefetchPanels = 2;
constexpr int64_t kStep = 64;

DSPERF_AVX512 inline __mmask64 first_n64(int64_t n) {
    return n >= 64 ? __mmask64(~0ull) : static_cast<__mmask64>((1ull << n) - 1);
}

// The lanes of (first, second) that hold one of the first `valid` codes of a step, in the order
// fp8_convert64 leaves them.
inline void fp8_valid_lanes(int64_t valid, __mmask32& first, __mmask32& second) {
    uint32_t a = 0, b = 0;
    for (int64_t pos = 0; pos < 64; ++pos)
        if (fp8_lane_order(pos) < valid) (pos < 32 ? a : b) |= 1u << (pos % 32);
    first = a, second = b;
}

// Two BF16 vectors of weight row `src` at one 64-wide step; `valid` < 64 on the last step of a K
// that is not a multiple of 64 (lanes past K are zero, not the value of code 0).
template <bool FP8>
DSPERF_AVX512 __attribute__((always_inline)) inline void load_weights(const void* src, int64_t valid, __m512i tlo0,
                                                                      __m512i tlo1, __m512i thi0, __m512i thi1,
                                                                      __m512i& b0, __m512i& b1) {
    if constexpr (FP8) {
        const fp8_t* s8 = static_cast<const fp8_t*>(src);
        if (valid == kStep) {
            fp8_convert64(_mm512_loadu_si512(s8), tlo0, tlo1, thi0, thi1, b0, b1);
        } else {
            fp8_convert64(_mm512_maskz_loadu_epi8(first_n64(valid), s8), tlo0, tlo1, thi0, thi1, b0, b1);
            __mmask32 m0, m1;
            fp8_valid_lanes(valid, m0, m1);
            b0 = _mm512_maskz_mov_epi16(m0, b0), b1 = _mm512_maskz_mov_epi16(m1, b1);
        }
    } else {
        const bf16_t* s16 = static_cast<const bf16_t*>(src);
        if (valid == kStep) {
            b0 = _mm512_loadu_si512(s16), b1 = _mm512_loadu_si512(s16 + 32);
        } else {
            const __mmask64 m = first_n64(valid);
            b0 = _mm512_maskz_loadu_epi16(__mmask32(m), s16);
            b1 = _mm512_maskz_loadu_epi16(__mmask32(m >> 32), s16 + 32);
        }
    }
}

// One 64-wide step of stream_tile; `valid` is kStep except on the last step of a K that is not a
// multiple of 64. The FP8 table registers are reloaded at each 128-column block. xs is BF16, or
// with FMA the FP32 halves stream_x lays out (ldx and k count elements either way).
template <int MR, bool FP8, bool FMA>
DSPERF_AVX512 __attribute__((always_inline)) inline void stream_step(__m512 (&c)[MR][kNR], const void* xs,
                                                                     int64_t ldx, const char* const (&row)[kNR],
                                                                     const char* const (&next)[kNR],
                                                                     const Fp8ByteTable* tables, int64_t k,
                                                                     int64_t valid, __m512i& tlo0, __m512i& tlo1,
                                                                     __m512i& thi0, __m512i& thi1) {
    constexpr size_t elem = FP8 ? 1 : 2;
    if constexpr (FP8) {
        if (k % 128 == 0) {
            const Fp8ByteTable& t = tables[k / 128];
            tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
            thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
        }
    }
    __m512i b[kNR][2];
#pragma GCC unroll 2
    for (int j = 0; j < kNR; ++j) {
        load_weights<FP8>(row[j] + size_t(k) * elem, valid, tlo0, tlo1, thi0, thi1, b[j][0], b[j][1]);
        // The rows kPrefetchPanels panels ahead, at the same columns, into L2: every line of them
        // (a BF16 step spans two). What a thread reads next is that panel, not the next bytes of
        // this row, once K is blocked.
        _mm_prefetch(next[j] + size_t(k) * elem, _MM_HINT_T1);
        if constexpr (!FP8) _mm_prefetch(next[j] + size_t(k) * elem + 64, _MM_HINT_T1);
    }
    if constexpr (FMA) {
        // BF16 element 2l of a vector is the low half of its word l, element 2l + 1 the high half.
        // The halves' order is stream_x's.
        __m512 wf[kNR][4];
#pragma GCC unroll 2
        for (int j = 0; j < kNR; ++j)
#pragma GCC unroll 2
            for (int v = 0; v < 2; ++v) {
                wf[j][2 * v] = bf16_pair_first(b[j][v]);
                wf[j][2 * v + 1] = bf16_pair_second(b[j][v]);
            }
        const float* xf = static_cast<const float*>(xs);
        // Each x vector is loaded once and meets both weight rows: 32 loads per 64 FMAs at 8 rows.
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) {
                __m512 xv = _mm512_load_ps(xf + i * ldx + k + 16 * q);
                // One load for both weight rows: folded into each FMA as a memory operand, the
                // loads (2 per cycle) would match the FMAs one for one.
                __asm__("" : "+v"(xv));
#pragma GCC unroll 2
                for (int j = 0; j < kNR; ++j) c[i][j] = _mm512_fmadd_ps(xv, wf[j][q], c[i][j]);
            }
    } else {
        const bf16_t* xb = static_cast<const bf16_t*>(xs);
        // Each vector of x is loaded once and meets both weight rows: 16 loads per 32 VDPBF16PS.
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512i x0 = _mm512_load_si512(xb + i * ldx + k), x1 = _mm512_load_si512(xb + i * ldx + k + 32);
#pragma GCC unroll 2
            for (int j = 0; j < kNR; ++j) {
                c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)x0, (__m512bh)b[j][0]);
                c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)x1, (__m512bh)b[j][1]);
            }
        }
    }
}

// MR rows of xs (stride ldx) times the nr rows of w from `w` (stride ldw, in elements) over the
// columns [k0, k1) of K; FP8 with one Fp8ByteTable per 128 columns. Rows of w past nr repeat the
// last one (their sums are not stored). The accumulators start at zero (k0 = 0) or from `acc`, and
// go back to `acc` (k1 < K) or, summed, to y (k1 = K): a K-block at a time, so that the block of x
// stays in L1 while the slice's panels stream past it.
template <int MR, bool FP8, bool FMA>
DSPERF_AVX512 void stream_tile(const void* xs, int64_t ldx, const void* w, int64_t ldw, const Fp8ByteTable* tables,
                               int64_t k0, int64_t k1, int64_t K, float* acc, float* y, int64_t ldy, int nr,
                               bool accumulate) {
    const size_t elem = FP8 ? 1 : 2;
    const char* row[kNR] = {};
    for (int j = 0; j < kNR; ++j) row[j] = static_cast<const char*>(w) + size_t(std::min(j, nr - 1) * ldw) * elem;
    // Prefetches never fault: past the last panel these point at nothing in use.
    const char* next[kNR];
    for (int j = 0; j < kNR; ++j) next[j] = row[j] + size_t(kPrefetchPanels * kNR * ldw) * elem;
    __m512 c[MR][kNR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
        for (int j = 0; j < kNR; ++j) c[i][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * kNR + j) * 16);
    __m512i tlo0 = _mm512_setzero_si512(), tlo1 = tlo0, thi0 = tlo0, thi1 = tlo0;
    // k0 is a multiple of 128 (stream_k_block), so the first step loads its block's FP8 table.
    const int64_t full = std::min(k1, K / kStep * kStep);
    for (int64_t k = k0; k < full; k += kStep)
        stream_step<MR, FP8, FMA>(c, xs, ldx, row, next, tables, k, kStep, tlo0, tlo1, thi0, thi1);
    if (k1 == K && full < K)
        stream_step<MR, FP8, FMA>(c, xs, ldx, row, next, tables, full, K - full, tlo0, tlo1, thi0, thi1);
    if (k1 < K) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
            for (int j = 0; j < kNR; ++j) _mm512_storeu_ps(acc + (i * kNR + j) * 16, c[i][j]);
        return;
    }
    // Sums with constant indices (a loop to nr would keep the accumulators in memory throughout).
    float sums[MR][kNR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
        for (int j = 0; j < kNR; ++j) sums[i][j] = _mm512_reduce_add_ps(c[i][j]);
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < nr; ++j) y[i * ldy + j] = accumulate ? y[i * ldy + j] + sums[i][j] : sums[i][j];
}

using StreamFn = void (*)(const void*, int64_t, const void*, int64_t, const Fp8ByteTable*, int64_t, int64_t, int64_t,
                          float*, float*, int64_t, int, bool);
template <bool FP8, bool FMA, int... MR>
constexpr std::array<StreamFn, sizeof...(MR)> stream_tiles(std::integer_sequence<int, MR...>) {
    return {&stream_tile<MR + 1, FP8, FMA>...};
}
using Tiles = std::array<StreamFn, kMR>;
constexpr auto kRows = std::make_integer_sequence<int, kMR>{};
// [FP8][FMA]: the tile for each weight type and product instruction, by rows of x.
constexpr Tiles kTiles[2][2] = {{stream_tiles<false, false>(kRows), stream_tiles<false, true>(kRows)},
                                {stream_tiles<true, false>(kRows), stream_tiles<true, true>(kRows)}};

}  // namespace

// Whole 64-wide steps, and 32 elements more: with a stride that is a multiple of 4 KB (K = 7168 in
// FP32 is 7 x 4 KB) the 8 rows of a tile fall in the same L1 sets (measured: the FMA tile 2-3%
// faster with the pad, the dot-product tile unchanged).
static int64_t stream_x_cols(int64_t K) { return (K + kStep - 1) / kStep * kStep; }
int64_t stream_x_stride(int64_t K) { return stream_x_cols(K) + 32; }

// Which of a step's 64 columns each of its 64 slots in the copy takes, as 16-bit indices for
// VPERMT2W over the step's two vectors of x: by [fp8][fma]. The dot products' BF16 slot pos holds
// column pos, or fp8_lane_order(pos) for FP8 weights; the FMAs' FP32 slot 16 * half + lane holds
// the BF16 slot 32 * (half / 2) + 2 * lane + half % 2 (the (even, odd) halves of each vector).
struct alignas(64) StreamXOrder {
    uint16_t col[2][2][64];
    constexpr StreamXOrder() : col() {
        for (int fp8 = 0; fp8 < 2; ++fp8)
            for (int fma = 0; fma < 2; ++fma)
                for (int slot = 0; slot < 64; ++slot) {
                    const int pos = fma ? 32 * (slot / 32) + 2 * (slot % 16) + (slot / 16) % 2 : slot;
                    col[fp8][fma][slot] = uint16_t(fp8 ? fp8_lane_order(pos) : pos);
                }
    }
};
constexpr StreamXOrder kStreamXOrder{};

DSPERF_AVX512 void stream_x(const bf16_t* x, int64_t ldx, int64_t M, int64_t K, bool fp8, bool fma, void* xs) {
    const int64_t ld = stream_x_stride(K), cols = stream_x_cols(K);
    const uint16_t* order = kStreamXOrder.col[fp8][fma];
    const __m512i first = _mm512_load_si512(order), second = _mm512_load_si512(order + 32);
    for (int64_t m = 0; m < M; ++m) {
        const bf16_t* src = x + m * ldx;
        for (int64_t k = 0; k < cols; k += kStep) {
            // The step's columns, zero past K.
            const __mmask64 valid = first_n64(K - k);
            const __m512i a = _mm512_maskz_loadu_epi16(__mmask32(valid), src + k);
            const __m512i b = _mm512_maskz_loadu_epi16(__mmask32(valid >> 32), src + k + 32);
            const __m512i lo = _mm512_permutex2var_epi16(a, first, b), hi = _mm512_permutex2var_epi16(a, second, b);
            if (!fma) {
                bf16_t* dst = static_cast<bf16_t*>(xs) + m * ld + k;
                _mm512_store_si512(dst, lo), _mm512_store_si512(dst + 32, hi);
                continue;
            }
            float* dst = static_cast<float*>(xs) + m * ld + k;
            _mm512_store_ps(dst, bf16x16_to_f32(_mm512_castsi512_si256(lo)));
            _mm512_store_ps(dst + 16, bf16x16_to_f32(_mm512_extracti64x4_epi64(lo, 1)));
            _mm512_store_ps(dst + 32, bf16x16_to_f32(_mm512_castsi512_si256(hi)));
            _mm512_store_ps(dst + 48, bf16x16_to_f32(_mm512_extracti64x4_epi64(hi, 1)));
        }
    }
}

// Columns of K per block: the block of x (one tile, up to kMR rows, as the products read it: BF16
// for the dot products, the FP32 halves for the FMAs) fills two thirds of the L1 data cache, so it
// stays there while every panel of the slice passes, with room for the weight lines in flight (a
// whole row of x for 8 rows is 114 KB at K = 7168: read from L2 once per 2-row panel, it held the
// kernel at about half the dot-product rate even with w in cache). Multiples of 128 (the FP8
// scale blocks). Measured with a 48 KB L1: on an Emerald Rapids core (8 rows, w in L2) the FMAs'
// FP32 block of 32 KB ran 132 GFLOPS against 119 at 16 KB and 101 at 64 KB; on Zen 5 (2 threads,
// 8 x 8192 x 7168 streamed, four alternating runs each) the dot products' BF16 block of 32 KB
// streamed FP8 weights at 30.8-31.3 GB/s against 24.4-26.2 at 16 KB (each panel's rows then run
// 2 KB before the next panel, long enough for the hardware prefetchers), BF16 weights unchanged
// (35.9-42.4 against 40.7-42.9); a 40 KB block was slower on both.
static int64_t x_block_bytes() {
    static const int64_t bytes = [] {
        long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
        if (l1 < (16 << 10) || l1 > (1 << 20)) l1 = 32 << 10;  // not reported: the smallest L1 of the CPUs measured
        return int64_t(l1) * 2 / 3;
    }();
    return bytes;
}

static int64_t stream_k_block(int64_t M, int64_t K, size_t x_elem) {
    const int64_t rows = std::min<int64_t>(std::max<int64_t>(M, 1), kMR);
    const int64_t cols = std::max<int64_t>(128, x_block_bytes() / (int64_t(x_elem) * rows) / 128 * 128);
    return cols >= K ? K : cols;
}

void linear_stream_rows(const void* xs, bool fma, const GemmWeights& w, float* y, int64_t ldy, int64_t M, int64_t n0,
                        int64_t n1, int64_t K, bool accumulate) {
    const int64_t ldx = stream_x_stride(K), k_blocks = (K + 127) / 128;
    const size_t x_elem = fma ? sizeof(float) : sizeof(bf16_t);
    const int64_t kb = stream_k_block(M, K, x_elem);
    const int64_t panels = (n1 - n0 + kNR - 1) / kNR;
    thread_local std::vector<Fp8ByteTable> tables;
    // The accumulators of every panel between K-blocks: 1 KB each, in L2.
    thread_local std::vector<float> acc;
    const size_t acc_floats = size_t(panels * kMR * kNR * 16);
    if (kb < K && acc.size() < acc_floats) acc.resize(acc_floats);
    // The 128-row block and the K-block whose tables are built: only the current K-block's (the
    // tile reads no others before the next K-block), so that a slice crossing row blocks rebuilds
    // 8 tables per switch at K = 7168, not all 56 (12% of an in-cache FP8 call on Zen 5).
    int64_t table_row = -1, table_k0 = -1;
    // A tile of x at a time over the whole slice: with more than kMR rows the slice's weights
    // (1.8 MB of BF16 at K = 7168) are read again per tile, from L2/L3, rather than cutting K into
    // blocks so short that each call's set-up outweighs its dot products.
    for (int64_t m = 0; m < M; m += kMR) {
        const int mr = int(std::min<int64_t>(kMR, M - m));
        const StreamFn tile = kTiles[w.fp8 != nullptr][fma][size_t(mr - 1)];
        for (int64_t k0 = 0; k0 < K; k0 += kb) {
            const int64_t k1 = std::min(K, k0 + kb);
            for (int64_t n = n0; n < n1; n += kNR) {
                const int nr = int(std::min<int64_t>(kNR, n1 - n));
                const void* wp = nullptr;
                if (w.fp8) {
                    // Slices start on 128-row boundaries: panels stay in one block.
                    if (n / 128 != table_row || k0 != table_k0) {
                        table_row = n / 128, table_k0 = k0;
                        if (tables.size() < size_t(k_blocks)) tables.resize(size_t(k_blocks));
                        for (int64_t b = k0 / 128; b < (k1 + 127) / 128; ++b)
                            tables[size_t(b)].build(w.scale[table_row * k_blocks + b]);
                    }
                    wp = w.fp8 + n * K;
                } else {
                    wp = w.bf16 + n * w.ld;
                }
                float* a = kb < K ? acc.data() + (n - n0) / kNR * kMR * kNR * 16 : nullptr;
                tile(static_cast<const char*>(xs) + size_t(m * ldx) * x_elem, ldx, wp, w.fp8 ? K : w.ld,
                     tables.data(), k0, k1, K, a, y + m * ldy + n, ldy, nr, accumulate);
            }
        }
    }
}

}  // namespace dsperf::kernels::avx512

#else  // not x86-64: the dispatcher never selects these

namespace dsperf::kernels::avx512 {
int64_t stream_x_stride(int64_t K) { return K; }
void stream_x(const bf16_t*, int64_t, int64_t, int64_t, bool, bool, void*) {}
void linear_stream_rows(const void*, bool, const GemmWeights&, float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                        bool) {}
}  // namespace dsperf::kernels::avx512

#endif
