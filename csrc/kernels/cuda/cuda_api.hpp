// The CUDA kernels' host API: plain C++ (no CUDA types), so the bindings compile without nvcc.
//
// This first slice takes host arrays, copies them to the device, runs the kernel and copies the
// result back (synchronous). Device-resident arrays (DLPack / __cuda_array_interface__) are the
// next step. Every function checks its sizes on the host first and throws std::invalid_argument
// naming the argument; CUDA failures throw std::runtime_error with the CUDA error string.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cpu/moe.hpp"  // GateConfig: the same routing configuration and checks as the CPU

namespace dsperf::cuda {

// Devices the CUDA runtime sees (0 without a driver or a GPU), and why none where there is none.
int device_count();
std::string unavailable_reason();
std::string device_name(int device);

// y = x / rms(x) * w over rows of width dim (FP32).
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);

// out[t, i] = bf16(silu(gate_up[t, i]) * gate_up[t, inter + i]); out as raw BF16 bits.
void silu_mul(const float* gate_up, uint16_t* out, int64_t rows, int64_t inter);

// DeepSeek-V3 routing of FP32 logits [tokens, experts], one thread per token; the CPU moe_gate's
// semantics exactly (ties to the lower index).
void moe_gate(const float* logits, int64_t tokens, int64_t experts, const float* bias,
              const kernels::GateConfig& cfg, float* weights, int32_t* ids);

// out[r] = x[source[r]] (BF16 bits, rows of dim); source checked against [0, tokens).
void moe_permute(const uint16_t* x, int64_t tokens, int64_t dim, const int32_t* source, int64_t rows, uint16_t* out);

// out[t] = sum_k weights[t, k] * y_perm[position[t, k]] in slot order (FP32); position checked
// against [0, rows).
void moe_unpermute(const float* y_perm, int64_t rows, int64_t dim, const int32_t* position, const float* weights,
                   int64_t tokens, int64_t top_k, float* out);

}  // namespace dsperf::cuda
