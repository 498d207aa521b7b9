#include "serving/rank_scheduler.hpp"

#include <algorithm>

namespace dsperf::serving {

namespace {
double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }
}  // namespace

// While decoding, target follows the context: the prompt and the tokens emitted since.
int ReqState::context() const { return target; }

bool RankScheduler::admit(int r, std::vector<ReqState>& st, std::vector<Record>& rec) {
    ReqState& q = st[r];
    const Request& R = *q.req;
    int matched = 0;
    if (q.computed == 0) {
        // A prompt to compute: the prefix cache may hold its start; at least one token is computed.
        matched = std::min(kv_.match(R.hashes), (q.target - 1) / block_);
        kv_.ref(R.hashes, matched, q.held);
    }
    // A request whose cache came with it (a disaggregated hand-off) decodes in this step: room for its tokens too.
    const int own = blocks_for(q.computed >= q.target ? q.target + 1 + mtp_ : q.target) - matched;
    if (!kv_.alloc(own)) {
        kv_.unref(q.held);
        return false;
    }
    q.blocks = own;
    if (q.computed == 0) {
        q.computed = matched * block_;
        rec[r].cached_tokens = q.computed;
    }
    q.phase = q.computed >= q.target ? ReqPhase::kDecoding : ReqPhase::kPrefilling;
    running_.push_back(r);
    return true;
}

void RankScheduler::release(ReqState& s) {
    kv_.unref(s.held);
    kv_.release(s.blocks);
    s.blocks = 0;
}

void RankScheduler::preempt(int r, std::vector<ReqState>& st, std::vector<Record>& rec) {
    // Recompute: the cache is dropped; the prompt and the tokens emitted so far are computed again.
    ReqState& q = st[r];
    release(q);
    q.computed = 0;
    q.target = q.req->input + rec[r].generated;
    q.phase = ReqPhase::kWaiting;
    ++rec[r].preemptions;
    running_.erase(std::find(running_.begin(), running_.end(), r));
    waiting_.push_front(r);
}

void RankScheduler::receive() {
    // SGLang's loop receives (whether or not a request waits) when its count reaches the interval,
    // and at once when it has nothing to run (its idle loops spin through the count without GPU work).
    const bool nothing_to_run = waiting_.empty() && running_.empty();
    if (recv_count_ < recv_interval_ && !nothing_to_run) return;
    recv_count_ = 0;
    waiting_.insert(waiting_.end(), inbox_.begin(), inbox_.end());
    inbox_.clear();
}

void RankScheduler::plan(RankStep& s, double now, std::vector<ReqState>& st, std::vector<Record>& rec) {
    s.clear();
    if (recv_interval_ > 1) receive();
    if (idle()) return;
    // Decoding requests first: each needs room for the tokens this step may add; when the blocks
    // run out, the request admitted last gives its cache up and is computed again later (recompute).
    // A victim always lies at or after the request in hand, so none already in the step leaves it.
    long budget = pool_.token_budget;
    for (size_t i = 0; i < running_.size(); ++i) {
        const int r = running_[i];
        ReqState& q = st[r];
        if (q.phase != ReqPhase::kDecoding) continue;
        const int need = blocks_for(q.context() + 1 + mtp_) - (q.blocks + int(q.held.size()));
        bool ok = need <= 0;
        while (!ok) {
            if (kv_.alloc(need)) {
                q.blocks += need;
                ok = true;
            } else {
                const int victim = running_.back();
                preempt(victim, st, rec);
                if (victim == r) break;
            }
        }
        if (!ok) break;  // it was the last running request
        s.work.emplace_back(r, 0);
        ++s.batch;
        s.ctx_sum += q.context();
        budget -= 1 + mtp_;
    }
    auto chunk = [&](int r) {
        ReqState& q = st[r];
        const int c = int(std::min<long>(q.target - q.computed, budget));
        if (c <= 0) return;
        s.work.emplace_back(r, c);
        s.chunk_tokens += c;
        s.end_pos_sum += q.computed + c;
        ++s.chunks;
        budget -= c;
    };
    for (int r : running_)
        if (st[r].phase == ReqPhase::kPrefilling && budget > 0) chunk(r);
    // New requests, first come first served, while the budget, the running limit and the blocks allow.
    while (budget > 0 && !waiting_.empty() && int(running_.size()) < pool_.max_running) {
        const int r = waiting_.front();
        if (!admit(r, st, rec)) break;
        waiting_.pop_front();
        if (st[r].phase == ReqPhase::kPrefilling) {
            chunk(r);
        } else {
            // A hand-off whose first token the decode instance streams: it goes out now.
            if (rec[r].first_token_ms < 0) rec[r].first_token_ms = st[r].last_emit_ms = now;
            s.work.emplace_back(r, 0);
            ++s.batch;
            s.ctx_sum += st[r].context();
            budget -= 1 + mtp_;
        }
    }
}

void RankScheduler::finish_step(const RankStep& s, double now, std::vector<ReqState>& st, std::vector<Record>& rec,
                                std::mt19937_64& rng, double draft_accept, StepOutcome& out, GapCounts& itl) {
    auto done = [&](int r) {
        ReqState& q = st[r];
        release(q);
        q.phase = ReqPhase::kDone;
        rec[r].finish_ms = now;
        out.finished.push_back(r);
    };
    if (s.work.empty()) return;
    // The receive count, with SGLang's weights (serving_types.hpp).
    if (recv_interval_ > 1) recv_count_ += s.chunks > 0 ? kRecvWeightPrompt : kRecvWeightDecode;
    bool left = false;
    for (const auto& [r, c] : s.work) {
        ReqState& q = st[r];
        Record& rc = rec[r];
        const Request& R = *q.req;
        if (c > 0) {
            q.computed += c;
            if (q.computed < q.target) continue;
            // The prompt's blocks join the prefix cache (held by the request until it leaves).
            q.blocks -= int(kv_.publish(R.hashes, int(q.held.size()), blocks_for(R.input), q.held));
            if (rc.generated == 0) {
                rc.generated = 1;
                // The prompt's step makes the first token; streamed from the decode instance, it goes out
                // when that takes the request in (plan), unless it is the only token.
                if (!(hands_off_ && first_at_decode_ && rc.generated < R.output))
                    rc.first_token_ms = q.last_emit_ms = now;
            }
            if (rc.generated >= R.output) {
                done(r), left = true;
            } else if (hands_off_) {
                release(q);
                q.phase = ReqPhase::kTransferring;
                out.prompt_done.push_back(r);
                left = true;
            } else {
                q.phase = ReqPhase::kDecoding;
            }
        } else {
            // One token, plus the MTP drafts accepted in a row (each with probability draft_accept).
            int accepted = 0;
            while (accepted < mtp_ && uniform(rng) < draft_accept) ++accepted;
            const int emitted = std::min(1 + accepted, R.output - rc.generated);
            rc.generated += emitted;
            q.target += emitted;
            q.computed += emitted;
            const double gap = now - q.last_emit_ms;
            itl.add(float(gap));
            rc.max_itl_ms = std::max(rc.max_itl_ms, gap);
            q.last_emit_ms = now;
            if (rc.generated >= R.output) done(r), left = true;
        }
    }
    if (left)
        running_.erase(std::remove_if(running_.begin(), running_.end(),
                                      [&](int r) {
                                          return st[r].phase == ReqPhase::kDone ||
                                                 st[r].phase == ReqPhase::kTransferring;
                                      }),
                       running_.end());
}

}  // namespace dsperf::serving
