#include "grounded/explore.hpp"

#include "common/require.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace dsperf {

namespace {
// rows = a x b x ..., refusing a product that overflows or exceeds what the caller could hold.
size_t checked_product(std::initializer_list<size_t> sizes) {
    constexpr size_t kMaxRows = size_t(1) << 34;
    size_t n = 1;
    for (size_t s : sizes) {
        if (s != 0 && n > kMaxRows / s) throw std::invalid_argument("grid: more than 2^34 points");
        n *= s;
    }
    return n;
}
}  // namespace

size_t ExploreGrid::size() const {
    return checked_product({devices.size(), ep.size(), attn_tp.size(), mtp.size(), kv_fp8.size(), overlap.size(),
                            batch.size()});
}

void ExploreGrid::validate(const ModelConfig& m) const {
    m.validate();
    require(!devices.empty() && tables.size() == devices.size(), "devices: at least one, each with its tables");
    for (const auto& d : devices) d.validate();
    for (const auto* t : tables) require(t != nullptr, "devices: a device without tables");
    require(!ep.empty() && ep.size() == redundant_experts.size(), "ep: at least one, paired with redundant_experts");
    for (size_t i = 0; i < ep.size(); ++i) {
        require(ep[i] >= 1 && ep[i] <= 4096, "ep values must lie in [1, 4096]");
        require(redundant_experts[i] >= 0 && redundant_experts[i] <= 4096, "redundant_experts must lie in [0, 4096]");
    }
    require(!attn_tp.empty(), "attn_tp must not be empty");
    for (int tp : attn_tp) require(tp >= 1 && tp <= 64, "attn_tp values must lie in [1, 64]");
    require(!mtp.empty() && mtp.size() == mtp_accepted.size(), "mtp: at least one, paired with mtp_accepted");
    for (size_t i = 0; i < mtp.size(); ++i) {
        require(mtp[i] >= 0 && mtp[i] <= 8, "mtp values must lie in [0, 8]");
        require(mtp_accepted[i] >= 0 && mtp_accepted[i] <= mtp[i], "mtp_accepted must lie in [0, mtp]");
    }
    require(!kv_fp8.empty(), "kv_fp8 must not be empty");
    require(!overlap.empty(), "overlap must not be empty");
    for (int o : overlap) require(o >= 0 && o <= 2, "overlap values must be none, two_batch or single_batch");
    require(!batch.empty(), "batch must not be empty");
    for (double b : batch) require(b > 0 && b <= 1e6, "batch values must lie in (0, 1e6]");
    require(kv_len >= 1 && kv_len <= 1e8, "kv_len must lie in [1, 1e8]");
    require(imbalance >= 1 && imbalance <= kMaxImbalance, "imbalance must lie in [1, 4096]");
    require(step_overhead_ms >= 0 && step_overhead_ms <= 1e4, "step_overhead_ms must lie in [0, 1e4]");
    require(dense_tp >= 1 && dense_tp <= 64 && m.inter_dim % dense_tp == 0,
            "dense_tp must lie in [1, 64] and divide the dense MLP");
    require(moe_tp >= 1 && moe_tp <= 64 && m.moe_inter_dim % moe_tp == 0,
            "moe_tp must lie in [1, 64] and divide the experts' intermediate");
    require(mem_fraction >= kMinMemFraction && mem_fraction <= 1,
            "mem_fraction must lie in [" + std::to_string(kMinMemFraction).substr(0, 4) + ", 1]");
    size();
}

namespace {
// The order a work unit prices its batches in: chains b, 2b, 4b, ... (each batch's doubling next
// where the grid has it). Two-batch overlap prices a batch of b as two micro-batches of b / 2,
// the calls a batch of b / 2 was just priced with, so the lookup memo (KernelTables::lookup) still
// holds them; in ascending order hundreds of batches came between and had evicted them. The order
// is cut into `spans` runs of whole chains, about equal in batches, one work unit each.
std::vector<std::vector<size_t>> batch_spans(const std::vector<double>& batch, size_t spans) {
    std::vector<size_t> by_value(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) by_value[i] = i;
    std::sort(by_value.begin(), by_value.end(), [&](size_t a, size_t b) { return batch[a] < batch[b]; });
    std::vector<std::vector<size_t>> out(1);
    std::vector<char> done(batch.size(), 0);
    const size_t per_span = (batch.size() + spans - 1) / spans;
    for (size_t i : by_value) {
        if (done[i]) continue;
        if (out.back().size() >= per_span) out.emplace_back();
        for (size_t j = i; !done[j];) {
            done[j] = 1, out.back().push_back(j);
            const auto next = std::lower_bound(by_value.begin(), by_value.end(), 2 * batch[j],
                                               [&](size_t a, double v) { return batch[a] < v; });
            if (next == by_value.end() || batch[*next] != 2 * batch[j]) break;
            j = *next;
        }
    }
    return out;
}

// The parts of one (device, mtp, batch, tp, kv) point's step that do not depend on the MoE layout
// (the attention and dense MLP stages, the LM heads), priced for its first feasible EP size and read
// by the others.
struct EpFreeOnce {
    bool priced = false;
    EpFreeParts single, two, draft;  // one micro-batch, each of two, one draft pass
};

// One batch point of one (device, ep, tp, mtp, kv) block: its rows for every overlap.
void price_point(const ModelConfig& m, const ExploreGrid& g, const ExploreColumns& out, size_t di, size_t ei,
                 size_t ti, size_t mi, size_t ki, size_t bi, bool need_single, bool need_two, EpFreeOnce& once) {
    const size_t nb = g.batch.size(), no = g.overlap.size(), nk = g.kv_fp8.size(), nm = g.mtp.size();
    const size_t nt = g.attn_tp.size(), ne = g.ep.size();
    const size_t blk = (((di * ne + ei) * nt + ti) * nm + mi) * nk + ki;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const DeviceSpec& d = g.devices[di];
    const KernelTables& t = *g.tables[di];
    Deployment dep;
    dep.phase = Phase::kDecode;
    dep.ep = g.ep[ei], dep.redundant_experts = g.redundant_experts[ei], dep.attn_tp = g.attn_tp[ti];
    dep.mtp = g.mtp[mi], dep.mtp_accepted = g.mtp_accepted[mi], dep.kv_fp8 = g.kv_fp8[ki] != 0;
    dep.kv_len = g.kv_len, dep.imbalance = g.imbalance, dep.step_overhead_ms = g.step_overhead_ms;
    static_cast<WeightFlags&>(dep) = g.weights;
    dep.dense_tp = g.dense_tp, dep.moe_tp = g.moe_tp, dep.mem_fraction = g.mem_fraction;
    dep.batch = g.batch[bi];
    const Infeasible why = layout_breach(m, d, dep);
    StepStages single, two;
    StepResult mem;
    if (why == Infeasible::kNone) {
        if (!once.priced) {
            once.draft = mtp_draft_ep_free_parts(m, d, t, dep);
            if (need_single) dep.overlap = Overlap::kNone, once.single = ep_free_parts(m, d, t, dep);
            if (need_two) dep.overlap = Overlap::kTwoBatch, once.two = ep_free_parts(m, d, t, dep);
            once.priced = true;
        }
        const double draft_ms = mtp_draft_ms(m, d, t, dep, &once.draft);
        if (need_single)
            dep.overlap = Overlap::kNone, single = step_stages(m, d, t, dep, nullptr, draft_ms, &once.single);
        if (need_two) dep.overlap = Overlap::kTwoBatch, two = step_stages(m, d, t, dep, nullptr, draft_ms, &once.two);
        memory(m, d, dep, mem);
    }
    for (size_t oi = 0; oi < no; ++oi) {
        const size_t row = blk * no * nb + oi * nb + bi;
        const Overlap ov = static_cast<Overlap>(g.overlap[oi]);
        out.device_index[row] = int32_t(di);
        out.ep[row] = dep.ep, out.redundant_experts[row] = dep.redundant_experts;
        out.attn_tp[row] = dep.attn_tp, out.mtp[row] = dep.mtp, out.mtp_accepted[row] = dep.mtp_accepted;
        out.kv_fp8[row] = dep.kv_fp8, out.overlap[row] = int32_t(ov), out.batch[row] = dep.batch;
        out.infeasible[row] = int32_t(why);
        if (why != Infeasible::kNone) {
            out.step_ms[row] = out.tpot_ms[row] = out.tps_user[row] = out.tokens_per_gpu_s[row] = nan;
            out.batch_limit[row] = out.weights_gib[row] = out.kv_gib[row] = nan;
            out.fits_memory[row] = false;
            continue;
        }
        const double step_ms =
            schedule_ms(m, ov == Overlap::kTwoBatch ? two : single, ov) + g.step_overhead_ms;
        const double tokens = dep.batch * (1 + dep.mtp_accepted);
        out.step_ms[row] = step_ms;
        out.tpot_ms[row] = step_ms / (1 + dep.mtp_accepted);
        out.tps_user[row] = 1e3 / out.tpot_ms[row];
        out.tokens_per_gpu_s[row] = tokens / (step_ms / 1e3);
        out.batch_limit[row] = mem.batch_limit, out.fits_memory[row] = mem.fits_memory;
        out.weights_gib[row] = mem.weights_gib, out.kv_gib[row] = mem.kv_gib;
    }
}
}  // namespace

void explore_decode(const ModelConfig& m, const ExploreGrid& g, const ExploreColumns& out) {
    g.validate(m);
    const size_t nb = g.batch.size(), no = g.overlap.size(), nk = g.kv_fp8.size(), nm = g.mtp.size();
    const size_t nt = g.attn_tp.size(), ne = g.ep.size();
    const size_t blocks = g.devices.size() * nm;
    bool need_single = false, need_two = false;
    for (int o : g.overlap) (o == int(Overlap::kTwoBatch) ? need_two : need_single) = true;

    // One work unit per (device, mtp, span of batches): its ep x tp x kv x overlap rows for each
    // batch of the span, the EP innermost. The EP changes the MoE calls only, so the other parts
    // are priced once per batch, TP and KV format (EpFreeOnce), and the attention TP and
    // the KV format change the attention calls only, so one thread pricing them back to back for
    // the same batch finds the MoE calls in the lookup memo (KernelTables::lookup). The batches are cut into spans so that a grid of one device and one MTP
    // still has work units for every core. Small grids stay on the calling thread: a thread pool
    // costs more than it saves there, and a process forked after OpenMP ran (a test harness's
    // isolated case) must not start one.
    constexpr size_t kMinUnits = 16;
    const bool parallel = blocks * ne * nt * nk * nb * no >= 4096;
    const auto spans = batch_spans(g.batch, parallel ? (kMinUnits + blocks - 1) / blocks : 1);
    const size_t units = blocks * spans.size();
#pragma omp parallel for schedule(dynamic) if (parallel)
    for (long long unit = 0; unit < (long long)units; ++unit) {
        const size_t si = size_t(unit) % spans.size(), block = size_t(unit) / spans.size();
        const size_t mi = block % nm, di = block / nm;
        for (size_t bi : spans[si])
            for (size_t ti = 0; ti < nt; ++ti)
                for (size_t ki = 0; ki < nk; ++ki) {
                    EpFreeOnce once;
                    for (size_t ei = 0; ei < ne; ++ei)
                        price_point(m, g, out, di, ei, ti, mi, ki, bi, need_single, need_two, once);
                }
    }
}

}  // namespace dsperf
