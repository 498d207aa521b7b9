// Python face of the grounded model (grounded/kernel_table.hpp, grounded/step_model.hpp):
// dsperf._C.step_model. dsperf.grounded checks the arguments; this adapter converts and calls.
#include <cmath>
#include <iterator>
#include <sstream>
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "grounded/explore.hpp"
#include "grounded/layer_calls.hpp"
#include "grounded/routing_skew.hpp"
#include "grounded/step_model.hpp"

namespace py = pybind11;
using namespace dsperf;

namespace {
const char* stage_name(Stage s) { return kStageNames[int(s)]; }

// A call's shape under the table columns' names (grounded.SHAPE_COLUMNS), and fp8: whether the
// call reads FP8 operands (table_reads_fp8), not the deployment's flag.
py::dict shape_dict(const KernelCall& c) {
    const KernelShape& s = c.shape;
    return py::dict(py::arg("m") = s.m, py::arg("n") = s.n, py::arg("k") = s.k, py::arg("groups") = s.groups,
                    py::arg("batch") = s.batch, py::arg("kv_len") = s.kv_len, py::arg("heads") = s.heads,
                    py::arg("q_len") = s.q_len, py::arg("bytes") = s.bytes, py::arg("ep") = s.ep,
                    py::arg("tp") = s.tp, py::arg("fp8") = table_reads_fp8(c.family, s));
}
template <typename T>
T* column(py::dict& out, const char* name, size_t n) {
    py::array_t<T> a(static_cast<py::ssize_t>(n));
    out[name] = a;
    return a.mutable_data();
}

// A count the adapter passes on: at least 1, or an error naming it (a zero would divide by zero).
void require_positive(const char* name, int v) {
    if (v < 1) throw std::invalid_argument(std::string(name) + " must be >= 1, got " + std::to_string(v));
}

// The weight format of that name; an error naming weight_dtype and the names it may take.
const WeightFormat& weight_format_named(const std::string& name) {
    if (const WeightFormat* f = find_weight_format(name)) return *f;
    std::string known;
    for (const WeightFormat& f : kWeightFormats) known += std::string(known.empty() ? "" : ", ") + f.name;
    throw std::invalid_argument("weight_dtype must be one of " + known + ", got '" + name + "'");
}

py::dict explore_decode_py(const ModelConfig& m, const std::vector<DeviceSpec>& devices,
                           const std::vector<const KernelTables*>& tables, std::vector<int> ep,
                           std::vector<int> redundant, std::vector<int> attn_tp, std::vector<int> mtp,
                           std::vector<double> mtp_accepted, std::vector<int> kv_fp8, std::vector<int> overlap,
                           std::vector<double> batch, double kv_len, double imbalance, double step_overhead_ms,
                           const std::string& weight_dtype, int dense_tp, int moe_tp, double mem_fraction) {
    ExploreGrid g;
    g.devices = devices, g.tables = tables, g.ep = std::move(ep), g.redundant_experts = std::move(redundant);
    g.attn_tp = std::move(attn_tp), g.mtp = std::move(mtp), g.mtp_accepted = std::move(mtp_accepted);
    g.kv_fp8 = std::move(kv_fp8), g.overlap = std::move(overlap), g.batch = std::move(batch);
    g.kv_len = kv_len, g.imbalance = imbalance, g.step_overhead_ms = step_overhead_ms;
    g.weights = weight_format_named(weight_dtype).flags, g.dense_tp = dense_tp, g.moe_tp = moe_tp;
    g.mem_fraction = mem_fraction;
    g.validate(m);  // before allocating
    const size_t n = g.size();
    py::dict out;
    ExploreColumns c{};
    c.device_index = column<int32_t>(out, "device_index", n);
    c.ep = column<int32_t>(out, "ep", n);
    c.redundant_experts = column<int32_t>(out, "redundant_experts", n);
    c.attn_tp = column<int32_t>(out, "attn_tp", n);
    c.mtp = column<int32_t>(out, "mtp", n);
    c.mtp_accepted = column<double>(out, "mtp_accepted", n);
    c.kv_fp8 = column<bool>(out, "kv_fp8", n);
    c.overlap = column<int32_t>(out, "overlap", n);
    c.batch = column<double>(out, "batch", n);
    c.infeasible = column<int32_t>(out, "infeasible", n);
    c.step_ms = column<double>(out, "step_ms", n);
    c.tpot_ms = column<double>(out, "tpot_ms", n);
    c.tps_user = column<double>(out, "tps_user", n);
    c.tokens_per_gpu_s = column<double>(out, "tokens_per_gpu_s", n);
    c.batch_limit = column<double>(out, "batch_limit", n);
    c.fits_memory = column<bool>(out, "fits_memory", n);
    c.weights_gib = column<double>(out, "weights_gib", n);
    c.kv_gib = column<double>(out, "kv_gib", n);
    {
        py::gil_scoped_release release;
        explore_decode(m, g, c);
    }
    return out;
}
}  // namespace

void bind_step_model(py::module_& root) {
    py::module_ m = root.def_submodule("step_model", "The grounded model: a step as priced kernel calls");
    m.def("family_names", &table_family_names);
    m.attr("decode_step_overhead_ms") = kDecodeStepOverheadMs;
    m.attr("MAX_IMBALANCE") = kMaxImbalance;
    m.attr("prefill_step_overhead_ms") = kPrefillStepOverheadMs;
    m.attr("min_kernel_us") = kMinKernelUs;
    m.attr("graph_kernel_gap_us") = kGraphKernelGapUs;
    m.attr("memory_reserve") = kMemoryReserve;
    m.attr("large_allreduce_link_share") = kLargeAllReduceLinkShare;
    m.attr("nccl_tree_base_us") = kNcclTreeBaseUs;
    m.attr("nccl_tree_nvlink_hop_us") = kNcclTreeNvlinkHopUs;
    m.attr("nccl_tree_net_hop_us") = kNcclTreeNetHopUs;
    m.def("tp_group_fits_nodes", [](int tp, int gpus_per_node) {
              require_positive("tp", tp), require_positive("gpus_per_node", gpus_per_node);
              return tp_group_fits_nodes(tp, gpus_per_node);
          }, py::arg("tp"), py::arg("gpus_per_node"),
          "Whether a TP group of tp GPUs divides a node's GPUs or spans whole nodes (the layout checks' rule)");
    m.def("experts_share_attention_group", [](int attn_tp, int ep) {
              require_positive("attn_tp", attn_tp), require_positive("ep", ep);
              Deployment dep;
              dep.attn_tp = attn_tp, dep.ep = ep;
              return layer::experts_share_attention_group(dep);
          }, py::arg("attn_tp"), py::arg("ep"),
          "Whether the experts share the attention TP group, so the MoE layer is priced as an all-reduce "
          "with no dispatch (the model's rule, read by the launch export)");
    m.attr("TABLE_NVLINK_GBPS") = kTableNvlinkGbps;
    m.attr("TABLE_NIC_GBPS") = kTableNicGbps;
    m.def("table_row_fields", [](const std::string& f) { return table_row_fields(table_family_from_name(f)); },
          py::arg("family"), "The shape fields a table row of the family must give");
    m.def("is_comm_family", [](const std::string& f) { return is_comm_family(table_family_from_name(f)); });
    m.def("is_attention_family", [](const std::string& f) { return is_attention_family(table_family_from_name(f)); });

    py::class_<KernelShape>(m, "KernelShape")
        .def(py::init([](double mm, double n, double k, double groups, double batch, double kv_len, double heads,
                         double q_len, double bytes, double ep, double tp, bool fp8, bool fp8_math) {
                 return KernelShape{mm, n, k, groups, batch, kv_len, heads, q_len, bytes, ep, tp, fp8, fp8_math};
             }),
             py::kw_only(), py::arg("m") = 0.0, py::arg("n") = 0.0, py::arg("k") = 0.0, py::arg("groups") = 1.0,
             py::arg("batch") = 0.0, py::arg("kv_len") = 0.0, py::arg("heads") = 128.0, py::arg("q_len") = 1.0,
             py::arg("bytes") = 0.0, py::arg("ep") = 1.0, py::arg("tp") = 1.0, py::arg("fp8") = true,
             py::arg("fp8_math") = false)
        .def_readonly("fp8_math", &KernelShape::fp8_math);

    m.def("table_work", [](const std::string& f, const KernelShape& s) { return table_work(table_family_from_name(f), s); });
    m.def("datasheet_roofline_s", [](const KernelWork& w, const DeviceSpec& d, double clock_ratio) {
        if (!(clock_ratio > 0 && clock_ratio <= 1))
            throw std::invalid_argument("clock_ratio must lie in (0, 1], got " + std::to_string(clock_ratio));
        return datasheet_roofline_s(w, d, clock_ratio);
    }, py::arg("work"), py::arg("device"), py::arg("clock_ratio") = 1.0);

    py::class_<KernelTables>(m, "KernelTables")
        .def(py::init([](double default_efficiency) {
                 KernelTables t;
                 t.default_efficiency = default_efficiency;
                 return t;
             }),
             py::arg("default_efficiency") = 0.6)
        .def_readonly("default_efficiency", &KernelTables::default_efficiency)
        .def("add_latency",
             [](KernelTables& t, const std::string& f, const KernelShape& s, double us, const DeviceSpec& d) {
                 t.add_latency(table_family_from_name(f), s, us, d);
             },
             py::arg("family"), py::arg("shape"), py::arg("latency_us"), py::arg("measured_on"))
        .def("add_bandwidth",
             [](KernelTables& t, const std::string& f, double axis, double gbps) {
                 t.add_bandwidth(table_family_from_name(f), axis, gbps);
             },
             py::arg("family"), py::arg("axis"), py::arg("gbps"))
        .def("add_domain_bandwidth",
             [](KernelTables& t, const std::string& f, double ep, double gbps) {
                 t.add_domain_bandwidth(table_family_from_name(f), ep, gbps);
             },
             py::arg("family"), py::arg("ep"), py::arg("gbps"),
             "A dispatch/combine bandwidth timed inside the device's scale-up domain at ep (read by calls "
             "inside the domain; calls between domains read add_bandwidth's network rows)")
        .def("has_domain_rows",
             [](const KernelTables& t, const std::string& f) { return t.has_domain_rows(table_family_from_name(f)); })
        .def("add_allreduce_latency",
             [](KernelTables& t, double tp, double message_bytes, double us) { t.allreduce.add(tp, message_bytes, us); },
             py::arg("tp"), py::arg("message_bytes"), py::arg("latency_us"),
             "A measured latency (us) of one all-reduce of a message of message_bytes across tp GPUs")
        .def("allreduce_us", [](const KernelTables& t, int tp, double message_bytes, const DeviceSpec& device) {
            require_positive("tp", tp);
            if (!tp_group_fits_nodes(tp, device.gpus_per_node))
                throw std::invalid_argument("tp (" + std::to_string(tp) + ") must divide the " +
                                            std::to_string(device.gpus_per_node) +
                                            " GPUs of a node or be a multiple of them");
            if (!std::isfinite(message_bytes) || message_bytes < 0)
                throw std::invalid_argument("message_bytes must be finite and >= 0");
            const AllReduceLatency r = tp_allreduce_latency(t, device, tp, message_bytes);
            return py::dict(py::arg("us") = r.us, py::arg("found") = r.found, py::arg("clamped") = r.clamped);
        }, py::arg("tp"), py::arg("message_bytes"), py::arg("device"),
        "One TP all-reduce as the step model prices it on the device's links (over whole nodes: NCCL's model)")
        .def("rows", [](const KernelTables& t, const std::string& f) { return t.rows(table_family_from_name(f)); })
        .def(
            "lookup",
            [](const KernelTables& t, const std::string& f, const KernelShape& s, const DeviceSpec* device,
               double clock_ratio) {
                const TableLookup r = t.lookup(table_family_from_name(f), s, device, clock_ratio);
                return py::dict(py::arg("value") = r.value, py::arg("found") = r.found, py::arg("clamped") = r.clamped);
            },
            py::arg("family"), py::arg("shape"), py::arg("device") = nullptr, py::arg("clock_ratio") = 1.0);
    // The bounds a table's figures must lie in (grounded/kernel_table.hpp), for the loaders.
    m.attr("TABLE_BOUNDS") = py::dict(
        py::arg("latency_us") = py::make_tuple(kMinLatencyUs, kMaxLatencyUs),
        py::arg("gbps") = py::make_tuple(kMinTableGbps, kMaxTableGbps),
        py::arg("default_efficiency") = py::make_tuple(kMinDefaultEfficiency, kMaxDefaultEfficiency));

    py::class_<Deployment> deployment(m, "Deployment");
    // The enums' names from their one table (step_model.hpp), in value order.
    auto names_of = [](const auto& table) {
        py::tuple t(std::size(table));
        for (size_t i = 0; i < std::size(table); ++i) t[i] = table[i];
        return t;
    };
    m.attr("PHASES") = names_of(kPhaseNames);
    m.attr("OVERLAPS") = names_of(kOverlapNames);
    auto index_of = [](const auto& table, const std::string& v, const char* what) {
        for (size_t i = 0; i < std::size(table); ++i)
            if (v == table[i]) return int(i);
        std::string known;
        for (size_t i = 0; i < std::size(table); ++i) known += std::string(i ? ", " : "") + table[i];
        throw std::invalid_argument(std::string(what) + " must be one of " + known + ", got '" + v + "'");
    };
    deployment.def(py::init<>())
        .def_property(
            "phase", [](const Deployment& d) { return kPhaseNames[int(d.phase)]; },
            [index_of](Deployment& d, const std::string& v) { d.phase = Phase(index_of(kPhaseNames, v, "phase")); })
        .def_property(
            "overlap", [](const Deployment& d) { return kOverlapNames[int(d.overlap)]; },
            [index_of](Deployment& d, const std::string& v) {
                d.overlap = Overlap(index_of(kOverlapNames, v, "overlap"));
            })
        .def_readwrite("kv_fp8", &Deployment::kv_fp8)
        .def_readwrite("dispatch_fp8", &Deployment::dispatch_fp8)
        .def_readwrite("dispatch_fp4", &Deployment::dispatch_fp4)
        .def_property(
            "weight_dtype",
            [](const Deployment& d) -> py::object {
                const WeightFormat* f = find_weight_format(static_cast<const WeightFlags&>(d));
                return f ? py::object(py::str(f->name)) : py::object(py::none());  // None: flags no format names
            },
            [](Deployment& d, const std::string& v) { static_cast<WeightFlags&>(d) = weight_format_named(v).flags; })
        .def_readwrite("attn_fp8", &Deployment::attn_fp8)
        .def("validate", &Deployment::validate, py::arg("model"), py::arg("device"));
    // The weight format's flags and the named formats, from their one declaration (weight_format.hpp).
    {
        py::list flags;
#define DSPERF_BIND_WEIGHT_FLAG(flag, init)                                                            \
    deployment.def_readwrite(#flag, &Deployment::flag);                                                \
    flags.append(#flag);
        DSPERF_WEIGHT_FLAGS(DSPERF_BIND_WEIGHT_FLAG)
#undef DSPERF_BIND_WEIGHT_FLAG
        m.attr("WEIGHT_FLAGS") = py::tuple(flags);
        py::list formats;  // (name, (flag values in WEIGHT_FLAGS's order)), in declaration order
        for (const WeightFormat& f : kWeightFormats) {
            py::list values;
#define DSPERF_WEIGHT_FLAG_VALUE(flag, init) values.append(f.flags.flag);
            DSPERF_WEIGHT_FLAGS(DSPERF_WEIGHT_FLAG_VALUE)
#undef DSPERF_WEIGHT_FLAG_VALUE
            formats.append(py::make_tuple(f.name, py::tuple(values)));
        }
        m.attr("WEIGHT_FORMATS") = py::tuple(formats);
    }
    m.def(
        "weight_dtype_of",
        [](const std::vector<bool>& values) -> py::object {
            WeightFlags w;
            size_t i = 0;
            if (values.size() != kWeightFlagCount)
                throw std::invalid_argument("weight_dtype_of takes one value per WEIGHT_FLAGS flag");
#define DSPERF_READ_WEIGHT_FLAG(flag, init) w.flag = values[i++];
            DSPERF_WEIGHT_FLAGS(DSPERF_READ_WEIGHT_FLAG)
#undef DSPERF_READ_WEIGHT_FLAG
            const WeightFormat* f = find_weight_format(w);
            return f ? py::object(py::str(f->name)) : py::object(py::none());
        },
        py::arg("flags"), "The WEIGHT_FORMATS name of the flags (in WEIGHT_FLAGS's order), or None where none has them");
    // The numeric fields from their one declaration (DSPERF_DEPLOYMENT_FIELDS), and their bounds:
    // BOUNDS name -> (lowest, highest, sentinel or None), which dsperf.grounded checks arguments by.
    {
        py::dict bounds;
#define DSPERF_BIND_DEPLOYMENT_FIELD(type, field, init, lo, hi, sentinel)                              \
    deployment.def_readwrite(#field, &Deployment::field);                                              \
    bounds[#field] = py::make_tuple(double(lo), double(hi),                                            \
                                    double(sentinel) != 0 ? py::object(py::float_(double(sentinel))) : py::none());
        DSPERF_DEPLOYMENT_FIELDS(DSPERF_BIND_DEPLOYMENT_FIELD)
#undef DSPERF_BIND_DEPLOYMENT_FIELD
        deployment.attr("BOUNDS") = bounds;
    }

    m.def(
        "step_stages",
        [](const ModelConfig& mc, const DeviceSpec& d, const KernelTables& t, const Deployment& dep) {
            mc.validate();
            d.validate();
            dep.validate(mc, d);
            const StepStages s = step_stages(mc, d, t, dep);
            return py::dict(py::arg("micro") = s.micro, py::arg("attn_us") = s.attn, py::arg("dispatch_us") = s.dispatch,
                            py::arg("moe_us") = s.moe, py::arg("moe_shared_us") = s.moe_shared,
                            py::arg("combine_us") = s.combine, py::arg("dense_us") = s.dense,
                            py::arg("head_ms") = s.head_ms);
        },
        py::arg("model"), py::arg("device"), py::arg("tables"), py::arg("deployment"),
        "Per micro-batch and layer stage times (us) of a step, and its head (ms)");
    m.def("explore_decode", &explore_decode_py, py::arg("model"), py::arg("devices"), py::arg("tables"),
          py::arg("ep"), py::arg("redundant_experts"), py::arg("attn_tp"), py::arg("mtp"), py::arg("mtp_accepted"),
          py::arg("kv_fp8"), py::arg("overlap"), py::arg("batch"), py::arg("kv_len"), py::arg("imbalance"),
          py::arg("step_overhead_ms"), py::arg("weight_dtype") = kWeightFormats[0].name, py::arg("dense_tp") = 1,
          py::arg("moe_tp") = 1, py::arg("mem_fraction") = kMemoryReserve);
    m.def("infeasible_reasons", [] {
        py::list out;
        for (const InfeasibleReason& r : kInfeasibleReasons) out.append(py::make_tuple(r.name, r.text));
        return out;
    }, "(name, text) of each explorer infeasibility code, by code");
    m.def("layout_breach", [](const ModelConfig& model, const DeviceSpec& device, const Deployment& dep) {
              // The divisors the rules take; the other fields only compare.
              require_positive("attn_tp", dep.attn_tp), require_positive("ep", dep.ep);
              require_positive("moe_tp", dep.moe_tp), require_positive("dense_tp", dep.dense_tp);
              return std::string(kInfeasibleReasons[int(layout_breach(model, device, dep))].name);
          }, py::arg("model"), py::arg("device"), py::arg("deployment"),
          "The name of the first layout rule the deployment breaks ('none': it breaks none), as the "
          "explorer's reasons name it (layout_rules.hpp)");
    m.def("expected_remote_nodes", &expected_remote_nodes, py::arg("model"), py::arg("ep"), py::arg("gpus_per_node"));
    // The core trusts its callers (the step model); these checks are for calls from Python.
    const auto num = [](double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    };
    const auto within = [num](const char* name, double v, double lo, double hi) {
        if (!(std::isfinite(v) && v >= lo && v <= hi))
            throw std::invalid_argument(std::string(name) + " must be a finite number in [" + num(lo) + ", " + num(hi) +
                                        "], got " + num(v));
    };
    const auto at_least = [num](const char* name, double v, double lo) {
        if (!(std::isfinite(v) && v >= lo))
            throw std::invalid_argument(std::string(name) + " must be a finite number >= " + num(lo) + ", got " + num(v));
    };
    m.def(
        "routing_skew",
        [within, at_least](double mean_rows, double ranks, double dispersion) {
            at_least("mean_rows", mean_rows, 0), within("ranks", ranks, 1, kMaxSkewRanks),
                within("dispersion", dispersion, 0, kMaxSkewDispersion);
            return routing_skew(mean_rows, ranks, dispersion);
        },
        py::arg("mean_rows"), py::arg("ranks"), py::arg("dispersion") = 1.0,
        "the busiest rank's expected routed rows over the mean (csrc/grounded/routing_skew.hpp)");
    m.def(
        "routing_dispersion",
        [within, at_least](const ModelConfig& model, double ranks, int redundant_experts) {
            within("ranks", ranks, 1, kMaxSkewRanks), at_least("redundant_experts", redundant_experts, 0);
            return routing_dispersion(model, ranks, redundant_experts);
        },
        py::arg("model"), py::arg("ranks"), py::arg("redundant_experts"),
        "one token's routed rows on one expert set: variance over mean (csrc/grounded/routing_skew.hpp)");

    m.def(
        "step",
        [](const ModelConfig& mc, const DeviceSpec& d, const KernelTables& t, const Deployment& dep) {
            StepResult r;
            {
                py::gil_scoped_release release;
                r = step(mc, d, t, dep);
            }
            py::list calls;
            for (const auto& c : r.calls) {
                calls.append(py::dict(py::arg("kernel") = c.name, py::arg("family") = table_family_names()[int(c.family)],
                                      py::arg("stage") = stage_name(c.stage), py::arg("calls_per_step") = c.calls,
                                      py::arg("us") = c.us, py::arg("flops") = c.flops, py::arg("bytes") = c.bytes,
                                      py::arg("efficiency") = c.efficiency, py::arg("from_table") = c.from_table,
                                      py::arg("clamped") = c.clamped, py::arg("shape") = shape_dict(c)));
            }
            py::dict out(py::arg("moe_layer_ms") = r.moe_layer_ms, py::arg("dense_layer_ms") = r.dense_layer_ms,
                         py::arg("head_ms") = r.head_ms, py::arg("overhead_ms") = r.overhead_ms,
                         py::arg("launches") = r.launches, py::arg("launch_ms") = r.launch_ms,
                         py::arg("step_ms") = r.step_ms, py::arg("compute_ms") = r.compute_ms,
                         py::arg("comm_ms") = r.comm_ms, py::arg("tokens_per_step") = r.tokens_per_step,
                         py::arg("tokens_per_gpu_s") = r.tokens_per_gpu_s, py::arg("tpot_ms") = r.tpot_ms,
                         py::arg("tps_user") = r.tps_user, py::arg("weights_gib") = r.weights_gib,
                         py::arg("kv_gib") = r.kv_gib, py::arg("kv_bytes_per_token") = r.kv_bytes_per_token,
                         py::arg("batch_limit") = r.batch_limit, py::arg("fits_memory") = r.fits_memory,
                         py::arg("calls_from_table") = r.calls_from_table, py::arg("calls_default") = r.calls_default,
                         py::arg("calls_clamped") = r.calls_clamped);
            out["calls"] = calls;
            return out;
        },
        py::arg("model"), py::arg("device"), py::arg("tables"), py::arg("deployment"));
    m.def(
        "memory",
        [](const ModelConfig& mc, const DeviceSpec& d, const Deployment& dep) {
            mc.validate();
            d.validate();
            dep.validate(mc, d);
            StepResult r;
            memory(mc, d, dep, r);
            return py::dict(py::arg("weights_gib") = r.weights_gib, py::arg("kv_gib") = r.kv_gib,
                            py::arg("kv_bytes_per_token") = r.kv_bytes_per_token,
                            py::arg("batch_limit") = r.batch_limit, py::arg("fits_memory") = r.fits_memory);
        },
        py::arg("model"), py::arg("device"), py::arg("deployment"),
        "A deployment's memory per GPU alone (the memory fields of step, no kernel priced)");
}
