// The busiest rank of an expert-parallel group, as a multiple of the mean load (docs/GROUNDED_MODEL.md,
// "The busiest rank").
#pragma once

#include "model/model_config.hpp"

namespace dsperf {

// The range routing_skew is defined over for callers outside the step model (which passes at most
// its EP bound of ranks and a routing_dispersion of a few). Beyond them the sum runs for a very
// long time: at a dispersion above about 1e16 the negative binomial's tail ratio rounds to 1 and
// the sum never stops. A token's rows on one set vary by at most the rows it sends, so a dispersion
// of 1,000 is far above any model's; 2^20 ranks far above any EP group.
constexpr double kMaxSkewRanks = 1 << 20;
constexpr double kMaxSkewDispersion = 1000;

// A MoE layer's step waits for its busiest rank: dispatch, the experts and combine run in lock step
// over the EP group. With `ranks` distinct expert sets and a mean of `mean_rows` routed (token, expert)
// rows per set, routing balanced in expectation (as EPLB aims at), a set's load is taken as Poisson
// (dispersion 1: each row's set drawn independently) or, where a token's rows cluster on few sets
// (dispersion > 1: variance over mean), negative binomial with that variance; the busiest of `ranks`
// such loads has the expectation
//     E[max] = sum over m >= 0 of (1 - F(m)^ranks),  F the load's distribution function.
// Returns E[max] / mean_rows (1 for one set; `ranks` as the mean goes to 0, where at most one set gets a row): 2.6 at one row per set over 8 sets, 1.5 at 8 rows over
// 8, 1.4 at 8 rows over 4, 1.1 at 512 rows over 128 (dispersion 1). The sets are taken as independent
// (their loads sum to the step's rows, which pulls the busiest one down a little).
double routing_skew(double mean_rows, double ranks, double dispersion = 1.0);

// The variance over the mean of one token's routed rows on one expert set, where the routed experts
// lie in contiguous blocks of n_routed_experts / ranks and no redundant experts move them (EPLB's
// placement spreads a group's experts: then, and wherever a set is not whole groups or a whole share
// of one, 1): a token picks n_limited_groups of n_expert_groups groups, then n_activated_experts
// distinct experts among them, so its rows land on few sets. 1.71 for DeepSeek-V3 over 8 sets (one
// group each: a token reaches 4 of them), 1.46 over 4, 1.0 over 128. Never below 1 (the Poisson form).
double routing_dispersion(const ModelConfig& m, double ranks, int redundant_experts);

// The chance that `draws` distinct picks among `total` items (a token's experts, its expert groups)
// take none of `held` of them: C(total - held, draws) / C(total, draws). What a rank, a node or an
// expert group misses of a token's top-k, which sets how many of them the token reaches.
double chance_none_drawn(double total, double held, int64_t draws);

}  // namespace dsperf
