// C++ checks of the serving simulator (csrc/serving), independent of Python: a run drains and is
// deterministic, TPOT at a steady batch equals the step model's decode step, the prefix cache
// hits shared prompts, and the guard rails (a request beyond the KV cache, overload) hold.
// Run by ctest (cmake -DDSPERF_BUILD_TESTS=ON), also under the sanitizers in CI.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "test_support.hpp"
#include "grounded/step_model.hpp"
#include "serving/simulator.hpp"

using namespace dsperf;
using namespace dsperf_test;
using namespace dsperf::serving;


static DeviceSpec h200() { return gh100("H200", 141, 4800, 450, 24); }

static PoolConfig pool(int ep) {
    PoolConfig p;
    p.dep.phase = Phase::kDecode, p.dep.ep = ep, p.dep.batch = 1;
    p.prefill_dep = p.dep;
    p.prefill_dep.phase = Phase::kPrefill;
    p.token_budget = 8192;
    p.max_running = 256;
    return p;
}

int main() {
    const ModelConfig m;  // DeepSeek-V3 defaults
    const DeviceSpec d = h200();
    KernelTables t;  // no rows: every call at the default efficiency

    ServeConfig agg;
    agg.decode = pool(8);
    Workload poisson;
    poisson.rate = 3, poisson.duration_ms = 60e3, poisson.input = 1000, poisson.output = 50;
    const SimResult a = simulate(m, d, t, agg, poisson), b = simulate(m, d, t, agg, poisson);
    bool drained = a.stop_reason == "drained" && !a.records.empty(), same = a.records.size() == b.records.size();
    for (size_t i = 0; i < a.records.size(); ++i) {
        drained = drained && a.records[i].finish_ms >= a.records[i].first_token_ms && a.records[i].generated == 50;
        same = same && i < b.records.size() && a.records[i].finish_ms == b.records[i].finish_ms;
    }
    check(drained, "a Poisson run drains, every request emits its tokens");
    check(same, "a fixed seed gives identical records");

    // Disaggregated closed loop: 64 requests reach 8 decode ranks together; TPOT = the decode step.
    ServeConfig pd;
    pd.mode = ServeMode::kDisaggregated;
    pd.decode = pool(8), pd.prefill = pool(8);
    pd.prefill.token_budget = 16384;
    Workload closed;
    closed.kind = ArrivalKind::kClosedLoop, closed.concurrency = 64, closed.duration_ms = 1;
    closed.input = 1024, closed.output = 256;
    const SimResult c = simulate(m, d, t, pd, closed);
    Deployment dep = pd.decode.dep;
    dep.batch = 8, dep.kv_len = 1024 + (256 - 2) / 2.0;
    const double step_ms = step(m, d, t, dep).step_ms;
    bool tpot_ok = c.records.size() == 64;
    for (const Record& r : c.records) {
        const double tpot = (r.finish_ms - r.first_token_ms) / (r.output - 1);
        tpot_ok = tpot_ok && std::fabs(tpot / step_ms - 1) < 0.01;
    }
    check(tpot_ok, "TPOT at a steady batch of 8 equals the decode step within 1%");

    // Shared prompts hit the prefix cache (one rank: every request finds the blocks).
    ServeConfig one = agg;
    one.decode = pool(8);
    one.decode.dep.attn_tp = 8, one.decode.prefill_dep.attn_tp = 8;
    Workload shared;
    shared.kind = ArrivalKind::kTrace;
    for (int i = 0; i < 20; ++i) {
        Request r;
        r.arrival_ms = 2000.0 * i, r.input = 2048, r.output = 4, r.hashes = {1, 2, 3, 4};
        shared.requests.push_back(r);
    }
    const SimResult s = simulate(m, d, t, one, shared);
    check(s.records.back().cached_tokens > 0 && s.records.front().cached_tokens == 0, "shared prefixes hit");

    Workload huge = poisson;
    huge.input = 1 << 23;
    bool threw = false;
    try {
        simulate(m, d, t, agg, huge);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    check(threw, "a request beyond a rank's KV cache is refused");

    ServeConfig bounded = agg;
    bounded.max_waiting = 500;
    Workload flood = poisson;
    flood.rate = 2000;
    const SimResult o = simulate(m, d, t, bounded, flood);
    check(o.overloaded && o.stop_reason == "max_waiting" && o.end_ms < flood.duration_ms, "overload stops at the bound");

    check(std::fabs(draft_acceptance(1, 0.7) - 0.7) < 1e-9, "one draft: acceptance = mean");
    const double q = draft_acceptance(3, 1.8);
    check(std::fabs(q + q * q + q * q * q - 1.8) < 1e-9, "three drafts: q + q^2 + q^3 = mean");

    std::printf("%d of %d serving checks passed\n", checks - failures, checks);
    return failures ? 1 : 0;
}
