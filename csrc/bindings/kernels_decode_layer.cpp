// The whole block (RMSNorm -> MLA -> residual -> RMSNorm -> MoE -> residual) in one call.
#include "bindings/kernel_args.hpp"

namespace dsperf::bindings {

void bind_decode_layer(py::module_& m) {
    m.def("decode_layer", [](const std::string& variant, Arr<uint16_t> x, Arr<float> attn_norm, Arr<float> ffn_norm,
                             const py::dict& mla, int64_t heads, int64_t nope, int64_t rope, int64_t v, float eps,
                             Arr<float> freqs, float softmax_scale, const py::dict& cache, const py::dict& moe) {
        DecodeLayerWeights w;
        const MlaVariant var = mla_variant(variant);
        w.mla = mla_weights(mla, heads, nope, rope, v, eps);
        const int64_t D = w.mla.dim;
        expect(x.ndim() == 2 && x.shape(1) == D, "x must be [tokens, dim]");
        expect_shape(attn_norm, {D}, "attn_norm");
        expect_shape(ffn_norm, {D}, "ffn_norm");
        w.attn_norm = attn_norm.data(), w.ffn_norm = ffn_norm.data();
        const MoeArgs m_args = moe_args(moe, D);
        w.routed = m_args.routed, w.shared = m_args.shared, w.gate = m_args.gate;
        w.gate_w = m_args.gate_w.data(), w.gate_bias = m_args.gate_bias;
        expect_shape(freqs, {rope / 2}, "freqs");
        MlaSequenceCache c = sequence_cache(cache, w.mla, var, x.shape(0));
        auto out = empty<uint16_t>({x.shape(0), D}, "decode_layer output [tokens, dim]");
        {
            py::gil_scoped_release nogil;
            decode_layer(var, w, x.data(), x.shape(0), freqs.data(), softmax_scale, c, out.mutable_data());
        }
        return out;
    }, py::arg("variant"), py::arg("x").noconvert(), py::arg("attn_norm").noconvert(), py::arg("ffn_norm").noconvert(),
       py::arg("mla"), py::arg("heads"), py::arg("nope"), py::arg("rope"), py::arg("v"), py::arg("eps"),
       py::arg("freqs").noconvert(), py::arg("softmax_scale"), py::arg("cache"), py::arg("moe"));
}

}  // namespace dsperf::bindings
