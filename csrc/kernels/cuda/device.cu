// Which GPUs the CUDA runtime sees, device memory, and device-side validation of index arrays.
#include <atomic>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {

namespace {
std::atomic<bool> g_synchronous{true};
thread_local cudaStream_t t_stream = cudaStreamLegacy;
}  // namespace

cudaStream_t current_stream() { return t_stream; }
void set_current_stream(cudaStream_t s) { t_stream = s; }

bool capturing() {
    if (t_stream == cudaStreamLegacy) return false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(t_stream, &status) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return status == cudaStreamCaptureStatusActive;
}

bool synchronous_launches() { return g_synchronous.load(); }
void set_synchronous_launches(bool on) { g_synchronous.store(on); }

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

int multiprocessor_count(int device) {
    int n = 0;
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    return n;
}

int compute_capability(int device) {
    int major = 0, minor = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
    return major * 10 + minor;
}

void set_device(int device) {
    const int n = device_count();
    if (device < 0 || device >= n)
        throw std::invalid_argument("device " + std::to_string(device) + " is outside the " + std::to_string(n) +
                                    " GPUs CUDA sees");
    check(cudaSetDevice(device), "cudaSetDevice");
}

int current_device() {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    return d;
}

void synchronize() {
    refuse_in_capture("synchronize");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void* device_malloc(size_t bytes) {
    void* p = nullptr;
    if (bytes) check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

void device_free(void* p) {
    if (p) check(cudaFree(p), "cudaFree");
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
    refuse_in_capture("a copy from the host");
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    refuse_in_capture("a copy to the host");
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to the host");
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
    // Stream-ordered, so that it can be captured into a graph; waits unless launches are async.
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, current_stream()), "copy on the device");
    check_launch("copy on the device");
}

void fill_zero(void* p, size_t bytes) {
    if (!bytes) return;
    check(cudaMemsetAsync(p, 0, bytes, current_stream()), "cudaMemset");
    check_launch("cudaMemset");
}

int pointer_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) ? a.device : -1;
}

namespace {
// The smallest index of an entry outside [lo, hi): an atomicMin over the offenders.
__global__ void first_outside_kernel(const int32_t* v, int64_t n, int64_t lo, int64_t hi, unsigned long long* first) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        if (v[i] < lo || v[i] >= hi) atomicMin(first, static_cast<unsigned long long>(i));
}
}  // namespace

int64_t first_outside(const int32_t* v, int64_t n, int64_t lo, int64_t hi) {
    if (n <= 0) return -1;
    refuse_in_capture("a device-side value check");
    Scratch<unsigned long long> first(1);
    const unsigned long long none = ~0ull;
    check(cudaMemcpy(first.get(), &none, sizeof none, cudaMemcpyHostToDevice), "copy to the device");
    const unsigned blocks = blocks_for(n, 256) < 1024 ? blocks_for(n, 256) : 1024;
    first_outside_kernel<<<blocks, 256, 0, current_stream()>>>(v, n, lo, hi, first.get());
    check(cudaGetLastError(), "first_outside");
    unsigned long long got = 0;
    check(cudaMemcpy(&got, first.get(), sizeof got, cudaMemcpyDeviceToHost), "copy to the host");
    return got == none ? -1 : int64_t(got);
}

void check_range(const int32_t* v, int64_t n, int64_t lo, int64_t hi, const char* name) {
    const int64_t i = first_outside(v, n, lo, hi);
    if (i < 0) return;
    int32_t value = 0;
    check(cudaMemcpy(&value, v + i, sizeof value, cudaMemcpyDeviceToHost), "copy to the host");
    throw std::invalid_argument(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(value) +
                                " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
}

}  // namespace dsperf::cuda
