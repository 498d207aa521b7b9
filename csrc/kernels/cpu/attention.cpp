#include "kernels/cpu/attention.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "kernels/common/fast_math.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/linear.hpp"

namespace dsperf::kernels {

void AttentionArgs::validate() const {
    require(q_len >= 1 && kv_len >= 1 && heads >= 1, "attention: q_len, kv_len and heads must be positive");
    require(kv_heads == 1 || kv_heads == heads, "attention: kv_heads must be 1 or heads");
    require(q1 && k1 && d1 >= 1 && v && dv >= 1, "attention: q, k and v are required");
    require(!q2 == !k2 && (!q2 || d2 >= 1), "attention: the second key part needs both q2 and k2");
    require(scale > 0 && std::isfinite(scale), "attention: scale must be positive");
    require(causal_offset < 0 || causal_offset + q_len <= kv_len, "attention: causal queries past the last key");
}

namespace {

// The body of online_softmax_row, compiled twice: for the baseline ISA and, where the CPU has it,
// with AVX-512 enabled, so that the compiler vectorises its loops 16 lanes wide (the attention
// kernels call it for every row of every key chunk: in MLA decode it was a fifth of the time).
__attribute__((always_inline)) inline void softmax_row_body(float* s, int64_t n, int64_t k_start, int64_t visible,
                                                            float scale, float& m, float& l, bf16_t* p, float* o,
                                                            int64_t dv) {
    for (int64_t j = 0; j < n; ++j) s[j] = k_start + j < visible ? s[j] * scale : -INFINITY;
    // The running max in 16 partial maxima (one per vector lane), so that the loop vectorises;
    // std::max skips NaN in each and again when they are combined, so the result is the same.
    float part_max[16];
    for (float& v : part_max) v = m;
    int64_t j0 = 0;
    for (; j0 + 16 <= n; j0 += 16)
        for (int t = 0; t < 16; ++t) part_max[t] = std::max(part_max[t], s[j0 + t]);
    float mx = m;
    for (; j0 < n; ++j0) mx = std::max(mx, s[j0]);
    for (float v : part_max) mx = std::max(mx, v);
    // std::max skips NaN, so a NaN score leaves mx alone: with a finite mx its exp is NaN and the
    // NaN reaches l and o. With mx still -inf every score is -inf or NaN (a NaN query, say): none
    // has weight, but the NaN must not become 0 (a finite output from a NaN input), so this rare
    // row is scanned for it.
    const float correction = mx == -INFINITY ? 1.0f : exp_nonpositive(m - mx);
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < n; ++j) s[j] = std::isnan(s[j]) ? NAN : 0.0f;
    } else {
        // exp in its own loop so that it vectorises; the sum and the BF16 rounding after.
        for (int64_t j = 0; j < n; ++j) s[j] = exp_nonpositive(s[j] - mx);
    }
    // 16 partial sums (one per lane of a vector), added at the end: the loop vectorises.
    float part[16] = {};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int t = 0; t < 16; ++t) part[t] += s[j + t];
    float sum = 0;
    for (; j < n; ++j) sum += s[j];
    for (int t = 0; t < 16; ++t) sum += part[t];
    for (j = 0; j < n; ++j) p[j] = f32_to_bf16(s[j]);
    l = l * correction + sum;
    m = mx;
    if (correction != 1.0f)
        for (int64_t d = 0; d < dv; ++d) o[d] *= correction;
}

void softmax_row_baseline(float* s, int64_t n, int64_t k_start, int64_t visible, float scale, float& m, float& l,
                          bf16_t* p, float* o, int64_t dv) {
    softmax_row_body(s, n, k_start, visible, scale, m, l, p, o, dv);
}

#if defined(__x86_64__) || defined(_M_X64)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void softmax_row_avx512(
    float* s, int64_t n, int64_t k_start, int64_t visible, float scale, float& m, float& l, bf16_t* p, float* o,
    int64_t dv) {
    softmax_row_body(s, n, k_start, visible, scale, m, l, p, o, dv);
}
#endif

}  // namespace

void online_softmax_row(float* s, int64_t n, int64_t k_start, int64_t visible, float scale, float& m, float& l,
                        bf16_t* p, float* o, int64_t dv) {
#if defined(__x86_64__) || defined(_M_X64)
    if (use_avx512()) return softmax_row_avx512(s, n, k_start, visible, scale, m, l, p, o, dv);
#endif
    softmax_row_baseline(s, n, k_start, visible, scale, m, l, p, o, dv);
}

namespace {

// The rows of one head (MHA): rows = q_len, strided across the heads.
struct Group {
    const bf16_t *q1, *k1, *q2, *k2, *v;
    int64_t ldq1, ldk1, ldq2, ldk2, ldv;  // row strides
    int64_t rows;
    float* out;
    int64_t ldo;
    float* lse;
    int64_t ld_lse;
};

void attend(const AttentionArgs& a, const Group& g) {
    constexpr int64_t kChunk = kAttentionKeyChunk;
    const int64_t R = g.rows, dv = a.dv;
    std::vector<float> m(static_cast<size_t>(R), -INFINITY), l(static_cast<size_t>(R), 0.0f);
    std::vector<float> s(static_cast<size_t>(R * kChunk)), o(static_cast<size_t>(R * dv), 0.0f);
    std::vector<bf16_t> p(static_cast<size_t>(R * kChunk)), vp(static_cast<size_t>(dv * (kChunk + 1)));
    for (int64_t n0 = 0; n0 < a.kv_len; n0 += kChunk) {
        const int64_t n = std::min(kChunk, a.kv_len - n0);
        if (a.causal_offset >= 0 && n0 > a.causal_offset + a.q_len - 1) break;  // no row sees these keys
        linear_bf16(g.q1, g.ldq1, g.k1 + n0 * g.ldk1, g.ldk1, s.data(), n, R, n, a.d1);
        if (g.q2) linear_bf16(g.q2, g.ldq2, g.k2 + n0 * g.ldk2, g.ldk2, s.data(), n, R, n, a.d2, true);
        for (int64_t r = 0; r < R; ++r) {
            const int64_t visible = a.causal_offset < 0 ? a.kv_len : a.causal_offset + r + 1;
            online_softmax_row(s.data() + r * n, n, n0, visible, a.scale, m[size_t(r)], l[size_t(r)],
                               p.data() + r * n, o.data() + r * dv, dv);
        }
        // Values in the VNNI pair layout (a zero row completes an odd chunk): o += p v, no horizontal sums.
        for (int64_t j = 0; j < n; j += 2)
            pair_rows(g.v + (n0 + j) * g.ldv, j + 1 < n ? g.v + (n0 + j + 1) * g.ldv : nullptr, dv,
                      vp.data() + (j / 2) * dv * 2);
        gemm_bf16_vnni(p.data(), n, vp.data(), o.data(), dv, R, dv, n, true);
    }
    for (int64_t r = 0; r < R; ++r) {
        const float inv = softmax_inverse_sum(l[size_t(r)]);
        for (int64_t d = 0; d < dv; ++d) g.out[r * g.ldo + d] = o[size_t(r * dv + d)] * inv;
        if (g.lse) g.lse[r * g.ld_lse] = softmax_lse(m[size_t(r)], l[size_t(r)]);
    }
}

// MQA: every head reads the same keys, so the heads fold into the rows (row r = token r / heads,
// q_len x heads rows). The keys and values of a span of chunks go into gemm_bf16_vnni's pair layout
// once, shared by the threads; the threads take blocks of rows, and each runs the score GEMM (its
// queries the A operand, read as they lie), the online softmax and the value GEMM over its block,
// stopping at the last key the block's last row sees. Before, one GEMM per chunk ran over every row
// with the keys as the A operand: it transposed all q_len x heads query rows into pairs again for
// every chunk, and the softmax and the values' packing ran on one thread (A_CC prefill, 320 tokens
// x 16 heads on an AMX Xeon: 67 -> 45 ms). With fewer blocks than twice the threads (decode), each
// block's chunks are also split among the threads, flash-decoding style, and the parts merged.
constexpr int64_t kMqaRowBlock = 256;
constexpr int64_t kMqaSpanChunks = 32;  // chunks packed at a time: 8,192 keys, 17 MB at MLA's sizes

// Where the packed chunks of one span lie: per chunk, part 1's keys, part 2's keys, then the values.
struct PackedSpan {
    const bf16_t* data;
    int64_t chunk_elems, k2_at, v_at;  // a chunk's size and the offsets of its parts
    int64_t first_key, end_key;
    bool keys_packed;  // false: the keys' parts are left out, and the score GEMM reads the keys' rows
};

// Rows [r0, r0 + rows) over chunks [c0, c1) of the span, into the running softmax state m, l and o
// (the block's first row's entries; o's rows dv apart).
void mqa_block(const AttentionArgs& a, const PackedSpan& sp, int64_t c0, int64_t c1, int64_t r0, int64_t rows,
               float* m, float* l, float* o) {
    constexpr int64_t kChunk = kAttentionKeyChunk;
    const int64_t H = a.heads, dv = a.dv;
    const int64_t sees = a.causal_offset < 0 ? a.kv_len : a.causal_offset + (r0 + rows - 1) / H + 1;
    thread_local std::vector<float> s;
    thread_local std::vector<bf16_t> p;
    s.resize(static_cast<size_t>(kMqaRowBlock * kChunk));
    p.resize(static_cast<size_t>(kMqaRowBlock * kChunk));
    for (int64_t c = c0; c < c1; ++c) {
        const int64_t n0 = sp.first_key + c * kChunk, n = std::min(kChunk, sp.end_key - n0);
        if (n0 >= sees) break;
        const bf16_t* at = sp.data + c * sp.chunk_elems;
        if (sp.keys_packed) {
            gemm_bf16_vnni(a.q1 + r0 * a.d1, a.d1, at, s.data(), n, rows, n, a.d1, false);
            if (a.q2) gemm_bf16_vnni(a.q2 + r0 * a.d2, a.d2, at + sp.k2_at, s.data(), n, rows, n, a.d2, true);
        } else {
            linear_bf16(a.q1 + r0 * a.d1, a.d1, a.k1 + n0 * a.d1, a.d1, s.data(), n, rows, n, a.d1);
            if (a.q2) linear_bf16(a.q2 + r0 * a.d2, a.d2, a.k2 + n0 * a.d2, a.d2, s.data(), n, rows, n, a.d2, true);
        }
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t visible = a.causal_offset < 0 ? a.kv_len : a.causal_offset + (r0 + r) / H + 1;
            online_softmax_row(s.data() + r * n, n, n0, visible, a.scale, m[r], l[r], p.data() + r * n, o + r * dv, dv);
        }
        gemm_bf16_vnni(p.data(), n, at + sp.v_at, o, dv, rows, dv, n, true);
    }
}

void attend_mqa(const AttentionArgs& a, float* out, float* lse) {
    constexpr int64_t kChunk = kAttentionKeyChunk;
    const int64_t R = a.q_len * a.heads, dv = a.dv;
    const int64_t keys_seen = a.causal_offset < 0 ? a.kv_len : std::min(a.kv_len, a.causal_offset + a.q_len);
    const int64_t span_chunks = std::min(kMqaSpanChunks, (keys_seen + kChunk - 1) / kChunk);
    const int64_t blocks = (R + kMqaRowBlock - 1) / kMqaRowBlock, threads = max_threads();
    const int64_t splits = blocks >= 2 * threads ? 1 : std::min(span_chunks, (2 * threads + blocks - 1) / blocks);
    // A chunk's keys are read by every block: packed once where the blocks are many. With few (decode),
    // the score GEMM takes the keys' rows as its weights instead, which the AMX kernel copies into
    // tiles without the transposes of the pair layout (A_CC decode over 4,096 keys: 10-17% slower with
    // the keys packed).
    const bool pack_keys = splits == 1;
    const int64_t pairs1 = pack_keys ? (a.d1 + 1) / 2 : 0, pairs2 = pack_keys && a.q2 ? (a.d2 + 1) / 2 : 0;
    const int64_t chunk_elems = (pairs1 + pairs2) * kChunk * 2 + (kChunk / 2) * dv * 2;  // kChunk is even
    // Every element a GEMM reads is written by the packing first: no zeroing (up to 17 MB a call).
    const std::unique_ptr<bf16_t[]> span(new bf16_t[size_t(span_chunks * chunk_elems)]);
    std::vector<float> m(static_cast<size_t>(R), -INFINITY), l(static_cast<size_t>(R), 0.0f);
    std::fill(out, out + R * dv, 0.0f);
    std::vector<float> pm, pl, po;  // the parts' states, with splits
    if (splits > 1) po.resize(static_cast<size_t>(splits * R * dv));
    for (int64_t s0 = 0; s0 < keys_seen; s0 += kMqaSpanChunks * kChunk) {
        const int64_t s1 = std::min(keys_seen, s0 + kMqaSpanChunks * kChunk), chunks = (s1 - s0 + kChunk - 1) / kChunk;
        const PackedSpan sp{span.get(), chunk_elems, pairs1 * kChunk * 2, (pairs1 + pairs2) * kChunk * 2, s0, s1,
                            pack_keys};
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t n0 = s0 + c * kChunk, n = std::min(kChunk, s1 - n0);
            bf16_t* at = span.get() + c * chunk_elems;
            if (pack_keys) pair_columns(a.k1 + n0 * a.d1, a.d1, n, a.d1, at);
            if (pack_keys && a.q2) pair_columns(a.k2 + n0 * a.d2, a.d2, n, a.d2, at + sp.k2_at);
            for (int64_t j = 0; j < n; j += 2)
                pair_rows(a.v + (n0 + j) * dv, j + 1 < n ? a.v + (n0 + j + 1) * dv : nullptr, dv,
                          at + sp.v_at + (j / 2) * dv * 2);
        }
        if (splits > 1) {
            pm.assign(static_cast<size_t>(splits * R), -INFINITY);
            pl.assign(static_cast<size_t>(splits * R), 0.0f);
            std::fill(po.begin(), po.end(), 0.0f);
        }
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t item = 0; item < blocks * splits; ++item) {
            const int64_t b = item / splits, k = item % splits;
            const int64_t r0 = b * kMqaRowBlock, rows = std::min(kMqaRowBlock, R - r0);
            const int64_t c0 = chunks * k / splits, c1 = chunks * (k + 1) / splits;
            if (splits == 1) mqa_block(a, sp, c0, c1, r0, rows, m.data() + r0, l.data() + r0, out + r0 * dv);
            else mqa_block(a, sp, c0, c1, r0, rows, pm.data() + k * R + r0, pl.data() + k * R + r0,
                           po.data() + (k * R + r0) * dv);
        }
        if (splits > 1) {
#pragma omp parallel for schedule(static) if (worth_threads(R * dv * splits))
            for (int64_t r = 0; r < R; ++r) merge_parts(r, R, dv, splits, pm.data(), pl.data(), po.data(), m.data(),
                                                        l.data(), out);
        }
    }
#pragma omp parallel for schedule(static) if (worth_threads(R * dv))
    for (int64_t r = 0; r < R; ++r) {
        const float inv = softmax_inverse_sum(l[size_t(r)]);
        for (int64_t d = 0; d < dv; ++d) out[r * dv + d] *= inv;
        if (lse) lse[r] = softmax_lse(m[size_t(r)], l[size_t(r)]);
    }
}

}  // namespace

void merge_parts(int64_t r, int64_t R, int64_t dv, int64_t splits, const float* pm, const float* pl, const float* po,
                 float* m, float* l, float* o) {
    // The largest max, NaN if any is (std::max would drop a NaN that comes second).
    float mx = m[r];
    for (int64_t k = 0; k < splits; ++k) {
        const float pk = pm[k * R + r];
        mx = pk > mx || std::isnan(pk) ? pk : mx;
    }
    // A state's weight exp(its max - mx), 1 where the two are equal: also when both are -inf (no key
    // seen yet), so that such a state's sum and output, zero or NaN (a NaN query gives NaN scores
    // under a max of -inf), still reach the row.
    const auto weight = [mx](float max) { return max == mx ? 1.0f : exp_nonpositive(max - mx); };
    const float keep = weight(m[r]);
    float sum = l[r] * keep;
    float* row = o + r * dv;
    for (int64_t d = 0; d < dv; ++d) row[d] *= keep;
    for (int64_t k = 0; k < splits; ++k) {
        const float w = weight(pm[k * R + r]);
        sum += pl[k * R + r] * w;
        const float* part = po + (k * R + r) * dv;
        for (int64_t d = 0; d < dv; ++d) row[d] += part[d] * w;
    }
    m[r] = mx, l[r] = sum;
}

void attention(const AttentionArgs& a, float* out, float* lse) {
    a.validate();
    const int64_t H = a.heads, G = a.kv_heads;
    if (G == 1) return attend_mqa(a, out, lse);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t h = 0; h < H; ++h) {
        Group g{a.q1 + h * a.d1, a.k1 + h * a.d1, a.q2 ? a.q2 + h * a.d2 : nullptr, a.k2 ? a.k2 + h * a.d2 : nullptr,
                a.v + h * a.dv, H * a.d1, H * a.d1, H * a.d2, H * a.d2, H * a.dv, a.q_len,
                out + h * a.dv, H * a.dv, lse ? lse + h : nullptr, H};
        attend(a, g);
    }
}

}  // namespace dsperf::kernels
