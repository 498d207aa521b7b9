// RMSNorm and SiLU-and-multiply on the GPU.
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {
namespace {

constexpr unsigned kThreads = 256;

// One block per row: a block-wide sum of squares in double (as the CPU path), then the scaling.
__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int64_t dim, float eps) {
    __shared__ double partial[kThreads];
    const float* row = x + blockIdx.x * dim;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(row[i]) * row[i];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float r = float(1.0 / sqrt(partial[0] / dim + eps));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[blockIdx.x * dim + i] = row[i] * r * w[i];
}

// FP32 -> BF16 bits, round to nearest even, NaN kept quiet (the CPU's f32_to_bf16).
__device__ uint16_t to_bf16(float f) {
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

__global__ void silu_mul_kernel(const float* gu, uint16_t* out, int64_t rows, int64_t inter) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * inter) return;
    const int64_t t = i / inter, c = i % inter;
    const float g = gu[t * 2 * inter + c], u = gu[t * 2 * inter + inter + c];
    out[i] = to_bf16(g / (1.0f + expf(-g)) * u);
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
    if (rows < 0 || dim <= 0) throw std::invalid_argument("rmsnorm: rows must be >= 0 and dim > 0");
    if (!(eps >= 0)) throw std::invalid_argument("rmsnorm: eps must be >= 0");
    if (rows == 0) return;
    DeviceBuffer<float> dx(x, size_t(rows * dim)), dw(w, size_t(dim)), dy(size_t(rows * dim));
    rmsnorm_kernel<<<unsigned(rows), kThreads>>>(dx.get(), dw.get(), dy.get(), dim, eps);
    check_launch("rmsnorm");
    dy.to_host(y);
}

void silu_mul(const float* gate_up, uint16_t* out, int64_t rows, int64_t inter) {
    if (rows < 0 || inter <= 0) throw std::invalid_argument("silu_mul: rows must be >= 0 and inter > 0");
    if (rows == 0) return;
    DeviceBuffer<float> dg(gate_up, size_t(rows * 2 * inter));
    DeviceBuffer<uint16_t> dout(size_t(rows * inter));
    silu_mul_kernel<<<blocks_for(rows * inter, kThreads), kThreads>>>(dg.get(), dout.get(), rows, inter);
    check_launch("silu_mul");
    dout.to_host(out);
}

}  // namespace dsperf::cuda
