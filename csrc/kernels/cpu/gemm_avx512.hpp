// The AVX512-BF16 GEMM kernels behind linear(): y[M, n0:n1] (+)= x[M, K] w[n0:n1, K]^T, the
// products on VDPBF16PS (32 BF16 pairs into 16 FP32 lanes per instruction) or, where a probe finds
// FP32 FMAs faster (linear.cpp), on FMAs over widened BF16.
//  - packed (prefill, many rows): each thread packs a slice of w (48 rows x up to 8192 K) into
//    the VNNI pair layout of gemm_bf16_vnni in L2 once, dequantising FP8 blocks on the way in, and
//    every 8-row tile of x reuses it, broadcasting its pairs against 3 vectors of the panel (no
//    horizontal sums): compute-bound.
//  - stream (decode, few rows): w is read once, straight from memory, 2 rows at a time; FP8 codes
//    become BF16 in registers (permute-table lookups, fp8_convert_avx512.hpp): memory-bound. Its
//    products run on VDPBF16PS or, where FP32 FMAs issue faster, on FMAs over widened halves.
// The caller (linear.cpp) splits N across threads and checks the sizes.
#pragma once
#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::kernels::avx512 {

// The weights one GEMM reads: BF16 rows with stride ld, or FP8 rows (stride ld = K) with one FP32
// scale per 128 x 128 block, row-major over [ceil(N / 128), ceil(K / 128)].
struct GemmWeights {
    const bf16_t* bf16 = nullptr;
    const fp8_t* fp8 = nullptr;
    const float* scale = nullptr;
    int64_t ld = 0;
};

// Rows of w per thread slice of the packed kernel.
constexpr int64_t kPackedSliceRows = 48;
void linear_packed_rows(const bf16_t* x, int64_t ldx, const GemmWeights& w, float* y, int64_t ldy, int64_t M,
                        int64_t n0, int64_t n1, int64_t K, bool accumulate);

// The stream kernel reads x from a copy made once per call (stream_x): rows zero-padded to whole
// 64-wide steps, at a row stride of stream_x_stride elements (32 more: a pad that is never read)
// and, for FP8 weights, each 64 permuted into the order the in-register conversion leaves the
// weights in. For the FMA products (fma) the copy is FP32, each 64 as the even and odd halves of
// its two 32-wide BF16 vectors: 4 bytes an element, 64-byte aligned like the BF16 copy.
int64_t stream_x_stride(int64_t K);
void stream_x(const bf16_t* x, int64_t ldx, int64_t M, int64_t K, bool fp8, bool fma, void* xs);
// FP8 slices start on 128-row boundaries (one scale row per slice).
constexpr int64_t kStreamSliceRows = 128;
void linear_stream_rows(const void* xs, bool fma, const GemmWeights& w, float* y, int64_t ldy, int64_t M, int64_t n0,
                        int64_t n1, int64_t K, bool accumulate);

// x [M, K] (row stride ldx) widened to FP32 rows of stride ld >= K, zero from K to ld: the FMA
// kernels' copy of x.
void widen_rows(const bf16_t* x, int64_t ldx, int64_t M, int64_t K, int64_t ld, float* xf);

// dst[2d] = a[d], dst[2d + 1] = b[d] (0 where b is null), d < n: two rows in the pair layout of
// gemm_bf16_vnni (attention's values).
void interleave_rows(const bf16_t* a, const bf16_t* b, int64_t n, bf16_t* dst);

// n rows of 2 x pairs BF16 values (row j at src + j * ld, ld even) into the pair layout of
// gemm_bf16_vnni with the rows as its columns: dst[(p * n + j) * 2 + h] = src[j * ld + 2 * p + h]
// (attention's keys, so that the score GEMM runs without horizontal sums too).
void transpose_pairs(const bf16_t* src, int64_t ld, int64_t n, int64_t pairs, bf16_t* dst);

}  // namespace dsperf::kernels::avx512
