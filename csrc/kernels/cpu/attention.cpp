#include "kernels/cpu/attention.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/common/fast_math.hpp"
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

// One group of rows that share their keys: MHA runs it once per head (rows = q_len), MQA once
// with every head folded in (rows = q_len * heads, row r = token r / heads).
struct Group {
    const bf16_t *q1, *k1, *q2, *k2, *v;
    int64_t ldq1, ldk1, ldq2, ldk2, ldv;  // row strides
    int64_t rows, tokens_per_row_divisor;
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
            const int64_t visible = a.causal_offset < 0 ? a.kv_len : a.causal_offset + r / g.tokens_per_row_divisor + 1;
            online_softmax_row(s.data() + r * n, n, n0, visible, a.scale, m[size_t(r)], l[size_t(r)],
                               p.data() + r * n, o.data() + r * dv, dv);
        }
        // Values in the VNNI pair layout (a zero row completes an odd chunk): o += p v, no horizontal sums.
        for (int64_t j = 0; j < n; ++j)
            for (int64_t d = 0; d < dv; ++d) vp[size_t((j / 2) * dv * 2 + d * 2 + j % 2)] = g.v[(n0 + j) * g.ldv + d];
        if (n % 2)
            for (int64_t d = 0; d < dv; ++d) vp[size_t((n / 2) * dv * 2 + d * 2 + 1)] = 0;
        gemm_bf16_vnni(p.data(), n, vp.data(), o.data(), dv, R, dv, n, true);
    }
    for (int64_t r = 0; r < R; ++r) {
        const float inv = softmax_inverse_sum(l[size_t(r)]);
        for (int64_t d = 0; d < dv; ++d) g.out[r * g.ldo + d] = o[size_t(r * dv + d)] * inv;
        if (g.lse) g.lse[r * g.ld_lse] = softmax_lse(m[size_t(r)], l[size_t(r)]);
    }
}

}  // namespace

void attention(const AttentionArgs& a, float* out, float* lse) {
    a.validate();
    const int64_t H = a.heads, G = a.kv_heads;
    if (G == 1) {  // MQA: heads fold into M; rows are (token, head) in order
        Group g{a.q1, a.k1, a.q2, a.k2, a.v, a.d1, a.d1, a.d2, a.d2, a.dv, a.q_len * H, H, out, a.dv, lse, 1};
        attend(a, g);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t h = 0; h < H; ++h) {
        Group g{a.q1 + h * a.d1, a.k1 + h * a.d1, a.q2 ? a.q2 + h * a.d2 : nullptr, a.k2 ? a.k2 + h * a.d2 : nullptr,
                a.v + h * a.dv, H * a.d1, H * a.d1, H * a.d2, H * a.d2, H * a.dv, a.q_len, 1,
                out + h * a.dv, H * a.dv, lse ? lse + h : nullptr, H};
        attend(a, g);
    }
}

}  // namespace dsperf::kernels
