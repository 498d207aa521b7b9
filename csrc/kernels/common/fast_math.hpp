// exp as branch-free float arithmetic the compiler vectorises (libm's exp is a call per element):
// exp_approx for any x (SiLU), exp_nonpositive for softmax rows (scores minus their running
// maximum; exactly 0 below -87, so masked keys at -inf vanish). Relative error below 3e-7.
#pragma once
#include <cstdint>
#include <cstring>

namespace dsperf::kernels {

// e^x for x clamped to [-87, 88] (beyond that FP32 under- or overflows anyway): e^x = 2^n e^r with n
// the nearest integer to x / ln 2 (the 1.5 * 2^23 trick) and a degree-6 Taylor polynomial for e^r.
inline float exp_approx(float x) {
    const float c = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    // NaN stays NaN through r and p below; the exponent is taken from 0 instead, since converting
    // NaN to an integer is undefined (and a NaN score must come out NaN, not as some number).
    const float t = (c == c ? c : 0.0f) * 1.44269504f;
    const float n = (t + 12582912.0f) - 12582912.0f;  // nearest integer (|t| < 2^22)
    const float r = c - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return p * scale;
}

inline float exp_nonpositive(float x) { return x < -87.0f ? 0.0f : exp_approx(x); }

}  // namespace dsperf::kernels
