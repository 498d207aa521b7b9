#include "grounded/routing_skew.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

namespace dsperf {

namespace {

// Means up to this are summed term by term (at most about 24 sqrt(mean) + 30 terms); above it the
// busiest load grows as mean + c sqrt(mean), c read off the sum at this mean (the Poisson's spread
// scales as sqrt(mean), and by 400 its shape is close to the normal limit).
constexpr double kSummedUpTo = 400;
// Values a thread remembers before it starts again (a few MB at most).
constexpr size_t kRemembered = 1 << 16;

double expected_max_poisson(double mean, double ranks) {
    // Loads more than 8 standard deviations below the mean: F(m) < 1e-15 there and ranks >= 2, so
    // F(m)^ranks is 0 to double precision and each such m adds 1; the sum starts after them.
    const double sd = std::sqrt(mean);
    const double m0 = std::max(0.0, std::floor(mean - 8 * sd - 5));
    double pmf = std::exp(-mean + m0 * std::log(mean) - std::lgamma(m0 + 1));
    double cdf = 0, sum = m0;
    for (double m = m0;; m += 1) {
        cdf = std::min(1.0, cdf + pmf);
        const double tail = -std::expm1(ranks * std::log(cdf > 0 ? cdf : 1e-300));  // 1 - F(m)^ranks
        sum += tail;
        pmf *= mean / (m + 1);
        // Past the mean the mass left above m is under pmf(m + 1) / (1 - mean / (m + 2)), and what it can
        // add to the sum under ranks times that (a stop on `tail` alone never comes where the summed
        // distribution function rounds to just under 1).
        if (m > mean && ranks * pmf / (1 - mean / (m + 2)) < 1e-12) break;
    }
    return sum;
}

}  // namespace

double routing_skew(double mean_rows, double ranks) {
    if (ranks <= 1 || mean_rows <= 0) return 1.0;
    // Each thread keeps what it summed (the explorer and the simulator price the same (mean, ranks)
    // over many devices, overlaps and steps), and c per number of ranks.
    struct Key {
        double mean, ranks;
        bool operator==(const Key& o) const { return mean == o.mean && ranks == o.ranks; }
    };
    struct Hash {
        size_t operator()(const Key& k) const {
            return std::hash<double>()(k.mean) * 31 + std::hash<double>()(k.ranks);
        }
    };
    thread_local std::unordered_map<Key, double, Hash> known;
    const bool summed = mean_rows <= kSummedUpTo;
    const Key key{summed ? mean_rows : 0.0, ranks};
    auto it = known.find(key);
    if (it == known.end()) {
        if (known.size() >= kRemembered) known.clear();
        const double v = summed ? expected_max_poisson(mean_rows, ranks) / mean_rows
                                : (expected_max_poisson(kSummedUpTo, ranks) - kSummedUpTo) / std::sqrt(kSummedUpTo);
        it = known.emplace(key, v).first;
    }
    return summed ? it->second : 1.0 + it->second / std::sqrt(mean_rows);
}

}  // namespace dsperf
