#include "kernels/cpu/linear_amx.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <type_traits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/amx_gemm.hpp"
#include "kernels/cpu/amx_tiles.hpp"
#include "kernels/cpu/child_check.hpp"
#include "kernels/cpu/cpu_features.hpp"


namespace dsperf::kernels::amx {

namespace {

WeightSource rows_source(const bf16_t* w, int64_t ldw, int64_t N, int64_t K) {
    WeightSource s;
    s.layout = WeightSource::Layout::kRows, s.w = w, s.ld = ldw, s.N = N, s.K = K;
    return s;
}

WeightSource vnni_source(const bf16_t* bp, int64_t N, int64_t K) {
    WeightSource s;
    s.layout = WeightSource::Layout::kVnni, s.w = bp, s.ld = N, s.N = N, s.K = K;
    return s;
}

WeightSource fp8_source(const fp8_t* w, const float* scale, int64_t N, int64_t K) {
    WeightSource s;
    s.layout = WeightSource::Layout::kFp8Rows, s.w = w, s.ld = K, s.scale = scale, s.N = N, s.K = K;
    return s;
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
// a GEMM with partial tiles in every dimension, on the calling thread: it runs when dsperf.kernels is
// imported, and OpenMP threads started then would not survive the forks of dsperf's fork servers
// (tests/test_fuzz_kernels.py hung on an AMX machine). Each kernel thread configures its own tiles
// with the same constant configuration that stage 1 loaded.
bool driver_agrees() {
    const int64_t M = 37, N = 41, K = 75;
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<bf16_t> x(M * K), w(N * K);
    for (auto& v : x) v = f32_to_bf16(dist(gen));
    for (auto& v : w) v = f32_to_bf16(dist(gen));
    std::vector<float> hw(M * N), em(M * N);
    const WeightSource src = rows_source(w.data(), K, N, K);
    gemm<Hardware>(x.data(), K, M, &src, nullptr, hw.data(), N, false, /*threads=*/false);
    gemm<Emulated>(x.data(), K, M, &src, nullptr, em.data(), N, false, /*threads=*/false);
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
template <class Source>
void on_hardware(const char* name, const bf16_t* x, int64_t ldx, int64_t M, const Source& b, float* y, int64_t ldy,
                 bool accumulate) {
#if DSPERF_HAVE_AMX_BUILD
    if (usable()) {
        if constexpr (std::is_same_v<Source, PackedTiles>) return gemm<Hardware>(x, ldx, M, nullptr, &b, y, ldy, accumulate);
        else return gemm<Hardware>(x, ldx, M, &b, nullptr, y, ldy, accumulate);
    }
#endif
    (void)x, (void)ldx, (void)M, (void)b, (void)y, (void)ldy, (void)accumulate;
    throw std::logic_error(std::string("amx::") + name + " called where AMX is not usable: " + status());
}

void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate) {
    on_hardware("linear_bf16", x, ldx, M, rows_source(w, ldw, N, K), y, ldy, accumulate);
}

void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate) {
    on_hardware("gemm_bf16_vnni", x, ldx, M, vnni_source(bp, N, K), y, ldy, accumulate);
}

void linear_fp8(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy, int64_t M,
                int64_t N, int64_t K, bool accumulate) {
    on_hardware("linear_fp8", x, ldx, M, fp8_source(w, w_scale, N, K), y, ldy, accumulate);
}

void linear_packed(const bf16_t* x, int64_t ldx, int64_t M, const PackedTiles& w, float* y, int64_t ldy,
                   bool accumulate) {
    on_hardware("linear_packed", x, ldx, M, w, y, ldy, accumulate);
}

PackedTiles pack_bf16(const bf16_t* w, int64_t ldw, int64_t N, int64_t K) { return pack_tiles(rows_source(w, ldw, N, K)); }

PackedTiles pack_fp8(const fp8_t* w, const float* w_scale, int64_t N, int64_t K) {
    return pack_tiles(fp8_source(w, w_scale, N, K));
}

double probe_tile_peak_gflops(double seconds, bool operand_loads) {
#if DSPERF_HAVE_AMX_BUILD
    if (!usable()) return 0;
    // Four accumulators and two A and two B tiles: TDPBF16PS back to back, as the GEMM driver's inner
    // step issues them, 16 x 16 x 32 multiply-adds per instruction. `operand_loads`: before each
    // step's four products its four operand tiles are loaded, as every 2 x 2 step of a GEMM must (8
    // tiles hold 4 sums and 4 operands), placed as the driver's blocking places them: the two A tiles
    // from an 8-step strip in L1 (16 KB), the two B tiles from 512 KB of tiles (L2). The gap between
    // the two figures is what operand loads cost on this CPU.
    constexpr int64_t kStripSteps = 8, kBSteps = 256;
    double flops = 0, elapsed = 0;
#pragma omp parallel reduction(+ : flops) reduction(max : elapsed)
    {
        // Per thread, 64-byte aligned (a tile row across two cache lines loads about 3x slower).
        const auto tiles_of = [](int64_t n) {
            return std::unique_ptr<bf16_t[], decltype(&std::free)>(
                static_cast<bf16_t*>(std::aligned_alloc(64, size_t(n) * sizeof(bf16_t))), &std::free);
        };
        const auto a_strip = tiles_of(2 * kStripSteps * kTileElems), b_tiles = tiles_of(2 * kBSteps * kTileElems);
        // Non-zero operands whose products cancel in pairs (A: +1, -1, ...; B: 1), so that the sums stay
        // 0: zero tiles load faster than real data here (a 2 x 2 loop from L1, one core: 3.5 against
        // 2.6 TFLOPS).
        for (int64_t i = 0; i < 2 * kStripSteps * kTileElems; ++i) a_strip[i] = f32_to_bf16(i % 2 ? -1.0f : 1.0f);
        std::fill(b_tiles.get(), b_tiles.get() + 2 * kBSteps * kTileElems, f32_to_bf16(1.0f));
        Hardware hw;
        hw.config();
        hw.zero<0>(), hw.zero<1>(), hw.zero<2>(), hw.zero<3>();
        hw.load<4>(a_strip.get(), 64), hw.load<5>(a_strip.get() + kTileElems, 64);
        hw.load<6>(b_tiles.get(), 64), hw.load<7>(b_tiles.get() + kTileElems, 64);
        const auto t0 = std::chrono::steady_clock::now();
        double f = 0, dt = 0;
        do {
            for (int i = 0; i < 10000; ++i) {
                if (operand_loads) {
                    const bf16_t* a = a_strip.get() + (i % kStripSteps) * 2 * kTileElems;
                    const bf16_t* b = b_tiles.get() + (i % kBSteps) * 2 * kTileElems;
                    hw.load<4>(a, 64), hw.load<6>(b, 64), hw.load<7>(b + kTileElems, 64), hw.load<5>(a + kTileElems, 64);
                }
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
    (void)seconds, (void)operand_loads;
    return 0;
#endif
}

void linear_bf16_emulated(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy,
                          int64_t M, int64_t N, int64_t K, bool accumulate) {
    const WeightSource s = rows_source(w, ldw, N, K);
    gemm<Emulated>(x, ldx, M, &s, nullptr, y, ldy, accumulate);
}

void gemm_bf16_vnni_emulated(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M,
                             int64_t N, int64_t K, bool accumulate) {
    const WeightSource s = vnni_source(bp, N, K);
    gemm<Emulated>(x, ldx, M, &s, nullptr, y, ldy, accumulate);
}

void linear_fp8_emulated(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy,
                         int64_t M, int64_t N, int64_t K, bool accumulate) {
    const WeightSource s = fp8_source(w, w_scale, N, K);
    gemm<Emulated>(x, ldx, M, &s, nullptr, y, ldy, accumulate);
}

void linear_packed_emulated(const bf16_t* x, int64_t ldx, int64_t M, const PackedTiles& w, float* y, int64_t ldy,
                            bool accumulate) {
    gemm<Emulated>(x, ldx, M, nullptr, &w, y, ldy, accumulate);
}

}  // namespace dsperf::kernels::amx
