// Python face of the Hopper (sm_90a) kernels, in dsperf._C.cuda beside cuda.cpp's: opt-in until
// measured correct on a GPU (variant="wgmma" of dsperf.cuda.grouped_gemm and dsperf.cuda.mla_decode;
// docs/CUDA.md). Bound in every build: without CUDA the calls raise why, as cuda.cpp's do.
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/hopper_api.hpp"  // plain C++

namespace py = pybind11;

void bind_cuda_hopper(py::module_& root) {
    py::module_ m = root.attr("cuda").cast<py::module_>();
#ifdef DSPERF_WITH_CUDA
    namespace C = dsperf::cuda;
    // The same argument struct as grouped_gemm (GroupedGemmArgs), validated here once.
    m.def(
        "grouped_gemm_wgmma",
        [](const C::GroupedGemm& g, int device) {
            g.validate();
            C::set_device(device);
            py::gil_scoped_release nogil;
            C::grouped_gemm_wgmma(g);
        },
        py::arg("args"), py::arg("device"));
    // The same argument struct as mla_decode (MlaDecodeArgs), validated here once.
    m.def(
        "mla_decode_wgmma",
        [](const C::MlaDecode& a, int device) {
            a.validate();
            C::set_device(device);
            py::gil_scoped_release nogil;
            C::mla_decode_wgmma(a);
        },
        py::arg("args"), py::arg("device"));
    m.def(
        "wgmma_unsupported_reason",
        [](int device) {
            C::set_device(device);
            return C::wgmma_unsupported_reason(device);
        },
        py::arg("device"));
#else
    py::object why = m.attr("why_unavailable");
    for (const char* name : {"grouped_gemm_wgmma", "mla_decode_wgmma", "wgmma_unsupported_reason"})
        m.def(name, [why](py::args, py::kwargs) -> py::object {
            throw std::runtime_error("no CUDA device: " + why().cast<std::string>());
        });
#endif
}
