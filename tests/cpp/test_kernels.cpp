// C++ checks of the CPU kernels against naive loops, built to run under AddressSanitizer and
// UBSan as well (cmake -DDSPERF_SANITIZE=ON): every kernel family on odd sizes.
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include <unistd.h>

#include "test_support.hpp"
#include "kernels/common/fast_math.hpp"
#include "kernels/cpu/child_check.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/mla.hpp"
#include "kernels/cpu/moe.hpp"

using namespace dsperf::kernels;
using namespace dsperf_test;


static std::vector<bf16_t> random_bf16(std::mt19937& g, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<bf16_t> v(n);
    for (auto& x : v) x = f32_to_bf16(d(g));
    return v;
}

// M = 7 runs the BF16 dot kernel; M = 37 the FP32-FMA kernel (from 32 rows), with a partial panel.
static void test_linear(std::mt19937& g, int64_t M) {
    const int64_t N = 13, K = 301;
    auto x = random_bf16(g, M * K), w = random_bf16(g, N * K);
    std::vector<float> y(M * N);
    linear_bf16(x.data(), K, w.data(), K, y.data(), N, M, N, K);
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = 0, bound = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(bf16_to_f32(x[m * K + k])) * bf16_to_f32(w[n * K + k]);
                s += p, bound += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y[m * N + n] - s) / (bound * 1e-5 + 1e-30));
        }
    check(worst <= 1.0, "linear_bf16 against a naive loop");

    // FP8 weights with 128x128 blocks: N = 200 rows spans two row blocks, K = 301 three column blocks.
    const int64_t N8 = 200;
    std::vector<fp8_t> w8(N8 * K);
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : w8) b = fp8_t(byte(g) == 127 ? 126 : byte(g) & 0xfe);
    std::vector<float> scale(2 * 3, 0.01f);
    std::vector<float> y8(M * N8);
    linear_fp8(x.data(), K, w8.data(), scale.data(), y8.data(), N8, M, N8, K);
    worst = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N8; ++n) {
            double s = 0, bound = 0;
            for (int64_t k = 0; k < K; ++k) {
                const float wd = bf16_to_f32(f32_to_bf16(fp8_to_f32(w8[n * K + k]) * 0.01f));
                const double p = double(bf16_to_f32(x[m * K + k])) * wd;
                s += p, bound += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y8[m * N8 + n] - s) / (bound * 1e-5 + 1e-30));
        }
    check(worst <= 1.0, "linear_fp8 against a naive loop");
}

static void test_vnni(std::mt19937& g) {
    // N = 40 (a partial last column block), K = 257 (odd: a zero row completes the last pair).
    const int64_t M = 5, N = 40, K = 257;
    auto x = random_bf16(g, M * K), b = random_bf16(g, K * N);
    std::vector<bf16_t> bp(((K + 1) / 2) * N * 2, 0);
    for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) bp[(k / 2) * N * 2 + n * 2 + k % 2] = b[k * N + n];
    std::vector<float> y(M * N, 1.0f);
    gemm_bf16_vnni(x.data(), K, bp.data(), y.data(), N, M, N, K, /*accumulate=*/true);
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = 1, bound = 1;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(bf16_to_f32(x[m * K + k])) * bf16_to_f32(b[k * N + n]);
                s += p, bound += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y[m * N + n] - s) / (bound * 1e-5));
        }
    check(worst <= 1.0, "gemm_bf16_vnni against a naive loop (partial block, odd K, accumulate)");
}

static void test_moe(std::mt19937& g) {
    const int64_t T = 9, E = 16, topk = 4;
    std::normal_distribution<float> d;
    std::vector<float> logits(T * E), bias(E, 0.0f), weights(T * topk);
    for (auto& v : logits) v = d(g);
    std::vector<int32_t> ids(T * topk), position(T * topk), source(T * topk);
    GateConfig cfg;
    cfg.n_group = 4, cfg.topk_group = 2, cfg.top_k = topk, cfg.route_scale = 2.5f;
    moe_gate(logits.data(), T, E, bias.data(), cfg, weights.data(), ids.data());
    bool ok = true;
    for (int64_t t = 0; t < T; ++t) {
        float sum = 0;
        for (int64_t k = 0; k < topk; ++k) sum += weights[t * topk + k], ok &= ids[t * topk + k] >= 0 && ids[t * topk + k] < E;
        ok &= std::fabs(sum - 2.5f) < 1e-5f;
    }
    check(ok, "moe_gate ids in range and weights summing to route_scale");
    std::vector<int64_t> offsets(E + 1);
    moe_route(ids.data(), T, topk, E, offsets.data(), position.data(), source.data());
    ok = offsets[E] == T * topk;
    for (int64_t i = 0; i < T * topk; ++i) ok &= source[position[i]] == i / topk;
    check(ok, "moe_route is a permutation back to its tokens");

    ExpertWeights w;
    const int64_t D = 130, I = 70;
    auto w13 = random_bf16(g, E * 2 * I * D, 0.05f), w2 = random_bf16(g, E * D * I, 0.05f);
    w.w13 = w13.data(), w.w2 = w2.data(), w.n_experts = E, w.dim = D, w.inter = I;
    auto x = random_bf16(g, T * topk * D);
    std::vector<float> y(T * topk * D);
    experts_contiguous(x.data(), offsets.data(), w, y.data());
    ok = true;
    for (float v : y) ok &= std::isfinite(v);
    check(ok, "experts_contiguous on odd sizes");
}

static void test_mla(std::mt19937& g) {
    const int64_t B = 2, Q = 2, H = 3, L = 40, R = 8, BS = 16, blocks = 7;
    auto latent = random_bf16(g, blocks * BS * L), rope = random_bf16(g, blocks * BS * R);
    auto qn = random_bf16(g, B * Q * H * L, 0.1f), qr = random_bf16(g, B * Q * H * R, 0.1f);
    std::vector<int32_t> table = {6, 0, 2, 5, 1, 3}, lens = {37, 2};  // 3 blocks per request
    PagedLatentCache c;
    c.latent = latent.data(), c.rope = rope.data(), c.num_blocks = blocks, c.block_size = BS, c.kv_lora = L;
    c.rope_dim = R;
    std::vector<float> out(B * Q * H * L), lse(B * Q * H);
    mla_decode_absorbed(qn.data(), qr.data(), B, Q, H, c, table.data(), 3, lens.data(), 0.2f, 3, out.data(), lse.data());
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Q; ++i)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t seen = lens[b] - Q + i + 1, row = (b * Q + i) * H + h;
                std::vector<double> s(seen);
                double mx = -1e300;
                for (int64_t j = 0; j < seen; ++j) {
                    const int64_t tok = table[b * 3 + j / BS] * BS + j % BS;
                    double v = 0;
                    for (int64_t d = 0; d < L; ++d) v += double(bf16_to_f32(qn[row * L + d])) * bf16_to_f32(latent[tok * L + d]);
                    for (int64_t d = 0; d < R; ++d) v += double(bf16_to_f32(qr[row * R + d])) * bf16_to_f32(rope[tok * R + d]);
                    s[j] = v * 0.2, mx = std::max(mx, s[j]);
                }
                double l = 0;
                for (auto& v : s) l += (v = std::exp(v - mx));
                worst = std::max(worst, std::fabs(lse[row] - (mx + std::log(l))));
                for (int64_t d = 0; d < L; ++d) {
                    double o = 0;
                    for (int64_t j = 0; j < seen; ++j) o += s[j] * bf16_to_f32(latent[(table[b * 3 + j / BS] * BS + j % BS) * L + d]);
                    worst = std::max(worst, std::fabs(out[row * L + d] - o / l) / 0.05);
                }
            }
    check(worst < 1.0, "mla_decode_absorbed against a naive loop (split-KV, two query tokens)");
}

// Empty sums and non-finite values (run under UBSan too: NaN reaches exp_approx's integer part).
static void test_nonfinite(std::mt19937& g) {
    std::vector<float> y(3 * 5, 7.0f);
    linear_bf16(nullptr, 0, nullptr, 0, y.data(), 5, 3, 5, 0);
    bool zeros = true;
    for (float v : y) zeros &= v == 0.0f;
    check(zeros, "linear_bf16 with K = 0 writes zeros");
    check(std::isnan(exp_approx(NAN)) && std::isnan(exp_nonpositive(NAN)) && exp_nonpositive(-INFINITY) == 0.0f,
          "exp_approx keeps NaN");

    std::vector<float> x(2 * 256, 1.0f);
    x[5] = NAN;  // block 0 of token 0
    std::vector<fp8_t> q(2 * 256);
    std::vector<float> s(2 * 2);
    act_quant(x.data(), 2, 256, q.data(), s.data());
    check(std::isnan(s[0]) && std::isfinite(s[1]) && std::isfinite(s[2]) && std::isfinite(s[3]),
          "act_quant: a NaN makes its block's scale NaN, and only its block's");

    const int64_t B = 2, H = 2, L = 24, R = 8, BS = 8, blocks = 4;
    auto latent = random_bf16(g, blocks * BS * L), rope = random_bf16(g, blocks * BS * R);
    auto qn = random_bf16(g, B * H * L, 0.1f), qr = random_bf16(g, B * H * R, 0.1f);
    std::vector<int32_t> table = {0, 1, 2, 3}, lens = {13, 9};
    PagedLatentCache c;
    c.latent = latent.data(), c.rope = rope.data(), c.num_blocks = blocks, c.block_size = BS, c.kv_lora = L;
    c.rope_dim = R;
    latent[(1 * BS + 2) * L + 3] = f32_to_bf16(NAN);  // token 10 of request 0
    qn[(1 * H + 1) * L] = f32_to_bf16(NAN);            // request 1, head 1: a NaN query
    std::vector<float> out(B * H * L), lse(B * H);
    for (int64_t splits : {1, 3}) {
        mla_decode_absorbed(qn.data(), qr.data(), B, 1, H, c, table.data(), 2, lens.data(), 0.2f, splits, out.data(),
                            lse.data());
        bool ok = true;
        for (int64_t row = 0; row < B * H; ++row) {
            const bool want_nan = row < H || row == 3;  // all of request 0; request 1's head 1
            ok &= std::isnan(lse[row]) == want_nan;
            for (int64_t d = 0; d < L; ++d) ok &= std::isnan(out[row * L + d]) == want_nan;
        }
        check(ok, "mla_decode_absorbed: NaN keys and queries reach exactly their outputs");
    }
}

// FP8 conversion on the bits against the definition through the C library (frexp / ldexp /
// nearbyint): every upper 16 bits of a float with low bits that make ties and sticky bits.
static fp8_t fp8_by_definition(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= kFp8Max) return sign | 0x7e;
    int e;
    std::frexp(a, &e);
    const int q = e - 1 + 7 >= 1 ? e - 1 - 3 : -9;  // the quantum: normal or subnormal
    const float r = std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);
    if (r == 0) return sign;
    if (r >= kFp8Max) return sign | 0x7e;
    std::frexp(r, &e);
    if (e - 1 + 7 <= 0) return sign | uint8_t(int(std::ldexp(r, 9)));
    return sign | uint8_t((e - 1 + 7) << 3) | uint8_t(int(std::ldexp(r, -(e - 1)) * 8.0f) - 8);
}

static void test_fp8_conversion() {
    const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
    int64_t bad = 0;
    for (uint32_t hi = 0; hi < (1u << 16); ++hi)
        for (uint32_t lo : lows) {
            const uint32_t bits = (hi << 16) | lo;
            float f;
            std::memcpy(&f, &bits, 4);
            bad += f32_to_fp8(f) != fp8_by_definition(f);
        }
    check(bad == 0, "f32_to_fp8: rounds to nearest even and saturates, as its definition, on 393,216 floats");
}

// The child-process check the BF16 and AMX probes run: a fault, a wrong answer and a hang in the
// child come back as reasons, and the caller goes on.
static bool child_ok() { return true; }
static bool child_wrong() { return false; }
// SIGILL, as the BF16 probe meets it (AddressSanitizer would catch a SIGSEGV itself and exit 1).
static bool child_faults() {
    std::raise(SIGILL);
    return true;
}
static bool child_hangs() {
    for (;;) pause();
}
static void test_fails_in_child() {
    check(fails_in_child(&child_ok).empty(), "fails_in_child: a passing check");
    check(fails_in_child(&child_wrong) == "it ran but gave a wrong result", "fails_in_child: a wrong result");
    check(fails_in_child(&child_faults).find("signal 4") != std::string::npos, "fails_in_child: a fault");
    check(fails_in_child(&child_hangs, 0.2).find("did not finish") != std::string::npos, "fails_in_child: a hang");
}

int main() {
    std::mt19937 g(42);
    test_fp8_conversion();
    test_fails_in_child();
    std::printf("isa %s\n", cpu_features().isa.c_str());
    test_linear(g, 7);
    test_linear(g, 37);
    test_vnni(g);
    test_moe(g);
    test_mla(g);
    test_nonfinite(g);
    std::printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
