// MLA: the paged latent cache, absorbed decode, the fused prolog, absorbed weights and the layer.
#include "bindings/kernel_args.hpp"

namespace dsperf::bindings {

void bind_mla(py::module_& m) {
    m.def("mla_decode_absorbed", [](Arr<uint16_t> q_nope, Arr<uint16_t> q_rope, py::array latent, py::object latent_scale,
                                    Arr<uint16_t> rope, Arr<int32_t> block_table, Arr<int32_t> seqlens, float scale,
                                    int64_t num_splits) {
        expect(q_nope.ndim() == 4 && q_rope.ndim() == 4, "q_nope and q_rope must be 4-D [batch, q_len, heads, dim]");
        expect(latent.ndim() == 3 && rope.ndim() == 3, "the caches must be 3-D [blocks, block_size, dim]");
        const int64_t B = q_nope.shape(0), Q = q_nope.shape(1), H = q_nope.shape(2), L = q_nope.shape(3);
        PagedLatentCache c;
        c.num_blocks = latent.shape(0), c.block_size = latent.shape(1), c.kv_lora = latent.shape(2);
        c.rope_dim = rope.shape(2), c.rope = rope.data();
        Arr<uint8_t> lat8;
        Arr<uint16_t> lat16;
        Arr<float> lsc;
        if (latent_scale.is_none()) {
            lat16 = exact_view<uint16_t>(latent, "latent_cache");
            c.latent = lat16.data();
        } else {
            lat8 = exact_view<uint8_t>(latent, "latent_cache");
            lsc = exact_view<float>(latent_scale, "latent_scale");
            expect_shape(lsc, {c.num_blocks, c.block_size, (c.kv_lora + 127) / 128}, "latent_scale");
            c.latent_fp8 = lat8.data(), c.latent_scale = lsc.data();
        }
        expect(L == c.kv_lora, "q_nope's last dimension must equal the latent cache's");
        expect_shape(q_rope, {B, Q, H, c.rope_dim}, "q_rope");
        expect_shape(rope, {c.num_blocks, c.block_size, c.rope_dim}, "rope_cache");
        expect(block_table.ndim() == 2 && block_table.shape(0) == B, "block_table must be [batch, max_blocks]");
        expect_shape(seqlens, {B}, "seqlens");
        checked_mul({block_table.shape(1), c.block_size}, "block_table: max_blocks x block_size");
        auto out = empty<float>({B, Q, H, L}, "mla_decode output (the shape of q_nope)");
        auto lse = empty<float>({B, Q, H}, "mla_decode lse");
        check_memory(checked_mul({B, num_splits, Q, H, L + 1}, "num_splits x the shape of q_nope"), 4,
                     "num_splits: the split-KV partial outputs");
        {
            py::gil_scoped_release nogil;
            mla_decode_absorbed(q_nope.data(), q_rope.data(), B, Q, H, c, block_table.data(), block_table.shape(1),
                                seqlens.data(), scale, num_splits, out.mutable_data(), lse.mutable_data());
        }
        return py::make_tuple(out, lse);
    }, py::arg("q_nope").noconvert(), py::arg("q_rope").noconvert(), py::arg("latent_cache"),
       py::arg("latent_scale"), py::arg("rope_cache").noconvert(), py::arg("block_table").noconvert(),
       py::arg("seqlens").noconvert(), py::arg("softmax_scale"), py::arg("num_splits"));

    m.def("paged_cache_write", [](py::array latent, py::object latent_scale, Arr<uint16_t> rope, Arr<int32_t> table,
                                  Arr<int32_t> request, Arr<int32_t> position, Arr<uint16_t> new_latent,
                                  Arr<uint16_t> new_rope) {
        expect(latent.ndim() == 3 && rope.ndim() == 3, "the caches must be 3-D [blocks, block_size, dim]");
        const int64_t NB = latent.shape(0), BS = latent.shape(1), L = latent.shape(2), R = rope.shape(2);
        expect_shape(rope, {NB, BS, R}, "rope_cache");
        expect(table.ndim() == 2, "block_table must be [batch, max_blocks]");
        checked_mul({table.shape(1), BS}, "block_table: max_blocks x block_size");
        expect(request.ndim() == 1, "request must be 1-D");
        const int64_t T = request.shape(0);
        expect_shape(position, {T}, "positions");
        expect_shape(new_latent, {T, L}, "latent");
        expect_shape(new_rope, {T, R}, "k_pe");
        Arr<uint16_t> lat16;
        Arr<uint8_t> lat8;
        Arr<float> lsc;
        bf16_t* l16 = nullptr;
        fp8_t* l8 = nullptr;
        float* sc = nullptr;
        if (latent_scale.is_none()) {
            lat16 = exact_view<uint16_t>(latent, "latent_cache");
            l16 = lat16.mutable_data();
        } else {
            lat8 = exact_view<uint8_t>(latent, "latent_cache");
            lsc = exact_view<float>(latent_scale, "latent_scale");
            expect_shape(lsc, {NB, BS, (L + 127) / 128}, "latent_scale");
            l8 = lat8.mutable_data(), sc = lsc.mutable_data();
        }
        py::gil_scoped_release nogil;
        paged_cache_write(l16, l8, sc, rope.mutable_data(), NB, BS, L, R, table.data(), table.shape(0), table.shape(1),
                          request.data(), position.data(), T, new_latent.data(), new_rope.data());
    }, py::arg("latent_cache"), py::arg("latent_scale"), py::arg("rope_cache").noconvert(),
       py::arg("block_table").noconvert(), py::arg("request").noconvert(), py::arg("positions").noconvert(),
       py::arg("latent").noconvert(), py::arg("k_pe").noconvert());


    m.def("mla_prolog", [](Arr<uint16_t> x, const py::dict& d, int64_t heads, int64_t nope, int64_t rope,
                                      int64_t v, float eps, Arr<int32_t> positions, Arr<float> freqs) {
        const MlaWeights w = mla_weights(d, heads, nope, rope, v, eps);
        expect(x.ndim() == 2 && x.shape(1) == w.dim, "x must be [tokens, dim]");
        const int64_t T = x.shape(0);
        expect_shape(positions, {T}, "positions");
        expect_shape(freqs, {rope / 2}, "freqs");
        auto qa = empty<uint16_t>({T, w.q_lora}, "mla_prolog qa");
        auto q = empty<uint16_t>({T, heads, nope + rope}, "mla_prolog q [tokens, heads, nope + rope]");
        auto latent = empty<uint16_t>({T, w.kv_lora}, "mla_prolog latent");
        auto k_pe = empty<uint16_t>({T, rope}, "mla_prolog k_pe");
        {
            py::gil_scoped_release nogil;
            mla_prolog(w, x.data(), T, positions.data(), freqs.data(), qa.mutable_data(), q.mutable_data(),
                       latent.mutable_data(), k_pe.mutable_data());
        }
        return py::make_tuple(qa, q, latent, k_pe);
    }, py::arg("x").noconvert(), py::arg("weights"), py::arg("heads"), py::arg("nope"), py::arg("rope"), py::arg("v"),
       py::arg("eps"), py::arg("positions").noconvert(), py::arg("freqs").noconvert());
    m.def("mla_absorb_weights", [](const py::dict& d, int64_t heads, int64_t nope, int64_t rope, int64_t v) {
        const MlaWeights w = mla_weights(d, heads, nope, rope, v, 1e-6f);
        auto qa = empty<uint16_t>({heads * w.kv_lora, w.q_lora}, "q_absorb [heads x kv_lora, q_lora]");
        auto oa = empty<uint16_t>({w.dim, heads * w.kv_lora}, "o_absorb [dim, heads x kv_lora]");
        {
            py::gil_scoped_release nogil;
            mla_absorb_weights(w, qa.mutable_data(), oa.mutable_data());
        }
        return py::make_tuple(qa, oa);
    }, py::arg("weights"), py::arg("heads"), py::arg("nope"), py::arg("rope"), py::arg("v"));
    {
        py::tuple names(kMlaVariantCount);
        for (int i = 0; i < kMlaVariantCount; ++i) names[i] = kMlaVariantNames[i];
        m.attr("MLA_VARIANTS") = names;  // value order: the one declaration in model/mla_variant.hpp
    }
    m.def("mla_forward", [](const std::string& variant, Arr<uint16_t> x, const py::dict& d, int64_t heads,
                                       int64_t nope, int64_t rope, int64_t v, float eps, Arr<float> freqs,
                                       float scale, Arr<uint16_t> latent, Arr<uint16_t> k_pe, py::object k_full,
                                       py::object v_full, int64_t prefix) {
        const MlaVariant var = mla_variant(variant);
        const MlaWeights w = mla_weights(d, heads, nope, rope, v, eps);
        expect(x.ndim() == 2 && x.shape(1) == w.dim, "x must be [tokens, dim]");
        expect_shape(freqs, {rope / 2}, "freqs");
        MlaSequenceCache c = sequence_cache(latent, k_pe, k_full, v_full, prefix, w, var, x.shape(0));
        auto y = empty<float>({x.shape(0), w.dim}, "mla_forward output [tokens, dim]");
        {
            py::gil_scoped_release nogil;
            mla_forward(var, w, x.data(), x.shape(0), freqs.data(), scale, c, y.mutable_data());
        }
        return y;
    }, py::arg("variant"), py::arg("x").noconvert(), py::arg("weights"), py::arg("heads"), py::arg("nope"),
       py::arg("rope"), py::arg("v"), py::arg("eps"), py::arg("freqs").noconvert(), py::arg("softmax_scale"),
       py::arg("latent").noconvert(), py::arg("k_pe").noconvert(), py::arg("k_full"), py::arg("v_full"),
       py::arg("prefix"));
}

}  // namespace dsperf::bindings
