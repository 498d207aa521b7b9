#include "serving/arrivals.hpp"

#include <cmath>

namespace dsperf::serving {

std::vector<Request> open_loop_requests(const Workload& w, std::mt19937_64& rng) {
    std::vector<Request> out;
    const double mean_gap_ms = 1e3 / w.rate;
    // Gamma gaps with shape k = 1 / cv^2 keep the mean and set the burstiness (cv 1: Poisson).
    const double shape = w.kind == ArrivalKind::kGamma ? 1.0 / (w.cv * w.cv) : 1.0;
    std::gamma_distribution<double> gap(shape, mean_gap_ms / shape);
    double t = 0;
    while (true) {
        t += gap(rng);
        if (t >= w.duration_ms) break;
        Request r;
        r.arrival_ms = t, r.input = w.input, r.output = w.output;
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace dsperf::serving
