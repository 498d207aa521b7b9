#include "ep/ep_window.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sched.h>

#include <cmath>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <vector>

namespace dsperf::ep {

using dsperf::kernels::bf16_to_f32;

void flag_publish(int64_t* flag, int64_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }

int64_t flags_wait(int64_t* const* flags, int64_t n, int64_t target, double timeout_s, double spin_s) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto spin_until = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(spin_s));
    const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    int64_t first = 0;  // flags below `first` have arrived (they only grow)
    bool spinning = spin_s > 0;
    for (int64_t round = 0;; ++round) {
        while (first < n && __atomic_load_n(flags[first], __ATOMIC_ACQUIRE) >= target) ++first;
        if (first == n) return -1;
        // Spinning keeps the core, so a peer a few microseconds behind is seen at once; past
        // spin_s (or from the start when the ranks outnumber the cores, spin_s = 0) offer the core
        // on every round instead, since the peer we wait for may need it. Never sleep: a sleep's
        // wake-up costs more than the exchanges it waits for.
        if (spinning) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if ((round & 63) == 0 && clock::now() > spin_until) spinning = false;
        } else {
            sched_yield();
        }
        if ((round & 63) == 0 && clock::now() > deadline) return first;
    }
}

namespace {

// One token: dst[0:dim) = sum over k < n, in order, of w[k] * f32(src[k][0:dim)), each product added
// with one rounding (a fused multiply-add, also where no FMA instruction is used). The sum of a
// column group stays in a register across the sources, so every source row is read once and the
// output written once: the loop runs at memory speed, not at the speed of an L1 round trip per
// source. AVX-512 and AVX2 versions are picked at run time.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void weighted_row_sum_avx512(const bf16_t* const* src, const float* w, int64_t n,
                                                                 int64_t dim, float* dst) {
    int64_t d = 0;
    for (; d + 16 <= dim; d += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < n; ++k) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[k] + d));
            const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), x, acc);
        }
        _mm512_storeu_ps(dst + d, acc);
    }
    for (; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n; ++k) acc = std::fma(w[k], bf16_to_f32(src[k][d]), acc);
        dst[d] = acc;
    }
}

__attribute__((target("avx2,fma"))) void weighted_row_sum_avx2(const bf16_t* const* src, const float* w, int64_t n,
                                                               int64_t dim, float* dst) {
    int64_t d = 0;
    for (; d + 8 <= dim; d += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < n; ++k) {
            const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[k] + d));
            const __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w[k]), x, acc);
        }
        _mm256_storeu_ps(dst + d, acc);
    }
    for (; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n; ++k) acc = std::fma(w[k], bf16_to_f32(src[k][d]), acc);
        dst[d] = acc;
    }
}

#endif

void weighted_row_sum_portable(const bf16_t* const* src, const float* w, int64_t n, int64_t dim, float* dst) {
    for (int64_t d = 0; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n; ++k) acc = std::fma(w[k], bf16_to_f32(src[k][d]), acc);
        dst[d] = acc;
    }
}

using RowSum = void (*)(const bf16_t* const*, const float*, int64_t, int64_t, float*);

RowSum pick_row_sum() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return weighted_row_sum_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return weighted_row_sum_avx2;
#endif
    return weighted_row_sum_portable;
}

}  // namespace

void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out) {
    static const RowSum row_sum = pick_row_sum();
#pragma omp parallel
    {
        std::vector<const bf16_t*> src(entries);
        std::vector<float> w(entries);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tokens; ++t) {
            int64_t n = 0;
            for (int64_t m = 0; m < entries; ++m) {
                const int64_t i = t * entries + m;
                if (peer[i] < 0) continue;
                src[n] = rows[peer[i]] + row[i] * dim;
                w[n++] = weights ? weights[i] : 1.0f;
            }
            row_sum(src.data(), w.data(), n, dim, out + t * dim);
        }
    }
}

void write_records(const uint8_t* values, int64_t value_stride, int64_t vcol, int64_t vb, const uint8_t* scales,
                   int64_t scale_stride, int64_t scol, int64_t sb, const int64_t* token, int64_t n, const int64_t* ids,
                   const float* weights, int64_t top_k, int64_t dest, int64_t local_experts, uint8_t* dst, int64_t rec,
                   int64_t sc_col, int64_t id_col) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = token[i];
        uint8_t* r = dst + i * rec;
        std::memcpy(r, values + t * value_stride + vcol, size_t(vb));
        if (sb) std::memcpy(r + sc_col, scales + t * scale_stride + scol, size_t(sb));
        int32_t lid[64];
        float w[64];
        for (int64_t k = 0; k < top_k; ++k) {
            const int64_t e = ids[t * top_k + k];
            lid[k] = e / local_experts == dest ? int32_t(e % local_experts) : -1;
            w[k] = weights ? weights[t * top_k + k] : 0.0f;
        }
        std::memcpy(r + id_col, lid, size_t(4 * top_k));
        std::memcpy(r + id_col + 4 * top_k, w, size_t(4 * top_k));
    }
}

}  // namespace dsperf::ep
