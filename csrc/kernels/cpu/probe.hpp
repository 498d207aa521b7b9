// Measurements of this CPU that the kernels' performance is judged against: the BF16 dot-product
// peak (VDPBF16PS on independent accumulators) and the streaming-read bandwidth of memory.
#pragma once
#include <cstdint>

namespace dsperf::kernels {

// GFLOPS of VDPBF16PS on all OpenMP threads for about `seconds`; 0 where AVX-512 BF16 is absent.
double probe_bf16_peak_gflops(double seconds);

// GB/s (1e9) of summing a buffer of `bytes` (much larger than the caches) with all OpenMP
// threads, the best of `repeats` passes.
double probe_read_bandwidth_gbps(int64_t bytes, int repeats);

}  // namespace dsperf::kernels
