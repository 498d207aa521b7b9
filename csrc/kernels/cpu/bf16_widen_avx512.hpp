// BF16 widened to FP32 in registers (a BF16 is the high half of its FP32): the conversions of the
// FMA kernels (the stream and attention GEMMs' products, the FMA prefill kernel's panels).
// Header-only: they inline into the kernels that call them.
#pragma once
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define DSPERF_WIDEN_AVX512 __attribute__((target("avx512f"), always_inline))

namespace dsperf::kernels::avx512 {

// 16 words of BF16 pairs: the first of each pair (the word's low half) as FP32.
DSPERF_WIDEN_AVX512 inline __m512 bf16_pair_first(__m512i words) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
}

// The second of each pair (the word's high half) as FP32.
DSPERF_WIDEN_AVX512 inline __m512 bf16_pair_second(__m512i words) {
    return _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int(0xffff0000u))));
}

// 16 BF16 as 16 FP32.
DSPERF_WIDEN_AVX512 inline __m512 bf16x16_to_f32(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

}  // namespace dsperf::kernels::avx512
#endif
