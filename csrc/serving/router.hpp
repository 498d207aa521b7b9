// The global router: which DP rank of a pool a new request joins.
#pragma once
#include <cstddef>
#include <vector>

#include "serving/rank_scheduler.hpp"
#include "serving/serving_types.hpp"

namespace dsperf::serving {

// Prefix-aware routing follows a cached prefix only to a rank whose load stays within a slack of
// the least-loaded rank (assumed: a quarter of it, at least 2 requests). Without it, every prompt
// sharing a popular first block (a common system prompt) lands on one rank.
constexpr int kPrefixSlackMin = 2;
constexpr int kPrefixSlackDivisor = 4;

class Router {
public:
    explicit Router(Routing policy) : policy_(policy) {}
    int route(const Request& r, const std::vector<RankScheduler>& ranks);

private:
    Routing policy_;
    size_t next_ = 0;  // round robin
};

}  // namespace dsperf::serving
