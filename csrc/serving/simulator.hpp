// The serving simulator: requests (serving/arrivals, a trace, or a closed loop) -> router ->
// per-rank schedulers -> steps priced by the grounded model (serving/step_pricer), as a discrete-
// event loop over arrivals, lock-stepped group steps and KV hand-offs. Deterministic for a seed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "grounded/kernel_table.hpp"
#include "hardware/device_spec.hpp"
#include "model/model_config.hpp"
#include "serving/serving_types.hpp"

namespace dsperf::serving {

struct SimResult {
    std::vector<Record> records;  // one per request issued, in arrival order
    GapCounts itl_ms;             // every gap between two emissions of a request (after its first token), sorted
    // Time series, one sample per arrival and per group step: totals over every rank.
    std::vector<double> ts_ms;
    std::vector<int32_t> ts_waiting, ts_running, ts_in_system;
    std::vector<int64_t> ts_kv_blocks;
    bool overloaded = false;
    double overload_since_ms = -1;  // the last time no request waited before the run was stopped
    std::string stop_reason;        // "drained", "max_waiting" or "max_time"
    double end_ms = 0;
    int64_t steps = 0;              // group steps taken
    int64_t priced_points = 0;      // grounded-model evaluations (the rest came from the cache)
    int64_t kv_blocks_per_rank = 0, prefill_kv_blocks_per_rank = 0;
    int ranks = 0, prefill_ranks = 0;
    double draft_accept = 0;        // per-draft acceptance probability giving the mean accepted drafts
};

// The deployments are trusted (validated by the caller); throws std::invalid_argument when a
// request cannot fit a rank's KV cache.
SimResult simulate(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const ServeConfig& cfg,
                   const Workload& w);

// The per-draft acceptance probability q with q + q^2 + ... + q^k = accepted (drafts accepted in a
// row until the first rejection).
double draft_acceptance(int drafts, double accepted);

}  // namespace dsperf::serving
