#include "ep/eplb.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace dsperf::ep {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

}  // namespace

EplbPolicy parse_eplb_policy(const std::string& name) {
    if (name == "auto") return EplbPolicy::Auto;
    if (name == "hierarchical") return EplbPolicy::Hierarchical;
    if (name == "global") return EplbPolicy::Global;
    throw std::invalid_argument("policy must be 'auto', 'hierarchical' or 'global', got '" + name + "'");
}

void balanced_packing(const std::vector<double>& weight, int64_t packs, std::vector<int32_t>& pack,
                      std::vector<int32_t>& rank) {
    const int64_t n = int64_t(weight.size());
    require(packs >= 1 && n % packs == 0, "balanced_packing: " + num(n) + " items do not split evenly into " +
                                              num(packs) + " packs");
    const int64_t capacity = n / packs;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weight[a] > weight[b]; });
    std::vector<double> pack_load(packs, 0.0);
    std::vector<int64_t> pack_items(packs, 0);
    pack.assign(n, -1);
    rank.assign(n, -1);
    for (int64_t item : order) {
        int64_t best = -1;
        for (int64_t p = 0; p < packs; ++p)
            if (pack_items[p] < capacity && (best < 0 || pack_load[p] < pack_load[best])) best = p;
        pack[item] = int32_t(best);
        rank[item] = int32_t(pack_items[best]++);
        pack_load[best] += weight[item];
    }
}

EplbPlan rebalance_experts(const double* load, int64_t L, int64_t P, int64_t num_groups, int64_t num_nodes,
                           int64_t num_gpus, EplbPolicy policy) {
    require(L >= 1, "num_logical must be >= 1, got " + num(L));
    require(num_gpus >= 1, "num_gpus must be >= 1, got " + num(num_gpus));
    require(num_nodes >= 1, "num_nodes must be >= 1, got " + num(num_nodes));
    require(num_groups >= 1, "num_groups must be >= 1, got " + num(num_groups));
    require(P >= L, "num_physical (" + num(P) + ") must be >= the logical experts (" + num(L) + ")");
    require(P % num_gpus == 0, "num_physical (" + num(P) + ") must be a multiple of num_gpus (" + num(num_gpus) + ")");
    require(L % num_groups == 0, "num_groups (" + num(num_groups) + ") must divide the logical experts (" + num(L) + ")");
    require(num_gpus % num_nodes == 0, "num_nodes (" + num(num_nodes) + ") must divide num_gpus (" + num(num_gpus) + ")");
    for (int64_t e = 0; e < L; ++e)
        require(std::isfinite(load[e]) && load[e] >= 0,
                "load must be finite and >= 0; expert " + num(e) + " has " + std::to_string(load[e]));

    bool hier = false;
    if (policy == EplbPolicy::Hierarchical) {
        require(num_groups % num_nodes == 0, "the hierarchical policy needs num_groups (" + num(num_groups) +
                                                 ") divisible by num_nodes (" + num(num_nodes) + ")");
        hier = true;
    } else if (policy == EplbPolicy::Auto) {
        hier = num_groups % num_nodes == 0;
    }
    // The global policy is the hierarchical one over a single node holding a single group.
    const int64_t nodes = hier ? num_nodes : 1;
    const int64_t groups = hier ? num_groups : 1;
    require(P % nodes == 0, "num_physical (" + num(P) + ") must be a multiple of num_nodes (" + num(nodes) + ")");
    const int64_t group_size = L / groups;
    const int64_t experts_per_node = L / nodes;
    const int64_t slots_per_node = P / nodes;
    const int64_t gpus_per_node = num_gpus / nodes;
    const int64_t slots_per_gpu = P / num_gpus;

    // 1. Groups onto nodes.
    std::vector<double> group_load(groups, 0.0);
    for (int64_t e = 0; e < L; ++e) group_load[e / group_size] += load[e];
    std::vector<int32_t> group_node, group_rank;
    balanced_packing(group_load, nodes, group_node, group_rank);
    // node_experts[n][i]: the i-th logical expert of node n (groups in arrival order, experts in order).
    std::vector<std::vector<int32_t>> node_experts(nodes, std::vector<int32_t>(experts_per_node));
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t j = 0; j < group_size; ++j)
            node_experts[group_node[g]][group_rank[g] * group_size + j] = int32_t(g * group_size + j);

    EplbPlan plan;
    plan.num_logical = L;
    plan.num_physical = P;
    plan.num_gpus = num_gpus;
    plan.hierarchical = hier;
    plan.phy2log.assign(P, -1);
    plan.logcnt.assign(L, 0);

    for (int64_t n = 0; n < nodes; ++n) {
        const auto& experts = node_experts[n];
        // 2. Replicate within the node: each extra slot goes to the expert with the largest load per replica.
        std::vector<int32_t> count(experts_per_node, 1);
        std::vector<int32_t> slot_expert(experts_per_node);  // node-local expert of each replica
        std::iota(slot_expert.begin(), slot_expert.end(), 0);
        for (int64_t s = experts_per_node; s < slots_per_node; ++s) {
            int64_t best = 0;
            for (int64_t i = 1; i < experts_per_node; ++i)
                if (load[experts[i]] / count[i] > load[experts[best]] / count[best]) best = i;
            ++count[best];
            slot_expert.push_back(int32_t(best));
        }
        // 3. Replicas onto the node's GPUs.
        std::vector<double> replica_load(slots_per_node);
        for (int64_t s = 0; s < slots_per_node; ++s)
            replica_load[s] = load[experts[slot_expert[s]]] / count[slot_expert[s]];
        std::vector<int32_t> gpu, rank;
        balanced_packing(replica_load, gpus_per_node, gpu, rank);
        for (int64_t s = 0; s < slots_per_node; ++s) {
            const int64_t global_gpu = n * gpus_per_node + gpu[s];
            plan.phy2log[global_gpu * slots_per_gpu + rank[s]] = experts[slot_expert[s]];
        }
        for (int64_t i = 0; i < experts_per_node; ++i) plan.logcnt[experts[i]] = count[i];
    }

    plan.max_replicas = *std::max_element(plan.logcnt.begin(), plan.logcnt.end());
    plan.log2phy.assign(L * plan.max_replicas, -1);
    std::vector<int32_t> filled(L, 0);
    for (int64_t s = 0; s < P; ++s) {
        const int32_t e = plan.phy2log[s];
        plan.log2phy[e * plan.max_replicas + filled[e]++] = int32_t(s);
    }
    return plan;
}

double placement_imbalance(const double* load, int64_t L, const int32_t* phy2log, int64_t P, const int32_t* logcnt,
                           int64_t num_gpus) {
    require(num_gpus >= 1 && P % num_gpus == 0,
            "num_gpus (" + num(num_gpus) + ") must divide the physical slots (" + num(P) + ")");
    std::vector<double> gpu_load(num_gpus, 0.0);
    const int64_t per_gpu = P / num_gpus;
    for (int64_t s = 0; s < P; ++s) {
        const int32_t e = phy2log[s];
        require(e >= 0 && e < L, "phy2log[" + num(s) + "] = " + num(e) + " is not a logical expert in [0, " + num(L) + ")");
        require(logcnt[e] >= 1, "logcnt[" + num(e) + "] must be >= 1");
        gpu_load[s / per_gpu] += load[e] / logcnt[e];
    }
    const double total = std::accumulate(gpu_load.begin(), gpu_load.end(), 0.0);
    if (total <= 0) return 1.0;
    return *std::max_element(gpu_load.begin(), gpu_load.end()) / (total / num_gpus);
}

}  // namespace dsperf::ep
