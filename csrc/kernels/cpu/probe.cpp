#include "kernels/cpu/probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPERF_AVX512 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#endif

namespace dsperf::kernels {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The calling thread's place in its parallel region (one thread without OpenMP).
int64_t omp_threads() {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}
int64_t omp_thread() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

#ifdef DSPERF_AVX512
// 16 independent accumulators hide the instruction latency; returns FLOPs done.
DSPERF_AVX512 double dpbf16_loop(int64_t iters) {
    __m512 c[16];
    for (auto& v : c) v = _mm512_setzero_ps();
    __m512i a = _mm512_set1_epi16(0x3c00), b = _mm512_set1_epi16(0x3c00);  // tiny values: no overflow
    for (int64_t it = 0; it < iters; ++it) {
        for (auto& v : c) v = _mm512_dpbf16_ps(v, (__m512bh)a, (__m512bh)b);
        __asm__ volatile("" : "+v"(a));  // keep the loop from being folded
    }
    float sink = 0;
    for (auto& v : c) sink += _mm512_reduce_add_ps(v);
    volatile float keep = sink;
    (void)keep;
    return double(iters) * 16 * 64;
}
#endif

// The sum of n words read with 64-byte loads, as the AVX-512 kernels read their weights (the plain
// loop below compiles to 16-byte loads in a portable build, which on some CPUs keep too few loads
// in flight to reach the bandwidth the kernels reach: a roof the kernels exceed is no roof).
// Two streams per thread, its first and second half read in step: more requests in flight.
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint64_t* p, int64_t n) {
    const int64_t half = n / 2 / 8 * 8;
    const uint64_t* q = p + half;
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    for (int64_t i = 0; i < half; i += 8) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(q + i));
    }
    uint64_t total = uint64_t(_mm512_reduce_add_epi64(_mm512_add_epi64(a0, a1)));
    for (int64_t i = 2 * half; i < n; ++i) total += p[i];
    return total;
}

// 16 independent FMA chains (16 zmm accumulators on AVX-512, plain floats elsewhere); returns
// FLOPs done.
#ifdef DSPERF_AVX512
__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
    __m512 c[16];
    for (auto& v : c) v = _mm512_setzero_ps();
    __m512 a = _mm512_set1_ps(0.999999f);
    const __m512 b = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; ++it) {
        for (auto& v : c) v = _mm512_fmadd_ps(v, a, b);
        __asm__ volatile("" : "+v"(a));
    }
    float sink = 0;
    for (auto& v : c) sink += _mm512_reduce_add_ps(v);
    volatile float keep = sink;
    (void)keep;
    return double(iters) * 16 * 32;
}
#endif

double fma_loop(int64_t iters) {
#ifdef DSPERF_AVX512
    if (cpu_features().avx512) return fma_loop_avx512(iters);
#endif
    float c[16] = {};
    float a = 0.999999f;
    for (int64_t it = 0; it < iters; ++it) {
        for (float& v : c) v = v * a + 1e-7f;
        __asm__ volatile("" : "+r"(a));
    }
    float sink = 0;
    for (float v : c) sink += v;
    volatile float keep = sink;
    (void)keep;
    return double(iters) * 16 * 2;
}
}  // namespace

double probe_bf16_peak_gflops(double seconds) {
    if (!(seconds > 0)) throw std::invalid_argument("seconds must be positive");
#ifdef DSPERF_AVX512
    if (!cpu_features().runs_dot_bf16()) return 0;
    double flops = 0, elapsed = 0;
#pragma omp parallel reduction(+ : flops) reduction(max : elapsed)
    {
        dpbf16_loop(100000);  // warm up the clock and the vector unit
        const double t0 = now();
        double f = 0;
        while (now() - t0 < seconds) f += dpbf16_loop(2000000);
        flops += f;
        elapsed = now() - t0;
    }
    return flops / elapsed / 1e9;
#else
    return 0;
#endif
}

double probe_fp32_fma_peak_gflops(double seconds) {
    if (!(seconds > 0)) throw std::invalid_argument("seconds must be positive");
    double flops = 0, elapsed = 0;
#pragma omp parallel reduction(+ : flops) reduction(max : elapsed)
    {
        const double t0 = now();
        double f = 0;
        while (now() - t0 < seconds) f += fma_loop(1000000);
        flops += f;
        elapsed = now() - t0;
    }
    return flops / elapsed / 1e9;
}

namespace {
int thread_count(int threads) {
#ifdef _OPENMP
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
    return 1;
#endif
}
}  // namespace

double probe_dot_to_fma_speed() {
#ifdef DSPERF_AVX512
    if (!cpu_features().runs_dot_bf16()) return 0;
    // A few milliseconds on the calling thread: the rates are per core, the ratio is what matters.
    // Each loop runs twice and the faster pass counts (the first also wakes the vector unit).
    auto rate = [](auto loop, int64_t iters) {
        double best = 0;
        for (int pass = 0; pass < 2; ++pass) {
            const double t0 = now();
            const double flops = loop(iters);
            best = std::max(best, flops / (now() - t0));
        }
        return best;
    };
    const double dot = rate(dpbf16_loop, 100000), fma = rate(fma_loop_avx512, 100000);
    return fma > 0 ? dot / fma : 0;
#else
    return 0;
#endif
}

double probe_triad_bandwidth_gbps(int64_t bytes, int repeats, int threads) {
    if (bytes < (3 << 20)) throw std::invalid_argument("bytes must be at least 3 MiB");
    if (repeats < 1) throw std::invalid_argument("repeats must be >= 1");
    const int nt = thread_count(threads);
    const int64_t n = bytes / 3 / int64_t(sizeof(double));
    std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = 0, b[size_t(i)] = 1, c[size_t(i)] = 2;
    double best = 0;
    for (int r = 0; r < repeats; ++r) {
        const double t0 = now();
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < n; ++i) a[size_t(i)] = b[size_t(i)] + 3.0 * c[size_t(i)];
        const double t = now() - t0;
        best = std::max(best, double(n) * 3 * sizeof(double) / t / 1e9);
    }
    volatile double keep = a[size_t(n / 2)];
    (void)keep;
    return best;
}

double probe_read_bandwidth_gbps(int64_t bytes, int repeats, int threads) {
    if (bytes < (1 << 20)) throw std::invalid_argument("bytes must be at least 1 MiB");
    if (repeats < 1) throw std::invalid_argument("repeats must be >= 1");
    const int nt = thread_count(threads);
    const int64_t n = bytes / int64_t(sizeof(uint64_t));
    std::vector<uint64_t> buf(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = uint64_t(i);  // first touch by the reading thread
    double best = 0;
    uint64_t sink = 0;
#ifdef DSPERF_AVX512
    const bool wide = use_avx512();
#else
    const bool wide = false;
#endif
    for (int r = 0; r < repeats; ++r) {
        const double t0 = now();
        uint64_t total = 0;
        if (wide) {
#ifdef DSPERF_AVX512
#pragma omp parallel reduction(+ : total) num_threads(nt)
            {
                const int64_t parts = omp_threads(), me = omp_thread();
                const int64_t lo = n * me / parts, hi = n * (me + 1) / parts;
                total += sum_words_avx512(buf.data() + lo, hi - lo);
            }
#endif
        } else {
            // Integer sums reassociate freely, so the compiler vectorises the loop: the load
            // ports, not an add chain, set the pace.
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(nt)
            for (int64_t i = 0; i < n; ++i) total += buf[size_t(i)];
        }
        const double t = now() - t0;
        sink += total;
        best = std::max(best, double(n) * sizeof(uint64_t) / t / 1e9);
    }
    volatile uint64_t keep = sink;
    (void)keep;
    return best;
}

}  // namespace dsperf::kernels
