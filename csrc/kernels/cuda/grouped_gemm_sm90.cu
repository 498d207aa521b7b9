// Expert grouped GEMM on Hopper's own instructions (sm_90a): c[m, :] = a[m, :] @ b[e(m)]^T, BF16 in,
// FP32 out, grouped_gemm's argument contract (cuda_api.hpp: contiguous and masked layouts).
//
// NOT YET RUN ON A GPU: compiled for sm_90a and its SASS checked (benchmarks/check_sass.py) only.
// It is opt-in (variant="wgmma" / DSPERF_CUDA_WGMMA=1) until benchmarks/gpu_validate.py --hopper has
// compared it with the mma.sync kernel on an H100 / H200 (docs/CUDA.md).
//
// Design (one CTA per SM, persistent):
// - Tiles of c are 128 rows x 256 columns; K moves in 64-element (128-byte) steps through a ring of
//   kStages shared-memory slots, each holding the A tile [128][64] and the B tile [256][64] as TMA
//   wrote them (128-byte swizzle, so wgmma reads them without bank conflicts).
// - Warpgroup 0 is the producer: one thread waits for a free slot ("empty" mbarrier), announces
//   the slot's bytes on its "full" mbarrier and issues the two TMA loads. It gives most of its
//   registers to the consumers (setmaxnreg).
// - Warpgroups 1 and 2 are consumers: each owns 64 of the tile's 128 rows, waits for a full slot,
//   issues 4 wgmma m64n256k16 (one per 16 of K) on it, and frees the slot once the NEXT step's
//   products are issued and this step's have completed (wgmma.wait_group 1), so one step of MMAs
//   is always in flight. After the last step the accumulators go straight from registers to c.
// - Tiles are numbered m-tile major (t = m_tile * tiles_n + n_tile) and CTA i takes tiles i,
//   i + grid, ...: the CTAs at work at one time share a few A row blocks and sweep one expert's B.
//   Producer and consumers walk the same sequence independently; the mbarriers keep them in step,
//   and the producer runs up to kStages slots ahead (into the next tile while the consumers store).
// - Rows of a tile past its expert's last row (the next expert's, or past M: TMA fills zeros) and
//   columns past N are computed but never stored, so one tensor map serves every expert: a as
//   [M, K], b as [E * N, K].
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes through the runtime, no -lcuda
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/hopper_api.hpp"
#include "kernels/cuda/sm90_ptx.cuh"

namespace dsperf::cuda {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4;
constexpr int kConsumers = 2;                        // warpgroups of 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);     // producer warpgroup first
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2;
constexpr int kStageBytes = kABytes + kBBytes;       // 48 KB: A and B tiles are 1024-byte multiples
constexpr int kAlign = 1024;                         // the 128-byte swizzle's atom
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kAlign + 2 * kStages * sizeof(uint64_t);
static_assert(kABytes % kAlign == 0 && kBBytes % kAlign == 0, "tiles must keep the swizzle atoms aligned");
static_assert(kBK * 2 == 128, "a K step must be one 128-byte swizzle row");
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100 CTA may have");

struct Schedule {
    int64_t N = 0, E = 0, capacity = 0, tiles_n = 0, tiles = 0;
    GemmLayout layout = GemmLayout::Contiguous;
    const int64_t* offsets = nullptr;
    const int32_t* counts = nullptr;
};

#ifdef DSPERF_SM90A  // the device code below exists in the sm_90a image only
// Register budget per thread after the hand-over: 128 * 40 + 256 * 232 = 64,512 <= 65,536.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

struct Tile {
    int64_t expert = 0, row0 = 0, row_end = 0, n0 = 0;
};

enum class TileIs { Work, Empty, PastEnd };

// Tile t of the schedule: its expert, rows [row0, row_end) of a and c, and first column n0. m-tiles
// are numbered expert by expert (ceil(rows_e / 128) each); past the last one every later t is too.
__device__ TileIs tile_at(const Schedule& s, int64_t t, Tile& tile) {
    const int64_t mt = t / s.tiles_n;
    tile.n0 = (t % s.tiles_n) * kBN;
    if (s.layout == GemmLayout::Masked) {
        const int64_t per = (s.capacity + kBM - 1) / kBM;
        tile.expert = mt / per;
        if (tile.expert >= s.E) return TileIs::PastEnd;
        tile.row0 = tile.expert * s.capacity + (mt % per) * kBM;
        // Clamped to the capacity, as the mma.sync kernel: a bad count (validate=False) gives wrong
        // rows, never writes into the next expert's.
        const int64_t count = min(int64_t(s.counts[tile.expert]), s.capacity);
        tile.row_end = tile.expert * s.capacity + count;
        return tile.row0 < tile.row_end ? TileIs::Work : TileIs::Empty;
    }
    int64_t left = mt;
    for (int64_t e = 0; e < s.E; ++e) {
        const int64_t rows = s.offsets[e + 1] - s.offsets[e], tiles = (rows + kBM - 1) / kBM;
        if (left < tiles) {
            tile.expert = e, tile.row0 = s.offsets[e] + left * kBM, tile.row_end = s.offsets[e + 1];
            return TileIs::Work;
        }
        left -= tiles;
    }
    return TileIs::PastEnd;
}

// The consumer's part of one tile: rows [wg * 64, wg * 64 + 64) of it, all 256 columns.
__device__ __forceinline__ void consume_tile(uint8_t* smem, uint64_t* full, uint64_t* empty, int wg, int64_t ksteps,
                                             int& stage, uint32_t& phase, float (&acc)[128]) {
    const bool leader = threadIdx.x % 128 == 0;  // one arrival per consumer warpgroup frees a slot
    int prev = -1;
    for (int64_t ks = 0; ks < ksteps; ++ks) {
        sm90::mbar_wait(&full[stage], phase);
        const uint8_t* a_tile = smem + size_t(stage) * kStageBytes + wg * (64 * kBK * 2);
        const uint8_t* b_tile = smem + size_t(stage) * kStageBytes + kABytes;
        const uint64_t da = sm90::desc_k_major_sw128(a_tile), db = sm90::desc_k_major_sw128(b_tile);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)  // +32 bytes per 16 elements: +2 in the address field
            sm90::wgmma_m64n256k16_bf16(acc, da + 2 * kk, db + 2 * kk, ks > 0 || kk > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // the previous step's MMAs are done: its slot may be refilled
        sm90::fence_registers(acc);
        if (prev >= 0 && leader) sm90::mbar_arrive(&empty[prev]);
        prev = stage;
        if (++stage == kStages) stage = 0, phase ^= 1;
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (prev >= 0 && leader) sm90::mbar_arrive(&empty[prev]);
}

// Accumulator layout of wgmma m64nNk16 (FP32): warp w of the warpgroup holds rows 16 w .. 16 w + 15;
// for lane = 4 g + t, registers 4 j + 0 / 1 are row g at columns 8 j + 2 t / + 1, registers
// 4 j + 2 / 3 row g + 8 at the same columns (the mma.m16n8 pattern repeated every 8 columns).
__device__ __forceinline__ void store_tile(const float (&acc)[128], const Tile& tile, int wg, float* c, int64_t N) {
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t r_lo = tile.row0 + wg * 64 + warp * 16 + g, r_hi = r_lo + 8;
    const bool lo_in = r_lo < tile.row_end, hi_in = r_hi < tile.row_end;
    const bool pairs = N % 2 == 0;  // two adjacent FP32 as one 8-byte store (c is 16-byte aligned)
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
        const int64_t n = tile.n0 + 8 * j + 2 * t;
        if (n >= N) continue;
        if (pairs) {
            if (lo_in) *reinterpret_cast<float2*>(c + r_lo * N + n) = make_float2(acc[4 * j], acc[4 * j + 1]);
            if (hi_in) *reinterpret_cast<float2*>(c + r_hi * N + n) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
        } else {
            const bool second = n + 1 < N;
            if (lo_in) {
                c[r_lo * N + n] = acc[4 * j];
                if (second) c[r_lo * N + n + 1] = acc[4 * j + 1];
            }
            if (hi_in) {
                c[r_hi * N + n] = acc[4 * j + 2];
                if (second) c[r_hi * N + n + 1] = acc[4 * j + 3];
            }
        }
    }
}
#endif  // DSPERF_SM90A

__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                              float* c, int64_t K, Schedule s) {
#ifdef DSPERF_SM90A
    extern __shared__ uint8_t gemm_smem_raw[];
    // The dynamic shared memory's base is only 16-byte aligned by the language: round up to the
    // swizzle atom (the slack is in kSmemBytes).
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(gemm_smem_raw) + kAlign - 1) /
                                               kAlign * kAlign);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
    uint64_t* empty = full + kStages;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        sm90::tma_prefetch_map(&map_a);
        sm90::tma_prefetch_map(&map_b);
        for (int i = 0; i < kStages; ++i) {
            sm90::mbar_init(&full[i], 1);            // the producer's expect_tx arrival (+ the bytes)
            sm90::mbar_init(&empty[i], kConsumers);  // one arrival per consumer warpgroup
        }
        sm90::mbar_init_fence();
    }
    __syncthreads();

    const int64_t ksteps = (K + kBK - 1) / kBK;  // TMA zero-fills K's tail in both operands
    int stage = 0;
    uint32_t phase = 0;
    Tile tile;
    if (wg == 0) {
        sm90::regs_release<kProducerRegs>();
        if (threadIdx.x != 0) return;  // one thread issues every load
        for (int64_t t = blockIdx.x; t < s.tiles; t += gridDim.x) {
            const TileIs what = tile_at(s, t, tile);
            if (what == TileIs::PastEnd) break;
            if (what == TileIs::Empty) continue;
            const int32_t a_row = int32_t(tile.row0), b_row = int32_t(tile.expert * s.N + tile.n0);
            for (int64_t ks = 0; ks < ksteps; ++ks) {
                sm90::mbar_wait(&empty[stage], phase ^ 1);
                uint8_t* slot = smem + size_t(stage) * kStageBytes;
                sm90::mbar_arrive_expect_tx(&full[stage], kStageBytes);
                sm90::tma_load_2d(slot, &map_a, &full[stage], int32_t(ks * kBK), a_row);
                sm90::tma_load_2d(slot + kABytes, &map_b, &full[stage], int32_t(ks * kBK), b_row);
                if (++stage == kStages) stage = 0, phase ^= 1;
            }
        }
        return;
    }
    sm90::regs_claim<kConsumerRegs>();
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;  // overwritten by the first MMA (scale_d = 0) anyway
    for (int64_t t = blockIdx.x; t < s.tiles; t += gridDim.x) {
        const TileIs what = tile_at(s, t, tile);
        if (what == TileIs::PastEnd) break;
        if (what == TileIs::Empty) continue;
        consume_tile(smem, full, empty, wg - 1, ksteps, stage, phase, acc);
        store_tile(acc, tile, wg - 1, c, s.N);
    }
#else
    // The sm_80 image: never launched (the host requires compute capability 9.0).
    (void)map_a, (void)map_b, (void)c, (void)K, (void)s;
    __trap();
#endif
}

// ---- host side --------------------------------------------------------------------------------------
[[noreturn]] void refuse(const std::string& why) {
    throw std::invalid_argument("grouped_gemm variant='wgmma': " + why);
}

// cuTensorMapEncodeTiled from the driver through the runtime, so that nothing links -lcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found),
              "cudaGetDriverEntryPointByVersion (cuTensorMapEncodeTiled)");
        if (found != cudaDriverEntryPointSuccess || !p)
            throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or newer "
                                     "is needed for the wgmma kernels)");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// A row-major BF16 matrix [rows, K] read in boxes of box_rows x 64 with the 128-byte swizzle;
// out-of-range elements read as zero.
CUtensorMap bf16_rows_map(const void* base, int64_t rows, int64_t K, int box_rows) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(K) * 2};  // bytes between rows: a multiple of 16 (K % 8 == 0)
    const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
    const cuuint32_t steps[2] = {1, 1};
    const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
                                            strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ") for a [" +
                                 std::to_string(rows) + ", " + std::to_string(K) + "] BF16 operand");
    return map;
}

}  // namespace

std::string wgmma_unsupported_reason(int device) {
    const int cc = compute_capability(device);
    if (cc == 90) return "";
    return "the wgmma kernels are built for sm_90a and run on compute capability 9.0 (H100 / H200) only; GPU " +
           std::to_string(device) + " is sm_" + std::to_string(cc);
}

void grouped_gemm_wgmma(const GroupedGemm& g) {
    const std::string why = wgmma_unsupported_reason(current_device());
    if (!why.empty()) refuse(why);
    if (g.a_scale || g.b_scale)
        refuse("BF16 a and b only (the FP8 block-scaled Hopper kernel is not written yet); use the default variant");
    if (g.K % 8 != 0) refuse("K must be a multiple of 8 (TMA row strides are whole 16 bytes), got " + std::to_string(g.K));
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (g.M > 0 && !(aligned(g.a) && aligned(g.b) && aligned(g.c)))
        refuse("a, b and c must be 16-byte aligned (TMA bases and paired stores)");
    if (g.M > INT32_MAX || g.E * g.N > INT32_MAX) refuse("rows of a and of b (E * N) must fit TMA's 32-bit coordinates");
    check_grouped_gemm_values(g);
    if (g.M == 0) return;
    Schedule s;
    s.N = g.N, s.E = g.E, s.capacity = g.capacity, s.layout = g.layout, s.offsets = g.offsets, s.counts = g.counts;
    s.tiles_n = (g.N + kBN - 1) / kBN;
    int64_t tiles_m = 0;
    if (g.layout == GemmLayout::Masked) {
        fill_zero(g.c, size_t(g.M * g.N) * sizeof(float));  // rows past each count stay zero
        tiles_m = g.E * ((g.capacity + kBM - 1) / kBM);
    } else {
        tiles_m = (g.M + kBM - 1) / kBM + g.E;  // an upper bound: the kernel stops at the real end
    }
    s.tiles = tiles_m * s.tiles_n;
    if (s.tiles == 0) return;
    const CUtensorMap map_a = bf16_rows_map(g.a, g.M, g.K, kBM);
    const CUtensorMap map_b = bf16_rows_map(g.b, g.E * g.N, g.K, kBN);
    const int64_t sms = multiprocessor_count(current_device());
    const unsigned grid = unsigned(s.tiles < sms ? s.tiles : sms);
    check(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(kSmemBytes)),
          "cudaFuncSetAttribute (grouped_gemm_wgmma shared memory)");
    grouped_gemm_wgmma_kernel<<<grid, kThreads, kSmemBytes, current_stream()>>>(map_a, map_b, g.c, g.K, s);
    check_launch("grouped_gemm (wgmma)");
}

}  // namespace dsperf::cuda
