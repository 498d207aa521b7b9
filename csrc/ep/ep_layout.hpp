// Where a dispatch leaves the rows it delivers, declared once: the cost model prices each layout's
// traffic (grounded/kernel_cost.hpp), the shared-memory exchange plans it (ep/ep_window.hpp), and
// Python reads the names from the binding (dsperf._C.kernel_cost.EpLayout).
//   kToken:  DeepEP's normal layout, each token once per destination rank, as received;
//   kExpert: the same rows regrouped per local expert (the contiguous GEMM layout);
//   kMasked: the low-latency layout, [local experts, ranks x max tokens] with a count per expert.
#pragma once

namespace dsperf {

enum class EpLayout : int { kToken = 0, kExpert = 1, kMasked = 2 };

}  // namespace dsperf
