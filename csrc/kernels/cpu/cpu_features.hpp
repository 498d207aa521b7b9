// What this CPU can run, probed once. Kernels dispatch on it at run time, so one build runs on
// any x86-64 (and, through the portable paths, on ARM).
#pragma once
#include <string>

namespace dsperf::kernels {

struct CpuFeatures {
    bool avx512 = false;       // AVX-512 F + BW + VL + DQ + VBMI, with the OS saving the zmm state
    bool avx512_bf16 = false;  // VDPBF16PS, advertised by CPUID
    bool avx512_bf16_hidden = false;  // VDPBF16PS runs although CPUID hides it (a hypervisor's mask)
    bool amx_bf16 = false;     // AMX tiles and BF16, and Linux granted the tile permission
    std::string isa;           // the micro-kernel family in use: "avx512_bf16" or "portable"
    std::string why;           // why that family (CPUID, or the DSPERF_ISA override)

    bool runs_dot_bf16() const { return avx512_bf16 || avx512_bf16_hidden; }
};

// Probed on first use. The environment variable DSPERF_ISA overrides the choice:
//   portable     the portable kernels (tests run both paths on one machine);
//   avx512_bf16  the AVX-512 BF16 kernels where CPUID hides BF16 but the CPU runs VDPBF16PS
//                (checked by running one in a child process): virtual machines often mask the
//                bit, and a guest that may migrate to a host without it should not set this.
// Any other value throws std::invalid_argument naming DSPERF_ISA, on every call.
const CpuFeatures& cpu_features();

// Whether the AVX-512 kernels run (the one test every dispatcher asks).
inline bool use_avx512() { return cpu_features().isa == "avx512_bf16"; }

}  // namespace dsperf::kernels
