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

// Waits until *flags[i] >= target for every i < n (acquire loads), spinning for spin_s seconds and
// then yielding the core on every round (ranks may outnumber cores). Returns -1 when all arrived,
// else the index of a flag still below target once timeout_s has passed.
int64_t flags_wait(int64_t* const* flags, int64_t n, int64_t target, double timeout_s, double spin_s);

// out[t] = sum over m < entries, in order, of weights[t, m] * f32(rows[peer[t, m]][row[t, m]]);
// entries with peer < 0 are skipped (zero rows where none is left). weights null: all 1.
// rows[p]: BF16 [*, dim] of peer p, read in place (its shared-memory window).
void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out);

// Dispatch records for one destination rank, each written in one go: for i < n, record i of dst
// (rec bytes apart) gets vb value bytes from values[token[i]] (column vcol, rows value_stride bytes
// apart), sb scale bytes from scales[token[i]] at column scol (rows scale_stride apart) placed at
// sc_col, then top_k int32 ids at id_col: ids[token[i], k] - dest * local_experts where that expert
// lives on dest, else -1, then the top_k FP32 weights (zeros when weights is null).
void write_records(const uint8_t* values, int64_t value_stride, int64_t vcol, int64_t vb, const uint8_t* scales,
                   int64_t scale_stride, int64_t scol, int64_t sb, const int64_t* token, int64_t n, const int64_t* ids,
                   const float* weights, int64_t top_k, int64_t dest, int64_t local_experts, uint8_t* dst, int64_t rec,
                   int64_t sc_col, int64_t id_col);

}  // namespace dsperf::ep
