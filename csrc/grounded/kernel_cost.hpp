// The cost model of single kernels: the work one call does (FLOPs and bytes moved to or from
// memory) and its roofline time on a device. The same functions price a kernel on a GPU spec
// (datasheet peaks) and on this CPU (the spec `dsperf calibrate` writes), with per-family
// efficiencies that calibration fits against measured times.
//
// Work counts what the kernels execute, not the useful minimum: attention computes every key
// chunk up to the last visible one for every query row and masks (the full q x kv rectangle in
// a prefill from an empty cache), and each weight is read once per call.
#pragma once
#include <cstdint>
#include <vector>

#include "ep/ep_layout.hpp"
#include "model/mla_calls.hpp"
#include "model/mla_variant.hpp"

#include "hardware/device_spec.hpp"

namespace dsperf {

struct KernelWork {
    double flops = 0;   // 2 x multiply-accumulates (plus the few elementwise ops that matter)
    double bytes = 0;   // bytes read from and written to memory, each once
    bool fp8 = false;   // its GEMMs take FP8 inputs (priced at the FP8 peak where the device has one)
    bool fp4 = false;   // its GEMMs take NVFP4 inputs (priced at the FP4 peak where the device has one)
    KernelWork& operator+=(const KernelWork& o) {
        flops += o.flops, bytes += o.bytes, fp8 = fp8 || o.fp8, fp4 = fp4 || o.fp4;
        return *this;
    }
};

// What a kernel family reaches of the device's peaks, its fixed cost per call beyond the
// device's call overhead, and how far its memory traffic overlaps its arithmetic: serial is the
// share of the shorter roofline term that adds to the longer (0: fully overlapped, the roofline's
// max; 1: in series, a kernel that loads, then computes, as small CPU GEMMs do; between: a packed
// GEMM that hides part of its weight stream). Calibration fits these per family; 1, 1, 0, 0 is the
// ideal roofline.
struct KernelEfficiency {
    double compute = 1.0;
    double memory = 1.0;
    double overhead_us = 0.0;
    double serial = 0.0;
    void validate() const;  // throws std::invalid_argument naming the field
};

// The two roofline terms of one call at ideal efficiency, seconds: flops at the device's peak (its
// FP8 peak for FP8 work where it has one, times compute_derate) and bytes at its memory bandwidth
// (its cache bandwidth when cache_resident and the spec has one).
struct RooflineTimes {
    double compute_s = 0, memory_s = 0;
};
RooflineTimes roofline_times(const KernelWork& w, const DeviceSpec& d, bool cache_resident);

// Roofline time of one call, seconds: the device's call overhead + the family's overhead +
// the longer of flops / (peak x compute_derate x compute) and bytes / (bandwidth x memory),
// plus serial x the shorter. cache_resident
// prices the bytes at the device's cache bandwidth (cache_bw_gbps, when the spec has one).
double kernel_seconds(const KernelWork& w, const DeviceSpec& d, const KernelEfficiency& e, bool cache_resident);

// y[M, N] = x[M, K] @ w[N, K]^T: BF16 x, BF16 or FP8 (128x128 block-scaled) w, FP32 y.
KernelWork linear_work(int64_t m, int64_t n, int64_t k, bool fp8);

// One projection of a grouped expert GEMM: `experts` weights [n, k] (FP8 with 128x128 block scales,
// or BF16), `rows_per_expert` FP8 (or BF16) token rows each, BF16 outputs.
KernelWork grouped_gemm_work(double rows_per_expert, double experts, double n, double k, bool fp8);
// NVFP4 GEMMs (Blackwell's FP4 tensor cores): `rows` activation rows over `matrices` [n, k] weight
// matrices (one for a dense GEMM, one per expert for a grouped one), weights and activations
// 4-bit with one FP8 scale per 16 values, BF16 out.
KernelWork nvfp4_gemm_work(double rows, double matrices, double n, double k);
// Bytes per NVFP4 value: half a byte plus an FP8 scale shared by 16.
constexpr double kNvfp4Bytes = 0.5 + 1.0 / 16;

// Causal attention core of one prompt in the decompressed (MHA) form: `tokens` new queries after
// `prefix` cached keys, `heads` heads of qk_dim / v_dim, BF16 in and out.
KernelWork causal_attention_work(double tokens, double prefix, double heads, double qk_dim, double v_dim);

// Router: logits of T BF16 tokens over E experts, sigmoid/softmax, group-limited top-k.
KernelWork gate_work(int64_t tokens, int64_t dim, int64_t experts, int64_t top_k);

// Grouped expert FFN (either layout): `rows` token rows spread over `active_experts` experts
// (experts with no rows are skipped and read nothing), merged gate_up, SiLU-mul, down projection.
KernelWork experts_work(int64_t rows, int64_t active_experts, int64_t dim, int64_t inter, bool fp8);

// Dispatch (permute BF16 rows into expert order) plus combine (weighted un-permute in FP32).
KernelWork dispatch_combine_work(int64_t tokens, int64_t top_k, int64_t dim);

// Expert-parallel all-to-all (dsperf.ep) over `ranks` ranks that each own experts / ranks experts,
// every token routed to top_k distinct experts drawn uniformly: expected bytes per rank and call.
//  - dispatch_bytes, combine_bytes: what a rank sends to the other ranks. Normal mode (DeepEP's
//    prefill layout) sends a token once to each rank holding one of its experts, as a record of its
//    payload (FP8 values + 1x128 FP32 scales, or BF16), top_k int32 ids and top_k FP32 weights;
//    low-latency mode sends each (token, expert) pair's payload. Combine returns one BF16 row per
//    dispatched record or pair. Both include dsperf.ep's fixed messages to every peer: normal
//    mode's count block ((36 + experts / ranks) int64) and combine status (256 bytes), low
//    latency's header (payload rows holding (35 + experts / ranks) int64) and status row (one BF16 row).
//  - local_bytes: the rank's own memory traffic around the exchange (read + write), which the link
//    does not see: packing the send records, and by layout: kToken (DeepEP's normal layout: tokens
//    received in place, combine sends BF16 per-token rows as they are) sums the partials; kExpert also
//    copies received rows into the per-expert layout and reduces FP32 expert outputs into the send
//    rows; kMasked (low latency) scatters pairs into the masked layout, gathers BF16 outputs back and
//    forms each token's weighted sum.
//  - exchanges: the latency-bound rounds (normal: counts, payload, combine; low latency: 2).
struct EpExchange {
    double dispatch_bytes = 0, combine_bytes = 0, local_bytes = 0, exchanges = 0;
};
EpExchange ep_exchange(int64_t tokens, int64_t hidden, int64_t top_k, int64_t experts, int64_t ranks, EpLayout layout,
                       bool fp8);
// The same call through dsperf.ep's shared-memory windows (ranks of one node): no link of its own,
// every byte moved by a rank's copy. local_bytes: dispatch writes each record (token layout) or pair
// row (expert, masked) once into its destination's window (read at the source, written there);
// combine reads each BF16 row once from the peers' windows and writes each FP32 token once.
// exchanges: 3 syncs (counts, dispatch done, combine). The fixed cost per call (the syncs' waits and
// the host code) is no constant here: the caller passes it as overhead_us, measured as an exchange
// of no tokens (dsperf.ep.bench does, per run; docs/EP.md: 91-130 us at 2 ranks and 327-348 us at 4
// ranks on 2 cores since the planning moved into C++, from 254-278 and 888-949 us).
EpExchange ep_window_exchange(int64_t tokens, int64_t hidden, int64_t top_k, int64_t experts, int64_t ranks,
                              EpLayout layout, bool fp8);

// Seconds of dispatch + combine: link bytes at `link_gbps` (1e9 bytes/s out of each rank while all
// send), `latency_us` per exchange, local bytes at `local_gbps` (each rank's memory rate while all
// ranks copy; 0 leaves the local traffic out, as on a GPU where it runs at HBM speed beside the link).
double ep_exchange_seconds(const EpExchange& x, double link_gbps, double latency_us, double local_gbps);

// Absorbed MLA decode over a paged latent cache: `keys` = the sum over requests of seqlens,
// `batch` requests x q_len query tokens x heads, keys [kv_lora | rope] and values = the latent.
KernelWork mla_decode_work(int64_t keys, int64_t batch, int64_t q_len, int64_t heads, int64_t kv_lora,
                           int64_t rope, bool fp8_cache);

// The MLA dimensions of one layer (on one TP rank: heads = n_heads / TP).
struct MlaShape {
    int64_t dim = 7168, heads = 128, q_lora = 1536, kv_lora = 512, nope = 128, rope = 64, v = 128;
    void validate() const;
};

// One MLA layer (prolog, attention in a variant, wo) for `tokens` new tokens after `prefix`
// cached ones of one sequence, in one of the variants (model/mla_variant.hpp).
// It is the sum of its GEMMs (mla_gemms: the projections, CD/CC's decompression, the run-time
// absorption, as model/mla_calls.hpp lists them) and its attention core (mla_attention_work), so
// each can be priced on its own.
KernelWork mla_forward_work(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s);

// The layer's calls (model/mla_calls.hpp) for `tokens` new tokens after `prefix` cached ones, checked.
MlaCallList mla_layer_calls(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s);

// One GEMM of the layer: `count` calls of y[m, n] = x[m, k] w[n, k]^T (count > 1: per head), in
// the order of model/mla_calls.hpp's list.
struct GemmShape {
    int64_t m = 0, n = 0, k = 0, count = 1;
};
std::vector<GemmShape> mla_gemms(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s);

// The rest of the layer: the two RMSNorms, attention over the full q x kv rectangle (computed,
// then masked), the cache reads and writes, A_CC's concatenation copies.
KernelWork mla_attention_work(MlaVariant variant, int64_t tokens, int64_t prefix, const MlaShape& s);

// RMSNorm of T rows of width `width` (BF16 in and out, FP32 weight).
KernelWork rmsnorm_work(int64_t tokens, int64_t width);

}  // namespace dsperf
