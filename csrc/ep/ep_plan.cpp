#include "ep/ep_plan.hpp"

#include <cstddef>

namespace dsperf::ep {

RoutingPlan routing_plan(const int64_t* rows, int64_t stride, int64_t W, int64_t E_loc, EpLayout layout,
                         int64_t cap) {
    const int64_t E = W * E_loc;
    RoutingPlan p;
    p.W = W;
    p.local_experts = E_loc;
    p.tok_off.assign(size_t(W * W), 0);
    p.n_recv.assign(size_t(W), 0);
    p.expert_base.assign(size_t(E), 0);
    p.pair_off.assign(size_t(W * E), 0);
    p.pair_rows.assign(size_t(W), 0);
    // Running sums over the sources in rank order: a source's rows follow those of every lower rank.
    // n_recv[d] is the running sum of records for d (its total once every source is added).
    std::vector<int64_t> pairs_into(size_t(E), 0);
    for (int64_t s = 0; s < W; ++s) {
        const int64_t* tokens = rows + s * stride;
        const int64_t* pairs = tokens + W;
        for (int64_t d = 0; d < W; ++d) {
            p.tok_off[s * W + d] = p.n_recv[d];
            p.n_recv[d] += tokens[d];
        }
        for (int64_t e = 0; e < E; ++e) {
            p.pair_off[s * E + e] = pairs_into[e];
            pairs_into[e] += pairs[e];
        }
    }
    for (int64_t d = 0; d < W; ++d) {
        int64_t at = 0;
        for (int64_t j = 0; j < E_loc; ++j) {
            const int64_t e = d * E_loc + j;
            if (layout == EpLayout::kMasked) {
                p.expert_base[e] = j * cap;
            } else {
                p.expert_base[e] = at;
                at += pairs_into[e];
            }
        }
        p.pair_rows[d] = layout == EpLayout::kMasked ? E_loc * cap : at;
    }
    return p;
}

void routing_places(const RoutingPlan& p, int64_t s, const int64_t* ids, int64_t n, int64_t K,
                    const RoutingPlaces& out) {
    const int64_t W = p.W, E_loc = p.local_experts, E = W * E_loc;
    // One pass over the pairs in token order: each expert's rows from this source are its tokens
    // ascending, and so are each destination's records.
    std::vector<int64_t> next_pair(static_cast<size_t>(E));
    std::vector<int64_t> next_tok(p.tok_off.begin() + s * W, p.tok_off.begin() + (s + 1) * W);
    for (int64_t e = 0; e < E; ++e) next_pair[e] = p.expert_base[e] + p.pair_off[s * E + e];
    for (int64_t i = 0; i < n; ++i) {
        int32_t* tp = out.tok_peer + i * W;
        int64_t* tr = out.tok_row + i * W;
        for (int64_t d = 0; d < W; ++d) tp[d] = -1, tr[d] = -1;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t e = ids[i * K + k], d = e / E_loc;
            out.pair_peer[i * K + k] = int32_t(d);
            out.pair_row[i * K + k] = next_pair[e]++;
            if (tp[d] < 0) tp[d] = int32_t(d), tr[d] = next_tok[d]++;
        }
    }
}

}  // namespace dsperf::ep
