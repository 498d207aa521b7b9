// The grounded model: a prefill step or a decode step as the list of kernel calls a DeepSeek-style
// serving system runs (every MLA GEMM, the attention core, norms, gate, dispatch, grouped experts,
// shared expert, combine, dense MLP, LM head, MTP drafts), each priced by its FLOPs and bytes
// (kernel_cost.hpp) on the device's datasheet roofline at the efficiency a published kernel
// benchmark measured at that shape (kernel_table.hpp), then placed on a compute stream and a
// communication stream by the deployment's overlap schedule.
#pragma once
#include <string>
#include <vector>

#include "grounded/kernel_table.hpp"
#include "grounded/weight_format.hpp"
#include "hardware/device_spec.hpp"
#include "model/model_config.hpp"

namespace dsperf {

enum class Phase { kPrefill = 0, kDecode = 1 };
// Each enum's names, indexed by its value: the binding and Python read them from here.
inline constexpr const char* kPhaseNames[] = {"prefill", "decode"};
// kTwoBatch: two micro-batches, one's communication under the other's compute (DeepSeek's
// dual micro-batch overlap); kSingleBatch: dispatch under the shared expert; kNone: serial.
enum class Overlap { kNone = 0, kTwoBatch = 1, kSingleBatch = 2 };
inline constexpr const char* kOverlapNames[] = {"none", "two_batch", "single_batch"};

// The largest max/mean routed load per GPU a deployment may carry (imbalance's bound): the max
// over ep GPUs is at most ep times the mean, and EP reaches 4096. (64 refused what EPLB itself
// derives for a Zipf 1.2 load on EP256 without redundant experts: 64.7.)
constexpr double kMaxImbalance = 4096;
// routed_share's range: a lock-stepped group's mean tokens over one rank's. The rank holds at most
// all of the group's tokens (share >= 1 / ranks >= 1 / 4096) and at least one token, against a mean
// of at most the tokens field's bound (1e7): [1e-6, 1e7] holds every share a simulation can form.
constexpr double kMinRoutedShare = 1e-6, kMaxRoutedShare = 1e7;

// The share of device memory a serving stack gives weights and the KV cache where the deployment
// does not say (assumed): the default of Deployment::mem_fraction. SGLang's --mem-fraction-static is
// this share; TensorRT-LLM's free_gpu_memory_fraction is a share of the memory left after the weights.
constexpr double kMemoryReserve = 0.9;
constexpr double kMinMemFraction = 0.05;  // below it no deployment holds its weights: a typo, not a setting

// The numeric fields of a deployment, declared once: (C++ type, name, default, lowest, highest,
// sentinel meaning "the default of the device or phase", or 0 for none) with what each means. The
// struct, the binding's fields, Deployment.BOUNDS (which dsperf.grounded checks its arguments by)
// and the range checks of validate() are all generated from this list; validate() adds the rules
// that relate fields (attn_tp divides a node, cached_prefix < prompt_len, ...).
#define DSPERF_DEPLOYMENT_FIELDS(X)                                                                     \
    X(int, attn_tp, 1, 1, 64, 0)                 /* attention TP (1: DP attention) */                 \
    X(int, ep, 128, 1, 4096, 0)                  /* GPUs sharing the routed experts */                \
    X(int, redundant_experts, 0, 0, 4096, 0)     /* extra expert replicas (EPLB) */                   \
    X(double, batch, 128, 0, 1e6, 0)             /* decode: requests per GPU (a TP group serves       \
                                                    batch x attn_tp, at least 1) */                   \
    X(double, tokens, 16384, 1, 1e7, 0)          /* prefill: new prompt tokens per GPU per step */     \
    X(double, prompt_len, 4096, 1, 1e7, 0)       /* prefill: tokens per prompt (new + cached) */      \
    X(double, cached_prefix, 0, 0, 1e7, 0)       /* prefill: tokens of each prompt from the prefix    \
                                                    cache */                                          \
    X(double, kv_len, 4989, 1, 1e8, 0)           /* decode: average context a request attends to */   \
    X(int, mtp, 0, 0, 8, 0)                      /* decode: MTP draft tokens per step */              \
    X(double, mtp_accepted, 0, 0, 8, 0)          /* decode: drafts accepted per step on average       \
                                                    (<= mtp) */                                       \
    X(int, dense_tp, 1, 1, 64, 0)                /* the dense MLP over this many GPUs of a node */    \
    X(int, moe_tp, 1, 1, 64, 0)                  /* each routed expert over this many GPUs of a node: \
                                                    ep / moe_tp expert groups (1: pure EP) */         \
    X(double, imbalance, 1.0, 1, kMaxImbalance, 0) /* max / mean routed rows per GPU (1: balanced; \
                                                    the model takes at least routing_skew's) */       \
    X(double, routed_share, 1.0, kMinRoutedShare, kMaxRoutedShare, 0) /* tokens the experts see per GPU over this rank's   \
                                                    own: a lock-stepped DP group's mean load over the \
                                                    priced rank's (1: every rank as this one) */      \
    X(int, comm_sms, -1, 0, 4096, -1)            /* SMs the communication kernels hold while they     \
                                                    overlap (-1: the device's) */                     \
    X(double, step_overhead_ms, -1, 0, 1e4, -1)  /* scheduler, sampling, launch gaps per step (-1:    \
                                                    the phase's default) */                           \
    X(double, eager_launch_us, 0, 0, 1e4, 0)     /* host time to launch one kernel when the step runs \
                                                    eagerly, without CUDA graphs (0: one graph replay, \
                                                    no host-launch bound) */                          \
    X(double, mem_fraction, kMemoryReserve, kMinMemFraction, 1, 0) /* of each GPU's memory the stack gives weights and \
                                                    the KV cache (SGLang's --mem-fraction-static) */

// The weight format's flags (weights_fp8, experts_fp4, wo_fp4) come from WeightFlags, declared with
// the named formats in weight_format.hpp.
struct Deployment : WeightFlags {
#define DSPERF_DECLARE_DEPLOYMENT_FIELD(type, field, init, lo, hi, sentinel) type field = init;
    DSPERF_DEPLOYMENT_FIELDS(DSPERF_DECLARE_DEPLOYMENT_FIELD)
#undef DSPERF_DECLARE_DEPLOYMENT_FIELD
    Phase phase = Phase::kDecode;
    Overlap overlap = Overlap::kTwoBatch;
    bool kv_fp8 = false;          // FP8 latent cache (FlashMLA's FP8 layout), else BF16
    bool attn_fp8 = false;        // FP8 attention math (FP8 queries and cache on the FP8 tensor cores; needs kv_fp8)
    bool dispatch_fp8 = true;     // FP8 dispatch payload (+ 1x128 FP32 scales), else BF16
    bool dispatch_fp4 = false;    // NVFP4 dispatch payload (+ an FP8 scale per 16; over dispatch_fp8):
                                  // TensorRT-LLM's all-to-all after quantisation, with NVFP4 experts
    void validate(const ModelConfig& m, const DeviceSpec& d) const;  // names the field
};

// Defaults where the deployment does not say: assumptions, documented in docs/VALIDATION.md.
constexpr double kDecodeStepOverheadMs = 1.0;
constexpr double kPrefillStepOverheadMs = 2.0;
constexpr double kMinKernelUs = 2.0;          // floor of a call priced without a table row
// What a compute kernel costs beyond its own time when a step replays from one CUDA graph (the
// drain of one kernel and the ramp of the next). Measured on an H200 by measure-gpu --chain
// (python/dsperf/data/devices/measured/chains/H200-trtllm_h200_min_latency*.md): a one-request
// DeepSeek-V3 step's 1,377 kernels replayed from one graph took 0.29, 0.36 and 0.63 us a kernel
// more than alone in three runs (0.36, their median); a batch-64 step's longer kernels hid it
// (-0.55, -0.41).
// The compute tables time kernels alone, so each compute call adds it; transfer and all-reduce
// rows were timed with their launches and add nothing.
constexpr double kGraphKernelGapUs = 0.36;
// The share of a link's line rate a large all-reduce's ring traffic reaches: 370 of NVLink 4's
// 450 GB/s per direction, NCCL's effective bus bandwidth after its ~20% protocol overhead (an NCCL
// maintainer, NVIDIA/nccl-tests issue #212, 2024-05-06). Prices the bytes of an all-reduce past the
// all-reduce table's largest measured message.
constexpr double kLargeAllReduceLinkShare = 370.0 / 450.0;
// A TP all-reduce over whole nodes runs NCCL (the custom all-reduce kernels of the all-reduce table
// reach one node's GPUs only). Its fixed cost is NCCL's own latency model, the figures its tuner
// prices algorithms with (NVIDIA/nccl src/graph/tuning.cc at 5067397, 2026-06-11): over nodes a small
// all-reduce runs the Tree algorithm with the LL protocol, a base latency of 6.8 us, plus twice (the
// reduction up the tree and the broadcast down it) 0.6 us for each other GPU of a node (NVLink hops)
// and 5.0 us for each level of the tree between nodes (network hops, floor(log2(nodes)) of them).
constexpr double kNcclTreeBaseUs = 6.8;
constexpr double kNcclTreeNvlinkHopUs = 0.6;
constexpr double kNcclTreeNetHopUs = 5.0;

enum class Stream { kCompute = 0, kComm = 1 };
// Which stage of a layer a call belongs to (the overlap schedule moves stages, not calls).
// kMoeShared: the MoE layer's calls that need no dispatched token (norm, gate, shared expert),
// which single-batch overlap runs under the dispatch.
enum class Stage { kAttention = 0, kDispatch = 1, kMoe = 2, kCombine = 3, kDenseMlp = 4, kHead = 5, kMoeShared = 6 };
inline constexpr const char* kStageNames[] = {"attention", "dispatch", "moe", "combine", "dense_mlp", "head", "moe_shared"};

struct KernelCall {
    const char* name;
    TableFamily family;
    Stage stage;
    double calls = 1;     // how many times a step runs it (layers x micro-batches)
    double us = 0;        // one call
    double flops = 0, bytes = 0;
    double efficiency = 0;  // of the datasheet roofline (compute), or GB/s (communication)
    bool from_table = false, clamped = false;
    KernelShape shape{};    // the shape it was priced at (what `dsperf measure-gpu --step` times)
};

struct StepResult {
    std::vector<KernelCall> calls;     // one micro-batch of one MoE layer, one dense layer, the head
    double moe_layer_ms = 0;           // one MoE layer, both micro-batches, as scheduled
    double dense_layer_ms = 0;
    double head_ms = 0;                // final norm + LM head (+ MTP draft passes)
    double overhead_ms = 0;
    double launches = 0;               // kernels launched per step (every call, MTP draft passes included)
    double launch_ms = 0;              // the host's time to launch them eagerly (0 in graph mode)
    double step_ms = 0;
    double compute_ms = 0, comm_ms = 0;  // per MoE layer, summed over micro-batches, unscheduled
    double tokens_per_step = 0;        // per GPU: prompt tokens computed (prefill) or tokens emitted (decode)
    double tokens_per_gpu_s = 0;
    double tpot_ms = 0, tps_user = 0;  // decode
    double weights_gib = 0, kv_gib = 0, kv_bytes_per_token = 0;
    double batch_limit = 0;            // decode: requests per GPU the memory holds at this kv_len
    bool fits_memory = true;
    int calls_from_table = 0, calls_default = 0, calls_clamped = 0;
};

StepResult step(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep);

// A TP group of `tp` GPUs fits a device's nodes: it divides a node's GPUs, or spans whole nodes (its
// all-reduces then cross the network: tp_allreduce_latency). The layout checks' one rule for it.
inline bool tp_group_fits_nodes(int tp, int gpus_per_node) { return gpus_per_node % tp == 0 || tp % gpus_per_node == 0; }

// One TP all-reduce of `message_bytes` across `tp` GPUs of device d. Inside a node: the all-reduce
// table's latency scaled from the NVLink it was measured on, and bytes past its largest message at
// kLargeAllReduceLinkShare of the link (AllReduceTable::latency_us). Over whole nodes: NCCL's
// latency model (kNcclTree*) as the fixed cost, then the larger of the two hierarchical passes'
// traffic: the reduce-scatter and all-gather inside each node (the one-node all-reduce's price above
// its smallest message: the same NVLink bytes) and the all-reduce of each GPU's 1/gpus_per_node share
// between nodes over its NIC (at the NIC's line rate). Never below the one-node price of the message.
AllReduceLatency tp_allreduce_latency(const KernelTables& t, const DeviceSpec& d, double tp, double message_bytes);

// The stages of one step, microseconds per micro-batch per layer (head_ms: per step), for
// callers that schedule many deployments (the explorer). The deployment is trusted (validated once).
struct StepStages {
    int micro = 1;               // micro-batches (2 with two-batch overlap)
    double attn = 0, dispatch = 0, moe = 0, moe_shared = 0, combine = 0;  // one MoE layer (moe includes moe_shared)
    double dense = 0;            // one dense layer (attention + MLP)
    double head_ms = 0;          // LM head and MTP draft passes, per step
};
// The parts of a step that do not depend on the MoE layout (EP size, redundant experts, MoE TP): a
// sweep over EP sizes prices them once per point (explore_decode) and passes them to the others.
struct EpFreeParts {
    double attn_us = 0;       // one micro-batch's attention stage
    double dense_mlp_us = 0;  // one micro-batch's dense MLP stage
    double lm_head_us = 0;    // the LM head (per step; of one pass for a draft)
};
// Those parts of dep's step (for its overlap), and of one MTP draft pass (no dense MLP; zeros without MTP).
EpFreeParts ep_free_parts(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep);
EpFreeParts mtp_draft_ep_free_parts(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t,
                                    const Deployment& dep);
// mtp_ms: the MTP draft passes' milliseconds when the caller already has them (mtp_draft_ms), else -1.
// known: parts the caller already has (ep_free_parts of the same deployment); ignored where `calls`
// asks for the calls.
StepStages step_stages(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep,
                       std::vector<KernelCall>* calls = nullptr, double mtp_ms = -1, const EpFreeParts* known = nullptr);
// The MTP draft passes of a decode step, milliseconds (0 without MTP); they do not depend on overlap.
// known: one pass's parts the caller already has (mtp_draft_ep_free_parts).
double mtp_draft_ms(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& dep,
                    const EpFreeParts* known = nullptr);
// The memory fields of a result (weights, KV cache, batch limit, fits_memory).
void memory(const ModelConfig& m, const DeviceSpec& d, const Deployment& dep, StepResult& r);

// The step's milliseconds from its stages under the deployment's overlap schedule (no overhead).
double schedule_ms(const ModelConfig& m, const StepStages& s, Overlap overlap);

// Expected nodes other than its own that a token's top-k experts reach (node-limited routing).
double expected_remote_nodes(const ModelConfig& m, int ep, int gpus_per_node);

}  // namespace dsperf
