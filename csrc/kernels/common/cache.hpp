// The machine's last-level cache size, for choosing between plain and streaming (non-temporal)
// stores: a result much larger than the cache leaves it anyway, so writing it past the cache saves
// the read of every line a plain store fills. Read as dsperf.predict.harness.l3_bytes reads it:
// sysfs first (sysconf reports the whole socket's L3 under some hypervisors, ten times the
// 32 MiB a 2-core guest here shares), then sysconf, then 32 MiB.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>

namespace dsperf::kernels {

inline int64_t last_level_cache_bytes() {
    static const int64_t bytes = [] {
        for (int index : {3, 2}) {
            char path[96];
            std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
            if (std::FILE* f = std::fopen(path, "r")) {
                long v = 0;
                char unit = 0;
                const int got = std::fscanf(f, "%ld%c", &v, &unit);
                std::fclose(f);
                if (got >= 1 && v > 0) return int64_t(v) * (unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : 1);
            }
        }
        long b = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
        b = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        return b > 0 ? int64_t(b) : int64_t(32) << 20;
    }();
    return bytes;
}

// Whether a call that writes `bytes` should write them past the caches. Measured on a 32 MiB L3
// (the exchange's weighted row sum: 2 BF16 sources per token, hidden 7168, FP32 out): plain stores
// were 2x faster at 3.7 MB of output, the two even at 7.3 MB, streaming 2.1x faster at 29 MB and
// 1.4x at 117 MB; a quarter of the cache sits between.
inline bool writes_past_cache(int64_t bytes) { return bytes > last_level_cache_bytes() / 4; }

}  // namespace dsperf::kernels
