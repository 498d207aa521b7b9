// The shared-memory side of the window exchange (python/dsperf/ep/window.py): sequence flags that
// ranks of one node publish and wait on, and the pull-side reduction that reads BF16 rows straight
// from the peers' windows, and the per-call planning and scatter of a window dispatch, which read
// where rows land from the routing plan (ep_plan.hpp, shared with the transport exchanges). Pure
// functions over caller-owned memory; the Python layer checks shapes and indices once at the
// boundary, so nothing here re-checks them.
#pragma once
#include "ep/ep_layout.hpp"
#include "ep/ep_plan.hpp"

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

// ---- The per-call planning of a window dispatch, in one pass each (no Python loops) -------------

// The counts a dispatch publishes, from ids [n, K] (global experts): out[0:W) tokens sent to each
// rank (a token once per rank holding any of its experts), out[W:W+E) pairs sent to each expert,
// out[W+E:W+E+nodes) tokens sent to each node (node[W]: each rank's node). Returns 0, 1 (an id
// outside [0, E): nothing counted past it) or 2 (an expert repeated within a token).
int dispatch_counts(const int64_t* ids, int64_t n, int64_t K, int64_t E, int64_t W, int64_t local_experts,
                    const int64_t* node, int64_t nodes, int64_t* out);

// What a dispatch's result and handle need, from the agreed count rows (rows [W, stride]: tokens
// source -> dest at columns [0, W), pairs source -> expert at [W, W + E); n_recv and pair_rows as
// routing_plan gives them). out [6 W + E_loc]:
// n_recv[W] (records each rank receives), pair_rows[W] (rows of each rank's per-expert or masked
// layout), send_counts[W] = tokens me -> d, recv_counts[W] = tokens s -> me, pair_send[W] = pairs
// me -> d, pair_recv[W] = pairs s -> me, expert_counts[E_loc] = pairs into each of me's experts.
void window_plan(const int64_t* rows, int64_t stride, int64_t W, int64_t local_experts, EpLayout layout,
                 int64_t cap, int64_t me, int64_t* out);

// How a dispatch's rows are laid out in bytes (python/dsperf/ep/plan.py's RowFormat): vb value
// bytes and sb scale bytes per row; a token-layout record is rec bytes: values | pad | scales at
// sc_col | K int32 local ids at id_col | K FP32 weights.
struct RowFormat {
    int64_t vb = 0, sb = 0, rec = 0, sc_col = 0, id_col = 0;
};

// One source rank's tokens: payload rows (values, and scales or null; rows vstride / sstride bytes
// apart), global expert ids [n, K] and weights [n, K] or null; s: the source's rank.
struct ScatterSource {
    const uint8_t* values = nullptr;
    int64_t vstride = 0;
    const uint8_t* scales = nullptr;
    int64_t sstride = 0;
    const int64_t* ids = nullptr;
    const float* weights = nullptr;
    int64_t n = 0, K = 0, s = 0;
};

// Where they land: the agreed count rows [W, stride] (tokens source -> dest at [0, W), pairs
// source -> expert at [W, W + E)), the layout and the masked layout's rows per expert, the row
// format, and this node's windows: dst[local_of[d]] is rank d's receive segment, dst_bytes[l] bytes
// long (local_of[d] < 0: another node, not written).
struct ScatterPlan {
    const int64_t* rows = nullptr;
    int64_t stride = 0, W = 0, local_experts = 0;
    EpLayout layout = EpLayout::kToken;
    int64_t cap = 0;
    RowFormat fmt;
    const int64_t* local_of = nullptr;
    uint8_t* const* dst = nullptr;
    const int64_t* dst_bytes = nullptr;
};

// The source's tokens written into the windows of the destination ranks of this node, each row
// once at its final place: records (token layout) or rows of the per-expert / masked layout (values
// rows, then the scale rows from the 64-byte-rounded end of the values). The places follow from the
// agreed rows alone (routing_plan, then routing_places: source blocks in rank order, tokens
// ascending), and out gets them (tok_peer/tok_row [n, W], pair_peer/pair_row [n, K], as
// routing_places fills them). Returns the bytes written. Throws std::invalid_argument, before writing anything,
// where a destination's rows would not fit its segment. threads: as pull_weighted_sum.
int64_t window_scatter(const ScatterSource& src, const ScatterPlan& plan, const RoutingPlaces& out, int threads = 0);

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
