// What this CPU can run, probed once. Kernels dispatch on it at run time, so one build runs on
// any x86-64 (and, through the portable paths, on ARM).
#pragma once
#include <string>

namespace dsperf::kernels {

struct CpuFeatures {
    bool avx512 = false;       // AVX-512 F + BW + VL, with the OS saving the zmm state
    bool avx512_bf16 = false;  // VDPBF16PS
    bool amx_bf16 = false;     // AMX tiles and BF16, and Linux granted the tile permission
    std::string isa;           // the micro-kernel family in use: "avx512_bf16" or "portable"
};

// Probed on first use. The environment variable DSPERF_ISA=portable forces the portable kernels
// (tests run both paths on one machine).
const CpuFeatures& cpu_features();

}  // namespace dsperf::kernels
