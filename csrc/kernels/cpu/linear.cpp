#include "kernels/cpu/linear.hpp"

#include "kernels/common/parallel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/gemm_avx512.hpp"
#include "kernels/cpu/linear_amx.hpp"
#include "kernels/cpu/probe.hpp"

namespace dsperf::kernels {

namespace {

void check_dims(int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldy) {
    if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("linear: M, N and K must be >= 0");
    if (ldx < K || ldw < K || ldy < N) throw std::invalid_argument("linear: a row stride is shorter than its row");
}

// K = 0: every output is an empty sum, 0 (the micro-kernels would leave y unwritten).
void zero_sum(float* y, int64_t ldy, int64_t M, int64_t N, bool accumulate) {
    if (accumulate) return;
    for (int64_t m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + N, 0.0f);
}

// Which instruction does the GEMMs' products on AVX512-BF16 CPUs: VDPBF16PS, or FP32 FMAs on
// widened BF16. CPUs differ: some issue VDPBF16PS at twice the FP32 FMA rate (so the dot products
// win by 2x: Zen 4), others issue FMAs on two ports and VDPBF16PS on one (Sapphire and Emerald
// Rapids: FMAs win by 2x). Many rows (prefill): the packed VDPBF16PS kernel or the FMA kernel; few
// rows (decode): the stream kernel on either. A short single-thread probe of both decides once;
// DSPERF_GEMM=dot or =fma forces one (the tests run both).
bool gemm_on_dot_products() {
    static const bool dot = [] {
        const char* forced = std::getenv("DSPERF_GEMM");
        if (forced && std::strcmp(forced, "dot") == 0) return true;
        if (forced && std::strcmp(forced, "fma") == 0) return false;
        if (forced && *forced)
            throw std::invalid_argument(std::string("DSPERF_GEMM must be dot or fma (or unset), not '") + forced + "'");
        return probe_dot_to_fma_speed() >= 1.0;
    }();
    return dot;
}

// Rows of x from which the prefill kernel runs (either one); below, the stream kernel reads w once
// from memory (decode). One split for both keeps the cost model's two fitted GEMM regimes
// (linear_prefill_min_rows) the same on every CPU.
constexpr int64_t kPrefillMinRows = 32, kFmaMinRows = kPrefillMinRows;
int64_t prefill_min_rows() { return kPrefillMinRows; }
}  // namespace

int64_t linear_prefill_min_rows() { return use_avx512() ? prefill_min_rows() : 0; }

const char* gemm_products() {
    const bool dot = gemm_on_dot_products();  // checks DSPERF_GEMM on every path
    return !use_avx512() ? "portable" : dot ? "dot" : "fma";
}

namespace {

// Threads split N in slices of `align` rows (the kernel's slice: 48 rows packed, 128 streamed).
template <typename F>
void for_n_slices(int64_t N, int64_t align, F&& body) {
    const int64_t blocks = (N + align - 1) / align;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) body(b * align, std::min(N, (b + 1) * align));
}

// x widened to FP32 once ([M, K], contiguous) for the FMA kernel; empty below kFmaMinRows or
// without AVX-512, where the BF16 kernels read x directly.
std::vector<float> widen_for_fma(const bf16_t* x, int64_t ldx, int64_t M, int64_t K) {
    std::vector<float> xf;
    if (!use_avx512() || M < kFmaMinRows || gemm_on_dot_products()) return xf;
    xf.resize(static_cast<size_t>(M * K));
#pragma omp parallel for schedule(static) if (worth_threads(M * K))
    for (int64_t m = 0; m < M; ++m) avx512::widen_rows(x + m * ldx, ldx, 1, K, K, xf.data() + m * K);
    return xf;
}

}  // namespace

namespace portable {

// Plain C++: x and each row of w widened to FP32 once, then FP32 dot products the compiler
// vectorises for whatever the target has.
void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate) {
    std::vector<float> xf(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) xf[size_t(m * K + k)] = bf16_to_f32(x[m * ldx + k]);
    for_n_slices(N, 16, [&](int64_t n0, int64_t n1) {
        std::vector<float> wf(static_cast<size_t>(K));
        for (int64_t n = n0; n < n1; ++n) {
            for (int64_t k = 0; k < K; ++k) wf[size_t(k)] = bf16_to_f32(w[n * ldw + k]);
            for (int64_t m = 0; m < M; ++m) {
                const float* a = xf.data() + m * K;
                float s = 0;
                for (int64_t k = 0; k < K; ++k) s += a[k] * wf[size_t(k)];
                y[m * ldy + n] = accumulate ? y[m * ldy + n] + s : s;
            }
        }
    });
}

}  // namespace portable

namespace {
// Few rows (decode): x copied once into the stream kernel's layout, w read once from memory.
void linear_stream(const bf16_t* x, int64_t ldx, const avx512::GemmWeights& w, float* y, int64_t ldy, int64_t M,
                   int64_t N, int64_t K, bool accumulate) {
    // 64-byte aligned (row strides are multiples of 64 bytes): a 64-byte load that straddles two
    // cache lines costs two.
    // x as BF16 for the dot products, as FP32 (twice the bytes) for the FMAs, chosen per call. A
    // call of one row is memory-bound either way and the dot products take fewer instructions per
    // weight (Emerald Rapids, w in L2: 45 GFLOPS on dot products against 36 on FMAs at 1 row; 80
    // against 94 at 3). Calls of 9, 17 or 25 rows run their last one-row tile on FMAs too.
    constexpr int64_t kStreamFmaMinRows = 2;
    const bool fma = M >= kStreamFmaMinRows && !gemm_on_dot_products();
    const size_t x_bytes = size_t(M * avx512::stream_x_stride(K)) * (fma ? sizeof(float) : sizeof(bf16_t));
    // Not value-initialised: stream_x writes every byte the kernel reads.
    const std::unique_ptr<char[]> store(new char[x_bytes + 64]);
    void* xs = store.get() + (64 - reinterpret_cast<uintptr_t>(store.get()) % 64) % 64;
    avx512::stream_x(x, ldx, M, K, w.fp8 != nullptr, fma, xs);
    for_n_slices(N, avx512::kStreamSliceRows, [&](int64_t n0, int64_t n1) {
        avx512::linear_stream_rows(xs, fma, w, y, ldy, M, n0, n1, K, accumulate);
    });
}
}  // namespace

void linear_bf16(const bf16_t* x, int64_t ldx, const bf16_t* w, int64_t ldw, float* y, int64_t ldy, int64_t M,
                 int64_t N, int64_t K, bool accumulate) {
    check_dims(M, N, K, ldx, ldw, ldy);
    if (M == 0 || N == 0) return;
    if (K == 0) return zero_sum(y, ldy, M, N, accumulate);
    if (!use_avx512()) return portable::linear_bf16(x, ldx, w, ldw, y, ldy, M, N, K, accumulate);
    // AMX tiles from a few rows of x up (amx::kMinRows), where the CPU has them and they passed the
    // self-check.
    if (amx::runs_linear(M, /*fp8=*/false)) return amx::linear_bf16(x, ldx, w, ldw, y, ldy, M, N, K, accumulate);
    avx512::GemmWeights gw;
    gw.bf16 = w, gw.ld = ldw;
    if (M < prefill_min_rows()) return linear_stream(x, ldx, gw, y, ldy, M, N, K, accumulate);
    if (gemm_on_dot_products()) {
        for_n_slices(N, avx512::kPackedSliceRows, [&](int64_t n0, int64_t n1) {
            avx512::linear_packed_rows(x, ldx, gw, y, ldy, M, n0, n1, K, accumulate);
        });
        return;
    }
    // Many rows on a CPU whose FMAs outrun its dot products: widen x to FP32 once and run FP32
    // FMAs; the widened w panels are reused by every row.
    const std::vector<float> xf = widen_for_fma(x, ldx, M, K);
    for_n_slices(N, 96, [&](int64_t n0, int64_t n1) {  // whole 32-column panels
        avx512::linear_bf16_rows_fma(xf.data(), w, ldw, y, ldy, M, n0, n1, K, accumulate);
    });
}

void pair_rows(const bf16_t* a, const bf16_t* b, int64_t n, bf16_t* dst) {
    if (use_avx512()) return avx512::interleave_rows(a, b, n, dst);
    for (int64_t d = 0; d < n; ++d) dst[2 * d] = a[d], dst[2 * d + 1] = b ? b[d] : bf16_t(0);
}

void pair_columns(const bf16_t* src, int64_t ld, int64_t n, int64_t K, bf16_t* dst) {
    if (use_avx512() && K % 2 == 0 && ld % 2 == 0) return avx512::transpose_pairs(src, ld, n, K / 2, dst);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < K + K % 2; ++k) dst[((k / 2) * n + j) * 2 + k % 2] = k < K ? src[j * ld + k] : bf16_t(0);
}

void gemm_bf16_vnni(const bf16_t* x, int64_t ldx, const bf16_t* bp, float* y, int64_t ldy, int64_t M, int64_t N,
                    int64_t K, bool accumulate) {
    if (M < 0 || N < 0 || K < 0 || ldx < K || ldy < N) throw std::invalid_argument("gemm_bf16_vnni: bad sizes");
    if (M == 0 || N == 0) return;
    if (K == 0) return zero_sum(y, ldy, M, N, accumulate);
    if (use_avx512() && M >= amx::kMinRowsVnni && amx::usable())
        return amx::gemm_bf16_vnni(x, ldx, bp, y, ldy, M, N, K, accumulate);
    if (use_avx512()) return avx512::gemm_bf16_vnni(x, ldx, bp, y, ldy, M, N, K, accumulate, !gemm_on_dot_products());
    for (int64_t m = 0; m < M; ++m) {
        float* row = y + m * ldy;
        if (!accumulate) std::fill(row, row + N, 0.0f);
        for (int64_t k = 0; k < K; ++k) {
            const float a = bf16_to_f32(x[m * ldx + k]);
            const bf16_t* b = bp + (k / 2) * N * 2 + k % 2;
            for (int64_t n = 0; n < N; ++n) row[n] += a * bf16_to_f32(b[n * 2]);
        }
    }
}

void linear_fp8(const bf16_t* x, int64_t ldx, const fp8_t* w, const float* w_scale, float* y, int64_t ldy, int64_t M,
                int64_t N, int64_t K, bool accumulate) {
    check_dims(M, N, K, ldx, K, ldy);
    if (M == 0 || N == 0) return;
    if (K == 0) return zero_sum(y, ldy, M, N, accumulate);
    constexpr int64_t kBlock = 128;
    const int64_t k_blocks = (K + kBlock - 1) / kBlock;
    const bool simd = use_avx512();
    // AMX tiles from amx::kMinRowsFp8 rows up: each 128 x 128 block dequantised on its way to the tiles.
    if (simd && amx::runs_linear(M, /*fp8=*/true))
        return amx::linear_fp8(x, ldx, w, w_scale, y, ldy, M, N, K, accumulate);
    if (simd) {
        avx512::GemmWeights gw;
        gw.fp8 = w, gw.scale = w_scale, gw.ld = K;
        // Few rows: FP8 codes converted in registers as they stream in. Many rows: each 128 x 128
        // block dequantised once into the packed panels.
        if (M < prefill_min_rows()) return linear_stream(x, ldx, gw, y, ldy, M, N, K, accumulate);
        if (gemm_on_dot_products()) {
            for_n_slices(N, avx512::kPackedSliceRows, [&](int64_t n0, int64_t n1) {
                avx512::linear_packed_rows(x, ldx, gw, y, ldy, M, n0, n1, K, accumulate);
            });
            return;
        }
    }
    const std::vector<float> xf = widen_for_fma(x, ldx, M, K);  // many rows: the FMA kernel
    // 64 rows of w at a time (half a scale block): dequantised to BF16 in a per-thread scratch small
    // enough to stay in L2 beside the weights streaming in, then multiplied with all of x.
    constexpr int64_t kSlice = 64;
    for_n_slices(N, kSlice, [&](int64_t n0, int64_t n1) {
        const int64_t rows = n1 - n0;
        // Per-thread scratch, kept between slices and calls: every element is written before it is
        // read, so it needs no zeroing (a fresh vector would memset 1.8 MB per slice).
        thread_local std::vector<bf16_t> scratch;
        if (scratch.size() < static_cast<size_t>(rows * K)) scratch.resize(static_cast<size_t>(rows * K));
        bf16_t* wb_data = scratch.data();
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
            const int64_t k0 = kb * kBlock, cols = std::min(K, k0 + kBlock) - k0;
            const float scale = w_scale[(n0 / kBlock) * k_blocks + kb];
            if (simd) {
                avx512::fp8_block_to_bf16(w + n0 * K + k0, K, scale, wb_data + k0, K, rows, cols);
            } else {
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t c = 0; c < cols; ++c)
                        wb_data[r * K + k0 + c] = f32_to_bf16(fp8_table()[w[(n0 + r) * K + k0 + c]] * scale);
            }
        }
        if (!xf.empty()) avx512::linear_bf16_rows_fma(xf.data(), wb_data, K, y + n0, ldy, M, 0, rows, K, accumulate);
        else if (simd) avx512::linear_bf16_rows(x, ldx, wb_data, K, y + n0, ldy, M, 0, rows, K, accumulate);
        else portable::linear_bf16(x, ldx, wb_data, K, y + n0, ldy, M, rows, K, accumulate);
    });
}

void linear(const bf16_t* x, int64_t ldx, int64_t M, const LinearWeights& w, float* y, int64_t ldy, bool accumulate) {
    // Tiles from the rows the AMX kernels take over (measured, 4096 x 7168 weights streamed: the same
    // time as copying them into tiles up to 128 rows, BF16 and FP8 alike; 1.27 x faster from 256).
    const bool tiles = w.tiles && w.tiles->tiles && amx::runs_linear(M, w.fp8);
    if (tiles) return amx::linear_packed(x, ldx, M, *w.tiles, y, ldy, accumulate);
    if (w.fp8)
        return linear_fp8(x, ldx, static_cast<const fp8_t*>(w.w), w.scale, y, ldy, M, w.N, w.K, accumulate);
    linear_bf16(x, ldx, static_cast<const bf16_t*>(w.w), w.K, y, ldy, M, w.N, w.K, accumulate);
}

amx::PackedTiles pack_linear_tiles(const LinearWeights& w) {
    if (!amx::usable()) return {};
    if (w.fp8) return amx::pack_fp8(static_cast<const fp8_t*>(w.w), w.scale, w.N, w.K);
    return amx::pack_bf16(static_cast<const bf16_t*>(w.w), w.K, w.N, w.K);
}

}  // namespace dsperf::kernels
