// The efficiency curves (a family's rows grouped by their keys, read along the primary axis: times
// interpolated across rows and groups, capped by every larger row) and KernelTables' lookups for
// compute and communication calls. What each family is (its work, axis and keys) is in
// table_families.cpp.
#include "grounded/kernel_table.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace dsperf {

namespace {
double safe_log(double x) { return std::log(std::max(x, 1e-30)); }

// A slot of a per-thread memo for a pointer and a key of doubles. Every bit of every double must
// reach the slot bits: call shapes differ in their high (exponent and leading mantissa) bits, which
// a multiply alone carries only upward and out of a small table's index. So each double's high half
// is folded onto its low half before its multiply, and splitmix64's finaliser spreads the sum's
// bits down to the index. The products are independent of each other (a mix chained through every
// key serialised the hash; the memo's probe is among the largest shares of the explorer's sweep).
size_t memo_slot(const void* owner, const double* key, int n, size_t slots) {
    uint64_t h = reinterpret_cast<uintptr_t>(owner) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; ++i) {
        uint64_t bits;
        std::memcpy(&bits, &key[i], sizeof bits);
        h += (bits ^ (bits >> 29)) * (0x9E3779B97F4A7C15ull + 2 * 0xD6E8FEB86659FD93ull * uint64_t(i + 1));
    }
    h ^= h >> 30, h *= 0xBF58476D1CE4E5B9ull;  // splitmix64's finaliser
    h ^= h >> 27, h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return size_t(h % slots);
}
}  // namespace

uint64_t EfficiencyCurve::next_generation() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
}

void EfficiencyCurve::add(const TableKeys& keys, double primary, double value) {
    generation_ = next_generation();
    TableKeys lk;
    lk.n = keys.n;
    for (int i = 0; i < keys.n; ++i) lk.v[i] = safe_log(keys.v[i]);
    auto same = [&](const Group& g) {
        if (g.log_keys.n != lk.n) return false;
        for (int i = 0; i < lk.n; ++i)
            if (g.log_keys.v[i] != lk.v[i]) return false;
        return true;
    };
    auto g = std::find_if(groups_.begin(), groups_.end(), same);
    if (g == groups_.end()) g = groups_.insert(groups_.end(), Group{lk, keys, {}, {}});
    const Point p{safe_log(primary), primary, value};
    g->points.insert(std::upper_bound(g->points.begin(), g->points.end(), p,
                                      [](const Point& a, const Point& b) { return a.log_x < b.log_x; }),
                     p);
    g->best_from.assign(g->points.size(), 0.0);
    for (size_t i = g->points.size(); i-- > 0;)
        g->best_from[i] = std::max(g->points[i].value, i + 1 < g->points.size() ? g->best_from[i + 1] : 0.0);
}

size_t EfficiencyCurve::rows() const {
    size_t n = 0;
    for (const auto& g : groups_) n += g.points.size();
    return n;
}

const EfficiencyCurve::Group* EfficiencyCurve::nearest_group(const TableKeys& keys, bool other_axes) const {
    // The explorer asks for the same keys of the same curve again and again (only the primary
    // axis changes with the batch): remember recent answers per thread, keyed by curve and keys.
    // The answer is the group's index, never its address: a copy of a curve keeps its generation,
    // and a copy made where a destroyed one lived would otherwise be handed a pointer into the
    // destroyed copy's rows (a crash seen on an H200 host, measure-gpu's step comparison).
    struct Entry {
        const EfficiencyCurve* curve = nullptr;
        uint64_t generation = 0;
        double v[3];
        int n;
        bool other_axes;
        size_t group;
    };
    constexpr size_t kSlots = 256;
    thread_local Entry cache[kSlots];
    Entry& e = cache[memo_slot(this, keys.v, keys.n, kSlots)];
    if (e.curve == this && e.generation == generation_ && e.n == keys.n && e.other_axes == other_axes &&
        std::equal(e.v, e.v + keys.n, keys.v))
        return &groups_[e.group];
    double lk[3];
    for (int i = 0; i < keys.n; ++i) lk[i] = safe_log(keys.v[i]);
    // The first group unless a nearer one is found: a key the distances cannot order (NaN, an
    // infinity) still gets a group, never a null one (every caller has checked groups_ is not empty).
    if (groups_.empty()) return nullptr;
    const Group* best = &groups_.front();
    double best_d = std::numeric_limits<double>::infinity();
    for (const auto& g : groups_) {
        double d = 0;
        for (int i = other_axes ? 1 : 0; i < g.log_keys.n && i < keys.n; ++i) {
            const double diff = g.log_keys.v[i] - lk[i];
            d += diff * diff;
        }
        if (d < best_d) best_d = d, best = &g;
    }
    e.curve = this, e.generation = generation_, e.n = keys.n, e.other_axes = other_axes;
    e.group = size_t(best - groups_.data());
    std::copy(keys.v, keys.v + keys.n, e.v);
    return best;
}

TableLookup EfficiencyCurve::at(const TableKeys& keys, double primary) const {
    TableLookup r;
    if (groups_.empty()) return r;
    // The group nearest in log space over the secondary axes.
    const Group* best = nearest_group(keys);
    const auto& pts = best->points;
    const double x = safe_log(primary);
    r.found = true;
    if (x <= pts.front().log_x || pts.size() == 1) {
        r.value = pts.front().value;
        r.clamped = x < pts.front().log_x - 1e-9 || (pts.size() == 1 && x > pts.front().log_x + 1e-9);
        return r;
    }
    if (x >= pts.back().log_x) {
        r.value = pts.back().value;
        r.clamped = x > pts.back().log_x + 1e-9;
        return r;
    }
    const auto hi = std::upper_bound(pts.begin(), pts.end(), x, [](double v, const Point& p) { return v < p.log_x; });
    const auto lo = hi - 1;
    const double t = (x - lo->log_x) / (hi->log_x - lo->log_x);
    r.value = lo->value + t * (hi->value - lo->value);
    return r;
}

namespace {
// `s` with its primary axis set to x (and, for the attention core, its batch set so that its one
// secondary axis is key, key > 0): the shape a table row of that group and point stands for.
KernelShape with_axes(TableFamily f, KernelShape s, double x, double key) {
    switch (f) {
        case TableFamily::kMlaDecode:
            s.kv_len = x;
            if (key > 0 && s.q_len * s.heads > 0) s.batch = key * 128 / (s.q_len * s.heads);
            break;
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
        case TableFamily::kGroupedFp4:
            s.m = x;
            if (key > 0) s.groups = key;
            break;
        case TableFamily::kElementwise:
            s.bytes = x;
            break;
        default:
            s.m = x;
            break;
    }
    return s;
}

// Where r lies between r0 and r1 (0 .. 1); where the two roofline times are equal (a shape whose
// work does not change along the axis), where log x lies between log x0 and log x1.
double position(double r, double r0, double r1, double lx, double lx0, double lx1) {
    if (r1 > r0) return std::clamp((r - r0) / (r1 - r0), 0.0, 1.0);
    return lx1 > lx0 ? std::clamp((lx - lx0) / (lx1 - lx0), 0.0, 1.0) : 0.0;
}
}  // namespace

bool EfficiencyCurve::outside_rows(const Group& g, double log_primary) {
    const auto& pts = g.points;
    if (log_primary <= pts.front().log_x || pts.size() == 1 || log_primary >= pts.back().log_x) {
        const Point& p = log_primary >= pts.back().log_x ? pts.back() : pts.front();
        return std::abs(log_primary - p.log_x) > 1e-9;
    }
    return false;
}

double EfficiencyCurve::floor_primary(const Group& g, double primary) {
    const auto& pts = g.points;
    const double x = safe_log(primary);
    if (x <= pts.front().log_x) return primary;
    // At or past the last row, the capping scan may read that row a hair below the primary.
    if (x >= pts.back().log_x) return std::min(primary, pts.back().x);
    const auto hi = std::upper_bound(pts.begin(), pts.end(), x, [](double v, const Point& q) { return v < q.log_x; });
    return (hi - 1)->x;
}

template <class RowTime, class MeasuredRoof>
double EfficiencyCurve::group_time(const Group& g, double primary, double key, const RowTime& row_time,
                                   const MeasuredRoof& measured_roof, bool* clamped) const {
    const auto& pts = g.points;
    const double x = safe_log(primary);
    double t;
    if (x <= pts.front().log_x || pts.size() == 1 || x >= pts.back().log_x) {
        // Outside the rows (or on one): the end row's efficiency at the call's own shape.
        const Point& p = x >= pts.back().log_x ? pts.back() : pts.front();
        *clamped |= outside_rows(g, x);
        t = row_time(primary, key, p.value);
    } else {
        const auto hi = std::upper_bound(pts.begin(), pts.end(), x, [](double v, const Point& q) { return v < q.log_x; });
        const auto lo = hi - 1;
        const double w = position(measured_roof(primary, key), measured_roof(lo->x, key), measured_roof(hi->x, key),
                                  x, lo->log_x, hi->log_x);
        t = (1 - w) * row_time(lo->x, key, lo->value) + w * row_time(hi->x, key, hi->value);
    }
    // No more than any larger row of the group takes: a smaller call can always run padded to a
    // larger measured shape, so a row measured faster than a smaller one (noise, another kernel
    // configuration) caps the smaller shapes instead of making more work cheaper.
    // Read in ascending order: a row's roofline time grows with its primary and no later row is
    // more efficient than best_from, so once roof / best_from reaches t no later row goes below it
    // (the answer is the same minimum the whole scan gives).
    const auto first = std::lower_bound(pts.begin(), pts.end(), x - 1e-12,
                                        [](const Point& q, double v) { return q.log_x < v; });
    for (auto p = first; p != pts.end(); ++p) {
        const double roof = row_time(p->x, key, 1.0);
        if (roof / g.best_from[size_t(p - pts.begin())] >= t) break;
        t = std::min(t, roof / p->value);
    }
    return t;
}

template <class RowTime, class MeasuredRoof>
double EfficiencyCurve::time(const TableKeys& keys, double primary, bool across_first_key, const RowTime& row_time,
                             const MeasuredRoof& measured_roof, bool* clamped) const {
    // Across the first key, the other axes choose the groups (a grouped GEMM's n and k, nearest
    // whatever its expert count: a narrow width's few timed expert counts must not send a call to
    // another width's rows), and the first key is then interpolated among them.
    const Group* near = nearest_group(keys, across_first_key);
    if (!across_first_key || keys.n == 0) return group_time(*near, primary, 0, row_time, measured_roof, clamped);
    // The groups that share the nearest group's other axes (a grouped GEMM's n and k); among them
    // the two around the first axis (experts; the attention core's query rows), blended by
    // roofline time on the measured device, and no more than any group above takes (padded to it).
    const double lk = safe_log(keys.v[0]);
    const Group *below = nullptr, *above = nullptr;
    double ceiling = std::numeric_limits<double>::infinity();
    for (const auto& g : groups_) {
        bool same = g.log_keys.n == near->log_keys.n;
        for (int i = 1; same && i < g.log_keys.n; ++i) same = g.log_keys.v[i] == near->log_keys.v[i];
        if (!same) continue;
        const double gk = g.log_keys.v[0];
        if (gk <= lk && (!below || gk > below->log_keys.v[0])) below = &g;
        if (gk >= lk) {
            // A group's time is at least the roofline time of its nearest row at or below the
            // primary (the primary itself outside the rows) over the group's best efficiency: a
            // group that cannot go below the ceiling is not priced (its clamping is still
            // reported, as pricing it would).
            if (row_time(floor_primary(g, primary), g.keys.v[0], 1.0) / g.best_from.front() < ceiling)
                ceiling = std::min(ceiling, group_time(g, primary, g.keys.v[0], row_time, measured_roof, clamped));
            else
                *clamped |= outside_rows(g, safe_log(primary));
            if (!above || gk < above->log_keys.v[0]) above = &g;
        }
    }
    if (!above) return group_time(*below, primary, 0, row_time, measured_roof, clamped);  // above every group
    if (!below || below == above) return std::min(ceiling, group_time(*above, primary, 0, row_time, measured_roof, clamped));
    const double k0 = below->keys.v[0], k1 = above->keys.v[0];
    const double t0 = group_time(*below, primary, k0, row_time, measured_roof, clamped);
    const double t1 = group_time(*above, primary, k1, row_time, measured_roof, clamped);
    const double w = position(measured_roof(primary, 0), measured_roof(primary, k0), measured_roof(primary, k1), lk,
                              below->log_keys.v[0], above->log_keys.v[0]);
    return std::min(ceiling, (1 - w) * t0 + w * t1);
}

void KernelTables::add_latency(TableFamily family, const KernelShape& shape, double latency_us,
                               const DeviceSpec& measured_on) {
    if (is_comm_family(family))
        throw std::invalid_argument("family '" + table_family_names()[int(family)] +
                                    "' takes a bandwidth (gbps), not a latency");
    if (!(latency_us >= kMinLatencyUs && latency_us <= kMaxLatencyUs))
        throw std::invalid_argument("latency_us must lie in [1e-3, 1e9]");
    if (!has_measured_on_) measured_on_ = measured_on, has_measured_on_ = true;
    const double eff = datasheet_roofline_s(table_work(family, shape), measured_on) / (latency_us * 1e-6);
    curves_[int(family)].add(table_keys(family, shape), table_primary(family, shape), eff);
}

namespace {
// A measured rate of a communication row, checked: inside the tables' bounds, at an EP (TP) >= 1.
void check_rate(double axis, double gbps) {
    if (!(gbps >= kMinTableGbps && gbps <= kMaxTableGbps)) throw std::invalid_argument("gbps must lie in [1e-3, 1e9]");
    if (!(axis >= 1)) throw std::invalid_argument("ep / tp must be >= 1");
}

// A communication family's rate at the shape's EP (TP) from one curve; the default where it has no row.
TableLookup comm_lookup(const EfficiencyCurve& curve, TableFamily family, const KernelShape& shape, double fallback) {
    TableLookup r = curve.at(table_keys(family, shape), table_primary(family, shape));
    if (!r.found) r.value = fallback;
    return r;
}
}  // namespace

void KernelTables::add_bandwidth(TableFamily family, double axis, double gbps) {
    if (!is_comm_family(family))
        throw std::invalid_argument("family '" + table_family_names()[int(family)] +
                                    "' takes a latency (latency_us), not a bandwidth");
    check_rate(axis, gbps);
    curves_[int(family)].add({}, axis, gbps);
}

void KernelTables::add_domain_bandwidth(TableFamily family, double ep, double gbps) {
    if (!is_comm_family(family) || family == TableFamily::kAllReduce)
        throw std::invalid_argument("family '" + table_family_names()[int(family)] +
                                    "': a scale-up domain's rows are dispatch or combine kernels");
    check_rate(ep, gbps);
    domain_curves_[int(family)].add({}, ep, gbps);
}

TableLookup KernelTables::lookup_domain(TableFamily family, const KernelShape& shape) const {
    return comm_lookup(domain_curves_[int(family)], family, shape, default_efficiency);
}

TableLookup KernelTables::lookup(TableFamily family, const KernelShape& shape, const DeviceSpec* priced_on,
                                 double clock_ratio, CallWork* work) const {
    TableLookup r;
    r.value = default_efficiency;
    const EfficiencyCurve& curve = curves_[int(family)];
    if (is_comm_family(family)) return comm_lookup(curve, family, shape, default_efficiency);
    const DeviceSpec& priced = priced_on ? *priced_on : measured_on_;
    const double priced_clock_key = priced_on ? clock_ratio : 1.0;
    const auto fill_work = [&](CallWork* w) {
        if (!w) return;
        w->work = table_work(family, shape);
        w->roofline_s = datasheet_roofline_s(w->work, priced, priced_clock_key);
    };
    // An attention call with FP8 math reads the same rows as one with BF16 math: each row is a fraction
    // of its own roofline (a row timed with FP8 math, `math = fp8` in its table, of the FP8 one), and
    // the call is assumed to reach that fraction of its own (docs/GROUNDED_MODEL.md, "FP8 attention math").
    if (curve.empty()) {
        fill_work(work);
        return r;
    }
    // The explorer prices the same call on the same device again and again (a layout's calls do
    // not all change with the batch, the overlap or the KV format): remember recent answers per
    // thread, keyed by everything the answer reads (the curve and its generation, the shape, and
    // the priced device's peaks, bandwidth and clock), with the call's work.
    const double key[] = {double(int(family)), shape.m, shape.n, shape.k, shape.groups, shape.batch, shape.kv_len,
                          shape.heads, shape.q_len, shape.bytes, shape.ep, shape.tp, double(shape.fp8),
                          double(shape.fp8_math), priced.fp16_tflops, priced.fp8_tflops, priced.fp4_tflops,
                          priced.mem_bw_gbps, priced_clock_key};
    constexpr size_t kKey = sizeof key / sizeof key[0];
    struct Memo {
        const EfficiencyCurve* curve = nullptr;
        uint64_t generation = 0;
        double key[kKey];
        TableLookup result;
        CallWork work;
    };
    constexpr size_t kSlots = 8192;  // 1.8 MB a pricing thread; 4096 left the explorer's sweep 7% slower
    thread_local Memo memo[kSlots];
    Memo& slot = memo[memo_slot(&curve, key, int(kKey), kSlots)];
    if (slot.curve == &curve && slot.generation == curve.generation() && std::memcmp(slot.key, key, sizeof key) == 0) {
        if (work) *work = slot.work;
        return slot.result;
    }
    r = price_from_rows(family, shape, priced_on, clock_ratio);
    slot.curve = &curve, slot.generation = curve.generation(), slot.result = r;
    fill_work(&slot.work);
    std::memcpy(slot.key, key, sizeof key);
    if (work) *work = slot.work;
    return r;
}

namespace {
// A grouped GEMM at an expert width n its rows were not timed at (experts split over moe_tp GPUs:
// the up projection's n = 2 x 2,048 / moe_tp against rows timed whole, at 4,096) is priced at the
// rows' width with its experts scaled by n / n_rows: the same weights, FLOPs and output tiles, since
// a grouped kernel tiles each expert's n. So 9 experts at n = 512 run as 1.125 experts at 4,096 do,
// not as 9 experts at 4,096, which give the SMs eight times the tiles: a grouped kernel's rate
// rises with its tiles until they fill the GPU (DeepGEMM's masked rows on H800: 1.4 TB/s of
// weights for one expert at 128 rows, 2.3 TB/s for 8 at 64, 2.9 TB/s for 64 at 32). The keys are
// (groups, n, k); k is left as it is (a narrower k shortens each tile, not their count). The rows'
// width is the one nearest in (n, k) whatever the call's expert count, the width the lookup then
// reads (EfficiencyCurve::time chooses its groups by the same axes).
KernelShape grouped_at_row_width(TableFamily f, const EfficiencyCurve& curve, const TableKeys& keys,
                                 const KernelShape& shape) {
    const bool grouped = f == TableFamily::kGroupedContiguous || f == TableFamily::kGroupedMasked ||
                         f == TableFamily::kGroupedFp4;
    if (!grouped || curve.empty() || !(shape.n > 0)) return shape;
    const double row_n = curve.nearest_keys(keys, true).v[1];
    if (!(row_n > 0) || row_n == shape.n) return shape;
    KernelShape at_row = shape;
    at_row.groups = shape.groups * shape.n / row_n;
    at_row.n = row_n;
    return at_row;
}
}  // namespace

TableLookup KernelTables::price_from_rows(TableFamily family, const KernelShape& shape, const DeviceSpec* priced_on,
                                          double clock_ratio) const {
    TableLookup r;
    const EfficiencyCurve& curve = curves_[int(family)];
    // Across groups along the first secondary axis where it grows with the work: the attention
    // core's query rows and a grouped GEMM's experts (a GEMM's n and k are the model's, fixed).
    const bool across = family == TableFamily::kMlaDecode || family == TableFamily::kGroupedContiguous ||
                        family == TableFamily::kGroupedMasked || family == TableFamily::kGroupedFp4;
    const TableKeys keys = table_keys(family, shape);
    const double primary = table_primary(family, shape);
    // The time is a blend of the rows' times on the priced device, with weights from the rows'
    // roofline times on the device they were measured on. The weights do not depend on the priced
    // device, so a slower part never prices a call faster; they grow with the work, so a call with
    // more work gets more of the larger row's time.
    const DeviceSpec& d = priced_on ? *priced_on : measured_on_;
    const double priced_clock = priced_on ? clock_ratio : 1.0;
    const auto time_of = [&](const KernelShape& call, bool* clamped) {
        const auto row_time = [&](double x, double key, double value) {
            return datasheet_roofline_s(table_work(family, with_axes(family, call, x, key)), d, priced_clock) / value;
        };
        const auto measured_roof = [&](double x, double key) {
            return datasheet_roofline_s(table_work(family, with_axes(family, call, x, key)), measured_on_);
        };
        return curve.time(table_keys(family, call), table_primary(family, call), across, row_time, measured_roof,
                          clamped);
    };
    bool clamped = false;
    double time = time_of(grouped_at_row_width(family, curve, keys, shape), &clamped);
    // Fewer query rows per cached key than a 128-head request (a TP-split core: 16 heads a GPU) can
    // always run padded to 128 (FlashMLA-style kernels tile 64 query rows anyway), so such a call
    // costs no more than the same requests at 128 rows per key. Without this cap a few requests
    // at 16 heads took the efficiency of fewer 128-head requests (the rows are keyed by query rows,
    // in 128-head requests), a row whose time is mostly fixed cost, over all their cache: 4
    // requests at 16 heads were priced 2.6x (H800) and 3.7x (MI355X) the same 4 at 128 heads.
    if (family == TableFamily::kMlaDecode && shape.q_len > 0 && shape.q_len * shape.heads < 128) {
        KernelShape padded = shape;
        padded.heads = 128 / shape.q_len;
        bool padded_clamped = false;
        const double t = time_of(padded, &padded_clamped);
        if (t < time) time = t, clamped = padded_clamped;
    }
    const double rq = datasheet_roofline_s(table_work(family, shape), d, priced_clock);
    r.found = true, r.clamped = clamped;
    // A call with no work has no time to price: the efficiency is moot, the nearest row's serves.
    r.value = rq > 0 && time > 0 ? rq / time : curve.at(keys, primary).value;
    return r;
}

}  // namespace dsperf
