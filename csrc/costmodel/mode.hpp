#pragma once
#include <string>

namespace dsperf {

// as_published: the seed analysis' arithmetic, quirks included, so its tables come out
// digit for digit. corrected: each quirk fixed; docs/DEVIATIONS.md lists them.
enum class Mode { AsPublished = 0, Corrected = 1 };

Mode parse_mode(const std::string& text);  // "as_published" | "corrected"
const char* mode_name(Mode mode);

// Unit helpers. The seed sizes traffic in MiB (x / 1024 / 1024) and divides by GB/s,
// reading the quotient as milliseconds; corrected mode uses bytes / 1e9 consistently.
inline double seed_ms(double bytes, double gbps) { return bytes / 1024.0 / 1024.0 / gbps; }
inline double true_ms(double bytes, double gbps) { return bytes / 1e9 / gbps * 1e3; }

}  // namespace dsperf
