// Expert grouped GEMM on tensor cores (WMMA, BF16 x BF16 -> FP32), DeepGEMM's two layouts.
//
// One thread block computes a 64 x 64 tile of c for one expert: 4 warps, each a 32 x 32 quarter
// as 2 x 2 WMMA 16x16x16 fragments, K in steps of 32 staged through shared memory. FP8 inputs are
// widened to BF16 while staging: e4m3 values are exact in BF16, so FP8 x FP8 products are exact
// and only their scales need care. For FP8 activations (1x128 scales) the fragments of one
// 128-deep K block are flushed to shared memory and added into FP32 registers times
// a_scale[row, kb] * b_scale[n / 128, kb], the two-level accumulation DeepGEMM uses.
//
// Not done (and said so in docs/CUDA.md): native FP8 mma (sm_89+/sm_90a wgmma), TMA, pipelining.
#include <mma.h>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

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
__device__ bool find_tile(GemmLayout layout, const int64_t* offsets, const int32_t* counts, int64_t capacity,
                          int64_t E, int64_t& expert, int64_t& row0, int64_t& row_end) {
    const int64_t t = blockIdx.y;
    if (layout == GemmLayout::Masked) {
        const int64_t per = (capacity + kBM - 1) / kBM;
        expert = t / per;
        row0 = expert * capacity + (t % per) * kBM;
        row_end = expert * capacity + counts[expert];
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
    grouped_gemm_kernel<SA, SB><<<grid, kThreads, 0, current_stream()>>>(g.a, g.a_scale, g.b, g.b_scale, g.c, g.N, g.K, g.E, g.layout,
                                                    g.offsets, g.counts, g.capacity);
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
        need(capacity >= 0 && M == E * capacity,
             "the masked layout needs M = E * capacity (" + std::to_string(E) + " x " + std::to_string(capacity) +
                 "), got M = " + std::to_string(M));
    }
}

void grouped_gemm(const GroupedGemm& g) {
    g.validate();
    if (g.check_values) {
        if (g.layout == GemmLayout::Contiguous) check_offsets(g.offsets, g.E, g.M);
        else check_range(g.counts, g.E, 0, g.capacity + 1, "counts");
    }
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
    const dim3 grid(unsigned((g.N + kBN - 1) / kBN), unsigned(tiles_m));
    if (g.a_scale) launch<Src::Fp8Exact, Src::Fp8Exact>(g, grid);
    else if (g.b_scale) launch<Src::Bf16, Src::Fp8Dequant>(g, grid);
    else launch<Src::Bf16, Src::Bf16>(g, grid);
    check_launch("grouped_gemm");
}

}  // namespace dsperf::cuda
