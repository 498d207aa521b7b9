// One accelerator as the cost model sees it: datasheet peaks plus the derating the
// seed analysis applies. Specs are data (python/dsperf/data/devices/*.toml).
#pragma once
#include <string>

namespace dsperf {

struct DeviceSpec {
    std::string name;
    int sm_count = 0;
    int comm_sms_prefill = 0;        // SMs reserved for all-to-all kernels during prefill
    int comm_sms_decode = 0;         // ... during decode (0: low-latency kernels, no reserved SMs)
    double fp16_tflops = 0;          // dense BF16/FP16 tensor peak, datasheet
    double fp8_tflops = 0;           // dense FP8 tensor peak, datasheet (0: no FP8)
    double compute_derate = 1.0;     // sustained / datasheet peak (the seed uses 0.8)
    double mem_gb = 0;               // device memory, GB as printed on the datasheet
    double mem_bw_gbps = 0;          // device memory bandwidth, GB/s
    double nvlink_gbps = 0;          // scale-up bandwidth per GPU, one direction, GB/s
    double scaleout_gbps = 0;        // scale-out (RDMA NIC) bandwidth per GPU, GB/s
    double discount = 0.85;          // fraction of peak reached overall (compute, memory, links)
    int gpus_per_node = 8;
    int seed_decode_tp = 4;          // TP the seed's best-TP rule picks when TP beats TP1
    // Kernel cost model only (costmodel/kernel_cost.hpp); the seed's model does not use them.
    double cache_bw_gbps = 0;        // bandwidth of data resident in the last-level cache (0: unknown)
    double call_overhead_us = 0;     // fixed cost of one kernel call (launch, or Python -> C++)

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
