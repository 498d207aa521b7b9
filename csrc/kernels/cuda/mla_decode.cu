// Absorbed MLA decode over a paged latent cache, split-KV with a log-sum-exp merge (FlashMLA's
// scheme, written plainly with WMMA).
//
// Every head attends to the same keys [latent | rope] (kv_lora + rope_dim wide) and the values
// are the latent itself, so query rows (q token x head) share every key load. One thread block
// takes 16 query rows of one request and a range of its 64-token blocks (a work item of the plan),
// walks the keys 32 at a time through shared memory, and keeps an online softmax:
//   scores S[16 x 32] = Q K^T      (WMMA, 8 warps: 2 column tiles x 4 slices of the 576-deep sum)
//   P = exp(S * scale - m) in BF16 (the CPU rounds probabilities to BF16 too)
//   O = O * alpha + P V            (WMMA into shared memory, O itself in registers, FP32)
// and writes its normalised partial output and LSE; a second kernel merges a request's partials.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/attention_steps.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/hopper_api.hpp"

namespace dsperf::cuda {
namespace {

constexpr int kRows = int(kMlaRowsPerBlock), kChunk = 32, kThreads = 256, kMaxLatent = 512;

struct Smem {  // offsets into the dynamic shared memory, in bytes
    size_t q, k, spart, p, otmp, stats, total;
    __host__ __device__ Smem(int64_t L, int64_t W) {
        q = 0;
        k = q + size_t(kRows * W) * 2;
        spart = k + size_t(kChunk * W) * 2;
        p = spart + size_t(4 * kRows * kChunk) * 4;
        otmp = p + size_t(kRows * kChunk) * 2;
        stats = otmp + size_t(kRows * L) * 4;
        total = stats + size_t(4 * kRows) * 4;
    }
};

__global__ void __launch_bounds__(kThreads)
    mla_decode_kernel(const uint16_t* q_nope, const uint16_t* q_rope, const void* latent, const float* latent_scale,
                      const uint16_t* rope, const int32_t* block_table, const int32_t* seqlens, const int32_t* items,
                      const int32_t* split_offsets, int64_t q_len, int64_t heads, int64_t L, int64_t R,
                      int64_t block_size, int64_t max_blocks, float scale, float* part_o, float* part_lse) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int64_t W = L + R, QH = q_len * heads;
    const Smem lay(L, W);
    __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem + lay.q);
    __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem + lay.k);
    float* Spart = reinterpret_cast<float*>(smem + lay.spart);
    __nv_bfloat16* Ps = reinterpret_cast<__nv_bfloat16*>(smem + lay.p);
    float* Otmp = reinterpret_cast<float*>(smem + lay.otmp);
    float* m_s = reinterpret_cast<float*>(smem + lay.stats);
    float* l_s = m_s + kRows;
    float* alpha_s = l_s + kRows;
    int* visible_s = reinterpret_cast<int*>(alpha_s + kRows);

    const WorkItemTokens work =
        work_item_tokens(items + 4 * int64_t(blockIdx.x), seqlens, split_offsets, max_blocks, block_size);
    const int64_t b = work.b, split = work.split, len = work.len, t_begin = work.begin, t_end = work.end;
    const int64_t r0 = int64_t(blockIdx.y) * kRows;
    const bool fp8 = latent_scale != nullptr;

    // Queries: rows r0 .. r0 + 15 of request b as [latent part | rope part], zero past QH.
    for (int64_t idx = threadIdx.x; idx < kRows * W; idx += kThreads) {
        const int64_t i = idx / W, d = idx % W, row = r0 + i;
        uint16_t v = 0;
        if (row < QH) v = d < L ? q_nope[(b * QH + row) * L + d] : q_rope[(b * QH + row) * R + (d - L)];
        Qs[idx] = __ushort_as_bfloat16(v);
    }
    if (threadIdx.x < kRows) {
        const int64_t row = r0 + threadIdx.x;
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
        // Query token t sits at position len - q_len + t and sees keys up to it.
        visible_s[threadIdx.x] = row < QH ? int(len - q_len + row / heads + 1) : 0;
    }
    const int my_row = threadIdx.x / 16, lane16 = threadIdx.x % 16;
    const int per_thread = int(L / 16);  // output columns lane16 + 16 j
    // Held in registers: loops over o use the constant bound and test j < per_thread.
    float o[kMaxLatent / 16];
#pragma unroll
    for (int j = 0; j < kMaxLatent / 16; ++j) o[j] = 0.0f;
    const int warp = threadIdx.x / 32;
    __syncthreads();  // the statistics above, before any row reads them

    for (int64_t c0 = t_begin; c0 < t_end; c0 += kChunk) {
        // Keys of tokens c0 .. c0 + 31 from their pages, 8 elements per thread and step (L and R
        // are multiples of 16, the cache bases aligned: checked on the host); FP8 latents are
        // dequantised to BF16 as the CPU does.
        for (int64_t u = threadIdx.x; u < kChunk * W / 8; u += kThreads) {
            const int64_t j = u / (W / 8), d = (u % (W / 8)) * 8, n = c0 + j;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (n < t_end) {
                const int64_t page = block_table[b * max_blocks + n / block_size];
                const int64_t slot = page * block_size + n % block_size;
                if (d >= L) {
                    v = *reinterpret_cast<const uint4*>(rope + slot * R + (d - L));
                } else if (!fp8) {
                    v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(latent) + slot * L + d);
                } else {
                    v = fp8x8_to_bf16x8(
                        *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(latent) + slot * L + d),
                        latent_scale[slot * ((L + 127) / 128) + d / 128]);
                }
            }
            *reinterpret_cast<uint4*>(Ks + j * W + d) = v;
        }
        __syncthreads();
        {  // Scores: warp (nt, kq) sums key columns nt*16.. over every fourth 16-deep slice.
            const int nt = warp % 2, kq = warp / 2;
            wmma_steps::scores_16x16(Qs, Ks + nt * 16 * W, W, int64_t(kq) * 16, 64, W,
                                     Spart + kq * kRows * kChunk + nt * 16, kChunk);
        }
        __syncthreads();
        {  // Online softmax: 16 threads per row, two keys each; shuffles stay within the half warp.
            float x[2];
            for (int h = 0; h < 2; ++h) {
                const int j = lane16 + 16 * h;
                float s = 0.0f;
                for (int kq = 0; kq < 4; ++kq) s += Spart[kq * kRows * kChunk + my_row * kChunk + j];
                const int64_t n = c0 + j;
                x[h] = (n < t_end && n < visible_s[my_row]) ? s * scale : -INFINITY;
            }
            online_softmax_step<16>(x, lane16, m_s[my_row], l_s[my_row], alpha_s[my_row], [&](int h, float p) {
                Ps[my_row * kChunk + lane16 + 16 * h] = __float2bfloat16_rn(p);
            });
        }
        __syncthreads();
        // P V: column tiles of the latent, warp w takes tiles w, w + 8, ...
        for (int64_t tile = warp; tile < L / 16; tile += kThreads / 32)
            wmma_steps::pv_tile<kChunk>(Ps, Ks + tile * 16, W, Otmp + tile * 16, L);
        __syncthreads();
        const float alpha = alpha_s[my_row];
#pragma unroll
        for (int j = 0; j < kMaxLatent / 16; ++j)
            if (j < per_thread) o[j] = o[j] * alpha + Otmp[my_row * L + lane16 + 16 * j];
        // The next chunk's key load overwrites Ks only after every thread passed the P V barrier.
    }
    const int64_t row = r0 + my_row;
    if (row >= QH) return;
    const int64_t slot = split_offsets[b] + split;
    const float l = l_s[my_row];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxLatent / 16; ++j)
        if (j < per_thread) part_o[(slot * QH + row) * L + lane16 + 16 * j] = o[j] * inv;
    if (lane16 == 0) part_lse[slot * QH + row] = l > 0.0f ? m_s[my_row] + logf(l) : -INFINITY;
}

// One block per (request, row): the log-sum-exp merge of the request's partials, as the CPU's.
__global__ void mla_combine_kernel(const float* part_o, const float* part_lse, const int32_t* split_offsets, int64_t QH,
                                   int64_t L, float* out, float* lse) {
    const int64_t br = blockIdx.x, b = br / QH, r = br % QH;
    const int64_t s0 = split_offsets[b], s1 = split_offsets[b + 1];
    float mx = -INFINITY;
    for (int64_t s = s0; s < s1; ++s) mx = fmaxf(mx, part_lse[s * QH + r]);
    double total = 0;
    for (int64_t s = s0; s < s1; ++s) {
        const float ls = part_lse[s * QH + r];
        total += ls == -INFINITY ? 0.0 : exp(double(ls - mx));
    }
    const float merged = mx + float(log(total));
    for (int64_t d = threadIdx.x; d < L; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t s = s0; s < s1; ++s) {
            const float ls = part_lse[s * QH + r];
            if (ls != -INFINITY) acc += expf(ls - merged) * part_o[(s * QH + r) * L + d];
        }
        out[br * L + d] = acc;
    }
    if (threadIdx.x == 0) lse[br] = merged;
}

// Request b's length must cover its q_len queries and fit its block table, and every block it
// uses must lie in the cache. The first problem as b * (max_blocks + 1) + (i + 1), i = -1 for the
// length itself.
__global__ void mla_check_kernel(const int32_t* seqlens, const int32_t* block_table, int64_t batch, int64_t q_len,
                                 int64_t max_blocks, int64_t block_size, int64_t num_blocks,
                                 unsigned long long* first) {
    const int64_t b = blockIdx.x;
    if (b >= batch) return;
    const int64_t len = seqlens[b];
    if (len < q_len || len > max_blocks * block_size) {
        if (threadIdx.x == 0) atomicMin(first, static_cast<unsigned long long>(b * (max_blocks + 1)));
        return;
    }
    for (int64_t i = threadIdx.x; i < (len + block_size - 1) / block_size; i += blockDim.x) {
        const int32_t blk = block_table[b * max_blocks + i];
        if (blk < 0 || blk >= num_blocks)
            atomicMin(first, static_cast<unsigned long long>(b * (max_blocks + 1) + i + 1));
    }
}

void check_inputs(const MlaDecode& d) {
    refuse_in_capture("a device-side value check");
    Scratch<unsigned long long> first(1);
    const unsigned long long none = ~0ull;
    check(cudaMemcpy(first.get(), &none, sizeof none, cudaMemcpyHostToDevice), "copy to the device");
    mla_check_kernel<<<unsigned(d.batch), 128, 0, current_stream()>>>(
        d.seqlens, d.block_table, d.batch, d.q_len, d.max_blocks, d.block_size, d.num_blocks, first.get());
    check(cudaGetLastError(), "mla_decode input check");
    unsigned long long got = 0;
    check(cudaMemcpy(&got, first.get(), sizeof got, cudaMemcpyDeviceToHost), "copy to the host");
    if (got == none) return;
    const int64_t b = int64_t(got / uint64_t(d.max_blocks + 1)), i = int64_t(got % uint64_t(d.max_blocks + 1)) - 1;
    int32_t value = 0;
    if (i < 0) {
        check(cudaMemcpy(&value, d.seqlens + b, sizeof value, cudaMemcpyDeviceToHost), "copy to the host");
        throw std::invalid_argument("seqlens[" + std::to_string(b) + "] = " + std::to_string(value) +
                                    " must lie in [q_len = " + std::to_string(d.q_len) + ", the block table's " +
                                    std::to_string(d.max_blocks * d.block_size) + " tokens]");
    }
    check(cudaMemcpy(&value, d.block_table + b * d.max_blocks + i, sizeof value, cudaMemcpyDeviceToHost),
          "copy to the host");
    throw std::invalid_argument("block_table[" + std::to_string(b) + ", " + std::to_string(i) +
                                "] = " + std::to_string(value) + " is outside the cache's " +
                                std::to_string(d.num_blocks) + " blocks");
}

}  // namespace

void MlaDecode::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("mla_decode: " + what);
    };
    need(batch >= 0 && q_len >= 1 && heads >= 1, "batch >= 0, q_len >= 1 and heads >= 1 are required");
    need(kv_lora >= 16 && kv_lora % 16 == 0 && kv_lora <= kMaxLatent,
         "kv_lora must be a multiple of 16 in [16, 512] (tensor-core tiles), got " + std::to_string(kv_lora));
    need(rope_dim >= 16 && rope_dim % 16 == 0,
         "rope_dim must be a positive multiple of 16, got " + std::to_string(rope_dim));
    need(block_size >= 1 && num_blocks >= 1 && max_blocks >= 1, "the cache and block table must be non-empty");
    need(std::isfinite(softmax_scale) && softmax_scale > 0, "softmax_scale must be positive");
    need(n_items >= batch && n_partials >= batch, "the plan must cover every request");
    need(batch == 0 ||
             (q_nope && q_rope && latent && rope && block_table && seqlens && items && split_offsets && out && lse),
         "every array is required");
    // The key loads move 8 elements at a time.
    need(reinterpret_cast<uintptr_t>(latent) % (latent_scale ? 8 : 16) == 0 &&
             reinterpret_cast<uintptr_t>(rope) % 16 == 0,
         "latent_cache and rope_cache must start at 16-byte aligned addresses");
    // The 64-row variant loads the queries 8 elements at a time too (a DLPack view may be offset).
    need(reinterpret_cast<uintptr_t>(q_nope) % 16 == 0 && reinterpret_cast<uintptr_t>(q_rope) % 16 == 0,
         "q_nope and q_rope must start at 16-byte aligned addresses");
}

// The 64-row mma.sync variant (mla_decode_mma.cu), the default unless DSPERF_MLA_MMA=0 or L % 32 != 0.
bool mla_decode_mma_enabled(int64_t kv_lora);
void mla_decode_mma_launch(const MlaDecode& d, float* part_o, float* part_lse);

void mla_decode(const MlaDecode& d) { mla_decode_with(d, nullptr); }

void mla_decode_with(const MlaDecode& d, MlaBlockLaunch launch) {
    if (d.batch == 0) return;
    if (d.check_values) check_inputs(d);
    const int64_t QH = d.q_len * d.heads, W = d.kv_lora + d.rope_dim;
    const Smem lay(d.kv_lora, W);
    // cudaMalloc / cudaFree per call would synchronise; callers that repeat the call pass a workspace.
    Scratch<float> own_o(d.part_out ? 0 : size_t(d.n_partials * QH * d.kv_lora));
    Scratch<float> own_lse(d.part_lse ? 0 : size_t(d.n_partials * QH));
    float* part_o = d.part_out ? d.part_out : own_o.get();
    float* part_lse = d.part_lse ? d.part_lse : own_lse.get();
    if (launch) {
        launch(d, part_o, part_lse);
    } else if (mla_decode_mma_enabled(d.kv_lora)) {
        mla_decode_mma_launch(d, part_o, part_lse);
    } else {
        check(cudaFuncSetAttribute(mla_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(lay.total)),
              "cudaFuncSetAttribute (mla_decode shared memory)");
        const dim3 grid(unsigned(d.n_items), unsigned((QH + kRows - 1) / kRows));
        mla_decode_kernel<<<grid, kThreads, lay.total, current_stream()>>>(
            d.q_nope, d.q_rope, d.latent, d.latent_scale, d.rope, d.block_table, d.seqlens, d.items, d.split_offsets,
            d.q_len, d.heads, d.kv_lora, d.rope_dim, d.block_size, d.max_blocks, d.softmax_scale, part_o, part_lse);
        check(cudaGetLastError(), "mla_decode");
    }
    mla_combine_kernel<<<unsigned(d.batch * QH), 128, 0, current_stream()>>>(part_o, part_lse, d.split_offsets, QH,
                                                                             d.kv_lora, d.out, d.lse);
    check_launch("mla_decode combine");
}

}  // namespace dsperf::cuda
