// pybind11 face of the CPU kernels: the `kernels` submodule, one adapter file per family
// (kernels_*.cpp; what they share is in kernel_args.hpp). Each adapter validates what the
// kernels rely on, converts, releases the GIL and calls.
#include "bindings/kernel_args.hpp"

void bind_kernels(pybind11::module_& root) {
    pybind11::module_ m = root.def_submodule("kernels", "CPU kernels on raw BF16/FP8 bit arrays");
    using namespace dsperf::bindings;
    bind_cpu_info(m);
    bind_gemm_blocks(m);
    bind_mla(m);
    bind_moe(m);
    bind_decode_layer(m);
}
