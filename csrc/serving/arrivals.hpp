// The request generator: open-loop arrival times (Poisson, or gamma gaps for bursty traffic) with
// fixed lengths. Traces come in as requests; the closed loop issues its requests as answers come back.
#pragma once
#include <random>
#include <vector>

#include "serving/serving_types.hpp"

namespace dsperf::serving {

// Requests arriving in [0, duration) at the workload's mean rate, lengths fixed, no shared prefixes.
std::vector<Request> open_loop_requests(const Workload& w, std::mt19937_64& rng);

}  // namespace dsperf::serving
