#include "kernels/cpu/cpu_features.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define DSPERF_X86 1
#endif

namespace dsperf::kernels {

namespace {

#ifdef DSPERF_X86
unsigned long long xgetbv0() {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// Linux makes a process ask before it may use AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx_permission() {
#if defined(__linux__)
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
    return false;
#endif
}
#endif

CpuFeatures probe() {
    CpuFeatures f;
#ifdef DSPERF_X86
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, nullptr) >= 7) {
        __cpuid(1, a, b, c, d);
        const bool osxsave = (c >> 27) & 1;
        const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
        const bool zmm_state = (xcr0 & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
        __cpuid_count(7, 0, a, b, c, d);
        const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
        const bool vbmi = (c >> 1) & 1;  // the FP8 kernels' byte permutes (VPERMT2B)
        const bool amx_tile = (d >> 24) & 1, amx_bf16 = (d >> 22) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        const bool bf16 = (a >> 5) & 1;
        // Every AVX-512 kernel is compiled for F, BW, VL, DQ and VBMI: a CPU without one of them
        // (Cooper Lake has BF16 but no VBMI) takes the portable path instead of faulting.
        f.avx512 = zmm_state && f512 && dq && bw && vl && vbmi;
        f.avx512_bf16 = f.avx512 && bf16;
        const bool tile_state = (xcr0 & (3ull << 17)) == (3ull << 17);
        f.amx_bf16 = amx_tile && amx_bf16 && tile_state && request_amx_permission();
    }
#endif
    const char* forced = std::getenv("DSPERF_ISA");
    const bool portable = forced && std::strcmp(forced, "portable") == 0;
    f.isa = (!portable && f.avx512_bf16) ? "avx512_bf16" : "portable";
    return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = probe();
    return features;
}

}  // namespace dsperf::kernels
