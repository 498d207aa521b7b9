// DeepSeek-V3 gating, permute and un-permute on the GPU.
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {
namespace {

constexpr unsigned kThreads = 128;

// Index of the largest value among v[0..n) not yet taken, ties to the lower index; -1 if none.
__device__ int argmax_untaken(const float* v, int64_t n, const unsigned char* taken) {
    int best = -1;
    for (int64_t i = 0; i < n; ++i)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = int(i);
    return best;
}

// One thread per token. scratch: scores and selection values [T, E]; taken flags [T, E].
__global__ void gate_kernel(const float* logits, const float* bias, int64_t T, int64_t E, int64_t G, int64_t topk_group,
                            int64_t top_k, float route_scale, bool sigmoid, float* scores, float* select,
                            unsigned char* taken, float* weights, int32_t* ids) {
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* l = logits + t * E;
    float* s = scores + t * E;
    float* sel = select + t * E;
    unsigned char* tk = taken + t * E;
    if (sigmoid) {
        for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + expf(-l[e]));
    } else {
        float mx = l[0];
        for (int64_t e = 1; e < E; ++e) mx = fmaxf(mx, l[e]);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += s[e] = expf(l[e] - mx);
        for (int64_t e = 0; e < E; ++e) s[e] = float(s[e] / sum);
    }
    for (int64_t e = 0; e < E; ++e) sel[e] = s[e] + (bias ? bias[e] : 0.0f), tk[e] = 0;
    if (G > 1) {
        const int64_t per = E / G;
        // Keep topk_group groups by repeated argmax over the group scores (recomputed per pick:
        // no scratch per group); a group's score is the sum of its two best (its best without a
        // bias), ties to the lower group.
        unsigned long long kept = 0;  // G <= 64 (checked on the host)
        for (int64_t pick = 0; pick < topk_group; ++pick) {
            int best = -1;
            float best_score = 0;
            for (int64_t g = 0; g < G; ++g) {
                if (kept >> g & 1ull) continue;
                const float* v = sel + g * per;
                float b1 = -INFINITY, b2 = -INFINITY;
                for (int64_t i = 0; i < per; ++i) {
                    if (v[i] > b1) b2 = b1, b1 = v[i];
                    else if (v[i] > b2) b2 = v[i];
                }
                const float score = bias ? b1 + b2 : b1;
                if (best < 0 || score > best_score) best = int(g), best_score = score;
            }
            kept |= 1ull << best;
        }
        for (int64_t g = 0; g < G; ++g)
            if (!(kept >> g & 1ull))
                for (int64_t i = 0; i < per; ++i) sel[g * per + i] = -INFINITY;
    }
    double sum = 0;
    for (int64_t k = 0; k < top_k; ++k) {
        const int e = argmax_untaken(sel, E, tk);
        tk[e] = 1;
        ids[t * top_k + k] = e;
        sum += weights[t * top_k + k] = s[e];
    }
    const float norm = sigmoid ? float(1.0 / sum) : 1.0f;
    for (int64_t k = 0; k < top_k; ++k) weights[t * top_k + k] = weights[t * top_k + k] * norm * route_scale;
}

// One thread per 4-byte word (rows are whole words when row_bytes % 4 == 0), else per byte.
template <typename W>
__global__ void permute_kernel(const W* x, int64_t words, const int32_t* source, int64_t rows, W* out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * words) return;
    out[i] = x[int64_t(source[i / words]) * words + i % words];
}

__global__ void unpermute_kernel(const float* y_perm, int64_t dim, const int32_t* position, const float* weights,
                                 int64_t T, int64_t K, float* out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= T * dim) return;
    const int64_t t = i / dim, c = i % dim;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += weights[t * K + k] * y_perm[int64_t(position[t * K + k]) * dim + c];
    out[i] = acc;
}

}  // namespace

void moe_gate(const float* logits, int64_t T, int64_t E, const float* bias, const kernels::GateConfig& cfg,
              float* weights, int32_t* ids) {
    cfg.validate(E, bias != nullptr);
    if (cfg.n_group > 64) throw std::invalid_argument("n_group: the CUDA gate handles at most 64 groups");
    if (T < 0) throw std::invalid_argument("moe_gate: tokens must be >= 0");
    if (T == 0) return;
    Scratch<float> scores(size_t(T * E)), sel(size_t(T * E));
    Scratch<unsigned char> taken(size_t(T * E));
    gate_kernel<<<blocks_for(T, kThreads), kThreads, 0, current_stream()>>>(
        logits, bias, T, E, cfg.n_group, cfg.topk_group, cfg.top_k, cfg.route_scale,
        cfg.score == kernels::ScoreFunc::Sigmoid, scores.get(), sel.get(), taken.get(), weights, ids);
    check_launch("moe_gate");
}

void moe_permute(const void* x, int64_t tokens, int64_t row_bytes, const int32_t* source, int64_t rows, void* out) {
    if (tokens < 0 || row_bytes <= 0 || rows < 0) throw std::invalid_argument("moe_permute: bad sizes");
    check_range(source, rows, 0, tokens, "source");
    if (rows == 0) return;
    // Whole 4-byte words where rows and both bases allow it (misaligned word loads would fault).
    const bool words =
        row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0;
    if (words) {
        const int64_t words = row_bytes / 4;
        permute_kernel<<<blocks_for(rows * words, 256), 256, 0, current_stream()>>>(
            static_cast<const uint32_t*>(x), words, source, rows, static_cast<uint32_t*>(out));
    } else {
        permute_kernel<<<blocks_for(rows * row_bytes, 256), 256, 0, current_stream()>>>(
            static_cast<const uint8_t*>(x), row_bytes, source, rows, static_cast<uint8_t*>(out));
    }
    check_launch("moe_permute");
}

void moe_unpermute(const float* y_perm, int64_t rows, int64_t dim, const int32_t* position, const float* weights,
                   int64_t tokens, int64_t top_k, float* out) {
    if (rows < 0 || dim <= 0 || tokens < 0 || top_k < 1) throw std::invalid_argument("moe_unpermute: bad sizes");
    check_range(position, tokens * top_k, 0, rows, "position");
    if (tokens == 0) return;
    unpermute_kernel<<<blocks_for(tokens * dim, 256), 256, 0, current_stream()>>>(y_perm, dim, position, weights,
                                                                                  tokens, top_k, out);
    check_launch("moe_unpermute");
}

}  // namespace dsperf::cuda
