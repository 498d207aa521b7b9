// The serving simulator's vocabulary: its enums (declared once here, exposed to Python by name
// through the binding), a request, a request's record, and the run's configuration.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "grounded/step_model.hpp"

namespace dsperf::serving {

// Each enum is listed once as X(enumerator, "python name", "what it means"); the binding builds the
// Python-side name lists from these, so the names live in one place.
#define DSPERF_ARRIVAL_KINDS(X)                                                          \
    X(kPoisson, "poisson", "open loop: exponential gaps at a mean rate")                 \
    X(kGamma, "gamma", "open loop: gamma gaps at a mean rate and a coefficient of variation (bursty)") \
    X(kClosedLoop, "concurrency", "closed loop: a fixed number of clients, each sends again when answered") \
    X(kTrace, "trace", "replay of a trace's arrival times")
#define DSPERF_ROUTINGS(X)                                                               \
    X(kRoundRobin, "round_robin", "requests go to the ranks in turn")                    \
    X(kLeastLoaded, "least_loaded", "to the rank with the fewest requests waiting or running") \
    X(kPrefixAware, "prefix_aware", "to the rank whose prefix cache holds the longest prefix (ties: least loaded)")
#define DSPERF_SERVE_MODES(X)                                                            \
    X(kAggregated, "aggregated", "prefill and decode share the GPUs (chunked prefill in the decode steps)") \
    X(kDisaggregated, "disaggregated", "a prefill pool and a decode pool; the KV cache crosses the network")
// Where a disaggregated stack streams the first token from. Dynamo, SGLang's PD router and vLLM's
// disaggregated proxy all stream the response from the decode worker (Dynamo's "Disaggregated
// Serving" guide, v1.2: "streams the response from the decode worker"), so the first token reaches
// the client when the decode instance takes the request into its batch, after the KV hand-off and any
// wait for a decode slot.
#define DSPERF_FIRST_TOKENS(X)                                                           \
    X(kDecode, "decode", "when the decode instance takes the request into its batch (after the hand-off)") \
    X(kPrefill, "prefill", "at the end of the prefill step that computes the prompt (before the hand-off)")

#define DSPERF_ENUM_ITEM(e, name, text) e,
enum class ArrivalKind { DSPERF_ARRIVAL_KINDS(DSPERF_ENUM_ITEM) };
enum class Routing { DSPERF_ROUTINGS(DSPERF_ENUM_ITEM) };
enum class ServeMode { DSPERF_SERVE_MODES(DSPERF_ENUM_ITEM) };
enum class FirstToken { DSPERF_FIRST_TOKENS(DSPERF_ENUM_ITEM) };
#undef DSPERF_ENUM_ITEM

struct EnumEntry {
    const char* name;
    const char* text;
};
#define DSPERF_ENUM_ENTRY(e, name, text) EnumEntry{name, text},
inline const std::vector<EnumEntry>& arrival_kinds() {
    static const std::vector<EnumEntry> v{DSPERF_ARRIVAL_KINDS(DSPERF_ENUM_ENTRY)};
    return v;
}
inline const std::vector<EnumEntry>& routings() {
    static const std::vector<EnumEntry> v{DSPERF_ROUTINGS(DSPERF_ENUM_ENTRY)};
    return v;
}
inline const std::vector<EnumEntry>& serve_modes() {
    static const std::vector<EnumEntry> v{DSPERF_SERVE_MODES(DSPERF_ENUM_ENTRY)};
    return v;
}
inline const std::vector<EnumEntry>& first_tokens() {
    static const std::vector<EnumEntry> v{DSPERF_FIRST_TOKENS(DSPERF_ENUM_ENTRY)};
    return v;
}
#undef DSPERF_ENUM_ENTRY

// One request: when it arrives, its prompt and output lengths, and the hashes of its prompt's
// blocks (block_tokens each; equal hashes mean equal prefixes up to that block). No hashes: the
// prompt shares nothing with any other.
struct Request {
    double arrival_ms = 0;
    int input = 1, output = 1;
    std::vector<uint64_t> hashes;
};

// What happened to one request (times in ms from the start of the run; -1: did not happen).
struct Record {
    double arrival_ms = 0, first_token_ms = -1, finish_ms = -1;
    int input = 0, output = 0;
    int generated = 0;       // tokens emitted (== output when finished)
    int preemptions = 0;     // times its KV cache was dropped and its context recomputed
    int cached_tokens = 0;   // prompt tokens served by the prefix cache (at its last admission)
    int prefill_rank = -1, decode_rank = -1;  // global rank ids (pool-wide)
    double max_itl_ms = 0;   // its longest gap between two emissions
};

// Every gap between two emissions of a request, as (value, count) runs. The requests of one rank's
// decode step mostly share their gap (the step's length), so 10^8-10^9 gaps of a long run fit in a few
// MB as runs where a float each took gigabytes; sorted() merges them into distinct values ascending.
struct GapCounts {
    std::vector<float> values;
    std::vector<int64_t> counts;
    void add(float v) {
        if (!values.empty() && values.back() == v) {
            ++counts.back();
        } else {
            values.push_back(v);
            counts.push_back(1);
        }
    }
    GapCounts sorted() const;
};

// One pool of GPUs: `groups` EP groups, each of deployment.ep GPUs, a DP rank being attn_tp GPUs.
struct PoolConfig {
    Deployment dep;            // phase decode: prices the decode steps (and, aggregated, sizes the chunks' layout)
    Deployment prefill_dep;    // phase prefill, same layout: prices the prompt chunks
    int groups = 1;
    int max_running = 256;     // requests running per rank (decoding or prefilling)
    int token_budget = 8192;   // tokens per rank per step (decode tokens + prompt chunk)
    int ranks_per_group() const { return dep.ep / dep.attn_tp; }
};

// What one loop adds to SGLang's receive count (scheduler_recv_skipper.py): a decode step 1, a step
// that runs a prompt chunk 1000 (so any interval up to 1000 is reached by one prompt step).
constexpr int kRecvWeightDecode = 1;
constexpr int kRecvWeightPrompt = 1000;

struct ServeConfig {
    ServeMode mode = ServeMode::kAggregated;
    PoolConfig decode;         // aggregated: the only pool
    PoolConfig prefill;        // disaggregated only
    Routing routing = Routing::kLeastLoaded;
    bool prefix_cache = true;
    int block_tokens = 512;    // KV block and prefix-hash granularity (the traces' block)
    uint64_t seed = 0;
    double kv_transfer_gbps = 50;  // per prefill rank's send of a finished prompt's cache (disaggregated)
    // Overload guard: stop when this many requests wait in queues, or simulated time passes this.
    int max_waiting = 20000;
    double max_time_ms = 1e9;
    // SGLang's --scheduler-recv-interval: a rank of the pool that takes new requests (aggregated, or
    // the prefill pool) receives them only once its loop has counted this many: each decode step
    // counts 1, a step with a prompt chunk counts the whole interval, an idle loop receives at once
    // (sglang scheduler_recv_skipper.py; weights kRecvWeightDecode / kRecvWeightPrompt / at once).
    // 1: every step.
    int recv_interval = 1;
    FirstToken first_token = FirstToken::kDecode;  // disaggregated: where the first token is streamed from
    double ctx_ratio = 1.02;       // decode context grid (geometric, linear interpolation between points)
    double prefill_ratio = 1.0442; // prefill buckets (geometric, nearest: +-2.2%)
};

// The workload: generated (Poisson, gamma, closed loop with fixed lengths) or given requests.
struct Workload {
    ArrivalKind kind = ArrivalKind::kPoisson;
    double rate = 1;           // requests per second (open loop)
    double cv = 1;             // gamma: coefficient of variation of the gaps
    int concurrency = 1;       // closed loop: clients
    double duration_ms = 60e3; // arrivals stop after this (closed loop: no new request after it)
    int64_t max_requests = 10000000;  // no more requests than this are generated (a benchmark's prompt count)
    int input = 1024, output = 256;  // generated requests' lengths (the longest, with range_ratio < 1)
    // Generated lengths are uniform integers in [max(1, int(len x range_ratio)), len], as the serving
    // benchmarks' random dataset draws them (vLLM's and SGLang's benchmark_serving); 1: fixed.
    double range_ratio = 1;
    std::vector<Request> requests;   // trace (and closed loop over a trace: lengths in order)
};

}  // namespace dsperf::serving
