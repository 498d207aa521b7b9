// Python face of the serving simulator (csrc/serving): dsperf._C.serving. dsperf.serving checks the
// arguments; this adapter converts them (enum names through the lists declared in
// serving_types.hpp), runs the simulation without the GIL and returns numpy columns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "common/require.hpp"
#include "serving/router.hpp"
#include "serving/simulator.hpp"
#include "serving/step_pricer.hpp"

namespace py = pybind11;
using namespace dsperf;
using namespace dsperf::serving;

namespace {

template <typename E>
E from_name(const std::vector<EnumEntry>& entries, const std::string& name, const char* what) {
    std::string known;
    for (size_t i = 0; i < entries.size(); ++i) {
        if (name == entries[i].name) return E(i);
        known += (i ? ", " : "") + std::string(entries[i].name);
    }
    throw std::invalid_argument(std::string(what) + " must be one of " + known + ", got '" + name + "'");
}

py::list names(const std::vector<EnumEntry>& entries) {
    py::list out;
    for (const EnumEntry& e : entries) out.append(py::make_tuple(e.name, e.text));
    return out;
}

template <typename T>
py::array_t<T> column(const std::vector<T>& v) {
    return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

template <typename T, typename F>
py::array_t<T> field(const std::vector<Record>& recs, F get) {
    py::array_t<T> a(static_cast<py::ssize_t>(recs.size()));
    T* p = a.mutable_data();
    for (size_t i = 0; i < recs.size(); ++i) p[i] = T(get(recs[i]));
    return a;
}

PoolConfig pool(const Deployment& dep, const Deployment& prefill_dep, int groups, int max_running, int token_budget) {
    PoolConfig p;
    p.dep = dep, p.prefill_dep = prefill_dep, p.groups = groups, p.max_running = max_running;
    p.token_budget = token_budget;
    return p;
}

py::dict simulate_py(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const std::string& mode,
                     const Deployment& decode_dep, const Deployment& decode_chunk_dep, int decode_groups,
                     int decode_max_running, int decode_token_budget, const Deployment& prefill_layout,
                     const Deployment& prefill_dep, int prefill_groups, int prefill_max_running,
                     int prefill_token_budget, const std::string& routing, bool prefix_cache, int block_tokens,
                     uint64_t seed, double kv_transfer_gbps, int max_waiting, double max_time_ms, int recv_interval,
                     const std::string& first_token,
                     const std::string& arrival, double rate, double cv, int concurrency, double duration_ms,
                     int input, int output, double range_ratio, int64_t max_requests,
                     py::array_t<double, py::array::c_style | py::array::forcecast> arrival_ms,
                     py::array_t<int32_t, py::array::c_style | py::array::forcecast> inputs,
                     py::array_t<int32_t, py::array::c_style | py::array::forcecast> outputs,
                     py::array_t<int64_t, py::array::c_style | py::array::forcecast> hash_offsets,
                     py::array_t<uint64_t, py::array::c_style | py::array::forcecast> hashes) {
    ServeConfig cfg;
    cfg.mode = from_name<ServeMode>(serve_modes(), mode, "mode");
    cfg.decode = pool(decode_dep, decode_chunk_dep, decode_groups, decode_max_running, decode_token_budget);
    cfg.prefill = pool(prefill_layout, prefill_dep, prefill_groups, prefill_max_running, prefill_token_budget);
    cfg.routing = from_name<Routing>(routings(), routing, "routing");
    cfg.prefix_cache = prefix_cache, cfg.block_tokens = block_tokens, cfg.seed = seed;
    cfg.kv_transfer_gbps = kv_transfer_gbps, cfg.max_waiting = max_waiting, cfg.max_time_ms = max_time_ms;
    cfg.recv_interval = recv_interval;
    cfg.first_token = from_name<FirstToken>(first_tokens(), first_token, "first_token");
    Workload w;
    w.kind = from_name<ArrivalKind>(arrival_kinds(), arrival, "arrival");
    w.rate = rate, w.cv = cv, w.concurrency = concurrency, w.duration_ms = duration_ms;
    w.input = input, w.output = output, w.range_ratio = range_ratio, w.max_requests = max_requests;
    const py::ssize_t n = arrival_ms.size();
    if (inputs.size() != n || outputs.size() != n || hash_offsets.size() != (n ? n + 1 : hash_offsets.size()))
        throw std::invalid_argument("trace columns must have one value per request (hash_offsets one more)");
    const double* a = arrival_ms.data();
    const int32_t* in = inputs.data();
    const int32_t* out = outputs.data();
    const int64_t* off = hash_offsets.data();
    const uint64_t* h = hashes.data();
    w.requests.resize(n);
    for (py::ssize_t i = 0; i < n; ++i) {
        Request& r = w.requests[i];
        r.arrival_ms = a[i], r.input = in[i], r.output = out[i];
        r.hashes.assign(h + off[i], h + off[i + 1]);
    }
    SimResult res;
    {
        py::gil_scoped_release release;
        res = simulate(m, d, t, cfg, w);
    }
    const auto& rec = res.records;
    py::dict records;
    records["arrival_ms"] = field<double>(rec, [](const Record& r) { return r.arrival_ms; });
    records["first_token_ms"] = field<double>(rec, [](const Record& r) { return r.first_token_ms; });
    records["finish_ms"] = field<double>(rec, [](const Record& r) { return r.finish_ms; });
    records["input_tokens"] = field<int32_t>(rec, [](const Record& r) { return r.input; });
    records["output_tokens"] = field<int32_t>(rec, [](const Record& r) { return r.output; });
    records["generated_tokens"] = field<int32_t>(rec, [](const Record& r) { return r.generated; });
    records["preemptions"] = field<int32_t>(rec, [](const Record& r) { return r.preemptions; });
    records["cached_tokens"] = field<int32_t>(rec, [](const Record& r) { return r.cached_tokens; });
    records["prefill_rank"] = field<int32_t>(rec, [](const Record& r) { return r.prefill_rank; });
    records["decode_rank"] = field<int32_t>(rec, [](const Record& r) { return r.decode_rank; });
    records["max_itl_ms"] = field<double>(rec, [](const Record& r) { return r.max_itl_ms; });
    py::dict series;
    series["time_ms"] = column(res.ts_ms);
    series["waiting"] = column(res.ts_waiting);
    series["running"] = column(res.ts_running);
    series["in_system"] = column(res.ts_in_system);
    series["kv_blocks"] = column(res.ts_kv_blocks);
    py::dict outd;
    outd["records"] = records;
    outd["series"] = series;
    outd["itl_values_ms"] = column(res.itl_ms.values);
    outd["itl_counts"] = column(res.itl_ms.counts);
    outd["overloaded"] = res.overloaded;
    outd["overload_since_ms"] = res.overload_since_ms;
    outd["stop_reason"] = res.stop_reason;
    outd["end_ms"] = res.end_ms;
    outd["steps"] = res.steps;
    outd["priced_points"] = res.priced_points;
    outd["kv_blocks_per_rank"] = res.kv_blocks_per_rank;
    outd["prefill_kv_blocks_per_rank"] = res.prefill_kv_blocks_per_rank;
    outd["ranks"] = res.ranks;
    outd["prefill_ranks"] = res.prefill_ranks;
    outd["draft_accept"] = res.draft_accept;
    return outd;
}

// A StepPricer with its own copies of what it prices against (the C++ class keeps references).
struct OwnedPricer {
    OwnedPricer(const ModelConfig& m, const DeviceSpec& d, const KernelTables& t, const Deployment& decode_dep,
                const Deployment& prefill_dep)
        : model(m), device(d), tables(t), pricer(model, device, tables, decode_dep, prefill_dep, ServeConfig{}.ctx_ratio,
                                                 ServeConfig{}.prefill_ratio) {}
    ModelConfig model;
    DeviceSpec device;
    KernelTables tables;
    StepPricer pricer;
};

}  // namespace

void bind_serving(py::module_& root) {
    py::module_ m = root.def_submodule("serving", "Request-level serving simulation on the grounded step model");
    m.attr("ARRIVALS") = names(arrival_kinds());
    m.attr("ROUTINGS") = names(routings());
    m.attr("MODES") = names(serve_modes());
    m.attr("FIRST_TOKENS") = names(first_tokens());
    // The numerical grids and routing slack the simulator assumes (dsperf.model.inputs lists them).
    m.attr("decode_context_ratio") = ServeConfig{}.ctx_ratio;
    m.attr("prefill_bucket_ratio") = ServeConfig{}.prefill_ratio;
    m.attr("recv_weight_decode") = serving::kRecvWeightDecode;
    m.attr("recv_weight_prompt") = serving::kRecvWeightPrompt;
    m.attr("prefix_slack_min") = serving::kPrefixSlackMin;
    m.attr("prefix_slack_divisor") = serving::kPrefixSlackDivisor;
    // The simulator's step prices, for callers that schedule steps themselves (the benchmark's
    // plain-Python loop prices its steps from the same cached table).
    py::class_<OwnedPricer>(m, "StepPricer")
        .def(py::init<const ModelConfig&, const DeviceSpec&, const KernelTables&, const Deployment&, const Deployment&>(),
             py::arg("model"), py::arg("device"), py::arg("tables"), py::arg("decode_dep"), py::arg("prefill_dep"))
        .def("step_ms", [](OwnedPricer& p, int batch, double ctx, double chunk_tokens, int chunks, double end_pos,
                           double decode_share, double chunk_share) {
            // The shares are Deployment::routed_share's, within its declared range (NaN fails it).
            for (const auto& [name, v] : {std::pair<const char*, double>{"decode_share", decode_share},
                                          std::pair<const char*, double>{"chunk_share", chunk_share}})
                dsperf::require(v >= dsperf::kMinRoutedShare && v <= dsperf::kMaxRoutedShare,
                                std::string(name) + " must lie in [" + std::to_string(dsperf::kMinRoutedShare) + ", " +
                                    std::to_string(dsperf::kMaxRoutedShare) + "], got " + std::to_string(v));
            return p.pricer.step_ms(batch, ctx, chunk_tokens, chunks, end_pos, decode_share, chunk_share);
        }, py::arg("batch"), py::arg("ctx"), py::arg("chunk_tokens"), py::arg("chunks"), py::arg("end_pos"),
        py::arg("decode_share") = 1.0, py::arg("chunk_share") = 1.0,
        "A rank's step (ms); the shares: its lock-stepped group's mean decode batch / prompt tokens over its own")
        .def_property_readonly("kv_tokens_per_rank", [](const OwnedPricer& p) { return p.pricer.kv_tokens_per_rank(); })
        .def_property_readonly("kv_bytes_per_token", [](const OwnedPricer& p) { return p.pricer.kv_bytes_per_token(); })
        .def_property_readonly("priced_points", [](const OwnedPricer& p) { return p.pricer.priced_points(); });
    m.def("draft_acceptance", &draft_acceptance, py::arg("drafts"), py::arg("accepted"));
    m.def("simulate", &simulate_py, py::arg("model"), py::arg("device"), py::arg("tables"), py::arg("mode"),
          py::arg("decode_dep"), py::arg("decode_chunk_dep"), py::arg("decode_groups"), py::arg("decode_max_running"),
          py::arg("decode_token_budget"), py::arg("prefill_layout"), py::arg("prefill_dep"), py::arg("prefill_groups"),
          py::arg("prefill_max_running"), py::arg("prefill_token_budget"), py::arg("routing"), py::arg("prefix_cache"),
          py::arg("block_tokens"), py::arg("seed"), py::arg("kv_transfer_gbps"), py::arg("max_waiting"),
          py::arg("max_time_ms"), py::arg("recv_interval"), py::arg("first_token"), py::arg("arrival"), py::arg("rate"), py::arg("cv"), py::arg("concurrency"),
          py::arg("duration_ms"), py::arg("input"), py::arg("output"), py::arg("range_ratio"),
          py::arg("max_requests"), py::arg("arrival_ms"), py::arg("inputs"),
          py::arg("outputs"), py::arg("hash_offsets"), py::arg("hashes"));
}
