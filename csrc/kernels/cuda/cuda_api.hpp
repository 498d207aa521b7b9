// The CUDA kernels' host API: plain C++ (no CUDA types), so the bindings compile without nvcc.
//
// Every kernel takes DEVICE pointers (the Python layer stages numpy arrays through DeviceArray)
// and runs on the current device's legacy default stream. Sizes are checked on the host first and
// throw std::invalid_argument naming the argument; values that live on the device (ids, offsets,
// block tables) are checked on the device before the kernel proper, and a bad one throws
// std::invalid_argument after that check (it costs one synchronisation). CUDA failures throw
// std::runtime_error with the CUDA error string.
//
// The kernels with many arguments take one argument struct (GroupedGemm, MlaDecode, MlaPrefill),
// which the Python binding exposes field by field. Their host-side checks are the struct's
// validate(), called once at the boundary (the binding) before the call; grouped_gemm, mla_decode
// and mla_prefill trust their caller and do not repeat it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/mla_plan.hpp"
#include "kernels/cpu/moe.hpp"  // GateConfig: the same routing configuration and checks as the CPU

namespace dsperf::cuda {

// ---- devices and memory (device.cu) ----------------------------------------------------------
// Devices the CUDA runtime sees (0 without a driver or a GPU), and why none where there is none.
int device_count();
std::string unavailable_reason();
std::string device_name(int device);
int multiprocessor_count(int device);
// Compute capability as major * 10 + minor (90 for H100/H200).
int compute_capability(int device);
void set_device(int device);
int current_device();
void synchronize();
// Launch policy (see cuda_common.cuh): synchronous by default.
void set_synchronous_launches(bool on);
bool synchronous_launches();

void* device_malloc(size_t bytes);  // on the current device; never null for bytes > 0
void device_free(void* p);
void copy_to_device(void* dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void fill_zero(void* p, size_t bytes);
// The device that owns a pointer: >= 0 for device (or managed) memory, -1 for host memory or an
// address CUDA does not know.
int pointer_device(const void* p);

// Device-side validation: the index of the first of v[0..n) outside [lo, hi), or -1.
int64_t first_outside(const int32_t* v, int64_t n, int64_t lo, int64_t hi);
// Throws std::invalid_argument "<name>[i] = value is outside [lo, hi)" for the first bad entry.
void check_range(const int32_t* v, int64_t n, int64_t lo, int64_t hi, const char* name);

// ---- elementwise (elementwise.cu, rope.cu) -----------------------------------------------------
// y = x / rms(x) * w over rows of width dim (FP32).
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);
// out[t, i] = bf16(silu(gate_up[t, i]) * gate_up[t, inter + i]); out as raw BF16 bits.
void silu_mul(const float* gate_up, uint16_t* out, int64_t rows, int64_t inter);
// 1x128 FP8 quantisation of BF16 rows: scale = amax / 448 per 128 values, q = fp8(x / scale).
void act_quant(const uint16_t* x, int64_t rows, int64_t dim, uint8_t* q, float* scales);
// Interleaved rotary embedding in place on BF16 x[tokens, heads, rope_dim] (row strides in
// elements): pairs (2i, 2i+1) turned by positions[t] * freqs[i], as the CPU's rope_inplace.
void rope_inplace_bf16(uint16_t* x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head,
                       const int32_t* positions, const float* freqs, int64_t rope_dim);

// ---- MoE routing (moe.cu) ------------------------------------------------------------------------
// DeepSeek-V3 routing of FP32 logits [tokens, experts]; the CPU moe_gate's semantics exactly.
void moe_gate(const float* logits, int64_t tokens, int64_t experts, const float* bias, const kernels::GateConfig& cfg,
              float* weights, int32_t* ids);
// out[r] = x[source[r]] for rows of row_bytes bytes (any dtype); source checked on the device.
void moe_permute(const void* x, int64_t tokens, int64_t row_bytes, const int32_t* source, int64_t rows, void* out);
// out[t] = sum_k weights[t, k] * y_perm[position[t, k]] in slot order (FP32).
void moe_unpermute(const float* y_perm, int64_t rows, int64_t dim, const int32_t* position, const float* weights,
                   int64_t tokens, int64_t top_k, float* out);

// ---- grouped GEMM (grouped_gemm.cu) --------------------------------------------------------------
// c[m, :] = a[m, :] @ b[e(m)]^T over experts, on tensor cores (BF16 inputs, FP32 accumulate).
//   a: [M, K] BF16, or FP8 e4m3 with a_scale [M, ceil(K/128)] (1x128 activation scales);
//   b: [E, N, K] BF16, or FP8 with b_scale [E, ceil(N/128), ceil(K/128)] (128x128 block scales);
//   c: [M, N] FP32.
// Layouts (DeepGEMM's): contiguous -- expert e owns rows [offsets[e], offsets[e+1]) of a, offsets
// int64 [E + 1] on the device; masked -- M = E * capacity, expert e owns rows
// [e * capacity, e * capacity + counts[e]), counts int32 [E] on the device, and c is zero past
// each count.
// Precision: FP8 b with BF16 a is dequantised per 128x128 block to BF16 (fp8 x scale rounded), the
// CPU experts' semantics; FP8 a with FP8 b multiplies the exact FP8 values and applies
// a_scale x b_scale per 128-deep K block in FP32 (DeepGEMM's semantics).
enum class GemmLayout { Contiguous, Masked };
struct GroupedGemm {
    const void* a = nullptr;
    const float* a_scale = nullptr;  // non-null: a is FP8
    const void* b = nullptr;
    const float* b_scale = nullptr;  // non-null: b is FP8
    float* c = nullptr;
    int64_t M = 0, N = 0, K = 0, E = 0;
    GemmLayout layout = GemmLayout::Contiguous;
    const int64_t* offsets = nullptr;  // contiguous
    const int32_t* counts = nullptr;   // masked
    int64_t capacity = 0;              // masked
    // Check offsets / counts on the device first (one synchronisation); callers that checked
    // them already (benchmarks timing back-to-back launches) may skip it.
    bool check_values = true;
    void validate() const;  // sizes and pointers (host side); the caller runs it once
};
void grouped_gemm(const GroupedGemm& g);  // g validated by the caller

// ---- cuBLAS baseline (cublas_baseline.cu; libcublas loaded at run time) -------------------------
// c[i] = a[i] @ b[i]^T for i < batch, row-major: a [M, K] BF16, b [N, K] BF16, c [M, N] FP32, with
// element strides between batch entries (cublasGemmStridedBatchedEx, FP32 compute).
void cublas_gemm_bf16(const uint16_t* a, const uint16_t* b, float* c, int64_t M, int64_t N, int64_t K, int64_t batch,
                      int64_t stride_a, int64_t stride_b, int64_t stride_c);
bool cublas_available(std::string* why);

// ---- MLA decode (mla_decode.cu) -----------------------------------------------------------------
// The plan: mla_plan.hpp (host code).
struct MlaDecode {
    const uint16_t* q_nope = nullptr;        // [B, Q, H, L] BF16 (W_UK absorbed)
    const uint16_t* q_rope = nullptr;        // [B, Q, H, R] BF16
    const void* latent = nullptr;            // [blocks, 64, L] BF16, or FP8 with latent_scale
    const float* latent_scale = nullptr;     // [blocks, 64, L / 128]
    const uint16_t* rope = nullptr;          // [blocks, 64, R] BF16
    const int32_t* block_table = nullptr;    // [B, max_blocks]
    const int32_t* seqlens = nullptr;        // [B] (device)
    const int32_t* items = nullptr;          // the plan's items on the device
    const int32_t* split_offsets = nullptr;  // the plan's offsets on the device
    int64_t n_items = 0, n_partials = 0;
    int64_t batch = 0, q_len = 0, heads = 0, kv_lora = 512, rope_dim = 64, num_blocks = 0, block_size = 64,
            max_blocks = 0;
    float softmax_scale = 1;
    float* out = nullptr;  // [B, Q, H, L] FP32
    float* lse = nullptr;  // [B, Q, H] FP32
    // Partial results [n_partials, Q * H, L] and [n_partials, Q * H]; allocated per call when null.
    float* part_out = nullptr;
    float* part_lse = nullptr;
    bool check_values = true;  // seqlens and block ids checked on the device first (one sync)
    void validate() const;     // sizes, pointers and alignment (host side); the caller runs it once
};
// The CPU mla_decode_absorbed's semantics: causal among the Q new tokens, probabilities rounded to
// BF16 for the value product, partial results merged by log-sum-exp. d validated by the caller.
void mla_decode(const MlaDecode& d);

// ---- MLA prefill (mla_prefill.cu) ----------------------------------------------------------------
// Non-absorbed causal attention of one sequence: q [q_len, heads, dqk], k [kv_len, heads, dqk],
// v [kv_len, heads, dv] BF16 (16-byte aligned; dqk a multiple of 16 up to 256, dv up to 128);
// query t sits at position kv_len - q_len + t and sees keys up to it. out [q_len, heads, dv] FP32
// (normalised), lse [q_len, heads] FP32 (natural log). Probabilities are rounded to BF16 for P V.
struct MlaPrefill {
    const uint16_t* q = nullptr;  // [q_len, heads, dqk] BF16
    const uint16_t* k = nullptr;  // [kv_len, heads, dqk] BF16
    const uint16_t* v = nullptr;  // [kv_len, heads, dv] BF16
    int64_t q_len = 0, kv_len = 0, heads = 0, dqk = 0, dv = 0;
    float softmax_scale = 1;
    float* out = nullptr;  // [q_len, heads, dv] FP32
    float* lse = nullptr;  // [q_len, heads] FP32
    void validate() const;  // sizes, pointers and alignment (host side); the caller runs it once
};
void mla_prefill(const MlaPrefill& p);  // p validated by the caller

// ---- CUDA graphs (graph.cu) ----------------------------------------------------------------------
// Begins capturing this thread's dsperf launches on a new stream (returned as an integer);
// end_capture instantiates the graph (returns it; 0 when discarded) and restores the legacy
// stream; launch replays it on the capture stream; destroy frees both.
uintptr_t graph_begin_capture();
uintptr_t graph_end_capture(uintptr_t stream, bool discard);
void graph_launch(uintptr_t exec, uintptr_t stream);
void graph_destroy(uintptr_t exec, uintptr_t stream);

// ---- NCCL all-to-all (alltoall_nccl.cu; libnccl loaded at run time) ----------------------------
bool nccl_available(std::string* why);
std::string nccl_unique_id();  // 128 bytes, to share between processes
// A communicator handle (ncclComm_t) as an integer, so the bindings need no NCCL types.
uintptr_t nccl_init_rank(const std::string& unique_id, int nranks, int rank, int device);
std::vector<uintptr_t> nccl_init_all(const std::vector<int>& devices);
void nccl_destroy(uintptr_t comm);
// One rank's part of an all-to-all, run inside one NCCL group with the other local ranks' parts:
// rows of row_bytes bytes; send rows for peer p start at send_offsets[p] (rows, host values) and
// number send_counts[p]; received rows from peer p go at recv_offsets[p], recv_counts[p] of them.
struct AllToAllPart {
    uintptr_t comm = 0;
    int device = 0;
    const void* send = nullptr;
    void* recv = nullptr;
    std::vector<int64_t> send_offsets, send_counts, recv_offsets, recv_counts;
};
// Grouped ncclSend/ncclRecv over all local ranks' parts (one process may drive several GPUs), then
// a wait for completion when launches are synchronous.
void nccl_alltoallv(const std::vector<AllToAllPart>& parts, int64_t row_bytes);

}  // namespace dsperf::cuda
