// FP8-e4m3 -> BF16 in registers for one 128 x 128 weight block (one scale).
//
// Within a block every code's BF16 value bf16(fp8 x scale) depends only on the code, so it is a
// table lookup. The table holds the 128 non-negative codes' values times the scale (built with the
// scalar fp8 decoding and VCVTNE2PS2BF16, which rounds to nearest even as f32_to_bf16 does, so the
// lookups are bit-identical to the scalar dequantisation); rounding is symmetric, so a negative
// code's value is the positive one with the sign bit flipped. Layouts of the same table:
//  - Fp8WordTable: 128 BF16 words in 4 zmm, looked up 32 codes at a time with two VPERMT2W, the
//    results in the codes' order (for packing weight panels);
//  - Fp8ByteRegs (in registers) / Fp8ByteTable (in memory, built from it): the low and the high
//    bytes of the 128 words in 2 + 2 zmm, looked up 64 codes at a time with one VPERMT2B each (a
//    128-byte table per instruction: AVX512-VBMI), then interleaved into words by VPUNPCK[LH]BW,
//    which keeps each 128-bit lane: the 64 results come out in the order fp8_lane_order describes
//    (fp8_convert64), and the other operand is put in the same order once per call instead
//    (streaming weights in decode; the AMX tiles, to_fp8_lane_order).
// Header-only: the functions inline into the micro-kernels that call them.
#pragma once
#include <cstdint>

namespace dsperf::kernels::avx512 {

// Where the 64 codes of one fp8_convert64 land: word w of the first vector holds code
// 16 * (w / 8) + w % 8, word w of the second code 16 * (w / 8) + 8 + w % 8 (VPUNPCK works within
// 128-bit lanes). Consecutive word pairs hold consecutive codes, so VDPBF16PS still pairs
// neighbours; only the order of the FP32 sums changes. (Outside the x86 guard: portable code packs
// operands in this order too.)
constexpr int64_t fp8_lane_order(int64_t pos) {  // pos in [0, 64): position in (first, second)
    return pos < 32 ? 16 * (pos / 8) + pos % 8 : 16 * ((pos - 32) / 8) + 8 + (pos - 32) % 8;
}

}  // namespace dsperf::kernels::avx512

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <cmath>

#include "kernels/common/dtype.hpp"

#define DSPERF_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace dsperf::kernels::avx512 {

struct Fp8WordTable {
    __m512i t[4];
    // The 128 words bf16(fp8_to_f32(code) x scale), code = 0..127 (the sign of the scale
    // included), built in registers: VCVTNE2PS2BF16 packs 2 x 16 products into one vector of 32
    // words, rounding to nearest even as f32_to_bf16 does. (Built in memory and read back, 256-bit
    // stores as 512-bit loads stalled on store forwarding: as long as converting the 512 codes of
    // the tile it was built for.)
    DSPERF_AVX512_VBMI explicit Fp8WordTable(float scale) {
        const float* decoded = fp8_table();
        const __m512 sv = _mm512_set1_ps(scale);
        for (int i = 0; i < 4; ++i)
            t[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(decoded + 32 * i + 16), sv),
                                                _mm512_mul_ps(_mm512_loadu_ps(decoded + 32 * i), sv));
    }
    // 32 codes (zero-extended to 16 bits) -> 32 BF16 in the same order.
    DSPERF_AVX512_VBMI __m512i convert(__m512i idx) const {
        const __m512i q0 = _mm512_permutex2var_epi16(t[0], idx, t[1]);  // codes 0-63
        const __m512i q1 = _mm512_permutex2var_epi16(t[2], idx, t[3]);  // codes 64-127
        const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(idx, _mm512_set1_epi16(64)), q0, q1);
        // The code's sign bit (bit 7) moved to bit 15 flips the value's sign.
        return _mm512_xor_si512(mag, _mm512_slli_epi16(_mm512_and_si512(idx, _mm512_set1_epi16(128)), 8));
    }
};

// The low (high = false) or high bytes of two vectors of 32 words, as one vector of 64 bytes.
DSPERF_AVX512_VBMI inline __m512i fp8_word_bytes(__m512i w0, __m512i w1, bool high) {
    if (high) w0 = _mm512_srli_epi16(w0, 8), w1 = _mm512_srli_epi16(w1, 8);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(w0)), _mm512_cvtepi16_epi8(w1), 1);
}

// The byte table in registers, from a word table (no round trip through memory).
struct Fp8ByteRegs {
    __m512i lo0, lo1, hi0, hi1;  // low / high bytes of words 0-63 and 64-127
    DSPERF_AVX512_VBMI explicit Fp8ByteRegs(const Fp8WordTable& w)
        : lo0(fp8_word_bytes(w.t[0], w.t[1], false)), lo1(fp8_word_bytes(w.t[2], w.t[3], false)),
          hi0(fp8_word_bytes(w.t[0], w.t[1], true)), hi1(fp8_word_bytes(w.t[2], w.t[3], true)) {}
};

// The same bytes in memory, ready to be loaded as 4 zmm (lo0, lo1, hi0, hi1): one per 128-column
// block, reused by every row tile of a decode GEMM.
struct alignas(64) Fp8ByteTable {
    uint8_t lo[128], hi[128];
    DSPERF_AVX512_VBMI void build(float scale) {
        const Fp8ByteRegs r{Fp8WordTable(scale)};
        _mm512_storeu_si512(lo, r.lo0), _mm512_storeu_si512(lo + 64, r.lo1);
        _mm512_storeu_si512(hi, r.hi0), _mm512_storeu_si512(hi + 64, r.hi1);
    }
};

// 64 codes -> two vectors of 32 BF16 in lane order (see fp8_lane_order). tlo/thi: the table's
// bytes as loaded from an Fp8ByteTable.
DSPERF_AVX512_VBMI inline void fp8_convert64(__m512i codes, __m512i tlo0, __m512i tlo1, __m512i thi0, __m512i thi1,
                                             __m512i& first, __m512i& second) {
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, codes, tlo1);  // bit 7 of the index is ignored
    __m512i hi = _mm512_permutex2var_epi8(thi0, codes, thi1);
    // hi ^= codes & 0x80: the code's sign flips the value's (ternary-logic table A ^ (B & C)).
    hi = _mm512_ternarylogic_epi32(hi, codes, _mm512_set1_epi8(char(0x80)), 0x78);
    first = _mm512_unpacklo_epi8(lo, hi);
    second = _mm512_unpackhi_epi8(lo, hi);
}

// 32 BF16 values in natural order per vector (a: values 0-31 of a group of 64, b: 32-63) put in
// fp8_convert64's lane order: the operand a product pairs with FP8 weights converted that way (the
// AMX driver's x tiles). One two-source 64-bit permute per vector: the order moves values in runs
// of 8, so every 64-bit group of 4 stays whole.
DSPERF_AVX512_VBMI inline void to_fp8_lane_order(__m512i a, __m512i b, __m512i& first, __m512i& second) {
    first = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), b);
    second = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), b);
}

}  // namespace dsperf::kernels::avx512
#endif
