// What the C++ tests share: checks that count and print what failed (main() returns report()),
// and the GH100 device specs they price on.
#pragma once
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "hardware/device_spec.hpp"

namespace dsperf_test {

inline int failures = 0, checks = 0;

inline void check(bool ok, const char* what) {
    ++checks;
    if (!ok) {
        std::printf("FAIL %s\n", what);
        ++failures;
    }
}

inline void check_close(double got, double want, double tol, const char* what) {
    ++checks;
    if (!(std::fabs(got - want) <= tol)) {
        std::printf("FAIL %s: got %.6f, want %.6f\n", what, got, want);
        ++failures;
    }
}

template <typename F>
void check_throws(F f, const char* what) {
    ++checks;
    try {
        f();
        std::printf("FAIL %s: no exception\n", what);
        ++failures;
    } catch (const std::invalid_argument&) {
    }
}

// "<passed> passed, <failed> failed" under a name; the exit status.
inline int report(const char* name) {
    std::printf("%s: %d passed, %d failed\n", name, checks - failures, failures);
    return failures ? 1 : 0;
}

// A GH100 SXM part (H800, H100, H200 differ in memory and NVLink): the datasheet values the tests
// price on.
inline dsperf::DeviceSpec gh100(const std::string& name, double mem_gb, double mem_bw_gbps, double nvlink_gbps,
                                int comm_sms_prefill) {
    dsperf::DeviceSpec d;
    d.name = name;
    d.sm_count = 132;
    d.comm_sms_prefill = comm_sms_prefill;
    d.fp16_tflops = 989.5;
    d.fp8_tflops = 1979;
    d.mem_gb = mem_gb;
    d.mem_bw_gbps = mem_bw_gbps;
    d.nvlink_gbps = nvlink_gbps;
    d.scaleout_gbps = 50;
    return d;
}

}  // namespace dsperf_test
