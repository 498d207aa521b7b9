// The calls of one MLA layer, listed once. Every cost model reads this list:
//  - the seed's block FLOPs (model/block_costs.cpp) sum its GEMMs and its attention core;
//  - the kernel cost model (grounded/kernel_cost.cpp) prices its GEMMs for dsperf's own kernels;
//  - the grounded step model (grounded/layer_calls.cpp) prices each call on the device's tables.
// Which GEMMs a variant runs, their shapes and their order live here; how each consumer counts
// the attention core's key pairs (the seed's full rectangle, a causal prompt, a decode batch) and
// which elementwise and communication calls it adds around them (norms, quantisation, all-reduce)
// is the consumer's, because they price different implementations.
#pragma once
#include <array>

#include "model/mla_variant.hpp"
#include "model/model_config.hpp"

namespace dsperf {

// The MLA dimensions of one layer on one TP rank (heads = n_heads / TP; may be fractional when a
// cost model spreads heads evenly). q_lora = 0: the query is projected from the hidden state directly.
struct MlaDims {
    double dim = 7168, heads = 128, q_lora = 1536, kv_lora = 512, nope = 128, rope = 64, v = 128;
};
MlaDims mla_dims(const ModelConfig& m, double attn_tp = 1);

// Which rows each part of the layer runs on.
struct MlaRows {
    double queries = 0;       // new tokens: the query path, the attention core's queries, the output
    double compressed = 0;    // rows through wkv_a (the new tokens; the seed counts every key, see block_costs)
    double decompressed = 0;  // rows through wkv_b where the variant decompresses (CD: new tokens; CC: every key)
};
// The rows a layer runs for `tokens` new tokens that attend to `keys` keys (cache included).
MlaRows mla_rows(MlaVariant v, double tokens, double keys);

// The calls, in the order a serving system runs them.
enum class MlaCallId {
    kWqA = 0,         // hidden -> q_lora (absent when q_lora = 0)
    kWkvA,            // hidden -> [latent | rope key]
    kWqB,             // q_lora -> per-head q (AM_CC_ME: its rope columns only)
    kQAbsorb,         // AM_CC_ME: q_lora -> per-head latent query through W_UK^T wq_b (materialised)
    kWkvB,            // CD, CC: latent -> per-head [k_nope | v]
    kQNopeWuk,        // A_CC, A_CC_ME: q_nope x W_UK per head, at run time
    kCore,            // the attention core
    kOLatentWuv,      // A_CC, A_CC_ME: latent output x W_UV per head, at run time
    kWo,              // per-head v -> hidden
    kOAbsorb,         // AM_CC_ME: per-head latent output -> hidden through wo W_UV (materialised)
};
inline constexpr const char* kMlaCallNames[] = {"wq_a", "wkv_a", "wq_b", "q_absorb", "wkv_b",
                                                "q_absorb_w_uk", "attention_core", "o_absorb_w_uv", "wo", "o_absorb"};

// Where a call's FLOPs sit in the seed's split: the projections (prolog, decompression) run as FP8
// GEMMs, the core and the output projection in BF16/FP16.
enum class MlaPart { kProlog = 0, kDecompress = 1, kCore = 2, kOutput = 3 };
inline constexpr const char* kMlaPartNames[] = {"prolog", "decompress", "core", "output"};

struct MlaCall {
    MlaCallId id = MlaCallId::kCore;
    MlaPart part = MlaPart::kCore;
    // A GEMM: `count` products y[m, n] = x[m, k] w[n, k]^T (count = heads for the run-time per-head
    // products, which multiply activations by a BF16 slice of wkv_b; the rest are model weights).
    double m = 0, n = 0, k = 0, count = 1;
    bool per_head = false;
    // The core: per head, query-key products of width qk and value products of width v.
    double qk = 0, v = 0;
    const char* name() const { return kMlaCallNames[int(id)]; }
    bool gemm() const { return id != MlaCallId::kCore; }
    double gemm_flops() const { return 2 * m * n * k * count; }
};

// At most 8 calls, held inline: the explorer builds this list for every configuration it prices.
class MlaCallList {
public:
    void push_back(const MlaCall& c) { items_[size_++] = c; }
    const MlaCall* begin() const { return items_.data(); }
    const MlaCall* end() const { return items_.data() + size_; }
    int size() const { return size_; }
    const MlaCall& core() const;  // the attention core's entry

private:
    std::array<MlaCall, 8> items_{};
    int size_ = 0;
};

MlaCallList mla_layer_calls(MlaVariant v, const MlaDims& d, const MlaRows& r);

}  // namespace dsperf
