// GEMM and the building blocks: linear, RMSNorm, RoPE, embedding, SiLU-mul, FP8 quantisation.
#include "bindings/kernel_args.hpp"

namespace dsperf::bindings {

void bind_gemm_blocks(py::module_& m) {
    // Weights in AMX tile order, packed once (dsperf.kernels.PackedWeights holds one beside its arrays).
    py::class_<amx::PackedTiles>(m, "LinearTiles", "One GEMM's weights in AMX tile order (empty where AMX is not usable)")
        .def_readonly("n", &amx::PackedTiles::N)
        .def_readonly("k", &amx::PackedTiles::K)
        .def_property_readonly("nbytes", &amx::PackedTiles::bytes);
    m.def("pack_linear", [](py::array w, py::object w_scale, bool fp8) {
        const LinearWeights lw = linear_weights(w, w_scale, fp8);
        py::gil_scoped_release nogil;
        return pack_linear_tiles(lw);
    }, py::arg("w"), py::arg("w_scale"), py::arg("fp8"));
    m.def("linear", [](Arr<uint16_t> x, py::array w, py::object w_scale, bool fp8, py::object tiles) {
        expect(x.ndim() == 2, "x must be 2-D");
        LinearWeights lw = linear_weights(w, w_scale, fp8);
        expect(lw.K == x.shape(1), "w must be [N, K] with K = x.shape[1] = " + std::to_string(x.shape(1)));
        lw.tiles = linear_tiles(tiles, lw);
        const int64_t M = x.shape(0);
        auto y = empty<float>({M, lw.N}, "linear: y [rows of x, rows of w]");
        py::gil_scoped_release nogil;
        linear(x.data(), lw.K, M, lw, y.mutable_data(), lw.N);
        return y;
    }, py::arg("x").noconvert(), py::arg("w"), py::arg("w_scale"), py::arg("fp8"), py::arg("tiles") = py::none());

    auto norm = [](auto x, Arr<float> w, float eps) {
        expect(x.ndim() == 2, "x must be 2-D [tokens, dim]");
        expect_shape(w, {x.shape(1)}, "weight");
        auto out = empty<typename decltype(x)::value_type>({x.shape(0), x.shape(1)}, "rmsnorm output (the shape of x)");
        {
            py::gil_scoped_release nogil;
            rmsnorm(x.data(), w.data(), out.mutable_data(), x.shape(0), x.shape(1), eps);
        }
        return out;
    };
    m.def("rmsnorm_f32", [norm](Arr<float> x, Arr<float> w, float eps) { return norm(x, w, eps); },
          py::arg("x").noconvert(), py::arg("weight").noconvert(), py::arg("eps"));
    m.def("rmsnorm_bf16", [norm](Arr<uint16_t> x, Arr<float> w, float eps) { return norm(x, w, eps); },
          py::arg("x").noconvert(), py::arg("weight").noconvert(), py::arg("eps"));

    m.def("rope_frequencies", [](int64_t dim, double base, double factor, int64_t original_seq_len,
                                 int64_t max_seq_len, double beta_fast, double beta_slow) {
        RopeConfig c{dim, base, factor, original_seq_len, max_seq_len, beta_fast, beta_slow};
        const std::vector<float> f = rope_frequencies(c);
        return Arr<float>(py::ssize_t(f.size()), f.data());
    }, py::arg("dim"), py::arg("base"), py::arg("factor"), py::arg("original_seq_len"), py::arg("max_seq_len"),
       py::arg("beta_fast"), py::arg("beta_slow"));
    auto rope = [](auto x, Arr<int32_t> pos, Arr<float> freqs) {
        expect(x.ndim() == 3, "x must be 3-D [tokens, heads, rope_dim]");
        expect_shape(pos, {x.shape(0)}, "positions");
        expect_shape(freqs, {x.shape(2) / 2}, "freqs");
        const int64_t T = x.shape(0), H = x.shape(1), R = x.shape(2);
        py::gil_scoped_release nogil;
        rope_inplace(x.mutable_data(), T, H, H * R, R, pos.data(), freqs.data(), R);
    };
    m.def("rope_inplace_f32", [rope](Arr<float> x, Arr<int32_t> p, Arr<float> f) { rope(x, p, f); },
          py::arg("x").noconvert(), py::arg("positions").noconvert(), py::arg("freqs").noconvert());
    m.def("rope_inplace_bf16", [rope](Arr<uint16_t> x, Arr<int32_t> p, Arr<float> f) { rope(x, p, f); },
          py::arg("x").noconvert(), py::arg("positions").noconvert(), py::arg("freqs").noconvert());

    m.def("embedding", [](Arr<uint16_t> table, Arr<int32_t> ids) {
        expect(table.ndim() == 2 && ids.ndim() == 1, "table must be 2-D and ids 1-D");
        auto out = empty<uint16_t>({ids.shape(0), table.shape(1)}, "embedding output [entries of ids, columns of table]");
        {
            py::gil_scoped_release nogil;
            embedding(table.data(), table.shape(0), table.shape(1), ids.data(), ids.shape(0), out.mutable_data());
        }
        return out;
    }, py::arg("table").noconvert(), py::arg("ids").noconvert());

    m.def("silu_mul", [](Arr<float> gu) {
        expect(gu.ndim() == 2 && gu.shape(1) % 2 == 0, "gate_up must be 2-D [tokens, 2 * inter]");
        auto out = empty<uint16_t>({gu.shape(0), gu.shape(1) / 2}, "silu_mul output");
        {
            py::gil_scoped_release nogil;
            silu_mul(gu.data(), gu.shape(0), gu.shape(1) / 2, out.mutable_data());
        }
        return out;
    }, py::arg("gate_up").noconvert());

    auto quant = [](auto x) {
        expect(x.ndim() == 2, "x must be 2-D [tokens, dim]");
        const int64_t T = x.shape(0), D = x.shape(1);
        auto q = empty<uint8_t>({T, D}, "act_quant output");
        auto s = empty<float>({T, (D + 127) / 128}, "act_quant scales");
        {
            py::gil_scoped_release nogil;
            act_quant(x.data(), T, D, q.mutable_data(), s.mutable_data());
        }
        return py::make_tuple(q, s);
    };
    m.def("act_quant_f32", [quant](Arr<float> x) { return quant(x); }, py::arg("x").noconvert());
    m.def("act_quant_bf16", [quant](Arr<uint16_t> x) { return quant(x); }, py::arg("x").noconvert());
    m.def("weight_dequant", [](Arr<uint8_t> w, Arr<float> s) {
        expect(w.ndim() == 2, "w must be 2-D");
        expect_shape(s, {(w.shape(0) + 127) / 128, (w.shape(1) + 127) / 128},
                     "scale [ceil(rows of w / 128), ceil(cols of w / 128)]");
        auto out = empty<uint16_t>({w.shape(0), w.shape(1)}, "weight_dequant output (the shape of w)");
        {
            py::gil_scoped_release nogil;
            weight_dequant(w.data(), s.data(), w.shape(0), w.shape(1), out.mutable_data());
        }
        return out;
    }, py::arg("w").noconvert(), py::arg("scale").noconvert());

}

}  // namespace dsperf::bindings
