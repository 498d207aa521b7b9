// Rotary position embedding on the GPU, DeepSeek-V3's interleaved convention: the pair (2i, 2i+1)
// is one complex number turned by positions[t] * freqs[i] (torch.view_as_complex in the reference
// model), exactly as the CPU's rope_inplace.
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {
namespace {

// One thread per (token, head, pair). The angle in FP32 as the CPU computes it; cosf/sinf with
// full range reduction (positions reach 10^5 radians and beyond).
__global__ void rope_kernel(uint16_t* x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head,
                            const int32_t* positions, const float* freqs, int64_t half) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= tokens * heads * half) return;
    const int64_t t = i / (heads * half), h = (i / half) % heads, p = i % half;
    const float angle = float(positions[t]) * freqs[p];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    uint16_t* e = x + t * ld_token + h * ld_head + 2 * p;
    const float a = bf16_bits_to_f32(e[0]), b = bf16_bits_to_f32(e[1]);
    e[0] = to_bf16_bits(a * cs - b * sn);
    e[1] = to_bf16_bits(a * sn + b * cs);
}

}  // namespace

void rope_inplace_bf16(uint16_t* x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head,
                       const int32_t* positions, const float* freqs, int64_t rope_dim) {
    if (tokens < 0 || heads <= 0 || rope_dim <= 0 || rope_dim % 2)
        throw std::invalid_argument("rope: tokens >= 0, heads > 0 and an even rope_dim are required");
    if (ld_head < rope_dim || ld_token < heads * ld_head)
        throw std::invalid_argument("rope: the strides must cover heads x rope_dim");
    if (tokens == 0) return;
    const int64_t n = tokens * heads * (rope_dim / 2);
    rope_kernel<<<blocks_for(n, 256), 256, 0, current_stream()>>>(x, tokens, heads, ld_token, ld_head, positions, freqs,
                                                                  rope_dim / 2);
    check_launch("rope");
}

}  // namespace dsperf::cuda
