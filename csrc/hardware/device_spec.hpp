// One accelerator as the cost model sees it: datasheet peaks plus the derating the
// seed analysis applies. Specs are data (python/dsperf/data/devices/*.toml).
#pragma once
#include <string>

namespace dsperf {

// The fields of a spec, declared once: (C++ type, name, default, required in a device file, lowest
// value, highest value, 0 allowed as "none"). The bounds are values a real part could have (a
// milli-TFLOPS part, a MB/s link, a 1% derating): a spec beyond them is a typo or a fuzzer, and
// tiny rates like 1e-308 made every result NaN. The struct, the Python binding's fields, their
// bounds (DeviceSpec.BOUNDS) and DeviceSpec.FIELDS (which python/dsperf/hardware.py reads device
// files by and calibrate writes them by) are all generated from this list.
#define DSPERF_DEVICE_SPEC_FIELDS(X)                                                                    \
    X(std::string, name, "", true, 0, 0, false)                                                       \
    X(int, sm_count, 0, true, 1, 1 << 20, false)                                                      \
    /* SMs reserved for all-to-all kernels during prefill, and during decode (0: low-latency kernels, \
       no reserved SMs); below sm_count too */                                                        \
    X(int, comm_sms_prefill, 0, true, 0, 1 << 20, true)                                               \
    X(int, comm_sms_decode, 0, true, 0, 1 << 20, true)                                                \
    /* dense BF16/FP16 and FP8 tensor peaks, datasheet (fp8 0: no FP8) */                             \
    X(double, fp16_tflops, 0, true, 1e-3, 1e9, false)                                                 \
    X(double, fp8_tflops, 0, true, 1e-3, 1e9, true)                                                   \
    /* dense FP4 (NVFP4) tensor peak, datasheet (0: no FP4 tensor cores) */                          \
    X(double, fp4_tflops, 0, false, 1e-3, 1e9, true)                                                  \
    /* sustained / datasheet peak (the seed uses 0.8; the seed model and kernel_cost only) */         \
    X(double, compute_derate, 1.0, true, 0.01, 1, false)                                              \
    /* grounded model: the SM clock under a sustained full load (computation and communication        \
       overlapped, at the power limit) over the clock the kernel tables ran at; the FLOPs of every    \
       call are priced at it (1: no lower clock known); the seed model does not read it */            \
    X(double, sustained_clock_ratio, 1.0, false, 0.05, 1, false)                                      \
    /* device memory, GB as printed on the datasheet; its bandwidth, GB/s */                          \
    X(double, mem_gb, 0, true, 1e-3, 1e9, false)                                                      \
    X(double, mem_bw_gbps, 0, true, 1e-3, 1e9, false)                                                 \
    /* scale-up bandwidth per GPU, one direction, and scale-out (RDMA NIC) per GPU, GB/s */           \
    X(double, nvlink_gbps, 0, true, 1e-3, 1e9, false)                                                 \
    X(double, scaleout_gbps, 0, true, 1e-3, 1e9, false)                                               \
    /* fraction of peak reached overall (compute, memory, links) */                                   \
    X(double, discount, 0.85, true, 0.01, 1, false)                                                   \
    X(int, gpus_per_node, 8, true, 1, 1024, false)                                                    \
    /* GPUs (runtime devices, one rank each) per chip as its vendor counts and publishes figures:     \
       2 on an Ascend 910C (two dies, each its own device), else 1; a GPU here is always one rank */  \
    X(int, gpus_per_chip, 1, false, 1, 64, false)                                                     \
    /* TP the seed's best-TP rule picks when TP beats TP1 (a power of two: the decode plan holds     \
       TPs 1, 2, ..., 64) */                                                                          \
    X(int, seed_decode_tp, 4, false, 1, 64, false)                                                    \
    /* kernel cost model only (grounded/kernel_cost.hpp): bandwidth of data resident in the          \
       last-level cache (0: unknown), and the fixed cost of one kernel call (launch, or Python -> C++) */ \
    X(double, cache_bw_gbps, 0, false, 1e-3, 1e9, true)                                               \
    X(double, call_overhead_us, 0, false, 1e-3, 1e9, true)

struct DeviceSpec {
#define DSPERF_DECLARE_FIELD(type, field, init, required, lo, hi, zero_ok) type field = init;
    DSPERF_DEVICE_SPEC_FIELDS(DSPERF_DECLARE_FIELD)
#undef DSPERF_DECLARE_FIELD

    void validate() const;           // throws std::invalid_argument naming the field

    // Effective rates in the seed's units: TFLOPS and GB/s, after derating, discount and the
    // SMs given to communication.
    double fp16_tflops_eff(int comm_sms) const;
    double fp8_tflops_eff(int comm_sms) const;
    double mem_bw_eff() const { return mem_bw_gbps * discount; }
    double nvlink_eff() const { return nvlink_gbps * discount; }
    double scaleout_eff() const { return scaleout_gbps * discount; }
};

}  // namespace dsperf
