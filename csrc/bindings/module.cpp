// pybind11 face of the dsperf core: converts arguments, releases the GIL for sweeps,
// and turns std::invalid_argument into ValueError. No model logic lives here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "seed/decode.hpp"
#include "seed/prefill.hpp"
#include "seed/sweep.hpp"
#include "model/block_costs.hpp"

namespace py = pybind11;
using namespace dsperf;

namespace {

py::tuple mla_tuple(const MlaFlops& f) {
    return py::make_tuple(f.total_gflop(), f.gemm_fp8_gflop, f.attn_fp16_gflop);
}

// Result structs to dicts, one key per field, named as the field.
py::dict prefill_mla_dict(const PrefillMla& r) {
    py::dict d;
    for (auto [key, value] : {std::pair<const char*, double>{"gemm_ms", r.gemm_ms},
                              {"attn_ms", r.attn_ms},
                              {"compute_ms", r.compute_ms},
                              {"allreduce_ms", r.allreduce_ms},
                              {"time_ms", r.time_ms}})
        d[key] = value;
    return d;
}

py::dict prefill_dict(const PrefillResult& r) {
    py::dict d;
    d["mla_gemm_ms"] = r.mla.gemm_ms;
    d["mla_attn_ms"] = r.mla.attn_ms;
    d["mla_tp1_ms"] = r.mla.compute_ms;
    d["allreduce_ms"] = r.mla.allreduce_ms;
    d["mla_ms"] = r.mla.time_ms;
    for (auto [key, value] : {std::pair<const char*, double>{"dense_mla_ms", r.dense_mla_ms},
                              {"dense_mlp_ms", r.dense_mlp_ms},
                              {"shared_expert_ms", r.shared_expert_ms},
                              {"routed_expert_ms", r.routed_expert_ms},
                              {"dispatch_ms", r.dispatch_ms},
                              {"combine_ms", r.combine_ms},
                              {"sum_overlap_ms", r.sum_overlap_ms},
                              {"sum_ms", r.sum_ms},
                              {"nodes", r.nodes},
                              {"tokens_per_s_node_overlap", r.tokens_per_s_node_overlap},
                              {"tokens_per_s_node", r.tokens_per_s_node},
                              {"computed_tokens_per_s_node_overlap", r.computed_tokens_per_s_node_overlap},
                              {"computed_tokens_per_s_node", r.computed_tokens_per_s_node},
                              {"kv_transfer_gbps_overlap", r.kv_transfer_gbps_overlap},
                              {"kv_transfer_gbps", r.kv_transfer_gbps}})
        d[key] = value;
    return d;
}

py::dict decode_dict(const DecodeResult& r) {
    py::dict d;
    for (auto [key, value] : {std::pair<const char*, double>{"kv_len", r.kv_len},
                              {"mla_gemm_ms", r.mla_gemm_ms},
                              {"mla_attn_ms", r.mla_attn_ms},
                              {"mla_tp1_ms", r.mla_tp1_ms},
                              {"mla_tp4_ms", r.mla_tp4_ms},
                              {"mla_tp8_ms", r.mla_tp8_ms},
                              {"allreduce_ms", r.allreduce_ms},
                              {"load_kv_fp8_ms", r.load_kv_fp8_ms},
                              {"load_kv_fp16_ms", r.load_kv_fp16_ms},
                              {"dense_mlp_ms", r.dense_mlp_ms},
                              {"shared_expert_ms", r.shared_expert_ms},
                              {"routed_expert_ms", r.routed_expert_ms},
                              {"dispatch_ms", r.dispatch_ms},
                              {"combine_ms", r.combine_ms},
                              {"dense_mla_ms", r.dense_mla_ms},
                              {"sparse_mla_ms", r.sparse_mla_ms},
                              {"tpot_overlap_ms", r.tpot_overlap_ms},
                              {"tpot_ms", r.tpot_ms},
                              {"tps_user_overlap", r.tps_user_overlap},
                              {"tps_user", r.tps_user},
                              {"tokens_per_gpu_s_overlap", r.tokens_per_gpu_s_overlap},
                              {"tokens_per_gpu_s", r.tokens_per_gpu_s},
                              {"time_budget_ms", r.time_budget_ms},
                              {"batch_limit", r.batch_limit},
                              {"experts_per_gpu", r.experts_per_gpu}})
        d[key] = value;
    d["mla_tp"] = r.mla_tp;
    return d;
}

PrefillParams make_prefill(double seq_len, double kv_cache_hit, int tp, int dp, int dispatch_nodes) {
    PrefillParams p;
    p.seq_len = seq_len, p.kv_cache_hit = kv_cache_hit, p.tp = tp, p.dp = dp, p.dispatch_nodes = dispatch_nodes;
    return p;
}

DecodeParams make_decode(double seq_len, double decode_len, double batch, int tp, int ep, int redundant,
                         bool absorbed, bool kv_fp8, double discount) {
    DecodeParams p;
    p.seq_len = seq_len, p.decode_len = decode_len, p.batch = batch, p.tp = tp, p.ep = ep;
    p.redundant_experts = redundant, p.absorbed = absorbed, p.kv_fp8 = kv_fp8;
    p.group_gemm_discount = discount;
    return p;
}

// All columns of a sweep result live in one block. A million-row result is ~120 MB, and
// faulting in fresh pages costs more than evaluating the model, so the block of the last
// result freed is kept (one block, at most kCacheLimit bytes) and reused by the next sweep that
// fits in it: a one-slot caching allocator. Only touched with the GIL held.
class ColumnArena {
public:
    static constexpr size_t kCacheLimit = size_t(1) << 30;

    ColumnArena(size_t rows, size_t bytes_per_row) : rows_(rows) {
        size_t bytes = 0;
        if (__builtin_mul_overflow(rows, bytes_per_row, &bytes))
            throw std::invalid_argument("decode_sweep: the result's size overflows");
        bytes = std::max<size_t>(bytes, 64);
        Block* b;
        if (cached_ && cached_->bytes >= bytes && cached_->bytes <= 2 * bytes) {
            b = cached_;
            cached_ = nullptr;
        } else {
            void* p = std::malloc(bytes);
            if (!p) throw std::bad_alloc();
            b = new Block{static_cast<char*>(p), bytes};
        }
        base_ = b->data;
        owner_ = py::capsule(b, [](void* q) { release(static_cast<Block*>(q)); });
    }
    template <typename T>
    py::array_t<T> take(T** ptr) {
        *ptr = reinterpret_cast<T*>(base_ + used_);
        used_ += rows_ * sizeof(T);
        return py::array_t<T>({static_cast<py::ssize_t>(rows_)}, {static_cast<py::ssize_t>(sizeof(T))}, *ptr, owner_);
    }

private:
    struct Block {
        char* data;
        size_t bytes;
    };
    static void release(Block* b) {
        if (b->bytes <= kCacheLimit && (!cached_ || cached_->bytes < b->bytes)) {
            std::swap(b, cached_);
        }
        if (b) {
            std::free(b->data);
            delete b;
        }
    }
    static inline Block* cached_ = nullptr;
    size_t rows_, used_ = 0;
    char* base_ = nullptr;
    py::capsule owner_;
};

py::dict decode_sweep_py(const ModelConfig& m, const std::vector<DeviceSpec>& devices, std::vector<int> tp,
                         std::vector<int> ep, std::vector<int> redundant, std::vector<int> kv_fp8,
                         std::vector<double> seq_len, std::vector<double> decode_len, std::vector<double> batch,
                         bool absorbed, double discount, const std::string& mode) {
    DecodeGrid g;
    g.devices = devices;
    g.tp = std::move(tp), g.ep = std::move(ep), g.redundant_experts = std::move(redundant);
    g.kv_fp8 = std::move(kv_fp8), g.seq_len = std::move(seq_len);
    g.decode_len = std::move(decode_len), g.batch = std::move(batch);
    g.absorbed = absorbed, g.group_gemm_discount = discount;
    const Fixes md = parse_mode(mode);
    g.validate(m);  // before allocating: a bad axis must not cost a huge allocation
    const size_t n = g.size();  // checked for overflow
    // The same bound as dsperf.costmodel.MAX_SWEEP_ROWS: a grid beyond it would exhaust memory.
    constexpr size_t kMaxRows = size_t(1) << 24;
    if (n > kMaxRows)
        throw std::invalid_argument("decode_sweep grid has " + std::to_string(n) + " rows, more than the " +
                                    std::to_string(kMaxRows) + " allowed (split the sweep)");
    DecodeSweepColumns c{};
    // 11 double, 5 int32 and 1 bool columns; taken widest first so every column stays aligned.
    ColumnArena arena(n, 11 * sizeof(double) + 5 * sizeof(int32_t) + sizeof(bool));
    py::dict out;
    out["seq_len"] = arena.take(&c.seq_len);
    out["decode_len"] = arena.take(&c.decode_len);
    out["batch"] = arena.take(&c.batch);
    out["tpot_ms"] = arena.take(&c.tpot_ms);
    out["tpot_overlap_ms"] = arena.take(&c.tpot_overlap_ms);
    out["tps_user"] = arena.take(&c.tps_user);
    out["tps_user_overlap"] = arena.take(&c.tps_user_overlap);
    out["tokens_per_gpu_s"] = arena.take(&c.tokens_per_gpu_s);
    out["tokens_per_gpu_s_overlap"] = arena.take(&c.tokens_per_gpu_s_overlap);
    out["time_budget_ms"] = arena.take(&c.time_budget_ms);
    out["batch_limit"] = arena.take(&c.batch_limit);
    out["device_index"] = arena.take(&c.device_index);
    out["tp"] = arena.take(&c.tp);
    out["ep"] = arena.take(&c.ep);
    out["redundant_experts"] = arena.take(&c.redundant_experts);
    out["mla_tp"] = arena.take(&c.mla_tp);
    out["kv_fp8"] = arena.take(&c.kv_fp8);  // the 1-byte column last: the int32 columns stay 4-byte aligned
    {
        py::gil_scoped_release release;
        decode_sweep(m, g, md, c);
    }
    return out;
}

// Fields of ModelConfig and DeviceSpec, set from Python with strict types: an integer field takes a
// Python or numpy integer (not a bool, not a float) that fits its C++ type, a float field any real
// number but a bool, a string field a str. pybind11's own setters would take True as 1, and answer an
// integer >= 2**31 with "incompatible function arguments", naming no field.
template <typename T>
T field_value(py::handle v, const std::string& where) {
    if constexpr (std::is_same_v<T, std::string>) {
        if (!PyUnicode_Check(v.ptr())) throw py::type_error(where + " must be a str, got " + py::repr(v).cast<std::string>());
        return v.cast<std::string>();
    } else if constexpr (std::is_integral_v<T>) {
        if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
            throw py::type_error(where + " must be an integer, got " + py::repr(v).cast<std::string>());
        const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
        if (overflow || x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
            throw py::value_error(where + " must lie in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                                  std::to_string(std::numeric_limits<T>::max()) + "], got " +
                                  py::repr(v).cast<std::string>());
        return T(x);
    } else {
        if (PyBool_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()))
            throw py::type_error(where + " must be a number, got " + py::repr(v).cast<std::string>());
        const double x = PyFloat_AsDouble(v.ptr());
        if (x == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            throw py::type_error(where + " must be a number, got " + py::repr(v).cast<std::string>());
        }
        return x;
    }
}

template <typename T>
const char* field_type_name() {
    if constexpr (std::is_same_v<T, std::string>) return "str";
    else if constexpr (std::is_integral_v<T>) return "int";
    else return "float";
}

template <typename C, typename T>
void strict_field(py::class_<C>& cls, const char* cls_name, const char* name, T C::*member) {
    const std::string where = std::string(cls_name) + "." + name;
    cls.def_property(name, [member](const C& c) { return c.*member; },
                     [member, where](C& c, py::handle v) { c.*member = field_value<T>(v, where); });
}

}  // namespace

void bind_kernels(py::module_& root);  // kernels.cpp
void bind_ep(py::module_& root);       // ep.cpp
void bind_kernel_cost(py::module_& root);  // kernel_cost.cpp
void bind_step_model(py::module_& root);   // step_model.cpp
void bind_cuda(py::module_& root);  // cuda.cpp
void bind_cuda_hopper(py::module_& root);  // cuda_hopper.cpp (after bind_cuda: adds to its submodule)
void bind_serving(py::module_& root);  // serving.cpp

PYBIND11_MODULE(_C, mod) {
    mod.doc() = "dsperf C++ core: model block costs, device specs, prefill/decode cost model";
#ifdef DSPERF_WITH_CUDA
    mod.attr("cuda_built") = true;
#else
    mod.attr("cuda_built") = false;
#endif

    bind_kernels(mod);
    bind_ep(mod);
    bind_kernel_cost(mod);
    bind_step_model(mod);
    bind_cuda(mod);
    bind_cuda_hopper(mod);
    bind_serving(mod);

    py::class_<ModelConfig> model_cls(mod, "ModelConfig");
    model_cls.def(py::init<>())
        .def_property_readonly("n_moe_layers", &ModelConfig::n_moe_layers)
        .def_property_readonly("kv_cache_width", &ModelConfig::kv_cache_width)
        .def("validate", &ModelConfig::validate);
    strict_field(model_cls, "ModelConfig", "name", &ModelConfig::name);
    strict_field(model_cls, "ModelConfig", "vocab_size", &ModelConfig::vocab_size);
    strict_field(model_cls, "ModelConfig", "dim", &ModelConfig::dim);
    strict_field(model_cls, "ModelConfig", "inter_dim", &ModelConfig::inter_dim);
    strict_field(model_cls, "ModelConfig", "moe_inter_dim", &ModelConfig::moe_inter_dim);
    strict_field(model_cls, "ModelConfig", "n_layers", &ModelConfig::n_layers);
    strict_field(model_cls, "ModelConfig", "n_dense_layers", &ModelConfig::n_dense_layers);
    strict_field(model_cls, "ModelConfig", "n_heads", &ModelConfig::n_heads);
    strict_field(model_cls, "ModelConfig", "n_routed_experts", &ModelConfig::n_routed_experts);
    strict_field(model_cls, "ModelConfig", "n_shared_experts", &ModelConfig::n_shared_experts);
    strict_field(model_cls, "ModelConfig", "n_activated_experts", &ModelConfig::n_activated_experts);
    strict_field(model_cls, "ModelConfig", "n_expert_groups", &ModelConfig::n_expert_groups);
    strict_field(model_cls, "ModelConfig", "n_limited_groups", &ModelConfig::n_limited_groups);
    strict_field(model_cls, "ModelConfig", "route_scale", &ModelConfig::route_scale);
    strict_field(model_cls, "ModelConfig", "quoted_total_params", &ModelConfig::quoted_total_params);
    strict_field(model_cls, "ModelConfig", "q_lora_rank", &ModelConfig::q_lora_rank);
    strict_field(model_cls, "ModelConfig", "kv_lora_rank", &ModelConfig::kv_lora_rank);
    strict_field(model_cls, "ModelConfig", "qk_nope_head_dim", &ModelConfig::qk_nope_head_dim);
    strict_field(model_cls, "ModelConfig", "qk_rope_head_dim", &ModelConfig::qk_rope_head_dim);
    strict_field(model_cls, "ModelConfig", "v_head_dim", &ModelConfig::v_head_dim);
    mod.attr("MODEL_FIELD_MAX") = kMaxModelField;

    py::class_<DeviceSpec> device_cls(mod, "DeviceSpec");
    device_cls.def(py::init<>())
        .def("validate", &DeviceSpec::validate)
        .def("fp16_tflops_eff", &DeviceSpec::fp16_tflops_eff, py::arg("comm_sms"))
        .def("fp8_tflops_eff", &DeviceSpec::fp8_tflops_eff, py::arg("comm_sms"))
        .def("mem_bw_eff", &DeviceSpec::mem_bw_eff)
        .def("nvlink_eff", &DeviceSpec::nvlink_eff)
        .def("scaleout_eff", &DeviceSpec::scaleout_eff);

    // Every field from the one list (hardware/device_spec.hpp), and the list itself for Python:
    // (name, "int" / "float" / "str", required in a device file).
    // BOUNDS: name -> (lowest, highest, 0 allowed) of each numeric field.
    py::list device_fields;
    py::dict device_bounds;
#define DSPERF_BIND_FIELD(type, field, init, required, lo, hi, zero_ok)                  \
    strict_field(device_cls, "DeviceSpec", #field, &DeviceSpec::field);                 \
    device_fields.append(py::make_tuple(#field, field_type_name<type>(), required));    \
    if (std::is_arithmetic_v<type>) device_bounds[#field] = py::make_tuple(double(lo), double(hi), zero_ok);
    DSPERF_DEVICE_SPEC_FIELDS(DSPERF_BIND_FIELD)
#undef DSPERF_BIND_FIELD
    device_cls.attr("FIELDS") = py::tuple(device_fields);
    device_cls.attr("BOUNDS") = device_bounds;

    mod.def("fix_names", &fix_names, "Names of the seed quirks a mode string can fix (+name) or keep (-name)");
    mod.def("fix_descriptions", &fix_descriptions, "One line per fix, in fix_names order: what it changes");
    mod.def("parse_mode", [](const std::string& mode) {
        const Fixes fx = parse_mode(mode);
        py::dict d;
        for (int i = 0; i < kFixCount; ++i) d[py::str(fix_names()[i])] = fx.on[i];
        return d;
    }, py::arg("mode"), "The fixes a mode string turns on, by name");
    // Token counts for the FLOP functions: checked here, since the core's pure formulas take any
    // double.
    auto tokens_ok = [](double v, const char* name) {
        if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument(std::string(name) + " must be finite and >= 0");
    };
    auto hit_ok = [](double v) {
        if (!(v >= 0 && v <= 1)) throw std::invalid_argument("kv_cache_hit must lie in [0, 1]");
    };
    mod.def("mla_flops", [=](double q, double kv, const ModelConfig& m, double hit) {
        tokens_ok(q, "q_len"), tokens_ok(kv, "kv_len"), hit_ok(hit), m.validate();
        return mla_tuple(mla_flops(q, kv, m, hit));
    }, py::arg("q_len"), py::arg("kv_len"), py::arg("model"), py::arg("kv_cache_hit") = 0.0,
       "(total, gemm_fp8, attn_fp16) GFLOP of standard MLA");
    mod.def("mla_absorbed_flops", [=](double q, double kv, const ModelConfig& m, double hit) {
        tokens_ok(q, "q_len"), tokens_ok(kv, "kv_len"), hit_ok(hit), m.validate();
        return mla_tuple(mla_absorbed_flops(q, kv, m, hit));
    }, py::arg("q_len"), py::arg("kv_len"), py::arg("model"), py::arg("kv_cache_hit") = 0.0,
       "(total, gemm_fp8, attn_fp16) GFLOP of absorbed MLA");
    mod.def("mla_flops_causal", [=](double fresh, double cached, const ModelConfig& m) {
        tokens_ok(fresh, "new_tokens"), tokens_ok(cached, "cached_tokens"), m.validate();
        return mla_tuple(mla_flops_causal(fresh, cached, m));
    }, py::arg("new_tokens"), py::arg("cached_tokens"), py::arg("model"));
    using TokenFlops = double (*)(const ModelConfig&, double);
    // A plain copy of the function pointer for the lambda: C++17 lambdas cannot capture a structured
    // binding (GCC accepts it as an extension; Clang refuses).
    for (const auto& entry : {std::pair<const char*, TokenFlops>{"dense_mlp_gflop", &dense_mlp_gflop},
                              {"expert_gflop", &expert_gflop},
                              {"gate_gflop", &gate_gflop},
                              {"lm_head_gflop", &lm_head_gflop}}) {
        const TokenFlops fn = entry.second;
        mod.def(entry.first, [=](const ModelConfig& m, double tokens) {
            tokens_ok(tokens, "tokens"), m.validate();
            return fn(m, tokens);
        }, py::arg("model"), py::arg("tokens"));
    }
    mod.def("param_counts", [](const ModelConfig& m, bool with_bias) {
        const ParamCounts p = param_counts(m, with_bias);
        py::dict d;
        d["mla"] = p.mla, d["mla_absorbed"] = p.mla_absorbed, d["dense_mlp"] = p.dense_mlp;
        d["expert"] = p.expert, d["gate"] = p.gate, d["embedding"] = p.embedding;
        d["lm_head"] = p.lm_head, d["total"] = p.total;
        return d;
    }, py::arg("model"), py::arg("with_bias"));
    mod.def("kv_cache_bytes_per_token", &kv_cache_bytes_per_token, py::arg("model"),
            py::arg("bytes_per_element"));

    mod.def("prefill_mla", [](const ModelConfig& m, const DeviceSpec& d, double seq_len, double hit, int tp,
                              const std::string& mode) {
        m.validate();
        d.validate();
        PrefillParams p = make_prefill(seq_len, hit, 1, d.gpus_per_node, 4);
        p.validate(d);  // seq_len and kv_cache_hit; the layout is not asked here
        if (tp < 1) throw std::invalid_argument("tp must be >= 1");
        return prefill_mla_dict(prefill_mla(m, d, p, tp, parse_mode(mode)));
    }, py::arg("model"), py::arg("device"), py::arg("seq_len"), py::arg("kv_cache_hit"), py::arg("tp"),
       py::arg("mode") = "as_published");
    mod.def("prefill", [](const ModelConfig& m, const DeviceSpec& d, double seq_len, double hit, int tp, int dp,
                          int dispatch_nodes, const std::string& mode) {
        return prefill_dict(prefill(m, d, make_prefill(seq_len, hit, tp, dp, dispatch_nodes), parse_mode(mode)));
    }, py::arg("model"), py::arg("device"), py::arg("seq_len"), py::arg("kv_cache_hit"), py::arg("tp"),
       py::arg("dp"), py::arg("dispatch_nodes") = 4, py::arg("mode") = "as_published");
    mod.def("decode", [](const ModelConfig& m, const DeviceSpec& d, double seq_len, double decode_len,
                         double batch, int tp, int ep, int redundant, bool absorbed, bool kv_fp8,
                         double discount, const std::string& mode) {
        return decode_dict(decode(m, d, make_decode(seq_len, decode_len, batch, tp, ep, redundant, absorbed,
                                                    kv_fp8, discount), parse_mode(mode)));
    }, py::arg("model"), py::arg("device"), py::arg("seq_len"), py::arg("decode_len"), py::arg("batch"),
       py::arg("tp") = 0, py::arg("ep") = 144, py::arg("redundant_experts") = 32, py::arg("absorbed") = true,
       py::arg("kv_fp8") = true, py::arg("group_gemm_discount") = 0.7, py::arg("mode") = "as_published");
    mod.def("decode_batch_limit", [](const ModelConfig& m, const DeviceSpec& d, double seq_len,
                                     double decode_len, int tp, int ep, int redundant, bool absorbed,
                                     bool kv_fp8, const std::string& mode) {
        DecodeParams p = make_decode(seq_len, decode_len, 1, tp, ep, redundant, absorbed, kv_fp8, 0.7);
        m.validate();
        d.validate();
        p.validate(m, d);
        if (tp < 1) throw std::invalid_argument("tp must be >= 1");
        return decode_batch_limit(m, d, p, tp, parse_mode(mode));
    }, py::arg("model"), py::arg("device"), py::arg("seq_len"), py::arg("decode_len"), py::arg("tp") = 1,
       py::arg("ep") = 144, py::arg("redundant_experts") = 32, py::arg("absorbed") = true,
       py::arg("kv_fp8") = true, py::arg("mode") = "as_published");
    mod.def("decode_sweep", &decode_sweep_py, py::arg("model"), py::arg("devices"), py::arg("tp"),
            py::arg("ep"), py::arg("redundant_experts"), py::arg("kv_fp8"), py::arg("seq_len"),
            py::arg("decode_len"), py::arg("batch"), py::arg("absorbed") = true,
            py::arg("group_gemm_discount") = 0.7, py::arg("mode") = "as_published");
}
