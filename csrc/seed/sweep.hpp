// Vectorised decode evaluation: the Cartesian product of several axes in one call,
// written into caller-owned column arrays (the Python layer hands numpy buffers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "seed/decode.hpp"

namespace dsperf {

struct DecodeGrid {
    std::vector<DeviceSpec> devices;
    std::vector<int> tp;               // 0 = best-TP rule
    std::vector<int> ep;               // paired element-wise with redundant_experts
    std::vector<int> redundant_experts;
    std::vector<int> kv_fp8;           // 1 = FP8 KV cache, 0 = FP16
    std::vector<double> seq_len;
    std::vector<double> decode_len;
    std::vector<double> batch;         // innermost axis
    bool absorbed = true;
    double group_gemm_discount = 0.7;

    // Rows, in the order devices > tp > ep > kv_fp8 > seq_len > decode_len > batch; throws
    // std::invalid_argument when the product overflows size_t.
    size_t size() const;
    void validate(const ModelConfig& m) const;  // every axis non-empty, every point valid
};

// One pointer per output column, each with room for grid.size() values.
struct DecodeSweepColumns {
    int32_t* device_index;
    int32_t* tp;          // requested (0 = auto)
    int32_t* ep;
    int32_t* redundant_experts;
    bool* kv_fp8;
    double* seq_len;
    double* decode_len;
    double* batch;
    int32_t* mla_tp;      // chosen
    double* tpot_ms;
    double* tpot_overlap_ms;
    double* tps_user;
    double* tps_user_overlap;
    double* tokens_per_gpu_s;
    double* tokens_per_gpu_s_overlap;
    double* time_budget_ms;
    double* batch_limit;
};

// Fills out; the grid is validated first (std::invalid_argument names the axis).
void decode_sweep(const ModelConfig& m, const DecodeGrid& grid, const Fixes& fx, const DecodeSweepColumns& out);

}  // namespace dsperf
