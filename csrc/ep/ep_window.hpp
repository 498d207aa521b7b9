// The shared-memory side of the window exchange (python/dsperf/ep/window.py): sequence flags that
// ranks of one node publish and wait on, and the pull-side reduction that reads BF16 rows straight
// from the peers' windows. Pure functions over caller-owned memory; the Python layer checks shapes
// and indices once at the boundary, so nothing here re-checks them.
#pragma once
#include "ep/ep_layout.hpp"

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
// rows[p]: BF16 [*, dim] of peer p, read in place (its shared-memory window). threads: OpenMP
// threads at most (0: OpenMP's default); large calls only (a parallel region costs more than a
// small call, and ranks that outnumber the cores must not fork threads that wait for a core).
void pull_weighted_sum(const bf16_t* const* rows, const int32_t* peer, const int64_t* row, const float* weights,
                       int64_t tokens, int64_t entries, int64_t dim, float* out, int threads = 0);

// Dispatch records for one destination rank, each written in one go: for i < n, record i of dst
// (rec bytes apart) gets vb value bytes from values[token[i]] (column vcol, rows value_stride bytes
// apart), sb scale bytes from scales[token[i]] at column scol (rows scale_stride apart) placed at
// sc_col, then top_k int32 ids at id_col: ids[token[i], k] - dest * local_experts where that expert
// lives on dest, else -1, then the top_k FP32 weights (zeros when weights is null).
void write_records(const uint8_t* values, int64_t value_stride, int64_t vcol, int64_t vb, const uint8_t* scales,
                   int64_t scale_stride, int64_t scol, int64_t sb, const int64_t* token, int64_t n, const int64_t* ids,
                   const float* weights, int64_t top_k, int64_t dest, int64_t local_experts, uint8_t* dst, int64_t rec,
                   int64_t sc_col, int64_t id_col);


// ---- The per-call planning of a window dispatch, in one pass each (no Python loops) -------------

// The counts a dispatch publishes, from ids [n, K] (global experts): out[0:W) tokens sent to each
// rank (a token once per rank holding any of its experts), out[W:W+E) pairs sent to each expert,
// out[W+E:W+E+nodes) tokens sent to each node (node[W]: each rank's node). Returns 0, 1 (an id
// outside [0, E): nothing counted past it) or 2 (an expert repeated within a token).
int dispatch_counts(const int64_t* ids, int64_t n, int64_t K, int64_t E, int64_t W, int64_t local_experts,
                    const int64_t* node, int64_t nodes, int64_t* out);

// What a dispatch's result and handle need, from the agreed count rows (rows [W, stride]: tokens
// source -> dest at columns [0, W), pairs source -> expert at [W, W + E)). out [6 W + E_loc]:
// n_recv[W] (records each rank receives), pair_rows[W] (rows of each rank's per-expert or masked
// layout), send_counts[W] = tokens me -> d, recv_counts[W] = tokens s -> me, pair_send[W] = pairs
// me -> d, pair_recv[W] = pairs s -> me, expert_counts[E_loc] = pairs into each of me's experts.
void window_plan(const int64_t* rows, int64_t stride, int64_t W, int64_t local_experts, EpLayout layout,
                 int64_t cap, int64_t me, int64_t* out);

// Source s's tokens (payload rows values/scales, rows vstride/sstride bytes apart; global expert
// ids [n, K]; weights [n, K] or null) written into the windows of the destination ranks of this
// node (dst[local_of[d]]: rank d's receive segment; local_of[d] < 0: another node, not written),
// each row once at its final place: records (token layout: values | pad | scales | K local ids |
// K weights, rec bytes) or rows of the per-expert / masked layout (values rows, then the scale rows
// from the 64-byte-rounded end of the values). The places follow from the agreed rows alone (source
// blocks in rank order, tokens ascending). Fills, for every token i: tok_peer[i, d] = d and
// tok_row[i, d] its record row at d, or -1 and -1 where no expert of i lives on d; pair_peer[i, k]
// = the rank of expert ids[i, k] and pair_row[i, k] its row in that rank's pair rows. Returns the
// bytes written. Throws std::invalid_argument, before writing anything, where a destination's
// rows would not fit its segment (dst_bytes[l] bytes). threads: as pull_weighted_sum.
int64_t window_scatter(const uint8_t* values, int64_t vstride, const uint8_t* scales, int64_t sstride,
                       const int64_t* ids, const float* weights, int64_t n, int64_t K, int64_t s, const int64_t* rows,
                       int64_t stride, int64_t W, int64_t local_experts, EpLayout layout, int64_t cap, int64_t vb,
                       int64_t sb, int64_t rec, int64_t sc_col, int64_t id_col, const int64_t* local_of,
                       uint8_t* const* dst, const int64_t* dst_bytes, int32_t* tok_peer, int64_t* tok_row,
                       int32_t* pair_peer, int64_t* pair_row, int threads = 0);

// One sync of the control window: this rank's row (len words, the rest of row_words zeroed) stored
// at word `base` of its segment ctrl[me], the sequence number seq published at word 0 (release),
// every segment's flag awaited (acquire; bounded as flags_wait), then every rank's row copied into
// out [n, row_words]. Returns the index of a rank that did not arrive within timeout_s, else -2
// where some rank's first same_words words differ from this rank's row (a verdict, call or value
// to look at), else -1.
int64_t ctrl_sync(int64_t* const* ctrl, int64_t n, int64_t me, int64_t seq, int64_t base, const int64_t* row,
                  int64_t len, int64_t row_words, double timeout_s, double spin_s, int64_t* out,
                  int64_t same_words = 0);

}  // namespace dsperf::ep
