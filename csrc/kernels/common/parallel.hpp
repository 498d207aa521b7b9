// When a loop is worth the threads. A parallel region costs a fork and a join, and when the other
// cores are busy the join waits for a descheduled thread: milliseconds for a call whose work takes
// microseconds (seen as an 8 ms median for a one-row SiLU-mul on a loaded 2-core machine). Loops
// over less work than this run on the calling thread.
#pragma once
#include <cstdint>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace dsperf::kernels {

constexpr int64_t kParallelMinWork = int64_t(1) << 15;  // elements touched (elementwise) per call

inline bool worth_threads(int64_t work) { return work >= kParallelMinWork; }

// The threads a parallel region gets by default (1 without OpenMP).
inline int max_threads() {
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

}  // namespace dsperf::kernels
