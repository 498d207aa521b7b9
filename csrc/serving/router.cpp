#include "serving/router.hpp"

namespace dsperf::serving {

int Router::route(const Request& r, const std::vector<RankScheduler>& ranks) {
    const int n = int(ranks.size());
    if (policy_ == Routing::kRoundRobin) return int(next_++ % size_t(n));
    // Least loaded (waiting + running), the lowest index on a tie; prefix-aware first prefers
    // the longest cached prefix.
    int best = 0, best_match = -1, best_load = 0;
    for (int i = 0; i < n; ++i) {
        const int match = policy_ == Routing::kPrefixAware && !r.hashes.empty() ? ranks[i].prefix_match(r) : 0;
        const int load = ranks[i].load();
        if (match > best_match || (match == best_match && load < best_load)) {
            best = i, best_match = match, best_load = load;
        }
    }
    return best;
}

}  // namespace dsperf::serving
