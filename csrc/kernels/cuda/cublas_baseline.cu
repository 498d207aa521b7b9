// cuBLAS as the benchmark's baseline GEMM, loaded at run time (dlopen): linking libcublas would make
// the Python module fail to import on machines without it, and the baseline is only ever needed on
// a GPU machine, where the CUDA toolkit's libcublas is present.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {
namespace {

struct Cublas {
    void* lib = nullptr;
    std::string why;
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    // The C entry point (32-bit sizes, 64-bit strides); the header also declares a C++ overload.
    using Gemm = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, long long, const void*, cudaDataType, int,
                                    long long, const void*, void*, cudaDataType, int, long long, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
    Gemm gemm = nullptr;
    cublasHandle_t handles[64] = {};  // one per device, created on first use
};

Cublas& cublas() {
    static Cublas c;
    static std::once_flag once;
    std::call_once(once, [] {
        for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
            c.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (c.lib) break;
        }
        if (!c.lib) {
            c.why = "libcublas could not be loaded (dlopen libcublas.so.13 / .12 / .so failed)";
            return;
        }
        c.create = reinterpret_cast<decltype(c.create)>(dlsym(c.lib, "cublasCreate_v2"));
        c.set_stream = reinterpret_cast<decltype(c.set_stream)>(dlsym(c.lib, "cublasSetStream_v2"));
        c.gemm = reinterpret_cast<Cublas::Gemm>(dlsym(c.lib, "cublasGemmStridedBatchedEx"));
        if (!c.create || !c.set_stream || !c.gemm)
            c.why = "libcublas lacks cublasCreate_v2, cublasSetStream_v2 or cublasGemmStridedBatchedEx";
    });
    return c;
}

void check_cublas(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLAS ") + what + " failed with status " + std::to_string(int(s)));
}

}  // namespace

bool cublas_available(std::string* why) {
    Cublas& c = cublas();
    if (why) *why = c.why;
    return c.why.empty();
}

void cublas_gemm_bf16(const uint16_t* a, const uint16_t* b, float* c, int64_t M, int64_t N, int64_t K, int64_t batch,
                      int64_t stride_a, int64_t stride_b, int64_t stride_c) {
    if (M < 0 || N < 1 || K < 1 || batch < 1) throw std::invalid_argument("cublas_gemm_bf16: bad sizes");
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || batch > INT32_MAX)
        throw std::invalid_argument("cublas_gemm_bf16: sizes must fit cuBLAS's 32-bit integers");
    Cublas& cb = cublas();
    if (!cb.why.empty()) throw std::runtime_error(cb.why);
    if (M == 0) return;
    const int dev = current_device();
    if (dev >= 64) throw std::runtime_error("cublas_gemm_bf16: more than 64 devices");
    if (!cb.handles[dev]) check_cublas(cb.create(&cb.handles[dev]), "cublasCreate");
    // On the thread's current stream, like every other launch here (a graph capture included).
    check_cublas(cb.set_stream(cb.handles[dev], current_stream()), "SetStream");
    // Row-major c = a b^T is column-major c^T = b a^T: cuBLAS's m = N, n = M, with b transposed.
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cb.gemm(cb.handles[dev], CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, b, CUDA_R_16BF,
                         int(K), stride_b, a, CUDA_R_16BF, int(K), stride_a, &beta, c, CUDA_R_32F, int(N), stride_c,
                         int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "GemmStridedBatchedEx");
    check_launch("cublas_gemm_bf16");
}

}  // namespace dsperf::cuda
