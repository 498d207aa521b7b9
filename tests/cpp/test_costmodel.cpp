// C++ checks of the core, independent of Python: a few published figures of the seed analysis
// and the argument checks. Run by ctest (cmake -DDSPERF_BUILD_TESTS=ON).
#include <cmath>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <vector>

#include "test_support.hpp"
#include "grounded/allreduce_table.hpp"
#include "grounded/kernel_table.hpp"
#include "seed/decode.hpp"
#include "seed/prefill.hpp"
#include "grounded/explore.hpp"
#include "grounded/step_model.hpp"
#include "seed/sweep.hpp"
#include "model/block_costs.hpp"

using namespace dsperf;
using namespace dsperf_test;


static DeviceSpec h800(int comm_sms) {
    DeviceSpec d = gh100("H800", 80, 3350, 200, comm_sms);
    d.compute_derate = 0.8;
    return d;
}

// The all-reduce latency table: the smallest message's latency is the floor, linear between rows,
// ring traffic at the given rate past them, the rise above the floor divided by the link's
// speed-up, nearest tp.
static void test_allreduce_table() {
    AllReduceTable t;
    check_close(t.latency_us(8, 1000, 1, 100).found, 0, 0, "allreduce table: empty");
    t.add(8, 4096, 6.0);
    t.add(8, 1024, 5.0);
    t.add(8, 8192, 10.0);
    t.add(2, 1024, 3.0);
    check_close(t.latency_us(8, 100, 1, 100).us, 5.0, 1e-12, "allreduce table: below the smallest message");
    check_close(t.latency_us(8, 2560, 1, 100).us, 5.5, 1e-12, "allreduce table: between rows");
    // Past 8192 bytes: 10 us, then 2 x 7/8 x 4096 bytes of ring traffic at 100 GB/s (1e5 bytes/us).
    check_close(t.latency_us(8, 12288, 1, 100).us, 10.0 + 7168.0 / 1e5, 1e-12, "allreduce table: past the largest row");
    check_close(t.latency_us(8, 12288, 2, 200).us, 5.0 + 5.0 / 2 + 7168.0 / 2e5, 1e-12,
                "allreduce table: a link twice as fast");
    check_close(t.latency_us(8, 12288, 1, 100).clamped, 1, 0, "allreduce table: past the rows is clamped");
    check_close(t.latency_us(3, 1024, 1, 100).us, 3.0, 1e-12, "allreduce table: the nearest tp (log space)");
    check_close(t.latency_us(3, 1024, 1, 100).clamped, 1, 0, "allreduce table: another tp is clamped");
}

// A curve's lookup memo (per thread, keyed by the curve's address and generation) must not hand a
// copy made where a destroyed copy lived the destroyed one's rows: a copy keeps the generation, so
// only an answer that names no address (the group's index) is safe. Under ASan (ctest in CI) the
// old pointer-valued memo is a heap-use-after-free here. (It was suspected for a crash on an H200
// host, which proved to be elsewhere: docs/CUDA.md.)
static void test_curve_memo_and_copies_at_one_address() {
    EfficiencyCurve original;
    TableKeys small, large;
    small.n = large.n = 1;
    small.v[0] = 8, large.v[0] = 64;
    original.add(small, 100, 0.5);
    original.add(large, 100, 0.7);
    alignas(EfficiencyCurve) unsigned char place[sizeof(EfficiencyCurve)];
    auto* first = new (place) EfficiencyCurve(original);
    const double want = first->at(large, 100).value;
    first->~EfficiencyCurve();
    auto* second = new (place) EfficiencyCurve(original);  // the same address and generation
    check_close(second->at(large, 100).value, want, 0, "curve memo: a copy at a destroyed copy's address");
    check_close(want, 0.7, 0, "curve memo: the nearest group's value");
    second->~EfficiencyCurve();
}

// A key the log-space distances cannot order (NaN, an infinity) still gets a group: the nearest
// group was a null pointer there, which at() dereferenced.
static void test_curve_key_without_order() {
    EfficiencyCurve c;
    TableKeys a, b, nan_key, inf_key;
    a.n = b.n = nan_key.n = inf_key.n = 1;
    a.v[0] = 8, b.v[0] = 64, nan_key.v[0] = std::nan(""), inf_key.v[0] = HUGE_VAL;
    c.add(a, 100, 0.5);
    c.add(b, 100, 0.7);
    for (const TableKeys* k : {&nan_key, &inf_key}) {
        const TableLookup r = c.at(*k, 100);
        check_close(r.found, 1, 0, "curve: an unordered key is still looked up");
        check_close(r.value, 0.5, 0, "curve: an unordered key takes the first group");
    }
}

int main() {
    test_allreduce_table();
    test_curve_memo_and_copies_at_one_address();
    test_curve_key_without_order();
    const ModelConfig m;  // DeepSeek-V3 defaults
    const MlaFlops f = mla_flops(1, 1, m, 0);
    check_close(f.total_gflop(), 0.37429248, 1e-12, "mla_flops(1,1)");
    check_close(mla_absorbed_flops(1, 1, m, 0).total_gflop(), 1.196572672, 1e-12, "mla_absorbed_flops(1,1)");
    check_close(param_counts(m, false).mla_absorbed / 1e6, 598.147072, 1e-9, "absorbed MLA params");

    PrefillParams pp;  // seq 4383, hit 0.563, TP4 x DP8
    const PrefillResult pr = prefill(m, h800(24), pp, Fixes::none());
    check_close(pr.sum_overlap_ms, 167.802, 5e-4, "prefill H800 Sum(Overlap)");
    check_close(pr.sum_ms, 259.803, 5e-4, "prefill H800 Sum");
    check_close(pr.tokens_per_s_node_overlap, 52240.1, 0.05, "prefill H800 TPS per node");

    DecodeParams dp;  // batch 32
    const DecodeResult dr = decode(m, h800(24), dp, Fixes::none());
    check_close(dr.tpot_overlap_ms, 9.858, 5e-4, "decode H800 TPOT(Overlap)");
    check_close(dr.tokens_per_gpu_s, 1879.856, 5e-4, "decode H800 Total");
    const DecodeResult dc = decode(m, h800(24), dp, Fixes::all());
    ++checks;
    if (!(dc.tpot_overlap_ms <= dc.tpot_ms)) {
        std::printf("FAIL corrected overlap exceeds sequential\n");
        ++failures;
    }

    check_throws([&] { PrefillParams p; p.kv_cache_hit = 1.0; prefill(m, h800(24), p, Fixes::none()); },
                 "kv_cache_hit = 1");
    check_throws([&] { PrefillParams p; p.tp = 3; prefill(m, h800(24), p, Fixes::none()); }, "tp = 3");
    check_throws([&] { DecodeParams p; p.batch = 0; decode(m, h800(0), p, Fixes::none()); }, "batch = 0");
    check_throws([&] { ModelConfig bad; bad.n_activated_experts = 300; bad.validate(); }, "top-k > experts");
    check_throws([] { parse_mode("exact"); }, "bad mode");
    check_throws([] { parse_mode("corrected-nofix"); }, "unknown fix");
    ++checks;
    if (!parse_mode("as_published+ring_allreduce").has(Fix::RingAllReduce) ||
        parse_mode("corrected-ring_allreduce").has(Fix::RingAllReduce)) {
        std::printf("FAIL mode string +fix / -fix\n");
        ++failures;
    }

    // The grounded model: a table row prices its own shape at its measured latency; lookups
    // interpolate the time between rows and clamp the efficiency outside the measured range.
    {
        DeviceSpec d = h800(24);
        d.mem_gb = 80, d.mem_bw_gbps = 3350, d.nvlink_gbps = 200, d.scaleout_gbps = 50, d.comm_sms_decode = 0;
        KernelTables t;
        KernelShape a, b;
        a.m = 64, b.m = 256, a.n = b.n = 1536, a.k = b.k = 7168;
        t.add_latency(TableFamily::kGemmFp8, a, 10.0, d);
        t.add_latency(TableFamily::kGemmFp8, b, 20.0, d);
        const double ra = datasheet_roofline_s(table_work(TableFamily::kGemmFp8, a), d);
        check_close(t.lookup(TableFamily::kGemmFp8, a).value, ra / 10e-6, 1e-12, "row efficiency");
        KernelShape mid = a;
        mid.m = 128;
        // Between rows the time is interpolated, linearly in the shape's roofline time.
        const double rb = datasheet_roofline_s(table_work(TableFamily::kGemmFp8, b), d);
        const double rm = datasheet_roofline_s(table_work(TableFamily::kGemmFp8, mid), d);
        const double t_mid = 10e-6 + (rm - ra) / (rb - ra) * (20e-6 - 10e-6);
        check_close(t.lookup(TableFamily::kGemmFp8, mid).value, rm / t_mid, 1e-12, "time interpolation");
        KernelShape big = a;
        big.m = 4096;
        ++checks;
        if (!t.lookup(TableFamily::kGemmFp8, big).clamped || t.lookup(TableFamily::kGemmFp8, mid).clamped) {
            std::printf("FAIL clamp flag\n");
            ++failures;
        }
        // The lookup memo never serves stale rows: a row added after a lookup changes the answer
        // (here: a faster row at the looked-up shape), and a copy's new rows leave the original's.
        {
            KernelTables copy = t;
            const double before = copy.lookup(TableFamily::kGemmFp8, mid, &d).value;
            copy.add_latency(TableFamily::kGemmFp8, mid, 5.0, d);
            check_close(copy.lookup(TableFamily::kGemmFp8, mid, &d).value, rm / 5e-6, 1e-12, "memo after a new row");
            check_close(t.lookup(TableFamily::kGemmFp8, mid, &d).value, before, 1e-15, "memo per table copy");
            // The same shape priced on a device with a hundredth of the FP8 peak (compute-bound
            // there) is priced there: the answer of a fresh copy (nothing remembered for it), not
            // the first device's.
            DeviceSpec slow = d;
            slow.fp8_tflops = d.fp8_tflops / 100;
            const KernelTables fresh = t;
            const double on_slow = t.lookup(TableFamily::kGemmFp8, mid, &slow).value;
            check_close(on_slow, fresh.lookup(TableFamily::kGemmFp8, mid, &slow).value, 1e-15, "memo per device");
            ++checks;
            if (!(std::abs(on_slow - before) > 1e-3 * before)) {
                std::printf("FAIL memo keyed by the priced device (%g vs %g)\n", on_slow, before);
                ++failures;
            }
        }
        check_throws([&] { t.add_latency(TableFamily::kGemmFp8, a, -1.0, d); }, "negative latency");
        check_throws([&] { t.add_bandwidth(TableFamily::kGemmFp8, 8, 50); }, "bandwidth for a compute family");
        check_throws([] { table_family_from_name("gemm_int4"); }, "unknown family");

        // A larger M measured faster caps the smaller M's time (it can run padded), and between
        // two attention batch groups the time grows with the batch.
        KernelTables mono;
        KernelShape small = a, large = a;
        small.m = 64, large.m = 128;
        mono.add_latency(TableFamily::kGemmFp8, small, 30.0, d);
        mono.add_latency(TableFamily::kGemmFp8, large, 20.0, d);
        auto us = [&](const KernelTables& t, TableFamily f, const KernelShape& s) {
            return datasheet_roofline_s(table_work(f, s), d) / t.lookup(f, s, &d).value * 1e6;
        };
        check_close(us(mono, TableFamily::kGemmFp8, small), 20.0, 1e-9, "capped by the larger row");
        KernelShape q;
        q.kv_len = 4096, q.batch = 1;
        mono.add_latency(TableFamily::kMlaDecode, q, 25.0, d);
        q.batch = 16;
        mono.add_latency(TableFamily::kMlaDecode, q, 60.0, d);
        double prev = 0;
        for (double b : {1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 32.0}) {
            q.batch = b;
            const double t = us(mono, TableFamily::kMlaDecode, q);
            ++checks;
            if (!(t >= prev && t >= 25.0 - 1e-9)) {
                std::printf("FAIL attention time not monotone in batch: %g us at batch %g after %g\n", t, b, prev);
                ++failures;
            }
            prev = t;
        }
        check_close(prev / 60.0, 2.0, 1e-9, "beyond the last group: its efficiency");

        Deployment dep;
        dep.batch = 64, dep.kv_len = 4096, dep.ep = 128;
        const StepResult r = step(m, d, t, dep);
        ++checks;
        if (!(r.step_ms > 0 && std::isfinite(r.step_ms) && r.calls_default > 0 && r.calls_from_table + r.calls_clamped > 0)) {
            std::printf("FAIL step: %f ms, %d from table, %d default\n", r.step_ms, r.calls_from_table, r.calls_default);
            ++failures;
        }
        Deployment serial = dep;
        serial.overlap = Overlap::kNone;
        ++checks;
        if (!(step(m, d, t, serial).step_ms >= r.step_ms)) {
            std::printf("FAIL two-batch overlap slower than none\n");
            ++failures;
        }
        check_throws([&] { Deployment bad = dep; bad.mtp = 1, bad.mtp_accepted = 2; step(m, d, t, bad); },
                     "mtp_accepted > mtp");
        check_throws([&] { Deployment bad = dep; bad.attn_tp = 3; step(m, d, t, bad); }, "attn_tp = 3");
        // Node-limited routing: 8 groups on 4 nodes, 4 groups picked: 4 (1 - C(6,4)/C(8,4)) x 3/4.
        check_close(expected_remote_nodes(m, 32, 8), 4 * (1 - 15.0 / 70) * 0.75, 1e-12, "remote nodes EP32");
        check_close(expected_remote_nodes(m, 8, 8), 0, 0, "remote nodes EP8");

        // The explorer's grid: infeasible points kept with their reason, feasible ones equal to step().
        ExploreGrid g;
        g.devices = {d};
        g.tables = {&t};
        g.ep = {128, 400}, g.redundant_experts = {0, 0}, g.attn_tp = {1, 3};
        g.mtp = {0}, g.mtp_accepted = {0}, g.kv_fp8 = {0}, g.overlap = {int(Overlap::kTwoBatch)};
        g.batch = {64}, g.kv_len = 4096;
        const size_t n = g.size();
        std::vector<int32_t> i32(9 * n);
        std::vector<double> f64(10 * n);
        bool b1[4], b2[4];
        ExploreColumns c{&i32[0], &i32[n], &i32[2 * n], &i32[3 * n], &i32[4 * n], &i32[5 * n], &i32[6 * n], b1, b2,
                         &f64[0], &f64[n], &f64[2 * n], &f64[3 * n], &f64[4 * n], &f64[5 * n], &f64[6 * n],
                         &f64[7 * n], &f64[8 * n]};
        explore_decode(m, g, c);
        ++checks;
        // rows: ep 128 (tp 1, tp 3), ep 400 (tp 1, tp 3)
        if (!(n == 4 && c.infeasible[0] == 0 && c.infeasible[1] == int(Infeasible::kTpDoesNotDivideNode) &&
              c.infeasible[2] == int(Infeasible::kEpExceedsExperts) && std::isnan(c.step_ms[1]))) {
            std::printf("FAIL explore grid reasons\n");
            ++failures;
        }
        Deployment same = dep;
        same.batch = 64, same.ep = 128, same.kv_len = 4096;
        check_close(c.step_ms[0], step(m, d, t, same).step_ms, 1e-9, "explore row equals step()");
        check_throws([&] { ExploreGrid bad = g; bad.batch = {}; bad.validate(m); }, "empty batch axis");
    }

    // Input bounds: counts that would be narrowed or overflow downstream are refused.
    check_throws([&] { ModelConfig bad; bad.n_layers = int64_t(1) << 31; bad.validate(); }, "n_layers = 2**31");
    check_throws([&] { ModelConfig bad; bad.route_scale = NAN; bad.validate(); }, "route_scale = NaN");
    check_throws([&] { DeviceSpec d = h800(24); d.seed_decode_tp = 128; d.validate(); }, "seed_decode_tp = 128");
    check_throws([&] { DeviceSpec d = h800(24); d.mem_gb = INFINITY; d.validate(); }, "mem_gb = inf");

    // The sweep's row count is checked: 1000**7 rows overflow size_t, and 3 x 59 x 379 x 653 x 937 x
    // 1723 x 2393 rows fit but their 109-byte rows wrap (the Python binding bounds rows at 2**24).
    auto grid = [&](std::vector<size_t> n) {
        DecodeGrid g;
        g.devices.assign(n[0], h800(24));
        g.tp.assign(n[1], 0), g.ep.assign(n[2], 144), g.redundant_experts.assign(n[2], 32);
        g.kv_fp8.assign(n[3], 1), g.seq_len.assign(n[4], 4383), g.decode_len.assign(n[5], 1210);
        g.batch.assign(n[6], 32);
        return g;
    };
    check_throws([&] { grid({1000, 1000, 1000, 1000, 1000, 1000, 1000}).size(); }, "sweep rows overflow");
    ++checks;
    if (grid({3, 59, 379, 653, 937, 1723, 2393}).size() != size_t(169236184162482357ULL)) {
        std::printf("FAIL sweep row count\n");
        ++failures;
    }
    {   // A small sweep into caller-owned columns, under the sanitizers.
        DecodeGrid g = grid({2, 2, 1, 2, 2, 1, 3});
        const size_t n = g.size();
        std::vector<int32_t> i0(n), i1(n), i2(n), i3(n), i4(n);
        std::vector<double> d[11];
        for (auto& v : d) v.assign(n, -1);
        std::vector<char> kv(n);
        DecodeSweepColumns c{i0.data(), i1.data(), i2.data(), i3.data(), reinterpret_cast<bool*>(kv.data()),
                             d[0].data(), d[1].data(), d[2].data(), i4.data(), d[3].data(), d[4].data(), d[5].data(),
                             d[6].data(), d[7].data(), d[8].data(), d[9].data(), d[10].data()};
        decode_sweep(m, g, Fixes::none(), c);
        check_close(d[3][n - 1], decode(m, h800(24), dp, Fixes::none()).tpot_ms, 1e-9, "sweep's last TPOT");
    }

    std::printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
