// The one argument check of the C++ core: throw std::invalid_argument (ValueError in Python) with a
// message that names the argument and its allowed range.
#pragma once
#include <stdexcept>
#include <string>

namespace dsperf {

inline void require(bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(what);
}

inline void require(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

}  // namespace dsperf
