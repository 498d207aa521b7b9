#include "ep/ep_window.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace dsperf::ep {

using dsperf::kernels::bf16_to_f32;

void flag_publish(int64_t* flag, int64_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }

int64_t flags_wait(int64_t* const* flags, int64_t n, int64_t target, double timeout_s) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    int64_t first = 0;  // flags below `first` have arrived (they only grow)
    for (int64_t spin = 0;; ++spin) {
        while (first < n && __atomic_load_n(flags[first], __ATOMIC_ACQUIRE) >= target) ++first;
        if (first == n) return -1;
        // A short spin catches a peer a few microseconds behind; after that offer the core on
        // every round (never sleep: a sleep's wake-up costs more than the exchanges it waits for),
        // since with more ranks than cores the peer we wait for may need this one.
        if (spin < 2000) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
        if ((spin & 63) == 0 && clock::now() > deadline) return first;
    }
}

namespace {

// dst[d] (=|+=) w * f32(src[d]): restrict-qualified so the compiler vectorises the row.
void axpy_bf16(float w, const bf16_t* __restrict src, float* __restrict dst, int64_t dim, bool first) {
    if (first) {
        for (int64_t d = 0; d < dim; ++d) dst[d] = w * bf16_to_f32(src[d]);
    } else {
        for (int64_t d = 0; d < dim; ++d) dst[d] += w * bf16_to_f32(src[d]);
    }
}

}  // namespace

void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        float* dst = out + t * dim;
        bool first = true;
        for (int64_t m = 0; m < entries; ++m) {
            const int64_t i = t * entries + m;
            if (peer[i] < 0) continue;
            axpy_bf16(weights ? weights[i] : 1.0f, rows[peer[i]] + row[i] * dim, dst, dim, first);
            first = false;
        }
        if (first) std::fill(dst, dst + dim, 0.0f);
    }
}

}  // namespace dsperf::ep
