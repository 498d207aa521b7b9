// The AMX GEMM driver: y[M, N] (+)= x[M, K] B, B given as weights in one of three layouts, or packed
// once ahead into PackedTiles (as oneDNN's reorder packs weights for its AMX kernels).
//
// Which operand plays which tile role follows the weights' layout, so that the weights are never
// transposed on the way to the tiles (a 16 x 16 word transpose per 1 KB tile cost about a third of
// the tile time):
//  - row-major weights w[N, K] (BF16, or FP8 codes dequantised as they are copied) are already the
//    A operand's layout, 16 rows of 32 K values: the driver computes y^T = w x^T, with x transposed
//    into the B operand's K-pair layout once per 256 rows of x (M x K work, not N x K);
//  - weights in the K-pair layout (gemm_bf16_vnni's) are already the B operand's: y = x B.
//
// Blocking: x 256 rows at a time (packed by all threads), each thread a share of the column blocks
// (at most 256 columns of y), K in chunks of 8 tiles (256). Within a chunk, 2 x 2 accumulator tiles
// (32 weight rows or columns x 32 rows of x): the weights' 32-wide strip stays in L1 for every row
// pair of x, and x's tiles come from L2.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels::amx {

// The weights of one GEMM as the caller holds them.
struct WeightSource {
    enum class Layout {
        kRows,     // bf16 w[N, K] row-major, leading dimension ld (y = x w^T)
        kVnni,     // bf16 pairs bp[(k / 2) * N * 2 + n * 2 + k % 2] (y = x B)
        kFp8Rows,  // e4m3 w[N, K] row-major, leading dimension ld, with scale[ceil(N/128), ceil(K/128)]
    };
    Layout layout = Layout::kRows;
    const void* w = nullptr;
    int64_t ld = 0;
    const float* scale = nullptr;
    int64_t N = 0, K = 0;
};

// Row-major weights in tile order: tiles of 16 rows x 32 K values, [row tile][K tile] (an even
// number of row tiles; zeros past N and K). FP8 blocks hold bf16(code x scale), as the other CPU
// kernels dequantise them; `lane_order`: their K values in the FP8 converter's order within each
// group of 64 (fp8_lane_order), which the driver then gives x's tiles too.
struct PackedTiles {
    int64_t N = 0, K = 0, row_tiles = 0, k_tiles = 0;
    bool lane_order = false;
    std::unique_ptr<bf16_t[], void (*)(void*)> tiles{nullptr, nullptr};
    const bf16_t* row_tile(int64_t t) const;
    size_t bytes() const;
};

// Packs row-major weights (kRows or kFp8Rows) whole, on all threads; needs no AMX.
PackedTiles pack_tiles(const WeightSource& src);

// The driver on either backend. Exactly one of src and packed is non-null. `threads` false keeps it
// on the calling thread (the self-check at import: a process that has started OpenMP's threads
// cannot fork children that use them, and dsperf's fork servers import dsperf.kernels).
template <class Ops>
void gemm(const bf16_t* x, int64_t ldx, int64_t M, const WeightSource* src, const PackedTiles* packed, float* y,
          int64_t ldy, bool accumulate, bool threads = true);

}  // namespace dsperf::kernels::amx
