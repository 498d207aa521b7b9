// The request generator: open-loop arrival times (Poisson, or gamma gaps for bursty traffic), and
// the lengths of generated requests (fixed, or drawn as a benchmark's random dataset draws them).
// Traces come in as requests; the closed loop issues its requests as answers come back.
#pragma once
#include <random>
#include <vector>

#include "serving/serving_types.hpp"

namespace dsperf::serving {

// A generated request's lengths (Workload::range_ratio), no shared prefixes; its arrival is the
// caller's. Fixed lengths draw nothing from `lengths`.
Request generated_request(const Workload& w, std::mt19937_64& lengths);

// Requests arriving in [0, duration) at the workload's mean rate (at most max_requests of them).
std::vector<Request> open_loop_requests(const Workload& w, std::mt19937_64& gaps, std::mt19937_64& lengths);

}  // namespace dsperf::serving
