#include "kernels/cpu/moe.hpp"

#include "common/require.hpp"

#include "kernels/common/parallel.hpp"
#include "kernels/cpu/linear_amx.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/linear.hpp"

namespace dsperf::kernels {

namespace {
// Checks run inside per-element loops: a literal message must not build a std::string each time,
// and computed messages are built only on failure (callers write `if (!cond) require(false, ...)`).
// Indices of the k largest values, best first, ties to the lower index; NaN ranks below every
// number (as in numpy's argsort of the negated scores), which also keeps the ordering strict and
// weak, as partial_sort requires.
void top_k_indices(const float* v, int64_t n, int64_t k, int32_t* out, std::vector<int32_t>& scratch) {
    scratch.resize(static_cast<size_t>(n));
    std::iota(scratch.begin(), scratch.end(), 0);
    auto better = [v](int32_t a, int32_t b) {
        const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
        if (na || nb) return na == nb ? a < b : nb;
        return v[a] > v[b] || (v[a] == v[b] && a < b);
    };
    std::partial_sort(scratch.begin(), scratch.begin() + k, scratch.end(), better);
    std::copy(scratch.begin(), scratch.begin() + k, out);
}
}  // namespace

void GateConfig::validate(int64_t n_experts, bool has_bias) const {
    require(n_experts > 0, "n_experts must be positive");
    require(n_group >= 1, "n_group must be >= 1");
    require(n_experts % n_group == 0, "n_group (" + std::to_string(n_group) + ") must divide the " +
                                          std::to_string(n_experts) + " experts");
    require(topk_group >= 1 && topk_group <= n_group,
            "topk_group must lie in [1, n_group = " + std::to_string(n_group) + "]");
    const int64_t kept = topk_group * (n_experts / n_group);
    require(top_k >= 1 && top_k <= kept, "top_k (" + std::to_string(top_k) + ") must lie in [1, " +
                                             std::to_string(kept) + "], the experts in the kept groups");
    require(route_scale > 0 && std::isfinite(route_scale), "route_scale must be positive and finite");
    require(!(has_bias && n_group > 1 && n_experts / n_group < 2),
            "n_group: with a bias each group needs at least two experts (its score is the sum of its best two)");
}

void moe_gate(const float* logits, int64_t tokens, int64_t n_experts, const float* bias, const GateConfig& cfg,
              float* weights, int32_t* ids) {
    cfg.validate(n_experts, bias != nullptr);
    const int64_t E = n_experts, G = cfg.n_group, per_group = E / G;
#pragma omp parallel
    {
        std::vector<float> scores(static_cast<size_t>(E)), select(static_cast<size_t>(E)), group_score(static_cast<size_t>(G));
        std::vector<int32_t> scratch, kept_groups(static_cast<size_t>(cfg.topk_group));
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tokens; ++t) {
            const float* l = logits + t * E;
            if (cfg.score == ScoreFunc::Sigmoid) {
                for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = 1.0f / (1.0f + std::exp(-l[e]));
            } else {
                const float mx = *std::max_element(l, l + E);
                double sum = 0;
                for (int64_t e = 0; e < E; ++e) sum += scores[size_t(e)] = std::exp(l[e] - mx);
                for (int64_t e = 0; e < E; ++e) scores[size_t(e)] = float(scores[size_t(e)] / sum);
            }
            for (int64_t e = 0; e < E; ++e) select[size_t(e)] = scores[size_t(e)] + (bias ? bias[e] : 0.0f);
            if (G > 1) {
                for (int64_t g = 0; g < G; ++g) {
                    const float* s = select.data() + g * per_group;
                    // A NaN score makes its group's score NaN (as numpy's max and sort do in the
                    // reference), and top_k_indices ranks NaN last: the group is dropped.
                    bool nan = false;
                    for (int64_t i = 0; i < per_group; ++i) nan |= std::isnan(s[i]);
                    if (nan) {
                        group_score[size_t(g)] = NAN;
                    } else if (bias) {  // the sum of the group's two best
                        float b1 = -INFINITY, b2 = -INFINITY;
                        for (int64_t i = 0; i < per_group; ++i) {
                            if (s[i] > b1) b2 = b1, b1 = s[i];
                            else if (s[i] > b2) b2 = s[i];
                        }
                        group_score[size_t(g)] = b1 + b2;
                    } else {
                        group_score[size_t(g)] = *std::max_element(s, s + per_group);
                    }
                }
                top_k_indices(group_score.data(), G, cfg.topk_group, kept_groups.data(), scratch);
                std::vector<bool> keep(static_cast<size_t>(G), false);
                for (int32_t g : kept_groups) keep[size_t(g)] = true;
                for (int64_t g = 0; g < G; ++g)
                    if (!keep[size_t(g)]) std::fill_n(select.begin() + g * per_group, per_group, -INFINITY);
            }
            int32_t* id = ids + t * cfg.top_k;
            top_k_indices(select.data(), E, cfg.top_k, id, scratch);
            float* w = weights + t * cfg.top_k;
            double sum = 0;
            for (int64_t k = 0; k < cfg.top_k; ++k) sum += w[k] = scores[size_t(id[k])];
            const float norm = cfg.score == ScoreFunc::Sigmoid ? float(1.0 / sum) : 1.0f;
            for (int64_t k = 0; k < cfg.top_k; ++k) w[k] = w[k] * norm * cfg.route_scale;
        }
    }
}

void moe_route(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t n_experts, int64_t* offsets,
               int32_t* position, int32_t* source) {
    require(tokens >= 0 && top_k >= 1 && n_experts >= 1, "moe_route: top_k and n_experts must be positive");
    std::fill(offsets, offsets + n_experts + 1, 0);
    for (int64_t i = 0; i < tokens * top_k; ++i) {
        if (!(ids[i] >= 0 && ids[i] < n_experts)) require(false, "ids[" + std::to_string(i / top_k) + ", " +
                                                       std::to_string(i % top_k) + "] = " + std::to_string(ids[i]) +
                                                       " is outside [0, " + std::to_string(n_experts) + ")");
        ++offsets[ids[i] + 1];
    }
    std::partial_sum(offsets, offsets + n_experts + 1, offsets);
    std::vector<int64_t> next(offsets, offsets + n_experts);
    for (int64_t i = 0; i < tokens * top_k; ++i) {  // token order within each expert: deterministic
        const int64_t row = next[size_t(ids[i])]++;
        position[i] = int32_t(row);
        source[row] = int32_t(i / top_k);
    }
}

void moe_permute(const bf16_t* x, int64_t dim, const int32_t* source, int64_t rows, bf16_t* x_perm) {
#pragma omp parallel for schedule(static) if (worth_threads(rows * dim))
    for (int64_t r = 0; r < rows; ++r) std::copy(x + source[r] * dim, x + (source[r] + 1) * dim, x_perm + r * dim);
}

void moe_unpermute(const float* y_perm, int64_t dim, const int32_t* position, const float* weights, int64_t tokens,
                   int64_t top_k, float* y, bool accumulate) {
#pragma omp parallel for schedule(static) if (worth_threads(tokens * top_k * dim))
    for (int64_t t = 0; t < tokens; ++t) {
        float* out = y + t * dim;
        if (!accumulate) std::fill(out, out + dim, 0.0f);
        for (int64_t k = 0; k < top_k; ++k) {
            const float w = weights[t * top_k + k];
            const float* src = y_perm + int64_t(position[t * top_k + k]) * dim;
            for (int64_t i = 0; i < dim; ++i) out[i] += w * src[i];
        }
    }
}

void ExpertWeights::validate() const {
    require(w13 && w2, "expert weights w13 and w2 are required");
    require(n_experts >= 1 && dim >= 1 && inter >= 1, "expert weights: n_experts, dim and inter must be positive");
    require(!fp8 || (scale13 && scale2), "FP8 expert weights need scale13 and scale2");
}

LinearWeights ExpertWeights::gate_up(int64_t e) const {
    LinearWeights l;
    l.fp8 = fp8, l.N = 2 * inter, l.K = dim;
    l.w = static_cast<const char*>(w13) + e * 2 * inter * dim * (fp8 ? 1 : 2);
    if (fp8) l.scale = scale13 + e * fp8_scale_blocks(2 * inter) * fp8_scale_blocks(dim);
    if (tiles && !tiles->w13.empty()) l.tiles = &tiles->w13[size_t(e)];
    return l;
}

LinearWeights ExpertWeights::down(int64_t e) const {
    LinearWeights l;
    l.fp8 = fp8, l.N = dim, l.K = inter;
    l.w = static_cast<const char*>(w2) + e * dim * inter * (fp8 ? 1 : 2);
    if (fp8) l.scale = scale2 + e * fp8_scale_blocks(dim) * fp8_scale_blocks(inter);
    if (tiles && !tiles->w2.empty()) l.tiles = &tiles->w2[size_t(e)];
    return l;
}

size_t ExpertTiles::bytes() const {
    size_t b = 0;
    for (const auto* v : {&w13, &w2})
        for (const amx::PackedTiles& t : *v) b += t.bytes();
    return b;
}

ExpertTiles pack_expert_tiles(const ExpertWeights& w) {
    ExpertTiles t;
    if (!amx::usable()) return t;
    for (int64_t e = 0; e < w.n_experts; ++e) {
        t.w13.push_back(pack_linear_tiles(w.gate_up(e)));
        t.w2.push_back(pack_linear_tiles(w.down(e)));
    }
    return t;
}

void expert_ffn(const bf16_t* x, int64_t rows, const ExpertWeights& w, int64_t e, float* y, bool accumulate) {
    if (rows == 0) return;
    const int64_t D = w.dim, I = w.inter;
    // Per-thread buffers kept between calls: a fresh 4 MB vector per expert (256 rows) costs a
    // memset and a page fault per page, every call. Both are fully written before they are read.
    thread_local std::vector<float> gu;
    thread_local std::vector<bf16_t> h;
    if (gu.size() < static_cast<size_t>(rows * 2 * I)) gu.resize(static_cast<size_t>(rows * 2 * I));
    if (h.size() < static_cast<size_t>(rows * I)) h.resize(static_cast<size_t>(rows * I));
    linear(x, D, rows, w.gate_up(e), gu.data(), 2 * I);
    silu_mul(gu.data(), rows, I, h.data());
    linear(h.data(), I, rows, w.down(e), y, D, accumulate);
}

void experts_contiguous(const bf16_t* x, const int64_t* offsets, const ExpertWeights& w, float* y) {
    w.validate();
    require(offsets[0] == 0, "offsets[0] must be 0");
    for (int64_t e = 0; e < w.n_experts; ++e)
        if (!(offsets[e + 1] >= offsets[e])) require(false, "offsets must be non-decreasing (expert " + std::to_string(e) + ")");
    for (int64_t e = 0; e < w.n_experts; ++e)
        expert_ffn(x + offsets[e] * w.dim, offsets[e + 1] - offsets[e], w, e, y + offsets[e] * w.dim, false);
}

void experts_masked(const bf16_t* x, int64_t capacity, const int32_t* counts, const ExpertWeights& w, float* y) {
    w.validate();
    require(capacity >= 0, "capacity must be >= 0");
    for (int64_t e = 0; e < w.n_experts; ++e)
        require(counts[e] >= 0 && counts[e] <= capacity,
                "counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) + " is outside [0, capacity = " +
                    std::to_string(capacity) + "]");
    for (int64_t e = 0; e < w.n_experts; ++e) {
        float* ye = y + e * capacity * w.dim;
        expert_ffn(x + e * capacity * w.dim, counts[e], w, e, ye, false);
        std::fill(ye + int64_t(counts[e]) * w.dim, ye + capacity * w.dim, 0.0f);
    }
}

namespace {
// moe_layer keeps its permuted rows and outputs between calls up to this size (1 GiB: 4,096 tokens
// of DeepSeek-V3's top-8 take 1.4 GiB and are freed after each call).
constexpr size_t kKeptBufferBytes = size_t(1) << 30;
}  // namespace

void moe_layer(const bf16_t* x, int64_t tokens, const bf16_t* gate_w, const float* gate_bias, const GateConfig& cfg,
               const ExpertWeights& routed, const ExpertWeights& shared, float* y) {
    routed.validate();
    const int64_t E = routed.n_experts, D = routed.dim, K = cfg.top_k;
    cfg.validate(E, gate_bias != nullptr);
    std::vector<float> logits(static_cast<size_t>(tokens * E)), weights(static_cast<size_t>(tokens * K));
    std::vector<int32_t> ids(static_cast<size_t>(tokens * K)), position(static_cast<size_t>(tokens * K)), source(static_cast<size_t>(tokens * K));
    std::vector<int64_t> offsets(static_cast<size_t>(E + 1));
    linear_bf16(x, D, gate_w, D, logits.data(), E, tokens, E, D);
    moe_gate(logits.data(), tokens, E, gate_bias, cfg, weights.data(), ids.data());
    moe_route(ids.data(), tokens, K, E, offsets.data(), position.data(), source.data());
    // The permuted rows and their outputs (175 MB at 512 tokens of DeepSeek-V3) in buffers kept
    // between calls: fresh ones are zeroed and page-faulted on every call, which on this project's
    // VMs cost more than the experts' GEMMs at 512 tokens (the host backs freed pages lazily).
    // Fully written before they are read; buffers past kKeptBufferBytes are freed after the call.
    thread_local std::vector<bf16_t> x_perm_kept;
    thread_local std::vector<float> y_perm_kept;
    const size_t rows = static_cast<size_t>(tokens * K), n = rows * static_cast<size_t>(D);
    if (x_perm_kept.size() < n) x_perm_kept.resize(n);
    if (y_perm_kept.size() < n) y_perm_kept.resize(n);
    moe_permute(x, D, source.data(), tokens * K, x_perm_kept.data());
    experts_contiguous(x_perm_kept.data(), offsets.data(), routed, y_perm_kept.data());
    moe_unpermute(y_perm_kept.data(), D, position.data(), weights.data(), tokens, K, y, false);
    if (n * (sizeof(bf16_t) + sizeof(float)) > kKeptBufferBytes) {
        std::vector<bf16_t>().swap(x_perm_kept);
        std::vector<float>().swap(y_perm_kept);
    }
    if (shared.w13) {
        shared.validate();
        require(shared.dim == D, "shared expert dim must equal the routed experts' dim");
        expert_ffn(x, tokens, shared, 0, y, /*accumulate=*/true);
    }
}

}  // namespace dsperf::kernels
