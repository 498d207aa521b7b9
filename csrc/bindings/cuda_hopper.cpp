// Python face of the Hopper (sm_90a) kernels, in dsperf._C.cuda beside cuda.cpp's: variant="wgmma"
// of dsperf.cuda.grouped_gemm and dsperf.cuda.mla_decode, their default on an sm_90 GPU
// (docs/CUDA.md). Bound in every build: without CUDA the calls raise why, as cuda.cpp's do.
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/hopper_api.hpp"  // plain C++

namespace py = pybind11;

#ifdef DSPERF_WITH_CUDA
namespace {
// A Hopper kernel over the argument struct of its mma.sync twin (GroupedGemmArgs, MlaDecodeArgs):
// the struct validated here once, the call on its device without the GIL.
template <typename Args, void (*Kernel)(const Args&)>
void def_struct_kernel(py::module_& m, const char* name) {
    m.def(
        name,
        [](const Args& a, int device) {
            a.validate();
            dsperf::cuda::set_device(device);
            py::gil_scoped_release nogil;
            Kernel(a);
        },
        py::arg("args"), py::arg("device"));
}
}  // namespace
#endif

void bind_cuda_hopper(py::module_& root) {
    py::module_ m = root.attr("cuda").cast<py::module_>();
    namespace C = dsperf::cuda;
    // The input rules (hopper_api.hpp), in every build: dsperf.cuda checks a call with them before
    // building it, and the kernels refuse what they name.
    m.def("grouped_gemm_wgmma_operands_reason", &C::grouped_gemm_wgmma_operands_reason, py::arg("a_fp8"),
          py::arg("b_fp8"));
    m.def("grouped_gemm_wgmma_k_reason", &C::grouped_gemm_wgmma_k_reason, py::arg("fp8"), py::arg("k"));
    m.def("mla_decode_wgmma_shape_reason", &C::mla_decode_wgmma_shape_reason, py::arg("kv_lora"), py::arg("rope"),
          py::arg("block_size"));
    m.def("mla_decode_wgmma_block_reason", &C::mla_decode_wgmma_block_reason, py::arg("block_size"));
#ifdef DSPERF_WITH_CUDA
    def_struct_kernel<C::GroupedGemm, &C::grouped_gemm_wgmma>(m, "grouped_gemm_wgmma");
    def_struct_kernel<C::MlaDecode, &C::mla_decode_wgmma>(m, "mla_decode_wgmma");
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
