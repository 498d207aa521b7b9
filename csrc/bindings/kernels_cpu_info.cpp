// ISA, CPU features, the roofline probes and the AMX self-checks.
#include "bindings/kernel_args.hpp"
#include "kernels/common/cache.hpp"

namespace dsperf::bindings {

void bind_cpu_info(py::module_& m) {
    m.def("isa", [] { return cpu_features().isa; }, "The micro-kernel family in use");
    m.def("cpu_features", [] {
        const CpuFeatures& f = cpu_features();
        py::dict d;
        d["avx512"] = f.avx512, d["avx512_bf16"] = f.avx512_bf16, d["amx_bf16"] = f.amx_bf16, d["isa"] = f.isa;
        d["avx512_bf16_hidden"] = f.avx512_bf16_hidden;
        const std::string amx_status = amx::status();
        d["amx"] = amx_status;
        d["why"] = f.why + "; AMX: " + amx_status;
        return d;
    });

    m.def("probe_bf16_peak_gflops", [](double seconds) {
        py::gil_scoped_release nogil;
        return probe_bf16_peak_gflops(seconds);
    }, py::arg("seconds") = 0.5, "VDPBF16PS peak of all OpenMP threads, GFLOPS (0 without AVX-512 BF16)");
    m.def("probe_read_bandwidth_gbps", [](int64_t bytes, int repeats, int threads) {
        py::gil_scoped_release nogil;
        return probe_read_bandwidth_gbps(bytes, repeats, threads);
    }, py::arg("bytes") = int64_t(1) << 30, py::arg("repeats") = 3, py::arg("threads") = 0,
       "Streaming-read bandwidth, GB/s (threads 0: all)");
    m.def("probe_triad_bandwidth_gbps", [](int64_t bytes, int repeats, int threads) {
        py::gil_scoped_release nogil;
        return probe_triad_bandwidth_gbps(bytes, repeats, threads);
    }, py::arg("bytes") = int64_t(768) << 20, py::arg("repeats") = 3, py::arg("threads") = 0,
       "STREAM triad bandwidth, GB/s (threads 0: all)");
    m.def("probe_tile_peak_gflops", [](double seconds, bool operand_loads) {
        expect(seconds > 0 && seconds <= 60, "seconds must lie in (0, 60]");
        py::gil_scoped_release nogil;
        return amx::probe_tile_peak_gflops(seconds, operand_loads);
    }, py::arg("seconds") = 0.5, py::arg("operand_loads") = false,
       "AMX TDPBF16PS peak of all OpenMP threads, GFLOPS (0 where AMX is not usable); operand_loads: each "
       "2 x 2 step's four operand tiles loaded first (two from L1, two from L2), the ceiling of a GEMM's tile loop");
    m.def("probe_fp32_fma_peak_gflops", [](double seconds) {
        py::gil_scoped_release nogil;
        return probe_fp32_fma_peak_gflops(seconds);
    }, py::arg("seconds") = 0.5, "FP32 FMA peak of all OpenMP threads, GFLOPS");
    m.def("max_threads", [] {
#ifdef _OPENMP
        return omp_get_max_threads();
#else
        return 1;
#endif
    }, "OpenMP threads the kernels use");
    m.def("last_level_cache_bytes", &last_level_cache_bytes,
          "The last-level cache size the kernels choose streaming stores by (sysfs, then sysconf, then 32 MiB)");
    m.def("writes_past_cache", &writes_past_cache, py::arg("bytes"),
          "Whether a kernel call writing this many bytes writes them with streaming stores");
    m.def("linear_prefill_min_rows", &linear_prefill_min_rows,
          "Rows of x from which GEMMs leave the stream (decode) kernel for the prefill kernel (0: one kernel)");

    m.def("gemm_products", &gemm_products,
          "The AVX-512 GEMMs' products: 'dot' (VDPBF16PS) or 'fma' (widened FP32 FMAs), or 'portable'");

    m.def("amx_status", &amx::status, "'usable' where the GEMMs run on AMX tiles, else why not");
    m.def("amx_min_rows", [] {
        py::dict d;
        d["bf16"] = amx::kMinRows, d["fp8"] = amx::kMinRowsFp8, d["vnni"] = amx::kMinRowsVnni;
        return d;
    }, "Rows of x from which each GEMM (linear with BF16 or FP8 weights, gemm_bf16_vnni) runs on AMX where usable");
    m.def("amx_tile_config", [] {
        const std::vector<uint8_t> b = amx::tile_config_bytes();
        return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
    }, "The 64 bytes every LDTILECFG of the AMX kernels loads (empty where the build has no AMX code)");
    // The AMX driver on the scalar emulation of the tile instructions: its packing and tiling are
    // tested on CPUs without AMX.
    m.def("linear_amx_emulated", [](Arr<uint16_t> x, Arr<uint16_t> w) {
        expect(x.ndim() == 2 && w.ndim() == 2 && w.shape(1) == x.shape(1), "x [M, K] and w [N, K] expected");
        const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
        auto y = empty<float>({M, N}, "y [rows of x, rows of w]");
        py::gil_scoped_release nogil;
        amx::linear_bf16_emulated(x.data(), K, w.data(), K, y.mutable_data(), N, M, N, K, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("w").noconvert());
    m.def("gemm_vnni_amx_emulated", [](Arr<uint16_t> x, Arr<uint16_t> bp, int64_t N) {
        expect(x.ndim() == 2 && N >= 0, "x [M, K] and N >= 0 expected");
        const int64_t M = x.shape(0), K = x.shape(1);
        expect(bp.size() == checked_mul({(K + 1) / 2, N, 2}, "n"), "bp must hold ceil(K / 2) x N x 2 values");
        auto y = empty<float>({M, N}, "y [rows of x, n]");
        py::gil_scoped_release nogil;
        amx::gemm_bf16_vnni_emulated(x.data(), K, bp.data(), y.mutable_data(), N, M, N, K, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("bp").noconvert(), py::arg("n"));
    m.def("linear_fp8_amx_emulated", [](Arr<uint16_t> x, Arr<uint8_t> w, Arr<float> scale) {
        expect(x.ndim() == 2 && w.ndim() == 2 && w.shape(1) == x.shape(1), "x [M, K] and w [N, K] expected");
        const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
        expect(scale.ndim() == 2 && scale.shape(0) == fp8_scale_blocks(N) && scale.shape(1) == fp8_scale_blocks(K),
               "scale must be [ceil(N / 128), ceil(K / 128)]");
        auto y = empty<float>({M, N}, "y [rows of x, rows of w]");
        py::gil_scoped_release nogil;
        amx::linear_fp8_emulated(x.data(), K, w.data(), scale.data(), y.mutable_data(), N, M, N, K, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("w").noconvert(), py::arg("scale").noconvert());
    // Weights packed into tiles once (the bytes PackedWeights holds on an AMX CPU), then the emulated
    // driver on them: packing and the packed path tested on any CPU.
    m.def("linear_packed_amx_emulated", [](Arr<uint16_t> x, Arr<uint16_t> w) {
        expect(x.ndim() == 2 && w.ndim() == 2 && w.shape(1) == x.shape(1), "x [M, K] and w [N, K] expected");
        const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
        auto y = empty<float>({M, N}, "y [rows of x, rows of w]");
        py::gil_scoped_release nogil;
        const amx::PackedTiles packed = amx::pack_bf16(w.data(), K, N, K);
        amx::linear_packed_emulated(x.data(), K, M, packed, y.mutable_data(), N, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("w").noconvert());

}

}  // namespace dsperf::bindings
