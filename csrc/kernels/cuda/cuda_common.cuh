// Error checks and a device buffer for the CUDA kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace dsperf::cuda {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Device memory holding `count` T, freed on scope exit; copies to and from the host.
template <typename T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count_) check(cudaMalloc(&ptr_, count_ * sizeof(T)), "cudaMalloc");
    }
    DeviceBuffer(const T* host, size_t count) : DeviceBuffer(count) {
        if (count_) check(cudaMemcpy(ptr_, host, count_ * sizeof(T), cudaMemcpyHostToDevice), "copy to the device");
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (ptr_) cudaFree(ptr_);
    }
    void to_host(T* host) const {
        if (count_) check(cudaMemcpy(host, ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "copy to the host");
    }
    T* get() const { return ptr_; }

private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

// Launch-configuration helper: enough blocks of `threads` for n items.
inline unsigned blocks_for(long long n, unsigned threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

// After a launch: the launch error, then the kernel's own (synchronous path).
inline void check_launch(const char* kernel) {
    check(cudaGetLastError(), kernel);
    check(cudaDeviceSynchronize(), kernel);
}

}  // namespace dsperf::cuda
