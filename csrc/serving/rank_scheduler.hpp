// One DP rank's scheduler: continuous batching under a token budget per step, chunked prefill,
// a limit on running requests, KV blocks from the rank's KvPool with preemption by recompute
// when they run out, and prefix-cache hits that skip prompt work.
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "serving/kv_pool.hpp"
#include "serving/serving_types.hpp"
#include "serving/step_pricer.hpp"

namespace dsperf::serving {

enum class ReqPhase { kWaiting, kPrefilling, kDecoding, kTransferring, kDone };

// A request's state while it is served (Record holds what is reported).
struct ReqState {
    const Request* req = nullptr;
    ReqPhase phase = ReqPhase::kWaiting;
    int target = 0;        // context tokens the current (re)prefill must hold
    int computed = 0;      // of them, those in the cache (computed or hit)
    int blocks = 0;        // private KV blocks held
    std::vector<uint64_t> held;  // prefix-cache entries referenced
    double last_emit_ms = 0;
    int context() const;   // tokens in the KV cache while decoding
};

// What a rank does in one step.
struct RankStep {
    void clear() { batch = chunks = 0, ctx_sum = chunk_tokens = end_pos_sum = 0, work.clear(); }
    int batch = 0;              // decoding requests
    double ctx_sum = 0;         // their contexts
    double chunk_tokens = 0;    // prompt tokens computed
    double end_pos_sum = 0;     // sum over chunks of the chunk's end position
    int chunks = 0;
    std::vector<std::pair<int, int>> work;  // (request, prompt tokens; 0 = decode)
};

// Events a step's end produces for the simulator.
struct StepOutcome {
    std::vector<int> finished, prompt_done;  // prompt_done: disaggregated hand-off
};

class RankScheduler {
public:
    RankScheduler(int64_t kv_blocks, const ServeConfig& cfg, const PoolConfig& pool, bool hands_off)
        : kv_(kv_blocks, cfg.prefix_cache), block_(cfg.block_tokens), pool_(pool), mtp_(pool.dep.mtp),
          hands_off_(hands_off), recv_interval_(cfg.recv_interval), recv_count_(cfg.recv_interval),
          first_at_decode_(cfg.mode == ServeMode::kDisaggregated && cfg.first_token == FirstToken::kDecode) {}

    // A request handed over from another pool (its cache came with it): queued at once.
    void enqueue(int r) { waiting_.push_back(r); }
    // A new request from the frontend: the rank sees it when its loop next receives (recv_interval).
    void arrive(int r) { (recv_interval_ > 1 ? inbox_ : waiting_).push_back(r); }
    int load() const { return int(inbox_.size() + waiting_.size() + running_.size()); }
    int waiting() const { return int(inbox_.size() + waiting_.size()); }
    int running() const { return int(running_.size()); }
    bool idle() const { return inbox_.empty() && waiting_.empty() && running_.empty(); }
    const KvPool& kv() const { return kv_; }
    int prefix_match(const Request& r) const { return kv_.match(r.hashes); }
    DecodeHint* ctx_hint() { return &ctx_hint_; }  // for StepPricer::decode_ms

    // Decide the step into s (allocating blocks, preempting when they run out).
    void plan(RankStep& s, double now, std::vector<ReqState>& st, std::vector<Record>& rec);
    // Apply it at its end: emitted tokens, computed chunks, finished requests.
    void finish_step(const RankStep& s, double now, std::vector<ReqState>& st, std::vector<Record>& rec,
                     std::mt19937_64& rng, double draft_accept, StepOutcome& out, GapCounts& itl);
    // A request handed to another pool (or finished) leaves this rank's cache.
    void release(ReqState& s);

private:
    void receive();  // the inbox into the queue, when the loop's count allows
    bool admit(int r, std::vector<ReqState>& st, std::vector<Record>& rec);
    void preempt(int r, std::vector<ReqState>& st, std::vector<Record>& rec);
    int blocks_for(int tokens) const { return (tokens + block_ - 1) / block_; }

    KvPool kv_;
    int block_;
    const PoolConfig& pool_;
    int mtp_;
    bool hands_off_;           // a prefill pool's rank: a computed prompt leaves for the decode pool
    int recv_interval_;
    int recv_count_;           // the loop's count since it last received (the first loop receives)
    bool first_at_decode_;     // disaggregated, first token streamed from the decode instance (FirstToken)
    std::deque<int> inbox_;    // arrived, not yet received (recv_interval > 1)
    std::deque<int> waiting_;
    std::vector<int> running_;  // admission order
    DecodeHint ctx_hint_;
};

}  // namespace dsperf::serving
