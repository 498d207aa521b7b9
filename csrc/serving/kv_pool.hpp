// One rank's KV cache in blocks: private blocks of running requests, and a prefix cache of blocks
// named by their prompt hash, shared by reference; unreferenced cached blocks stay until a new
// allocation needs room, then leave least recently used first.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace dsperf::serving {

class KvPool {
public:
    KvPool(int64_t capacity_blocks, bool prefix_cache) : capacity_(capacity_blocks), free_(capacity_blocks),
                                                         enabled_(prefix_cache) {}

    int64_t capacity() const { return capacity_; }
    int64_t used() const { return capacity_ - free_; }
    // Blocks an allocation can get: free ones and unreferenced cached ones.
    int64_t available() const { return free_ + int64_t(lru_.size()); }

    // How many leading hashes of a prompt the cache holds (0 when the cache is off).
    int match(const std::vector<uint64_t>& hashes) const;
    // Reference the first n hashes' cached blocks (n from match()); they cannot be evicted while held.
    void ref(const std::vector<uint64_t>& hashes, int n, std::vector<uint64_t>& held);
    // Drop a request's references (its cached blocks become evictable when no one holds them).
    void unref(std::vector<uint64_t>& held);
    // n private blocks, evicting cached ones if needed; false (and nothing taken) when they do not fit.
    bool alloc(int64_t n);
    void release(int64_t n) { free_ += n; }
    // A computed prompt's blocks [from, to) of `hashes` become cache entries, held by the request
    // (appended to `held`); returns how many private blocks turned into entries (a hash already
    // cached, by a request computed meanwhile, leaves its block private).
    int64_t publish(const std::vector<uint64_t>& hashes, int from, int to, std::vector<uint64_t>& held);

private:
    struct Entry {
        int refs = 0;
        std::list<uint64_t>::iterator lru;  // valid when refs == 0
    };
    int64_t capacity_, free_;
    bool enabled_;
    std::unordered_map<uint64_t, Entry> entries_;
    std::list<uint64_t> lru_;  // unreferenced entries, most recently used first
};

}  // namespace dsperf::serving
