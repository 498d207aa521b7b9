#include "kernels/cpu/linear_amx.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/child_check.hpp"
#include "kernels/cpu/cpu_features.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPERF_HAVE_AMX_BUILD 1
#define DSPERF_AMX __attribute__((target("amx-tile,amx-bf16")))
#else
#define DSPERF_HAVE_AMX_BUILD 0
#endif

namespace dsperf::kernels::amx {

namespace {

// Tile shapes (palette 1): every tile used here is 16 rows of 64 bytes.
// A: 16 rows of x x 32 BF16 of K. B: 16 pairs of K x 16 columns x 2 (the VNNI pair layout).
// C: 16 x 16 FP32. Tiles 0-3 hold C for 2 x 2 blocks, 4-5 two A blocks, 6-7 two B blocks.
constexpr int64_t kRows = 16, kDepth = 32, kTileElems = kRows * kDepth;

// ---- the two backends -------------------------------------------------------------------------

// The tile instructions' semantics in plain C++: 8 tiles of 16 x 64 bytes; TDPBF16PS adds, for
// each K pair, the two BF16 products to the FP32 accumulator one after the other.
struct Emulated {
    alignas(64) uint8_t t[8][kRows * 64];
    void config() {}
    void release() {}
    template <int T>
    void zero() {
        std::memset(t[T], 0, sizeof t[T]);
    }
    template <int T>
    void load(const void* p, int64_t stride) {
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(t[T] + r * 64, static_cast<const uint8_t*>(p) + r * stride, 64);
    }
    template <int T>
    void store(void* p, int64_t stride) {
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, t[T] + r * 64, 64);
    }
    template <int C, int A, int B>
    void dp() {
        float c[kRows * 16];
        bf16_t a[kRows * 32], b[kRows * 32];
        std::memcpy(c, t[C], sizeof c);
        std::memcpy(a, t[A], sizeof a);
        std::memcpy(b, t[B], sizeof b);
        for (int64_t m = 0; m < kRows; ++m)
            for (int64_t n = 0; n < 16; ++n) {
                float s = c[m * 16 + n];
                for (int64_t p = 0; p < 16; ++p) {
                    s += bf16_to_f32(a[m * 32 + 2 * p]) * bf16_to_f32(b[p * 32 + 2 * n]);
                    s += bf16_to_f32(a[m * 32 + 2 * p + 1]) * bf16_to_f32(b[p * 32 + 2 * n + 1]);
                }
                c[m * 16 + n] = s;
            }
        std::memcpy(t[C], c, sizeof c);
    }
};

#if DSPERF_HAVE_AMX_BUILD
// LDTILECFG reads all 64 bytes of its operand. GCC 12's _tile_loadconfig declares an 8-byte memory
// operand, so the compiler may drop the stores of rows[] and colsb[] as dead and the instruction
// then faults (#GP) on stack garbage. Here the configuration is one constant object in read-only
// data, emitted whole, and the asm names the whole 64-byte struct as its operand. tile_config_bytes()
// returns those very bytes, and tests/test_amx_config.py checks in the built module that every
// LDTILECFG loads from this object.
struct alignas(64) TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Palette 1; tiles 0-7 all 16 rows of 64 bytes.
constexpr TileConfig kTileConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

struct Hardware {
    DSPERF_AMX void config() { __asm__ volatile("ldtilecfg %0" : : "m"(kTileConfig)); }
    DSPERF_AMX void release() { _tile_release(); }
    // The tile intrinsics paste their tile number into the instruction text, so each number is
    // spelled out.
    template <int T>
    DSPERF_AMX void zero() {
        if constexpr (T == 0) _tile_zero(0);
        else if constexpr (T == 1) _tile_zero(1);
        else if constexpr (T == 2) _tile_zero(2);
        else if constexpr (T == 3) _tile_zero(3);
        else static_assert(T < 4, "accumulators are tiles 0-3");
    }
    template <int T>
    DSPERF_AMX void load(const void* p, int64_t stride) {
        if constexpr (T == 4) _tile_loadd(4, p, stride);
        else if constexpr (T == 5) _tile_loadd(5, p, stride);
        else if constexpr (T == 6) _tile_loadd(6, p, stride);
        else if constexpr (T == 7) _tile_loadd(7, p, stride);
        else static_assert(T >= 4, "operands are tiles 4-7");
    }
    template <int T>
    DSPERF_AMX void store(void* p, int64_t stride) {
        if constexpr (T == 0) _tile_stored(0, p, stride);
        else if constexpr (T == 1) _tile_stored(1, p, stride);
        else if constexpr (T == 2) _tile_stored(2, p, stride);
        else if constexpr (T == 3) _tile_stored(3, p, stride);
        else static_assert(T < 4, "accumulators are tiles 0-3");
    }
    template <int C, int A, int B>
    DSPERF_AMX void dp() {
        if constexpr (C == 0 && A == 4 && B == 6) _tile_dpbf16ps(0, 4, 6);
        else if constexpr (C == 1 && A == 4 && B == 7) _tile_dpbf16ps(1, 4, 7);
        else if constexpr (C == 2 && A == 5 && B == 6) _tile_dpbf16ps(2, 5, 6);
        else if constexpr (C == 3 && A == 5 && B == 7) _tile_dpbf16ps(3, 5, 7);
        else static_assert(C < 0, "the driver uses four (C, A, B) combinations");
    }
};
#endif

// ---- packing ------------------------------------------------------------------------------------

// x padded to whole tiles: [Mp][Kp], zeros past M and K.
std::vector<bf16_t> pack_x(const bf16_t* x, int64_t ldx, int64_t M, int64_t K, int64_t Mp, int64_t Kp) {
    std::vector<bf16_t> a(static_cast<size_t>(Mp * Kp), bf16_t(0));
    for (int64_t m = 0; m < M; ++m) std::copy(x + m * ldx, x + m * ldx + K, a.begin() + m * Kp);
    return a;
}

// One panel of 16 columns starting at n0: k_tiles tiles of [16 pairs][16 columns][2], zeros past
// N and K. From w row-major [N, K]: element (pair p, column j, half h) of tile kt is
// w[n0 + j][32 kt + 2 p + h].
void pack_panel_rows(const bf16_t* w, int64_t ldw, int64_t N, int64_t K, int64_t n0, int64_t k_tiles, bf16_t* panel) {
    // Each K pair of a row moves as one 4-byte word; a row's words land 64 bytes apart (one per
    // tile row). The whole weight matrix passes through here once per call: a cache of packed
    // weights would save it for repeated calls on the same weights.
    std::fill(panel, panel + k_tiles * kTileElems, bf16_t(0));
    const int64_t full_pairs = K / 2;
    for (int64_t j = 0; j < 16 && n0 + j < N; ++j) {
        const bf16_t* row = w + (n0 + j) * ldw;
        for (int64_t q = 0; q < full_pairs; ++q)
            std::memcpy(panel + (q / 16) * kTileElems + (q % 16) * 32 + j * 2, row + 2 * q, 2 * sizeof(bf16_t));
        if (K % 2) panel[(full_pairs / 16) * kTileElems + (full_pairs % 16) * 32 + j * 2] = row[K - 1];
    }
}

// The same panel from gemm_bf16_vnni's layout bp[(k / 2) * N * 2 + n * 2 + k % 2], which already
// holds K pairs side by side: each tile row is 16 consecutive columns of one pair row.
void pack_panel_vnni(const bf16_t* bp, int64_t N, int64_t K, int64_t n0, int64_t k_tiles, bf16_t* panel) {
    std::fill(panel, panel + k_tiles * kTileElems, bf16_t(0));
    const int64_t pairs = (K + 1) / 2, cols = std::min<int64_t>(16, N - n0);
    for (int64_t q = 0; q < pairs; ++q) {
        const int64_t kt = q / 16, p = q % 16;
        std::copy(bp + (q * N + n0) * 2, bp + (q * N + n0 + cols) * 2, panel + kt * kTileElems + p * 32);
    }
}

// ---- the driver ---------------------------------------------------------------------------------

// y[M, N] (+)= a[Mp, Kp] B, B given by pack(n0, panel) 16 columns at a time. Threads take pairs of
// panels (32 columns), pack them into their own buffer (L2-sized for DeepSeek-V3's K), and run
// every pair of 16-row blocks of x against them: 2 x 2 accumulator tiles per step.
template <class Ops, class Pack>
void run(const bf16_t* a, int64_t Mp, int64_t Kp, const Pack& pack, float* y, int64_t ldy, int64_t M, int64_t N,
         bool accumulate) {
    const int64_t k_tiles = Kp / kDepth, m_blocks = Mp / kRows, n_blocks = (N + 15) / 16, n_pairs = (n_blocks + 1) / 2;
    const int64_t lda = Kp * int64_t(sizeof(bf16_t));
#pragma omp parallel
    {
        std::vector<bf16_t> panels(static_cast<size_t>(2 * k_tiles * kTileElems));
        alignas(64) float c[kRows * 16];
        Ops ops;
        ops.config();
        const auto write = [&](int64_t m0, int64_t n0) {
            for (int64_t r = 0; r < kRows && m0 + r < M; ++r)
                for (int64_t j = 0; j < 16 && n0 + j < N; ++j) {
                    float& dst = y[(m0 + r) * ldy + n0 + j];
                    dst = accumulate ? dst + c[r * 16 + j] : c[r * 16 + j];
                }
        };
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < n_pairs; ++q) {
            const int64_t n0 = q * 32;
            const bool n1 = n0 + 16 < N;
            bf16_t* p0 = panels.data();
            bf16_t* p1 = p0 + k_tiles * kTileElems;
            pack(n0, p0);
            if (n1) pack(n0 + 16, p1);
            for (int64_t i = 0; i < m_blocks; i += 2) {
                const bool m1 = i + 1 < m_blocks;
                const bf16_t* a0 = a + i * kRows * Kp;
                const bf16_t* a1 = a0 + kRows * Kp;
                ops.template zero<0>();
                ops.template zero<1>();
                ops.template zero<2>();
                ops.template zero<3>();
                for (int64_t kt = 0; kt < k_tiles; ++kt) {
                    ops.template load<4>(a0 + kt * kDepth, lda);
                    ops.template load<6>(p0 + kt * kTileElems, 64);
                    ops.template dp<0, 4, 6>();
                    if (n1) {
                        ops.template load<7>(p1 + kt * kTileElems, 64);
                        ops.template dp<1, 4, 7>();
                    }
                    if (m1) {
                        ops.template load<5>(a1 + kt * kDepth, lda);
                        ops.template dp<2, 5, 6>();
                        if (n1) ops.template dp<3, 5, 7>();
                    }
                }
                ops.template store<0>(c, 64);
                write(i * kRows, n0);
                if (n1) {
                    ops.template store<1>(c, 64);
                    write(i * kRows, n0 + 16);
                }
                if (m1) {
                    ops.template store<2>(c, 64);
                    write((i + 1) * kRows, n0);
                    if (n1) {
                        ops.template store<3>(c, 64);
                        write((i + 1) * kRows, n0 + 16);
                    }
                }
            }
        }
        ops.release();
    }
}

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

template <class Ops>
void linear_on(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M, int64_t N,
               int64_t K, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t Mp = round_up(M, 2 * kRows), Kp = round_up(std::max<int64_t>(K, 1), kDepth);
    const std::vector<bf16_t> a = pack_x(x, ldx, M, K, Mp, Kp);
    run<Ops>(a.data(), Mp, Kp, [&](int64_t n0, bf16_t* panel) { pack_panel_rows(w, ldw, N, K, n0, Kp / kDepth, panel); },
             y, ldy, M, N, accumulate);
}

template <class Ops>
void vnni_on(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N, int64_t K,
             bool accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t Mp = round_up(M, 2 * kRows), Kp = round_up(std::max<int64_t>(K, 1), kDepth);
    const std::vector<bf16_t> a = pack_x(x, ldx, M, K, Mp, Kp);
    run<Ops>(a.data(), Mp, Kp, [&](int64_t n0, bf16_t* panel) { pack_panel_vnni(bp, N, K, n0, Kp / kDepth, panel); }, y,
             ldy, M, N, accumulate);
}

// ---- selection ----------------------------------------------------------------------------------

struct Verdict {
    bool ok = false;
    std::string why;
};

#if DSPERF_HAVE_AMX_BUILD
// Stage 1, in a child process: the Hardware backend's configuration, load, TDPBF16PS and store on
// one tile triple. A configuration that faults ends the child, not the caller. The operands and the
// expected product are prepared before the fork (the child must not allocate).
struct TileProbe {
    alignas(64) bf16_t a[kTileElems];
    alignas(64) bf16_t b[kTileElems];
    alignas(64) float expected[kRows * 16];
    alignas(64) float got[kRows * 16];
};
TileProbe g_probe;

DSPERF_AMX bool one_tile_product() {
    Hardware hw;
    hw.config();
    hw.zero<0>();
    hw.load<4>(g_probe.a, 64);
    hw.load<6>(g_probe.b, 64);
    hw.dp<0, 4, 6>();
    hw.store<0>(g_probe.got, 64);
    hw.release();
    for (int64_t i = 0; i < kRows * 16; ++i)
        if (!(std::fabs(g_probe.got[i] - g_probe.expected[i]) <= 1e-3f * (1.0f + std::fabs(g_probe.expected[i]))))
            return false;
    return true;
}

std::string tile_product_fails() {
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& v : g_probe.a) v = f32_to_bf16(dist(gen));
    for (auto& v : g_probe.b) v = f32_to_bf16(dist(gen));
    Emulated em;
    em.zero<0>();
    em.load<4>(g_probe.a, 64);
    em.load<6>(g_probe.b, 64);
    em.dp<0, 4, 6>();
    em.store<0>(g_probe.expected, 64);
    return fails_in_child(&one_tile_product);
}

// Stage 2, here, once stage 1 has passed: the whole driver on the hardware against the emulation on
// a GEMM with partial tiles in every dimension, on every thread the kernels use.
bool driver_agrees() {
    const int64_t M = 37, N = 41, K = 75;
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<bf16_t> x(M * K), w(N * K);
    for (auto& v : x) v = f32_to_bf16(dist(gen));
    for (auto& v : w) v = f32_to_bf16(dist(gen));
    std::vector<float> hw(M * N), em(M * N);
    linear_on<Hardware>(x.data(), K, w.data(), K, hw.data(), N, M, N, K, false);
    linear_on<Emulated>(x.data(), K, w.data(), K, em.data(), N, M, N, K, false);
    for (int64_t i = 0; i < M * N; ++i)
        if (!(std::fabs(hw[i] - em[i]) <= 1e-3f * (1.0f + std::fabs(em[i])))) return false;
    return true;
}
#endif

// DSPERF_AMX: unset or "1" (use AMX where usable) or "0" (never); anything else is an error, so
// that a typo cannot silently select a path.
bool amx_allowed_by_env() {
    const char* env = std::getenv("DSPERF_AMX");
    if (!env) return true;
    const std::string v(env);
    if (v == "0") return false;
    if (v == "1") return true;
    throw std::invalid_argument("DSPERF_AMX must be 0 or 1 (or unset), not '" + v + "'");
}

// Decided once. A bad DSPERF_AMX throws from the initialiser, which leaves it undecided, so every
// later call throws again (the module checks at import, before any kernel can ask).
const Verdict& verdict() {
    static const Verdict v = [] {
        Verdict r;
        if (!amx_allowed_by_env()) {
            r.why = "disabled by DSPERF_AMX=0";
        } else if (!DSPERF_HAVE_AMX_BUILD) {
            r.why = "not built for this compiler or architecture";
        } else if (!cpu_features().amx_bf16) {
            r.why = "this CPU (or the OS) offers no AMX-BF16 tiles";
        } else if (cpu_features().isa == "portable") {
            r.why = "the portable kernels were asked for (DSPERF_ISA=portable)";
        } else {
#if DSPERF_HAVE_AMX_BUILD
            const std::string fails = tile_product_fails();
            if (!fails.empty()) {
                r.why = "the AMX self-check in a child process failed (" + fails + "); AVX-512 kernels in use";
            } else {
                r.ok = driver_agrees();
                if (!r.ok) r.why = "the AMX GEMM driver disagreed with the emulated tiles; AVX-512 kernels in use";
            }
#endif
        }
        return r;
    }();
    return v;
}

#if DSPERF_HAVE_AMX_BUILD
const uint8_t* config_bytes() { return reinterpret_cast<const uint8_t*>(&kTileConfig); }
#else
const uint8_t* config_bytes() { return nullptr; }
#endif

}  // namespace

bool usable() { return verdict().ok; }

std::string status() { return verdict().ok ? "usable" : verdict().why; }

std::vector<uint8_t> tile_config_bytes() {
    const uint8_t* p = config_bytes();
    if (!p) return {};
    return std::vector<uint8_t>(p, p + 64);
}

// Callers check usable() first: reaching these without AMX is a dispatch bug, not a slow path.
void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate) {
#if DSPERF_HAVE_AMX_BUILD
    if (usable()) return linear_on<Hardware>(x, ldx, w, ldw, y, ldy, M, N, K, accumulate);
#endif
    (void)x, (void)ldx, (void)w, (void)ldw, (void)y, (void)ldy, (void)M, (void)N, (void)K, (void)accumulate;
    throw std::logic_error("amx::linear_bf16 called where AMX is not usable: " + status());
}

void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate) {
#if DSPERF_HAVE_AMX_BUILD
    if (usable()) return vnni_on<Hardware>(x, ldx, bp, y, ldy, M, N, K, accumulate);
#endif
    (void)x, (void)ldx, (void)bp, (void)y, (void)ldy, (void)M, (void)N, (void)K, (void)accumulate;
    throw std::logic_error("amx::gemm_bf16_vnni called where AMX is not usable: " + status());
}

double probe_tile_peak_gflops(double seconds) {
#if DSPERF_HAVE_AMX_BUILD
    if (!usable()) return 0;
    // Four accumulators fed by two A and two B tiles, loaded once: TDPBF16PS back to back, as the
    // GEMM driver's inner step issues them. 16 x 16 x 32 multiply-adds per instruction.
    alignas(64) static const bf16_t ones[kTileElems] = {};
    double flops = 0, elapsed = 0;
#pragma omp parallel reduction(+ : flops) reduction(max : elapsed)
    {
        Hardware hw;
        hw.config();
        hw.zero<0>(), hw.zero<1>(), hw.zero<2>(), hw.zero<3>();
        hw.load<4>(ones, 64), hw.load<5>(ones, 64), hw.load<6>(ones, 64), hw.load<7>(ones, 64);
        const auto t0 = std::chrono::steady_clock::now();
        double f = 0, dt = 0;
        do {
            for (int i = 0; i < 10000; ++i) {
                hw.dp<0, 4, 6>();
                hw.dp<1, 4, 7>();
                hw.dp<2, 5, 6>();
                hw.dp<3, 5, 7>();
            }
            f += 4.0 * 10000 * 2 * kRows * 16 * kDepth;
            dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (dt < seconds);
        hw.release();
        flops += f;
        elapsed = dt;
    }
    return flops / elapsed / 1e9;
#else
    (void)seconds;
    return 0;
#endif
}

void linear_bf16_emulated(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy,
                          int64_t M, int64_t N, int64_t K, bool accumulate) {
    linear_on<Emulated>(x, ldx, w, ldw, y, ldy, M, N, K, accumulate);
}

void gemm_bf16_vnni_emulated(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M,
                             int64_t N, int64_t K, bool accumulate) {
    vnni_on<Emulated>(x, ldx, bp, y, ldy, M, N, K, accumulate);
}

}  // namespace dsperf::kernels::amx
