#include "kernels/cpu/decode_layer.hpp"

#include <stdexcept>
#include <vector>

#include "kernels/cpu/elementwise.hpp"

namespace dsperf::kernels {

void decode_layer(MlaVariant variant, const DecodeLayerWeights& w, const bf16_t* x, int64_t T, const float* freqs,
                  float scale, MlaSequenceCache& cache, bf16_t* out) {
    if (!w.attn_norm || !w.ffn_norm || !w.gate_w) throw std::invalid_argument("decode_layer: norms and gate are required");
    const int64_t D = w.mla.dim;
    if (w.routed.dim != D) throw std::invalid_argument("decode_layer: the experts' dim must equal the MLA's");
    std::vector<bf16_t> h(static_cast<size_t>(T * D)), x1(static_cast<size_t>(T * D));
    std::vector<float> a(static_cast<size_t>(T * D));
    rmsnorm(x, w.attn_norm, h.data(), T, D, w.mla.eps);
    mla_forward(variant, w.mla, h.data(), T, freqs, scale, cache, a.data());
    for (int64_t i = 0; i < T * D; ++i) x1[size_t(i)] = f32_to_bf16(bf16_to_f32(x[i]) + a[size_t(i)]);
    rmsnorm(x1.data(), w.ffn_norm, h.data(), T, D, w.mla.eps);
    moe_layer(h.data(), T, w.gate_w, w.gate_bias, w.gate, w.routed, w.shared, a.data());
    for (int64_t i = 0; i < T * D; ++i) out[i] = f32_to_bf16(bf16_to_f32(x1[size_t(i)]) + a[size_t(i)]);
}

}  // namespace dsperf::kernels
