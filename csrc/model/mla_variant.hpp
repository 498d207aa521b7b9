// The five execution variants of MLA (seed 001), declared once: the CPU and CUDA kernels run them,
// the kernel cost model prices them, and Python reads their names from the binding
// (dsperf._C.kernels.MLA_VARIANTS, in value order).
//   CD       cache the decompressed K/V per head; plain MHA over them.
//   CC       cache the latent; decompress K/V from it at run time; MHA.
//   A_CC     absorb W_UK into the query and W_UV into the output at run time; MQA over the latent
//            with queries and keys concatenated [nope | rope] (copies).
//   A_CC_ME  as A_CC with the nope and rope scores computed separately and added: no concatenation.
//   AM_CC_ME as A_CC_ME with the absorbed products materialised ahead of time (mla_absorb_weights):
//            q_absorb = W_UK^T wq_b_nope per head, o_absorb = wo W_UV per head.
#pragma once
#include <stdexcept>
#include <string>

namespace dsperf {

enum class MlaVariant { CD = 0, CC = 1, A_CC = 2, A_CC_ME = 3, AM_CC_ME = 4 };
inline constexpr const char* kMlaVariantNames[] = {"CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME"};
inline constexpr int kMlaVariantCount = 5;

// The absorbed variants (A_CC, A_CC_ME, AM_CC_ME) attend over the latent with MQA.
inline bool absorbed(MlaVariant v) { return v >= MlaVariant::A_CC; }

// A variant by name, or by its value; throws std::invalid_argument naming the variants.
inline MlaVariant mla_variant_named(const std::string& name) {
    for (int i = 0; i < kMlaVariantCount; ++i)
        if (name == kMlaVariantNames[i]) return MlaVariant(i);
    throw std::invalid_argument("variant must be one of CD, CC, A_CC, A_CC_ME, AM_CC_ME, got '" + name + "'");
}
inline MlaVariant mla_variant_at(int value) {
    if (value < 0 || value >= kMlaVariantCount)
        throw std::invalid_argument("variant must be one of CD, CC, A_CC, A_CC_ME, AM_CC_ME (0..4)");
    return MlaVariant(value);
}

}  // namespace dsperf
