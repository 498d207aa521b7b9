#include "grounded/routing_skew.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>
#include <vector>

namespace dsperf {

double chance_none_drawn(double total, double held, int64_t draws) {
    double miss = 1.0;
    for (int64_t i = 0; i < draws; ++i) miss *= std::max(0.0, (total - held - double(i)) / (total - double(i)));
    return miss;
}

namespace {

// Means up to this are summed term by term (about 16 standard deviations of terms); above it the
// busiest load grows as mean + c sd, c read off the sum at this mean (the load's spread scales as its
// sd, and by 400 its shape is close to the normal limit).
constexpr double kSummedUpTo = 400;
// Values a thread remembers before it starts again (a few MB at most).
constexpr size_t kRemembered = 1 << 16;
// Below this mean a set almost surely holds no row and at most one holds any: the busiest holds the
// sum of them, `ranks` times the mean (the limit of both forms as the mean goes to 0, off by about
// ranks x mean). Taken as is there, where the negative binomial's r would leave the normal doubles.
constexpr double kVanishingMean = 1e-100;

// One set's load: Poisson(mean) at dispersion <= 1; else negative binomial with variance
// dispersion x mean (r = mean / (dispersion - 1), failure probability q = 1 - 1 / dispersion).
struct Load {
    double mean, dispersion, r = 0, q = 0;
    Load(double mean_, double dispersion_) : mean(mean_), dispersion(dispersion_) {
        if (dispersion > 1) r = mean / (dispersion - 1), q = 1 - 1 / dispersion;
    }
    bool poisson() const { return dispersion <= 1; }
    double sd() const { return std::sqrt(mean * std::max(1.0, dispersion)); }
    double log_pmf(double m) const {
        if (poisson()) return -mean + m * std::log(mean) - std::lgamma(m + 1);
        return std::lgamma(r + m) - std::lgamma(r) - std::lgamma(m + 1) + r * std::log1p(-q) + m * std::log(q);
    }
    double ratio(double m) const { return poisson() ? mean / (m + 1) : (r + m) / (m + 1) * q; }  // pmf(m+1)/pmf(m)
    // A ratio no later one exceeds: Poisson's and, for r >= 1, the negative binomial's fall with m;
    // for r < 1 they rise towards q.
    double ratio_bound(double m) const { return poisson() || r >= 1 ? ratio(m) : q; }
};

double expected_max(const Load& load, double ranks) {
    // Loads more than 8 standard deviations below the mean: F(m) < 1e-15 there and ranks >= 2, so
    // F(m)^ranks is 0 to double precision and each such m adds 1; the sum starts after them.
    const double m0 = std::max(0.0, std::floor(load.mean - 8 * load.sd() - 5));
    // The load's probabilities from m0 on, until what is left above can add under 1e-13 of the mean
    // to the sum (relative: a mean of 1e-12 rows sums to about 1e-12): past the mean the mass above m
    // is under pmf(m + 1) / (1 - the ratio bound), and what it can add under ranks times that. A
    // probability that underflows to 0 ends it too.
    thread_local std::vector<double> pmf;
    pmf.clear();
    double p = std::exp(load.log_pmf(m0));
    for (double m = m0;; m += 1) {
        pmf.push_back(p);
        p *= load.ratio(m);
        const double bound = load.ratio_bound(m + 1);
        if (!(p > 0) || (m > load.mean && bound < 1 && ranks * p / (1 - bound) < 1e-13 * load.mean)) break;
    }
    // 1 - F(m)^ranks from the survival S(m) = P(load > m), summed from the top (small terms first):
    // 1 - (1 - S)^ranks keeps its digits where F(m) rounds to 1 (a mean of 1e-300 rows has S(0) =
    // 1e-300, and F(0) = 1 exactly in doubles).
    double sum = m0, above = p;  // the mass past the last term, about the next probability
    for (size_t i = pmf.size(); i-- > 0;) {
        sum += -std::expm1(ranks * std::log1p(-std::min(1.0, above)));
        above += pmf[i];
    }
    return sum;
}

double choose(double n, double k) {
    if (k < 0 || k > n) return 0;
    return std::exp(std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1));
}

}  // namespace

double routing_skew(double mean_rows, double ranks, double dispersion) {
    if (ranks <= 1 || mean_rows <= 0) return 1.0;
    if (mean_rows < kVanishingMean) return ranks;
    // Each thread keeps what it summed (the explorer and the simulator price the same arguments over
    // many devices, overlaps and steps), and c per (ranks, dispersion).
    struct Key {
        double mean, ranks, dispersion;
        bool operator==(const Key& o) const { return mean == o.mean && ranks == o.ranks && dispersion == o.dispersion; }
    };
    struct Hash {
        size_t operator()(const Key& k) const {
            const std::hash<double> h;
            return (h(k.mean) * 31 + h(k.ranks)) * 31 + h(k.dispersion);
        }
    };
    thread_local std::unordered_map<Key, double, Hash> known;
    const bool summed = mean_rows <= kSummedUpTo;
    const Key key{summed ? mean_rows : 0.0, ranks, dispersion};
    auto it = known.find(key);
    if (it == known.end()) {
        if (known.size() >= kRemembered) known.clear();
        const Load at(summed ? mean_rows : kSummedUpTo, dispersion);
        const double v = summed ? expected_max(at, ranks) / mean_rows : (expected_max(at, ranks) - kSummedUpTo) / at.sd();
        it = known.emplace(key, v).first;
    }
    // sd / mean taken as one root (the sd alone overflows at the largest means).
    return summed ? it->second : 1.0 + it->second * std::sqrt(std::max(1.0, dispersion) / mean_rows);
}

double routing_dispersion(const ModelConfig& m, double ranks, int redundant_experts) {
    const double E = double(m.n_routed_experts), K = double(m.n_activated_experts);
    const double G = double(m.n_expert_groups), g = double(m.n_limited_groups);
    if (redundant_experts > 0 || ranks <= 1 || G <= 1 || g >= G) return 1.0;
    const double per_set = E / ranks, per_group = E / G, pool = g * per_group;  // a token's experts lie in the pool
    if (pool <= K) return 1.0;
    // K distinct experts drawn from the pool, `in` of them on the set: hypergeometric.
    const double finite = (pool - K) / (pool - 1);
    const auto draw_var = [&](double in) { return K * (in / pool) * (1 - in / pool) * finite; };
    // Over c, the number of the token's groups on the set: its mean rows given c, their square, the
    // variance of the draw given c.
    double mean = 0, square = 0, within = 0;
    const double whole = per_set / per_group;
    if (whole >= 1 && whole == std::floor(whole)) {  // whole groups on the set: c hypergeometric
        for (double c = 0; c <= std::min(whole, g); ++c) {
            const double p = choose(whole, c) * choose(G - whole, g - c) / choose(G, g), e = K * c / g;
            mean += p * e, square += p * e * e, within += p * draw_var(c * per_group);
        }
    } else if (per_group / per_set == std::floor(per_group / per_set)) {  // a share of one group
        const double p = g / G, e = K * per_set / pool;
        mean = p * e, square = p * e * e, within = p * draw_var(per_set);
    } else {
        return 1.0;
    }
    return std::max(1.0, (within + square - mean * mean) / mean);
}

}  // namespace dsperf
