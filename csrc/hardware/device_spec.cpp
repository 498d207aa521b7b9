#include "hardware/device_spec.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

namespace dsperf {

namespace {
void require(bool ok, const std::string& device, const char* field, const char* what) {
    if (!ok)
        throw std::invalid_argument("device '" + device + "' field '" + field + "' " + what);
}
// Fraction of the SMs left for compute.
double compute_sm_fraction(const DeviceSpec& d, int comm_sms) {
    return double(d.sm_count - comm_sms) / d.sm_count;
}
}  // namespace

// Upper bound on the rate and size fields (TFLOPS, GB, GB/s, us): far above any device, low enough
// that the cost model's products stay finite.
constexpr double kMaxRate = 1e9;

void DeviceSpec::validate() const {
    require(!name.empty(), "<unnamed>", "name", "must be non-empty");
    require(sm_count > 0 && sm_count <= (1 << 20), name, "sm_count", "must lie in [1, 2**20]");
    for (auto [value, field] : {std::pair<double, const char*>{fp16_tflops, "fp16_tflops"}, {fp8_tflops, "fp8_tflops"},
                                {fp4_tflops, "fp4_tflops"},
                                {compute_derate, "compute_derate"}, {mem_gb, "mem_gb"}, {mem_bw_gbps, "mem_bw_gbps"},
                                {nvlink_gbps, "nvlink_gbps"}, {scaleout_gbps, "scaleout_gbps"}, {discount, "discount"},
                                {cache_bw_gbps, "cache_bw_gbps"}, {call_overhead_us, "call_overhead_us"}})
        require(std::isfinite(value) && value <= kMaxRate, name, field, "must be finite and <= 1e9");
    require(comm_sms_prefill >= 0 && comm_sms_prefill < sm_count, name, "comm_sms_prefill",
            "must lie in [0, sm_count)");
    require(comm_sms_decode >= 0 && comm_sms_decode < sm_count, name, "comm_sms_decode",
            "must lie in [0, sm_count)");
    require(fp16_tflops > 0, name, "fp16_tflops", "must be positive");
    require(fp8_tflops >= 0, name, "fp8_tflops", "must be >= 0");
    require(fp4_tflops >= 0, name, "fp4_tflops", "must be >= 0");
    require(compute_derate > 0 && compute_derate <= 1, name, "compute_derate", "must lie in (0, 1]");
    require(sustained_clock_ratio > 0 && sustained_clock_ratio <= 1, name, "sustained_clock_ratio",
            "must lie in (0, 1]");
    require(mem_gb > 0, name, "mem_gb", "must be positive");
    require(mem_bw_gbps > 0, name, "mem_bw_gbps", "must be positive");
    require(nvlink_gbps > 0, name, "nvlink_gbps", "must be positive");
    require(scaleout_gbps > 0, name, "scaleout_gbps", "must be positive");
    require(discount > 0 && discount <= 1, name, "discount", "must lie in (0, 1]");
    require(gpus_per_node > 0 && gpus_per_node <= 1024, name, "gpus_per_node", "must lie in [1, 1024]");
    // The decode plan holds TPs 1, 2, ..., 64 (costmodel/decode_plan.hpp).
    require(seed_decode_tp > 0 && seed_decode_tp <= 64 && (seed_decode_tp & (seed_decode_tp - 1)) == 0, name,
            "seed_decode_tp", "must be a power of two in [1, 64]");
    require(cache_bw_gbps >= 0, name, "cache_bw_gbps", "must be >= 0");
    require(call_overhead_us >= 0, name, "call_overhead_us", "must be >= 0");
}

double DeviceSpec::fp16_tflops_eff(int comm_sms) const {
    return fp16_tflops * compute_derate * discount * compute_sm_fraction(*this, comm_sms);
}

double DeviceSpec::fp8_tflops_eff(int comm_sms) const {
    // A device without FP8 runs the FP8 GEMMs at its FP16 rate.
    const double peak = fp8_tflops > 0 ? fp8_tflops : fp16_tflops;
    return peak * compute_derate * discount * compute_sm_fraction(*this, comm_sms);
}

}  // namespace dsperf
