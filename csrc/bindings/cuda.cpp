// Python face of the CUDA kernels (dsperf._C.cuda). Built in every configuration: without CUDA
// the module reports why and every GPU call raises, so Python code can ask rather than guess.
//
// The kernels take device pointers as integers (dsperf.cuda's DeviceArray holds them and does the
// shape and dtype checks); each call selects the arrays' device first. The kernels with many
// arguments take their C++ argument struct (GroupedGemmArgs, MlaDecodeArgs, MlaPrefillArgs, AllToAllPart,
// and kernels.GateConfig for the gate: fields
// by name, pointers as integers) and the device; the binding runs the struct's validate() once
// before the call, and the kernel trusts it. The structs are bound in every build (they are plain
// C++), so Python code can fill one anywhere; only the calls need CUDA. DLPack export and import
// are pure pointer bookkeeping and work in every build, which lets the CPU machines test them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_api.hpp"  // plain C++: the argument structs are bound in every build
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

// ---- argument structs -------------------------------------------------------------------------
// A C++ argument struct as a Python class: a keyword-only constructor (every field defaults to the
// C++ default), one read-write attribute per field (pointers as integers, 0 for null), the field
// names in `fields`, and a repr. Unknown names raise AttributeError, so a misspelt field cannot be
// dropped silently.
template <typename S>
class ArgsClass {
public:
    ArgsClass(py::module_& m, const char* name, const char* doc) : c_(m, name, doc), name_(name) {
        c_.def(py::init([](py::kwargs kw) {
            py::object o = py::cast(S{});
            for (auto item : kw) py::setattr(o, item.first, item.second);
            return o.cast<S>();
        }));
    }
    template <typename T>
    ArgsClass& ptr(const char* field, T* S::*member) {
        c_.def_property(
            field, [member](const S& s) { return reinterpret_cast<uintptr_t>(s.*member); },
            [member](S& s, uintptr_t p) { s.*member = reinterpret_cast<T*>(p); });
        names_.emplace_back(field);
        return *this;
    }
    template <typename T>
    ArgsClass& val(const char* field, T S::*member) {
        c_.def_readwrite(field, member);
        names_.emplace_back(field);
        return *this;
    }
    void done() {
        c_.attr("fields") = py::tuple(py::cast(names_));
        c_.def("__repr__", [name = name_, names = names_](py::object self) {
            std::string r = name + "(";
            for (size_t i = 0; i < names.size(); ++i) {
                py::object v = self.attr(names[i].c_str());
                r += (i ? ", " : "") + names[i] + "=" + std::string(py::repr(v));
            }
            return r + ")";
        });
    }

private:
    py::class_<S> c_;
    std::string name_;
    std::vector<std::string> names_;
};

void bind_arg_structs(py::module_& m) {
    namespace C = dsperf::cuda;
    py::enum_<C::GemmLayout>(m, "GemmLayout")
        .value("Contiguous", C::GemmLayout::Contiguous)
        .value("Masked", C::GemmLayout::Masked);
    ArgsClass<C::GroupedGemm>(m, "GroupedGemmArgs", "grouped_gemm's arguments (cuda_api.hpp's GroupedGemm)")
        .ptr("a", &C::GroupedGemm::a)
        .ptr("a_scale", &C::GroupedGemm::a_scale)
        .ptr("b", &C::GroupedGemm::b)
        .ptr("b_scale", &C::GroupedGemm::b_scale)
        .ptr("c", &C::GroupedGemm::c)
        .val("M", &C::GroupedGemm::M)
        .val("N", &C::GroupedGemm::N)
        .val("K", &C::GroupedGemm::K)
        .val("E", &C::GroupedGemm::E)
        .val("layout", &C::GroupedGemm::layout)
        .ptr("offsets", &C::GroupedGemm::offsets)
        .ptr("counts", &C::GroupedGemm::counts)
        .val("capacity", &C::GroupedGemm::capacity)
        .val("check_values", &C::GroupedGemm::check_values)
        .done();
    ArgsClass<C::MlaDecode>(m, "MlaDecodeArgs", "mla_decode's arguments (cuda_api.hpp's MlaDecode)")
        .ptr("q_nope", &C::MlaDecode::q_nope)
        .ptr("q_rope", &C::MlaDecode::q_rope)
        .ptr("latent", &C::MlaDecode::latent)
        .ptr("latent_scale", &C::MlaDecode::latent_scale)
        .ptr("rope", &C::MlaDecode::rope)
        .ptr("block_table", &C::MlaDecode::block_table)
        .ptr("seqlens", &C::MlaDecode::seqlens)
        .ptr("items", &C::MlaDecode::items)
        .ptr("split_offsets", &C::MlaDecode::split_offsets)
        .val("n_items", &C::MlaDecode::n_items)
        .val("n_partials", &C::MlaDecode::n_partials)
        .val("batch", &C::MlaDecode::batch)
        .val("q_len", &C::MlaDecode::q_len)
        .val("heads", &C::MlaDecode::heads)
        .val("kv_lora", &C::MlaDecode::kv_lora)
        .val("rope_dim", &C::MlaDecode::rope_dim)
        .val("num_blocks", &C::MlaDecode::num_blocks)
        .val("block_size", &C::MlaDecode::block_size)
        .val("max_blocks", &C::MlaDecode::max_blocks)
        .val("softmax_scale", &C::MlaDecode::softmax_scale)
        .ptr("out", &C::MlaDecode::out)
        .ptr("lse", &C::MlaDecode::lse)
        .ptr("part_out", &C::MlaDecode::part_out)
        .ptr("part_lse", &C::MlaDecode::part_lse)
        .val("check_values", &C::MlaDecode::check_values)
        .done();
    ArgsClass<C::MlaPrefill>(m, "MlaPrefillArgs", "mla_prefill's arguments (cuda_api.hpp's MlaPrefill)")
        .ptr("q", &C::MlaPrefill::q)
        .ptr("k", &C::MlaPrefill::k)
        .ptr("v", &C::MlaPrefill::v)
        .val("q_len", &C::MlaPrefill::q_len)
        .val("kv_len", &C::MlaPrefill::kv_len)
        .val("heads", &C::MlaPrefill::heads)
        .val("dqk", &C::MlaPrefill::dqk)
        .val("dv", &C::MlaPrefill::dv)
        .val("softmax_scale", &C::MlaPrefill::softmax_scale)
        .ptr("out", &C::MlaPrefill::out)
        .ptr("lse", &C::MlaPrefill::lse)
        .done();
    ArgsClass<C::AllToAllPart>(m, "AllToAllPart", "one local rank's part of nccl_alltoallv (cuda_api.hpp's AllToAllPart)")
        .val("comm", &C::AllToAllPart::comm)
        .val("device", &C::AllToAllPart::device)
        .ptr("send", &C::AllToAllPart::send)
        .ptr("recv", &C::AllToAllPart::recv)
        .val("send_offsets", &C::AllToAllPart::send_offsets)
        .val("send_counts", &C::AllToAllPart::send_counts)
        .val("recv_offsets", &C::AllToAllPart::recv_offsets)
        .val("recv_counts", &C::AllToAllPart::recv_counts)
        .done();
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
    bind_arg_structs(m);
    // Host work: planned in every build.
    m.def("mla_plan", [](py::array_t<int32_t, py::array::c_style | py::array::forcecast> seqlens, int64_t block_size,
                         int64_t rows_per_request, int64_t num_splits, int64_t sm_count, int64_t rows_per_block,
                         bool hopper_kernel) {
        // The automatic plan's aim follows the kernel that will run it (mla_plan.hpp's constants).
        const int64_t items_per_sm = hopper_kernel ? dsperf::cuda::kMlaItemsPerSmWgmma : dsperf::cuda::kMlaItemsPerSm;
        const dsperf::cuda::MlaPlan plan = dsperf::cuda::mla_plan(seqlens.data(), seqlens.size(), block_size,
                                                                  rows_per_request, num_splits, sm_count,
                                                                  rows_per_block, items_per_sm);
        py::array_t<int32_t> items({plan.n_items(), int64_t(4)});
        std::memcpy(items.mutable_data(), plan.items.data(), plan.items.size() * sizeof(int32_t));
        py::array_t<int32_t> offs(int64_t(plan.split_offsets.size()));
        std::memcpy(offs.mutable_data(), plan.split_offsets.data(), plan.split_offsets.size() * sizeof(int32_t));
        return py::make_tuple(items, offs);
    }, py::arg("seqlens"), py::arg("block_size"), py::arg("rows_per_request"), py::arg("num_splits"),
       py::arg("sm_count"), py::arg("rows_per_block"), py::arg("hopper_kernel") = false);
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
    // cfg: dsperf._C.kernels.GateConfig, validated by the caller against E (dsperf.cuda.moe_gate).
    m.def("moe_gate", [](uintptr_t logits, int64_t T, int64_t E, uintptr_t bias, const dsperf::kernels::GateConfig& cfg,
                         uintptr_t weights, uintptr_t ids, int d) {
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
    // The argument-struct kernels: validated here, once (the kernel trusts its caller).
    m.def(
        "grouped_gemm",
        [](const C::GroupedGemm& g, int d) {
            g.validate();
            on(d, [&] { C::grouped_gemm(g); });
        },
        py::arg("args"), py::arg("device"));
    m.def("cublas_why_unavailable", [] {
        std::string why;
        C::cublas_available(&why);
        return why;
    });
    m.def("cublas_gemm_bf16", [](uintptr_t a, uintptr_t b, uintptr_t c, int64_t M, int64_t N, int64_t K, int64_t batch,
                                 int64_t sa, int64_t sb, int64_t sc, int d) {
        on(d, [&] { C::cublas_gemm_bf16(P<uint16_t>(a), P<uint16_t>(b), P<float>(c), M, N, K, batch, sa, sb, sc); });
    });
    m.def(
        "mla_decode",
        [](const C::MlaDecode& a, int d) {
            a.validate();
            on(d, [&] { C::mla_decode(a); });
        },
        py::arg("args"), py::arg("device"));
    m.def(
        "mla_prefill",
        [](const C::MlaPrefill& p, int d) {
            p.validate();
            on(d, [&] { C::mla_prefill(p); });
        },
        py::arg("args"), py::arg("device"));
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
    // parts: one AllToAllPart per local rank.
    m.def(
        "nccl_alltoallv",
        [](const std::vector<C::AllToAllPart>& parts, int64_t row_bytes) {
            py::gil_scoped_release nogil;
            C::nccl_alltoallv(parts, row_bytes);
        },
        py::arg("parts"), py::arg("row_bytes"));
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
