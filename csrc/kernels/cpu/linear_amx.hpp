// AMX-BF16 GEMMs: 16 x 16 FP32 tiles accumulated by TDPBF16PS from 16 x 32 BF16 tiles of x and
// 16-pair x 16 tiles of the weights in the VNNI pair layout.
//
// The same tiling and packing code runs on two backends: the AMX instructions, and a scalar
// emulation of their semantics (tile loads, stores, zeroing, TDPBF16PS). The emulation lets the
// tests check the driver on CPUs without AMX. At first use, one tile product on the hardware runs in
// a child process (a fault there ends the child, not the caller), then the whole driver must agree
// with the emulation on a small GEMM before the kernels dispatch to it; a failed check leaves the
// AVX-512 kernels in use and says why in status().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/dtype.hpp"
#include "kernels/cpu/amx_gemm.hpp"

namespace dsperf::kernels::amx {

// Rows of x from which the GEMMs use AMX where it is usable: below, the AVX-512 stream kernels read
// the weights faster (Emerald Rapids, 4096 x 7168 weights streamed, GB/s of weights, AMX against
// stream: BF16 at 2 rows 25.5 / 26.9, at 4 rows 25.5 / 23.5). FP8, whose codes AMX dequantises on
// the way to the tiles (fp8_row_tiles), in bench_experts' FP8 decode shape (8 experts, weights
// streamed), ms, AMX against stream: 1 row 20.2 / 14.9, 2 rows 20.0 / 19.4, 3 rows 20.5 / 20.7,
// 8 rows 20.1 / 31.1. gemm_bf16_vnni (attention's products) keeps one tile row: its crossover is
// not measured.
constexpr int64_t kMinRows = 4, kMinRowsFp8 = 3, kMinRowsVnni = 16;

// AMX usable here: the CPU has AMX-TILE and AMX-BF16, Linux granted the tile permission, the
// environment does not say DSPERF_AMX=0, and the self-check passed.
bool usable();
// Whether a GEMM of M rows of x with BF16 (fp8 false) or FP8 weights runs on the tiles here.
inline bool runs_linear(int64_t M, bool fp8) { return M >= (fp8 ? kMinRowsFp8 : kMinRows) && usable(); }
// "usable", or why not. Throws std::invalid_argument when DSPERF_AMX is set to other than 0 or 1.
std::string status();

// The 64 bytes every LDTILECFG of the kernels loads (empty where the build has no AMX code): the
// object itself, so that a test can hold the configuration the build really passes.
std::vector<uint8_t> tile_config_bytes();

// y[M, N] (+)= x[M, K] w[N, K]^T, w row-major (packed to VNNI panels 16 columns at a time).
void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate);

// y[M, N] (+)= x[M, K] B with B in gemm_bf16_vnni's pair layout bp[(k / 2) * N * 2 + n * 2 + k % 2].
void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate);

// y[M, N] (+)= x[M, K] w[N, K]^T with FP8 e4m3 w and 128 x 128 block scales, each block dequantised
// to bf16(code x scale) as it is packed into tiles.
void linear_fp8(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy, int64_t M,
                int64_t N, int64_t K, bool accumulate);

// Weights packed into tiles once (any CPU: the packing needs no AMX), and the GEMM on them.
PackedTiles pack_bf16(const bf16_t* w, int64_t ldw, int64_t N, int64_t K);
PackedTiles pack_fp8(const fp8_t* w, const float* w_scale, int64_t N, int64_t K);
void linear_packed(const bf16_t* x, int64_t ldx, int64_t M, const PackedTiles& w, float* y, int64_t ldy,
                   bool accumulate);

// TDPBF16PS peak of all OpenMP threads over `seconds`, GFLOPS (0 where AMX is not usable); with
// `operand_loads`, each 2 x 2 step's four operand tiles loaded first, two from L1 and two from L2 (a
// GEMM's ceiling here).
double probe_tile_peak_gflops(double seconds, bool operand_loads = false);

// The same GEMMs on the scalar emulation of the tile instructions (any CPU).
void linear_bf16_emulated(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy,
                          int64_t M, int64_t N, int64_t K, bool accumulate);
void gemm_bf16_vnni_emulated(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M,
                             int64_t N, int64_t K, bool accumulate);
void linear_fp8_emulated(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy,
                         int64_t M, int64_t N, int64_t K, bool accumulate);
void linear_packed_emulated(const bf16_t* x, int64_t ldx, int64_t M, const PackedTiles& w, float* y, int64_t ldy,
                            bool accumulate);

}  // namespace dsperf::kernels::amx
