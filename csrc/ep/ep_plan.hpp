// The routing plan of a dispatch, written once for every exchange: from the counts every rank agreed
// on, where each source's token records and (token, expert) pair rows land at their destinations.
// The window exchange (ep_window.cpp: window_plan, window_scatter) and the transport exchanges
// (python/dsperf/ep/plan.py, through the binding: MPI, NCCL, simulated) all read it from here, so
// on one node they give the same places for the same inputs. Pure functions; the Python layer
// checks shapes and indices once at the boundary, so nothing here re-checks them.
#pragma once
#include "ep/ep_layout.hpp"

#include <cstdint>
#include <vector>

namespace dsperf::ep {

// Where every source's rows start at every destination, and how many rows each destination holds.
// Sources land in rank order: a token layout receives each source's records as one block, tokens
// ascending; a per-expert layout keeps each local expert's rows contiguous (sources in rank order
// within it); the masked layout gives each local expert cap rows.
struct RoutingPlan {
    int64_t W = 0, local_experts = 0;
    std::vector<int64_t> tok_off;      // [W, W] source-major: first record row of source s's tokens at d
    std::vector<int64_t> n_recv;       // [W] records each rank receives
    std::vector<int64_t> expert_base;  // [E] first row of expert e in its rank's pair rows
    std::vector<int64_t> pair_off;     // [W, E] source-major: first row of source s's pairs within e
    std::vector<int64_t> pair_rows;    // [W] pair rows of each rank (per-expert or masked layout)
};

// The plan from the agreed count rows (rows [W, stride]: tokens source -> dest at columns [0, W),
// pairs source -> expert at [W, W + E), E = W * local_experts); cap: rows per local expert of the
// masked layout (read in that layout only).
RoutingPlan routing_plan(const int64_t* rows, int64_t stride, int64_t W, int64_t local_experts, EpLayout layout,
                         int64_t cap);

// Where one source's tokens went: tok_peer/tok_row [n, W], pair_peer/pair_row [n, K].
struct RoutingPlaces {
    int32_t* tok_peer = nullptr;
    int64_t* tok_row = nullptr;
    int32_t* pair_peer = nullptr;
    int64_t* pair_row = nullptr;
};

// The places of source s's tokens, ids [n, K] global experts in [0, E), tokens ascending as the
// source holds them, no expert twice in a token. For every token i: tok_peer[i, d] = d and
// tok_row[i, d] its record row at d, or -1 and -1 where no expert of i lives on d;
// pair_peer[i, k] = the rank of expert ids[i, k] and pair_row[i, k] its row in that rank's pair rows.
void routing_places(const RoutingPlan& plan, int64_t s, const int64_t* ids, int64_t n, int64_t K,
                    const RoutingPlaces& out);

}  // namespace dsperf::ep
