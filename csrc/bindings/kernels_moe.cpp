// MoE: the gate (and its configuration check), routing, permutation, the grouped experts and the layer.
#include "bindings/kernel_args.hpp"

namespace dsperf::bindings {

void bind_moe(py::module_& m) {
    // The gate's configuration, one object for the CPU gate, the GPU gate (dsperf._C.cuda.moe_gate)
    // and the MoE layer; validate() checks it against an expert count (the GPU gate's check too).
    py::class_<GateConfig>(m, "GateConfig", "moe_gate's configuration (kernels/cpu/moe.hpp's GateConfig)")
        .def(py::init(&gate_config), py::kw_only(), py::arg("n_group"), py::arg("topk_group"), py::arg("top_k"),
             py::arg("route_scale"), py::arg("score_func") = "sigmoid")
        .def_readonly("n_group", &GateConfig::n_group)
        .def_readonly("topk_group", &GateConfig::topk_group)
        .def_readonly("top_k", &GateConfig::top_k)
        .def_readonly("route_scale", &GateConfig::route_scale)
        .def_property_readonly("score_func", &score_func_name)
        .def("validate", &GateConfig::validate, py::arg("n_experts"), py::arg("has_bias"))
        .def("__repr__", [](const GateConfig& c) {
            return "GateConfig(n_group=" + std::to_string(c.n_group) + ", topk_group=" + std::to_string(c.topk_group) +
                   ", top_k=" + std::to_string(c.top_k) + ", route_scale=" + std::to_string(c.route_scale) +
                   ", score_func='" + score_func_name(c) + "')";
        });
    m.def("moe_gate", [](Arr<float> logits, py::object bias, const GateConfig& cfg) {
        expect(logits.ndim() == 2, "logits must be 2-D [tokens, experts]");
        const int64_t T = logits.shape(0), E = logits.shape(1), top_k = cfg.top_k;
        const float* b = optional_bias(bias, E, "bias");
        cfg.validate(E, b != nullptr);
        auto w = empty<float>({T, top_k}, "moe_gate weights [tokens, top_k]");
        auto ids = empty<int32_t>({T, top_k}, "moe_gate ids [tokens, top_k]");
        {
            py::gil_scoped_release nogil;
            moe_gate(logits.data(), T, E, b, cfg, w.mutable_data(), ids.mutable_data());
        }
        return py::make_tuple(w, ids);
    }, py::arg("logits").noconvert(), py::arg("bias"), py::arg("config"));

    m.def("moe_route", [](Arr<int32_t> ids, int64_t n_experts) {
        expect(ids.ndim() == 2, "ids must be 2-D [tokens, top_k]");
        const int64_t T = ids.shape(0), K = ids.shape(1);
        auto offsets = empty<int64_t>({checked_add(n_experts, 1, "n_experts + 1")}, "moe_route offsets [n_experts + 1]");
        auto position = empty<int32_t>({T, K}, "moe_route position (the shape of ids)");
        auto source = empty<int32_t>({T * K}, "moe_route source (the entries of ids)");
        {
            py::gil_scoped_release nogil;
            moe_route(ids.data(), T, K, n_experts, offsets.mutable_data(), position.mutable_data(), source.mutable_data());
        }
        return py::make_tuple(offsets, position, source);
    }, py::arg("ids").noconvert(), py::arg("n_experts"));
    m.def("moe_permute", [](Arr<uint16_t> x, Arr<int32_t> source) {
        expect(x.ndim() == 2 && source.ndim() == 1, "x must be 2-D and source 1-D");
        const int64_t T = x.shape(0), D = x.shape(1), R = source.shape(0);
        for (int64_t r = 0; r < R; ++r)
            expect(source.data()[r] >= 0 && source.data()[r] < T, "source[" + std::to_string(r) + "] is outside [0, tokens)");
        auto out = empty<uint16_t>({R, D}, "moe_permute output [entries of source, columns of x]");
        {
            py::gil_scoped_release nogil;
            moe_permute(x.data(), D, source.data(), R, out.mutable_data());
        }
        return out;
    }, py::arg("x").noconvert(), py::arg("source").noconvert());
    m.def("moe_unpermute", [](Arr<float> y_perm, Arr<int32_t> position, Arr<float> weights) {
        expect(y_perm.ndim() == 2 && position.ndim() == 2, "y_perm and position must be 2-D");
        const int64_t R = y_perm.shape(0), D = y_perm.shape(1), T = position.shape(0), K = position.shape(1);
        expect_shape(weights, {T, K}, "weights");
        for (int64_t i = 0; i < T * K; ++i)
            expect(position.data()[i] >= 0 && position.data()[i] < R, "position entries must index rows of y_perm");
        auto y = empty<float>({T, D}, "moe_unpermute output [rows of position, columns of y_perm]");
        {
            py::gil_scoped_release nogil;
            moe_unpermute(y_perm.data(), D, position.data(), weights.data(), T, K, y.mutable_data(), false);
        }
        return y;
    }, py::arg("y_perm").noconvert(), py::arg("position").noconvert(), py::arg("weights").noconvert());

    py::class_<ExpertTiles>(m, "ExpertTiles", "Each expert's w13 and w2 in AMX tile order (empty where AMX is not usable)")
        .def_property_readonly("experts", [](const ExpertTiles& t) { return t.w13.size(); })
        .def_property_readonly("nbytes", &ExpertTiles::bytes);
    m.def("pack_experts", [](py::array w13, py::array w2, py::object s13, py::object s2, bool fp8) {
        const ExpertWeights w = expert_weights(w13, w2, s13, s2, fp8);
        py::gil_scoped_release nogil;
        return pack_expert_tiles(w);
    }, py::arg("w13"), py::arg("w2"), py::arg("w13_scale"), py::arg("w2_scale"), py::arg("fp8"));
    m.def("experts_contiguous", [](Arr<uint16_t> x, Arr<int64_t> offsets, py::array w13, py::array w2,
                                   py::object s13, py::object s2, bool fp8, py::object tiles) {
        ExpertWeights w = expert_weights(w13, w2, s13, s2, fp8);
        w.tiles = expert_tiles(tiles, w);
        expect_shape(offsets, {w.n_experts + 1}, "offsets");
        expect(x.ndim() == 2 && x.shape(1) == w.dim, "x must be [rows, dim] with dim = " + std::to_string(w.dim));
        expect(offsets.data()[w.n_experts] == x.shape(0), "offsets[-1] must equal the rows of x");
        auto y = empty<float>({x.shape(0), w.dim}, "experts_contiguous output");
        {
            py::gil_scoped_release nogil;
            experts_contiguous(x.data(), offsets.data(), w, y.mutable_data());
        }
        return y;
    }, py::arg("x").noconvert(), py::arg("offsets").noconvert(), py::arg("w13"), py::arg("w2"), py::arg("w13_scale"),
       py::arg("w2_scale"), py::arg("fp8"), py::arg("tiles") = py::none());
    m.def("experts_masked", [](Arr<uint16_t> x, Arr<int32_t> counts, py::array w13, py::array w2, py::object s13,
                               py::object s2, bool fp8, py::object tiles) {
        ExpertWeights w = expert_weights(w13, w2, s13, s2, fp8);
        w.tiles = expert_tiles(tiles, w);
        expect(x.ndim() == 3 && x.shape(0) == w.n_experts && x.shape(2) == w.dim,
               "x must be [experts, capacity, dim] matching the weights");
        expect_shape(counts, {w.n_experts}, "counts");
        auto y = empty<float>({x.shape(0), x.shape(1), w.dim}, "experts_masked output");
        {
            py::gil_scoped_release nogil;
            experts_masked(x.data(), x.shape(1), counts.data(), w, y.mutable_data());
        }
        return y;
    }, py::arg("x").noconvert(), py::arg("counts").noconvert(), py::arg("w13"), py::arg("w2"), py::arg("w13_scale"),
       py::arg("w2_scale"), py::arg("fp8"), py::arg("tiles") = py::none());

    m.def("moe_layer", [](Arr<uint16_t> x, const py::dict& moe) {
        expect(x.ndim() == 2, "x must be [tokens, dim]");
        const MoeArgs a = moe_args(moe, x.shape(1));
        auto y = empty<float>({x.shape(0), a.routed.dim}, "moe_layer output");
        {
            py::gil_scoped_release nogil;
            moe_layer(x.data(), x.shape(0), a.gate_w.data(), a.gate_bias, a.gate, a.routed, a.shared, y.mutable_data());
        }
        return y;
    }, py::arg("x").noconvert(), py::arg("moe"));
}

}  // namespace dsperf::bindings
