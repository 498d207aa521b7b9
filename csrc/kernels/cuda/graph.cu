// CUDA Graph capture of a sequence of dsperf kernel calls (e.g. a decode step's attention and
// experts), replayed with one launch: what removes the per-kernel launch latency that dominates
// small-batch decode.
//
// Capture runs on a fresh stream made current for this thread (every dsperf launch goes to the
// current stream), in relaxed mode so that output buffers may be allocated while capturing; the
// caller keeps those buffers alive as long as the graph (dsperf.cuda.CudaGraph does). Calls that
// synchronise, copy from or to the host, or allocate scratch refuse to run while capturing.
#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

namespace dsperf::cuda {

void set_current_stream(cudaStream_t s);  // device.cu

uintptr_t graph_begin_capture() {
    if (current_stream() != cudaStreamLegacy) throw std::runtime_error("a CUDA graph is already being captured");
    cudaStream_t s = nullptr;
    // A blocking stream: ordered after the legacy default stream's earlier work (inputs copied in).
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    // Work queued on the legacy stream before the capture must finish first: captured work does not
    // wait for it.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        cudaStreamDestroy(s);
        check(e, "cudaStreamBeginCapture");
    }
    set_current_stream(s);
    return reinterpret_cast<uintptr_t>(s);
}

uintptr_t graph_end_capture(uintptr_t stream, bool discard) {
    auto s = reinterpret_cast<cudaStream_t>(stream);
    if (current_stream() != s) throw std::runtime_error("graph_end_capture: not the stream being captured");
    set_current_stream(cudaStreamLegacy);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (discard || e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        cudaStreamDestroy(s);
        cudaGetLastError();
        if (!discard) check(e, "cudaStreamEndCapture");
        return 0;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph holds what it needs
    if (ie != cudaSuccess) {
        cudaStreamDestroy(s);
        check(ie, "cudaGraphInstantiate");
    }
    return reinterpret_cast<uintptr_t>(exec);
}

void graph_launch(uintptr_t exec, uintptr_t stream) {
    if (!exec) throw std::invalid_argument("graph_launch: no graph");
    auto s = reinterpret_cast<cudaStream_t>(stream);
    check(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec), s), "cudaGraphLaunch");
    if (synchronous_launches()) check(cudaStreamSynchronize(s), "CUDA graph");
}

void graph_destroy(uintptr_t exec, uintptr_t stream) {
    if (exec) cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec));
    if (stream) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream));
}

}  // namespace dsperf::cuda
