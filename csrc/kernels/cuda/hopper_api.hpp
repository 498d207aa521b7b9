// The Hopper (sm_90a) kernels' host API, beside cuda_api.hpp's: plain C++, so the bindings compile
// without nvcc. On an sm_90 GPU dsperf.cuda takes these kernels by default for the calls whose
// inputs pass the rules below (variant="wgmma" insists, "mma" declines): see docs/CUDA.md.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_api.hpp"

namespace dsperf::cuda {

// The Hopper kernels' input rules, declared once: the kernels refuse what these name, and
// dsperf.cuda asks them (bound in every build) before it builds a call, so the two say the same
// thing. Each gives "" where the input is accepted, else what the kernel needs, phrased to follow
// the name of what was asked for ("variant='wgmma' needs ...").
inline std::string grouped_gemm_wgmma_operands_reason(bool a_fp8, bool b_fp8) {
    if (a_fp8 == b_fp8) return "";
    return std::string("takes BF16 x BF16 or FP8 x FP8 (no Hopper kernel dequantises FP8 weights), got ") +
           (a_fp8 ? "FP8" : "BF16") + " a and " + (b_fp8 ? "FP8" : "BF16") + " b";
}
inline std::string grouped_gemm_wgmma_k_reason(bool fp8, int64_t K) {
    const int64_t align = fp8 ? 16 : 8;  // TMA row strides are whole 16 bytes
    if (K % align == 0) return "";
    return "needs K % " + std::to_string(align) + " == 0 for " + (fp8 ? "FP8" : "BF16") +
           " (TMA row strides are whole 16 bytes), got K = " + std::to_string(K);
}
// The page size alone: what a plan (dsperf.cuda.get_mla_metadata) knows of a call before its widths.
inline std::string mla_decode_wgmma_block_reason(int64_t block_size) {
    if (block_size != 64)
        return "needs latent_cache blocks of 64 tokens (block_size, one TMA tile per page), got " +
               std::to_string(block_size);
    return "";
}
inline std::string mla_decode_wgmma_shape_reason(int64_t kv_lora, int64_t rope, int64_t block_size) {
    if (kv_lora != 512 || rope != 64)
        return "needs kv_lora = 512 and rope = 64 (DeepSeek's q_nope / q_rope widths), got " + std::to_string(kv_lora) +
               " and " + std::to_string(rope);
    return mla_decode_wgmma_block_reason(block_size);
}

// Whether `device` can run the sm_90a kernels (compute capability exactly 9.0: an "a" image runs
// on no other); "" when it can, else why not.
std::string wgmma_unsupported_reason(int device);

// grouped_gemm's contract (cuda_api.hpp: both layouts, offsets / counts checked on the device when
// g.check_values) on Hopper's instructions: TMA tile loads into a multi-stage shared-memory ring
// with mbarrier completion, a producer warpgroup and two consumer warpgroups on wgmma, and a
// persistent schedule over (expert, m-tile, n-tile). BF16 x BF16 with K % 8 == 0, or FP8 x FP8
// (a_scale and b_scale, DeepGEMM's semantics) with K % 16 == 0; 16-byte aligned a, b and c (TMA's
// row strides and bases). Anything else (BF16 x FP8 weights included), or a device that is not
// sm_90, throws std::invalid_argument naming variant='wgmma'. g validated by the caller.
void grouped_gemm_wgmma(const GroupedGemm& g);

// The device-side checks of g's offsets (contiguous) or counts (masked) that grouped_gemm runs
// when g.check_values (grouped_gemm.cu), shared with the Hopper kernel.
void check_grouped_gemm_values(const GroupedGemm& g);

// mla_decode's contract (cuda_api.hpp's MlaDecode: the plan's work items, the same merge of partials)
// on Hopper's instructions: TMA loads of each 64-token page into a 2-stage shared-memory ring with
// mbarrier completion, a producer warpgroup, and two consumer warpgroups on wgmma (scores and
// P V, 64 query rows per CTA), mla_decode_sm90.cu. kv_lora 512, rope_dim 64 and block_size 64
// only, BF16 latent cache or FP8 with latent_scale (dequantised to BF16 in shared memory); anything
// else, or a device that is not sm_90, throws std::invalid_argument naming variant='wgmma'. d
// validated by the caller.
void mla_decode_wgmma(const MlaDecode& d);
// Why d's settings have no Hopper kernel ("" when they have one; the device is not looked at).
std::string mla_decode_wgmma_unsupported(const MlaDecode& d);

// mla_decode with the block kernel chosen by the caller (mla_decode.cu): the device-side value
// checks, the partial workspace, `launch` (which writes every partial output and LSE of the plan)
// and the log-sum-exp merge.
using MlaBlockLaunch = void (*)(const MlaDecode& d, float* part_o, float* part_lse);
void mla_decode_with(const MlaDecode& d, MlaBlockLaunch launch);

}  // namespace dsperf::cuda
