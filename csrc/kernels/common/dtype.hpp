// Element types of the kernels and their scalar conversions (host and, later, device code).
// BF16 and FP8-e4m3 (the "fn" variant: no infinities, one NaN pattern, max 448) as in
// DeepSeek-V3's checkpoints and ml_dtypes.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dsperf::kernels {

enum class DType : int { F32 = 0, BF16 = 1, F8E4M3 = 2, I32 = 3 };

inline const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "float32";
        case DType::BF16: return "bfloat16";
        case DType::F8E4M3: return "float8_e4m3fn";
        case DType::I32: return "int32";
    }
    return "?";
}

inline size_t dtype_size(DType t) { return t == DType::F32 || t == DType::I32 ? 4 : t == DType::BF16 ? 2 : 1; }

using bf16_t = uint16_t;  // raw bits
using fp8_t = uint8_t;    // raw bits, e4m3fn

// FP8 weights carry one FP32 scale per block of kFp8Block x kFp8Block values (DeepSeek-V3's
// checkpoint format): a [rows, cols] matrix has fp8_scale_blocks(rows) x fp8_scale_blocks(cols).
constexpr int64_t kFp8Block = 128;
constexpr int64_t fp8_scale_blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

inline float bf16_to_f32(bf16_t v) {
    const uint32_t bits = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even; NaN stays NaN.
inline bf16_t f32_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return bf16_t(bits >> 16);
}

constexpr float kFp8Max = 448.0f;

inline float fp8_to_f32(fp8_t v) {
    const int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
    if (exp == 0xf && man == 0x7) return NAN;
    const float mag = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
    return sign ? -mag : mag;
}

// All 256 codes decoded once: fp8_to_f32 through a table (the per-value decode calls ldexp).
inline const float* fp8_table() {
    static const struct Table {
        float v[256];
        Table() {
            for (int i = 0; i < 256; ++i) v[i] = fp8_to_f32(fp8_t(i));
        }
    } table;
    return table.v;
}

// Round to nearest even, saturating at +-448 (values beyond the range clip rather than become
// NaN); NaN stays NaN. Integer arithmetic on the bits, no library calls (activation quantisation
// and the EP dispatch convert every value):
// - normals (|f| >= 2^-6): drop 20 of the float's 23 mantissa bits, rounding to nearest even; a
//   carry moves into the exponent, and rebiasing 127 -> 7 is a subtraction on (exponent, mantissa);
// - subnormals: the code is |f| / 2^-9 rounded to nearest even (code 8, from rounding up, is the
//   smallest normal, which is what its bits mean).
inline fp8_t f32_to_fp8(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint8_t sign = uint8_t((bits >> 24) & 0x80);
    const uint32_t abits = bits & 0x7fffffffu;
    if (abits > 0x7f800000u) return 0x7f;                    // NaN
    if (abits >= 0x43e00000u) return sign | 0x7e;           // |f| >= 448 (and inf): saturate
    if (abits < 0x3c800000u) {                              // |f| < 2^-6: subnormal (or zero)
        float a;
        std::memcpy(&a, &abits, 4);
        const float scaled = a * 512.0f;                     // exact: a power-of-two scale
        const float rounded = (scaled + 8388608.0f) - 8388608.0f;  // round half to even (< 2^23)
        return sign | uint8_t(rounded);
    }
    const uint32_t lsb = (abits >> 20) & 1u;
    const uint32_t code = ((abits + 0x7ffffu + lsb) >> 20) - (120u << 3);  // exponent 127 -> 7
    return sign | uint8_t(code > 0x7eu ? 0x7eu : code);
}

}  // namespace dsperf::kernels
