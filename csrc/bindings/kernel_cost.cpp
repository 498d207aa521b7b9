// Python face of the kernel cost model (grounded/kernel_cost.hpp): dsperf._C.kernel_cost.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "grounded/kernel_cost.hpp"
#include "model/mla_calls.hpp"

namespace py = pybind11;
using namespace dsperf;

void bind_kernel_cost(py::module_& root) {
    py::module_ m = root.def_submodule("kernel_cost", "FLOPs, bytes and roofline time of single kernel calls");
    py::class_<KernelWork>(m, "KernelWork")
        .def(py::init<>())
        .def(py::init([](double flops, double bytes, bool fp8) { return KernelWork{flops, bytes, fp8}; }),
             py::arg("flops"), py::arg("bytes"), py::arg("fp8") = false)
        .def_readwrite("flops", &KernelWork::flops)
        .def_readwrite("bytes", &KernelWork::bytes)
        .def_readwrite("fp8", &KernelWork::fp8)
        .def("__iadd__", [](KernelWork& a, const KernelWork& b) { return a += b; })
        .def("__add__", [](KernelWork a, const KernelWork& b) { return a += b; })
        .def("__repr__", [](const KernelWork& w) {
            return "KernelWork(flops=" + std::to_string(w.flops) + ", bytes=" + std::to_string(w.bytes) +
                   (w.fp8 ? ", fp8=True)" : ")");
        });
    py::class_<KernelEfficiency>(m, "KernelEfficiency")
        .def(py::init([](double c, double mem, double o, double serial) { return KernelEfficiency{c, mem, o, serial}; }),
             py::arg("compute") = 1.0, py::arg("memory") = 1.0, py::arg("overhead_us") = 0.0,
             py::arg("serial") = 0.0)
        .def_readwrite("compute", &KernelEfficiency::compute)
        .def_readwrite("memory", &KernelEfficiency::memory)
        .def_readwrite("overhead_us", &KernelEfficiency::overhead_us)
        .def_readwrite("serial", &KernelEfficiency::serial)
        .def("validate", &KernelEfficiency::validate)
        .def("__repr__", [](const KernelEfficiency& e) {
            return "KernelEfficiency(compute=" + std::to_string(e.compute) + ", memory=" + std::to_string(e.memory) +
                   ", overhead_us=" + std::to_string(e.overhead_us) + ", serial=" + std::to_string(e.serial) + ")";
        });
    py::class_<MlaShape>(m, "MlaShape")
        .def(py::init([](int64_t dim, int64_t heads, int64_t q_lora, int64_t kv_lora, int64_t nope, int64_t rope,
                         int64_t v) { return MlaShape{dim, heads, q_lora, kv_lora, nope, rope, v}; }),
             py::arg("dim") = 7168, py::arg("heads") = 128, py::arg("q_lora") = 1536, py::arg("kv_lora") = 512,
             py::arg("nope") = 128, py::arg("rope") = 64, py::arg("v") = 128);
    m.def("roofline_times", [](const KernelWork& w, const DeviceSpec& d, bool cache_resident) {
        const RooflineTimes t = roofline_times(w, d, cache_resident);
        return py::make_tuple(t.compute_s, t.memory_s);
    }, py::arg("work"), py::arg("device"), py::arg("cache_resident") = false,
          "(compute seconds, memory seconds) at ideal efficiency");
    m.def("kernel_seconds", &kernel_seconds, py::arg("work"), py::arg("device"), py::arg("efficiency"),
          py::arg("cache_resident") = false);
    m.def("linear_work", &linear_work, py::arg("m"), py::arg("n"), py::arg("k"), py::arg("fp8") = false);
    m.def("gate_work", &gate_work, py::arg("tokens"), py::arg("dim"), py::arg("experts"), py::arg("top_k"));
    m.def("experts_work", &experts_work, py::arg("rows"), py::arg("active_experts"), py::arg("dim"), py::arg("inter"),
          py::arg("fp8") = false);
    py::enum_<EpLayout>(m, "EpLayout")
        .value("token", EpLayout::kToken)
        .value("expert", EpLayout::kExpert)
        .value("masked", EpLayout::kMasked);
    py::class_<EpExchange>(m, "EpExchange")
        .def_readonly("dispatch_bytes", &EpExchange::dispatch_bytes)
        .def_readonly("combine_bytes", &EpExchange::combine_bytes)
        .def_readonly("local_bytes", &EpExchange::local_bytes)
        .def_readonly("exchanges", &EpExchange::exchanges);
    m.def("ep_exchange", &ep_exchange, py::arg("tokens"), py::arg("hidden"), py::arg("top_k"), py::arg("experts"),
          py::arg("ranks"), py::arg("layout"), py::arg("fp8"));
    m.def("ep_window_exchange", &ep_window_exchange, py::arg("tokens"), py::arg("hidden"), py::arg("top_k"),
          py::arg("experts"), py::arg("ranks"), py::arg("layout"), py::arg("fp8"));
    m.def("ep_exchange_seconds", &ep_exchange_seconds, py::arg("exchange"), py::arg("link_gbps"),
          py::arg("latency_us"), py::arg("local_gbps"));
    m.def("dispatch_combine_work", &dispatch_combine_work, py::arg("tokens"), py::arg("top_k"), py::arg("dim"));
    m.def("mla_decode_work", &mla_decode_work, py::arg("keys"), py::arg("batch"), py::arg("q_len"), py::arg("heads"),
          py::arg("kv_lora") = 512, py::arg("rope") = 64, py::arg("fp8_cache") = false);
    // MLA variants by value (the index of a name in dsperf._C.kernels.MLA_VARIANTS), checked here.
    m.def("mla_forward_work", [](int v, int64_t t, int64_t p, const MlaShape& s) {
        return mla_forward_work(mla_variant_at(v), t, p, s);
    }, py::arg("variant"), py::arg("tokens"), py::arg("prefix"), py::arg("shape"));
    py::class_<GemmShape>(m, "GemmShape")
        .def_readonly("m", &GemmShape::m)
        .def_readonly("n", &GemmShape::n)
        .def_readonly("k", &GemmShape::k)
        .def_readonly("count", &GemmShape::count)
        .def("__repr__", [](const GemmShape& g) {
            return "GemmShape(m=" + std::to_string(g.m) + ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) +
                   ", count=" + std::to_string(g.count) + ")";
        });
    m.def("mla_gemms", [](int v, int64_t t, int64_t p, const MlaShape& s) {
        return mla_gemms(mla_variant_at(v), t, p, s);
    }, py::arg("variant"), py::arg("tokens"), py::arg("prefix"), py::arg("shape"));
    // The one list of a layer's calls that every cost model reads (model/mla_calls.hpp).
    py::class_<MlaCall>(m, "MlaCall")
        .def_property_readonly("name", [](const MlaCall& c) { return std::string(c.name()); })
        .def_property_readonly("part", [](const MlaCall& c) { return std::string(kMlaPartNames[int(c.part)]); })
        .def_property_readonly("gemm", &MlaCall::gemm)
        .def_readonly("m", &MlaCall::m)
        .def_readonly("n", &MlaCall::n)
        .def_readonly("k", &MlaCall::k)
        .def_readonly("count", &MlaCall::count)
        .def_readonly("per_head", &MlaCall::per_head)
        .def_readonly("qk", &MlaCall::qk)
        .def_readonly("v", &MlaCall::v)
        .def("__repr__", [](const MlaCall& c) {
            return std::string("MlaCall(") + c.name() + ", m=" + std::to_string(c.m) + ", n=" + std::to_string(c.n) +
                   ", k=" + std::to_string(c.k) + ", count=" + std::to_string(c.count) + ")";
        });
    m.attr("MLA_PARTS") = py::tuple(py::cast(std::vector<std::string>(std::begin(kMlaPartNames), std::end(kMlaPartNames))));
    m.def("mla_layer_calls", [](int v, int64_t t, int64_t p, const MlaShape& s) {
        const MlaCallList calls = mla_layer_calls(mla_variant_at(v), t, p, s);
        return std::vector<MlaCall>(calls.begin(), calls.end());
    }, py::arg("variant"), py::arg("tokens"), py::arg("prefix"), py::arg("shape"),
          "The calls of one MLA layer in a variant (by value), in the order they run: `tokens` new tokens after "
          "`prefix` cached ones.");
    m.def("mla_attention_work", [](int v, int64_t t, int64_t p, const MlaShape& s) {
        return mla_attention_work(mla_variant_at(v), t, p, s);
    }, py::arg("variant"), py::arg("tokens"), py::arg("prefix"), py::arg("shape"));
    m.def("rmsnorm_work", &rmsnorm_work, py::arg("tokens"), py::arg("width"));
}
