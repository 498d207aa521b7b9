#include "serving/step_pricer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsperf::serving {

namespace {
constexpr double kExactBelow = 64;  // counts below this are their own bucket

// A bucket index of a positive count: exact below kExactBelow, geometric above.
int bucket(double x, double log_ratio) {
    if (x < kExactBelow) return int(std::lround(std::max(1.0, x)));
    return int(kExactBelow) + int(std::lround(std::log(x / kExactBelow) / log_ratio));
}
double bucket_value(int index, double log_ratio) {
    if (index < kExactBelow) return index;
    return kExactBelow * std::exp((index - kExactBelow) * log_ratio);
}
}  // namespace

StepPricer::StepPricer(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& decode_dep,
                       const Deployment& prefill_dep, double ctx_ratio, double prefill_ratio)
    : m_(m), d_(d), t_(t), decode_dep_(decode_dep), prefill_dep_(prefill_dep), log_ctx_ratio_(std::log(ctx_ratio)),
      ctx_ratio_(ctx_ratio), prefill_log_ratio_(std::log(prefill_ratio)) {
    decode_overhead_ms_ = decode_dep.step_overhead_ms >= 0 ? decode_dep.step_overhead_ms : kDecodeStepOverheadMs;
    prefill_overhead_ms_ = prefill_dep.step_overhead_ms >= 0 ? prefill_dep.step_overhead_ms : kPrefillStepOverheadMs;
    // The memory model at a one-token context: the requests of one token each a GPU holds, i.e.
    // its free memory in tokens; a TP group of attn_tp GPUs serves attn_tp times the per-GPU batch.
    Deployment probe = decode_dep;
    probe.kv_len = 1;
    StepResult r;
    memory(m, d, probe, r);
    kv_tokens_per_rank_ = r.batch_limit * decode_dep.attn_tp;
    kv_bytes_per_token_ = r.kv_bytes_per_token;
}

int StepPricer::share_bucket(double share) const { return int(std::lround(std::log(share) / prefill_log_ratio_)); }
double StepPricer::share_value(int bucket) const { return bucket == 0 ? 1.0 : std::exp(bucket * prefill_log_ratio_); }

double StepPricer::price_decode(int batch, double ctx, double share) {
    Deployment dep = decode_dep_;
    dep.batch = double(batch) / dep.attn_tp;  // the grounded model's batch is per GPU
    dep.kv_len = ctx;
    dep.routed_share = share;
    ++priced_;
    return schedule_ms(m_, step_stages(m_, d_, t_, dep), dep.overlap);
}

double StepPricer::decode_point(int share, int batch, int i) {
    auto& by_batch = decode_[share];
    if (size_t(batch) < by_batch.size() && size_t(i) < by_batch[batch].size() && !std::isnan(by_batch[batch][i]))
        return by_batch[batch][i];  // the common case: priced already
    if (size_t(batch) >= by_batch.size()) by_batch.resize(batch + 1);
    auto& row = by_batch[batch];
    if (size_t(i) >= row.size()) row.resize(i + 1, std::numeric_limits<double>::quiet_NaN());
    if (std::isnan(row[i])) row[i] = price_decode(batch, grid_[i], share_value(share));
    return row[i];
}

double StepPricer::decode_ms(int batch, double ctx, double share, DecodeHint* hint) {
    ctx = std::max(1.0, ctx);
    const int sb = share == 1 ? 0 : share_bucket(share);
    if (!(hint && hint->batch == batch && hint->share == sb && hint->lo <= ctx && ctx < hint->hi)) {
        const int i = int(std::log(ctx) / log_ctx_ratio_);
        while (grid_.size() <= size_t(i) + 1) grid_.push_back(std::pow(ctx_ratio_, double(grid_.size())));
        DecodeHint h{batch, sb, grid_[i], grid_[i + 1], decode_point(sb, batch, i), decode_point(sb, batch, i + 1)};
        if (!hint) {
            const double w = std::clamp((ctx - h.lo) / (h.hi - h.lo), 0.0, 1.0);
            return (1 - w) * h.v_lo + w * h.v_hi;
        }
        *hint = h;
    }
    const double w = std::clamp((ctx - hint->lo) / (hint->hi - hint->lo), 0.0, 1.0);
    return (1 - w) * hint->v_lo + w * hint->v_hi;
}

double StepPricer::price_prefill(double tokens, double new_per_chunk, double end_pos, double share) {
    Deployment dep = prefill_dep_;
    dep.routed_share = share;
    new_per_chunk = std::min(new_per_chunk, tokens);
    end_pos = std::max(end_pos, new_per_chunk);
    dep.tokens = std::max(1.0, tokens / dep.attn_tp);  // per GPU: the TP group shares the rank's tokens
    dep.prompt_len = end_pos;
    dep.cached_prefix = end_pos - new_per_chunk;
    ++priced_;
    return schedule_ms(m_, step_stages(m_, d_, t_, dep), dep.overlap);
}

double StepPricer::prefill_ms(double tokens, int chunks, double end_pos, double share) {
    const int bt = bucket(tokens, prefill_log_ratio_);
    const int bn = bucket(tokens / std::max(1, chunks), prefill_log_ratio_);
    const int be = bucket(end_pos, prefill_log_ratio_);
    const int bs = share == 1 ? 0 : share_bucket(share);
    // 16 bits each: the token buckets stay in the hundreds, the share's within +-32767.
    const uint64_t key = (uint64_t(bt) << 48) | (uint64_t(bn) << 32) | (uint64_t(be) << 16) | uint64_t(bs + 32768);
    auto it = prefill_.find(key);
    if (it != prefill_.end()) return it->second;
    const double ms = price_prefill(bucket_value(bt, prefill_log_ratio_), bucket_value(bn, prefill_log_ratio_),
                                    bucket_value(be, prefill_log_ratio_), share_value(bs));
    prefill_.emplace(key, ms);
    return ms;
}

}  // namespace dsperf::serving
