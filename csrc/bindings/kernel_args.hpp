// What the CPU kernels' binding adapters share (csrc/bindings/kernels_*.cpp): array views,
// size arithmetic that cannot overflow, output allocation bounded by memory, and the structured
// arguments (expert weights, MLA weights, caches, gate configuration) built from Python objects.
// Arrays arrive as raw bit patterns (uint16 for BF16, uint8 for FP8); python/dsperf/kernels.py
// checks dtypes, shapes and contiguity and names the argument; these re-check the sizes the
// kernels rely on.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/linear_amx.hpp"
#include "kernels/cpu/decode_layer.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/mla.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/probe.hpp"

namespace py = pybind11;
using namespace dsperf::kernels;


namespace dsperf::bindings {

namespace py = pybind11;
using namespace dsperf::kernels;


template <typename T>
using Arr = py::array_t<T, py::array::c_style>;

inline void expect(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

template <typename T>
inline void expect_shape(const Arr<T>& a, std::initializer_list<int64_t> shape, const char* name) {
    expect(a.ndim() == py::ssize_t(shape.size()), std::string(name) + " has the wrong number of dimensions");
    int i = 0;
    for (int64_t s : shape) {
        expect(a.shape(i) == s, std::string(name) + ": dimension " + std::to_string(i) + " is " +
                                    std::to_string(a.shape(i)) + ", expected " + std::to_string(s));
        ++i;
    }
}

// a * b * ... for sizes taken from shapes and integer arguments, which may overflow int64 long
// before any allocation is tried (heads = 2**62 times a head width wraps to a small number that
// could match a weight's shape).
// (`what` is a literal: messages are built only on failure, off the path of small kernel calls.)
inline int64_t checked_mul(std::initializer_list<int64_t> factors, const char* what) {
    int64_t p = 1;
    for (int64_t f : factors) {
        if (f < 0) throw std::invalid_argument(std::string(what) + " must be >= 0");
        if (__builtin_mul_overflow(p, f, &p))
            throw std::invalid_argument(std::string(what) + " overflows 64-bit size arithmetic");
    }
    return p;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
    int64_t s;
    if (__builtin_add_overflow(a, b, &s))
        throw std::invalid_argument(std::string(what) + " overflows 64-bit size arithmetic");
    return s;
}

// The memory this process may have (physical memory, or less under an address-space limit): an
// array larger than it cannot be allocated and filled (with overcommit the allocation succeeds
// and the process dies filling it).
inline int64_t memory_bytes() {
    static const long page = sysconf(_SC_PAGE_SIZE);
    static const int64_t physical = [] {
        const long pages = sysconf(_SC_PHYS_PAGES);
        return pages > 0 && page > 0 ? int64_t(pages) * page : int64_t(1) << 46;
    }();
    int64_t bytes = physical;
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        long mapped_pages = 0;  // what the address space already holds
        if (FILE* f = std::fopen("/proc/self/statm", "r")) {
            if (std::fscanf(f, "%ld", &mapped_pages) != 1) mapped_pages = 0;
            std::fclose(f);
        }
        bytes = std::min(bytes, int64_t(as.rlim_cur) - int64_t(mapped_pages) * page);
    }
    return bytes;
}

// Refuses a buffer of `elems` values of `size` bytes larger than memory; `what` names it and the
// arguments its size comes from.
inline void check_memory(int64_t elems, int64_t size, const char* what) {
    const int64_t bytes = checked_mul({elems, size}, what);
    if (bytes < (int64_t(1) << 28)) return;  // small buffers: no system calls on the hot path of small kernels
    if (bytes > memory_bytes())
        throw std::invalid_argument(std::string(what) + " would need " + std::to_string(bytes >> 20) +
                                    " MiB, more than this machine's " +
                                    std::to_string(memory_bytes() >> 20) + " MiB of memory");
}

// A new output array; `what` names it and the arguments its shape comes from (zero-size inputs
// can ask for outputs of any size: x [2**40, 0] @ w [2**40, 0].T).
template <typename T>
inline Arr<T> empty(std::initializer_list<int64_t> shape, const char* what) {
    int64_t elems = 1;
    for (int64_t d : shape) elems = checked_mul({elems, d}, what);
    check_memory(elems, sizeof(T), what);
    return Arr<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

// A view of an argument that must already be a C-contiguous array of T: a converting cast would
// make a temporary copy whose data dies with this call's helper.
template <typename T>
inline Arr<T> exact_view(const py::object& o, const char* name) {
    expect(py::isinstance<Arr<T>>(o), std::string(name) + " must be a C-contiguous array of the expected dtype");
    return o.cast<Arr<T>>();
}

inline ExpertWeights expert_weights(const py::array& w13, const py::array& w2, const py::object& s13, const py::object& s2,
                             bool fp8) {
    ExpertWeights w;
    expect(w13.ndim() == 3 && w2.ndim() == 3, "w13 and w2 must be 3-D [experts, rows, cols]");
    w.n_experts = w13.shape(0), w.inter = w13.shape(1) / 2, w.dim = w13.shape(2);
    expect(w13.shape(1) % 2 == 0, "w13 must hold 2 * inter rows (w1 then w3)");
    expect(w2.shape(0) == w.n_experts && w2.shape(1) == w.dim && w2.shape(2) == w.inter,
           "w2 must be [experts, dim, inter] matching w13");
    w.w13 = w13.data(), w.w2 = w2.data(), w.fp8 = fp8;
    if (fp8) {
        auto a13 = exact_view<float>(s13, "w13_scale"), a2 = exact_view<float>(s2, "w2_scale");
        expect_shape(a13, {w.n_experts, fp8_scale_blocks(2 * w.inter), fp8_scale_blocks(w.dim)}, "w13_scale");
        expect_shape(a2, {w.n_experts, fp8_scale_blocks(w.dim), fp8_scale_blocks(w.inter)}, "w2_scale");
        w.scale13 = a13.data(), w.scale2 = a2.data();
    }
    return w;
}

// One GEMM's weights w [N, K], BF16 or FP8 with scales [ceil(N / 128), ceil(K / 128)]. The arrays
// passed keep the data alive.
inline LinearWeights linear_weights(const py::array& w, const py::object& w_scale, bool fp8) {
    expect(w.ndim() == 2, "w must be 2-D [N, K]");
    LinearWeights lw;
    lw.fp8 = fp8, lw.N = w.shape(0), lw.K = w.shape(1);
    if (fp8) {
        auto s = exact_view<float>(w_scale, "w_scale");
        expect_shape(s, {fp8_scale_blocks(lw.N), fp8_scale_blocks(lw.K)}, "w_scale [ceil(rows of w / 128), ceil(cols of w / 128)]");
        lw.w = exact_view<uint8_t>(w, "w").data(), lw.scale = s.data();
    } else {
        lw.w = exact_view<uint16_t>(w, "w").data();
    }
    return lw;
}

// Tiles packed for these weights (None: none). Shapes are checked; that they were packed from these
// very arrays is the holder's promise (dsperf.kernels.PackedWeights packs its own).
inline const amx::PackedTiles* linear_tiles(const py::object& tiles, const LinearWeights& lw) {
    if (tiles.is_none()) return nullptr;
    const auto& t = tiles.cast<const amx::PackedTiles&>();
    if (!t.tiles) return nullptr;
    expect(t.N == lw.N && t.K == lw.K, "tiles were packed for weights of another shape");
    return &t;
}

inline const ExpertTiles* expert_tiles(const py::object& tiles, const ExpertWeights& w) {
    if (tiles.is_none()) return nullptr;
    const auto& t = tiles.cast<const ExpertTiles&>();
    if (t.w13.empty()) return nullptr;
    expect(int64_t(t.w13.size()) == w.n_experts && t.w13[0].N == 2 * w.inter && t.w13[0].K == w.dim &&
               t.w2[0].N == w.dim && t.w2[0].K == w.inter,
           "expert tiles were packed for weights of another shape");
    return &t;
}

// An optional FP32 [n] bias (null when None). The argument's array keeps the data alive.
inline const float* optional_bias(const py::object& bias, int64_t n, const char* name) {
    if (bias.is_none()) return nullptr;
    auto arr = exact_view<float>(bias, name);
    expect_shape(arr, {n}, name);
    return arr.data();
}

// One sequence's MLA cache from its arrays (k_full / v_full None unless the CD variant).
// The CC variant decompresses every cached row per call: [rows, heads, nope + rope + v] BF16.
inline MlaSequenceCache sequence_cache(Arr<uint16_t>& latent, Arr<uint16_t>& k_pe, const py::object& k_full,
                                const py::object& v_full, int64_t prefix, const MlaWeights& w, MlaVariant variant,
                                int64_t tokens) {
    MlaSequenceCache c;
    expect(latent.ndim() == 2 && latent.shape(1) == w.kv_lora, "cache latent must be [capacity, kv_lora]");
    c.capacity = latent.shape(0), c.prefix = prefix;
    if (variant == MlaVariant::CC)
        check_memory(checked_mul({prefix + tokens, w.heads, w.nope + w.rope + w.v}, "the CC variant's keys and values"),
                     2, "the CC variant's decompressed keys and values [prefix + tokens, heads, nope + rope + v]");
    expect_shape(k_pe, {c.capacity, w.rope}, "cache k_pe");
    c.latent = latent.mutable_data(), c.k_pe = k_pe.mutable_data();
    if (!k_full.is_none()) {
        auto kf = exact_view<uint16_t>(k_full, "cache k_full"), vf = exact_view<uint16_t>(v_full, "cache v_full");
        expect_shape(kf, {c.capacity, w.heads, w.nope + w.rope}, "cache k_full");
        expect_shape(vf, {c.capacity, w.heads, w.v}, "cache v_full");
        c.k_full = kf.mutable_data(), c.v_full = vf.mutable_data();
    }
    return c;
}

inline MlaVariant mla_variant(const std::string& v) { return dsperf::mla_variant_named(v); }

inline GateConfig gate_config(int64_t n_group, int64_t topk_group, int64_t top_k, float route_scale,
                       const std::string& score_func) {
    GateConfig c;
    c.n_group = n_group, c.topk_group = topk_group, c.top_k = top_k, c.route_scale = route_scale;
    if (score_func == "sigmoid") c.score = ScoreFunc::Sigmoid;
    else if (score_func == "softmax") c.score = ScoreFunc::Softmax;
    else throw std::invalid_argument("score_func must be 'sigmoid' or 'softmax', got '" + score_func + "'");
    return c;
}
inline std::string score_func_name(const GateConfig& c) { return c.score == ScoreFunc::Sigmoid ? "sigmoid" : "softmax"; }


// MLA layer: weights arrive as a dict of raw arrays; sizes are checked against each other here.
inline MlaWeights mla_weights(const py::dict& d, int64_t heads, int64_t nope, int64_t rope, int64_t v, float eps) {
    MlaWeights w;
    auto bf = [&](const char* k) { return exact_view<uint16_t>(d[k], k); };
    auto f = [&](const char* k) { return exact_view<float>(d[k], k); };
    auto wq_a = bf("wq_a"), wq_b = bf("wq_b"), wkv_a = bf("wkv_a"), wkv_b = bf("wkv_b"), wo = bf("wo");
    auto qn = f("q_norm"), kvn = f("kv_norm");
    w.heads = heads, w.nope = nope, w.rope = rope, w.v = v, w.eps = eps;
    expect(wq_a.ndim() == 2, "wq_a must be 2-D [q_lora, dim]");
    w.q_lora = wq_a.shape(0), w.dim = wq_a.shape(1);
    expect(wkv_a.ndim() == 2 && wkv_a.shape(1) == w.dim && wkv_a.shape(0) > rope,
           "wkv_a must be [kv_lora + rope, dim]");
    w.kv_lora = wkv_a.shape(0) - rope;
    // heads, nope, rope and v are integer arguments: their products are checked before they
    // are compared with the weights' shapes.
    const int64_t q_width = checked_mul({heads, checked_add(nope, rope, "nope + rope")}, "heads x (nope + rope)");
    const int64_t kv_width = checked_mul({heads, checked_add(nope, v, "nope + v")}, "heads x (nope + v)");
    checked_mul({heads, w.kv_lora}, "heads x kv_lora");
    expect_shape(wq_b, {q_width, w.q_lora}, "wq_b [heads x (nope + rope), q_lora]");
    expect_shape(wkv_b, {kv_width, w.kv_lora}, "wkv_b [heads x (nope + v), kv_lora]");
    expect_shape(wo, {w.dim, checked_mul({heads, v}, "heads x v")}, "wo [dim, heads x v]");
    expect_shape(qn, {w.q_lora}, "q_norm");
    expect_shape(kvn, {w.kv_lora}, "kv_norm");
    w.wq_a = wq_a.data(), w.wq_b = wq_b.data(), w.wkv_a = wkv_a.data(), w.wkv_b = wkv_b.data(), w.wo = wo.data();
    w.q_norm = qn.data(), w.kv_norm = kvn.data();
    if (d.contains("q_absorb") && !d["q_absorb"].is_none()) {
        auto qa = bf("q_absorb"), oa = bf("o_absorb");
        expect_shape(qa, {heads * w.kv_lora, w.q_lora}, "q_absorb");
        expect_shape(oa, {w.dim, heads * w.kv_lora}, "o_absorb");
        w.q_absorb = qa.data(), w.o_absorb = oa.data();
    }
    return w;
}

// The MoE half of a layer from one dict (python/dsperf/kernels.py builds it from checked arguments):
// {"gate_weight", "gate_bias", "w13", "w2", "w13_scale", "w2_scale", "fp8", "shared_w13",
// "shared_w2", "shared_w13_scale", "shared_w2_scale", "gate" (a GateConfig)}. The dict keeps the arrays alive for the call.
struct MoeArgs {
    Arr<uint16_t> gate_w;
    const float* gate_bias = nullptr;
    ExpertWeights routed, shared;
    GateConfig gate;
};

inline MoeArgs moe_args(const py::dict& d, int64_t dim) {
    MoeArgs a;
    const bool fp8 = d["fp8"].cast<bool>();
    a.routed = expert_weights(d["w13"].cast<py::array>(), d["w2"].cast<py::array>(), d["w13_scale"], d["w2_scale"], fp8);
    a.routed.tiles = expert_tiles(d["tiles"], a.routed);
    expect(a.routed.dim == dim, "the experts' dim must equal the input's");
    a.gate_w = exact_view<uint16_t>(d["gate_weight"], "gate_weight");
    expect_shape(a.gate_w, {a.routed.n_experts, dim}, "gate_weight");
    a.gate_bias = optional_bias(d["gate_bias"], a.routed.n_experts, "gate_bias");
    if (!d["shared_w13"].is_none()) {
        // The shared experts as one FFN: [1, 2 * n_shared * inter, dim] and [1, dim, n_shared * inter].
        a.shared = expert_weights(d["shared_w13"].cast<py::array>(), d["shared_w2"].cast<py::array>(),
                                  d["shared_w13_scale"], d["shared_w2_scale"], fp8);
        expect(a.shared.n_experts == 1 && a.shared.dim == dim, "shared weights must be [1, 2 * I_s, dim] and [1, dim, I_s]");
        a.shared.tiles = expert_tiles(d["shared_tiles"], a.shared);
    }
    a.gate = d["gate"].cast<GateConfig>();
    a.gate.validate(a.routed.n_experts, a.gate_bias != nullptr);
    return a;
}

// One sequence's contiguous MLA cache from a dict {"latent", "k_pe", "k_full", "v_full", "prefix"}.
inline MlaSequenceCache sequence_cache(const py::dict& d, const MlaWeights& w, MlaVariant variant, int64_t tokens) {
    auto latent = exact_view<uint16_t>(d["latent"], "cache latent");
    auto k_pe = exact_view<uint16_t>(d["k_pe"], "cache k_pe");
    return sequence_cache(latent, k_pe, d["k_full"], d["v_full"], d["prefix"].cast<int64_t>(), w, variant, tokens);
}

// The adapters of each family (module.cpp registers them through bind_kernels).
void bind_cpu_info(py::module_& m);       // kernels_cpu_info.cpp: ISA, features, probes, AMX checks
void bind_gemm_blocks(py::module_& m);    // kernels_blocks.cpp: linear, norms, RoPE, embedding, activations
void bind_mla(py::module_& m);            // kernels_mla.cpp: paged cache, MLA decode, prolog, layer
void bind_moe(py::module_& m);            // kernels_moe.cpp: gate, routing, experts, MoE layer
void bind_decode_layer(py::module_& m);   // kernels_decode_layer.cpp: the whole block

}  // namespace dsperf::bindings
