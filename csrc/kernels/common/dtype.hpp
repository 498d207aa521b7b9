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
// NaN); NaN stays NaN.
inline fp8_t f32_to_fp8(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    float a = std::fabs(f);
    if (a >= kFp8Max) return sign | 0x7e;  // 448
    if (a < std::ldexp(1.0f, -10)) return sign;  // below half the smallest subnormal (2^-9)
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    int exp = e - 1 + 7;  // biased exponent of a normal e4m3
    // Quantum: 2^(e-1-3) for normals, 2^-9 for subnormals.
    const int q = exp >= 1 ? e - 1 - 3 : -9;
    float n = std::nearbyint(std::ldexp(a, -q));  // integer multiple of the quantum, ties to even
    float r = std::ldexp(n, q);
    if (r == 0) return sign;
    if (r >= kFp8Max) return sign | 0x7e;
    // Re-encode r exactly.
    std::frexp(r, &e);
    exp = e - 1 + 7;
    if (exp <= 0) return sign | uint8_t(int(std::ldexp(r, 9)));  // subnormal: r = man * 2^-9
    const int man = int(std::ldexp(r, -(e - 1)) * 8.0f) - 8;
    return sign | uint8_t(exp << 3) | uint8_t(man);
}

}  // namespace dsperf::kernels
