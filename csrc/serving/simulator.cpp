#include "serving/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <queue>
#include <random>
#include <stdexcept>

#include "serving/arrivals.hpp"
#include "serving/rank_scheduler.hpp"
#include "serving/router.hpp"
#include "serving/step_pricer.hpp"

namespace dsperf::serving {

double draft_acceptance(int drafts, double accepted) {
    if (drafts <= 0 || accepted <= 0) return 0;
    if (accepted >= drafts) return 1;
    double lo = 0, hi = 1;
    for (int i = 0; i < 60; ++i) {
        const double q = (lo + hi) / 2;
        double sum = 0, p = 1;
        for (int k = 0; k < drafts; ++k) sum += (p *= q);
        (sum < accepted ? lo : hi) = q;
    }
    return (lo + hi) / 2;
}

GapCounts GapCounts::sorted() const {
    std::vector<size_t> order(values.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
    GapCounts out;
    for (size_t i : order) {
        if (!out.values.empty() && out.values.back() == values[i]) {
            out.counts.back() += counts[i];
        } else {
            out.values.push_back(values[i]);
            out.counts.push_back(counts[i]);
        }
    }
    return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A pool of ranks in lock-stepped groups: a group's step lasts its slowest rank's (the MoE
// all-to-all waits for every rank of the EP group). Only ranks with requests are visited: a large
// EP group under light load is mostly idle ranks.
struct Pool {
    Pool(const char* what, const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const PoolConfig& pc,
         const ServeConfig& cfg, bool hands_off)
        : name(what), pricer(m, d, t, pc.dep, pc.prefill_dep, cfg.ctx_ratio, cfg.prefill_ratio), router(cfg.routing),
          per_group(pc.ranks_per_group()), busy(pc.groups, 0), active(pc.groups), stepped(pc.groups) {
        kv_blocks = int64_t(std::floor(pricer.kv_tokens_per_rank() / cfg.block_tokens));
        const int n = pc.groups * per_group;
        for (int i = 0; i < n; ++i) ranks.emplace_back(kv_blocks, cfg, pc, hands_off);
        plans.resize(n), listed.assign(n, 0), last_running.assign(n, 0), last_kv.assign(n, 0);
    }
    // A rank that got a request takes part in its group's steps (in rank order: deterministic).
    void activate(int r) {
        if (listed[r]) return;
        listed[r] = 1;
        auto& a = active[r / per_group];
        a.insert(std::lower_bound(a.begin(), a.end(), r), r);
    }
    const char* name;
    StepPricer pricer;
    Router router;
    int per_group;
    std::vector<RankScheduler> ranks;
    std::vector<char> busy;                   // per group: a step is under way or about to start
    std::vector<std::vector<int>> active;     // per group: ranks holding requests
    std::vector<std::vector<int>> stepped;    // per group: ranks with work in the current step
    std::vector<RankStep> plans;              // per rank
    std::vector<char> listed;                 // per rank: in its group's active list
    std::vector<int64_t> last_running, last_kv;  // per rank, as last counted in the totals
    int64_t kv_blocks = 0;
};

struct Event {
    double t;
    uint64_t seq;
    int type, a, b;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};
enum EventType { kStepEnd = 0, kTransferDone = 1, kStepStart = 2 };

class Simulation {
public:
    Simulation(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const ServeConfig& cfg,
               const Workload& w)
        : cfg_(cfg), w_(w), rng_(cfg.seed), lengths_rng_(cfg.seed ^ kLengthsStream) {
        const bool pd = cfg.mode == ServeMode::kDisaggregated;
        decode_ = std::make_unique<Pool>("decode", m, d, t, cfg.decode, cfg, false);
        if (pd) prefill_ = std::make_unique<Pool>("prefill", m, d, t, cfg.prefill, cfg, true);
        entry_ = pd ? prefill_.get() : decode_.get();
        res_.draft_accept = draft_acceptance(cfg.decode.dep.mtp, cfg.decode.dep.mtp_accepted);
        res_.kv_blocks_per_rank = decode_->kv_blocks;
        res_.ranks = int(decode_->ranks.size());
        if (pd) res_.prefill_kv_blocks_per_rank = prefill_->kv_blocks, res_.prefill_ranks = int(prefill_->ranks.size());
    }

    SimResult run() {
        std::vector<Request> arrivals;
        if (w_.kind == ArrivalKind::kPoisson || w_.kind == ArrivalKind::kGamma)
            arrivals = open_loop_requests(w_, rng_, lengths_rng_);
        else if (w_.kind == ArrivalKind::kTrace) arrivals = w_.requests;
        for (size_t i = 0; i < arrivals.size(); ++i) check_fits(arrivals[i], i);
        if (w_.kind == ArrivalKind::kClosedLoop) {
            for (int c = 0; c < w_.concurrency; ++c) {
                if (!next_closed_loop(0, arrivals)) break;
            }
        }
        size_t next = 0;
        double last_empty = 0;
        // A closed loop's queues never hold more than its clients, who all arrive at the start: the
        // waiting guard is for open loops and traces, whose arrivals do not wait for answers.
        const int64_t waiting_bound = w_.kind == ArrivalKind::kClosedLoop
                                          ? std::max<int64_t>(cfg_.max_waiting, w_.concurrency)
                                          : int64_t(cfg_.max_waiting);
        while (true) {
            const double t_arrival = next < arrivals.size() ? arrivals[next].arrival_ms : kInf;
            const double t_event = events_.empty() ? kInf : events_.top().t;
            if (t_arrival == kInf && t_event == kInf) {
                res_.stop_reason = "drained";
                break;
            }
            if (t_arrival <= t_event) {
                now_ = t_arrival;
                arrive(std::move(arrivals[next++]));
            } else {
                const Event e = events_.top();
                events_.pop();
                now_ = e.t;
                Pool& p = e.a == 0 ? *decode_ : *prefill_;
                if (e.type == kStepEnd) step_end(p, e.b);
                else if (e.type == kStepStart) start_step(p, e.b);
                else transfer_done(e.b);
            }
            if (waiting_ == 0) last_empty = now_;
            if (waiting_ > waiting_bound || now_ > cfg_.max_time_ms) {
                res_.stop_reason = waiting_ > waiting_bound ? "max_waiting" : "max_time";
                res_.overloaded = true;
                res_.overload_since_ms = last_empty;
                break;
            }
        }
        res_.end_ms = now_;
        res_.priced_points = int64_t(decode_->pricer.priced_points() + (prefill_ ? prefill_->pricer.priced_points() : 0));
        res_.records = std::move(records_);
        res_.itl_ms = res_.itl_ms.sorted();
        return std::move(res_);
    }

private:
    int blocks(int tokens) const { return (tokens + cfg_.block_tokens - 1) / cfg_.block_tokens; }

    // A request that no rank can hold would wait (or be preempted) forever: refuse it up front.
    void check_fits(const Request& r, size_t i) const {
        auto refuse = [&](const Pool& p, int tokens) {
            // No KV room at all: the pool's layout, not the request, is what to change.
            const std::string layout = p.name == std::string("prefill") ? "prefill_ep" : "ep";
            if (p.kv_blocks == 0)
                throw std::invalid_argument(
                    std::string("a ") + p.name + " rank's weights take all of its memory share, leaving no KV cache " +
                    "(the memory model's free memory after weights): spread the weights over more GPUs (" + layout +
                    ") or give them a larger share (mem_fraction)");
            throw std::invalid_argument(
                "request " + std::to_string(i) + " (" + std::to_string(r.input) + " prompt + " +
                std::to_string(r.output) + " output tokens) needs " + std::to_string(blocks(tokens)) +
                " KV blocks of " + std::to_string(cfg_.block_tokens) + " tokens, more than the " +
                std::to_string(p.kv_blocks) + " a " + p.name +
                " rank holds (the memory model's free memory after weights): the KV capacity is too small");
        };
        // The decode rank also holds the MTP drafts' tokens of the last step.
        const int tokens = r.input + r.output + cfg_.decode.dep.mtp;
        if (blocks(tokens) > decode_->kv_blocks) refuse(*decode_, tokens);
        if (prefill_ && blocks(r.input) > prefill_->kv_blocks) refuse(*prefill_, r.input);
    }

    // The closed loop's next request: a generated one, or the next of the given requests in order.
    bool next_closed_loop(double now, std::vector<Request>& arrivals) {
        if (now >= w_.duration_ms || int64_t(records_.size() + arrivals.size()) >= w_.max_requests) return false;
        Request r;
        if (!w_.requests.empty()) {
            if (closed_next_ >= w_.requests.size()) return false;
            r = w_.requests[closed_next_++];
        } else {
            r = generated_request(w_, lengths_rng_);
        }
        r.arrival_ms = now;
        check_fits(r, records_.size() + (arrivals.size()));
        arrivals.push_back(std::move(r));
        return true;
    }

    void arrive(Request&& r) {
        requests_.push_back(std::move(r));
        const Request& q = requests_.back();
        const int id = int(records_.size());
        Record rec;
        rec.arrival_ms = q.arrival_ms, rec.input = q.input, rec.output = q.output;
        records_.push_back(rec);
        ReqState s;
        s.req = &q;
        s.target = q.input;
        states_.push_back(std::move(s));
        ++in_system_;
        Pool& p = *entry_;
        const int rank = p.router.route(q, p.ranks);
        records_[id].prefill_rank = rank;
        if (!prefill_) records_[id].decode_rank = rank;  // aggregated: one rank does both
        p.ranks[rank].arrive(id);
        p.activate(rank);
        ++waiting_;
        kick(p, rank / p.per_group);
        sample();
    }

    // An idle group starts its step after every other event of this instant (requests that
    // arrive together are scheduled together).
    void kick(Pool& p, int g) {
        if (p.busy[g]) return;
        p.busy[g] = 1;
        events_.push(Event{now_, seq_++, kStepStart, &p == decode_.get() ? 0 : 1, g});
    }

    void start_step(Pool& p, int g) {
        double step_ms = 0;
        auto& active = p.active[g];
        auto& stepped = p.stepped[g];
        stepped.clear();
        double group_batch = 0, group_chunk_tokens = 0;
        for (int r : active) {
            RankScheduler& rank = p.ranks[r];
            RankStep& s = p.plans[r];
            const int waiting_before = rank.waiting();
            rank.plan(s, now_, states_, records_);
            waiting_ += rank.waiting() - waiting_before;
            running_ += rank.running() - p.last_running[r];
            kv_used_ += rank.kv().used() - p.last_kv[r];
            p.last_running[r] = rank.running(), p.last_kv[r] = rank.kv().used();
            if (s.work.empty()) continue;
            stepped.push_back(r);
            group_batch += s.batch, group_chunk_tokens += s.chunk_tokens;
        }
        // The experts serve the group's tokens, spread evenly over its GPUs; each rank's attention
        // its own. A rank is priced with its routed share (the group's mean over its own), so one
        // prompt on one rank of an idle group is not priced as if every rank carried one.
        const double mean_batch = group_batch / p.per_group, mean_chunk = group_chunk_tokens / p.per_group;
        for (int r : stepped) {
            const RankStep& s = p.plans[r];
            const double ctx = s.batch > 0 ? s.ctx_sum / s.batch : 0;
            const double end_pos = s.chunks > 0 ? s.end_pos_sum / s.chunks : 0;
            const double decode_share = s.batch > 0 ? mean_batch / s.batch : 1;
            const double chunk_share = s.chunk_tokens > 0 ? mean_chunk / s.chunk_tokens : 1;
            step_ms = std::max(step_ms, p.pricer.step_ms(s.batch, ctx, s.chunk_tokens, s.chunks, end_pos, decode_share,
                                                         chunk_share, p.ranks[r].ctx_hint()));
        }
        active.erase(std::remove_if(active.begin(), active.end(),
                                    [&](int r) { return p.ranks[r].idle() ? (p.listed[r] = 0, true) : false; }),
                     active.end());
        if (step_ms <= 0) {
            p.busy[g] = 0;
            return;
        }
        p.busy[g] = 1;
        ++res_.steps;
        events_.push(Event{now_ + step_ms, seq_++, kStepEnd, &p == decode_.get() ? 0 : 1, g});
    }

    void step_end(Pool& p, int g) {
        StepOutcome out;
        for (int r : p.stepped[g])
            p.ranks[r].finish_step(p.plans[r], now_, states_, records_, rng_, res_.draft_accept, out, res_.itl_ms);
        for (int r : out.prompt_done) {
            const double ms = prefill_->pricer.kv_bytes_per_token() * states_[r].req->input /
                              (cfg_.kv_transfer_gbps * 1e9) * 1e3;
            events_.push(Event{now_ + ms, seq_++, kTransferDone, 0, r});
        }
        in_system_ -= int64_t(out.finished.size());
        if (w_.kind == ArrivalKind::kClosedLoop) {
            std::vector<Request> issued;
            for (size_t i = 0; i < out.finished.size(); ++i) next_closed_loop(now_, issued);
            for (auto& r : issued) arrive(std::move(r));
        }
        start_step(p, g);
        sample();
    }

    // A prompt's cache arrived at the decode pool: the request joins a decode rank's queue.
    void transfer_done(int r) {
        ReqState& s = states_[r];
        s.phase = ReqPhase::kWaiting;
        s.target = s.computed = s.req->input;
        const int rank = decode_->router.route(*s.req, decode_->ranks);
        records_[r].decode_rank = rank;
        decode_->ranks[rank].enqueue(r);
        decode_->activate(rank);
        ++waiting_;
        kick(*decode_, rank / decode_->per_group);
        sample();
    }

    void sample() {
        res_.ts_ms.push_back(now_);
        res_.ts_waiting.push_back(int32_t(waiting_));
        res_.ts_running.push_back(int32_t(running_));
        res_.ts_in_system.push_back(int32_t(in_system_));
        res_.ts_kv_blocks.push_back(kv_used_);
    }

    const ServeConfig& cfg_;
    const Workload& w_;
    std::mt19937_64 rng_;
    // Generated lengths draw from their own stream, so that drawing them leaves the arrival gaps and
    // MTP acceptances of a seed as they are.
    static constexpr uint64_t kLengthsStream = 0x9E3779B97F4A7C15ull;
    std::mt19937_64 lengths_rng_;
    std::unique_ptr<Pool> decode_, prefill_;
    Pool* entry_ = nullptr;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
    uint64_t seq_ = 0;
    double now_ = 0;
    std::deque<Request> requests_;  // stable addresses: ReqState points into it
    std::vector<Record> records_;
    std::vector<ReqState> states_;
    int64_t waiting_ = 0, running_ = 0, in_system_ = 0, kv_used_ = 0;
    size_t closed_next_ = 0;
    SimResult res_;
};

}  // namespace

SimResult simulate(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const ServeConfig& cfg,
                   const Workload& w) {
    Simulation s(m, d, t, cfg, w);
    return s.run();
}

}  // namespace dsperf::serving
