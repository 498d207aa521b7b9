// All-reduce latency by message size: the fixed cost of a small all-reduce (launch, flag exchange,
// one pass of the reduction) dominates a decode step's TP all-reduces, which a bandwidth alone
// prices at near zero. Rows are measured latencies (us) of one all-reduce of a message of `bytes`
// across `tp` GPUs on a link of the table's speed (data/efficiency/network.csv).
#pragma once
#include <map>
#include <vector>


namespace dsperf {

struct AllReduceLatency {
    double us = 0;
    bool found = false;    // false: no rows; price by bandwidth instead
    bool clamped = false;  // the tp was not measured, or the message lay past the largest row
};

class AllReduceTable {
public:
    void add(double tp, double message_bytes, double latency_us);
    bool empty() const { return by_tp_.empty(); }
    // The latency of one all-reduce of `message_bytes` across `tp` GPUs whose link is `link_scale`
    // times the table's: the smallest message's latency is a fixed cost, kept as measured; the
    // rise above it is traffic, divided by link_scale. Between rows: linear in the message size;
    // below the smallest: the smallest's latency. Past the largest: its latency plus the further
    // bytes as ring traffic (2 (tp - 1) / tp of them per GPU) at `large_gbps` GB/s. The table's
    // rows are small-message kernels (one-shot: each GPU reads every peer's whole message), whose
    // slope would price a large message at a fraction of the link; large messages go the
    // bandwidth-optimal way (ring or two-shot), so their cost is the link's. A tp without rows
    // takes the nearest measured tp (clamped).
    AllReduceLatency latency_us(double tp, double message_bytes, double link_scale, double large_gbps) const;

private:
    struct Row {
        double bytes, us;
    };
    std::map<double, std::vector<Row>> by_tp_;  // each sorted by bytes
};

}  // namespace dsperf
