// Absorbed MLA decode on Hopper's own instructions (sm_90a): mla_decode's argument contract
// (cuda_api.hpp's MlaDecode, the same split-KV work items from mla_plan.hpp and the same merge of
// partial results, mla_decode.cu), for DeepSeek's shapes (kv_lora 512, rope 64, 64-token blocks)
// over a BF16 latent cache, or an FP8 one with its scales (one per 128 values).
//
// First run on an H200 on 2026-11-26 (benchmarks/gpu_validate.py --hopper; docs/CUDA.md): results
// within 2.3e-3 of the CPU's on every checked case, memcheck and racecheck clean; at B=128, s=4096,
// h=128, BF16 cache, 450 us = 325 TFLOPS (49% of FlashMLA's published 660), 3.6x the mma.sync
// kernel. The default on an sm_90 GPU for DeepSeek's shapes (dsperf.cuda.mla_decode, variant=None).
//
// Design (one CTA per work item and 64 query rows, 3 warpgroups; the row tiles of one item adjacent
// in launch order, so that they share its pages through L2):
// - Shared memory holds the 64 query rows [latent 512 | rope 64] and a ring of 2 key tiles, each one
//   64-token block of the page table [latent | rope], all as TMA boxes of 64 rows x 128 bytes with
//   the 128-byte swizzle (9 boxes, 72 KB per tile), and the probabilities P [64 x 64] BF16.
// - Warpgroup 0 is the producer: one thread loads the queries once, then for each block of the work
//   item waits for a free slot ("empty" mbarrier), announces its bytes on the "full" mbarrier and
//   issues the 9 TMA loads at the block's page. It gives most of its registers to the consumers.
// - Warpgroups 1 and 2 are consumers. Consumer c computes the scores of tokens 32c .. 32c + 31 of
//   the block, S = Q K^T over the 576-deep sum (36 wgmma m64n32k16, Q and K from shared memory);
//   the two exchange row maxima and row sums through shared memory (named barriers), each writes
//   its half of P (BF16, as the CPU rounds it) into the shared P tile, and then each accumulates
//   its 256 of the 512 output columns, O[:, 256c ..] = O * alpha + P V, with 4 wgmma m64n256k16
//   reading P (K-major) and V -- the first 512 columns of the same key tile, read MN-major -- from
//   shared memory. O stays in registers (128 FP32 per thread) until the normalised partial output
//   and its log-sum-exp are written, as mla_decode.cu's kernels write theirs.
// - The two consumers work in lock step on the same page (no ping-pong of one's softmax against the
//   other's P V: a second P tile does not fit beside Q and the ring), and a page's scores are
//   issued after the previous page's P V (no look-ahead: with 2 slots, issuing the next page's
//   scores before this page's softmax would wait for its load at every page).
// - Tokens of the last block past the work item's end may hold anything (NaN included): each
//   consumer zeroes those rows of its own V columns, both before either's score MMAs (their P is 0),
//   and their scores are masked by selection, never by multiplication.
// - FP8 cache (kFp8): a slot holds the page's latent as FP8 (4 boxes of 128 values, 40 KB with the
//   BF16 rope box); both consumers dequantise it (fp8 * scale, rounded to BF16, as the CPU and the
//   mma.sync kernel do) into one BF16 tile laid out as the BF16 slots are, and the products read
//   that. The tile is rewritten only after both consumers' P V on it; the slot is freed as soon as
//   the page's scores are done.
#include <cuda.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_steps.cuh"
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/hopper_api.hpp"
#include "kernels/cuda/sm90_ptx.cuh"

namespace dsperf::cuda {
namespace {

constexpr int kRows = 64, kBlock = 64, kLatent = 512, kRope = 64;
constexpr int kBox = 64 * 128;                            // one TMA box: 64 rows x 128 bytes
constexpr int kLatentBoxes = kLatent / 64, kBoxes = kLatentBoxes + kRope / 64;  // 8 + 1
constexpr int kTileBytes = kBoxes * kBox;                 // 72 KB: Q, or one block's keys
constexpr int kStages = 2, kThreads = 384, kAlign = 1024;
// Byte offsets from the 1024-aligned base: Q, the key ring, (FP8: the page's latent dequantised to
// BF16), P, the row maxima and sums exchanged by the consumers, the mbarriers. A ring slot holds a
// page as TMA wrote it: BF16, 8 latent boxes + 1 rope box; FP8, 4 latent boxes of 128 FP8 + 1 rope.
template <bool kFp8>
struct Lay {
    static constexpr int kLoadedBoxes = kFp8 ? kLatent / 128 : kLatentBoxes;  // latent boxes per slot
    static constexpr int kStageBytes = (kLoadedBoxes + kRope / 64) * kBox;
    static constexpr int kQ = 0, kRing = kTileBytes, kDeq = kRing + kStages * kStageBytes,
                         kP = kDeq + (kFp8 ? kLatentBoxes * kBox : 0), kRed = kP + kRows * 128,
                         kBars = kRed + 4 * kRows * 4, kEnd = kBars + (2 * kStages + 1) * 8;
    static constexpr size_t kSmemBytes = size_t(kEnd) + kAlign;
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100 CTA may have");
    static_assert(kQ % kAlign == 0 && kRing % kAlign == 0 && kDeq % kAlign == 0 && kP % kAlign == 0 &&
                      kStageBytes % kAlign == 0 && kRed % 16 == 0 && kBars % 8 == 0,
                  "tiles must keep the swizzle atoms aligned, the barriers 8 bytes");
};

struct Args {
    const float* latent_scale;  // FP8 cache: [blocks, 64, 4] (one scale per 128 latent values)
    const int32_t* block_table;
    const int32_t* seqlens;
    const int32_t* items;
    const int32_t* split_offsets;
    int64_t q_len, heads, max_blocks;
    float scale;
    float* part_o;
    float* part_lse;
};

#ifdef DSPERF_SM90A
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 * 40 + 256 * 232 <= 65,536

// The work item's token range [t_begin, t_end) (work_item_tokens) and its first block.
// CTAs are numbered row tile fastest (blockIdx.x = item * tiles + tile): the row tiles of one work
// item run side by side and read its pages once from HBM, then from L2.
struct Range {
    int64_t b, split, len, t_begin, t_end, first_block, blocks, r0;
    __device__ Range(const Args& a) {
        const int64_t tiles = (a.q_len * a.heads + kRows - 1) / kRows;
        r0 = int64_t(blockIdx.x) % tiles * kRows;
        const WorkItemTokens w = work_item_tokens(a.items + 4 * (int64_t(blockIdx.x) / tiles), a.seqlens,
                                                  a.split_offsets, a.max_blocks, kBlock);
        b = w.b, split = w.split, len = w.len, t_begin = w.begin, t_end = w.end;
        first_block = t_begin / kBlock;
        blocks = t_begin < t_end ? (t_end - first_block * kBlock + kBlock - 1) / kBlock : 0;
    }
};

template <bool kFp8>
__device__ __forceinline__ void produce(uint8_t* smem, uint64_t* full, uint64_t* empty, uint64_t* qbar,
                                        const CUtensorMap& mq, const CUtensorMap& mqr, const CUtensorMap& mk,
                                        const CUtensorMap& mkr, const Args& a, const Range& r) {
    const int32_t qrow = int32_t(r.b * a.q_len * a.heads + r.r0);
    using L = Lay<kFp8>;
    sm90::mbar_arrive_expect_tx(qbar, kTileBytes);
    for (int c = 0; c < kLatentBoxes; ++c) sm90::tma_load_2d(smem + L::kQ + c * kBox, &mq, qbar, c * 64, qrow);
    sm90::tma_load_2d(smem + L::kQ + kLatentBoxes * kBox, &mqr, qbar, 0, qrow);
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t i = 0; i < r.blocks; ++i) {
        sm90::mbar_wait(&empty[stage], phase ^ 1);
        const int32_t row = a.block_table[r.b * a.max_blocks + r.first_block + i] * kBlock;
        uint8_t* tile = smem + L::kRing + stage * L::kStageBytes;
        sm90::mbar_arrive_expect_tx(&full[stage], L::kStageBytes);
        for (int c = 0; c < L::kLoadedBoxes; ++c)  // a box is 128 bytes wide: 64 BF16 or 128 FP8
            sm90::tma_load_2d(tile + c * kBox, &mk, &full[stage], c * (kFp8 ? 128 : 64), row);
        sm90::tma_load_2d(tile + L::kLoadedBoxes * kBox, &mkr, &full[stage], 0, row);
        if (++stage == kStages) stage = 0, phase ^= 1;
    }
}

// Byte offset of P[row][k] (BF16) in the K-major, 128-byte-swizzled P tile: 16-byte chunk k / 8 of
// the row's 128 bytes is stored at chunk (k / 8) ^ (row % 8).
__device__ __forceinline__ int p_offset(int row, int k) {
    return row * 128 + (((k >> 3) ^ (row & 7)) << 4) + (k & 7) * 2;
}

// Two probabilities as a BF16 pair (the lower index in the low half).
__device__ __forceinline__ uint32_t bf16_pair(float a, float b) {
    return uint32_t(to_bf16_bits(a)) | (uint32_t(to_bf16_bits(b)) << 16);
}

template <bool kFp8>
__device__ __forceinline__ void consume(uint8_t* smem, uint64_t* full, uint64_t* empty, uint64_t* qbar, int cw,
                                        const Args& a, const Range& r) {
    using L = Lay<kFp8>;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int lo = warp * 16 + g, hi = lo + 8;  // this thread's two rows of the tile (accumulator layout)
    const int64_t QH = a.q_len * a.heads, r0 = r.r0;
    // Query token q sits at position len - q_len + q and sees keys up to it; rows past QH see none.
    auto visible = [&](int row) {
        const int64_t gr = r0 + row;
        return gr < QH ? r.len - a.q_len + gr / a.heads + 1 : int64_t(0);
    };
    const int64_t vis_lo = visible(lo), vis_hi = visible(hi);
    float* red_max = reinterpret_cast<float*>(smem + L::kRed);  // [2 consumers][64 rows]
    float* red_sum = red_max + 2 * kRows;
    uint8_t* P = smem + L::kP;
    // The latent (K's first 512 columns and V) and rope boxes of the page in a slot: BF16 slots as
    // TMA wrote them; FP8 slots' latent dequantised into one BF16 tile (dequantise below).
    auto latent_of = [&](uint8_t* tile) { return kFp8 ? smem + L::kDeq : tile; };
    auto rope_of = [&](uint8_t* tile) { return tile + L::kLoadedBoxes * kBox; };
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
    sm90::mbar_wait(qbar, 0);  // always, so that no TMA is in flight when the CTA ends
    // Page i in slot st: waited for, and (BF16) its rows past the work item's end zeroed in this
    // consumer's 4 V boxes (16-byte pieces); FP8 pages get theirs zeroed by dequantise.
    auto take = [&](int64_t i, int st, uint32_t ph) {
        sm90::mbar_wait(&full[st], ph);
        uint8_t* tile = smem + L::kRing + st * L::kStageBytes;
        const int valid = int(min(int64_t(kBlock), r.t_end - (r.first_block + i) * kBlock));
        if (!kFp8 && valid < kBlock) {
            const int per_box = (kBlock - valid) * 8;
            for (int u = tid; u < 4 * per_box; u += 128) {
                uint8_t* box = tile + (4 * cw + u / per_box) * kBox;
                *reinterpret_cast<uint4*>(box + valid * 128 + (u % per_box) * 16) = make_uint4(0, 0, 0, 0);
            }
            sm90::fence_proxy_async();
            // Both consumers (the page is the same for both): no score MMA of either reads the rows
            // while they are written.
            sm90::named_barrier(1, 256);
        }
        return tile;
    };
    // FP8: page i's latent (slot `tile`, 4 boxes of 64 rows x 128 FP8, 128-byte swizzle) times its
    // scales into the BF16 tile (8 boxes of 64 rows x 64 BF16, the same swizzle), as the CPU and the
    // mma.sync kernel dequantise (BF16 of fp8 * scale); rows past the work item's end become zeros.
    // Both consumers share the work: 16 FP8 (one 16-byte piece) per thread and step.
    auto dequantise = [&](int64_t i, const uint8_t* tile) {
        uint8_t* deq = smem + L::kDeq;
        const int valid = int(min(int64_t(kBlock), r.t_end - (r.first_block + i) * kBlock));
        const int64_t page = a.block_table[r.b * a.max_blocks + r.first_block + i];
        for (int q = cw * 128 + tid; q < kBlock * (kLatent / 16); q += 256) {
            const int j = q / (kLatent / 16), v16 = q % (kLatent / 16), c = v16 / 8, cc = v16 % 8;
            uint32_t out[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // BF16 pairs of values 2 k, 2 k + 1
            if (j < valid) {
                const uint4 raw = *reinterpret_cast<const uint4*>(tile + c * kBox + j * 128 + ((cc ^ (j & 7)) << 4));
                const float sc = a.latent_scale[(page * kBlock + j) * (kLatent / 128) + c];
                const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    const uint32_t half = w[k / 2] >> (16 * (k % 2));
                    out[k] = uint32_t(to_bf16_bits(fp8_bits_to_f32(uint8_t(half & 0xff)) * sc)) |
                             (uint32_t(to_bf16_bits(fp8_bits_to_f32(uint8_t(half >> 8)) * sc)) << 16);
                }
            }
            // Values c * 128 + cc * 16 .. + 15: BF16 box 2 c + cc / 4, 16-byte pieces 2 (cc % 4) and + 1.
            uint8_t* row = deq + (2 * c + cc / 4) * kBox + j * 128;
            const int piece = 2 * (cc % 4);
            *reinterpret_cast<uint4*>(row + ((piece ^ (j & 7)) << 4)) = make_uint4(out[0], out[1], out[2], out[3]);
            *reinterpret_cast<uint4*>(row + (((piece + 1) ^ (j & 7)) << 4)) =
                make_uint4(out[4], out[5], out[6], out[7]);
        }
    };
    // S[64 x 32] for tokens 32 cw .. of a page: 9 boxes x 4 k-steps of 16 (+32 bytes each), committed
    // as one group and not waited for.
    auto issue_scores = [&](float(&acc)[16], uint8_t* tile) {
        sm90::wgmma_fence();
#pragma unroll
        for (int c = 0; c < kBoxes; ++c) {
            const uint64_t dq = sm90::desc_k_major_sw128(smem + L::kQ + c * kBox);
            const uint8_t* kbox = c < kLatentBoxes ? latent_of(tile) + c * kBox : rope_of(tile);
            const uint64_t dk = sm90::desc_k_major_sw128(kbox + cw * 32 * 128);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) sm90::wgmma_m64n32k16_bf16(acc, dq + 2 * kk, dk + 2 * kk, c > 0 || kk > 0);
        }
        sm90::wgmma_commit();
    };
    // No look-ahead of the next page's scores over this page's softmax: with 2 slots the next page
    // is loaded while this one is used, and issuing its scores early would wait for that load at
    // the start of every page instead of a page later (3 slots do not fit beside Q).
    float s[16];
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t i = 0; i < r.blocks; ++i) {
        uint8_t* tile = take(i, stage, phase);
        if constexpr (kFp8) {
            sm90::named_barrier(1, 256);  // both consumers' previous P V done with the BF16 tile
            dequantise(i, tile);
            sm90::fence_proxy_async();    // the BF16 tile, before wgmma reads it
            sm90::named_barrier(1, 256);
        }
        issue_scores(s, tile);
        sm90::wgmma_wait<0>();
        sm90::fence_registers(s);
        // FP8: the slot is read (its latent dequantised, its rope multiplied): refill it now.
        if (kFp8 && tid == 0) sm90::mbar_arrive(&empty[stage]);
        const int64_t n0 = (r.first_block + i) * kBlock;
        // Registers 4 j + e: row lo, column 8 j + 2 t + e; 4 j + 2 + e: row hi.
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int64_t n = n0 + 32 * cw + 8 * j + 2 * t + e;
                s[4 * j + e] = (n < r.t_end && n < vis_lo) ? s[4 * j + e] * a.scale : -INFINITY;
                s[4 * j + 2 + e] = (n < r.t_end && n < vis_hi) ? s[4 * j + 2 + e] * a.scale : -INFINITY;
                mx_lo = fmaxf(mx_lo, s[4 * j + e]);
                mx_hi = fmaxf(mx_hi, s[4 * j + 2 + e]);
            }
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
        }
        if (t == 0) red_max[cw * kRows + lo] = mx_lo, red_max[cw * kRows + hi] = mx_hi;
        sm90::named_barrier(1, 256);  // both consumers' maxima written
        const float new_lo = fmaxf(m_lo, fmaxf(red_max[lo], red_max[kRows + lo]));
        const float new_hi = fmaxf(m_hi, fmaxf(red_max[hi], red_max[kRows + hi]));
        const float alpha_lo = new_lo == -INFINITY ? 1.0f : __expf(m_lo - new_lo);
        const float alpha_hi = new_hi == -INFINITY ? 1.0f : __expf(m_hi - new_hi);
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int k = 32 * cw + 8 * j + 2 * t;
            const float p0 = new_lo == -INFINITY ? 0.0f : __expf(s[4 * j] - new_lo);
            const float p1 = new_lo == -INFINITY ? 0.0f : __expf(s[4 * j + 1] - new_lo);
            const float p2 = new_hi == -INFINITY ? 0.0f : __expf(s[4 * j + 2] - new_hi);
            const float p3 = new_hi == -INFINITY ? 0.0f : __expf(s[4 * j + 3] - new_hi);
            sum_lo += p0 + p1, sum_hi += p2 + p3;
            *reinterpret_cast<uint32_t*>(P + p_offset(lo, k)) = bf16_pair(p0, p1);
            *reinterpret_cast<uint32_t*>(P + p_offset(hi, k)) = bf16_pair(p2, p3);
        }
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
            sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, off);
            sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, off);
        }
        if (t == 0) red_sum[cw * kRows + lo] = sum_lo, red_sum[cw * kRows + hi] = sum_hi;
        sm90::fence_proxy_async();    // this thread's P writes, before wgmma reads them
        sm90::named_barrier(1, 256);  // P whole, both sums written
        // The same arithmetic in both consumers, so both hold the same m and l.
        l_lo = l_lo * alpha_lo + (red_sum[lo] + red_sum[kRows + lo]);
        l_hi = l_hi * alpha_hi + (red_sum[hi] + red_sum[kRows + hi]);
        m_lo = new_lo, m_hi = new_hi;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            o[4 * j] *= alpha_lo, o[4 * j + 1] *= alpha_lo;
            o[4 * j + 2] *= alpha_hi, o[4 * j + 3] *= alpha_hi;
        }
        sm90::fence_registers(o);  // the rescaling stays before the fence (else ptxas adds its own)
        // O[:, 256 cw ..] += P V: 4 k-steps of 16 tokens; V's 256 columns are boxes 4 cw .. 4 cw + 3.
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            sm90::wgmma_m64n256k16_bf16<1>(
                o, sm90::desc_k_major_sw128(P) + 2 * kk,
                sm90::desc_mn_major_sw128(latent_of(tile) + 4 * cw * kBox + kk * 16 * 128, kBox), 1);
        sm90::wgmma_commit();
        // P V finished before this slot (BF16: V) is freed and the next P written.
        sm90::wgmma_wait<0>();
        sm90::fence_registers(o);
        if (!kFp8 && tid == 0) sm90::mbar_arrive(&empty[stage]);
        if (++stage == kStages) stage = 0, phase ^= 1;
    }
    const int64_t slot = a.split_offsets[r.b] + r.split;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t row = r0 + (h ? hi : lo);
        if (row >= QH) continue;
        const float l = h ? l_hi : l_lo, m = h ? m_hi : m_lo;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* dst = a.part_o + (slot * QH + row) * kLatent + 256 * cw + 2 * t;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
        if (cw == 0 && t == 0) a.part_lse[slot * QH + row] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
}
#endif  // DSPERF_SM90A

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_wgmma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_qr,
                            const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_kr,
                            Args a) {
#ifdef DSPERF_SM90A
    extern __shared__ uint8_t mla_smem_raw[];
    uint8_t* smem =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mla_smem_raw) + kAlign - 1) / kAlign * kAlign);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + Lay<kFp8>::kBars);
    uint64_t* empty = full + kStages;
    uint64_t* qbar = empty + kStages;
    const Range r(a);
    if (threadIdx.x == 0) {
        sm90::tma_prefetch_map(&map_q);
        sm90::tma_prefetch_map(&map_k);
        for (int i = 0; i < kStages; ++i) {
            sm90::mbar_init(&full[i], 1);   // the producer's expect_tx arrival (+ the bytes)
            sm90::mbar_init(&empty[i], 2);  // one arrival per consumer warpgroup
        }
        sm90::mbar_init(qbar, 1);
        sm90::mbar_init_fence();
    }
    __syncthreads();
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        sm90::regs_release<kProducerRegs>();
        if (threadIdx.x == 0) produce<kFp8>(smem, full, empty, qbar, map_q, map_qr, map_k, map_kr, a, r);
        return;
    }
    sm90::regs_claim<kConsumerRegs>();
    consume<kFp8>(smem, full, empty, qbar, wg - 1, a, r);
#else
    // The sm_80 image: never launched (the host requires compute capability 9.0).
    (void)map_q, (void)map_qr, (void)map_k, (void)map_kr, (void)a;
    __trap();
#endif
}

[[noreturn]] void refuse(const std::string& why) { throw std::invalid_argument("mla_decode variant='wgmma': " + why); }

template <bool kFp8>
void launch_as(const MlaDecode& d, float* part_o, float* part_lse) {
    const int64_t QH = d.q_len * d.heads;
    const CUtensorMap map_q = rows_map(d.q_nope, false, d.batch * QH, kLatent, kRows);
    const CUtensorMap map_qr = rows_map(d.q_rope, false, d.batch * QH, kRope, kRows);
    const CUtensorMap map_k = rows_map(d.latent, kFp8, d.num_blocks * kBlock, kLatent, kBlock);
    const CUtensorMap map_kr = rows_map(d.rope, false, d.num_blocks * kBlock, kRope, kBlock);
    const Args a{d.latent_scale, d.block_table, d.seqlens, d.items, d.split_offsets, d.q_len, d.heads,
                 d.max_blocks, d.softmax_scale, part_o, part_lse};
    constexpr size_t smem = Lay<kFp8>::kSmemBytes;
    check(cudaFuncSetAttribute(mla_decode_wgmma_kernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute (mla_decode_wgmma shared memory)");
    const int64_t ctas = d.n_items * ((QH + kRows - 1) / kRows);
    if (ctas > INT32_MAX) refuse("work items x 64-row tiles must fit one grid dimension");
    mla_decode_wgmma_kernel<kFp8>
        <<<unsigned(ctas), kThreads, smem, current_stream()>>>(map_q, map_qr, map_k, map_kr, a);
    check(cudaGetLastError(), "mla_decode (wgmma)");
}

void launch(const MlaDecode& d, float* part_o, float* part_lse) {
    if (d.latent_scale) launch_as<true>(d, part_o, part_lse);
    else launch_as<false>(d, part_o, part_lse);
}

}  // namespace

std::string mla_decode_wgmma_unsupported(const MlaDecode& d) {
    if (d.latent_scale && reinterpret_cast<uintptr_t>(d.latent) % 16 != 0)
        return "an FP8 latent_cache must start at a 16-byte aligned address (TMA)";
    static_assert(kLatent == 512 && kRope == 64 && kBlock == 64, "mla_decode_wgmma_shape_reason's shapes");
    const std::string shape = mla_decode_wgmma_shape_reason(d.kv_lora, d.rope_dim, d.block_size);
    if (!shape.empty()) return shape;
    if (d.num_blocks * kBlock > INT32_MAX || d.batch * d.q_len * d.heads > INT32_MAX)
        return "cache rows and query rows must fit TMA's 32-bit coordinates";
    return "";
}

void mla_decode_wgmma(const MlaDecode& d) {
    const std::string why = wgmma_unsupported_reason(current_device());
    if (!why.empty()) refuse(why);
    const std::string bad = mla_decode_wgmma_unsupported(d);
    if (!bad.empty()) refuse(bad);
    mla_decode_with(d, launch);
}

}  // namespace dsperf::cuda
