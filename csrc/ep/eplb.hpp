// Expert-parallel load balancing (EPLB): from per-expert load statistics to a placement of
// logical experts, some replicated, onto the physical expert slots of the GPUs (ranks).
//
// Two policies, after DeepSeek's published description of EPLB:
//  - hierarchical (num_groups divisible by num_nodes): pack expert groups onto nodes so that node
//    loads even out, replicate the heaviest experts within each node, then pack the replicas onto
//    that node's GPUs;
//  - global: the same with one node and one group, i.e. replicate over all slots and pack the
//    replicas onto all GPUs (the choice when groups do not divide evenly into nodes).
// A replica's load is its expert's load divided by the expert's replica count (tokens are spread
// evenly over the replicas). Pure functions: nothing here knows about MPI or Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsperf::ep {

enum class EplbPolicy { Auto, Hierarchical, Global };

EplbPolicy parse_eplb_policy(const std::string& name);  // "auto", "hierarchical", "global"

struct EplbPlan {
    int64_t num_logical = 0, num_physical = 0, num_gpus = 0;
    int64_t max_replicas = 0;
    bool hierarchical = false;       // which policy ran (Auto resolves to one of the two)
    std::vector<int32_t> phy2log;    // [num_physical]: the logical expert each physical slot holds
    std::vector<int32_t> log2phy;    // [num_logical * max_replicas]: its slots, ascending, -1 padded
    std::vector<int32_t> logcnt;     // [num_logical]: replicas per logical expert (>= 1)
};

// Greedy balanced packing: items, heaviest first (ties: lower index), each go to the least loaded
// pack that still has room (ties: lower pack); every pack takes exactly n / packs items.
// pack[i] is item i's pack, rank[i] its place in that pack (order of arrival).
void balanced_packing(const std::vector<double>& weight, int64_t packs, std::vector<int32_t>& pack,
                      std::vector<int32_t>& rank);

// One layer's plan. load: num_logical non-negative values. Requirements (std::invalid_argument
// names the argument otherwise): num_physical >= num_logical, num_physical % num_gpus == 0,
// num_logical % num_groups == 0, num_gpus % num_nodes == 0; the hierarchical policy also needs
// num_groups % num_nodes == 0.
EplbPlan rebalance_experts(const double* load, int64_t num_logical, int64_t num_physical, int64_t num_groups,
                           int64_t num_nodes, int64_t num_gpus, EplbPolicy policy);

// max / mean of the per-GPU load when GPU g holds physical slots [g * P / G, (g + 1) * P / G) and a
// slot carries load[phy2log[s]] / logcnt[phy2log[s]]. 1.0 is perfect balance; all-zero load gives 1.
double placement_imbalance(const double* load, int64_t num_logical, const int32_t* phy2log, int64_t num_physical,
                           const int32_t* logcnt, int64_t num_gpus);

}  // namespace dsperf::ep
