// Which GPUs the CUDA runtime sees.
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error of a machine without a driver
        return 0;
    }
    return n;
}

std::string unavailable_reason() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return std::string("the CUDA runtime reports: ") + cudaGetErrorString(e);
    }
    return n > 0 ? std::string() : std::string("the CUDA runtime sees no GPU");
}

std::string device_name(int device) {
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    return p.name;
}

}  // namespace dsperf::cuda
