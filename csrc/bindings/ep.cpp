// pybind11 face of the expert-parallel helpers: EPLB (python/dsperf/ep/eplb.py checks the
// arguments' types and shapes; the core re-checks the values and names the bad argument), the
// exchange's row copies, the routing plan (ep/ep_plan.hpp) and the window exchange's calls (checked
// here, once; their core trusts them).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ep/ep_copy.hpp"
#include "ep/ep_plan.hpp"
#include "ep/ep_window.hpp"
#include "ep/eplb.hpp"

namespace py = pybind11;
using namespace dsperf::ep;

namespace {

template <typename T>
using Arr = py::array_t<T, py::array::c_style | py::array::forcecast>;

// load [layers, num_logical] -> (phy2log [layers, P], log2phy [layers, L, R], logcnt [layers, L], hierarchical)
py::tuple rebalance(const Arr<double>& load, int64_t num_physical, int64_t num_groups, int64_t num_nodes,
                    int64_t num_gpus, const std::string& policy_name) {
    if (load.ndim() != 2) throw std::invalid_argument("load must be 2-D [layers, experts]");
    const EplbPolicy policy = parse_eplb_policy(policy_name);
    const int64_t layers = load.shape(0), L = load.shape(1);
    std::vector<EplbPlan> plans(layers);
    {
        py::gil_scoped_release release;
        for (int64_t l = 0; l < layers; ++l)
            plans[l] = rebalance_experts(load.data(l, 0), L, num_physical, num_groups, num_nodes, num_gpus, policy);
    }
    int64_t R = 1;
    for (const auto& p : plans) R = std::max(R, p.max_replicas);
    Arr<int32_t> phy2log({layers, num_physical});
    Arr<int32_t> log2phy({layers, L, R});
    Arr<int32_t> logcnt({layers, L});
    auto a = phy2log.mutable_unchecked<2>();
    auto b = log2phy.mutable_unchecked<3>();
    auto c = logcnt.mutable_unchecked<2>();
    for (int64_t l = 0; l < layers; ++l) {
        const EplbPlan& p = plans[l];
        for (int64_t s = 0; s < num_physical; ++s) a(l, s) = p.phy2log[s];
        for (int64_t e = 0; e < L; ++e) {
            c(l, e) = p.logcnt[e];
            for (int64_t r = 0; r < R; ++r) b(l, e, r) = r < p.max_replicas ? p.log2phy[e * p.max_replicas + r] : -1;
        }
    }
    const bool hier = layers > 0 && plans[0].hierarchical;
    return py::make_tuple(phy2log, log2phy, logcnt, hier);
}

double imbalance(const Arr<double>& load, const Arr<int32_t>& phy2log, const Arr<int32_t>& logcnt, int64_t num_gpus) {
    if (load.ndim() != 1 || phy2log.ndim() != 1 || logcnt.ndim() != 1)
        throw std::invalid_argument("imbalance takes one layer: 1-D load, phy2log and logcnt");
    if (logcnt.shape(0) != load.shape(0))
        throw std::invalid_argument("logcnt must have one entry per logical expert (" + std::to_string(load.shape(0)) +
                                    "), got " + std::to_string(logcnt.shape(0)));
    return placement_imbalance(load.data(), load.shape(0), phy2log.data(), phy2log.shape(0), logcnt.data(), num_gpus);
}

// Arrays read or written in place: C-contiguous of exactly this dtype. Written arguments are also
// bound with noconvert(), so a strided or mistyped output is refused instead of silently copied.
template <typename T>
using Raw = py::array_t<T, py::array::c_style>;

void expect(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

// The exchange's row copies. BF16 travels as raw uint16 bits; dsperf/ep/alltoall.py checks shapes.
void bind_copies(py::module_& m) {
    m.def("weighted_rows_to_bf16", [](Raw<float> y, Raw<int32_t> position, Raw<float> weights, Raw<uint16_t> out) {
        expect(y.ndim() == 2 && position.ndim() == 2 && weights.ndim() == 2 && out.ndim() == 2, "2-D arrays expected");
        expect(weights.shape(0) == position.shape(0) && weights.shape(1) == position.shape(1), "weights must match position");
        expect(out.shape(0) == position.shape(0) && out.shape(1) == y.shape(1), "out must be [tokens, dim]");
        py::gil_scoped_release release;
        weighted_rows_to_bf16(y.data(), y.shape(0), y.shape(1), position.data(), weights.data(), position.shape(0),
                              position.shape(1), out.mutable_data());
    }, py::arg("y"), py::arg("position"), py::arg("weights"), py::arg("out").noconvert());
    m.def("weighted_sum_bf16_rows", [](Raw<uint16_t> rows, Raw<int32_t> position, Raw<float> weights, Raw<float> out) {
        expect(rows.ndim() == 2 && position.ndim() == 2 && weights.ndim() == 2 && out.ndim() == 2, "2-D arrays expected");
        expect(weights.shape(0) == position.shape(0) && weights.shape(1) == position.shape(1), "weights must match position");
        expect(out.shape(0) == position.shape(0) && out.shape(1) == rows.shape(1), "out must be [tokens, dim]");
        py::gil_scoped_release release;
        weighted_sum_bf16_rows(rows.data(), rows.shape(0), rows.shape(1), position.data(), weights.data(),
                               position.shape(0), position.shape(1), out.mutable_data());
    }, py::arg("rows"), py::arg("position"), py::arg("weights"), py::arg("out").noconvert());
    m.def("gather_rows_to_bf16", [](Raw<float> y, py::object index, Raw<uint16_t> out, int threads) {
        expect(y.ndim() == 2 && out.ndim() == 2 && out.shape(1) == y.shape(1), "y and out must be 2-D of one width");
        Raw<int64_t> idx;
        const int64_t* ip = nullptr;
        if (!index.is_none()) {
            idx = index.cast<Raw<int64_t>>();
            expect(idx.ndim() == 1 && idx.shape(0) == out.shape(0), "index must have one entry per row of out");
            ip = idx.data();
        }
        py::gil_scoped_release release;
        gather_rows_to_bf16(y.data(), y.shape(0), y.shape(1), ip, out.shape(0), out.mutable_data(), threads);
    }, py::arg("y"), py::arg("index"), py::arg("out").noconvert(), py::arg("threads") = 0);
    m.def("combine_reduce", [](Raw<uint16_t> rows, Raw<int64_t> token_rows, Raw<float> out) {
        expect(rows.ndim() == 2 && token_rows.ndim() == 2 && out.ndim() == 2, "2-D arrays expected");
        expect(out.shape(0) == token_rows.shape(0) && out.shape(1) == rows.shape(1),
               "out must be [tokens, dim] with token_rows [tokens, ranks]");
        py::gil_scoped_release release;
        combine_reduce(rows.data(), rows.shape(0), rows.shape(1), token_rows.data(), token_rows.shape(0),
                       token_rows.shape(1), out.mutable_data());
    }, py::arg("rows"), py::arg("token_rows"), py::arg("out").noconvert());
    // buf: byte records [rows, stride] holding FP8 values at column 0 and FP32 scales at scale_col.
    m.def("dequant_gather_rows", [](Raw<uint8_t> buf, int64_t scale_col, int64_t dim, py::object source,
                                    Raw<uint16_t> out) {
        expect(buf.ndim() == 2 && out.ndim() == 2 && out.shape(1) == dim, "buf 2-D, out [n, dim]");
        const int64_t stride = buf.shape(1), groups = (dim + 127) / 128;
        expect(dim >= 1 && scale_col >= dim && scale_col % 4 == 0 && stride % 4 == 0 && scale_col + 4 * groups <= stride,
               "scales must lie 4-byte aligned after the values within a record");
        Raw<int64_t> src;
        const int64_t* sp = nullptr;
        if (!source.is_none()) {
            src = source.cast<Raw<int64_t>>();
            expect(src.ndim() == 1 && src.shape(0) == out.shape(0), "source must have one entry per row of out");
            sp = src.data();
        }
        const uint8_t* b = buf.data();
        expect(reinterpret_cast<uintptr_t>(b) % 4 == 0, "buf must be 4-byte aligned (its FP32 scales are read in place)");
        py::gil_scoped_release release;
        dequant_gather_rows(b, stride, reinterpret_cast<const float*>(b + scale_col), stride / 4, buf.shape(0), dim, sp,
                            out.shape(0), out.mutable_data());
    }, py::arg("buf"), py::arg("scale_col"), py::arg("dim"), py::arg("source"), py::arg("out").noconvert());
    m.def("dequant_rows", [](Raw<uint8_t> values, Raw<float> scales, Raw<uint16_t> out) {
        expect(values.ndim() == 2 && scales.ndim() == 2 && out.ndim() == 2, "2-D arrays expected");
        const int64_t n = values.shape(0), dim = values.shape(1);
        expect(scales.shape(0) == n && scales.shape(1) == (dim + 127) / 128, "scales must be [rows, ceil(dim / 128)]");
        expect(out.shape(0) == n && out.shape(1) == dim, "out must be [rows, dim]");
        py::gil_scoped_release release;
        dequant_gather_rows(values.data(), dim, scales.data(), scales.shape(1), n, dim, nullptr, n, out.mutable_data());
    }, py::arg("values"), py::arg("scales"), py::arg("out").noconvert());
    m.def("copy_rows", [](Raw<uint8_t> src, int64_t src_col, py::object src_index, Raw<uint8_t> dst, int64_t dst_col,
                          py::object dst_index, int64_t n, int64_t width, int threads) {
        expect(src.ndim() == 2 && dst.ndim() == 2, "src and dst must be 2-D byte arrays");
        Raw<int64_t> si, di;
        const int64_t* sp = nullptr;
        const int64_t* dp = nullptr;
        if (!src_index.is_none()) {
            si = src_index.cast<Raw<int64_t>>();
            expect(si.ndim() == 1 && si.shape(0) >= n, "src_index must have n entries");
            sp = si.data();
        }
        if (!dst_index.is_none()) {
            di = dst_index.cast<Raw<int64_t>>();
            expect(di.ndim() == 1 && di.shape(0) >= n, "dst_index must have n entries");
            dp = di.data();
        }
        if (!sp) expect(n <= src.shape(0), "n exceeds the source rows");
        if (!dp) expect(n <= dst.shape(0), "n exceeds the destination rows");
        py::gil_scoped_release release;
        copy_rows(src.data(), src.shape(0), src.shape(1), src_col, sp, dst.mutable_data(), dst.shape(0), dst.shape(1),
                  dst_col, dp, n, width, threads);
    }, py::arg("src"), py::arg("src_col"), py::arg("src_index"), py::arg("dst").noconvert(), py::arg("dst_col"),
       py::arg("dst_index"), py::arg("n"), py::arg("width"), py::arg("threads") = 0);
}

// The window exchange's flags and pull-side reduction (dsperf/ep/window.py, exchange.py). Arrays
// here are views of MPI shared-memory windows: taken in place (no conversion), checked once.
void bind_window(py::module_& m) {
    m.def("flag_publish", [](Raw<int64_t> flag, int64_t value) {
        expect(flag.size() >= 1, "flag must hold one int64");
        flag_publish(flag.mutable_data(), value);
    }, py::arg("flag").noconvert(), py::arg("value"));
    m.def("flags_wait", [](std::vector<Raw<int64_t>> flags, int64_t target, double timeout_s, double spin_s) {
        std::vector<int64_t*> ptrs;
        for (auto& f : flags) {
            expect(f.size() >= 1, "every flag must hold one int64");
            ptrs.push_back(f.mutable_data());
        }
        py::gil_scoped_release release;
        return flags_wait(ptrs.data(), int64_t(ptrs.size()), target, timeout_s, spin_s);
    }, py::arg("flags"), py::arg("target"), py::arg("timeout_s"), py::arg("spin_s"));
    m.def("pull_weighted_sum", [](std::vector<Raw<uint16_t>> rows, Raw<int32_t> peer, Raw<int64_t> row,
                                  py::object weights, Raw<float> out, int threads) {
        expect(peer.ndim() == 2 && row.ndim() == 2 && out.ndim() == 2, "peer, row and out must be 2-D");
        expect(row.shape(0) == peer.shape(0) && row.shape(1) == peer.shape(1), "row must match peer");
        expect(out.shape(0) == peer.shape(0), "out must have one row per token");
        const int64_t dim = out.shape(1), n = peer.size();
        std::vector<const bf16_t*> bases;
        std::vector<int64_t> avail;
        for (auto& r : rows) {
            expect(r.ndim() == 2 && r.shape(1) == dim, "every peer's rows must be 2-D of out's width");
            bases.push_back(reinterpret_cast<const bf16_t*>(r.data()));
            avail.push_back(r.shape(0));
        }
        const int32_t* pp = peer.data();
        const int64_t* rp = row.data();
        for (int64_t i = 0; i < n; ++i) {
            if (pp[i] < 0) continue;
            expect(pp[i] < int64_t(bases.size()) && rp[i] >= 0 && rp[i] < avail[pp[i]],
                   "peer/row entries must index the peers' rows");
        }
        Raw<float> w;
        const float* wp = nullptr;
        if (!weights.is_none()) {
            w = weights.cast<Raw<float>>();
            expect(w.ndim() == 2 && w.shape(0) == peer.shape(0) && w.shape(1) == peer.shape(1), "weights must match peer");
            wp = w.data();
        }
        py::gil_scoped_release release;
        pull_weighted_sum(bases.data(), pp, rp, wp, peer.shape(0), peer.shape(1), dim, out.mutable_data(), threads);
    }, py::arg("rows"), py::arg("peer"), py::arg("row"), py::arg("weights"), py::arg("out").noconvert(),
       py::arg("threads") = 0);
}


// The checks every planning call makes on its arguments, once here (the core trusts them).

// rows [W, >= W + E] agreed counts, E = W * local_experts, and a layout code: returns W.
int64_t counts_ranks(const Raw<int64_t>& rows, int64_t local_experts, int layout) {
    expect(rows.ndim() == 2, "rows must be 2-D [ranks, counts]");
    const int64_t W = rows.shape(0);
    expect(local_experts >= 1 && rows.shape(1) >= W + W * local_experts, "rows must hold W + E counts per rank");
    expect(layout >= 0 && layout <= 2, "layout out of range");
    return W;
}

// ids [n, K >= 1] global experts in [0, E): returns n.
int64_t source_ids(const Raw<int64_t>& ids, int64_t E) {
    expect(ids.ndim() == 2 && ids.shape(1) >= 1, "ids must be 2-D [tokens, top_k >= 1]");
    const int64_t* ip = ids.data();
    for (int64_t i = 0; i < ids.size(); ++i) expect(ip[i] >= 0 && ip[i] < E, "ids out of range");
    return ids.shape(0);
}

// places = (tok_peer int32 [n, W], tok_row int64 [n, W], pair_peer int32 [n, K], pair_row int64
// [n, K]), filled in place: each must be exactly that array (a converted copy would be filled instead).
struct OutPlaces {
    Raw<int32_t> tok_peer, pair_peer;
    Raw<int64_t> tok_row, pair_row;
    RoutingPlaces places;

    OutPlaces(const py::tuple& t, int64_t n, int64_t W, int64_t K) {
        expect(t.size() == 4, "places must be 4 arrays (tok_peer, tok_row, pair_peer, pair_row)");
        expect(py::isinstance<Raw<int32_t>>(t[0]) && py::isinstance<Raw<int64_t>>(t[1]) &&
               py::isinstance<Raw<int32_t>>(t[2]) && py::isinstance<Raw<int64_t>>(t[3]),
               "places must be C-contiguous int32, int64, int32, int64 arrays");
        tok_peer = t[0].cast<Raw<int32_t>>(), tok_row = t[1].cast<Raw<int64_t>>();
        pair_peer = t[2].cast<Raw<int32_t>>(), pair_row = t[3].cast<Raw<int64_t>>();
        expect(tok_peer.writeable() && tok_row.writeable() && pair_peer.writeable() && pair_row.writeable(),
               "places must be writable");
        expect(tok_peer.ndim() == 2 && tok_peer.shape(0) == n && tok_peer.shape(1) == W && tok_row.ndim() == 2 &&
               tok_row.shape(0) == n && tok_row.shape(1) == W, "tok_peer and tok_row must be [tokens, ranks]");
        expect(pair_peer.ndim() == 2 && pair_peer.shape(0) == n && pair_peer.shape(1) == K && pair_row.ndim() == 2 &&
               pair_row.shape(0) == n && pair_row.shape(1) == K, "pair_peer and pair_row must be [tokens, top_k]");
        places = {tok_peer.mutable_data(), tok_row.mutable_data(), pair_peer.mutable_data(), pair_row.mutable_data()};
    }
};

// One of a plan's offset arrays as a property: a read-only numpy view of its vector, the plan
// object kept alive by the view.
using PlanShape = std::vector<py::ssize_t> (*)(const RoutingPlan&);
void plan_offsets(py::class_<RoutingPlan>& cls, const char* name, std::vector<int64_t> RoutingPlan::*field,
                  PlanShape shape, const char* doc) {
    cls.def_property_readonly(name, [field, shape](const py::object& self) {
        const auto& p = self.cast<const RoutingPlan&>();
        py::array_t<int64_t> a(shape(p), (p.*field).data(), self);
        a.attr("setflags")(py::arg("write") = false);
        return a;
    }, doc);
}

// The routing plan (ep/ep_plan.hpp) for the transport exchanges (dsperf/ep/plan.py), which read
// its offsets and ask it for a source's places; the window exchange's calls below compute it in C++.
void bind_routing_plan(py::module_& m) {
    py::class_<RoutingPlan> cls(m, "RoutingPlan", "Where every source's rows land (ep/ep_plan.hpp); made by routing_plan");
    cls.def_readonly("ranks", &RoutingPlan::W).def_readonly("local_experts", &RoutingPlan::local_experts);
    const PlanShape ranks = [](const RoutingPlan& p) { return std::vector<py::ssize_t>{p.W}; };
    const PlanShape experts = [](const RoutingPlan& p) { return std::vector<py::ssize_t>{p.W * p.local_experts}; };
    const PlanShape rank_by_rank = [](const RoutingPlan& p) { return std::vector<py::ssize_t>{p.W, p.W}; };
    const PlanShape rank_by_expert = [](const RoutingPlan& p) {
        return std::vector<py::ssize_t>{p.W, p.W * p.local_experts};
    };
    plan_offsets(cls, "tok_off", &RoutingPlan::tok_off, rank_by_rank,
                 "[source, dest] first record row of the source's tokens at the dest");
    plan_offsets(cls, "n_recv", &RoutingPlan::n_recv, ranks, "[dest] records received");
    plan_offsets(cls, "expert_base", &RoutingPlan::expert_base, experts,
                 "[expert] first row of the expert in its rank's pair rows");
    plan_offsets(cls, "pair_off", &RoutingPlan::pair_off, rank_by_expert,
                 "[source, expert] first row of the source's pairs within the expert");
    plan_offsets(cls, "pair_rows", &RoutingPlan::pair_rows, ranks, "[dest] pair rows (per-expert or masked layout)");
    m.def("routing_plan", [](Raw<int64_t> rows, int64_t local_experts, int layout, int64_t cap) {
        const int64_t W = counts_ranks(rows, local_experts, layout);
        expect(cap >= 0, "cap must be >= 0");
        py::gil_scoped_release release;
        return routing_plan(rows.data(), rows.shape(1), W, local_experts, dsperf::EpLayout(layout), cap);
    }, py::arg("rows"), py::arg("local_experts"), py::arg("layout"), py::arg("cap"));
    // places: (tok_peer, tok_row, pair_peer, pair_row) of the source's tokens, filled.
    m.def("routing_places", [](const RoutingPlan& plan, int64_t source, Raw<int64_t> ids, py::tuple places) {
        expect(source >= 0 && source < plan.W, "source out of range");
        const int64_t n = source_ids(ids, plan.W * plan.local_experts);
        const OutPlaces out(places, n, plan.W, ids.shape(1));
        py::gil_scoped_release release;
        routing_places(plan, source, ids.data(), n, ids.shape(1), out.places);
    }, py::arg("plan"), py::arg("source"), py::arg("ids"), py::arg("places"));
}

// The window dispatch's per-call planning (dsperf/ep/exchange.py): one call each, no Python loops.
// Segments of the shared-memory windows are passed as addresses (int64, taken once per window by
// window.py) with their sizes; the functions check every row against those sizes before writing.
void bind_window_plan(py::module_& m) {
    m.def("dispatch_counts", [](Raw<int64_t> ids, int64_t num_experts, int64_t local_experts, Raw<int64_t> node,
                                int64_t nodes, Raw<int64_t> out) {
        expect(ids.ndim() == 2 && node.ndim() == 1 && out.ndim() == 1, "ids 2-D, node and out 1-D");
        const int64_t W = node.shape(0);
        expect(local_experts >= 1 && num_experts == W * local_experts, "num_experts must be ranks * local_experts");
        expect(out.shape(0) == W + num_experts + nodes, "out must hold ranks + experts + nodes counts");
        for (int64_t r = 0; r < W; ++r) expect(node.data()[r] >= 0 && node.data()[r] < nodes, "node out of range");
        py::gil_scoped_release release;
        return dispatch_counts(ids.data(), ids.shape(0), ids.shape(1), num_experts, W, local_experts, node.data(), nodes,
                               out.mutable_data());
    }, py::arg("ids"), py::arg("num_experts"), py::arg("local_experts"), py::arg("node"), py::arg("nodes"),
       py::arg("out").noconvert());
    m.def("window_plan", [](Raw<int64_t> rows, int64_t local_experts, int layout, int64_t cap, int64_t me,
                            Raw<int64_t> out) {
        expect(out.ndim() == 1, "out must be 1-D");
        const int64_t W = counts_ranks(rows, local_experts, layout);
        expect(me >= 0 && me < W, "me out of range");
        expect(out.shape(0) == 6 * W + local_experts, "out must hold 6 ranks + local_experts words");
        window_plan(rows.data(), rows.shape(1), W, local_experts, dsperf::EpLayout(layout), cap, me, out.mutable_data());
    }, py::arg("rows"), py::arg("local_experts"), py::arg("layout"), py::arg("cap"), py::arg("me"),
       py::arg("out").noconvert());
    py::class_<RowFormat>(m, "RowFormat", "How a dispatch's rows are laid out in bytes (plan.py's RowFormat)")
        .def(py::init([](int64_t vb, int64_t sb, int64_t rec, int64_t sc_col, int64_t id_col) {
                 expect(vb >= 0 && sb >= 0 && rec >= 0 && sc_col >= 0 && id_col >= 0, "row format fields must be >= 0");
                 return RowFormat{vb, sb, rec, sc_col, id_col};
             }),
             py::kw_only(), py::arg("vb"), py::arg("sb"), py::arg("rec"), py::arg("sc_col"), py::arg("id_col"))
        .def_readonly("vb", &RowFormat::vb)
        .def_readonly("sb", &RowFormat::sb)
        .def_readonly("rec", &RowFormat::rec)
        .def_readonly("sc_col", &RowFormat::sc_col)
        .def_readonly("id_col", &RowFormat::id_col);
    // windows: (addresses, bytes) of this node's receive segments; places: (tok_peer, tok_row,
    // pair_peer, pair_row), filled. Every index is checked here; the core trusts them.
    m.def("window_scatter", [](Raw<uint8_t> values, int64_t vcol, py::object scales, int64_t scol, Raw<int64_t> ids,
                               py::object weights, int64_t source, Raw<int64_t> rows, int64_t local_experts, int layout,
                               int64_t cap, const RowFormat& fmt, Raw<int64_t> local_of, py::tuple windows,
                               py::tuple places, int threads) {
        expect(windows.size() == 2, "windows is (addresses, bytes)");
        auto dst_addr = windows[0].cast<Raw<int64_t>>(), dst_bytes = windows[1].cast<Raw<int64_t>>();
        expect(values.ndim() == 2, "values must be 2-D");
        const int64_t W = counts_ranks(rows, local_experts, layout), L = dst_addr.size();
        expect(source >= 0 && source < W, "source out of range");
        const int64_t n = source_ids(ids, W * local_experts);
        const int64_t K = ids.shape(1);
        expect(K <= 64, "top_k must be in [1, 64]");
        const OutPlaces out(places, n, W, K);
        expect(values.shape(0) >= n && vcol >= 0 && vcol + fmt.vb <= values.shape(1), "value columns out of range");
        expect(local_of.size() == W && dst_bytes.size() == L, "local_of [ranks], dst_bytes [node ranks]");
        for (int64_t d = 0; d < W; ++d) expect(local_of.data()[d] < L, "local_of out of range");
        if (layout == 0)
            expect(fmt.vb <= fmt.sc_col && fmt.sc_col + fmt.sb <= fmt.id_col && fmt.id_col + 8 * K == fmt.rec,
                   "record columns do not fit");
        ScatterSource src;
        src.values = values.data() + vcol, src.vstride = values.shape(1), src.ids = ids.data(), src.n = n, src.K = K;
        src.s = source;
        Raw<uint8_t> sc;
        if (fmt.sb) {
            sc = scales.cast<Raw<uint8_t>>();
            expect(sc.ndim() == 2 && sc.shape(0) >= n && scol >= 0 && scol + fmt.sb <= sc.shape(1),
                   "scale columns out of range");
            src.scales = sc.data() + scol, src.sstride = sc.shape(1);
        }
        Raw<float> w;
        if (!weights.is_none()) {
            w = weights.cast<Raw<float>>();
            expect(w.ndim() == 2 && w.shape(0) == n && w.shape(1) == K, "weights must match ids");
            src.weights = w.data();
        }
        std::vector<uint8_t*> dst(static_cast<size_t>(L));
        for (int64_t l = 0; l < L; ++l) dst[l] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(dst_addr.data()[l]));
        ScatterPlan plan;
        plan.rows = rows.data(), plan.stride = rows.shape(1), plan.W = W, plan.local_experts = local_experts;
        plan.layout = dsperf::EpLayout(layout), plan.cap = cap, plan.fmt = fmt, plan.local_of = local_of.data();
        plan.dst = dst.data(), plan.dst_bytes = dst_bytes.data();
        py::gil_scoped_release release;
        return window_scatter(src, plan, out.places, threads);
    }, py::arg("values"), py::arg("vcol"), py::arg("scales"), py::arg("scol"), py::arg("ids"), py::arg("weights"),
       py::arg("source"), py::arg("rows"), py::arg("local_experts"), py::arg("layout"), py::arg("cap"), py::arg("fmt"),
       py::arg("local_of"), py::arg("windows"), py::arg("places"), py::arg("threads") = 0);
    // ctrl_addr: each rank's control segment (int64 words; word 0 the flag); base + row_words
    // must lie within segment_words (checked).
    m.def("ctrl_sync", [](Raw<int64_t> ctrl_addr, int64_t segment_words, int64_t me, int64_t seq, int64_t base,
                          Raw<int64_t> row, double timeout_s, double spin_s, Raw<int64_t> out, int64_t same_words) {
        const int64_t n = ctrl_addr.size();
        expect(out.ndim() == 2 && out.shape(0) == n, "out must be [ranks, row_words]");
        const int64_t row_words = out.shape(1);
        expect(me >= 0 && me < n && base >= 1 && base + row_words <= segment_words, "row slot out of the segment");
        expect(row.size() <= row_words, "row longer than row_words");
        std::vector<int64_t*> ctrl(static_cast<size_t>(n));
        for (int64_t r = 0; r < n; ++r) ctrl[r] = reinterpret_cast<int64_t*>(static_cast<uintptr_t>(ctrl_addr.data()[r]));
        py::gil_scoped_release release;
        return ctrl_sync(ctrl.data(), n, me, seq, base, row.data(), row.size(), row_words, timeout_s, spin_s,
                         out.mutable_data(), same_words);
    }, py::arg("ctrl_addr"), py::arg("segment_words"), py::arg("me"), py::arg("seq"), py::arg("base"), py::arg("row"),
       py::arg("timeout_s"), py::arg("spin_s"), py::arg("out").noconvert(), py::arg("same_words") = 0);
}

}  // namespace

void bind_ep(py::module_& root) {
    py::module_ m = root.def_submodule("ep", "expert-parallel helpers: EPLB");
    m.def("rebalance", &rebalance, py::arg("load"), py::arg("num_physical"), py::arg("num_groups"),
          py::arg("num_nodes"), py::arg("num_gpus"), py::arg("policy"));
    bind_copies(m);
    bind_window(m);
    bind_routing_plan(m);
    bind_window_plan(m);
    m.def("imbalance", &imbalance, py::arg("load"), py::arg("phy2log"), py::arg("logcnt"), py::arg("num_gpus"));
}
