// C++ checks of the core, independent of Python: a few published figures of the seed analysis
// and the argument checks. Run by ctest (cmake -DDSPERF_BUILD_TESTS=ON).
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "costmodel/decode.hpp"
#include "costmodel/prefill.hpp"
#include "costmodel/sweep.hpp"
#include "model/block_costs.hpp"

using namespace dsperf;

static int failures = 0, checks = 0;

static void check_close(double got, double want, double tol, const char* what) {
    ++checks;
    if (!(std::fabs(got - want) <= tol)) {
        std::printf("FAIL %s: got %.6f, want %.6f\n", what, got, want);
        ++failures;
    }
}

template <typename F>
static void check_throws(F f, const char* what) {
    ++checks;
    try {
        f();
        std::printf("FAIL %s: no exception\n", what);
        ++failures;
    } catch (const std::invalid_argument&) {
    }
}

static DeviceSpec h800(int comm_sms) {
    DeviceSpec d;
    d.name = "H800";
    d.sm_count = 132;
    d.comm_sms_prefill = comm_sms;
    d.fp16_tflops = 989.5;
    d.fp8_tflops = 1979;
    d.compute_derate = 0.8;
    d.mem_gb = 80;
    d.mem_bw_gbps = 3350;
    d.nvlink_gbps = 200;
    d.scaleout_gbps = 50;
    return d;
}

int main() {
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
