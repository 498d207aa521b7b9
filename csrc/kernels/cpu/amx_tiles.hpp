// The two backends of the AMX GEMM driver: the tile instructions themselves (Hardware), and a scalar
// emulation of their semantics (Emulated) that lets the tests check the driver on any CPU.
//
// Tile shapes (palette 1): every tile is 16 rows of 64 bytes. A: 16 rows of x x 32 BF16 of K.
// B: 16 pairs of K x 16 columns x 2 (the VNNI pair layout). C: 16 x 16 FP32. Tiles 0-3 hold C for
// 2 x 2 blocks, 4-5 two A blocks, 6-7 two B blocks.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPERF_HAVE_AMX_BUILD 1
#define DSPERF_AMX __attribute__((target("amx-tile,amx-bf16")))
#else
#define DSPERF_HAVE_AMX_BUILD 0
#endif

namespace dsperf::kernels::amx {

constexpr int64_t kRows = 16, kDepth = 32, kTileElems = kRows * kDepth;  // 1 KB tiles
constexpr int64_t kTileFloats = kRows * 16;

// Each K pair adds its two BF16 products to the FP32 accumulator one after the other, as TDPBF16PS.
struct Emulated {
    static constexpr bool kHardware = false;
    alignas(64) uint8_t t[8][kRows * 64];
    void config() {}
    void release() {}
    template <int T>
    void zero() {
        std::memset(t[T], 0, sizeof t[T]);
    }
    template <int T>
    void load(const void* p, int64_t stride) {
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(t[T] + r * 64, static_cast<const uint8_t*>(p) + r * stride, 64);
    }
    template <int T>
    void store(void* p, int64_t stride) {
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, t[T] + r * 64, 64);
    }
    template <int C, int A, int B>
    void dp() {
        float c[kTileFloats];
        bf16_t a[kTileElems], b[kTileElems];
        std::memcpy(c, t[C], sizeof c);
        std::memcpy(a, t[A], sizeof a);
        std::memcpy(b, t[B], sizeof b);
        for (int64_t m = 0; m < kRows; ++m)
            for (int64_t n = 0; n < 16; ++n) {
                float s = c[m * 16 + n];
                for (int64_t p = 0; p < 16; ++p) {
                    s += bf16_to_f32(a[m * 32 + 2 * p]) * bf16_to_f32(b[p * 32 + 2 * n]);
                    s += bf16_to_f32(a[m * 32 + 2 * p + 1]) * bf16_to_f32(b[p * 32 + 2 * n + 1]);
                }
                c[m * 16 + n] = s;
            }
        std::memcpy(t[C], c, sizeof c);
    }
};

#if DSPERF_HAVE_AMX_BUILD
// LDTILECFG reads all 64 bytes of its operand. GCC 12's _tile_loadconfig declares an 8-byte memory
// operand, so the compiler may drop the stores of rows[] and colsb[] as dead and the instruction
// then faults (#GP) on stack garbage. Here the configuration is one constant object in read-only
// data, emitted whole, and the asm names the whole 64-byte struct as its operand. tile_config_bytes()
// returns those very bytes, and tests/test_amx_config.py checks in the built module that every
// LDTILECFG loads from such an object.
struct alignas(64) TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Palette 1; tiles 0-7 all 16 rows of 64 bytes.
inline constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

struct Hardware {
    static constexpr bool kHardware = true;
    DSPERF_AMX void config() { __asm__ volatile("ldtilecfg %0" : : "m"(kTileConfig)); }
    DSPERF_AMX void release() { _tile_release(); }
    // The tile intrinsics paste their tile number into the instruction text, so each number is
    // spelled out.
    template <int T>
    DSPERF_AMX void zero() {
        if constexpr (T == 0) _tile_zero(0);
        else if constexpr (T == 1) _tile_zero(1);
        else if constexpr (T == 2) _tile_zero(2);
        else if constexpr (T == 3) _tile_zero(3);
        else static_assert(T < 4, "accumulators are tiles 0-3");
    }
    template <int T>
    DSPERF_AMX void load(const void* p, int64_t stride) {
        if constexpr (T == 0) _tile_loadd(0, p, stride);
        else if constexpr (T == 1) _tile_loadd(1, p, stride);
        else if constexpr (T == 2) _tile_loadd(2, p, stride);
        else if constexpr (T == 3) _tile_loadd(3, p, stride);
        else if constexpr (T == 4) _tile_loadd(4, p, stride);
        else if constexpr (T == 5) _tile_loadd(5, p, stride);
        else if constexpr (T == 6) _tile_loadd(6, p, stride);
        else if constexpr (T == 7) _tile_loadd(7, p, stride);
        else static_assert(T < 8, "tiles 0-7");
    }
    template <int T>
    DSPERF_AMX void store(void* p, int64_t stride) {
        if constexpr (T == 0) _tile_stored(0, p, stride);
        else if constexpr (T == 1) _tile_stored(1, p, stride);
        else if constexpr (T == 2) _tile_stored(2, p, stride);
        else if constexpr (T == 3) _tile_stored(3, p, stride);
        else static_assert(T < 4, "accumulators are tiles 0-3");
    }
    template <int C, int A, int B>
    DSPERF_AMX void dp() {
        if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
        else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
        else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
        else if constexpr (C == 3 && A == 5 && B == 7) _tile_dpbf16ps(3, 5, 7);
        else static_assert(C < 0, "the driver uses four (C, A, B) combinations");
    }
};
#endif

}  // namespace dsperf::kernels::amx
