// The plan of a split-KV MLA decode (FlashMLA's get_mla_metadata), host work only: plain C++, so
// the bindings offer it in every build and the tests check it without a GPU.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsperf::cuda {

// Query rows (q token x head) one decode thread block takes: mla_decode.cu's tile height (the
// 64-row mma variant, mla_decode_mma.cu, the default kernel, plans with rows_per_block = 64).
constexpr int64_t kMlaRowsPerBlock = 16;

// Work items (request, first block, end block, split index) over blocks of block_size tokens, and
// each request's first partial-result slot.
struct MlaPlan {
    std::vector<int32_t> items;          // [n_items, 4]: b, block_begin, block_end, split
    std::vector<int32_t> split_offsets;  // [batch + 1]
    int64_t n_items() const { return int64_t(items.size() / 4); }
};

// Work items per SM the automatic plan aims at: the mma.sync kernels run several blocks per SM;
// the Hopper kernel's block fills an SM's shared memory (225 KB), so one wave of items suits it
// (on an H200 at B=128, s=4096, h=128: 451 us with one split per request against 492 us with the
// two that two items per SM gave; docs/CUDA.md).
constexpr int64_t kMlaItemsPerSm = 2, kMlaItemsPerSmWgmma = 1;

// Plans from host seqlens: num_splits > 0 cuts every request into that many equal block ranges
// (at most its block count); 0 sizes the splits so that about items_per_sm work items per SM exist.
inline MlaPlan mla_plan(const int32_t* seqlens, int64_t batch, int64_t block_size, int64_t rows_per_request,
                        int64_t num_splits, int64_t sm_count, int64_t rows_per_block = kMlaRowsPerBlock,
                        int64_t items_per_sm = kMlaItemsPerSm) {
    if (batch < 0 || block_size < 1 || rows_per_request < 1 || num_splits < 0 || sm_count < 1 || rows_per_block < 1 ||
        items_per_sm < 1)
        throw std::invalid_argument(
            "mla_plan: batch >= 0, block_size, rows_per_request, sm_count, rows_per_block, items_per_sm >= 1, "
            "num_splits >= 0 are required");
    std::vector<int64_t> nblk(static_cast<size_t>(batch));
    int64_t total = 0;
    for (int64_t b = 0; b < batch; ++b) {
        if (seqlens[b] < 0)
            throw std::invalid_argument("seqlens[" + std::to_string(b) + "] = " + std::to_string(seqlens[b]) +
                                        " is negative");
        nblk.at(size_t(b)) = (seqlens[b] + block_size - 1) / block_size;
        total += nblk.at(size_t(b));
    }
    // Automatic: about items_per_sm work items (times the row groups each item spans) per SM, so that
    // short and long requests alike fill the GPU, and no item shorter than one block.
    const int64_t groups = (rows_per_request + rows_per_block - 1) / rows_per_block;
    const int64_t target_items = std::max<int64_t>(1, items_per_sm * sm_count / groups);
    const int64_t per_item = std::max<int64_t>(1, (total + target_items - 1) / target_items);
    MlaPlan plan;
    plan.split_offsets.push_back(0);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t nb = nblk.at(size_t(b));
        int64_t splits = num_splits > 0 ? std::min(num_splits, nb) : (nb + per_item - 1) / per_item;
        splits = std::max<int64_t>(splits, 1);
        for (int64_t s = 0; s < splits; ++s) {
            plan.items.push_back(int32_t(b));
            plan.items.push_back(int32_t(nb * s / splits));
            plan.items.push_back(int32_t(nb * (s + 1) / splits));
            plan.items.push_back(int32_t(s));
        }
        plan.split_offsets.push_back(plan.split_offsets.back() + int32_t(splits));
    }
    return plan;
}

}  // namespace dsperf::cuda
