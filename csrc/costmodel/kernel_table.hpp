// Shape-dependent kernel efficiency tables: what a kernel family reaches of a device's datasheet
// roofline at a given shape, read from published kernel benchmarks (data/efficiency/*.csv).
//
// A compute row holds a measured latency at a shape; its efficiency is the datasheet roofline time
// of that shape on the table's device divided by the latency, computed with the same work
// functions (kernel_cost.hpp) that price the kernel later, so the FLOPs and bytes cancel. A
// communication row holds a measured bandwidth (GB/s) at an EP size.
//
// A compute lookup interpolates the call's time, not its efficiency, between the measured rows
// around it: along the primary axis within a group, and across the two groups that bracket a
// single secondary axis (the attention core's batch). The interpolation coordinate is the
// roofline time of each row's shape on the device being priced, so a shape with more work than
// another (a larger roofline time) never gets a smaller time as long as the rows' own latencies
// grow with their work. Interpolating efficiencies did not: a batch of 8 took the batch-1 row's
// launch-bound efficiency and cost 3x a batch of 16. Families with several secondary axes (GEMMs:
// n, k, experts) take the nearest group (in log space): those axes are a model's fixed shapes.
// Outside the measured range a lookup clamps the efficiency, saying so. Communication rows
// interpolate their GB/s linearly in log(ep).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/kernel_cost.hpp"

namespace dsperf {

// Families a table can hold. Primary axis / secondary axes of each:
//   gemm_fp8, gemm_bf16            m / (n, k)                 y[m, n] = x[m, k] w[n, k]^T
//   grouped_contiguous, _masked    rows per expert / (experts, n, k)   one projection of the experts
//   gemm_fp4, grouped_fp4          as gemm / grouped          NVFP4 weights and activations (Blackwell)
//   mla_decode                     kv_len / (batch)           FlashMLA-style absorbed decode
//   mla_prefill                    tokens / ()                causal attention core of one prompt
//   elementwise                    bytes / ()                 norms, RoPE, quantisation
//   dispatch_ll, combine_ll        ep / ()                    DeepEP low-latency kernels (GB/s)
//   dispatch_normal, combine_normal  ep / ()                  DeepEP normal kernels (GB/s)
//   allreduce                      tp / ()                    NCCL all-reduce bus bandwidth (GB/s)
enum class TableFamily : int {
    kGemmFp8,
    kGemmBf16,
    kGroupedContiguous,
    kGroupedMasked,
    kGemmFp4,
    kGroupedFp4,
    kMlaDecode,
    kMlaPrefill,
    kElementwise,
    kDispatchLowLatency,
    kCombineLowLatency,
    kDispatchNormal,
    kCombineNormal,
    kAllReduce,
    kCount
};
constexpr int kTableFamilyCount = static_cast<int>(TableFamily::kCount);

const std::vector<std::string>& table_family_names();
TableFamily table_family_from_name(const std::string& name);  // throws std::invalid_argument
bool is_comm_family(TableFamily f);

// The shape of one kernel call, in the fields its family uses (the rest are ignored).
struct KernelShape {
    double m = 0, n = 0, k = 0;  // GEMM sizes; for grouped GEMMs m = rows per expert
    double groups = 1;           // experts of a grouped GEMM; heads of a per-head (batched) GEMM
    double batch = 0;            // requests of an attention call
    double kv_len = 0;           // keys per request (mla_decode); prefix + tokens (mla_prefill)
    double heads = 128;          // query heads (attention)
    double q_len = 1;            // query tokens per request (decode: 1 + MTP drafts)
    double bytes = 0;            // elementwise kernels: bytes moved
    double ep = 1, tp = 1;       // communication
    bool fp8 = true;             // FP8 weights / FP8 KV cache
    bool fp8_math = false;       // attention: FP8 query-key and probability-value products (FP8 peak)
};

// FLOPs and bytes of one call of a compute family (kernel_cost's work functions).
KernelWork table_work(TableFamily f, const KernelShape& s);

// A family's primary axis value and secondary keys for a shape (at most three keys; fixed size so
// that a lookup allocates nothing).
struct TableKeys {
    double v[3] = {0, 0, 0};
    int n = 0;
};
double table_primary(TableFamily f, const KernelShape& s);
TableKeys table_keys(TableFamily f, const KernelShape& s);
// The KernelShape fields a table row of the family must give: those table_primary and table_keys
// read (the rest keep their defaults).
const std::vector<std::string>& table_row_fields(TableFamily f);

// Datasheet roofline of one call, seconds: no derating, no discount (the tables carry those).
// clock_ratio < 1 prices the FLOPs at a lower SM clock (the memory side is unchanged).
double datasheet_roofline_s(const KernelWork& w, const DeviceSpec& d, double clock_ratio = 1.0);

// Bounds on a table's figures: values a real kernel or link could have measured (1 ns .. 1000 s a
// call, 1 MB/s .. 1 PB/s a link), and on the efficiency the tables fall back to. A latency of
// 5e-324 us passed a "> 0" check and made every result NaN.
constexpr double kMinLatencyUs = 1e-3, kMaxLatencyUs = 1e9;
constexpr double kMinTableGbps = 1e-3, kMaxTableGbps = 1e9;
constexpr double kMinDefaultEfficiency = 1e-3, kMaxDefaultEfficiency = 1;

struct TableLookup {
    double value = 0;      // efficiency (compute) or GB/s (communication)
    bool found = false;    // false: the family has no rows; value is the default
    bool clamped = false;  // the shape lay outside the measured range of its group
};

// The rows a compute lookup interpolates between: up to two groups (bracketing a single secondary
// axis, else the nearest) and in each up to two points (bracketing the primary axis).
struct CurveSpan {
    int groups = 0;                  // 0: the curve is empty
    double key[2] = {0, 0};          // each group's secondary axis (single-axis curves)
    int points[2] = {0, 0};          // 1: the primary lies outside the group's rows (clamped) or on one
    double x[2][2] = {}, value[2][2] = {};
    bool clamped = false;
};

class EfficiencyCurve {
public:
    void add(const TableKeys& keys, double primary, double value);
    // Linear in log(primary) within the nearest group (communication rows).
    TableLookup at(const TableKeys& keys, double primary) const;
    CurveSpan span(const TableKeys& keys, double primary) const;
    bool empty() const { return groups_.empty(); }
    size_t rows() const;

private:
    struct Point {
        double log_x, x, value;
    };
    struct Group {
        TableKeys log_keys, keys;
        std::vector<Point> points;  // sorted by log_x
    };
    // The primary's place in a group: the one or two points around it.
    void bracket(const Group& g, double primary, CurveSpan& s, int slot) const;
    const Group* nearest_group(const TableKeys& keys) const;
    std::vector<Group> groups_;
    // Changes with every row added, never repeats across curves: a cached answer names it.
    uint64_t generation_ = next_generation();
    static uint64_t next_generation();
};

// One device's tables. Rows are added with the device the benchmark ran on; compute rows are
// turned into efficiencies against that device's datasheet.
class KernelTables {
public:
    // A measured latency (us) of `family` at `shape` on `measured_on`.
    void add_latency(TableFamily family, const KernelShape& shape, double latency_us, const DeviceSpec& measured_on);
    // A measured bandwidth (GB/s) of a communication family at ep (tp for all-reduce).
    void add_bandwidth(TableFamily family, double axis, double gbps);
    // The efficiency of a call of `family` at `shape` on `priced_on` (its FLOPs at clock_ratio of
    // the tables' clock), interpolated in time as the header says; without a device, on the device
    // the rows were measured on. FP8-math attention has no published per-shape benchmark here: it
    // takes the default.
    TableLookup lookup(TableFamily family, const KernelShape& shape, const DeviceSpec* priced_on = nullptr,
                       double clock_ratio = 1.0) const;
    size_t rows(TableFamily family) const { return curves_[static_cast<int>(family)].rows(); }

    // Used where a family has no rows: an efficiency, or a fraction of the link's datasheet rate.
    double default_efficiency = 0.6;

private:
    std::array<EfficiencyCurve, kTableFamilyCount> curves_;
    DeviceSpec measured_on_;  // of the compute rows (one table file, one device)
    bool has_measured_on_ = false;
};

}  // namespace dsperf
