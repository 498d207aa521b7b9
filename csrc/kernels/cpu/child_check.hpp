// Trying an instruction the CPU may refuse (or a tile configuration that may fault) in a child
// process, so that a signal ends the child and never the caller.
#pragma once
#include <string>

namespace dsperf::kernels {

// Runs check() in a forked child (no atfork handlers; no core dump) and waits at most timeout_s.
// Returns "" when check() returned true, else why not: the signal that stopped the child, a wrong
// result, a timeout (the child is killed), or a fork failure. check() must not allocate: the
// child of a multithreaded process may not take locks another thread held at the fork.
std::string fails_in_child(bool (*check)(), double timeout_s = 10.0);

}  // namespace dsperf::kernels
