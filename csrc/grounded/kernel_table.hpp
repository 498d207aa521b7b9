// Shape-dependent kernel efficiency tables: what a kernel family reaches of a device's datasheet
// roofline at a given shape, read from published kernel benchmarks (data/efficiency/*.csv).
//
// A compute row holds a measured latency at a shape; its efficiency is the datasheet roofline time
// of that shape on the table's device divided by the latency, computed with the same work
// functions (kernel_cost.hpp) that price the kernel later, so the FLOPs and bytes cancel. A
// communication row holds a measured bandwidth (GB/s) at an EP size.
//
// A compute lookup interpolates the call's time, not its efficiency, between the measured rows
// around it: along the primary axis within a group, and across the two groups that bracket the
// first secondary axis where that axis grows with the work (the attention core's query rows, a
// grouped GEMM's experts). The time is a blend of the rows' times on the device being priced, the
// blend's weights the query's place between the rows in roofline time on the device the rows were
// measured on, and never more than any larger row or group of the table takes (a smaller call can
// run padded to a larger measured shape). So a call with more work never gets a smaller time, even
// where a table's rows do not grow with their work, and a slower device never a smaller one.
// Interpolating efficiencies did neither: a batch of 8 took the batch-1 row's launch-bound
// efficiency and cost 3x a batch of 16. A GEMM's n and k (a model's fixed shapes) take the nearest
// group (in log space). Outside the measured range a lookup clamps the efficiency, saying so. Communication rows
// interpolate their GB/s linearly in log(ep).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grounded/allreduce_table.hpp"
#include "grounded/kernel_cost.hpp"

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

// The links the network table's communication rows were measured on: DeepEP's tables come from
// H800 nodes (NVLink 200 GB/s per direction, one 50 GB/s RDMA NIC per GPU). A device table's own
// rows are read against their link and stored as fractions of these (dsperf.grounded).
constexpr double kTableNvlinkGbps = 200, kTableNicGbps = 50;

const std::vector<std::string>& table_family_names();
TableFamily table_family_from_name(const std::string& name);  // throws std::invalid_argument
bool is_comm_family(TableFamily f);
// The attention core's families: their rows and calls carry a product precision (KernelShape::fp8_math).
bool is_attention_family(TableFamily f);

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
// Whether a call of the family reads FP8 operands (FP8 weights, or an FP8 latent cache): the dtype a
// GPU timing of the call runs in (dsperf measure-gpu --step). gemm_fp8 always, gemm_bf16 never, the
// grouped GEMMs and the attention cache where the shape says so; the rest move BF16.
bool table_reads_fp8(TableFamily f, const KernelShape& s);

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

// A compute call's work and its roofline time on the priced device at the priced clock: what a
// call's price reads beside its efficiency. KernelTables::lookup fills it on request and remembers
// it with its answer (a sweep prices the same calls millions of times).
struct CallWork {
    KernelWork work;
    double roofline_s = 0;
};

// How a compute lookup prices against its rows (KernelTables::lookup supplies both for the call
// being priced): row_time(x, key, value), the time of the call's shape moved to primary x and
// first secondary axis key (0: its own) at a row's efficiency, on the device being priced; and
// measured_roof(x, key), that shape's roofline time on the device the rows were measured on.
// Both are template parameters, not std::function: a sweep prices millions of calls, each reading
// a dozen rows, and the indirect calls cost a fifth of the explorer's time.

class EfficiencyCurve {
public:
    void add(const TableKeys& keys, double primary, double value);
    // Linear in log(primary) within the nearest group (communication rows).
    TableLookup at(const TableKeys& keys, double primary) const;
    // The time of a call at (keys, primary), interpolated between its rows as the header says.
    // across_first_key: interpolate across the groups that share the nearest group's other axes
    // along the first one, instead of taking the nearest group. Sets *clamped when the primary
    // lies outside the rows of a group used.
    // Defined (and instantiated) in kernel_table.cpp, its only caller.
    template <class RowTime, class MeasuredRoof>
    double time(const TableKeys& keys, double primary, bool across_first_key, const RowTime& row_time,
                const MeasuredRoof& measured_roof, bool* clamped) const;
    bool empty() const { return groups_.empty(); }
    // The keys of the group nearest to `keys` in log space (the curve is not empty); with
    // other_axes, nearest in every key but the first (a grouped GEMM's n and k, whatever its expert
    // count: the width its rows were timed at).
    const TableKeys& nearest_keys(const TableKeys& keys, bool other_axes = false) const {
        return nearest_group(keys, other_axes)->keys;
    }
    // Changes whenever a row is added: a memo keyed by curve and generation never serves stale rows.
    uint64_t generation() const { return generation_; }
    size_t rows() const;

private:
    struct Point {
        double log_x, x, value;
    };
    struct Group {
        TableKeys log_keys, keys;
        std::vector<Point> points;  // sorted by log_x
        // best_from[i]: the highest value among points[i..]; lets group_time stop reading larger
        // rows once none of them could take less time than it already has.
        std::vector<double> best_from;
    };
    // One group's time at the primary (key: its first secondary axis, 0 to keep the call's own).
    template <class RowTime, class MeasuredRoof>
    double group_time(const Group& g, double primary, double key, const RowTime& row_time,
                      const MeasuredRoof& measured_roof, bool* clamped) const;
    // Whether a primary (in log) lies outside a group's rows: a lookup there is clamped.
    static bool outside_rows(const Group& g, double log_primary);
    // The primary group_time blends from at the lowest: the primary itself outside the rows, else
    // the row at or below it (a lower bound of the group's time reads it).
    static double floor_primary(const Group& g, double primary);
    const Group* nearest_group(const TableKeys& keys, bool other_axes = false) const;
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
    // A measured bandwidth (GB/s) of a communication family at ep (tp for all-reduce): the network
    // table's rows (normal kernels over NVLink at EP8 and over RDMA beyond, low-latency kernels over
    // RDMA NICs), read by calls that cross nodes and, where the device has no rows of its own, by
    // calls inside its scale-up domain (the EP8 NVLink row scaled to its link).
    void add_bandwidth(TableFamily family, double axis, double gbps);
    // A dispatch/combine bandwidth the device's own benchmark timed inside its scale-up domain at ep
    // (DeepEP's Ascend port inside a CloudMatrix384 supernode, DeepEP across a GB200 NVL72 rack), in
    // the same units as add_bandwidth's rows of that family: calls inside the domain read these at
    // their own EP; calls between domains still read the network rows.
    void add_domain_bandwidth(TableFamily family, double ep, double gbps);
    // The domain rows of a family at shape.ep (found false where it has none).
    TableLookup lookup_domain(TableFamily family, const KernelShape& shape) const;
    bool has_domain_rows(TableFamily family) const { return !domain_curves_[static_cast<int>(family)].empty(); }
    // The efficiency of a call of `family` at `shape` on `priced_on` (its FLOPs at clock_ratio of
    // the tables' clock), interpolated in time as the header says; without a device, on the device
    // the rows were measured on. FP8-math attention has no published per-shape benchmark here: it
    // takes the default. work: where given, the call's CallWork (compute families).
    TableLookup lookup(TableFamily family, const KernelShape& shape, const DeviceSpec* priced_on = nullptr,
                       double clock_ratio = 1.0, CallWork* work = nullptr) const;
    size_t rows(TableFamily family) const { return curves_[static_cast<int>(family)].rows(); }

    // Used where a family has no rows: an efficiency, or a fraction of the link's datasheet rate.
    double default_efficiency = 0.6;
    // Latencies of the TP all-reduce by message size (allreduce_table.hpp); empty: priced by bandwidth.
    AllReduceTable allreduce;

private:
    // A compute family's lookup from its rows (lookup remembers its recent answers).
    TableLookup price_from_rows(TableFamily family, const KernelShape& shape, const DeviceSpec* priced_on,
                                double clock_ratio) const;
    std::array<EfficiencyCurve, kTableFamilyCount> curves_;
    std::array<EfficiencyCurve, kTableFamilyCount> domain_curves_;  // add_domain_bandwidth's rows
    DeviceSpec measured_on_;  // of the compute rows (one table file, one device)
    bool has_measured_on_ = false;
};

}  // namespace dsperf
