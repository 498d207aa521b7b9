#include "kernels/cpu/amx_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/common/parallel.hpp"
#include "kernels/cpu/amx_tiles.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/fp8_convert_avx512.hpp"
#if DSPERF_HAVE_AMX_BUILD
#include "kernels/cpu/transpose_avx512.hpp"
#else
#define DSPERF_AMX
#endif

namespace dsperf::kernels::amx {

namespace {

// Rows of x per pass, columns of y per block, K tiles per chunk (measured on Emerald Rapids, weights
// streamed: docs/KERNELS_MEASUREMENTS.md).
constexpr int64_t kBlockRows = 256, kBlockCols = 256, kChunkTiles = 8;
// At most this many rows of x: the few-rows mode (see gemm).
constexpr int64_t kFewRows = 128;
// The fused FP8 decode's conversion buffer (fp8_fused_tile): two groups of two K tiles.
constexpr int64_t kFusedBufferTiles = 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};
template <class T>
std::unique_ptr<T[], FreeDeleter> aligned_array(int64_t n) {
    const size_t bytes = (size_t(std::max<int64_t>(n, 1)) * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(p));
}

// Buffers kept by each thread across calls: fresh pages for them fault on every call (measured: half
// the time of a 256 x 256 x 7168 GEMM). Each grows to the largest size asked of it.
enum class Scratch { kX, kSums, kWeights, kCount };

template <class T>
T* scratch(Scratch which, int64_t n) {
    struct Buffer {
        std::unique_ptr<char[], FreeDeleter> data;
        size_t bytes = 0;
    };
    thread_local Buffer buffers[int(Scratch::kCount)];
    Buffer& buf = buffers[int(which)];
    const size_t need = size_t(std::max<int64_t>(n, 1)) * sizeof(T);
    if (need > buf.bytes) {
        buf.data = aligned_array<char>(int64_t(need));
        buf.bytes = need;
    }
    return reinterpret_cast<T*>(buf.data.get());
}

// ---- packing ----------------------------------------------------------------------------------------
// Row tiles: 16 rows x 32 K values, row-major (the A operand). Pair tiles: 16 K pairs x 16 rows x 2
// (the B operand): element (pair q, row j, half h) = row j's K value 2 q + h. Zeros past the rows
// and past K. Every function packs tiles [t0, t0 + nt) x K tiles [kt0, kt0 + nkt) into
// out[nt][nkt][kTileElems].

// A row-major matrix: BF16, or FP8 e4m3 codes with 128 x 128 block scales (dequantised to
// bf16(code x scale)).
struct Rows {
    const void* p = nullptr;
    int64_t ld = 0, R = 0, K = 0;
    const float* scale = nullptr;  // FP8 when set

    bf16_t at(int64_t r, int64_t k) const {
        if (r >= R || k >= K) return bf16_t(0);
        if (!scale) return static_cast<const bf16_t*>(p)[r * ld + k];
        return f32_to_bf16(fp8_to_f32(static_cast<const fp8_t*>(p)[r * ld + k]) * block_scale(r, k));
    }
    float block_scale(int64_t r, int64_t k) const { return scale[(r / kFp8Block) * fp8_scale_blocks(K) + k / kFp8Block]; }
    Rows shifted(int64_t rows) const {
        Rows s = *this;
        s.p = static_cast<const char*>(p) + rows * ld * (scale ? 1 : 2);
        s.R = std::max<int64_t>(R - rows, 0);
        return s;
    }
};

Rows rows_of(const WeightSource& s) {
    Rows r;
    r.p = s.w, r.ld = s.ld, r.R = s.N, r.K = s.K;
    if (s.layout == WeightSource::Layout::kFp8Rows) r.scale = s.scale;
    return r;
}

// Position p of a K tile's 32 values holds K value k0 + p, or, in lane order, the K value the FP8
// converter puts there (fp8_lane_order: within each group of two K tiles, 64 K values).
int64_t k_of(int64_t k_tile, int64_t p, bool lane_order) {
    if (!lane_order) return 32 * k_tile + p;
    return 64 * (k_tile / 2) + avx512::fp8_lane_order(32 * (k_tile % 2) + p);
}

// Element i of a tile, at (i / 32, i % 32): a row tile's row and K position; a pair tile's pair q
// and (row j, half h) as j * 2 + h.
void tiles_scalar(const Rows& s, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt, bool pairs, bool lane_order,
                  bf16_t* out) {
    for (int64_t t = 0; t < nt; ++t)
        for (int64_t kt = 0; kt < nkt; ++kt) {
            bf16_t* tile = out + (t * nkt + kt) * kTileElems;
            const int64_t r0 = 16 * (t0 + t);
            for (int64_t i = 0; i < kTileElems; ++i) {
                const int64_t hi = i / 32, lo = i % 32;
                tile[i] = pairs ? s.at(r0 + lo / 2, k_of(kt0 + kt, 2 * hi + lo % 2, lane_order))
                                : s.at(r0 + hi, k_of(kt0 + kt, lo, lane_order));
            }
        }
}

#if DSPERF_HAVE_AMX_BUILD
__mmask32 k_mask(int64_t k0, int64_t K) {
    const int64_t kn = std::clamp<int64_t>(K - k0, 0, 32);
    return kn >= 32 ? ~__mmask32(0) : (__mmask32(1) << kn) - 1;
}

// Row tiles of FP8 codes (weights are the A operand, never pair tiles): each row's codes 64 at a time
// (two K tiles) through their 128 x 128 block's byte table (fp8_convert64, in its lane order), built in
// registers once for the block's 4 K tiles beside each other, each row's codes prefetched
// kFp8Prefetch bytes ahead. Measured on 8 x 4,096 x 7,168 in cache, with the chunking in gemm: a
// word table built in memory for every tile 12 G codes/s, this 25. Streamed (decode, 8 experts x 8
// tokens): prefetching 256 bytes ahead 20.4 against 21.0-23.4 ms without; 512 and 1,024 slower.
// kt0 is even (the callers start at 0 or a multiple of kChunkTiles), so a group of 64 codes never
// straddles two scale blocks.
constexpr int64_t kFp8Prefetch = 256;
// One group of 64 codes (K tiles kt and kt + 1 from K value k0) of a row tile's 16 rows at base, as
// two row tiles d0 and d1 (d1 null: the second K tile is not wanted). Past the end of its row,
// each row's prefetch reads on in the row the thread takes next: the same row next_rows further.
DSPERF_AVX512_VBMI inline void fp8_group(const Rows& s, const fp8_t* base, int64_t r0, int64_t k0, int64_t next_rows,
                                         const avx512::Fp8ByteRegs& table, bf16_t* d0, bf16_t* d1) {
    const int64_t rows = std::clamp<int64_t>(s.R - r0, 0, kRows);
    const int64_t kn = std::min<int64_t>(64, s.K - k0);
    const __mmask64 km = kn >= 64 ? ~__mmask64(0) : (__mmask64(1) << std::max<int64_t>(kn, 0)) - 1;
    const int64_t ahead = k0 + kFp8Prefetch, ahead_rows = ahead < s.K ? 0 : next_rows;
    const int64_t ahead_at = ahead < s.K ? ahead : ahead - s.K;
    for (int64_t j = 0; j < kRows; ++j) {
        if (j < rows && r0 + j + ahead_rows < s.R)
            _mm_prefetch(reinterpret_cast<const char*>(base + (j + ahead_rows) * s.ld + ahead_at), _MM_HINT_T0);
        __m512i first = _mm512_setzero_si512(), second = _mm512_setzero_si512();
        if (j < rows) avx512::fp8_convert64(_mm512_maskz_loadu_epi8(km, base + j * s.ld + k0), table.lo0, table.lo1,
                                            table.hi0, table.hi1, first, second);
        _mm512_store_si512(d0 + j * 32, first);
        if (d1) _mm512_store_si512(d1 + j * 32, second);
    }
}

// The byte table of row tile r0's 128 x 128 block at K value k0.
DSPERF_AVX512_VBMI inline avx512::Fp8ByteRegs fp8_block_table(const Rows& s, int64_t r0, int64_t k0) {
    return avx512::Fp8ByteRegs(avx512::Fp8WordTable(r0 < s.R ? s.block_scale(r0, k0) : 1.0f));
}

DSPERF_AVX512_VBMI void fp8_row_tiles(const Rows& s, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt, bf16_t* out) {
    for (int64_t t = 0; t < nt; ++t) {
        const int64_t r0 = 16 * (t0 + t);
        const auto* base = static_cast<const fp8_t*>(s.p) + r0 * s.ld;
        bf16_t* tiles = out + t * nkt * kTileElems;
        avx512::Fp8ByteRegs table{avx512::Fp8WordTable(1.0f)};
        for (int64_t kt = 0; kt < nkt; kt += 2) {
            const int64_t k0 = 32 * (kt0 + kt);
            if (kt == 0 || k0 % kFp8Block == 0) table = fp8_block_table(s, r0, k0);
            bf16_t* d0 = tiles + kt * kTileElems;
            fp8_group(s, base, r0, k0, 16 * nt, table, d0, kt + 1 < nkt ? d0 + kTileElems : nullptr);
        }
    }
}

// FP8 decode: few rows of x (one or two tiles, x0 and x1) against one tile of 16 weight rows from r0,
// over all of K with the sums in tiles 0 and 1 (the thread's next tile next_rows further on). Each
// group of two K tiles is converted into buf (kFusedBufferTiles: two groups' room, used in turn)
// while the group before it, its stores long drained, is multiplied: the products overlap the next
// conversion instead of waiting for it.
template <class Ops>
DSPERF_AMX inline void fp8_multiply_group(Ops& ops, const bf16_t* a, const bf16_t* x0, const bf16_t* x1, int64_t kt) {
    for (int64_t u = 0; u < 2; ++u) {
        ops.template load<4>(a + u * kTileElems, 64);
        ops.template load<6>(x0 + (kt + u) * kTileElems, 64);
        ops.template dp<0, 4, 6>();
        if (x1) {
            ops.template load<7>(x1 + (kt + u) * kTileElems, 64);
            ops.template dp<1, 4, 7>();
        }
    }
}

template <class Ops>
DSPERF_AVX512_VBMI void fp8_fused_tile(Ops& ops, const Rows& w, int64_t r0, const bf16_t* x0, const bf16_t* x1,
                                       int64_t k_tiles, int64_t next_rows, bf16_t* buf, float* c) {
    const auto* base = static_cast<const fp8_t*>(w.p) + r0 * w.ld;
    ops.template zero<0>(), ops.template zero<1>();
    avx512::Fp8ByteRegs table{avx512::Fp8WordTable(1.0f)};
    // The half of buf that holds the group starting at K tile kt (groups alternate halves).
    const auto group_tiles = [buf](int64_t kt) { return buf + (kt / 2 % 2) * (kFusedBufferTiles / 2) * kTileElems; };
    for (int64_t kt = 0; kt < k_tiles; kt += 2) {  // k_tiles is even in lane order
        const int64_t k0 = 32 * kt;
        if (k0 % kFp8Block == 0) table = fp8_block_table(w, r0, k0);
        bf16_t* d = group_tiles(kt);
        fp8_group(w, base, r0, k0, next_rows, table, d, d + kTileElems);
        if (kt >= 2) fp8_multiply_group(ops, group_tiles(kt - 2), x0, x1, kt - 2);
    }
    fp8_multiply_group(ops, group_tiles(k_tiles - 2), x0, x1, k_tiles - 2);
    ops.template store<0>(c, 64);
    if (x1) ops.template store<1>(c + kTileFloats, 64);
}

// Pair tiles of BF16 rows in lane order (k_of), two K tiles at a time: each row's 64 K values put in
// that order (to_fp8_lane_order), then transposed as below. kt0 is even (a group's first K tile).
DSPERF_AVX512_VBMI void pair_tiles_lane_order(const Rows& s, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt,
                                              bf16_t* out) {
    for (int64_t t = 0; t < nt; ++t) {
        const int64_t r0 = 16 * (t0 + t);
        for (int64_t kt = 0; kt < nkt; kt += 2) {
            const int64_t k0 = 32 * (kt0 + kt);
            const __mmask32 km0 = k_mask(k0, s.K), km1 = k_mask(k0 + 32, s.K);
            __m512i first[16], second[16];
            for (int64_t j = 0; j < kRows; ++j) {
                const auto* row = static_cast<const bf16_t*>(s.p) + (r0 + j) * s.ld + k0;
                const bool in = r0 + j < s.R;
                avx512::to_fp8_lane_order(in ? _mm512_maskz_loadu_epi16(km0, row) : _mm512_setzero_si512(),
                                          in ? _mm512_maskz_loadu_epi16(km1, row + 32) : _mm512_setzero_si512(),
                                          first[j], second[j]);
            }
            bf16_t* tile = out + (t * nkt + kt) * kTileElems;
            avx512::transpose16x16(first);
            for (int64_t q = 0; q < 16; ++q) _mm512_store_si512(tile + q * 32, first[q]);
            if (kt + 1 == nkt) continue;  // the group's second K tile lies outside this call's range
            avx512::transpose16x16(second);
            for (int64_t q = 0; q < 16; ++q) _mm512_store_si512(tile + kTileElems + q * 32, second[q]);
        }
    }
}

// Tiles [t0, t0 + nt) x [kt0, kt0 + nkt) of s. Row tiles are copies of 64-byte row segments (FP8
// codes: fp8_row_tiles, in lane order). Pair tiles take BF16 rows: each row's 32 K values are 16
// pairs, one 32-bit word each, and a 16 x 16 word transpose turns 16 rows into the tile's 16 pair
// rows (`lane_order`: pair_tiles_lane_order).
DSPERF_AVX512_VBMI void tiles_simd(const Rows& s, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt, bool pairs,
                                   bool lane_order, bf16_t* out) {
    if (s.scale) return fp8_row_tiles(s, t0, nt, kt0, nkt, out);  // FP8 rows are weights: never pairs
    if (pairs && lane_order) return pair_tiles_lane_order(s, t0, nt, kt0, nkt, out);
    for (int64_t t = 0; t < nt; ++t) {
        const int64_t r0 = 16 * (t0 + t);
        for (int64_t kt = 0; kt < nkt; ++kt) {
            const int64_t k0 = 32 * (kt0 + kt);
            const __mmask32 km = k_mask(k0, s.K);
            bf16_t* tile = out + (t * nkt + kt) * kTileElems;
            __m512i r[16];
            for (int64_t j = 0; j < kRows; ++j) {
                const auto* row = static_cast<const bf16_t*>(s.p) + (r0 + j) * s.ld + k0;
                r[j] = r0 + j < s.R ? _mm512_maskz_loadu_epi16(km, row) : _mm512_setzero_si512();
            }
            if (pairs) avx512::transpose16x16(r);
            for (int64_t q = 0; q < 16; ++q) _mm512_store_si512(tile + q * 32, r[q]);
        }
    }
}
#endif

// Tiles of row-major s: row tiles (the A operand) or, `pairs`, pair tiles (the B operand). `simd`:
// the AVX-512 kernels are in use (use_avx512(), read once per GEMM by the caller). FP8 rows come
// out in lane order with simd (the converter's order), else in natural order: in_lane_order says
// which, and `lane_order` asks for pair tiles in that order (an operand of such weights).
void pack_rows(const Rows& s, bool pairs, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt, bf16_t* out, bool simd,
               bool lane_order = false) {
#if DSPERF_HAVE_AMX_BUILD
    if (simd) return tiles_simd(s, t0, nt, kt0, nkt, pairs, lane_order, out);
#endif
    (void)simd;
    tiles_scalar(s, t0, nt, kt0, nkt, pairs, lane_order, out);
}

// Whether the row tiles of these weights, packed with `simd`, are in lane order: FP8 rows through
// the SIMD converter (fp8_row_tiles). The one place that decides it, for packing ahead and per call.
bool in_lane_order(const WeightSource& s, bool simd) {
    return DSPERF_HAVE_AMX_BUILD && simd && s.layout == WeightSource::Layout::kFp8Rows;
}

// K tiles of an operand: in lane order whole groups of two (a group's values spread over both).
int64_t k_tiles_of(int64_t K, bool lane_order) {
    const int64_t tiles = ceil_div(std::max<int64_t>(K, 1), kDepth);
    return lane_order ? ceil_div(tiles, 2) * 2 : tiles;
}

// Pair tiles from the VNNI layout, which already holds K pairs side by side: a tile row is 16
// consecutive columns of one pair row.
void pack_vnni_tiles(const WeightSource& s, int64_t t0, int64_t nt, int64_t kt0, int64_t nkt, bf16_t* out) {
    const bf16_t* bp = static_cast<const bf16_t*>(s.w);
    for (int64_t t = 0; t < nt; ++t) {
        const int64_t n0 = 16 * (t0 + t), cols = std::clamp<int64_t>(s.N - n0, 0, 16);
        for (int64_t kt = 0; kt < nkt; ++kt) {
            bf16_t* tile = out + (t * nkt + kt) * kTileElems;
            for (int64_t q = 0; q < 16; ++q) {
                const int64_t pair = 16 * (kt0 + kt) + q;
                bf16_t* row = tile + q * 32;
                if (2 * pair + 1 < s.K && cols == 16) {
                    std::memcpy(row, bp + (pair * s.N + n0) * 2, 64);
                    continue;
                }
                for (int64_t i = 0; i < 32; ++i) {
                    const int64_t n = n0 + i / 2, k = 2 * pair + i % 2;
                    row[i] = n < s.N && k < s.K ? bp[pair * s.N * 2 + n * 2 + i % 2] : bf16_t(0);
                }
            }
        }
    }
}

// ---- the tile loop ------------------------------------------------------------------------------------

constexpr int64_t kTileBytes = kTileElems * int64_t(sizeof(bf16_t));

// Prefetches slice `part` of `parts` equal slices of [p, p + bytes), a cache line at a time: spread
// over the tile blocks that run before the data is read, so that no block issues them all at once.
// Locality as __builtin_prefetch's: 3 into L1 (x86 PREFETCHT0), 2 into L2 (PREFETCHT1).
enum PrefetchInto { kL2 = 2, kL1 = 3 };
template <PrefetchInto Level>
inline void prefetch_slice(const void* p, int64_t bytes, int64_t part, int64_t parts) {
    const int64_t per = ceil_div(ceil_div(bytes, 64), parts) * 64;
    const char* c = static_cast<const char*>(p);
    for (int64_t o = part * per; o < std::min(bytes, (part + 1) * per); o += 64) __builtin_prefetch(c + o, 0, Level);
}

// Two A tiles x two B tiles over nkt K tiles: c holds the four 16 x 16 FP32 tiles (a0 b0, a0 b1,
// a1 b0, a1 b1), zeroed first or carried over from the previous K chunk. A's K tiles lie a_step
// elements apart and its rows a_stride bytes apart (packed tiles: 512 and 64). a1 or b1 null: one
// tile of that operand (x's last 16 rows when it has an odd number of row tiles; a block of 16
// weight rows), and only the products of the tiles given; the other sums in c are left as they are.
template <bool TwoA, bool TwoB, class Ops>
DSPERF_AMX inline void tile_loop(Ops& ops, const bf16_t* a0, const bf16_t* a1, const bf16_t* b0, const bf16_t* b1,
                                 int64_t nkt, int64_t a_step, int64_t a_stride) {
    for (int64_t t = 0; t < nkt; ++t) {
        ops.template load<4>(a0 + t * a_step, a_stride);
        ops.template load<6>(b0 + t * kTileElems, 64);
        ops.template dp<0, 4, 6>();
        if constexpr (TwoB) {
            ops.template load<7>(b1 + t * kTileElems, 64);
            ops.template dp<1, 4, 7>();
        }
        if constexpr (TwoA) {
            ops.template load<5>(a1 + t * a_step, a_stride);
            ops.template dp<2, 5, 6>();
            if constexpr (TwoB) ops.template dp<3, 5, 7>();
        }
    }
}

template <class Ops>
DSPERF_AMX inline void tile_block(Ops& ops, const bf16_t* a0, const bf16_t* a1, const bf16_t* b0, const bf16_t* b1,
                                  int64_t nkt, float* c, bool first, int64_t a_step = kTileElems, int64_t a_stride = 64) {
    if (first) {
        ops.template zero<0>(), ops.template zero<1>(), ops.template zero<2>(), ops.template zero<3>();
    } else {
        ops.template load<0>(c, 64);
        if (b1) ops.template load<1>(c + kTileFloats, 64);
        if (a1) ops.template load<2>(c + 2 * kTileFloats, 64);
        if (a1 && b1) ops.template load<3>(c + 3 * kTileFloats, 64);
    }
    if (a1 && b1) tile_loop<true, true>(ops, a0, a1, b0, b1, nkt, a_step, a_stride);
    else if (a1) tile_loop<true, false>(ops, a0, a1, b0, b1, nkt, a_step, a_stride);
    else if (b1) tile_loop<false, true>(ops, a0, a1, b0, b1, nkt, a_step, a_stride);
    else tile_loop<false, false>(ops, a0, a1, b0, b1, nkt, a_step, a_stride);
    ops.template store<0>(c, 64);
    if (b1) ops.template store<1>(c + kTileFloats, 64);
    if (a1) ops.template store<2>(c + 2 * kTileFloats, 64);
    if (a1 && b1) ops.template store<3>(c + 3 * kTileFloats, 64);
}

// One 16 x 16 sum tile into y at (m0, n0), rows < M and columns < N. `transposed`: the tile holds
// y^T (rows are columns of y).
void write_tile_scalar(const float* tile, bool transposed, int64_t m0, int64_t n0, int64_t M, int64_t N, float* y,
                       int64_t ldy, bool accumulate) {
    const int64_t rows = std::min<int64_t>(16, M - m0), cols = std::min<int64_t>(16, N - n0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
            const float v = transposed ? tile[j * 16 + r] : tile[r * 16 + j];
            float& dst = y[(m0 + r) * ldy + n0 + j];
            dst = accumulate ? dst + v : v;
        }
}

#if DSPERF_HAVE_AMX_BUILD
DSPERF_AVX512_VBMI void write_tile_simd(const float* tile, bool transposed, int64_t m0, int64_t n0, int64_t M,
                                        int64_t N, float* y, int64_t ldy, bool accumulate) {
    __m512i r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(tile + 16 * i);
    if (transposed) avx512::transpose16x16(r);
    const int64_t rows = std::min<int64_t>(16, M - m0), cols = std::min<int64_t>(16, N - n0);
    const __mmask16 cm = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
    for (int64_t i = 0; i < rows; ++i) {
        float* dst = y + (m0 + i) * ldy + n0;
        __m512 v = _mm512_castsi512_ps(r[i]);
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(cm, dst));
        _mm512_mask_storeu_ps(dst, cm, v);
    }
}
#endif

void write_tile(const float* tile, bool transposed, int64_t m0, int64_t n0, int64_t M, int64_t N, float* y,
                int64_t ldy, bool accumulate, bool simd) {
    if (m0 >= M || n0 >= N) return;
#if DSPERF_HAVE_AMX_BUILD
    if (simd) return write_tile_simd(tile, transposed, m0, n0, M, N, y, ldy, accumulate);
#endif
    (void)simd;
    write_tile_scalar(tile, transposed, m0, n0, M, N, y, ldy, accumulate);
}

}  // namespace

const bf16_t* PackedTiles::row_tile(int64_t t) const { return tiles.get() + t * k_tiles * kTileElems; }

size_t PackedTiles::bytes() const { return size_t(row_tiles * k_tiles * kTileElems) * sizeof(bf16_t); }

PackedTiles pack_tiles(const WeightSource& src) {
    PackedTiles out;
    out.N = src.N, out.K = src.K;
    const bool simd = use_avx512();
    out.lane_order = in_lane_order(src, simd);
    out.row_tiles = 2 * ceil_div(src.N, 32), out.k_tiles = k_tiles_of(src.K, out.lane_order);
    auto buf = aligned_array<bf16_t>(out.row_tiles * out.k_tiles * kTileElems);
    out.tiles = std::unique_ptr<bf16_t[], void (*)(void*)>(buf.release(), std::free);
    const Rows rows = rows_of(src);
    const int64_t kt = out.k_tiles;
#pragma omp parallel for schedule(static) if (worth_threads(out.row_tiles * kt * kTileElems))
    for (int64_t t = 0; t < out.row_tiles; ++t)
        pack_rows(rows, /*pairs=*/false, t, 1, 0, kt, out.tiles.get() + t * kt * kTileElems, simd);
    return out;
}

template <class Ops>
void gemm(const bf16_t* x, int64_t ldx, int64_t M, const WeightSource* src, const PackedTiles* packed, float* y,
          int64_t ldy, bool accumulate, bool threads) {
    const int64_t N = packed ? packed->N : src->N, K = packed ? packed->K : src->K;
    if (M <= 0 || N <= 0) return;
    // Weights in the K-pair layout are the B operand (y = x B); row-major weights the A operand
    // (y^T = w x^T), x then in the K-pair layout.
    const bool w_is_b = src && src->layout == WeightSource::Layout::kVnni, simd = use_avx512();
    // FP8 weights converted in the converter's lane order: x's tiles take the same K order.
    const bool lane_order =
        packed ? packed->lane_order : in_lane_order(*src, simd);
    const int64_t k_tiles = k_tiles_of(K, lane_order);
    // x's rows in whole tiles: pairs of them where x is the A operand, else single ones (a last odd
    // B tile runs half the products: 8 rows no longer pay for 32).
    const int64_t Mp = w_is_b ? ceil_div(M, 2 * kRows) * 2 * kRows : ceil_div(M, kRows) * kRows;
    // Few rows of x: the weights' bytes, not the tiles, bound the time. Each thread then takes 32
    // weight rows at a time whole (read as 32 sequential streams, not 256 interleaved ones) and keeps
    // the sums in tiles over all of K (measured at 16 x 4096 x 7168, weights streamed: 12 -> 25 GB/s).
    const bool few_rows = Mp <= kFewRows;
    // Column blocks of at most kBlockCols, at least one per thread where N allows. Few rows against
    // FP8 codes converted here: 16 weight rows at a time, half the rows read side by side (decode,
    // 8 x 8 tokens, codes streamed: 16 rows against 32, 22.9 against 20.0 GB/s of codes at K =
    // 2,048, 26.6 against 25.9 at K = 7,168, in a stand-alone loop of the same conversion).
    const bool fp8_rows = src && !packed && !w_is_b && src->layout == WeightSource::Layout::kFp8Rows;
    // At most two tiles of x (decode) with SIMD conversion: each block's conversion and products fused
    // (fp8_fused_tile; 8 experts x 8 tokens, codes streamed: 21.2 -> 24.9 GB/s of codes).
    const bool fused_fp8 = fp8_rows && simd && DSPERF_HAVE_AMX_BUILD && Mp <= 2 * kRows;
    (void)fused_fp8;  // read only where the AMX build is
    const int64_t block_cols = few_rows ? (fp8_rows ? kRows : 2 * kRows)
                                        : std::min(kBlockCols, ceil_div(ceil_div(N, int64_t(max_threads())), 32) * 32);
    const int64_t n_blocks = ceil_div(N, block_cols), x_rows = std::min(Mp, kBlockRows);
    bf16_t* xt = scratch<bf16_t>(Scratch::kX, x_rows / kRows * k_tiles * kTileElems);
    Rows x_rows_all;
    x_rows_all.p = x, x_rows_all.ld = ldx, x_rows_all.R = M, x_rows_all.K = K;
    Rows w_rows;
    if (src && !w_is_b) w_rows = rows_of(*src);
    // Few rows, BF16 rows in whole tiles: each weight tile is used by one or two row pairs of x only,
    // so the tile loads read the caller's rows in place rather than a copy of them (measured at 8 and
    // 16 x 4,096 x 7,168, weights streamed: 24 -> 28.7 GB/s; at 64 rows no change). With more rows
    // the copy pays: the blocked mode reuses each tile from L1 (direct loads there: 1.45 against 2.13
    // TFLOPS).
    const bool direct = few_rows && src && src->layout == WeightSource::Layout::kRows && N % 32 == 0 &&
                        K % kDepth == 0;
    // Tiles read in place or prepacked run over all of K with the sums held in tiles; tiles copied
    // first (FP8 codes converted, rows not in whole tiles) go kChunkTiles at a time, so that the tile
    // loads find a chunk's copies still in L1 (8 x 4,096 x 7,168 FP8 in cache: all of K at once 19.8,
    // chunks of 8 tiles 24.7-26.3 G codes/s).
    const int64_t chunk = few_rows && (direct || packed) ? k_tiles : std::min(kChunkTiles, k_tiles);
#pragma omp parallel if (threads && n_blocks > 1)
    {
        // Four sum tiles per pair of x tiles and pair of weight tiles (a block of 16 weight rows too).
        float* c = scratch<float>(Scratch::kSums, ceil_div(x_rows, 2 * kRows) * ceil_div(block_cols, 32) * 4 * kTileFloats);
        const int64_t wt_tiles = std::max(block_cols / 16 * chunk, kFusedBufferTiles);
        bf16_t* wt_buf = packed ? nullptr : scratch<bf16_t>(Scratch::kWeights, wt_tiles * kTileElems);
        Ops ops;
        ops.config();
        for (int64_t m0 = 0; m0 < Mp; m0 += kBlockRows) {
            const int64_t x_tiles = std::min(kBlockRows, Mp - m0) / kRows, x_pairs = ceil_div(x_tiles, 2);
            const Rows xs = x_rows_all.shifted(m0);
            // x's tiles for these rows, all of K, shared out among the threads (the loop ends in a barrier).
#pragma omp for schedule(static)
            for (int64_t t = 0; t < x_tiles; ++t) {
                bf16_t* dst = xt + t * k_tiles * kTileElems;
                pack_rows(xs, /*pairs=*/!w_is_b, t, 1, 0, k_tiles, dst, simd, lane_order);
            }
#pragma omp for schedule(static)
            for (int64_t nb = 0; nb < n_blocks; ++nb) {
                // The block's weight tiles (rows of 16: the last may be a single one), in pairs.
                const int64_t n0 = nb * block_cols, w_tiles = ceil_div(std::min(block_cols, N - n0), kRows);
                const int64_t w_pairs = ceil_div(w_tiles, 2);
#if DSPERF_HAVE_AMX_BUILD
                if (fused_fp8) {  // one weight tile (block_cols kRows), one pair of x tiles
                    fp8_fused_tile(ops, w_rows, n0, xt, x_tiles > 1 ? xt + k_tiles * kTileElems : nullptr, k_tiles,
                                   block_cols, wt_buf, c);
                    for (int64_t t = 0; t < x_tiles; ++t)  // the sum tiles fp8_fused_tile stored
                        write_tile(c + t * kTileFloats, true, m0 + 16 * t, n0, M, N, y, ldy, accumulate, simd);
                    continue;
                }
#endif
                for (int64_t kt0 = 0; kt0 < k_tiles; kt0 += chunk) {
                    const int64_t nkt = std::min(chunk, k_tiles - kt0);
                    const bf16_t* wt;
                    int64_t w_stride, w_step = kTileElems, w_row_bytes = 64;
                    if (direct) {  // row tiles in place: 16 rows of 32 K values, src->ld apart
                        wt = static_cast<const bf16_t*>(src->w) + n0 * src->ld + kt0 * kDepth;
                        w_stride = 16 * src->ld, w_step = kDepth, w_row_bytes = src->ld * 2;
                    } else if (packed) {
                        wt = packed->row_tile(n0 / 16) + kt0 * kTileElems, w_stride = k_tiles * kTileElems;
                    } else {
                        if (w_is_b) pack_vnni_tiles(*src, n0 / 16, w_tiles, kt0, nkt, wt_buf);
                        else pack_rows(w_rows, /*pairs=*/false, n0 / 16, w_tiles, kt0, nkt, wt_buf, simd);
                        wt = wt_buf, w_stride = nkt * kTileElems;
                    }
                    // Many rows: what the next tile blocks read first is fetched while these run, a
                    // slice per block; without it each first read of a weight strip or of x's next
                    // chunk waits on memory (8 experts x 256 tokens on an AMX Xeon, weights streamed:
                    // 1.33 -> 1.40 TFLOPS plain, 1.53 -> 1.68 packed). Few rows keep the hardware's
                    // prefetch alone: their weights stream at 86-89% of the read without it.
                    const bool prefetch = !few_rows;
                    const int64_t next_kt = std::min(chunk, k_tiles - kt0 - nkt);
                    for (int64_t i = 0; i < w_pairs; ++i) {
                        const bf16_t* w0 = wt + 2 * i * w_stride;
                        const bf16_t* w1 = 2 * i + 1 < w_tiles ? w0 + w_stride : nullptr;
                        for (int64_t q = 0; q < x_pairs; ++q) {
                            const bf16_t* x0 = xt + (2 * q * k_tiles + kt0) * kTileElems;
                            const bf16_t* x1 = 2 * q + 1 < x_tiles ? x0 + k_tiles * kTileElems : nullptr;
                            if (prefetch && packed && i + 1 < w_pairs) {  // the next packed weight strip, into L1
                                prefetch_slice<kL1>(w0 + 2 * w_stride, nkt * kTileBytes, q, x_pairs);
                                prefetch_slice<kL1>(w0 + 3 * w_stride, nkt * kTileBytes, q, x_pairs);
                            }
                            if (prefetch && next_kt > 0) {  // this x pair's next K chunk, into L2
                                prefetch_slice<kL2>(x0 + nkt * kTileElems, next_kt * kTileBytes, i, w_pairs);
                                if (x1) prefetch_slice<kL2>(x1 + nkt * kTileElems, next_kt * kTileBytes, i, w_pairs);
                            }
                            float* cq = c + (i * x_pairs + q) * 4 * kTileFloats;
                            if (w_is_b) tile_block(ops, x0, x1, w0, w1, nkt, cq, kt0 == 0);
                            else tile_block(ops, w0, w1, x0, x1, nkt, cq, kt0 == 0, w_step, w_row_bytes);
                        }
                    }
                }
                // Tile t of a block: A tile t / 2, B tile t % 2.
                for (int64_t i = 0; i < w_pairs; ++i)
                    for (int64_t q = 0; q < x_pairs; ++q)
                        for (int64_t t = 0; t < 4; ++t) {
                            const int64_t w_tile = 2 * i + (w_is_b ? t % 2 : t / 2);
                            const int64_t x_tile = 2 * q + (w_is_b ? t / 2 : t % 2);
                            if (w_tile >= w_tiles) continue;  // no such tile in this block: its sums are not set
                            write_tile(c + ((i * x_pairs + q) * 4 + t) * kTileFloats, !w_is_b, m0 + 16 * x_tile,
                                       n0 + 16 * w_tile, M, N, y, ldy, accumulate, simd);
                        }
            }
        }
        ops.release();
    }
}

template void gemm<Emulated>(const bf16_t*, int64_t, int64_t, const WeightSource*, const PackedTiles*, float*, int64_t,
                             bool, bool);
#if DSPERF_HAVE_AMX_BUILD
template void gemm<Hardware>(const bf16_t*, int64_t, int64_t, const WeightSource*, const PackedTiles*, float*, int64_t,
                             bool, bool);
#endif

}  // namespace dsperf::kernels::amx
