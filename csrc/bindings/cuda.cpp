// Python face of the CUDA kernels (dsperf._C.cuda). Built in every configuration: without CUDA
// the module reports why and every kernel raises, so Python code can ask rather than guess.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#ifdef DSPERF_WITH_CUDA
#include "kernels/cuda/cuda_api.hpp"
#endif
#include "kernels/cpu/moe.hpp"

namespace py = pybind11;

namespace {
template <typename T>
using Arr = py::array_t<T, py::array::c_style | py::array::forcecast>;

bool built_with_cuda() {
#ifdef DSPERF_WITH_CUDA
    return true;
#else
    return false;
#endif
}

// Why no kernel can run here ("" when one can).
std::string why_unavailable() {
#ifdef DSPERF_WITH_CUDA
    return dsperf::cuda::unavailable_reason();
#else
    return "dsperf was built without CUDA (no nvcc at build time, or DSPERF_CUDA=OFF)";
#endif
}

void require_gpu() {
    const std::string why = why_unavailable();
    if (!why.empty()) throw std::runtime_error("no CUDA device: " + why);
}
}  // namespace

void bind_cuda(py::module_& root) {
    py::module_ m = root.def_submodule("cuda", "CUDA kernels (host arrays in and out)");
    m.def("built_with_cuda", &built_with_cuda);
    m.def("why_unavailable", &why_unavailable, "Why no CUDA kernel can run here; empty when one can");
    m.def("device_count", [] {
#ifdef DSPERF_WITH_CUDA
        return dsperf::cuda::device_count();
#else
        return 0;
#endif
    });
#ifdef DSPERF_WITH_CUDA
    namespace C = dsperf::cuda;
    m.def("device_name", [](int d) { require_gpu(); return C::device_name(d); });
    m.def("rmsnorm", [](Arr<float> x, Arr<float> w, float eps) {
        require_gpu();
        const int64_t rows = x.shape(0), dim = x.shape(1);
        Arr<float> y({rows, dim});
        py::gil_scoped_release nogil;
        C::rmsnorm(x.data(), w.data(), y.mutable_data(), rows, dim, eps);
        return y;
    });
    m.def("silu_mul", [](Arr<float> gu) {
        require_gpu();
        const int64_t rows = gu.shape(0), inter = gu.shape(1) / 2;
        Arr<uint16_t> out({rows, inter});
        py::gil_scoped_release nogil;
        C::silu_mul(gu.data(), out.mutable_data(), rows, inter);
        return out;
    });
    m.def("moe_gate", [](Arr<float> logits, py::object bias, int64_t n_group, int64_t topk_group, int64_t top_k,
                         float route_scale, bool sigmoid) {
        require_gpu();
        dsperf::kernels::GateConfig cfg;
        cfg.n_group = n_group, cfg.topk_group = topk_group, cfg.top_k = top_k, cfg.route_scale = route_scale;
        cfg.score = sigmoid ? dsperf::kernels::ScoreFunc::Sigmoid : dsperf::kernels::ScoreFunc::Softmax;
        const int64_t T = logits.shape(0), E = logits.shape(1);
        Arr<float> b = bias.is_none() ? Arr<float>() : bias.cast<Arr<float>>();
        Arr<float> w({T, top_k});
        Arr<int32_t> ids({T, top_k});
        const float* bp = bias.is_none() ? nullptr : b.data();
        py::gil_scoped_release nogil;
        C::moe_gate(logits.data(), T, E, bp, cfg, w.mutable_data(), ids.mutable_data());
        return py::make_tuple(w, ids);
    });
    m.def("moe_permute", [](Arr<uint16_t> x, Arr<int32_t> source) {
        require_gpu();
        const int64_t tokens = x.shape(0), dim = x.shape(1), rows = source.shape(0);
        Arr<uint16_t> out({rows, dim});
        py::gil_scoped_release nogil;
        C::moe_permute(x.data(), tokens, dim, source.data(), rows, out.mutable_data());
        return out;
    });
    m.def("moe_unpermute", [](Arr<float> y_perm, Arr<int32_t> position, Arr<float> weights) {
        require_gpu();
        const int64_t rows = y_perm.shape(0), dim = y_perm.shape(1), T = position.shape(0), K = position.shape(1);
        Arr<float> out({T, dim});
        py::gil_scoped_release nogil;
        C::moe_unpermute(y_perm.data(), rows, dim, position.data(), weights.data(), T, K, out.mutable_data());
        return out;
    });
#else
    for (const char* name : {"device_name", "rmsnorm", "silu_mul", "moe_gate", "moe_permute", "moe_unpermute"}) {
        m.def(name, [](py::args, py::kwargs) -> py::object { require_gpu(); return py::none(); });
    }
#endif
}
