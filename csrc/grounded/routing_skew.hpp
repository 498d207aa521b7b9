// The busiest rank of an expert-parallel group, as a multiple of the mean load (docs/GROUNDED_MODEL.md,
// "The busiest rank").
#pragma once

namespace dsperf {

// A MoE layer's step waits for its busiest rank: dispatch, the experts and combine run in lock step
// over the EP group. With `ranks` distinct expert sets and a mean of `mean_rows` routed (token, expert)
// rows per rank, each row's rank drawn independently and uniformly (routing balanced in expectation,
// as EPLB aims at), a rank's load is Poisson(mean_rows) in the limit of many ranks, and the busiest of
// `ranks` such loads has the expectation
//     E[max] = sum over m >= 0 of (1 - F(m)^ranks),  F the Poisson distribution function.
// Returns E[max] / mean_rows (1 for one rank): 2.6 at one row per rank over 8 ranks, 1.5 at 8 rows over
// 8, 1.4 at 8 rows over 4, 1.1 at 512 rows over 128. Independent rows make it a lower bound: a DeepSeek-V3 token's 8 experts
// are distinct and lie in 4 of its 8 expert groups, which clusters its rows on fewer ranks.
double routing_skew(double mean_rows, double ranks);

}  // namespace dsperf
