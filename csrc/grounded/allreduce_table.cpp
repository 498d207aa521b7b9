#include "grounded/allreduce_table.hpp"

#include <algorithm>
#include <cmath>

namespace dsperf {

void AllReduceTable::add(double tp, double message_bytes, double latency_us) {
    auto& rows = by_tp_[tp];
    rows.push_back({message_bytes, latency_us});
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.bytes < b.bytes; });
}

AllReduceLatency AllReduceTable::latency_us(double tp, double message_bytes, double link_scale,
                                             double large_gbps) const {
    AllReduceLatency r;
    if (by_tp_.empty()) return r;
    // The nearest measured tp, in log space.
    auto best = by_tp_.begin();
    for (auto it = by_tp_.begin(); it != by_tp_.end(); ++it)
        if (std::fabs(std::log(it->first / tp)) < std::fabs(std::log(best->first / tp))) best = it;
    r.found = true;
    r.clamped = best->first != tp;
    const std::vector<Row>& rows = best->second;
    const double fixed = rows.front().us;
    double us;
    if (message_bytes > rows.back().bytes) {
        // Past the largest row: its latency (scaled as below), then ring traffic at the link's rate.
        r.clamped = true;
        const double last = fixed + std::max(0.0, rows.back().us - fixed) / link_scale;
        const double ring_bytes = 2.0 * (tp - 1) / tp * (message_bytes - rows.back().bytes);
        r.us = last + ring_bytes / (large_gbps * 1e3);  // GB/s = 1e3 bytes per us
        return r;
    } else if (message_bytes <= rows.front().bytes) {
        us = fixed;
    } else {
        size_t i = 1;
        while (i + 1 < rows.size() && rows[i].bytes < message_bytes) ++i;
        const Row& a = rows[i - 1];
        const Row& b = rows[i];
        us = a.us + (b.us - a.us) / (b.bytes - a.bytes) * (message_bytes - a.bytes);
    }
    // The part above the fixed cost is traffic: it scales with the link.
    r.us = fixed + std::max(0.0, us - fixed) / link_scale;
    return r;
}

}  // namespace dsperf
