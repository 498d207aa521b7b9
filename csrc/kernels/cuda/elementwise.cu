// RMSNorm, SiLU-and-multiply and 1x128 FP8 activation quantisation on the GPU.
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

__global__ void silu_mul_kernel(const float* gu, uint16_t* out, int64_t rows, int64_t inter) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * inter) return;
    const int64_t t = i / inter, c = i % inter;
    const float g = gu[t * 2 * inter + c], u = gu[t * 2 * inter + inter + c];
    out[i] = to_bf16_bits(g / (1.0f + expf(-g)) * u);
}

// One warp per (row, 128-value group): the group's amax by shuffles, then each lane quantises
// four values. 128 = 32 lanes x 4.
__global__ void act_quant_kernel(const uint16_t* x, int64_t rows, int64_t dim, int64_t groups, uint8_t* q,
                                 float* scales) {
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= rows * groups) return;
    const int64_t r = warp / groups, g = warp % groups;
    const int64_t k0 = g * 128, k1 = k0 + 128 < dim ? k0 + 128 : dim;
    float v[4];
    float amax = 0.0f;
    for (int j = 0; j < 4; ++j) {
        const int64_t k = k0 + lane + 32 * j;
        v[j] = k < k1 ? bf16_bits_to_f32(x[r * dim + k]) : 0.0f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = amax / 448.0f;
    if (lane == 0) scales[r * groups + g] = scale;
    for (int j = 0; j < 4; ++j) {
        const int64_t k = k0 + lane + 32 * j;
        if (k < k1) q[r * dim + k] = scale > 0.0f ? f32_to_fp8_bits(v[j] / scale) : uint8_t(0);
    }
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
    if (rows < 0 || dim <= 0) throw std::invalid_argument("rmsnorm: rows must be >= 0 and dim > 0");
    if (!(eps >= 0)) throw std::invalid_argument("rmsnorm: eps must be >= 0");
    if (rows == 0) return;
    rmsnorm_kernel<<<unsigned(rows), kThreads, 0, current_stream()>>>(x, w, y, dim, eps);
    check_launch("rmsnorm");
}

void silu_mul(const float* gate_up, uint16_t* out, int64_t rows, int64_t inter) {
    if (rows < 0 || inter <= 0) throw std::invalid_argument("silu_mul: rows must be >= 0 and inter > 0");
    if (rows == 0) return;
    silu_mul_kernel<<<blocks_for(rows * inter, kThreads), kThreads, 0, current_stream()>>>(gate_up, out, rows, inter);
    check_launch("silu_mul");
}

void act_quant(const uint16_t* x, int64_t rows, int64_t dim, uint8_t* q, float* scales) {
    if (rows < 0 || dim <= 0) throw std::invalid_argument("act_quant: rows must be >= 0 and dim > 0");
    if (rows == 0) return;
    const int64_t groups = (dim + 127) / 128;
    act_quant_kernel<<<blocks_for(rows * groups * 32, kThreads), kThreads, 0, current_stream()>>>(x, rows, dim, groups,
                                                                                                  q, scales);
    check_launch("act_quant");
}

}  // namespace dsperf::cuda
