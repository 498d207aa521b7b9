// Measurements of this CPU that the kernels' performance is judged against: the BF16 dot-product
// peak (VDPBF16PS on independent accumulators) and the streaming-read bandwidth of memory.
#pragma once
#include <cstdint>

namespace dsperf::kernels {

// GFLOPS of VDPBF16PS on all OpenMP threads for about `seconds`; 0 where AVX-512 BF16 is absent.
double probe_bf16_peak_gflops(double seconds);

// GFLOPS of FP32 FMAs (AVX-512 where present, else what the compiler makes of plain C++).
double probe_fp32_fma_peak_gflops(double seconds);

// VDPBF16PS FLOPs per second over FP32 FMA FLOPs per second on one core (a few milliseconds);
// 0 where AVX-512 BF16 is absent. The GEMMs pick their prefill kernel by it.
double probe_dot_to_fma_speed();

// GB/s (1e9) of summing a buffer of `bytes` (much larger than the caches) with `threads` OpenMP
// threads (0: all), the best of `repeats` passes.
double probe_read_bandwidth_gbps(int64_t bytes, int repeats, int threads = 0);

// GB/s of the STREAM triad a[i] = b[i] + s * c[i] over three arrays of bytes / 3 (24 bytes moved per
// element, as STREAM counts), `threads` threads (0: all), best of `repeats`.
double probe_triad_bandwidth_gbps(int64_t bytes, int repeats, int threads = 0);

}  // namespace dsperf::kernels
