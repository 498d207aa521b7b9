// pybind11 face of the expert-parallel helpers (EPLB). python/dsperf/ep/eplb.py checks the
// arguments' types and shapes; the core re-checks the values and names the bad argument.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "ep/eplb.hpp"

namespace py = pybind11;
using namespace dsperf::ep;

namespace {

template <typename T>
using Arr = py::array_t<T, py::array::c_style | py::array::forcecast>;

// load [layers, num_logical] -> (phy2log [layers, P], log2phy [layers, L, R], logcnt [layers, L], hierarchical)
py::tuple rebalance(const Arr<double>& load, int64_t num_physical, int64_t num_groups, int64_t num_nodes,
                    int64_t num_gpus, const std::string& policy_name) {
    if (load.ndim() != 2) throw std::invalid_argument("load must be 2-D [layers, experts]");
    const EplbPolicy policy = parse_eplb_policy(policy_name);
    const int64_t layers = load.shape(0), L = load.shape(1);
    std::vector<EplbPlan> plans(layers);
    {
        py::gil_scoped_release release;
        for (int64_t l = 0; l < layers; ++l)
            plans[l] = rebalance_experts(load.data(l, 0), L, num_physical, num_groups, num_nodes, num_gpus, policy);
    }
    int64_t R = 1;
    for (const auto& p : plans) R = std::max(R, p.max_replicas);
    Arr<int32_t> phy2log({layers, num_physical});
    Arr<int32_t> log2phy({layers, L, R});
    Arr<int32_t> logcnt({layers, L});
    auto a = phy2log.mutable_unchecked<2>();
    auto b = log2phy.mutable_unchecked<3>();
    auto c = logcnt.mutable_unchecked<2>();
    for (int64_t l = 0; l < layers; ++l) {
        const EplbPlan& p = plans[l];
        for (int64_t s = 0; s < num_physical; ++s) a(l, s) = p.phy2log[s];
        for (int64_t e = 0; e < L; ++e) {
            c(l, e) = p.logcnt[e];
            for (int64_t r = 0; r < R; ++r) b(l, e, r) = r < p.max_replicas ? p.log2phy[e * p.max_replicas + r] : -1;
        }
    }
    const bool hier = layers > 0 && plans[0].hierarchical;
    return py::make_tuple(phy2log, log2phy, logcnt, hier);
}

double imbalance(const Arr<double>& load, const Arr<int32_t>& phy2log, const Arr<int32_t>& logcnt, int64_t num_gpus) {
    if (load.ndim() != 1 || phy2log.ndim() != 1 || logcnt.ndim() != 1)
        throw std::invalid_argument("imbalance takes one layer: 1-D load, phy2log and logcnt");
    if (logcnt.shape(0) != load.shape(0))
        throw std::invalid_argument("logcnt must have one entry per logical expert (" + std::to_string(load.shape(0)) +
                                    "), got " + std::to_string(logcnt.shape(0)));
    return placement_imbalance(load.data(), load.shape(0), phy2log.data(), phy2log.shape(0), logcnt.data(), num_gpus);
}

}  // namespace

void bind_ep(py::module_& root) {
    py::module_ m = root.def_submodule("ep", "expert-parallel helpers: EPLB");
    m.def("rebalance", &rebalance, py::arg("load"), py::arg("num_physical"), py::arg("num_groups"),
          py::arg("num_nodes"), py::arg("num_gpus"), py::arg("policy"));
    m.def("imbalance", &imbalance, py::arg("load"), py::arg("phy2log"), py::arg("logcnt"), py::arg("num_gpus"));
}
