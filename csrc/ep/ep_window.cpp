#include "ep/ep_window.hpp"

#include "kernels/common/cache.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/common/stream_copy.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sched.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <cmath>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsperf::ep {

using dsperf::kernels::bf16_to_f32;

void flag_publish(int64_t* flag, int64_t value) { __atomic_store_n(flag, value, __ATOMIC_RELEASE); }

int64_t flags_wait(int64_t* const* flags, int64_t n, int64_t target, double timeout_s, double spin_s) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto spin_until = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(spin_s));
    const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    int64_t first = 0;  // flags below `first` have arrived (they only grow)
    bool spinning = spin_s > 0;
    for (int64_t round = 0;; ++round) {
        while (first < n && __atomic_load_n(flags[first], __ATOMIC_ACQUIRE) >= target) ++first;
        if (first == n) return -1;
        // Spinning keeps the core, so a peer a few microseconds behind is seen at once; past
        // spin_s (or from the start when the ranks outnumber the cores, spin_s = 0) offer the core
        // on every round instead, since the peer we wait for may need it. Never sleep: a sleep's
        // wake-up costs more than the exchanges it waits for.
        if (spinning) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if ((round & 63) == 0 && clock::now() > spin_until) spinning = false;
        } else {
            sched_yield();
        }
        if ((round & 63) == 0 && clock::now() > deadline) return first;
    }
}

namespace {

using kernels::max_threads;

// One token: dst[0:dim) = sum over k < n, in order, of w[k] * f32(src[k][0:dim)), each product added
// with one rounding (a fused multiply-add, also where no FMA instruction is used). The sum of a
// column group stays in a register across the sources, so every source row is read once and the
// output written once: the loop runs at memory speed, not at the speed of an L1 round trip per
// source. AVX-512 and AVX2 versions are picked at run time.
#if defined(__x86_64__)
// kStream: the output goes past the caches (combine of many tokens), so its full lines are written
// with non-temporal stores: a plain store first reads every output line it fills (the
// read-for-ownership), a third more memory traffic on a loop that runs at memory speed.
#define DSPERF_AVX512_SUM __attribute__((target("avx512f,avx512bw,avx512vl")))
// Columns [d, d + 16) of the weighted sum (lanes outside m read as zero).
DSPERF_AVX512_SUM inline __m512 weighted_sum16(const bf16_t* const* src, const float* w, int64_t n, int64_t d,
                                               __mmask16 m) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; ++k) {
        const __m256i raw = _mm256_maskz_loadu_epi16(m, src[k] + d);
        const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), x, acc);
    }
    return acc;
}

template <bool kStream>
DSPERF_AVX512_SUM void weighted_row_sum_avx512(const bf16_t* const* src, const float* w, int64_t n, int64_t dim,
                                               float* dst) {
    int64_t d = 0;
    if (kStream) {
        // Plain stores up to the first 64-byte boundary of dst (streaming stores need it).
        const int64_t head = std::min<int64_t>(dim, ((64 - int64_t(reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 4);
        if (head) _mm512_mask_storeu_ps(dst, __mmask16((1u << head) - 1), weighted_sum16(src, w, n, 0, __mmask16((1u << head) - 1)));
        d = head;
        if ((reinterpret_cast<uintptr_t>(dst + d) & 63) == 0)
            for (; d + 16 <= dim; d += 16) _mm512_stream_ps(dst + d, weighted_sum16(src, w, n, d, 0xffff));
    }
    for (; d + 16 <= dim; d += 16) _mm512_storeu_ps(dst + d, weighted_sum16(src, w, n, d, 0xffff));
    if (d < dim) {
        const __mmask16 m = __mmask16((1u << (dim - d)) - 1);
        _mm512_mask_storeu_ps(dst + d, m, weighted_sum16(src, w, n, d, m));
    }
}

__attribute__((target("avx2,fma"))) void weighted_row_sum_avx2(const bf16_t* const* src, const float* w, int64_t n,
                                                               int64_t dim, float* dst) {
    int64_t d = 0;
    for (; d + 8 <= dim; d += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < n; ++k) {
            const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[k] + d));
            const __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w[k]), x, acc);
        }
        _mm256_storeu_ps(dst + d, acc);
    }
    for (; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n; ++k) acc = std::fma(w[k], bf16_to_f32(src[k][d]), acc);
        dst[d] = acc;
    }
}

#endif

void weighted_row_sum_portable(const bf16_t* const* src, const float* w, int64_t n, int64_t dim, float* dst) {
    for (int64_t d = 0; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n; ++k) acc = std::fma(w[k], bf16_to_f32(src[k][d]), acc);
        dst[d] = acc;
    }
}

using RowSum = void (*)(const bf16_t* const*, const float*, int64_t, int64_t, float*);

RowSum pick_row_sum(bool stream) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return stream ? weighted_row_sum_avx512<true> : weighted_row_sum_avx512<false>;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return weighted_row_sum_avx2;
#endif
    return weighted_row_sum_portable;
}

}  // namespace

void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out, int threads) {
    static const RowSum plain = pick_row_sum(false), streamed = pick_row_sum(true);
    const RowSum row_sum = kernels::writes_past_cache(tokens * dim * int64_t(sizeof(float))) ? streamed : plain;
    if (threads <= 0) threads = max_threads();
#pragma omp parallel num_threads(threads) if (threads > 1 && tokens * entries * dim > (int64_t(1) << 18))
    {
        std::vector<const bf16_t*> src(entries);
        std::vector<float> w(entries);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tokens; ++t) {
            int64_t n = 0;
            for (int64_t m = 0; m < entries; ++m) {
                const int64_t i = t * entries + m;
                if (peer[i] < 0) continue;
                src[n] = rows[peer[i]] + row[i] * dim;
                w[n++] = weights ? weights[i] : 1.0f;
            }
            row_sum(src.data(), w.data(), n, dim, out + t * dim);
        }
#if defined(__x86_64__)
        _mm_sfence();  // every thread's streaming stores are visible before the caller reads out
#endif
    }
}

namespace {
// One token's record for rank `dest`: payload values, scales, then its K local expert ids (-1 where
// the expert lives elsewhere) and K weights (0 without weights).
inline void write_record(uint8_t* r, const uint8_t* v, const uint8_t* sc, int64_t vb, int64_t sb, int64_t sc_col,
                         int64_t id_col, const int64_t* ids, const float* weights, int64_t K, int64_t E_loc,
                         int64_t dest, bool stream = false) {
    kernels::copy_bytes(r, v, vb, stream);
    if (sb) std::memcpy(r + sc_col, sc, size_t(sb));
    int32_t lid[64];
    float w[64];
    for (int64_t k = 0; k < K; ++k) {
        lid[k] = ids[k] / E_loc == dest ? int32_t(ids[k] % E_loc) : -1;
        w[k] = weights ? weights[k] : 0.0f;
    }
    std::memcpy(r + id_col, lid, size_t(4 * K));
    std::memcpy(r + id_col + 4 * K, w, size_t(4 * K));
}
}  // namespace

int dispatch_counts(const int64_t* ids, int64_t n, int64_t K, int64_t E, int64_t W, int64_t local_experts,
                    const int64_t* node, int64_t nodes, int64_t* out) {
    std::fill(out, out + W + E + nodes, int64_t(0));
    int64_t* to_rank = out;
    int64_t* to_expert = out + W;
    int64_t* to_node = out + W + E;
    std::vector<int64_t> seen_rank(size_t(W), -1), seen_node(size_t(nodes), -1);
    int rc = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t* t = ids + i * K;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t e = t[k];
            if (e < 0 || e >= E) return 1;
            for (int64_t j = 0; j < k; ++j)
                if (t[j] == e) rc = 2;
            ++to_expert[e];
            const int64_t d = e / local_experts;
            if (seen_rank[d] != i) seen_rank[d] = i, ++to_rank[d];
            const int64_t nd = node[d];
            if (seen_node[nd] != i) seen_node[nd] = i, ++to_node[nd];
        }
    }
    return rc;
}

void window_plan(const int64_t* rows, int64_t stride, int64_t W, int64_t E_loc, EpLayout layout, int64_t cap,
                 int64_t me, int64_t* out) {
    const RoutingPlan p = routing_plan(rows, stride, W, E_loc, layout, cap);
    int64_t* n_recv = out;
    int64_t* pair_rows = out + W;
    int64_t* send = out + 2 * W;
    int64_t* recv = out + 3 * W;
    int64_t* pair_send = out + 4 * W;
    int64_t* pair_recv = out + 5 * W;
    int64_t* counts = out + 6 * W;
    std::fill(pair_send, pair_send + 2 * W + E_loc, int64_t(0));
    for (int64_t d = 0; d < W; ++d) {
        n_recv[d] = p.n_recv[d];
        pair_rows[d] = p.pair_rows[d];
        send[d] = rows[me * stride + d];
        recv[d] = rows[d * stride + me];
        for (int64_t j = 0; j < E_loc; ++j) {
            pair_send[d] += rows[me * stride + W + d * E_loc + j];
            const int64_t in = rows[d * stride + W + me * E_loc + j];
            pair_recv[d] += in;
            counts[j] += in;
        }
    }
}

int64_t window_scatter(const ScatterSource& src, const ScatterPlan& plan, const RoutingPlaces& out, int threads) {
    const uint8_t *values = src.values, *scales = src.scales;
    const int64_t vstride = src.vstride, sstride = src.sstride, n = src.n, K = src.K, s = src.s;
    const int64_t* ids = src.ids;
    const float* weights = src.weights;
    const int64_t *rows = plan.rows, *local_of = plan.local_of, *dst_bytes = plan.dst_bytes;
    const int64_t stride = plan.stride, W = plan.W, E_loc = plan.local_experts, cap = plan.cap;
    const EpLayout layout = plan.layout;
    const int64_t vb = plan.fmt.vb, sb = plan.fmt.sb, rec = plan.fmt.rec, sc_col = plan.fmt.sc_col, id_col = plan.fmt.id_col;
    uint8_t* const* dst = plan.dst;
    const int32_t *tok_peer = out.tok_peer, *pair_peer = out.pair_peer;
    const int64_t *tok_row = out.tok_row, *pair_row = out.pair_row;
    const RoutingPlan p = routing_plan(rows, stride, W, E_loc, layout, cap);
    for (int64_t d = 0; d < W; ++d) {
        const int64_t l = local_of[d];
        if (l < 0) continue;
        const int64_t need = layout == EpLayout::kToken ? p.n_recv[d] * rec
                                                            : (p.pair_rows[d] * vb + 63) / 64 * 64 + p.pair_rows[d] * sb;
        if (need > dst_bytes[l])
            throw std::invalid_argument("window_scatter: rank " + std::to_string(d) + "'s rows need " +
                                        std::to_string(need) + " bytes, its segment has " + std::to_string(dst_bytes[l]));
    }
    routing_places(p, s, ids, n, K, out);
    // The copies, each row once, straight into the destination's segment.
    std::vector<int64_t> scale_at(size_t(W), 0);
    for (int64_t d = 0; d < W; ++d) scale_at[d] = (p.pair_rows[d] * vb + 63) / 64 * 64;
    int64_t written = 0;
    const bool token = layout == EpLayout::kToken;
    // Rows past the caches when this call writes more than the cache keeps (kernels/common/cache.hpp).
    int64_t total = 0;
    if (token) {
        for (int64_t i = 0; i < n * W; ++i) total += tok_peer[i] >= 0 && local_of[i % W] >= 0 ? rec : 0;
    } else {
        for (int64_t i = 0; i < n * K; ++i) total += local_of[pair_peer[i]] >= 0 ? vb : 0;
    }
    const bool stream = kernels::writes_past_cache(total);
    if (threads <= 0) threads = max_threads();
#pragma omp parallel num_threads(threads) if (threads > 1 && n * K * vb > (int64_t(1) << 18))
    {
#pragma omp for schedule(static) reduction(+ : written)
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* v = values + i * vstride;
            const uint8_t* sc = scales ? scales + i * sstride : nullptr;
            if (token) {
                for (int64_t d = 0; d < W; ++d) {
                    const int64_t l = local_of[d];
                    if (l < 0 || tok_peer[i * W + d] < 0) continue;
                    write_record(dst[l] + tok_row[i * W + d] * rec, v, sc, vb, sb, sc_col, id_col, ids + i * K,
                                 weights ? weights + i * K : nullptr, K, E_loc, d, stream);
                    written += rec;
                }
            } else {
                for (int64_t k = 0; k < K; ++k) {
                    const int64_t d = pair_peer[i * K + k], l = local_of[d];
                    if (l < 0) continue;
                    const int64_t row = pair_row[i * K + k];
                    kernels::copy_bytes(dst[l] + row * vb, v, vb, stream);
                    if (sb) std::memcpy(dst[l] + scale_at[d] + row * sb, sc, size_t(sb));
                    written += vb + sb;
                }
            }
        }
#if defined(__x86_64__)
        if (stream) _mm_sfence();  // every thread's streaming stores land before the sync that follows
#endif
    }
    return written;
}

int64_t ctrl_sync(int64_t* const* ctrl, int64_t n, int64_t me, int64_t seq, int64_t base, const int64_t* row,
                  int64_t len, int64_t row_words, double timeout_s, double spin_s, int64_t* out, int64_t same_words) {
    int64_t* mine = ctrl[me] + base;
    std::memcpy(mine, row, size_t(8 * len));
    std::fill(mine + len, mine + row_words, int64_t(0));
    flag_publish(ctrl[me], seq);
    const int64_t late = flags_wait(ctrl, n, seq, timeout_s, spin_s);
    if (late >= 0) return late;
    for (int64_t r = 0; r < n; ++r) std::memcpy(out + r * row_words, ctrl[r] + base, size_t(8 * row_words));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < std::min(same_words, len); ++j)
            if (out[r * row_words + j] != row[j]) return -2;
    return -1;
}

}  // namespace dsperf::ep
