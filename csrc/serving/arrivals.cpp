#include "serving/arrivals.hpp"

#include <algorithm>
#include <cmath>

namespace dsperf::serving {

Request generated_request(const Workload& w, std::mt19937_64& lengths) {
    Request r;
    r.input = w.input, r.output = w.output;
    if (w.range_ratio < 1) {
        auto draw = [&](int len) {
            const int lo = std::max(1, int(len * w.range_ratio));  // int(): the benchmarks truncate
            return std::uniform_int_distribution<int>(lo, len)(lengths);
        };
        r.input = draw(w.input);
        r.output = draw(w.output);
    }
    return r;
}

std::vector<Request> open_loop_requests(const Workload& w, std::mt19937_64& gaps, std::mt19937_64& lengths) {
    std::vector<Request> out;
    const double mean_gap_ms = 1e3 / w.rate;
    // Gamma gaps with shape k = 1 / cv^2 keep the mean and set the burstiness (cv 1: Poisson).
    const double shape = w.kind == ArrivalKind::kGamma ? 1.0 / (w.cv * w.cv) : 1.0;
    std::gamma_distribution<double> gap(shape, mean_gap_ms / shape);
    double t = 0;
    while (int64_t(out.size()) < w.max_requests) {
        t += gap(gaps);
        if (t >= w.duration_ms) break;
        Request r = generated_request(w, lengths);
        r.arrival_ms = t;
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace dsperf::serving
