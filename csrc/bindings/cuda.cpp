// Python face of the CUDA kernels (dsperf._C.cuda). Built in every configuration: without CUDA
// the module reports why and every GPU call raises, so Python code can ask rather than guess.
//
// The kernels take device pointers as integers (dsperf.cuda's DeviceArray holds them and does the
// shape and dtype checks); each call selects the arrays' device first. DLPack export and import
// are pure pointer bookkeeping and work in every build, which lets the CPU machines test them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef DSPERF_WITH_CUDA
#include "kernels/cuda/cuda_api.hpp"
#endif
#include "kernels/cpu/moe.hpp"
#include "kernels/cuda/dlpack.hpp"
#include "kernels/cuda/mla_plan.hpp"

namespace py = pybind11;

namespace {

bool built_with_cuda() {
#ifdef DSPERF_WITH_CUDA
    return true;
#else
    return false;
#endif
}

// Why no kernel can run here ("" when one can).
std::string why_unavailable() {
#ifdef DSPERF_WITH_CUDA
    return dsperf::cuda::unavailable_reason();
#else
    return "dsperf was built without CUDA (no nvcc at build time, or DSPERF_CUDA=OFF)";
#endif
}

void require_gpu() {
    const std::string why = why_unavailable();
    if (!why.empty()) throw std::runtime_error("no CUDA device: " + why);
}

// ---- DLPack -------------------------------------------------------------------------------------
namespace dl = dsperf::dlpack;

// What an exported capsule owns: the shape array and a reference to the exporting Python object
// (which keeps the memory alive).
struct ExportCtx {
    std::vector<int64_t> shape;
    PyObject* owner = nullptr;
};

void export_deleter(dl::ManagedTensor* t) {
    auto* ctx = static_cast<ExportCtx*>(t->manager_ctx);
    {
        // Consumers may call the deleter from any thread, with or without the GIL.
        PyGILState_STATE s = PyGILState_Ensure();
        Py_XDECREF(ctx->owner);
        PyGILState_Release(s);
    }
    delete ctx;
    delete t;
}

py::capsule dlpack_export(uintptr_t ptr, std::vector<int64_t> shape, int code, int bits, int device_type, int device_id,
                          py::object owner) {
    if (code < 0 || code > 255 || bits < 1 || bits > 255) throw std::invalid_argument("dlpack: bad dtype code or bits");
    auto* ctx = new ExportCtx{std::move(shape), owner.release().ptr()};
    auto* t = new dl::ManagedTensor{};
    t->dl_tensor.data = reinterpret_cast<void*>(ptr);
    t->dl_tensor.device = dl::Device{device_type, device_id};
    t->dl_tensor.ndim = int32_t(ctx->shape.size());
    t->dl_tensor.dtype = dl::DataType{uint8_t(code), uint8_t(bits), 1};
    t->dl_tensor.shape = ctx->shape.data();
    t->dl_tensor.strides = nullptr;  // C-contiguous
    t->dl_tensor.byte_offset = 0;
    t->manager_ctx = ctx;
    t->deleter = export_deleter;
    // The capsule frees the tensor only if no consumer took it (a consumer renames it
    // "used_dltensor" and calls the deleter itself when done).
    PyObject* cap = PyCapsule_New(t, "dltensor", [](PyObject* c) {
        if (PyCapsule_IsValid(c, "dltensor")) {
            auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
            if (m && m->deleter) m->deleter(m);
        }
    });
    if (!cap) {
        export_deleter(t);
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(cap);
}

// Takes a producer's "dltensor" capsule: marks it used, and returns its description with a holder
// object whose destruction calls the producer's deleter.
py::dict dlpack_import(py::object capsule) {
    PyObject* c = capsule.ptr();
    if (!PyCapsule_CheckExact(c)) throw py::type_error("__dlpack__() must return a PyCapsule");
    if (!PyCapsule_IsValid(c, "dltensor"))
        throw py::value_error(
            "the DLPack capsule was already consumed, or is not a 'dltensor' capsule (versioned "
            "DLPack 1.x capsules are not accepted)");
    auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    if (PyCapsule_SetName(c, "used_dltensor") != 0) throw py::error_already_set();
    py::capsule holder(m, [](void* p) {
        auto* t = static_cast<dl::ManagedTensor*>(p);
        if (t->deleter) t->deleter(t);
    });
    const dl::Tensor& t = m->dl_tensor;
    py::list shape, strides;
    for (int32_t i = 0; i < t.ndim; ++i) shape.append(t.shape[i]);
    py::object st = py::none();
    if (t.strides) {
        for (int32_t i = 0; i < t.ndim; ++i) strides.append(t.strides[i]);
        st = py::tuple(strides);
    }
    py::dict d;
    d["ptr"] = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
    d["shape"] = py::tuple(shape);
    d["strides"] = st;
    d["code"] = int(t.dtype.code);
    d["bits"] = int(t.dtype.bits);
    d["lanes"] = int(t.dtype.lanes);
    d["device_type"] = int(t.device.device_type);
    d["device_id"] = int(t.device.device_id);
    d["holder"] = holder;
    return d;
}

#ifdef DSPERF_WITH_CUDA
namespace C = dsperf::cuda;
template <typename T = void>
T* P(uintptr_t p) {
    return reinterpret_cast<T*>(p);
}

// Device memory owned by a Python object: freed (on its device) when the object goes.
class Allocation {
public:
    Allocation(size_t bytes, int device) : bytes_(bytes), device_(device) {
        C::set_device(device);
        ptr_ = C::device_malloc(bytes);
    }
    ~Allocation() {
        if (!ptr_) return;
        try {
            // Freed on its own device; the thread's current device (which PyTorch or CuPy code on
            // this thread relies on) is put back afterwards.
            const int was = C::current_device();
            C::set_device(device_);
            C::device_free(ptr_);
            C::set_device(was);
        } catch (...) {
            // A destructor cannot report; the memory is lost only if the device itself failed.
        }
    }
    Allocation(const Allocation&) = delete;
    Allocation& operator=(const Allocation&) = delete;
    uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(ptr_); }
    size_t nbytes() const { return bytes_; }
    int device() const { return device_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
    int device_ = 0;
};

// Sets the device, releases the GIL, runs f.
template <typename F>
void on(int device, F&& f) {
    C::set_device(device);
    py::gil_scoped_release nogil;
    f();
}
#endif

}  // namespace

void bind_cuda(py::module_& root) {
    py::module_ m = root.def_submodule("cuda", "CUDA kernels on device pointers (dsperf.cuda wraps them)");
    m.def("built_with_cuda", &built_with_cuda);
    m.def("why_unavailable", &why_unavailable, "Why no CUDA kernel can run here; empty when one can");
    m.def("dlpack_export", &dlpack_export, py::arg("ptr"), py::arg("shape"), py::arg("code"), py::arg("bits"),
          py::arg("device_type"), py::arg("device_id"), py::arg("owner"));
    m.def("dlpack_import", &dlpack_import, py::arg("capsule"));
    // Host work: planned in every build.
    m.def("mla_plan", [](py::array_t<int32_t, py::array::c_style | py::array::forcecast> seqlens, int64_t block_size,
                         int64_t rows_per_request, int64_t num_splits, int64_t sm_count, int64_t rows_per_block) {
        const dsperf::cuda::MlaPlan plan = dsperf::cuda::mla_plan(
            seqlens.data(), seqlens.size(), block_size, rows_per_request, num_splits, sm_count, rows_per_block);
        py::array_t<int32_t> items({plan.n_items(), int64_t(4)});
        std::memcpy(items.mutable_data(), plan.items.data(), plan.items.size() * sizeof(int32_t));
        py::array_t<int32_t> offs(int64_t(plan.split_offsets.size()));
        std::memcpy(offs.mutable_data(), plan.split_offsets.data(), plan.split_offsets.size() * sizeof(int32_t));
        return py::make_tuple(items, offs);
    });
    m.def("device_count", [] {
#ifdef DSPERF_WITH_CUDA
        return C::device_count();
#else
        return 0;
#endif
    });
#ifdef DSPERF_WITH_CUDA
    m.def("device_name", [](int d) {
        require_gpu();
        return C::device_name(d);
    });
    m.def("sm_count", [](int d) {
        require_gpu();
        return C::multiprocessor_count(d);
    });
    m.def("compute_capability", [](int d) {
        require_gpu();
        return C::compute_capability(d);
    });
    m.def("synchronize", [](int d) { on(d, [] { C::synchronize(); }); });
    m.def("set_synchronous", &C::set_synchronous_launches);
    m.def("synchronous", [] { return C::synchronous_launches(); });
    m.def("pointer_device", [](uintptr_t p) { return C::pointer_device(P(p)); });
    py::class_<Allocation>(m, "Allocation")
        .def(py::init([](size_t bytes, int device) {
                 require_gpu();
                 return new Allocation(bytes, device);
             }),
             py::arg("nbytes"), py::arg("device"))
        .def_property_readonly("ptr", &Allocation::ptr)
        .def_property_readonly("nbytes", &Allocation::nbytes)
        .def_property_readonly("device", &Allocation::device);
    m.def("copy_to_device", [](uintptr_t dst, uintptr_t host, size_t n, int d) {
        on(d, [&] { C::copy_to_device(P(dst), P(host), n); });
    });
    m.def("copy_to_host",
          [](uintptr_t host, uintptr_t src, size_t n, int d) { on(d, [&] { C::copy_to_host(P(host), P(src), n); }); });
    m.def("copy_on_device",
          [](uintptr_t dst, uintptr_t src, size_t n, int d) { on(d, [&] { C::copy_on_device(P(dst), P(src), n); }); });
    m.def("fill_zero", [](uintptr_t p, size_t n, int d) { on(d, [&] { C::fill_zero(P(p), n); }); });

    m.def("rmsnorm", [](uintptr_t x, uintptr_t w, uintptr_t y, int64_t rows, int64_t dim, float eps, int d) {
        on(d, [&] { C::rmsnorm(P<float>(x), P<float>(w), P<float>(y), rows, dim, eps); });
    });
    m.def("silu_mul", [](uintptr_t gu, uintptr_t out, int64_t rows, int64_t inter, int d) {
        on(d, [&] { C::silu_mul(P<float>(gu), P<uint16_t>(out), rows, inter); });
    });
    m.def("act_quant", [](uintptr_t x, int64_t rows, int64_t dim, uintptr_t q, uintptr_t s, int d) {
        on(d, [&] { C::act_quant(P<uint16_t>(x), rows, dim, P<uint8_t>(q), P<float>(s)); });
    });
    m.def("rope_bf16", [](uintptr_t x, int64_t tokens, int64_t heads, int64_t ld_token, int64_t ld_head,
                          uintptr_t positions, uintptr_t freqs, int64_t rope_dim, int d) {
        on(d, [&] {
            C::rope_inplace_bf16(P<uint16_t>(x), tokens, heads, ld_token, ld_head, P<int32_t>(positions),
                                 P<float>(freqs), rope_dim);
        });
    });
    m.def("moe_gate", [](uintptr_t logits, int64_t T, int64_t E, uintptr_t bias, int64_t n_group, int64_t topk_group,
                         int64_t top_k, float route_scale, bool sigmoid, uintptr_t weights, uintptr_t ids, int d) {
        dsperf::kernels::GateConfig cfg;
        cfg.n_group = n_group, cfg.topk_group = topk_group, cfg.top_k = top_k, cfg.route_scale = route_scale;
        cfg.score = sigmoid ? dsperf::kernels::ScoreFunc::Sigmoid : dsperf::kernels::ScoreFunc::Softmax;
        on(d, [&] { C::moe_gate(P<float>(logits), T, E, P<float>(bias), cfg, P<float>(weights), P<int32_t>(ids)); });
    });
    m.def("moe_permute",
          [](uintptr_t x, int64_t tokens, int64_t row_bytes, uintptr_t source, int64_t rows, uintptr_t out, int d) {
              on(d, [&] { C::moe_permute(P(x), tokens, row_bytes, P<int32_t>(source), rows, P(out)); });
          });
    m.def("moe_unpermute", [](uintptr_t y, int64_t rows, int64_t dim, uintptr_t position, uintptr_t weights, int64_t T,
                              int64_t K, uintptr_t out, int d) {
        on(d, [&] {
            C::moe_unpermute(P<float>(y), rows, dim, P<int32_t>(position), P<float>(weights), T, K, P<float>(out));
        });
    });
    m.def("grouped_gemm", [](uintptr_t a, uintptr_t a_scale, uintptr_t b, uintptr_t b_scale, uintptr_t c, int64_t M,
                             int64_t N, int64_t K, int64_t E, bool masked, uintptr_t offsets, uintptr_t counts,
                             int64_t capacity, bool check_values, int d) {
        C::GroupedGemm g;
        g.check_values = check_values;
        g.a = P(a), g.a_scale = P<float>(a_scale), g.b = P(b), g.b_scale = P<float>(b_scale), g.c = P<float>(c);
        g.M = M, g.N = N, g.K = K, g.E = E;
        g.layout = masked ? C::GemmLayout::Masked : C::GemmLayout::Contiguous;
        g.offsets = P<int64_t>(offsets), g.counts = P<int32_t>(counts), g.capacity = capacity;
        on(d, [&] { C::grouped_gemm(g); });
    });
    m.def("cublas_why_unavailable", [] {
        std::string why;
        C::cublas_available(&why);
        return why;
    });
    m.def("cublas_gemm_bf16", [](uintptr_t a, uintptr_t b, uintptr_t c, int64_t M, int64_t N, int64_t K, int64_t batch,
                                 int64_t sa, int64_t sb, int64_t sc, int d) {
        on(d, [&] { C::cublas_gemm_bf16(P<uint16_t>(a), P<uint16_t>(b), P<float>(c), M, N, K, batch, sa, sb, sc); });
    });
    m.def("mla_decode", [](uintptr_t q_nope, uintptr_t q_rope, uintptr_t latent, uintptr_t latent_scale, uintptr_t rope,
                           uintptr_t block_table, uintptr_t seqlens, uintptr_t items, uintptr_t split_offsets,
                           int64_t n_items, int64_t n_partials, int64_t batch, int64_t q_len, int64_t heads,
                           int64_t kv_lora, int64_t rope_dim, int64_t num_blocks, int64_t block_size,
                           int64_t max_blocks, float scale, uintptr_t out, uintptr_t lse, uintptr_t part_out,
                           uintptr_t part_lse, bool check_values, int d) {
        C::MlaDecode a;
        a.part_out = P<float>(part_out), a.part_lse = P<float>(part_lse), a.check_values = check_values;
        a.q_nope = P<uint16_t>(q_nope), a.q_rope = P<uint16_t>(q_rope), a.latent = P(latent);
        a.latent_scale = P<float>(latent_scale), a.rope = P<uint16_t>(rope), a.block_table = P<int32_t>(block_table);
        a.seqlens = P<int32_t>(seqlens), a.items = P<int32_t>(items), a.split_offsets = P<int32_t>(split_offsets);
        a.n_items = n_items, a.n_partials = n_partials, a.batch = batch, a.q_len = q_len, a.heads = heads;
        a.kv_lora = kv_lora, a.rope_dim = rope_dim, a.num_blocks = num_blocks, a.block_size = block_size;
        a.max_blocks = max_blocks, a.softmax_scale = scale, a.out = P<float>(out), a.lse = P<float>(lse);
        on(d, [&] { C::mla_decode(a); });
    });
    m.def("mla_prefill", [](uintptr_t q, uintptr_t k, uintptr_t v, int64_t q_len, int64_t kv_len, int64_t heads,
                            int64_t dqk, int64_t dv, float scale, uintptr_t out, uintptr_t lse, int d) {
        on(d, [&] {
            C::mla_prefill(P<uint16_t>(q), P<uint16_t>(k), P<uint16_t>(v), q_len, kv_len, heads, dqk, dv, scale,
                           P<float>(out), P<float>(lse));
        });
    });
    m.def("graph_begin_capture", [](int d) {
        C::set_device(d);
        return C::graph_begin_capture();
    });
    m.def("graph_end_capture", [](uintptr_t stream, bool discard, int d) {
        C::set_device(d);
        return C::graph_end_capture(stream, discard);
    });
    m.def("graph_launch",
          [](uintptr_t exec, uintptr_t stream, int d) { on(d, [&] { C::graph_launch(exec, stream); }); });
    m.def("graph_destroy", [](uintptr_t exec, uintptr_t stream, int d) {
        C::set_device(d);
        C::graph_destroy(exec, stream);
    });
    m.def("nccl_why_unavailable", [] {
        std::string why;
        C::nccl_available(&why);
        return why;
    });
    m.def("nccl_unique_id", [] { return py::bytes(C::nccl_unique_id()); });
    m.def("nccl_init_rank", [](py::bytes uid, int nranks, int rank, int device) {
        const std::string id = uid;
        py::gil_scoped_release nogil;
        return C::nccl_init_rank(id, nranks, rank, device);
    });
    m.def("nccl_init_all", [](std::vector<int> devices) {
        py::gil_scoped_release nogil;
        return C::nccl_init_all(devices);
    });
    m.def("nccl_destroy", [](uintptr_t comm) { C::nccl_destroy(comm); });
    // parts: (comm, device, send, recv, send_offsets, send_counts, recv_offsets, recv_counts) per local rank.
    m.def("nccl_alltoallv",
          [](const std::vector<std::tuple<uintptr_t, int, uintptr_t, uintptr_t, std::vector<int64_t>,
                                          std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>>& parts,
             int64_t row_bytes) {
              std::vector<C::AllToAllPart> ps;
              for (const auto& t : parts) {
                  C::AllToAllPart p;
                  p.comm = std::get<0>(t), p.device = std::get<1>(t), p.send = P(std::get<2>(t)),
                  p.recv = P(std::get<3>(t));
                  p.send_offsets = std::get<4>(t), p.send_counts = std::get<5>(t);
                  p.recv_offsets = std::get<6>(t), p.recv_counts = std::get<7>(t);
                  ps.push_back(std::move(p));
              }
              py::gil_scoped_release nogil;
              C::nccl_alltoallv(ps, row_bytes);
          });
#else
    for (const char* name : {"device_name",
                             "sm_count",
                             "compute_capability",
                             "synchronize",
                             "set_synchronous",
                             "synchronous",
                             "pointer_device",
                             "Allocation",
                             "copy_to_device",
                             "copy_to_host",
                             "copy_on_device",
                             "fill_zero",
                             "rmsnorm",
                             "silu_mul",
                             "act_quant",
                             "rope_bf16",
                             "moe_gate",
                             "moe_permute",
                             "moe_unpermute",
                             "grouped_gemm",
                             "cublas_why_unavailable",
                             "cublas_gemm_bf16",
                             "mla_decode",
                             "mla_prefill",
                             "graph_begin_capture",
                             "graph_end_capture",
                             "graph_launch",
                             "graph_destroy",
                             "nccl_why_unavailable",
                             "nccl_unique_id",
                             "nccl_init_rank",
                             "nccl_init_all",
                             "nccl_destroy",
                             "nccl_alltoallv"}) {
        m.def(name, [](py::args, py::kwargs) -> py::object {
            require_gpu();
            return py::none();
        });
    }
#endif
}
