#include "hardware/device_spec.hpp"

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <stdexcept>
#include <utility>

namespace dsperf {

namespace {
void require(bool ok, const std::string& device, const char* field, const std::string& what) {
    if (!ok)
        throw std::invalid_argument("device '" + device + "' field '" + field + "' " + what);
}
// Fraction of the SMs left for compute.
double compute_sm_fraction(const DeviceSpec& d, int comm_sms) {
    return double(d.sm_count - comm_sms) / d.sm_count;
}
}  // namespace

namespace {
std::string bound_text(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

// A numeric field within its declared bounds (device_spec.hpp), or 0 where 0 means "none".
template <class T>
void require_bounds(const std::string& device, const char* field, T value, double lo, double hi, bool zero_ok) {
    if constexpr (std::is_arithmetic_v<T>) {
        const double v = static_cast<double>(value);
        if (zero_ok && v == 0) return;
        if (!(std::isfinite(v) && v >= lo && v <= hi))
            require(false, device, field,
                    "must lie in [" + bound_text(lo) + ", " + bound_text(hi) + "]" + (zero_ok ? " or be 0" : "") +
                        " (the range a real part could have), got " + bound_text(v));
    }
}
}  // namespace

void DeviceSpec::validate() const {
    require(!name.empty(), "<unnamed>", "name", "must be non-empty");
#define DSPERF_CHECK_FIELD(type, field, init, required, lo, hi, zero_ok) \
    require_bounds<type>(name, #field, field, lo, hi, zero_ok);
    DSPERF_DEVICE_SPEC_FIELDS(DSPERF_CHECK_FIELD)
#undef DSPERF_CHECK_FIELD
    require(comm_sms_prefill < sm_count, name, "comm_sms_prefill", "must lie in [0, sm_count)");
    require(comm_sms_decode < sm_count, name, "comm_sms_decode", "must lie in [0, sm_count)");
    // The decode plan holds TPs 1, 2, ..., 64 (seed/decode_plan.hpp).
    require((seed_decode_tp & (seed_decode_tp - 1)) == 0, name, "seed_decode_tp", "must be a power of two in [1, 64]");
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
