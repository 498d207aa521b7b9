// A byte copy that can write past the caches: for copies whose destination is much larger than the
// last-level cache (kernels/common/cache.hpp), non-temporal stores skip the read of every line a
// plain store fills. Copies that the reader takes from the cache next stay plain (std::memcpy).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dsperf::kernels {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) inline void stream_copy_avx512(uint8_t* dst, const uint8_t* src, int64_t n) {
    const int64_t head = std::min<int64_t>(n, (64 - int64_t(reinterpret_cast<uintptr_t>(dst) & 63)) & 63);
    std::memcpy(dst, src, size_t(head));
    int64_t i = head;
    for (; i + 64 <= n; i += 64)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
    std::memcpy(dst + i, src + i, size_t(n - i));
}
#endif

// Copies n bytes; with stream, through non-temporal stores where the CPU has AVX-512 (the caller
// issues _mm_sfence, or any later synchronising operation, before another thread reads dst).
inline void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t n, bool stream) {
#if defined(__x86_64__)
    static const bool avx512 = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") != 0;
    }();
    if (stream && avx512) return stream_copy_avx512(dst, src, n);
#endif
    std::memcpy(dst, src, size_t(n));
}

}  // namespace dsperf::kernels
