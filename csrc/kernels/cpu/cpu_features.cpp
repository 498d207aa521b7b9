#include "kernels/cpu/cpu_features.hpp"

#include "kernels/cpu/child_check.hpp"

#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <immintrin.h>
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

// One VDPBF16PS: 1.0 x 1.0 + 1.0 x 1.0 = 2 in every lane (the input opaque, so that the compiler
// cannot fold the instruction away).
__attribute__((target("avx512f,avx512bf16"))) bool dot_bf16_once() {
    __m512i one = _mm512_set1_epi16(0x3f80);
    __asm__ volatile("" : "+v"(one));
    const __m512 sum = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)one, (__m512bh)one);
    return _mm512_cmpeq_ps_mask(sum, _mm512_set1_ps(2.0f)) == 0xffff;
}

// Whether the CPU runs VDPBF16PS: tried in a child process, so that an illegal instruction ends the
// child, not the caller (no signal handler of the host process is touched). Empty when it ran,
// else why not.
std::string dot_bf16_fails() { return fails_in_child(&dot_bf16_once); }
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
    const std::string want = forced ? forced : "";
    if (!want.empty() && want != "portable" && want != "avx512_bf16")
        throw std::invalid_argument("DSPERF_ISA must be portable or avx512_bf16 (or unset), not '" + want + "'");
    f.isa = "portable";
    if (want == "portable") {
        f.why = "DSPERF_ISA=portable";
    } else if (f.avx512_bf16) {
        f.isa = "avx512_bf16";
        f.why = "CPUID: AVX-512 with BF16";
    } else if (!f.avx512) {
        f.why = "CPUID: no AVX-512 (F, BW, VL, DQ, VBMI with the zmm state)";
    } else if (want != "avx512_bf16") {
        f.why = "CPUID: AVX-512 without BF16 (if a hypervisor hides it, DSPERF_ISA=avx512_bf16 tries it)";
    } else {
        std::string fails = "the check needs x86-64";
#ifdef DSPERF_X86
        fails = dot_bf16_fails();
#endif
        f.avx512_bf16_hidden = fails.empty();
        if (f.avx512_bf16_hidden) {
            f.isa = "avx512_bf16";
            f.why = "DSPERF_ISA=avx512_bf16: CPUID hides BF16, and a VDPBF16PS ran in a child process";
        } else {
            f.why = "DSPERF_ISA=avx512_bf16 asked, but a VDPBF16PS in a child process failed: " + fails;
        }
    }
    return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = probe();
    return features;
}

}  // namespace dsperf::kernels
