// Hopper (sm_90a) building blocks in inline PTX: mbarriers, TMA tile loads, warpgroup MMA (wgmma)
// and its shared-memory matrix descriptors, and the warpgroup register hand-over (setmaxnreg).
//
// Everything here exists only where the compiler targets sm_90a (DSPERF_SM90A below): wgmma and
// setmaxnreg are arch-specific ("a") features, so the sm_80 image of the same file must not see
// them. Kernels that use these wrap their bodies in `#ifdef DSPERF_SM90A` and trap otherwise; the
// host launches them only on a compute capability 9.0 device.
//
// Facts used (PTX ISA, "Asynchronous Warpgroup Level Matrix" sections; cuda.h's
// cuTensorMapEncodeTiled documentation):
// - a shared-memory matrix descriptor is 64 bits: start address >> 4 in bits 0-13, leading
//   dimension byte offset >> 4 in bits 16-29, stride dimension byte offset >> 4 in bits 32-45,
//   base offset in bits 49-51, swizzle mode in bits 62-63 (1 = 128-byte swizzle);
// - a TMA box with CU_TENSOR_MAP_SWIZZLE_128B has an inner dimension of at most 128 bytes; rows of
//   exactly 128 bytes are written in 8-row, 1024-byte atoms with the 16-byte chunks of row r
//   permuted by r % 8, the layout the 128-byte swizzle mode of the descriptor reads.
#pragma once
#include <cstdint>

#include "kernels/cuda/mma_sm80.cuh"  // smem_addr

#include <cuda.h>  // CUtensorMap (host side: the maps are encoded in grouped_gemm_sm90.cu)

namespace dsperf::cuda {
// A row-major matrix [rows, K] of BF16 (or FP8 bytes) read by TMA in boxes of box_rows x 128 bytes
// with the 128-byte swizzle; out-of-range elements read as zero (grouped_gemm_sm90.cu).
CUtensorMap rows_map(const void* base, bool fp8, int64_t rows, int64_t K, int box_rows);
}  // namespace dsperf::cuda

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSPERF_SM90A 1
#endif

#ifdef DSPERF_SM90A
namespace dsperf::cuda::sm90 {

// ---- mbarrier (shared-memory transaction barriers) ---------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) before any thread uses them.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Waits until the phase with this parity has completed. A fresh barrier counts the phase before
// its first (parity 1) as complete, so a producer waiting on "slot free" starts at parity 1.
// The loop is in C++ rather than with PTX labels: an inlined asm block with labels would repeat
// them at every call site.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}

// ---- TMA ----------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// The box at (c0 innermost, c1) of a 2-D tensor map into shared memory; completion is counted in
// bytes on `bar`. Elements outside the tensor are filled with zeros (and still counted).
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar, int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
            "r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}

// ---- warpgroup register hand-over ---------------------------------------------------------------
// The producer warpgroup needs few registers, the consumers' accumulators many: the producer gives
// its share back and the consumers take it (counts are multiples of 8, summed over the block they
// must fit the 64 K registers of the SM).
template <int kRegs>
__device__ __forceinline__ void regs_release() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_claim() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- wgmma --------------------------------------------------------------------------------------
// Descriptor of a K-major tile whose rows are 128 bytes (64 BF16), written by TMA with the 128-byte
// swizzle: 8-row atoms 1024 bytes apart (the stride offset); the leading offset is not used by
// swizzled K-major layouts (set to 1 as a placeholder). The tile must start on a 1024-byte boundary
// so that the hardware's swizzle (address bits 4-6 XOR bits 7-9) matches the one TMA applied; a
// k-step of 16 elements inside the row is then a plain +32 bytes on the start address.
__device__ __forceinline__ uint64_t desc_k_major_sw128(const void* tile) {
    const uint64_t addr = smem_addr(tile);
    return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Descriptor of an MN-major tile (B operand read transposed: its N dimension contiguous) made of
// 128-byte rows written by TMA with the 128-byte swizzle: rows are the K dimension, 8-row atoms
// 1024 bytes apart along K (the stride offset), and each further 64 BF16 of N lies `n_stride` bytes
// on (the leading offset: the next TMA box). Must start on a 1024-byte boundary; a k-step of 16
// rows is +2048 bytes on the start address. (PTX ISA, "Canonical Layouts": 128B-swizzled MN-major is
// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 BF16: LBO steps along MN, SBO along K.)
__device__ __forceinline__ uint64_t desc_mn_major_sw128(const void* tile, uint32_t n_stride) {
    const uint64_t addr = smem_addr(tile);
    return ((addr & 0x3FFFF) >> 4) | (uint64_t((n_stride >> 4) & 0x3FFF) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 62);
}

// Makes this thread's generic-proxy writes to shared memory visible to the async proxy (wgmma
// operands written by threads, or a TMA that refills the buffer next).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A named barrier among `threads` threads (a multiple of 32) of the block; id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulators across the asynchronous MMAs
// (the registers change under it between the issue and the wait).
template <int kN>
__device__ __forceinline__ void fence_registers(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[64 x 256] (+)= a[64 x 16] b[256 x 16]^T, BF16 in, FP32 accumulate; a K-major in shared memory,
// b K-major (kTransB = 0) or MN-major (kTransB = 1: b's rows are K, desc_mn_major_sw128), scale_d = 0
// overwrites d. Each thread of the warpgroup holds 128 floats.
#define DSPERF_D8(i)                                                                                         \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
template <int kTransB = 0>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                      int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, %131;\n}\n"
        : DSPERF_D8(0), DSPERF_D8(8), DSPERF_D8(16), DSPERF_D8(24), DSPERF_D8(32), DSPERF_D8(40), DSPERF_D8(48),
          DSPERF_D8(56), DSPERF_D8(64), DSPERF_D8(72), DSPERF_D8(80), DSPERF_D8(88), DSPERF_D8(96), DSPERF_D8(104),
          DSPERF_D8(112), DSPERF_D8(120)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// d[64 x 32] (+)= a[64 x 16] b[32 x 16]^T, BF16 in, FP32 accumulate; a and b K-major in shared
// memory, scale_d = 0 overwrites d. Each thread of the warpgroup holds 16 floats.
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : DSPERF_D8(0), DSPERF_D8(8)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d[64 x 128] (+)= a[64 x 32] b[128 x 32]^T, FP8 e4m3 in, FP32 accumulate; a and b K-major in shared
// memory (descriptors: a row of 128 FP8 is 128 bytes, so the same 128-byte swizzle as BF16's 64),
// scale_d = 0 overwrites d. Each thread of the warpgroup holds 64 floats.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : DSPERF_D8(0), DSPERF_D8(8), DSPERF_D8(16), DSPERF_D8(24), DSPERF_D8(32), DSPERF_D8(40), DSPERF_D8(48),
          DSPERF_D8(56)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#undef DSPERF_D8

}  // namespace dsperf::cuda::sm90
#endif  // DSPERF_SM90A
