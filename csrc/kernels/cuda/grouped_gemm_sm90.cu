// Expert grouped GEMM on Hopper's own instructions (sm_90a): c[m, :] = a[m, :] @ b[e(m)]^T, FP32 out,
// grouped_gemm's argument contract (cuda_api.hpp: contiguous and masked layouts) for BF16 x BF16
// and for FP8 x FP8 with 1x128 / 128x128 block scales (DeepGEMM's semantics).
//
// First run on an H200 on 2026-11-26 (benchmarks/gpu_validate.py --hopper; docs/CUDA.md): results
// bit-equal to the mma.sync kernels in BF16 (FP8 within its accumulator's precision), memcheck and
// racecheck clean, BF16 at 93-98% of cuBLAS, FP8 at 73-76% of DeepGEMM's published H800 figure. The
// default on an sm_90 GPU for the calls it takes (dsperf.cuda.grouped_gemm, variant=None).
//
// Design (one CTA per SM, persistent):
// - A K step is one 128-byte row per operand (64 BF16 or 128 FP8): tiles of c are 128 x 256 (BF16)
//   or 128 x 128 (FP8), and K moves through a ring of kStages shared-memory slots, each holding
//   the A tile [128 rows][128 B] and the B tile [256 or 128 rows][128 B] as TMA wrote them
//   (128-byte swizzle, so wgmma reads them without bank conflicts).
// - Warpgroup 0 is the producer: one thread waits for a free slot ("empty" mbarrier), announces
//   the slot's bytes on its "full" mbarrier and issues the two TMA loads. It gives most of its
//   registers to the consumers (setmaxnreg).
// - Warpgroups 1 and 2 are consumers: each owns 64 of the tile's 128 rows, waits for a full slot
//   and issues 4 wgmma on it (BF16 m64n256k16, FP8 m64n128k32). BF16 frees the slot once the NEXT
//   step's products are issued and this step's have completed (wgmma.wait_group 1), so one step
//   of MMAs is always in flight. FP8 finishes each step (one 128-deep scale block) and adds it into
//   FP32 registers times its two scales before the next. The accumulators then go straight from
//   registers to c.
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

// One K step is one 128-byte row of each operand (64 BF16 or 128 FP8 values): exactly the
// 128-byte swizzle's span, so every tile is a stack of 1024-byte swizzle atoms.
constexpr int kBM = 128, kRowBytes = 128;
constexpr int kConsumers = 2;                     // warpgroups of 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);  // producer warpgroup first
constexpr int kAlign = 1024;                      // the 128-byte swizzle's atom

// The two kernels' shapes. BF16: 128 x 256 tiles, 64-deep K steps, m64n256k16 (128 FP32 per thread).
// FP8: 128 x 128 tiles, 128-deep K steps -- one scale block, promoted into a second set of FP32
// registers after each step -- m64n128k32 (2 x 64 FP32 per thread).
struct Bf16Tiles {
    static constexpr int kBN = 256, kBK = 64, kStages = 4, kAcc = 128;
};
struct Fp8Tiles {
    static constexpr int kBN = 128, kBK = 128, kStages = 6, kAcc = 64;
};

template <class T>
struct Ring {
    static constexpr int kABytes = kBM * kRowBytes, kBBytes = T::kBN * kRowBytes;
    static constexpr int kStageBytes = kABytes + kBBytes;  // BF16 48 KB, FP8 32 KB
    static constexpr size_t kSmemBytes = size_t(T::kStages) * kStageBytes + kAlign + 2 * T::kStages * sizeof(uint64_t);
    static_assert(kABytes % kAlign == 0 && kBBytes % kAlign == 0, "tiles must keep the swizzle atoms aligned");
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100 CTA may have");
};

struct Schedule {
    int64_t N = 0, E = 0, capacity = 0, tiles_n = 0, tiles = 0;
    GemmLayout layout = GemmLayout::Contiguous;
    const int64_t* offsets = nullptr;
    const int32_t* counts = nullptr;
};

// FP8's scales (DeepGEMM's layout): a_scale [M, ceil(K/128)], b_scale [E, ceil(N/128), ceil(K/128)].
struct Scales {
    const float* a = nullptr;
    const float* b = nullptr;
};

#ifdef DSPERF_SM90A  // the device code below exists in the sm_90a image only
// Register budget per thread after the hand-over: 128 * 40 + 256 * 232 = 64,512 <= 65,536.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kScaleBlock = 128;  // FP8 scales: 1x128 (a) and 128x128 (b) blocks

struct Tile {
    int64_t expert = 0, row0 = 0, row_end = 0, n0 = 0;
};

enum class TileIs { Work, Empty, PastEnd };

// Tile t of the schedule: its expert, rows [row0, row_end) of a and c, and first column n0. m-tiles
// are numbered expert by expert (ceil(rows_e / 128) each); past the last one every later t is too.
template <int kBN>
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

// The wgmma descriptors of a ring stage's tiles as consumer warpgroup wg reads them: its 64 rows
// of a, and all of b.
template <class T>
__device__ __forceinline__ void stage_descriptors(uint8_t* smem, int stage, int wg, uint64_t& da, uint64_t& db) {
    using R = Ring<T>;
    const uint8_t* a_tile = smem + size_t(stage) * R::kStageBytes + wg * (64 * kRowBytes);
    const uint8_t* b_tile = smem + size_t(stage) * R::kStageBytes + R::kABytes;
    da = sm90::desc_k_major_sw128(a_tile), db = sm90::desc_k_major_sw128(b_tile);
}

// Where a consumer warpgroup stands in the ring; both consumers walk it in step with the producer.
struct RingPos {
    int stage = 0;
    uint32_t phase = 0;
    template <int kStages>
    __device__ void next() {
        if (++stage == kStages) stage = 0, phase ^= 1;
    }
};

// BF16: rows [wg * 64, wg * 64 + 64) of the tile, all 256 columns, one step of MMAs kept in flight.
__device__ __forceinline__ void consume_tile_bf16(uint8_t* smem, uint64_t* full, uint64_t* empty, int wg,
                                                  int64_t ksteps, RingPos& pos, float (&acc)[128]) {
    const bool leader = threadIdx.x % 128 == 0;  // one arrival per consumer warpgroup frees a slot
    int prev = -1;
    for (int64_t ks = 0; ks < ksteps; ++ks) {
        sm90::mbar_wait(&full[pos.stage], pos.phase);
        uint64_t da, db;
        stage_descriptors<Bf16Tiles>(smem, pos.stage, wg, da, db);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)  // 16 BF16 = 32 bytes per MMA: +2 in the address field
            sm90::wgmma_m64n256k16_bf16(acc, da + 2 * kk, db + 2 * kk, ks > 0 || kk > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // the previous step's MMAs are done: its slot may be refilled
        sm90::fence_registers(acc);
        if (prev >= 0 && leader) sm90::mbar_arrive(&empty[prev]);
        prev = pos.stage;
        pos.next<Bf16Tiles::kStages>();
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc);
    if (prev >= 0 && leader) sm90::mbar_arrive(&empty[prev]);
}

// FP8: each 128-deep step is one scale block, so its products are finished (wait_group 0) and added
// into `acc` times a_scale[row, kb] * b_scale[e, n0 / 128, kb] -- DeepGEMM's promotion in FP32,
// which also keeps FP8 sums from running long in the tensor cores' accumulator. The scales are
// loaded while the step's MMAs run.
__device__ __forceinline__ void consume_tile_fp8(uint8_t* smem, uint64_t* full, uint64_t* empty, int wg,
                                                 int64_t K, const Schedule& s, const Scales& sc, const Tile& tile,
                                                 RingPos& pos, float (&part)[64], float (&acc)[64]) {
    const bool leader = threadIdx.x % 128 == 0;
    const int warp = (threadIdx.x % 128) / 32, g = (threadIdx.x % 32) / 4;
    const int64_t r_lo = tile.row0 + wg * 64 + warp * 16 + g, r_hi = r_lo + 8;
    const int64_t kblocks = (K + kScaleBlock - 1) / kScaleBlock, nblocks = (s.N + kScaleBlock - 1) / kScaleBlock;
    const float* sb_row = sc.b + (tile.expert * nblocks + tile.n0 / kScaleBlock) * kblocks;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    for (int64_t kb = 0; kb < kblocks; ++kb) {
        sm90::mbar_wait(&full[pos.stage], pos.phase);
        uint64_t da, db;
        stage_descriptors<Fp8Tiles>(smem, pos.stage, wg, da, db);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)  // 32 FP8 = 32 bytes per MMA: +2 in the address field
            sm90::wgmma_m64n128k32_e4m3(part, da + 2 * kk, db + 2 * kk, kk > 0);
        sm90::wgmma_commit();
        // Rows past the tile's expert may lie past M: their scale is never read (and they are not stored).
        const float sb = sb_row[kb];
        const float s_lo = r_lo < tile.row_end ? sc.a[r_lo * kblocks + kb] * sb : 0.0f;
        const float s_hi = r_hi < tile.row_end ? sc.a[r_hi * kblocks + kb] * sb : 0.0f;
        sm90::wgmma_wait<0>();
        sm90::fence_registers(part);
        if (leader) sm90::mbar_arrive(&empty[pos.stage]);  // the slot is read: refill it at once
        pos.next<Fp8Tiles::kStages>();
#pragma unroll
        for (int j = 0; j < 16; ++j) {  // registers 4 j, 4 j + 1 are row r_lo; 4 j + 2, 4 j + 3 row r_hi
            acc[4 * j] += part[4 * j] * s_lo, acc[4 * j + 1] += part[4 * j + 1] * s_lo;
            acc[4 * j + 2] += part[4 * j + 2] * s_hi, acc[4 * j + 3] += part[4 * j + 3] * s_hi;
        }
    }
}

// Accumulator layout of wgmma m64nNk16 / m64nNk32 (FP32): warp w of the warpgroup holds rows
// 16 w .. 16 w + 15; for lane = 4 g + t, registers 4 j + 0 / 1 are row g at columns 8 j + 2 t / + 1,
// registers 4 j + 2 / 3 row g + 8 at the same columns (the mma.m16n8 pattern every 8 columns).
template <int kAcc>
__device__ __forceinline__ void store_tile(const float (&acc)[kAcc], const Tile& tile, int wg, float* c, int64_t N) {
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t r_lo = tile.row0 + wg * 64 + warp * 16 + g, r_hi = r_lo + 8;
    const bool lo_in = r_lo < tile.row_end, hi_in = r_hi < tile.row_end;
    const bool pairs = N % 2 == 0;  // two adjacent FP32 as one 8-byte store (c is 16-byte aligned)
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
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

// The producer: one thread walks the schedule and fills the ring, a and b tiles per K step.
template <class T>
__device__ __forceinline__ void produce(uint8_t* smem, uint64_t* full, uint64_t* empty, const CUtensorMap& map_a,
                                        const CUtensorMap& map_b, int64_t K, const Schedule& s) {
    using R = Ring<T>;
    const int64_t ksteps = (K + T::kBK - 1) / T::kBK;  // TMA zero-fills K's tail in both operands
    RingPos pos;
    Tile tile;
    for (int64_t t = blockIdx.x; t < s.tiles; t += gridDim.x) {
        const TileIs what = tile_at<T::kBN>(s, t, tile);
        if (what == TileIs::PastEnd) break;
        if (what == TileIs::Empty) continue;
        const int32_t a_row = int32_t(tile.row0), b_row = int32_t(tile.expert * s.N + tile.n0);
        for (int64_t ks = 0; ks < ksteps; ++ks) {
            sm90::mbar_wait(&empty[pos.stage], pos.phase ^ 1);
            uint8_t* slot = smem + size_t(pos.stage) * R::kStageBytes;
            sm90::mbar_arrive_expect_tx(&full[pos.stage], R::kStageBytes);
            sm90::tma_load_2d(slot, &map_a, &full[pos.stage], int32_t(ks * T::kBK), a_row);
            sm90::tma_load_2d(slot + R::kABytes, &map_b, &full[pos.stage], int32_t(ks * T::kBK), b_row);
            pos.next<T::kStages>();
        }
    }
}
#endif  // DSPERF_SM90A

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                              float* c, int64_t K, Schedule s, Scales sc) {
#ifdef DSPERF_SM90A
    using R = Ring<T>;
    extern __shared__ uint8_t gemm_smem_raw[];
    // The dynamic shared memory's base is only 16-byte aligned by the language: round up to the
    // swizzle atom (the slack is in kSmemBytes).
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(gemm_smem_raw) + kAlign - 1) /
                                               kAlign * kAlign);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(T::kStages) * R::kStageBytes);
    uint64_t* empty = full + T::kStages;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        sm90::tma_prefetch_map(&map_a);
        sm90::tma_prefetch_map(&map_b);
        for (int i = 0; i < T::kStages; ++i) {
            sm90::mbar_init(&full[i], 1);            // the producer's expect_tx arrival (+ the bytes)
            sm90::mbar_init(&empty[i], kConsumers);  // one arrival per consumer warpgroup
        }
        sm90::mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {
        sm90::regs_release<kProducerRegs>();
        if (threadIdx.x == 0) produce<T>(smem, full, empty, map_a, map_b, K, s);  // one thread issues every load
        return;
    }
    sm90::regs_claim<kConsumerRegs>();
    RingPos pos;
    Tile tile;
    float acc[T::kAcc];
#pragma unroll
    for (int i = 0; i < T::kAcc; ++i) acc[i] = 0.0f;  // BF16: overwritten by each tile's first MMA (scale_d = 0)
    for (int64_t t = blockIdx.x; t < s.tiles; t += gridDim.x) {
        const TileIs what = tile_at<T::kBN>(s, t, tile);
        if (what == TileIs::PastEnd) break;
        if (what == TileIs::Empty) continue;
        if constexpr (T::kBK == Bf16Tiles::kBK) {
            consume_tile_bf16(smem, full, empty, wg - 1, (K + T::kBK - 1) / T::kBK, pos, acc);
        } else {
            float part[T::kAcc];  // one scale block's products, overwritten by its first MMA
#pragma unroll
            for (int i = 0; i < T::kAcc; ++i) part[i] = 0.0f;
            consume_tile_fp8(smem, full, empty, wg - 1, K, s, sc, tile, pos, part, acc);
        }
        store_tile(acc, tile, wg - 1, c, s.N);
    }
#else
    // The sm_80 image: never launched (the host requires compute capability 9.0).
    (void)map_a, (void)map_b, (void)c, (void)K, (void)s, (void)sc;
    static_assert(T::kBK > 0 && T::kAcc > 0, "the shapes the sm_90a image uses");
    __trap();
#endif
}

}  // namespace

// ---- host side --------------------------------------------------------------------------------------
namespace {
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

}  // namespace

// A row-major matrix [rows, K] of BF16 or FP8 bytes read in boxes of box_rows x 128 bytes with the
// 128-byte swizzle; out-of-range elements read as zero. Declared in sm90_ptx.cuh (mla_decode_sm90.cu
// uses it too).
CUtensorMap rows_map(const void* base, bool fp8, int64_t rows, int64_t K, int box_rows) {
    CUtensorMap map;
    const int elem = fp8 ? 1 : 2;
    const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(K) * elem};  // bytes between rows: a multiple of 16 (checked)
    const cuuint32_t box[2] = {cuuint32_t(kRowBytes / elem), cuuint32_t(box_rows)};
    const cuuint32_t steps[2] = {1, 1};
    const CUresult r = tensor_map_encoder()(
        &map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
        strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ") for a [" +
                                 std::to_string(rows) + ", " + std::to_string(K) + "] " + (fp8 ? "FP8" : "BF16") +
                                 " operand");
    return map;
}

namespace {
[[noreturn]] void refuse(const std::string& why) {
    throw std::invalid_argument("grouped_gemm variant='wgmma': " + why);
}

template <class T>
void launch(const GroupedGemm& g, Schedule s, int64_t tiles_m, bool fp8) {
    using R = Ring<T>;
    s.tiles_n = (g.N + T::kBN - 1) / T::kBN;
    s.tiles = tiles_m * s.tiles_n;
    if (s.tiles == 0) return;
    const CUtensorMap map_a = rows_map(g.a, fp8, g.M, g.K, kBM);
    const CUtensorMap map_b = rows_map(g.b, fp8, g.E * g.N, g.K, T::kBN);
    const int64_t sms = multiprocessor_count(current_device());
    const unsigned grid = unsigned(s.tiles < sms ? s.tiles : sms);
    check(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(R::kSmemBytes)),
          "cudaFuncSetAttribute (grouped_gemm_wgmma shared memory)");
    grouped_gemm_wgmma_kernel<T><<<grid, kThreads, R::kSmemBytes, current_stream()>>>(map_a, map_b, g.c, g.K, s,
                                                                                      Scales{g.a_scale, g.b_scale});
    check_launch("grouped_gemm (wgmma)");
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
    const bool fp8 = g.a_scale != nullptr;
    for (const std::string& bad : {grouped_gemm_wgmma_operands_reason(fp8, g.b_scale != nullptr),
                                   grouped_gemm_wgmma_k_reason(fp8, g.K)})
        if (!bad.empty()) refuse(bad);
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (g.M > 0 && !(aligned(g.a) && aligned(g.b) && aligned(g.c)))
        refuse("a, b and c must be 16-byte aligned (TMA bases and paired stores)");
    if (g.M > INT32_MAX || g.E * g.N > INT32_MAX) refuse("rows of a and of b (E * N) must fit TMA's 32-bit coordinates");
    check_grouped_gemm_values(g);
    if (g.M == 0) return;
    Schedule s;
    s.N = g.N, s.E = g.E, s.capacity = g.capacity, s.layout = g.layout, s.offsets = g.offsets, s.counts = g.counts;
    int64_t tiles_m = 0;
    if (g.layout == GemmLayout::Masked) {
        fill_zero(g.c, size_t(g.M * g.N) * sizeof(float));  // rows past each count stay zero
        tiles_m = g.E * ((g.capacity + kBM - 1) / kBM);
    } else {
        tiles_m = (g.M + kBM - 1) / kBM + g.E;  // an upper bound: the kernel stops at the real end
    }
    if (fp8) launch<Fp8Tiles>(g, s, tiles_m, true);
    else launch<Bf16Tiles>(g, s, tiles_m, false);
}

}  // namespace dsperf::cuda
