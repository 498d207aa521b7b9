// The global router: which DP rank of a pool a new request joins.
#pragma once
#include <cstddef>
#include <vector>

#include "serving/rank_scheduler.hpp"
#include "serving/serving_types.hpp"

namespace dsperf::serving {

class Router {
public:
    explicit Router(Routing policy) : policy_(policy) {}
    int route(const Request& r, const std::vector<RankScheduler>& ranks);

private:
    Routing policy_;
    size_t next_ = 0;  // round robin
};

}  // namespace dsperf::serving
