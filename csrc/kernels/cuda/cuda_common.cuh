// Error checks, launch policy, scratch buffers and scalar conversions shared by the CUDA kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace dsperf::cuda {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Whether every launch waits for its kernel (the default: errors surface at the call that caused
// them). Benchmarks turn it off to time back-to-back launches and synchronise once.
bool synchronous_launches();

// The stream kernels launch on: this thread's, the legacy default stream unless a CUDA graph is
// being captured (graph.cu).
cudaStream_t current_stream();
// Whether the current stream is capturing a CUDA graph: synchronisation, host copies and scratch
// allocations are then refused (they would break the capture or dangle in the graph).
bool capturing();
inline void refuse_in_capture(const char* what) {
    if (capturing())
        throw std::runtime_error(std::string(what) +
                                 " cannot run while a CUDA graph is captured (preallocate "
                                 "outputs, pass validate=False, and warm up before capturing)");
}

// After a launch: the launch error, then (synchronous mode, not capturing) the kernel's own.
inline void check_launch(const char* kernel) {
    check(cudaGetLastError(), kernel);
    if (synchronous_launches() && !capturing()) check(cudaStreamSynchronize(current_stream()), kernel);
}

// Device scratch memory of `count` T, freed on scope exit (temporaries inside one kernel call).
template <typename T>
class Scratch {
public:
    explicit Scratch(size_t count) : count_(count) {
        if (count_) refuse_in_capture("a kernel needing scratch memory");
        if (count_) check(cudaMalloc(&ptr_, count_ * sizeof(T)), "cudaMalloc (scratch)");
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
        // cudaFree waits for the work queued on the device, so a kernel still reading the scratch
        // finishes first; errors here cannot be reported from a destructor.
        if (ptr_) cudaFree(ptr_);
    }
    T* get() const { return ptr_; }

private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

// Launch-configuration helper: enough blocks of `threads` for n items.
inline unsigned blocks_for(long long n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// FP32 -> BF16 bits, round to nearest even, NaN kept quiet (the CPU's f32_to_bf16).
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// FP8 e4m3fn bits -> FP32 (exact: every e4m3 value is a float, and a BF16 too).
__device__ __forceinline__ float fp8_bits_to_f32(uint8_t b) {
    __nv_fp8_e4m3 v;
    v.__x = b;
    return float(v);
}

// FP32 -> FP8 e4m3fn bits, round to nearest even, saturating at +-448 (act_quant's values stay
// within range by construction: |x / scale| <= 448).
__device__ __forceinline__ uint8_t f32_to_fp8_bits(float f) {
    return uint8_t(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace dsperf::cuda
