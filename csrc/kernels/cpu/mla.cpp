#include "kernels/cpu/mla.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/linear.hpp"

namespace dsperf::kernels {

namespace {

void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

// Attention of rows = Q * H query rows over keys [k0, k1) of one request, with online softmax.
// Writes the unnormalised-then-normalised output and the LSE of this key range.
void attend_range(const bf16_t* qn, const bf16_t* qr, int64_t q_len, int64_t heads, const PagedLatentCache& c,
                  const int32_t* blocks, int64_t seqlen, int64_t k0, int64_t k1, float scale, float* out, float* lse) {
    const int64_t rows = q_len * heads, L = c.kv_lora, R = c.rope_dim, BS = c.block_size;
    std::vector<float> m(static_cast<size_t>(rows), -INFINITY), l(static_cast<size_t>(rows), 0.0f);
    std::vector<float> s(static_cast<size_t>(rows * BS)), o(static_cast<size_t>(rows * L), 0.0f);
    std::vector<bf16_t> p(static_cast<size_t>(rows * BS)), vt(static_cast<size_t>(L * BS));
    for (int64_t start = k0; start < k1;) {
        const int64_t blk = start / BS, off = start % BS;
        const int64_t n = std::min(BS - off, k1 - start);  // keys of this block in range
        const int64_t b = blocks[blk];
        const bf16_t* lat = c.latent + (b * BS + off) * L;
        const bf16_t* rop = c.rope + (b * BS + off) * R;
        // Scores: [rows, n] = q_nope latent^T + q_rope rope^T.
        linear_bf16(qn, L, lat, L, s.data(), n, rows, n, L);
        linear_bf16(qr, R, rop, R, s.data(), n, rows, n, R, /*accumulate=*/true);
        // Online softmax; query token i sits at position seqlen - q_len + i and sees keys up to it.
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t visible = seqlen - q_len + r / heads + 1;  // keys [0, visible)
            float* sr = s.data() + r * n;
            float mx = m[size_t(r)];
            for (int64_t j = 0; j < n; ++j) {
                sr[j] = start + j < visible ? sr[j] * scale : -INFINITY;
                mx = std::max(mx, sr[j]);
            }
            const float correction = mx == -INFINITY ? 1.0f : std::exp(m[size_t(r)] - mx);
            float sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                const float e = mx == -INFINITY ? 0.0f : std::exp(sr[j] - mx);
                sum += e;
                p[size_t(r * n + j)] = f32_to_bf16(e);
            }
            l[size_t(r)] = l[size_t(r)] * correction + sum;
            m[size_t(r)] = mx;
            if (correction != 1.0f)
                for (int64_t d = 0; d < L; ++d) o[size_t(r * L + d)] *= correction;
        }
        // Values are the latent itself: o += p [rows, n] @ latent [n, L], via latent^T [L, n].
        for (int64_t j = 0; j < n; ++j)
            for (int64_t d = 0; d < L; ++d) vt[size_t(d * n + j)] = lat[j * L + d];
        linear_bf16(p.data(), n, vt.data(), n, o.data(), L, rows, L, n, /*accumulate=*/true);
        start += n;
    }
    for (int64_t r = 0; r < rows; ++r) {
        const float inv = l[size_t(r)] > 0 ? 1.0f / l[size_t(r)] : 0.0f;
        for (int64_t d = 0; d < L; ++d) out[r * L + d] = o[size_t(r * L + d)] * inv;
        lse[r] = l[size_t(r)] > 0 ? m[size_t(r)] + std::log(l[size_t(r)]) : -INFINITY;
    }
}

}  // namespace

void mla_decode_absorbed(const bf16_t* q_nope, const bf16_t* q_rope, int64_t batch, int64_t q_len, int64_t heads,
                         const PagedLatentCache& c, const int32_t* block_table, int64_t max_blocks,
                         const int32_t* seqlens, float scale, int64_t num_splits, float* out, float* lse) {
    require(batch >= 0 && q_len >= 1 && heads >= 1, "mla_decode: q_len and heads must be positive");
    require(c.block_size >= 1 && c.kv_lora >= 1 && c.rope_dim >= 1 && c.num_blocks >= 1,
            "mla_decode: the cache shape must be positive");
    require(num_splits >= 1, "num_splits must be >= 1");
    require(std::isfinite(scale) && scale > 0, "softmax_scale must be positive");
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = seqlens[b];
        require(len >= q_len, "seqlens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                  " is shorter than the " + std::to_string(q_len) + " query tokens");
        require(len <= max_blocks * c.block_size, "seqlens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                                      " exceeds the block table's " +
                                                      std::to_string(max_blocks * c.block_size) + " tokens");
        for (int64_t i = 0; i < (len + c.block_size - 1) / c.block_size; ++i) {
            const int32_t blk = block_table[b * max_blocks + i];
            require(blk >= 0 && blk < c.num_blocks, "block_table[" + std::to_string(b) + ", " + std::to_string(i) +
                                                        "] = " + std::to_string(blk) + " is outside the cache's " +
                                                        std::to_string(c.num_blocks) + " blocks");
        }
    }
    const int64_t rows = q_len * heads, L = c.kv_lora;
    // Work items: (request, split). Splits cut the keys into equal ranges; each writes partial
    // outputs merged below by their log-sum-exp.
    std::vector<float> part_out(static_cast<size_t>(batch * num_splits * rows * L));
    std::vector<float> part_lse(static_cast<size_t>(batch * num_splits * rows));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < batch * num_splits; ++item) {
        const int64_t b = item / num_splits, sp = item % num_splits;
        const int64_t len = seqlens[b];
        const int64_t k0 = len * sp / num_splits, k1 = len * (sp + 1) / num_splits;
        float* po = part_out.data() + item * rows * L;
        float* pl = part_lse.data() + item * rows;
        if (k0 == k1) {
            std::fill(po, po + rows * L, 0.0f);
            std::fill(pl, pl + rows, -INFINITY);
            continue;
        }
        attend_range(q_nope + b * rows * L, q_rope + b * rows * c.rope_dim, q_len, heads, c,
                     block_table + b * max_blocks, len, k0, k1, scale, po, pl);
    }
#pragma omp parallel for schedule(static)
    for (int64_t br = 0; br < batch * rows; ++br) {
        const int64_t b = br / rows, r = br % rows;
        float mx = -INFINITY;
        for (int64_t sp = 0; sp < num_splits; ++sp) mx = std::max(mx, part_lse[size_t((b * num_splits + sp) * rows + r)]);
        double total = 0;
        for (int64_t sp = 0; sp < num_splits; ++sp) {
            const float ls = part_lse[size_t((b * num_splits + sp) * rows + r)];
            total += ls == -INFINITY ? 0.0 : std::exp(double(ls - mx));
        }
        const float merged = mx + float(std::log(total));
        float* dst = out + br * L;
        std::fill(dst, dst + L, 0.0f);
        for (int64_t sp = 0; sp < num_splits; ++sp) {
            const float ls = part_lse[size_t((b * num_splits + sp) * rows + r)];
            if (ls == -INFINITY) continue;
            const float w = std::exp(ls - merged);
            const float* src = part_out.data() + ((b * num_splits + sp) * rows + r) * L;
            for (int64_t d = 0; d < L; ++d) dst[d] += w * src[d];
        }
        lse[br] = merged;
    }
}

}  // namespace dsperf::kernels
