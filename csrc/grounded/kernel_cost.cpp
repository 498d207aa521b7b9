#include "grounded/kernel_cost.hpp"

#include "common/require.hpp"
#include "grounded/routing_skew.hpp"
#include "kernels/cpu/attention.hpp"
#include "model/mla_calls.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dsperf {

namespace {
constexpr double kBf16 = 2, kFp32 = 4;

// Messages are built only on failure: these checks run inside the explorer's inner loop.
void require_nonneg(int64_t v, const char* name) {
    if (v < 0) throw std::invalid_argument(std::string(name) + " must be >= 0");
}
void require_pos(int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument(std::string(name) + " must be > 0");
}

// Bytes of an [n, k] weight: BF16, or FP8 plus one FP32 scale per 128x128 block.
double weight_bytes(double n, double k, bool fp8) {
    if (!fp8) return n * k * kBf16;
    const double blocks = std::ceil(n / 128) * std::ceil(k / 128);
    return n * k + blocks * kFp32;
}
}  // namespace

void KernelEfficiency::validate() const {
    require(compute > 0, "efficiency 'compute' must be > 0");
    require(memory > 0, "efficiency 'memory' must be > 0");
    require(overhead_us >= 0, "efficiency 'overhead_us' must be >= 0");
    require(serial >= 0 && serial <= 1, "efficiency 'serial' must lie in [0, 1]");
}

void MlaShape::validate() const {
    require_pos(dim, "dim"), require_pos(heads, "heads"), require_nonneg(q_lora, "q_lora");
    require_pos(kv_lora, "kv_lora"), require_pos(nope, "nope"), require_pos(rope, "rope"), require_pos(v, "v");
}

RooflineTimes roofline_times(const KernelWork& w, const DeviceSpec& d, bool cache_resident) {
    require(w.flops >= 0 && w.bytes >= 0, "work must have flops >= 0 and bytes >= 0");
    const double peak_tflops = (w.fp8 && d.fp8_tflops > 0 ? d.fp8_tflops : d.fp16_tflops) * d.compute_derate;
    const double bw = cache_resident && d.cache_bw_gbps > 0 ? d.cache_bw_gbps : d.mem_bw_gbps;
    return {w.flops / (peak_tflops * 1e12), w.bytes / (bw * 1e9)};
}

double kernel_seconds(const KernelWork& w, const DeviceSpec& d, const KernelEfficiency& e, bool cache_resident) {
    e.validate();
    const RooflineTimes t = roofline_times(w, d, cache_resident);
    const double compute_s = t.compute_s / e.compute, memory_s = t.memory_s / e.memory;
    return (d.call_overhead_us + e.overhead_us) * 1e-6 + (std::max(compute_s, memory_s) + e.serial * std::min(compute_s, memory_s));
}

KernelWork linear_work(int64_t m, int64_t n, int64_t k, bool fp8) {
    require_nonneg(m, "m"), require_pos(n, "n"), require_pos(k, "k");
    KernelWork w;
    w.flops = 2.0 * m * n * k;
    w.bytes = weight_bytes(n, k, fp8) + double(m) * k * kBf16 + double(m) * n * kFp32;
    w.fp8 = fp8;
    return w;
}

KernelWork grouped_gemm_work(double rows_per_expert, double experts, double n, double k, bool fp8) {
    require(rows_per_expert >= 0 && experts >= 0 && n > 0 && k > 0,
            "grouped GEMM needs rows_per_expert >= 0, experts >= 0, n > 0, k > 0");
    const double rows = rows_per_expert * experts;
    KernelWork w;
    w.flops = 2.0 * rows * n * k;
    w.bytes = experts * weight_bytes(n, k, fp8) + rows * k * (fp8 ? 1.0 : kBf16) + rows * n * kBf16;
    w.fp8 = fp8;
    return w;
}

KernelWork nvfp4_gemm_work(double rows, double matrices, double n, double k) {
    require(rows >= 0 && matrices >= 0 && n > 0 && k > 0, "NVFP4 GEMM needs rows >= 0, matrices >= 0, n > 0, k > 0");
    KernelWork w;
    w.flops = 2.0 * rows * n * k;
    w.bytes = (matrices * n * k + rows * k) * kNvfp4Bytes + rows * n * kBf16;
    w.fp4 = true;
    return w;
}

KernelWork causal_attention_work(double tokens, double prefix, double heads, double qk_dim, double v_dim) {
    require(tokens >= 0 && prefix >= 0 && heads > 0 && qk_dim > 0 && v_dim > 0,
            "causal attention needs tokens >= 0, prefix >= 0 and positive heads and head sizes");
    const double pairs = tokens * prefix + tokens * (tokens + 1) / 2;  // keys each query sees
    KernelWork w;
    w.flops = 2.0 * heads * pairs * (qk_dim + v_dim);
    const double keys = prefix + tokens;
    w.bytes = heads * kBf16 * (tokens * (qk_dim + v_dim) + keys * (qk_dim + v_dim));
    return w;
}

KernelWork gate_work(int64_t tokens, int64_t dim, int64_t experts, int64_t top_k) {
    require_nonneg(tokens, "tokens"), require_pos(dim, "dim"), require_pos(experts, "experts");
    require_pos(top_k, "top_k");
    KernelWork w = linear_work(tokens, experts, dim, false);
    // Scores, group sums and the top-k selection: a handful of operations per logit.
    w.flops += 8.0 * tokens * experts;
    w.bytes += double(tokens) * top_k * (kFp32 + 4);
    return w;
}

KernelWork experts_work(int64_t rows, int64_t active_experts, int64_t dim, int64_t inter, bool fp8) {
    require_nonneg(rows, "rows"), require_nonneg(active_experts, "active_experts");
    require_pos(dim, "dim"), require_pos(inter, "inter");
    require(active_experts <= rows, "active_experts must be <= rows (an expert with rows reads its weights)");
    KernelWork w;
    const double r = double(rows), d = double(dim), i = double(inter);
    w.flops = r * (2 * (2 * i) * d + 2 * d * i);
    w.bytes = active_experts * (weight_bytes(2 * i, d, fp8) + weight_bytes(d, i, fp8)) +
              r * (d * kBf16 + 2 * i * kFp32 + i * kBf16 + d * kFp32);
    w.fp8 = fp8;
    return w;
}

KernelWork dispatch_combine_work(int64_t tokens, int64_t top_k, int64_t dim) {
    require_nonneg(tokens, "tokens"), require_pos(top_k, "top_k"), require_pos(dim, "dim");
    const double rows = double(tokens) * top_k, d = double(dim);
    KernelWork w;
    w.flops = 2 * rows * d;                                   // the weighted sum of combine
    w.bytes = rows * d * (kBf16 + kBf16)                      // permute: gather and write
              + rows * d * kFp32 + double(tokens) * d * kFp32;  // combine: read the rows, write the tokens
    return w;
}

KernelWork mla_decode_work(int64_t keys, int64_t batch, int64_t q_len, int64_t heads, int64_t kv_lora, int64_t rope,
                           bool fp8_cache) {
    require_nonneg(keys, "keys"), require_pos(batch, "batch"), require_pos(q_len, "q_len");
    require_pos(heads, "heads"), require_pos(kv_lora, "kv_lora"), require_pos(rope, "rope");
    const double rows = double(q_len) * heads;  // query rows that share each request's keys
    KernelWork w;
    w.flops = 2 * double(keys) * rows * (kv_lora + rope + kv_lora);
    const double latent = fp8_cache ? kv_lora + kFp32 * (kv_lora / 128) : kv_lora * kBf16;
    w.bytes = double(keys) * (latent + rope * kBf16) +
              double(batch) * rows * ((kv_lora + rope) * kBf16 + kv_lora * kFp32 + kFp32);
    return w;
}

KernelWork rmsnorm_work(int64_t tokens, int64_t width) {
    require_nonneg(tokens, "tokens"), require_pos(width, "width");
    KernelWork w;
    w.flops = 4.0 * tokens * width;
    w.bytes = double(tokens) * width * 2 * kBf16 + width * kFp32;
    return w;
}

namespace {
void check_mla(int64_t tokens, int64_t prefix, const MlaShape& s) {
    require_pos(tokens, "tokens"), require_nonneg(prefix, "prefix");
    s.validate();
}
}  // namespace

MlaCallList mla_layer_calls(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s) {
    check_mla(tokens, prefix, s);
    const MlaDims d{double(s.dim), double(s.heads), double(s.q_lora), double(s.kv_lora), double(s.nope),
                    double(s.rope), double(s.v)};
    return mla_layer_calls(variant, d, mla_rows(variant, double(tokens), double(prefix + tokens)));
}

std::vector<GemmShape> mla_gemms(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s) {
    std::vector<GemmShape> g;
    for (const MlaCall& c : mla_layer_calls(variant, tokens, prefix, s))
        if (c.gemm()) g.push_back({int64_t(c.m), int64_t(c.n), int64_t(c.k), int64_t(c.count)});
    return g;
}

namespace {
// The attention core's work from the layer's list (its core entry): the norms, the q x kv rectangle,
// the working buffers and the cache traffic.
KernelWork core_work(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s, const MlaCall& core) {
    const int64_t T = tokens, S = prefix + tokens, H = s.heads;
    const int64_t L = s.kv_lora, N = s.nope, R = s.rope, V = s.v;
    KernelWork w = rmsnorm_work(T, L);
    if (s.q_lora > 0) w += rmsnorm_work(T, s.q_lora);  // without a query LoRA there is no query norm
    const double rect = double(T) * S * H;  // every query row against all S keys
    w.flops += 2 * rect * (core.qk + core.v);
    // The core's working buffers (kernels/cpu/attention.hpp): every one of the T x H query rows keeps
    // an FP32 output accumulator of core.v values, read and written once per chunk of
    // kAttentionKeyChunk keys, and writes then reads its scores (FP32) and probabilities (BF16).
    const double rows = double(T) * H, chunks = std::ceil(double(S) / double(kernels::kAttentionKeyChunk));
    w.bytes += chunks * rows * core.v * kFp32 * 2 + rect * (kFp32 + kBf16) * 2;
    if (!dsperf::absorbed(variant)) {
        // CD reads its per-head K/V cache; CC reads the latent and writes then reads the K/V it
        // decompressed.
        const double kv_row = double(H) * ((N + R) + V) * kBf16;
        w.bytes += double(S) * (L + R) * kBf16 + double(S) * kv_row * (variant == MlaVariant::CD ? 1 : 2);
    } else {
        w.bytes += double(S) * (L + R) * kBf16 * (variant == MlaVariant::A_CC ? 3 : 1);  // A_CC copies [latent | k_pe]
    }
    return w;
}
}  // namespace

KernelWork mla_attention_work(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s) {
    return core_work(variant, tokens, prefix, s, mla_layer_calls(variant, tokens, prefix, s).core());
}

KernelWork mla_forward_work(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s) {
    const MlaCallList calls = mla_layer_calls(variant, tokens, prefix, s);  // checks the arguments once
    KernelWork w = core_work(variant, tokens, prefix, s, calls.core());
    for (const MlaCall& c : calls) {
        if (!c.gemm()) continue;
        const KernelWork one = linear_work(int64_t(c.m), int64_t(c.n), int64_t(c.k), false);
        w.flops += one.flops * c.count, w.bytes += one.bytes * c.count;
    }
    return w;
}

EpExchange ep_exchange(int64_t tokens, int64_t hidden, int64_t top_k, int64_t experts, int64_t ranks, EpLayout layout,
                       bool fp8) {
    if (tokens < 0) throw std::invalid_argument("tokens must be >= 0");
    if (hidden < 1 || top_k < 1 || ranks < 1) throw std::invalid_argument("hidden, top_k and ranks must be >= 1");
    if (experts < top_k || experts % ranks)
        throw std::invalid_argument("experts must be >= top_k and a multiple of ranks");
    const double T = double(tokens), K = double(top_k), W = double(ranks), H = double(hidden);
    const double scales = fp8 ? 4.0 * double((hidden + 127) / 128) : 0.0;
    const double values = fp8 ? H : 2.0 * H;
    const double payload = values + scales;
    EpExchange x;
    if (layout == EpLayout::kMasked) {
        // Pairs whose expert lives on another rank: (W - 1) / W of them under uniform routing.
        const double pairs = T * K, remote = pairs * (W - 1) / W;
        const double header_rows = std::ceil((35.0 + double(experts / ranks)) * 8.0 / payload);
        x.dispatch_bytes = remote * payload + (W - 1) * header_rows * payload;
        x.combine_bytes = remote * 2.0 * H + (W - 1) * 2.0 * H;
        x.exchanges = 2;
        // Pack and scatter the pairs (and zero the rows the last call wrote), gather the BF16
        // outputs into the send rows, read them back for the weighted sum and write FP32 tokens.
        x.local_bytes = pairs * (2.0 * payload + 2.0 * payload + payload) + pairs * 2.0 * (2.0 * H) +
                        pairs * 2.0 * H + T * 4.0 * H;
        return x;
    }
    // P(a given rank holds none of a token's top_k experts) = C(E - E/W, K) / C(E, K).
    const double miss = chance_none_drawn(double(experts), double(experts) / W, top_k);
    const double records = T * W * (1.0 - miss), remote = records * (W - 1) / W;
    const double aligned_values = values + double(int64_t(-int64_t(values)) & 3);  // padded to 4 bytes
    const double record = aligned_values + scales + 8.0 * K;
    x.dispatch_bytes = remote * record + (W - 1) * (36.0 + double(experts / ranks)) * 8.0;
    x.combine_bytes = remote * 2.0 * H + (W - 1) * 256.0;
    x.exchanges = 3;
    // Pack every record (its own rank's too), then sum the returned BF16 partials into FP32 tokens.
    x.local_bytes = records * 2.0 * payload + records * 2.0 * H + T * 4.0 * H;
    if (layout == EpLayout::kExpert) {
        // T K expert rows per rank: gathered from the records, and their FP32 outputs reduced into
        // one BF16 row per record.
        x.local_bytes += T * K * 2.0 * payload + T * K * 4.0 * H + records * 2.0 * H;
    }
    return x;
}

EpExchange ep_window_exchange(int64_t tokens, int64_t hidden, int64_t top_k, int64_t experts, int64_t ranks,
                              EpLayout layout, bool fp8) {
    const EpExchange shape = ep_exchange(tokens, hidden, top_k, experts, ranks, layout, fp8);  // checks the sizes
    (void)shape;
    const double T = double(tokens), K = double(top_k), W = double(ranks), H = double(hidden);
    const double scales = fp8 ? 4.0 * double((hidden + 127) / 128) : 0.0;
    const double values = fp8 ? H : 2.0 * H;
    double rows, row_bytes;
    if (layout == EpLayout::kToken) {
        // P(a given rank holds none of a token's top_k experts)
        const double miss = chance_none_drawn(double(experts), double(experts) / W, top_k);
        rows = T * W * (1.0 - miss);
        row_bytes = values + double(int64_t(-int64_t(values)) & 3) + scales + 8.0 * K;  // + local ids, weights
    } else {
        rows = T * K;
        row_bytes = values + scales;
    }
    EpExchange x;
    x.local_bytes = 2.0 * rows * row_bytes + rows * 2.0 * H + T * 4.0 * H;
    x.exchanges = 3;
    return x;
}

double ep_exchange_seconds(const EpExchange& x, double link_gbps, double latency_us, double local_gbps) {
    if (!(link_gbps > 0)) throw std::invalid_argument("link_gbps must be > 0");
    if (!(latency_us >= 0)) throw std::invalid_argument("latency_us must be >= 0");
    if (!(local_gbps >= 0)) throw std::invalid_argument("local_gbps must be >= 0 (0: leave the local traffic out)");
    const double local = local_gbps > 0 ? x.local_bytes / (local_gbps * 1e9) : 0.0;
    return (x.dispatch_bytes + x.combine_bytes) / (link_gbps * 1e9) + x.exchanges * latency_us * 1e-6 + local;
}

}  // namespace dsperf
