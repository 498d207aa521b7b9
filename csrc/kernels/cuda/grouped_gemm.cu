// Expert grouped GEMM on tensor cores (WMMA, BF16 x BF16 -> FP32), DeepGEMM's two layouts.
//
// One thread block computes a 64 x 64 tile of c for one expert: 4 warps, each a 32 x 32 quarter
// as 2 x 2 WMMA 16x16x16 fragments, K in steps of 32 staged through shared memory. FP8 inputs are
// widened to BF16 while staging: e4m3 values are exact in BF16, so FP8 x FP8 products are exact
// and only their scales need care. For FP8 activations (1x128 scales) the fragments of one
// 128-deep K block are flushed to shared memory and added into FP32 registers times
// a_scale[row, kb] * b_scale[n / 128, kb], the two-level accumulation DeepGEMM uses.
//
// On sm_89 and newer, FP8 x FP8 runs on FP8 tensor cores instead (mma.sync m16n8k32 e4m3, below),
// where rows are whole 16-byte vectors; DSPERF_FP8_MMA=0 in the environment forces the path above.
//
// Hopper's own instructions (wgmma, TMA, warp specialisation) are in grouped_gemm_sm90.cu, the
// default on sm_90 (docs/CUDA.md); this file's kernels are the sm_80 path and the fallback.
#include <mma.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/hopper_api.hpp"
#include "kernels/cuda/mma_sm80.cuh"

namespace dsperf::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kLdS = kBK + 8;  // padded rows of the staged tiles (WMMA needs ldm % 8 == 0 for BF16)
constexpr int kLdC = kBN + 4;  // padded rows of the FP32 flush tile (ldm % 4 == 0 for FP32)
constexpr int kScaleBlock = 128;

// How an operand is stored: BF16 bits, or FP8 e4m3 bits widened exactly, or FP8 times a block
// scale rounded to BF16 (the CPU's weight dequantisation).
enum class Src { Bf16, Fp8Exact, Fp8Dequant };

// Stages rows [r0, r0 + 64) x cols [k0, k0 + 32) of a row-major operand with K columns into
// tile[64][kLdS] as BF16, zero outside [r0, r_end) x [0, k_end). With vec (K % 8 == 0 and an
// aligned base: then k0, k_end and every row start are multiples of 8 elements) each thread moves
// 8 elements at a time, 16 bytes of BF16 or 8 of FP8; otherwise one element at a time.
template <Src S>
__device__ void stage(const void* src, int64_t r0, int64_t r_end, int64_t k0, int64_t k_end, int64_t K, float scale,
                      bool vec, __nv_bfloat16* tile) {
    if (vec) {
        for (int v = threadIdx.x; v < kBM * kBK / 8; v += kThreads) {
            const int r = v / (kBK / 8), c = (v % (kBK / 8)) * 8;
            const int64_t row = r0 + r, k = k0 + c;
            uint4 out = make_uint4(0, 0, 0, 0);
            if (row < r_end && k < k_end) {
                if constexpr (S == Src::Bf16) {
                    out = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src) + row * K + k);
                } else {
                    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(src) + row * K + k);
                    const uint32_t w[2] = {raw.x, raw.y};
                    uint32_t packed[4];
                    for (int i = 0; i < 4; ++i) {
                        const uint32_t word = w[i / 2] >> (16 * (i % 2));
                        float lo = fp8_bits_to_f32(uint8_t(word & 0xff)), hi = fp8_bits_to_f32(uint8_t(word >> 8));
                        if (S == Src::Fp8Dequant) lo *= scale, hi *= scale;
                        packed[i] = uint32_t(to_bf16_bits(lo)) | (uint32_t(to_bf16_bits(hi)) << 16);
                    }
                    out = make_uint4(packed[0], packed[1], packed[2], packed[3]);
                }
            }
            *reinterpret_cast<uint4*>(tile + r * kLdS + c) = out;
        }
        return;
    }
    for (int idx = threadIdx.x; idx < kBM * kBK; idx += kThreads) {
        const int r = idx / kBK, c = idx % kBK;
        const int64_t row = r0 + r, k = k0 + c;
        uint16_t bits = 0;
        if (row < r_end && k < k_end) {
            if constexpr (S == Src::Bf16) {
                bits = static_cast<const uint16_t*>(src)[row * K + k];
            } else {
                const float v = fp8_bits_to_f32(static_cast<const uint8_t*>(src)[row * K + k]);
                bits = to_bf16_bits(S == Src::Fp8Dequant ? v * scale : v);
            }
        }
        tile[r * kLdS + c] = __ushort_as_bfloat16(bits);
    }
}

// The tile's expert and its rows [row0, row_end) of a and c; false when this block has no tile.
template <int BM = kBM>
__device__ bool find_tile(GemmLayout layout, const int64_t* offsets, const int32_t* counts, int64_t capacity, int64_t E,
                          int64_t& expert, int64_t& row0, int64_t& row_end) {
    constexpr int64_t kBM = BM;  // this kernel's tile height
    const int64_t t = blockIdx.y;
    if (layout == GemmLayout::Masked) {
        const int64_t per = (capacity + kBM - 1) / kBM;
        expert = t / per;
        row0 = expert * capacity + (t % per) * kBM;
        // Clamped to the capacity: with validate=False a bad count gives wrong rows, never writes
        // into the next expert's (or past the last one's) output.
        row_end = expert * capacity + min(int64_t(counts[expert]), capacity);
        return row0 < row_end;
    }
    // Contiguous: walk the experts' tile counts (E is at most a few hundred; one thread per block
    // would serialise it, but every thread reading the same offsets hits the same cache lines).
    int64_t left = t;
    for (int64_t e = 0; e < E; ++e) {
        const int64_t rows = offsets[e + 1] - offsets[e], tiles = (rows + kBM - 1) / kBM;
        if (left < tiles) {
            expert = e, row0 = offsets[e] + left * kBM, row_end = offsets[e + 1];
            return true;
        }
        left -= tiles;
    }
    return false;
}

template <Src SA, Src SB>
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_kernel(const void* a, const float* a_scale, const void* b, const float* b_scale, float* c, int64_t N,
                        int64_t K, int64_t E, GemmLayout layout, const int64_t* offsets, const int32_t* counts,
                        int64_t capacity) {
    __shared__ __align__(32) __nv_bfloat16 As[kBM * kLdS];
    __shared__ __align__(32) __nv_bfloat16 Bs[kBN * kLdS];
    __shared__ __align__(32) float Cs[kBM * kLdC];

    int64_t expert = 0, row0 = 0, row_end = 0;
    if (!find_tile(layout, offsets, counts, capacity, E, expert, row0, row_end)) return;
    const int64_t n0 = int64_t(blockIdx.x) * kBN;
    const int64_t kblocks = (K + kScaleBlock - 1) / kScaleBlock, nblocks = (N + kScaleBlock - 1) / kScaleBlock;
    const void* be = SB == Src::Bf16 ? static_cast<const void*>(static_cast<const uint16_t*>(b) + expert * N * K)
                                     : static_cast<const void*>(static_cast<const uint8_t*>(b) + expert * N * K);
    const float* bs = b_scale ? b_scale + (expert * nblocks + n0 / kScaleBlock) * kblocks : nullptr;
    // With FP8 activations the partial sums are flushed per 128-deep K block; otherwise once.
    constexpr bool kScaled = SA == Src::Fp8Exact;
    const int64_t group = kScaled ? kScaleBlock : K;

    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    // Vector loads need 8-element rows and bases aligned to the vector (16 B for BF16, 8 B for FP8).
    auto aligned = [](const void* p, unsigned bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
    const bool vec_a = K % 8 == 0 && aligned(a, SA == Src::Bf16 ? 16 : 8);
    const bool vec_b = K % 8 == 0 && aligned(be, SB == Src::Bf16 ? 16 : 8);
    float acc[kBM * kBN / kThreads];
#pragma unroll
    for (int j = 0; j < kBM * kBN / kThreads; ++j) acc[j] = 0.0f;

    for (int64_t g0 = 0; g0 < K; g0 += group) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag[2][2];
        for (auto& row : frag)
            for (auto& f : row) wmma::fill_fragment(f, 0.0f);
        const int64_t g1 = g0 + group < K ? g0 + group : K;
        for (int64_t k0 = g0; k0 < g1; k0 += kBK) {
            const float sb = SB == Src::Fp8Dequant ? bs[k0 / kScaleBlock] : 1.0f;
            stage<SA>(a, row0, row_end, k0, g1, K, 1.0f, vec_a, As);
            stage<SB>(be, n0, N, k0, g1, K, sb, vec_b, Bs);
            __syncthreads();
            for (int kk = 0; kk < kBK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
                for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 32 + i * 16) * kLdS + kk, kLdS);
                // b is [N, K] row-major, i.e. the K x N operand column-major.
                for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + (wn * 32 + j * 16) * kLdS + kk, kLdS);
                for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(frag[i][j], fa[i], fb[j], frag[i][j]);
            }
            __syncthreads();
        }
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j)
                wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, frag[i][j], kLdC,
                                        wmma::mem_row_major);
        __syncthreads();
        const float sbk = kScaled ? bs[g0 / kScaleBlock] : 1.0f;
#pragma unroll
        for (int j = 0; j < kBM * kBN / kThreads; ++j) {
            const int idx = threadIdx.x + j * kThreads, r = idx / kBN, col = idx % kBN;
            float f = Cs[r * kLdC + col];
            if (kScaled) {
                const int64_t row = row0 + r;
                f *= row < row_end ? a_scale[row * kblocks + g0 / kScaleBlock] * sbk : 0.0f;
            }
            acc[j] += f;
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < kBM * kBN / kThreads; ++j) {
        const int idx = threadIdx.x + j * kThreads, r = idx / kBN, col = idx % kBN;
        const int64_t row = row0 + r, n = n0 + col;
        if (row < row_end && n < N) c[row * N + n] = acc[j];
    }
}

// ---- FP8 tensor cores (sm_89+) ----------------------------------------------------------------------
// One block: a 64 x 64 tile of c, 4 warps of 32 x 32 = 2 x 4 mma tiles of 16 x 8, K in 128-deep
// blocks (one scale block) staged as bytes. Fragments (PTX mma.m16n8k32, 8-bit A row / B col):
// lane = 4 g + t; A regs 0/1 hold rows g / g + 8 at k 4t .. 4t + 3, regs 2/3 the same rows at
// k 16 + 4t ..; B reg 0 holds column g at k 4t .., reg 1 at k 16 + 4t ..; the FP32 accumulators
// are rows g (0, 1) and g + 8 (2, 3) at columns 2t, 2t + 1. A and B read the same k for the same
// register byte, so the products pair up whatever order the hardware gives k inside the 32.
constexpr int kF8Ld = kScaleBlock + 16;  // padded smem row (bytes): fragment loads hit distinct banks

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    // Never launched below sm_89 (the host checks the device); the sm_80 build needs a body.
    (void)a, (void)b;
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    __trap();
#endif
}

__global__ void __launch_bounds__(kThreads)
    grouped_gemm_fp8_mma_kernel(const uint8_t* a, const float* a_scale, const uint8_t* b, const float* b_scale,
                                float* c, int64_t N, int64_t K, int64_t E, GemmLayout layout, const int64_t* offsets,
                                const int32_t* counts, int64_t capacity) {
    __shared__ __align__(16) uint8_t As[kBM * kF8Ld];
    __shared__ __align__(16) uint8_t Bs[kBN * kF8Ld];
    int64_t expert = 0, row0 = 0, row_end = 0;
    if (!find_tile(layout, offsets, counts, capacity, E, expert, row0, row_end)) return;
    const int64_t n0 = int64_t(blockIdx.x) * kBN;
    const int64_t kblocks = (K + kScaleBlock - 1) / kScaleBlock, nblocks = (N + kScaleBlock - 1) / kScaleBlock;
    const uint8_t* be = b + expert * N * K;
    const float* bs = b_scale + (expert * nblocks + n0 / kScaleBlock) * kblocks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm = warp / 2, wn = warp % 2;
    float acc[2][4][4] = {};
    for (int64_t kb = 0; kb < kblocks; ++kb) {
        const int64_t k0 = kb * kScaleBlock;
        // 64 rows x 128 bytes of each operand, 16 bytes per thread and step (K % 16 == 0: checked).
        for (int v = threadIdx.x; v < kBM * kScaleBlock / 16; v += kThreads) {
            const int r = v / (kScaleBlock / 16), col = (v % (kScaleBlock / 16)) * 16;
            const int64_t k = k0 + col;
            uint4 va = make_uint4(0, 0, 0, 0), vb = make_uint4(0, 0, 0, 0);
            if (row0 + r < row_end && k < K) va = *reinterpret_cast<const uint4*>(a + (row0 + r) * K + k);
            if (n0 + r < N && k < K) vb = *reinterpret_cast<const uint4*>(be + (n0 + r) * K + k);
            *reinterpret_cast<uint4*>(As + r * kF8Ld + col) = va;
            *reinterpret_cast<uint4*>(Bs + r * kF8Ld + col) = vb;
        }
        __syncthreads();
        float part[2][4][4] = {};
        for (int ks = 0; ks < kScaleBlock; ks += 32) {
            uint32_t af[2][4], bf[4][2];
            for (int mi = 0; mi < 2; ++mi) {
                const uint8_t* lo = As + (wm * 32 + mi * 16 + g) * kF8Ld + ks + 4 * t;
                const uint8_t* hi = lo + 8 * kF8Ld;
                af[mi][0] = *reinterpret_cast<const uint32_t*>(lo);
                af[mi][1] = *reinterpret_cast<const uint32_t*>(hi);
                af[mi][2] = *reinterpret_cast<const uint32_t*>(lo + 16);
                af[mi][3] = *reinterpret_cast<const uint32_t*>(hi + 16);
            }
            for (int ni = 0; ni < 4; ++ni) {
                const uint8_t* col = Bs + (wn * 32 + ni * 8 + g) * kF8Ld + ks + 4 * t;
                bf[ni][0] = *reinterpret_cast<const uint32_t*>(col);
                bf[ni][1] = *reinterpret_cast<const uint32_t*>(col + 16);
            }
            for (int mi = 0; mi < 2; ++mi)
                for (int ni = 0; ni < 4; ++ni) mma_e4m3(part[mi][ni], af[mi], bf[ni]);
        }
        // DeepGEMM's promotion: this block's sums times a_scale[row, kb] * b_scale[n block, kb].
        const float sb = bs[kb];
        for (int mi = 0; mi < 2; ++mi) {
            const int64_t r_lo = row0 + wm * 32 + mi * 16 + g, r_hi = r_lo + 8;
            const float s_lo = r_lo < row_end ? a_scale[r_lo * kblocks + kb] * sb : 0.0f;
            const float s_hi = r_hi < row_end ? a_scale[r_hi * kblocks + kb] * sb : 0.0f;
            for (int ni = 0; ni < 4; ++ni) {
                acc[mi][ni][0] += part[mi][ni][0] * s_lo;
                acc[mi][ni][1] += part[mi][ni][1] * s_lo;
                acc[mi][ni][2] += part[mi][ni][2] * s_hi;
                acc[mi][ni][3] += part[mi][ni][3] * s_hi;
            }
        }
        __syncthreads();  // the next block's staging overwrites As / Bs
    }
    for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni)
            for (int j = 0; j < 4; ++j) {
                const int64_t row = row0 + wm * 32 + mi * 16 + g + (j >= 2 ? 8 : 0);
                const int64_t n = n0 + wn * 32 + ni * 8 + 2 * t + (j & 1);
                if (row < row_end && n < N) c[row * N + n] = acc[mi][ni][j];
            }
}

// ---- BF16 on mma.sync with a multistage cp.async pipeline ------------------------------------------
// One block: a 128 x 128 tile of c, 8 warps of 64 x 32 (2 x 4 warps) = 4 x 4 mma tiles of 16 x 8;
// K in steps of kMBK through kMStages shared buffers filled by cp.async kMStages - 1 steps ahead, and
// fragments loaded with ldmatrix (one instruction per 16 x 16 A tile or pair of 8-wide B tiles;
// the fragment layouts are in mma_sm80.cuh).
// K 64 deep in 3 stages (110 KB, two blocks per SM). Measured on an H200 (E=4 m=8192 n=4096 k=7168):
// 281 TFLOPS, against 251 for 32 deep x 3 stages and 258 for 32 x 4 (docs/CUDA.md).
constexpr int kMBM = 128, kMBN = 128, kMBK = 64, kMStages = 3, kMThreads = 256;
constexpr int kMLd = kMBK + 8;  // padded smem row (elements): ldmatrix rows on distinct banks
constexpr int kMStageElems = (kMBM + kMBN) * kMLd;
constexpr size_t kMSmemBytes = size_t(kMStages) * kMStageElems * 2;

__global__ void __launch_bounds__(kMThreads)
    grouped_gemm_bf16_mma_kernel(const uint16_t* a, const uint16_t* b, float* c, int64_t N, int64_t K, int64_t E,
                                 GemmLayout layout, const int64_t* offsets, const int32_t* counts, int64_t capacity) {
    extern __shared__ __align__(128) uint16_t gemm_smem[];  // [stage][A 128 rows | B 128 rows][kMLd]
    int64_t expert = 0, row0 = 0, row_end = 0;
    if (!find_tile<kMBM>(layout, offsets, counts, capacity, E, expert, row0, row_end)) return;
    const int64_t n0 = int64_t(blockIdx.x) * kMBN;
    const uint16_t* be = b + expert * N * K;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm = warp / 4, wn = warp % 4;  // warp tile rows wm * 64, columns wn * 32

    // Stage k-step ks into its buffer: 128 rows x kMBK / 8 chunks of 8 elements for A and for B. Rows
    // outside the tile, and chunks past K, are zero-filled (K % 8 == 0: chunks are whole). A step
    // past the last commits an empty group, so that the wait counts below stay uniform.
    const int64_t steps = (K + kMBK - 1) / kMBK;
    auto stage = [&](int64_t ks) {
        if (ks < steps) {
            uint16_t* As = gemm_smem + (ks % kMStages) * kMStageElems;
            uint16_t* Bs = As + kMBM * kMLd;
            for (int v = threadIdx.x; v < kMBM * (kMBK / 8); v += kMThreads) {
                const int r = v / (kMBK / 8), col = (v % (kMBK / 8)) * 8;
                const int64_t k = ks * kMBK + col;
                const bool ka = k < K;
                const int64_t ra = row0 + r, rb = n0 + r;
                const bool in_a = ra < row_end && ka, in_b = rb < N && ka;
                // A zero-filled copy still needs a valid address: the operand's base.
                cp_async16(&As[r * kMLd + col], in_a ? a + ra * K + k : a, in_a ? 16 : 0);
                cp_async16(&Bs[r * kMLd + col], in_b ? be + rb * K + k : be, in_b ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    float acc[4][4][4] = {};
    for (int s = 0; s < kMStages - 1; ++s) stage(s);
    for (int64_t s = 0; s < steps; ++s) {
        cp_async_wait<kMStages - 2>();  // step s has landed (for this thread's copies) ...
        __syncthreads();                // ... and for everyone's; step s - 1's buffer is free again
        stage(s + kMStages - 1);
        const uint16_t* As = gemm_smem + (s % kMStages) * kMStageElems;
        const uint16_t* Bs = As + kMBM * kMLd;
#pragma unroll
        for (int kk = 0; kk < kMBK; kk += 16) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) ldmatrix_x4(af[mi], a_tile_row(As + (wm * 64 + mi * 16) * kMLd + kk, kMLd, lane));
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                uint32_t r[4];
                ldmatrix_x4(r, b_pair_row(Bs + (wn * 32 + np * 16) * kMLd + kk, kMLd, lane));
                bf[2 * np][0] = r[0], bf[2 * np][1] = r[1], bf[2 * np + 1][0] = r[2], bf[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) mma_bf16_16816(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
        }
    }
    cp_async_wait<0>();  // no copy may still be landing when the block exits
    for (int mi = 0; mi < 4; ++mi)
        for (int ni = 0; ni < 4; ++ni)
            for (int j = 0; j < 4; ++j) {
                const int64_t row = row0 + wm * 64 + mi * 16 + g + (j >= 2 ? 8 : 0);
                const int64_t n = n0 + wn * 32 + ni * 8 + 2 * t + (j & 1);
                if (row < row_end && n < N) c[row * N + n] = acc[mi][ni][j];
            }
}

// Whether BF16 x BF16 takes the mma.sync kernel: whole 16-byte chunks (K % 8 == 0), aligned bases,
// and not turned off by DSPERF_BF16_MMA=0.
bool use_bf16_mma(const GroupedGemm& g) {
    const char* env = std::getenv("DSPERF_BF16_MMA");
    if (env && std::strcmp(env, "0") == 0) return false;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return g.K % 8 == 0 && aligned(g.a) && aligned(g.b);
}

// Whether FP8 x FP8 goes to the FP8 tensor cores: sm_90 and up (the FP8 kernel is built into the
// sm_90a image; an sm_89 GPU would load the sm_80 one, whose FP8 body traps), whole 16-byte rows,
// aligned bases, and not turned off by DSPERF_FP8_MMA=0.
bool use_fp8_mma(const GroupedGemm& g) {
    const char* env = std::getenv("DSPERF_FP8_MMA");
    if (env && std::strcmp(env, "0") == 0) return false;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return compute_capability(current_device()) >= 90 && g.K % 16 == 0 && aligned(g.a) && aligned(g.b);
}

// offsets[0] == 0, non-decreasing, offsets[E] == M; the first violation's index in *bad.
__global__ void check_offsets_kernel(const int64_t* offsets, int64_t E, int64_t M, long long* bad) {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e <= E; e += int64_t(gridDim.x) * blockDim.x) {
        const bool ok = e == 0 ? offsets[0] == 0 : (offsets[e] >= offsets[e - 1] && (e < E || offsets[E] == M));
        if (!ok) atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(e));
    }
}

void check_offsets(const int64_t* offsets, int64_t E, int64_t M) {
    refuse_in_capture("a device-side value check");
    Scratch<long long> bad(1);
    const long long none = -1;  // all ones: larger than any index as unsigned
    check(cudaMemcpy(bad.get(), &none, sizeof none, cudaMemcpyHostToDevice), "copy to the device");
    check_offsets_kernel<<<blocks_for(E + 1, 256), 256, 0, current_stream()>>>(offsets, E, M, bad.get());
    check(cudaGetLastError(), "check_offsets");
    long long got = 0;
    check(cudaMemcpy(&got, bad.get(), sizeof got, cudaMemcpyDeviceToHost), "copy to the host");
    if (got != -1)
        throw std::invalid_argument("offsets must start at 0, not decrease, and end at the rows of a (" +
                                    std::to_string(M) + "); entry " + std::to_string(got) + " breaks that");
}

template <Src SA, Src SB>
void launch(const GroupedGemm& g, dim3 grid) {
    grouped_gemm_kernel<SA, SB><<<grid, kThreads, 0, current_stream()>>>(
        g.a, g.a_scale, g.b, g.b_scale, g.c, g.N, g.K, g.E, g.layout, g.offsets, g.counts, g.capacity);
}

}  // namespace

void GroupedGemm::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("grouped_gemm: " + what);
    };
    need(M >= 0 && N >= 1 && K >= 1 && E >= 1, "M must be >= 0 and N, K, E positive");
    need(M == 0 || (a && b && c), "a, b and c are required");
    need(!a_scale || b_scale, "FP8 activations (a_scale) need FP8 weights (b_scale)");
    if (layout == GemmLayout::Contiguous) {
        need(offsets != nullptr, "the contiguous layout needs offsets");
    } else {
        need(counts != nullptr, "the masked layout needs counts");
        need(capacity >= 0 && M == E * capacity, "the masked layout needs M = E * capacity (" + std::to_string(E) +
                                                     " x " + std::to_string(capacity) +
                                                     "), got M = " + std::to_string(M));
    }
}

void check_grouped_gemm_values(const GroupedGemm& g) {
    if (!g.check_values) return;
    if (g.layout == GemmLayout::Contiguous) check_offsets(g.offsets, g.E, g.M);
    else check_range(g.counts, g.E, 0, g.capacity + 1, "counts");
}

void grouped_gemm(const GroupedGemm& g) {
    check_grouped_gemm_values(g);
    if (g.M == 0) return;
    int64_t tiles_m = 0;
    if (g.layout == GemmLayout::Masked) {
        // Rows past each count stay zero: clear c once, the kernel writes only valid rows.
        fill_zero(g.c, size_t(g.M * g.N) * sizeof(float));
        tiles_m = g.E * ((g.capacity + kBM - 1) / kBM);
    } else {
        // sum_e ceil(rows_e / 64) <= ceil(M / 64) + E; surplus blocks find no tile and return.
        tiles_m = (g.M + kBM - 1) / kBM + g.E;
    }
    if (tiles_m == 0) return;
    if (tiles_m > 65535) throw std::invalid_argument("grouped_gemm: too many row tiles for one launch (M too large)");
    if (!g.a_scale && !g.b_scale && use_bf16_mma(g)) {
        const int64_t tiles =
            g.layout == GemmLayout::Masked ? g.E * ((g.capacity + kMBM - 1) / kMBM) : (g.M + kMBM - 1) / kMBM + g.E;
        const dim3 grid(unsigned((g.N + kMBN - 1) / kMBN), unsigned(tiles));
        check(cudaFuncSetAttribute(grouped_gemm_bf16_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(kMSmemBytes)),
              "cudaFuncSetAttribute (grouped_gemm_bf16_mma shared memory)");
        grouped_gemm_bf16_mma_kernel<<<grid, kMThreads, kMSmemBytes, current_stream()>>>(
            static_cast<const uint16_t*>(g.a), static_cast<const uint16_t*>(g.b), g.c, g.N, g.K, g.E, g.layout,
            g.offsets, g.counts, g.capacity);
        check_launch("grouped_gemm");
        return;
    }
    const dim3 grid(unsigned((g.N + kBN - 1) / kBN), unsigned(tiles_m));
    if (g.a_scale && use_fp8_mma(g))
        grouped_gemm_fp8_mma_kernel<<<grid, kThreads, 0, current_stream()>>>(
            static_cast<const uint8_t*>(g.a), g.a_scale, static_cast<const uint8_t*>(g.b), g.b_scale, g.c, g.N, g.K,
            g.E, g.layout, g.offsets, g.counts, g.capacity);
    else if (g.a_scale) launch<Src::Fp8Exact, Src::Fp8Exact>(g, grid);
    else if (g.b_scale) launch<Src::Bf16, Src::Fp8Dequant>(g, grid);
    else launch<Src::Bf16, Src::Bf16>(g, grid);
    check_launch("grouped_gemm");
}

}  // namespace dsperf::cuda
