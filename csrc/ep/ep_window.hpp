// The shared-memory side of the window exchange (python/dsperf/ep/window.py): sequence flags that
// ranks of one node publish and wait on, and the pull-side reduction that reads BF16 rows straight
// from the peers' windows. Pure functions over caller-owned memory; the Python layer checks shapes
// and indices once at the boundary, so nothing here re-checks them.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.hpp"

namespace dsperf::ep {

using dsperf::kernels::bf16_t;

// *flag = value with release order: every store this thread made before is visible to a rank that
// reads the value with flags_wait (acquire).
void flag_publish(int64_t* flag, int64_t value);

// Waits until *flags[i] >= target for every i < n (acquire loads), spinning briefly and then
// yielding the core (ranks may outnumber cores). Returns -1 when all arrived, else the index of a
// flag still below target once timeout_s has passed.
int64_t flags_wait(int64_t* const* flags, int64_t n, int64_t target, double timeout_s);

// out[t] = sum over m < entries, in order, of weights[t, m] * f32(rows[peer[t, m]][row[t, m]]);
// entries with peer < 0 are skipped (zero rows where none is left). weights null: all 1.
// rows[p]: BF16 [*, dim] of peer p, read in place (its shared-memory window).
void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out);

}  // namespace dsperf::ep
