#include "kernels/cpu/mla.hpp"

#include "common/require.hpp"

#include "kernels/common/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gemm_avx512.hpp"
#include "kernels/cpu/linear.hpp"

namespace dsperf::kernels {

// Per-thread scratch kept between calls (attend_range's buffers, CC's decompressed keys and values):
// fresh ones were page-faulted and zeroed on every call. Past this size a call frees them at its
// end, so that one long prefill does not hold its buffers for good.
constexpr size_t kKeptBytes = size_t(64) << 20;

namespace {

// Attention of rows = Q * H query rows over keys [k0, k1) of one request, with online softmax: its
// state per row (running max m, sum l and unnormalised output o, L wide), which merge_parts folds
// with the other splits' and softmax_inverse_sum / softmax_lse end. Keys are gathered from their
// pages a chunk of up to kChunk tokens at a time into one
// contiguous [latent | rope] block, then into the VNNI pair layout twice: the whole key as the
// score GEMM's columns and the latent, two tokens at a time, as the value GEMM's rows. Both GEMMs
// run without horizontal sums (a 576-deep score GEMM on the packed kernel summed 16 lanes per
// output at the end of its short K).
void attend_range(const bf16_t* qcat, int64_t q_len, int64_t heads, const PagedLatentCache& c,
                  const int32_t* blocks, int64_t seqlen, int64_t k0, int64_t k1, float scale, float* m, float* l,
                  float* o) {
    constexpr int64_t kChunk = 256;
    const int64_t rows = q_len * heads, L = c.kv_lora, R = c.rope_dim, BS = c.block_size, W = L + R;
    // Per-thread buffers kept between calls (one call per request and split): fresh ones (1.3 MB
    // at 128 heads) are page-faulted and zeroed by the kernel on every call, about a tenth of a
    // decode step's time. Those read before written are reset here; past kKeptBytes (a long
    // prefill's q_len x heads rows) they are freed at the end of the call.
    thread_local std::vector<float> s;
    thread_local std::vector<bf16_t> p, vp, keys, kt;
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows, 0.0f);
    std::fill(o, o + rows * L, 0.0f);
    s.resize(std::max(s.size(), static_cast<size_t>(rows * kChunk)));
    p.resize(std::max(p.size(), static_cast<size_t>(rows * kChunk)));
    vp.resize(std::max(vp.size(), static_cast<size_t>(L * (kChunk + 1))));
    keys.resize(std::max(keys.size(), static_cast<size_t>(kChunk * W)));
    kt.resize(std::max(kt.size(), static_cast<size_t>(kChunk * (W + 1))));
    for (int64_t start = k0; start < k1;) {
        const int64_t n = std::min(kChunk, k1 - start);
        for (int64_t j = 0; j < n; ++j) {  // gather: token start + j from its page
            const int64_t tok = start + j, page = blocks[tok / BS], off = tok % BS;
            bf16_t* key = keys.data() + j * W;
            if (c.latent_fp8) {  // dequantise the FP8 latent to BF16 on the way in
                const fp8_t* q = c.latent_fp8 + (page * BS + off) * L;
                const float* sc = c.latent_scale + (page * BS + off) * ((L + 127) / 128);
                for (int64_t d = 0; d < L; ++d) key[d] = f32_to_bf16(fp8_table()[q[d]] * sc[d / 128]);
            } else {
                const bf16_t* src = c.latent + (page * BS + off) * L;
                std::copy(src, src + L, key);
            }
            std::copy(c.rope + (page * BS + off) * R, c.rope + (page * BS + off + 1) * R, keys.data() + j * W + L);
        }
        // Values in the pair layout: latents of tokens 2i and 2i + 1 interleaved (the zero row
        // completes an odd chunk).
        for (int64_t j = 0; j < n; j += 2)
            pair_rows(keys.data() + j * W, j + 1 < n ? keys.data() + (j + 1) * W : nullptr, L,
                      vp.data() + (j / 2) * L * 2);
        pair_columns(keys.data(), W, n, W, kt.data());
        gemm_bf16_vnni(qcat, W, kt.data(), s.data(), n, rows, n, W, /*accumulate=*/false);
        // Online softmax; query token i sits at position seqlen - q_len + i and sees keys up to it.
        for (int64_t r = 0; r < rows; ++r)
            online_softmax_row(s.data() + r * n, n, start, seqlen - q_len + r / heads + 1, scale, m[r], l[r],
                               p.data() + r * n, o + r * L, L);
        // Values are the latent itself: o += p [rows, n] @ latent [n, L].
        gemm_bf16_vnni(p.data(), n, vp.data(), o, L, rows, L, n, /*accumulate=*/true);
        start += n;
    }
    if (s.size() * sizeof(float) + (p.size() + vp.size() + keys.size() + kt.size()) * sizeof(bf16_t) > kKeptBytes) {
        std::vector<float>().swap(s);
        for (auto* v : {&p, &vp, &keys, &kt}) std::vector<bf16_t>().swap(*v);
    }
}

}  // namespace

// Checks run inside per-element loops: a literal message must not build a std::string each time,
// and computed messages are built only on failure (`if (!cond) require(false, ...)`).
void paged_cache_write(bf16_t* latent, fp8_t* latent_fp8, float* latent_scale, bf16_t* rope, int64_t num_blocks,
                       int64_t BS, int64_t L, int64_t R, const int32_t* block_table, int64_t batch, int64_t max_blocks,
                       const int32_t* request, const int32_t* position, int64_t T, const bf16_t* new_latent,
                       const bf16_t* new_rope) {
    require(num_blocks >= 1 && BS >= 1 && L >= 1 && R >= 1, "paged_cache_write: the cache shape must be positive");
    require(!latent_fp8 || latent_scale, "paged_cache_write: an FP8 latent needs its scales");
    for (int64_t t = 0; t < T; ++t) {
        const auto at = [t](const char* what) { return std::string(what) + "[" + std::to_string(t) + "] = "; };
        if (!(request[t] >= 0 && request[t] < batch))
            require(false, at("requests") + std::to_string(request[t]) + " is outside the block table's " +
                               std::to_string(batch) + " rows");
        if (!(position[t] >= 0 && position[t] < max_blocks * BS))
            require(false, at("positions") + std::to_string(position[t]) + " is outside the request's " +
                               std::to_string(max_blocks * BS) + " slots (block_table columns x block_size)");
        const int32_t blk = block_table[request[t] * max_blocks + position[t] / BS];
        if (!(blk >= 0 && blk < num_blocks))
            require(false, "block_table[" + std::to_string(request[t]) + ", " + std::to_string(position[t] / BS) +
                               "] = " + std::to_string(blk) + " (token " + std::to_string(t) +
                               ") is outside the cache's " + std::to_string(num_blocks) + " blocks");
    }
    const int64_t groups = (L + 127) / 128;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t row = int64_t(block_table[request[t] * max_blocks + position[t] / BS]) * BS + position[t] % BS;
        std::copy(new_rope + t * R, new_rope + (t + 1) * R, rope + row * R);
        if (latent_fp8) act_quant(new_latent + t * L, 1, L, latent_fp8 + row * L, latent_scale + row * groups);
        else std::copy(new_latent + t * L, new_latent + (t + 1) * L, latent + row * L);
    }
}

void mla_decode_absorbed(const bf16_t* q_nope, const bf16_t* q_rope, int64_t batch, int64_t q_len, int64_t heads,
                         const PagedLatentCache& c, const int32_t* block_table, int64_t max_blocks,
                         const int32_t* seqlens, float scale, int64_t num_splits, float* out, float* lse) {
    require(batch >= 0 && q_len >= 1 && heads >= 1, "mla_decode: q_len and heads must be positive");
    require(c.block_size >= 1 && c.kv_lora >= 1 && c.rope_dim >= 1 && c.num_blocks >= 1,
            "mla_decode: the cache shape must be positive");
    require((c.latent != nullptr) != (c.latent_fp8 != nullptr) && (!c.latent_fp8 || c.latent_scale),
            "mla_decode: give the latent in BF16, or in FP8 with its scales");
    require(num_splits >= 1, "num_splits must be >= 1");
    require(std::isfinite(scale) && scale > 0, "softmax_scale must be positive");
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = seqlens[b];
        if (!(len >= q_len)) require(false, "seqlens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                  " is shorter than the " + std::to_string(q_len) + " query tokens");
        if (!(len <= max_blocks * c.block_size)) require(false, "seqlens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                                      " exceeds the block table's " +
                                                      std::to_string(max_blocks * c.block_size) + " tokens");
        for (int64_t i = 0; i < (len + c.block_size - 1) / c.block_size; ++i) {
            const int32_t blk = block_table[b * max_blocks + i];
            if (!(blk >= 0 && blk < c.num_blocks)) require(false, "block_table[" + std::to_string(b) + ", " + std::to_string(i) +
                                                        "] = " + std::to_string(blk) + " is outside the cache's " +
                                                        std::to_string(c.num_blocks) + " blocks");
        }
    }
    const int64_t rows = q_len * heads, L = c.kv_lora, W = L + c.rope_dim;
    // Queries as [rows, latent | rope], the layout of the gathered keys.
    std::vector<bf16_t> qcat(static_cast<size_t>(batch * rows * W));
    for (int64_t i = 0; i < batch * rows; ++i) {
        std::copy(q_nope + i * L, q_nope + (i + 1) * L, qcat.data() + i * W);
        std::copy(q_rope + i * c.rope_dim, q_rope + (i + 1) * c.rope_dim, qcat.data() + i * W + L);
    }
    // Work items: (request, split). Splits cut the keys into equal ranges; each leaves its softmax
    // state, folded below by merge_parts (the MQA core's own split merge). A split without keys
    // leaves m = -inf and l = 0, and weighs nothing.
    const int64_t parts = batch * num_splits;
    std::vector<float> part_m(static_cast<size_t>(parts * rows)), part_l(static_cast<size_t>(parts * rows));
    std::vector<float> part_o(static_cast<size_t>(parts * rows * L));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < parts; ++item) {
        const int64_t b = item / num_splits, sp = item % num_splits;
        const int64_t len = seqlens[b];
        const int64_t k0 = len * sp / num_splits, k1 = len * (sp + 1) / num_splits;
        float *pm = part_m.data() + item * rows, *pl = part_l.data() + item * rows, *po = part_o.data() + item * rows * L;
        if (k0 == k1) {
            std::fill(pm, pm + rows, -INFINITY);
            std::fill(pl, pl + rows, 0.0f);
            std::fill(po, po + rows * L, 0.0f);
            continue;
        }
        attend_range(qcat.data() + b * rows * W, q_len, heads, c, block_table + b * max_blocks, len, k0, k1, scale,
                     pm, pl, po);
    }
    std::vector<float> m(static_cast<size_t>(batch * rows), -INFINITY), l(static_cast<size_t>(batch * rows), 0.0f);
    std::fill(out, out + batch * rows * L, 0.0f);
#pragma omp parallel for schedule(static) if (worth_threads(batch * rows * num_splits * L))
    for (int64_t br = 0; br < batch * rows; ++br) {
        const int64_t b = br / rows, r = br % rows, first = b * num_splits * rows;
        merge_parts(r, rows, L, num_splits, part_m.data() + first, part_l.data() + first, part_o.data() + first * L,
                    m.data() + b * rows, l.data() + b * rows, out + b * rows * L);
        const float inv = softmax_inverse_sum(l[size_t(br)]);
        for (int64_t d = 0; d < L; ++d) out[br * L + d] *= inv;
        lse[br] = softmax_lse(m[size_t(br)], l[size_t(br)]);
    }
}

}  // namespace dsperf::kernels

// ---- the five execution variants -----------------------------------------------------------------
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/elementwise.hpp"

namespace dsperf::kernels {

namespace {

std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
    std::vector<bf16_t> out(v.size());
    const int64_t n = int64_t(v.size());
#pragma omp parallel for schedule(static) if (worth_threads(n))
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = f32_to_bf16(v[size_t(i)]);
    return out;
}

// y = x w^T rounded to BF16 (a BF16 nn.Linear).
std::vector<bf16_t> linear_to_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, int64_t M, int64_t N,
                                   int64_t K) {
    std::vector<float> y(static_cast<size_t>(M * N));
    linear_bf16(x, ldx, w, ldw, y.data(), N, M, N, K);
    return to_bf16(y);
}

// Per head h, on the calling thread: y[t, :n] = x[t, :k] B_h (B_h in gemm_bf16_vnni's pair layout, or
// w_h^T for row-major w_h), rounded to BF16 into dst[t * ld_dst + h * n ...]. The heads run across
// the threads, one region for all of them: 16 heads' small GEMMs (M = tokens) each on both threads
// cost 16 forks and joins, 16 fresh outputs and their copies (A_CC prefill on an AMX Xeon, 128 tokens:
// the absorption 3.7 ms and the values' products 1.0 ms, each more than the attention core's 1.4).
template <class HeadGemm>
void per_head_to_bf16(int64_t H, int64_t T, int64_t n, bf16_t* dst, int64_t ld_dst, const HeadGemm& gemm) {
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < H; ++h) {
        thread_local std::vector<float> y;
        y.resize(static_cast<size_t>(T * n));
        gemm(h, y.data());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < n; ++c) dst[t * ld_dst + h * n + c] = f32_to_bf16(y[size_t(t * n + c)]);
        if (y.size() * sizeof(float) > kKeptBytes) std::vector<float>().swap(y);  // as attend_range's buffers
    }
}

// q_abs[t, h, :] = q_nope[t, h, :] W_UK_h: the run-time absorption, FP32 sums rounded to BF16. W_UK_h
// ([nope, kv_lora], row-major) is already B's K x N: its rows go into the pair layout two at a time
// (128 KB a head), and the product is the GEMM the cost models list (M = tokens, N = kv_lora, K = nope).
std::vector<bf16_t> absorb_queries(const MlaWeights& w, const bf16_t* q, int64_t T) {
    const int64_t H = w.heads, N = w.nope, R = w.rope, V = w.v, L = w.kv_lora;
    std::vector<bf16_t> q_abs(static_cast<size_t>(T * H * L));
    per_head_to_bf16(H, T, L, q_abs.data(), H * L, [&](int64_t h, float* y) {
        thread_local std::vector<bf16_t> uk;
        uk.resize(static_cast<size_t>((N + 1) / 2 * L * 2));
        const bf16_t* w_uk = w.wkv_b + h * (N + V) * L;
        for (int64_t i = 0; i < N; i += 2)
            pair_rows(w_uk + i * L, i + 1 < N ? w_uk + (i + 1) * L : nullptr, L, uk.data() + (i / 2) * L * 2);
        gemm_bf16_vnni(q + h * (N + R), H * (N + R), uk.data(), y, L, T, L, N, false);
    });
    return q_abs;
}

}  // namespace

void MlaWeights::validate(MlaVariant variant) const {
    require(wq_a && q_norm && wq_b && wkv_a && kv_norm && wkv_b && wo, "MLA weights: every matrix is required");
    require(dim > 0 && heads > 0 && q_lora > 0 && kv_lora > 0 && nope > 0 && rope > 0 && v > 0,
            "MLA weights: every size must be positive");
    require(rope % 2 == 0, "MLA weights: rope must be even");
    require(variant != MlaVariant::AM_CC_ME || (q_absorb && o_absorb),
            "AM_CC_ME needs the materialised q_absorb and o_absorb (mla_absorb_weights)");
}

void mla_absorb_weights(const MlaWeights& w, bf16_t* q_absorb, bf16_t* o_absorb) {
    const int64_t H = w.heads, L = w.kv_lora, N = w.nope, V = w.v, QL = w.q_lora, D = w.dim;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < H; ++h) {
        // q_absorb_h[c, j] = sum_i W_UK_h[i, c] * wq_b_nope_h[i, j]
        std::vector<float> acc(static_cast<size_t>(L * QL), 0.0f);
        for (int64_t i = 0; i < N; ++i) {
            const bf16_t* uk = w.wkv_b + (h * (N + V) + i) * L;
            const bf16_t* qb = w.wq_b + (h * (N + w.rope) + i) * QL;
            for (int64_t c = 0; c < L; ++c) {
                const float u = bf16_to_f32(uk[c]);
                float* row = acc.data() + c * QL;
                for (int64_t j = 0; j < QL; ++j) row[j] += u * bf16_to_f32(qb[j]);
            }
        }
        for (int64_t c = 0; c < L; ++c)
            for (int64_t j = 0; j < QL; ++j) q_absorb[(h * L + c) * QL + j] = f32_to_bf16(acc[size_t(c * QL + j)]);
        // o_absorb[d, h * L + c] = sum_i wo[d, h * V + i] * W_UV_h[i, c]
        std::vector<float> oacc(static_cast<size_t>(D * L), 0.0f);
        for (int64_t i = 0; i < V; ++i) {
            const bf16_t* uv = w.wkv_b + (h * (N + V) + N + i) * L;
            for (int64_t d = 0; d < D; ++d) {
                const float wo = bf16_to_f32(w.wo[d * H * V + h * V + i]);
                float* row = oacc.data() + d * L;
                for (int64_t c = 0; c < L; ++c) row[c] += wo * bf16_to_f32(uv[c]);
            }
        }
        for (int64_t d = 0; d < D; ++d)
            for (int64_t c = 0; c < L; ++c) o_absorb[d * H * L + h * L + c] = f32_to_bf16(oacc[size_t(d * L + c)]);
    }
}

void mla_decompress(const MlaWeights& w, const MlaSequenceCache& c, int64_t r0, int64_t r1, bf16_t* k_full,
                    bf16_t* v_full) {
    const int64_t H = w.heads, N = w.nope, R = w.rope, V = w.v, L = w.kv_lora, rows = r1 - r0;
    if (rows <= 0) return;
    // kv = latent wkv_b^T: [rows, heads * (nope + v)], per head nope keys then values; a chunk of
    // rows at a time. The whole product of a long cache (8,192 rows at 16 heads: 134 MB of FP32,
    // then 67 MB of BF16) was a fresh allocation above malloc's mmap threshold on every call,
    // page-faulted and zeroed each time: it cost more than the GEMM. Near-equal chunks of at least
    // 128 rows keep every chunk on the GEMM path a whole call would take (32 rows and more).
    constexpr int64_t kChunkRows = 256;
    const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows, per_chunk = (rows + chunks - 1) / chunks;
    for (int64_t c0 = 0; c0 < rows; c0 += per_chunk) {
        const int64_t n = std::min(per_chunk, rows - c0);
        const std::vector<bf16_t> kv = linear_to_bf16(c.latent + (r0 + c0) * L, L, w.wkv_b, L, n, H * (N + V), L);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t r = c0 + i;
            for (int64_t h = 0; h < H; ++h) {
                const bf16_t* src = kv.data() + (i * H + h) * (N + V);
                bf16_t* k = k_full + (r * H + h) * (N + R);
                std::copy(src, src + N, k);
                std::copy(c.k_pe + (r0 + r) * R, c.k_pe + (r0 + r + 1) * R, k + N);
                std::copy(src + N, src + N + V, v_full + (r * H + h) * V);
            }
        }
    }
}

void mla_prolog(const MlaWeights& w, const bf16_t* x, int64_t T, const int32_t* pos, const float* freqs, bf16_t* qa,
                bf16_t* q, bf16_t* latent, bf16_t* k_pe) {
    w.validate(MlaVariant::CC);
    require(T >= 0, "mla_prolog: tokens must be >= 0");
    const int64_t H = w.heads, N = w.nope, R = w.rope, L = w.kv_lora, QL = w.q_lora, D = w.dim;
    if (T == 0) return;
    // Query path: x -> wq_a -> q_norm -> wq_b; RoPE on the rope part of each head.
    const std::vector<bf16_t> qa_raw = linear_to_bf16(x, D, w.wq_a, D, T, QL, D);
    rmsnorm(qa_raw.data(), w.q_norm, qa, T, QL, w.eps);
    const std::vector<bf16_t> qb = linear_to_bf16(qa, QL, w.wq_b, QL, T, H * (N + R), QL);
    std::copy(qb.begin(), qb.end(), q);
    rope_inplace(q + N, T, H, H * (N + R), N + R, pos, freqs, R);
    // KV path: x -> wkv_a -> [latent | k_pe]; kv_norm on the latent; RoPE on k_pe.
    const std::vector<bf16_t> kva = linear_to_bf16(x, D, w.wkv_a, D, T, L + R, D);
    std::vector<bf16_t> raw(static_cast<size_t>(T * L));
    for (int64_t t = 0; t < T; ++t) {
        std::copy(kva.data() + t * (L + R), kva.data() + t * (L + R) + L, raw.data() + t * L);
        std::copy(kva.data() + t * (L + R) + L, kva.data() + (t + 1) * (L + R), k_pe + t * R);
    }
    rmsnorm(raw.data(), w.kv_norm, latent, T, L, w.eps);
    rope_inplace(k_pe, T, 1, R, R, pos, freqs, R);
}

void mla_forward(MlaVariant variant, const MlaWeights& w, const bf16_t* x, int64_t T, const float* freqs, float scale,
                 MlaSequenceCache& c, float* y) {
    w.validate(variant);
    require(T >= 1, "mla_forward: tokens must be >= 1");
    require(c.latent && c.k_pe && c.prefix >= 0 && c.prefix + T <= c.capacity,
            "mla_forward: the cache has no room for the new tokens");
    require(variant != MlaVariant::CD || (c.k_full && c.v_full), "CD needs the decompressed K/V cache");
    const int64_t H = w.heads, N = w.nope, R = w.rope, V = w.v, L = w.kv_lora, QL = w.q_lora, D = w.dim;
    const int64_t P = c.prefix, total = P + T;
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(P + t);

    std::vector<bf16_t> qa(static_cast<size_t>(T * QL)), q(static_cast<size_t>(T * H * (N + R)));
    mla_prolog(w, x, T, pos.data(), freqs, qa.data(), q.data(), c.latent + P * L, c.k_pe + P * R);

    AttentionArgs a;
    a.q_len = T, a.kv_len = total, a.heads = H, a.scale = scale, a.causal_offset = P;
    std::vector<float> o;           // attention output
    std::vector<bf16_t> attn_out;   // [T, heads * v] for wo
    if (variant == MlaVariant::CD || variant == MlaVariant::CC) {
        // Multi-head attention over decompressed keys [nope | rope] and values.
        // CC's keys and values of the whole cache, decompressed on every call, in per-thread buffers
        // kept between calls (fresh ones were page-faulted and zeroed each time, as in attend_range);
        // past kKeptBytes (42 MB at 4,096 tokens and 16 heads) they are freed after the call.
        thread_local std::vector<bf16_t> kf, vf;
        const bf16_t *K = c.k_full, *Vv = c.v_full;
        if (variant == MlaVariant::CD) {
            mla_decompress(w, c, P, total, c.k_full + P * H * (N + R), c.v_full + P * H * V);
        } else {
            kf.resize(std::max(kf.size(), static_cast<size_t>(total * H * (N + R))));
            vf.resize(std::max(vf.size(), static_cast<size_t>(total * H * V)));
            mla_decompress(w, c, 0, total, kf.data(), vf.data());
            K = kf.data(), Vv = vf.data();
        }
        a.kv_heads = H, a.q1 = q.data(), a.k1 = K, a.d1 = N + R, a.v = Vv, a.dv = V;
        o.resize(static_cast<size_t>(T * H * V));
        attention(a, o.data(), nullptr);
        attn_out = to_bf16(o);
        if ((kf.size() + vf.size()) * sizeof(bf16_t) > kKeptBytes) {
            std::vector<bf16_t>().swap(kf);
            std::vector<bf16_t>().swap(vf);
        }
    } else {
        // Absorbed: queries in latent space, multi-query attention over [latent | k_pe].
        std::vector<bf16_t> q_abs(static_cast<size_t>(T * H * L));
        if (variant == MlaVariant::AM_CC_ME) {
            q_abs = linear_to_bf16(qa.data(), QL, w.q_absorb, QL, T, H * L, QL);
        } else {
            q_abs = absorb_queries(w, q.data(), T);
        }
        std::vector<bf16_t> q_pe(static_cast<size_t>(T * H * R));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
                std::copy(q.data() + (t * H + h) * (N + R) + N, q.data() + (t * H + h + 1) * (N + R),
                          q_pe.data() + (t * H + h) * R);
        std::vector<bf16_t> qcat, kcat;
        a.kv_heads = 1, a.v = c.latent, a.dv = L;
        if (variant == MlaVariant::A_CC) {
            // The concatenating form: q = [q_abs | q_pe] per head, k = [latent | k_pe] per token.
            qcat.resize(static_cast<size_t>(T * H * (L + R)));
            kcat.resize(static_cast<size_t>(total * (L + R)));
            for (int64_t i = 0; i < T * H; ++i) {
                std::copy(q_abs.data() + i * L, q_abs.data() + (i + 1) * L, qcat.data() + i * (L + R));
                std::copy(q_pe.data() + i * R, q_pe.data() + (i + 1) * R, qcat.data() + i * (L + R) + L);
            }
            for (int64_t n = 0; n < total; ++n) {
                std::copy(c.latent + n * L, c.latent + (n + 1) * L, kcat.data() + n * (L + R));
                std::copy(c.k_pe + n * R, c.k_pe + (n + 1) * R, kcat.data() + n * (L + R) + L);
            }
            a.q1 = qcat.data(), a.k1 = kcat.data(), a.d1 = L + R;
        } else {
            a.q1 = q_abs.data(), a.k1 = c.latent, a.d1 = L, a.q2 = q_pe.data(), a.k2 = c.k_pe, a.d2 = R;
        }
        o.resize(static_cast<size_t>(T * H * L));
        attention(a, o.data(), nullptr);
        const std::vector<bf16_t> o_lat = to_bf16(o);
        if (variant == MlaVariant::AM_CC_ME) {
            linear_bf16(o_lat.data(), H * L, w.o_absorb, H * L, y, D, T, D, H * L);
            return;
        }
        // Per head: o_h = o_lat_h W_UV_h^T (W_UV_h is [v, kv_lora], already [out, in]).
        attn_out.resize(static_cast<size_t>(T * H * V));
        per_head_to_bf16(H, T, V, attn_out.data(), H * V, [&](int64_t h, float* yh) {
            linear_bf16(o_lat.data() + h * L, H * L, w.wkv_b + (h * (N + V) + N) * L, L, yh, V, T, V, L);
        });
    }
    linear_bf16(attn_out.data(), H * V, w.wo, H * V, y, D, T, D, H * V);
}

}  // namespace dsperf::kernels
