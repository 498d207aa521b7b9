// The warp-level tensor-core building blocks (sm_80 and up) that the mma.sync kernels share:
// the BF16 m16n8k16 product, ldmatrix fragment loads and cp.async copies.
//
// Fragments of mma.m16n8k16 (16-bit A row-major, B "col", i.e. stored [n][k]), lane = 4 g + t:
// A regs 0/1 hold rows g / g + 8 at k 2t, 2t + 1, regs 2/3 the same rows at k 2t + 8, 2t + 9;
// B reg 0 holds column g at k 2t, 2t + 1, reg 1 at k 2t + 8, 2t + 9; accumulators 0/1 are row g
// at columns 2t, 2t + 1, accumulators 2/3 row g + 8.
#pragma once
#include <cstdint>

namespace dsperf::cuda {

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 16-bit matrices from shared memory; lanes 8j .. 8j + 7 give the 16-byte row addresses
// of matrix j, and register j receives matrix j's fragment (lane l: row l / 4, elements 2 (l % 4)
// and 2 (l % 4) + 1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// The same, transposed: lane l receives column l / 4 at rows 2 (l % 4) and 2 (l % 4) + 1 -- the B
// fragment of a matrix stored [k][n].
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// Row addresses for ldmatrix_x4 of a 16 x 16 A tile at (row0, k0) of a row-major [rows][ld] array:
// matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = A regs 0..3.
__device__ __forceinline__ const uint16_t* a_tile_row(const uint16_t* base, int64_t ld, int lane) {
    return base + int64_t(lane & 15) * ld + (lane >> 4) * 8;
}

// Row addresses for ldmatrix_x4 of two B tiles (n 0-7 and 8-15) x k 16 stored [n][ld]: registers
// 0/1 are tile 0's b0/b1, registers 2/3 tile 1's.
__device__ __forceinline__ const uint16_t* b_pair_row(const uint16_t* base, int64_t ld, int lane) {
    return base + int64_t((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8;
}

// Row addresses for ldmatrix_x4_trans of two B tiles (n 0-7 and 8-15) x k 16 stored [k][ld]
// (V in P V): registers 0/1 are tile 0's b0/b1, registers 2/3 tile 1's.
__device__ __forceinline__ const uint16_t* bt_pair_row(const uint16_t* base, int64_t ld, int lane) {
    return base + int64_t((lane & 7) + (((lane >> 3) & 1) << 3)) * ld + (lane >> 4) * 8;
}

// 16 bytes global -> shared without passing through registers; src_bytes = 0 fills zeros.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace dsperf::cuda
