#include "serving/kv_pool.hpp"

namespace dsperf::serving {

int KvPool::match(const std::vector<uint64_t>& hashes) const {
    if (!enabled_) return 0;
    int n = 0;
    for (uint64_t h : hashes) {
        if (entries_.find(h) == entries_.end()) break;
        ++n;
    }
    return n;
}

void KvPool::ref(const std::vector<uint64_t>& hashes, int n, std::vector<uint64_t>& held) {
    for (int i = 0; i < n; ++i) {
        Entry& e = entries_.at(hashes[i]);
        if (e.refs++ == 0) lru_.erase(e.lru);
        held.push_back(hashes[i]);
    }
}

void KvPool::unref(std::vector<uint64_t>& held) {
    for (uint64_t h : held) {
        Entry& e = entries_.at(h);
        if (--e.refs == 0) {
            lru_.push_front(h);
            e.lru = lru_.begin();
        }
    }
    held.clear();
}

bool KvPool::alloc(int64_t n) {
    if (n > available()) return false;
    while (free_ < n) {  // evict the least recently used unreferenced entries
        entries_.erase(lru_.back());
        lru_.pop_back();
        ++free_;
    }
    free_ -= n;
    return true;
}

int64_t KvPool::publish(const std::vector<uint64_t>& hashes, int from, int to, std::vector<uint64_t>& held) {
    if (!enabled_) return 0;
    int64_t moved = 0;
    for (int i = from; i < to && i < int(hashes.size()); ++i) {
        auto [it, inserted] = entries_.try_emplace(hashes[i]);
        if (!inserted) continue;
        it->second.refs = 1;
        held.push_back(hashes[i]);
        ++moved;
    }
    return moved;
}

}  // namespace dsperf::serving
