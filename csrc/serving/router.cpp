#include "serving/router.hpp"

#include <algorithm>

namespace dsperf::serving {

namespace {
int load_slack(int least) { return std::max(kPrefixSlackMin, least / kPrefixSlackDivisor); }
}  // namespace

int Router::route(const Request& r, const std::vector<RankScheduler>& ranks) {
    const int n = int(ranks.size());
    if (policy_ == Routing::kRoundRobin) return int(next_++ % size_t(n));
    // Least loaded (waiting + running), the lowest index on a tie.
    int least = 0;
    for (int i = 1; i < n; ++i)
        if (ranks[i].load() < ranks[least].load()) least = i;
    if (policy_ != Routing::kPrefixAware || r.hashes.empty()) return least;
    // Prefix-aware: among the ranks loaded within the slack, the longest cached prefix (ties: the
    // less loaded, then the lower index); no hit anywhere: the least loaded.
    const int limit = ranks[least].load() + load_slack(ranks[least].load());
    int best = least, best_match = 0;
    for (int i = 0; i < n; ++i) {
        const int load = ranks[i].load();
        if (load > limit) continue;
        const int match = ranks[i].prefix_match(r);
        if (match > best_match || (match == best_match && match > 0 && load < ranks[best].load())) {
            best = i, best_match = match;
        }
    }
    return best;
}

}  // namespace dsperf::serving
