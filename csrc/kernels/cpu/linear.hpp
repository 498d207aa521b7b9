// y[M, N] = x[M, K] @ w[N, K]^T: torch.nn.Linear without bias, the one GEMM every op family
// uses. x and w are BF16 (or w FP8 with DeepSeek-V3's 128x128 block scales); y is FP32.
// Row strides are in elements. OpenMP threads split N.
#pragma once
#include <cstdint>

#include "kernels/common/dtype.hpp"
#include "kernels/cpu/amx_gemm.hpp"

namespace dsperf::kernels {

// Rows of x from which the GEMMs switch from the stream kernel (weights read once from memory, FP8
// converted in registers: decode) to the prefill kernel (weight panels packed once and reused by
// every row: the packed VDPBF16PS kernel, or widened FP32 FMAs where a probe finds FMAs faster);
// 0 when one kernel serves every size (the portable path). The kernel cost model keys its fitted
// efficiencies on this split.
int64_t linear_prefill_min_rows();

// The instruction the AVX-512 GEMMs multiply with: "dot" (VDPBF16PS) or "fma" (FP32 FMAs on widened
// BF16), chosen once by a probe of both (DSPERF_GEMM forces either); "portable" off that path.
const char* gemm_products();

void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate = false);

// w_scale holds one FP32 scale per 128 x 128 block of w, row-major over
// [ceil(N / 128), ceil(K / 128)]. Each block is dequantised to BF16 (fp8 x scale, rounded), as
// DeepSeek-V3's weight_dequant does, then multiplied.
void linear_fp8(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy, int64_t M,
                int64_t N, int64_t K, bool accumulate = false);

// One GEMM's weights w[N, K] (row stride K): BF16, or FP8 with 128 x 128 block scales; and, where they
// were prepared once for an AMX CPU (pack_linear_tiles), the same weights in tile order, which the
// AMX kernel then reads in place of copying them into tiles on every call.
struct LinearWeights {
    const void* w = nullptr;
    const float* scale = nullptr;  // FP8 only
    bool fp8 = false;
    int64_t N = 0, K = 0;
    const amx::PackedTiles* tiles = nullptr;  // null, or packed from these very weights
};

// y = x w^T on whichever kernel suits M rows here: linear_bf16 / linear_fp8, or the AMX kernel on
// w.tiles where present, from the rows where linear_bf16 / linear_fp8 themselves turn to AMX.
void linear(const bf16_t* x, int64_t ldx, int64_t M, const LinearWeights& w, float* y, int64_t ldy,
            bool accumulate = false);

// w in tile order where the AMX kernels are usable here; an empty PackedTiles (no tiles) elsewhere.
amx::PackedTiles pack_linear_tiles(const LinearWeights& w);

// y[M, N] (+)= x[M, K] @ B for a K x N matrix B given in the VNNI pair layout:
// bp[(k / 2) * N * 2 + n * 2 + k % 2] (rows of B interleaved two by two; an odd K has a zero row
// appended). No horizontal sums: the kernel for deep-M, shallow-K products such as attention's
// probabilities times values.
void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate);

// Operands in that pair layout. pair_rows: rows a and b (b null: zeros) of n values side by side,
// dst[2d] = a[d], dst[2d + 1] = b[d] (a K pair of B, two keys' values at a time). pair_columns: n rows
// of K values (row j at src + j * ld) as B's columns, dst[(k / 2) * n * 2 + j * 2 + k % 2] =
// src[j * ld + k], a zero second half for an odd K (attention's keys: the score GEMM runs without
// horizontal sums).
void pair_rows(const bf16_t* a, const bf16_t* b, int64_t n, bf16_t* dst);
void pair_columns(const bf16_t* src, int64_t ld, int64_t n, int64_t K, bf16_t* dst);

// The micro-kernel families (linear.cpp picks one from cpu_features()).
namespace portable {
void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate);
}
namespace avx512 {
// Rows [n0, n1) of the output; the caller splits N across threads.
void linear_bf16_rows(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                      int64_t n0, int64_t n1, int64_t K, bool accumulate);
void fp8_block_to_bf16(const fp8_t* src, int64_t ld_src, float scale, bf16_t* dst, int64_t ld_dst, int64_t rows,
                       int64_t cols);
// fma: the products on FP32 FMAs over x and B widened (where they outrun VDPBF16PS).
void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate, bool fma);
// Output columns [n0, n1) of y = x w^T with x already widened to FP32 (xf [M, K]) and w BF16: w is
// widened a 32-column panel at a time and multiplied with FP32 FMAs (twice VDPBF16PS's rate on CPUs
// that run two FMA ports but one BF16 dot port).
void linear_bf16_rows_fma(const float* xf, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M, int64_t n0,
                          int64_t n1, int64_t K, bool accumulate);
}  // namespace avx512

}  // namespace dsperf::kernels
