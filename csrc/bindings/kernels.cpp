// pybind11 face of the CPU kernels. Arrays arrive as raw bit patterns (uint16 for BF16, uint8
// for FP8; python/dsperf/kernels.py checks dtypes, shapes and contiguity and names the argument).
// This layer re-checks the sizes it relies on, allocates outputs and releases the GIL.
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

namespace {

template <typename T>
using Arr = py::array_t<T, py::array::c_style>;

void expect(bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
}

template <typename T>
void expect_shape(const Arr<T>& a, std::initializer_list<int64_t> shape, const char* name) {
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
int64_t checked_mul(std::initializer_list<int64_t> factors, const char* what) {
    int64_t p = 1;
    for (int64_t f : factors) {
        if (f < 0) throw std::invalid_argument(std::string(what) + " must be >= 0");
        if (__builtin_mul_overflow(p, f, &p))
            throw std::invalid_argument(std::string(what) + " overflows 64-bit size arithmetic");
    }
    return p;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
    int64_t s;
    if (__builtin_add_overflow(a, b, &s))
        throw std::invalid_argument(std::string(what) + " overflows 64-bit size arithmetic");
    return s;
}

// The memory this process may have (physical memory, or less under an address-space limit): an
// array larger than it cannot be allocated and filled (with overcommit the allocation succeeds
// and the process dies filling it).
int64_t memory_bytes() {
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
void check_memory(int64_t elems, int64_t size, const char* what) {
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
Arr<T> empty(std::initializer_list<int64_t> shape, const char* what) {
    int64_t elems = 1;
    for (int64_t d : shape) elems = checked_mul({elems, d}, what);
    check_memory(elems, sizeof(T), what);
    return Arr<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

// A view of an argument that must already be a C-contiguous array of T: a converting cast would
// make a temporary copy whose data dies with this call's helper.
template <typename T>
Arr<T> exact_view(const py::object& o, const char* name) {
    expect(py::isinstance<Arr<T>>(o), std::string(name) + " must be a C-contiguous array of the expected dtype");
    return o.cast<Arr<T>>();
}

ExpertWeights expert_weights(const py::array& w13, const py::array& w2, const py::object& s13, const py::object& s2,
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
        expect_shape(a13, {w.n_experts, (2 * w.inter + 127) / 128, (w.dim + 127) / 128}, "w13_scale");
        expect_shape(a2, {w.n_experts, (w.dim + 127) / 128, (w.inter + 127) / 128}, "w2_scale");
        w.scale13 = a13.data(), w.scale2 = a2.data();
    }
    return w;
}

// An optional FP32 [n] bias (null when None). The argument's array keeps the data alive.
const float* optional_bias(const py::object& bias, int64_t n, const char* name) {
    if (bias.is_none()) return nullptr;
    auto arr = exact_view<float>(bias, name);
    expect_shape(arr, {n}, name);
    return arr.data();
}

// One sequence's MLA cache from its arrays (k_full / v_full None unless the CD variant).
// The CC variant decompresses every cached row per call: [rows, heads, nope + rope + v] BF16.
MlaSequenceCache sequence_cache(Arr<uint16_t>& latent, Arr<uint16_t>& k_pe, const py::object& k_full,
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

MlaVariant mla_variant(const std::string& v) {
    if (v == "CD") return MlaVariant::CD;
    if (v == "CC") return MlaVariant::CC;
    if (v == "A_CC") return MlaVariant::A_CC;
    if (v == "A_CC_ME") return MlaVariant::A_CC_ME;
    if (v == "AM_CC_ME") return MlaVariant::AM_CC_ME;
    throw std::invalid_argument("variant must be one of CD, CC, A_CC, A_CC_ME, AM_CC_ME, got '" + v + "'");
}

GateConfig gate_config(int64_t n_group, int64_t topk_group, int64_t top_k, float route_scale,
                       const std::string& score_func) {
    GateConfig c;
    c.n_group = n_group, c.topk_group = topk_group, c.top_k = top_k, c.route_scale = route_scale;
    if (score_func == "sigmoid") c.score = ScoreFunc::Sigmoid;
    else if (score_func == "softmax") c.score = ScoreFunc::Softmax;
    else throw std::invalid_argument("score_func must be 'sigmoid' or 'softmax', got '" + score_func + "'");
    return c;
}

}  // namespace

void bind_kernels(py::module_& root) {
    py::module_ m = root.def_submodule("kernels", "CPU kernels on raw BF16/FP8 bit arrays");

    m.def("isa", [] { return cpu_features().isa; }, "The micro-kernel family in use");
    m.def("cpu_features", [] {
        const CpuFeatures& f = cpu_features();
        py::dict d;
        d["avx512"] = f.avx512, d["avx512_bf16"] = f.avx512_bf16, d["amx_bf16"] = f.amx_bf16, d["isa"] = f.isa;
        return d;
    });

    m.def("probe_bf16_peak_gflops", [](double seconds) {
        py::gil_scoped_release nogil;
        return probe_bf16_peak_gflops(seconds);
    }, py::arg("seconds") = 0.5, "VDPBF16PS peak of all OpenMP threads, GFLOPS (0 without AVX-512 BF16)");
    m.def("probe_read_bandwidth_gbps", [](int64_t bytes, int repeats, int threads) {
        py::gil_scoped_release nogil;
        return probe_read_bandwidth_gbps(bytes, repeats, threads);
    }, py::arg("bytes") = int64_t(1) << 30, py::arg("repeats") = 3, py::arg("threads") = 0,
       "Streaming-read bandwidth, GB/s (threads 0: all)");
    m.def("probe_triad_bandwidth_gbps", [](int64_t bytes, int repeats, int threads) {
        py::gil_scoped_release nogil;
        return probe_triad_bandwidth_gbps(bytes, repeats, threads);
    }, py::arg("bytes") = int64_t(768) << 20, py::arg("repeats") = 3, py::arg("threads") = 0,
       "STREAM triad bandwidth, GB/s (threads 0: all)");
    m.def("probe_fp32_fma_peak_gflops", [](double seconds) {
        py::gil_scoped_release nogil;
        return probe_fp32_fma_peak_gflops(seconds);
    }, py::arg("seconds") = 0.5, "FP32 FMA peak of all OpenMP threads, GFLOPS");
    m.def("max_threads", [] {
#ifdef _OPENMP
        return omp_get_max_threads();
#else
        return 1;
#endif
    }, "OpenMP threads the kernels use");
    m.def("linear_fma_min_rows", &linear_fma_min_rows,
          "Rows from which GEMMs use the widened FP32-FMA kernel instead of BF16 dot products (0: one kernel)");

    m.def("amx_status", &amx::status, "'usable' where the GEMMs run on AMX tiles, else why not");
    // The AMX driver on the scalar emulation of the tile instructions: its packing and tiling are
    // tested on CPUs without AMX.
    m.def("linear_amx_emulated", [](Arr<uint16_t> x, Arr<uint16_t> w) {
        expect(x.ndim() == 2 && w.ndim() == 2 && w.shape(1) == x.shape(1), "x [M, K] and w [N, K] expected");
        const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
        auto y = empty<float>({M, N}, "y [rows of x, rows of w]");
        py::gil_scoped_release nogil;
        amx::linear_bf16_emulated(x.data(), K, w.data(), K, y.mutable_data(), N, M, N, K, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("w").noconvert());
    m.def("gemm_vnni_amx_emulated", [](Arr<uint16_t> x, Arr<uint16_t> bp, int64_t N) {
        expect(x.ndim() == 2 && N >= 0, "x [M, K] and N >= 0 expected");
        const int64_t M = x.shape(0), K = x.shape(1);
        expect(bp.size() == checked_mul({(K + 1) / 2, N, 2}, "n"), "bp must hold ceil(K / 2) x N x 2 values");
        auto y = empty<float>({M, N}, "y [rows of x, n]");
        py::gil_scoped_release nogil;
        amx::gemm_bf16_vnni_emulated(x.data(), K, bp.data(), y.mutable_data(), N, M, N, K, false);
        return y;
    }, py::arg("x").noconvert(), py::arg("bp").noconvert(), py::arg("n"));

    m.def("linear", [](Arr<uint16_t> x, py::array w, py::object w_scale, bool fp8) {
        expect(x.ndim() == 2 && w.ndim() == 2, "x and w must be 2-D");
        const int64_t M = x.shape(0), K = x.shape(1), N = w.shape(0);
        expect(w.shape(1) == K, "w must be [N, K] with K = x.shape[1] = " + std::to_string(K));
        auto y = empty<float>({M, N}, "linear: y [rows of x, rows of w]");
        if (fp8) {
            auto s = exact_view<float>(w_scale, "w_scale");
            expect_shape(s, {(N + 127) / 128, (K + 127) / 128}, "w_scale [ceil(rows of w / 128), ceil(cols of w / 128)]");
            auto wb = exact_view<uint8_t>(w, "w");
            py::gil_scoped_release nogil;
            linear_fp8(x.data(), K, wb.data(), s.data(), y.mutable_data(), N, M, N, K);
        } else {
            auto wb = exact_view<uint16_t>(w, "w");
            py::gil_scoped_release nogil;
            linear_bf16(x.data(), K, wb.data(), K, y.mutable_data(), N, M, N, K);
        }
        return y;
    }, py::arg("x").noconvert(), py::arg("w"), py::arg("w_scale"), py::arg("fp8"));

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

    // MLA layer: weights arrive as a dict of raw arrays; sizes are checked against each other here.
    auto mla_weights = [](const py::dict& d, int64_t heads, int64_t nope, int64_t rope, int64_t v, float eps) {
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
    };
    m.def("mla_prolog", [mla_weights](Arr<uint16_t> x, const py::dict& d, int64_t heads, int64_t nope, int64_t rope,
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
    m.def("mla_absorb_weights", [mla_weights](const py::dict& d, int64_t heads, int64_t nope, int64_t rope, int64_t v) {
        const MlaWeights w = mla_weights(d, heads, nope, rope, v, 1e-6f);
        auto qa = empty<uint16_t>({heads * w.kv_lora, w.q_lora}, "q_absorb [heads x kv_lora, q_lora]");
        auto oa = empty<uint16_t>({w.dim, heads * w.kv_lora}, "o_absorb [dim, heads x kv_lora]");
        {
            py::gil_scoped_release nogil;
            mla_absorb_weights(w, qa.mutable_data(), oa.mutable_data());
        }
        return py::make_tuple(qa, oa);
    }, py::arg("weights"), py::arg("heads"), py::arg("nope"), py::arg("rope"), py::arg("v"));
    m.def("mla_forward", [mla_weights](const std::string& variant, Arr<uint16_t> x, const py::dict& d, int64_t heads,
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

    m.def("decode_layer", [mla_weights](const std::string& variant, Arr<uint16_t> x, Arr<float> attn_norm,
                                        Arr<float> ffn_norm, const py::dict& mla, int64_t heads, int64_t nope,
                                        int64_t rope, int64_t v, float eps, Arr<float> freqs, float scale,
                                        Arr<uint16_t> latent, Arr<uint16_t> k_pe, py::object k_full, py::object v_full,
                                        int64_t prefix, Arr<uint16_t> gate_w, py::object gate_bias, py::array w13,
                                        py::array w2, py::object s13, py::object s2, bool fp8, py::object shared_w13,
                                        py::object shared_w2, py::object shared_s13, py::object shared_s2,
                                        int64_t n_group, int64_t topk_group, int64_t top_k, float route_scale,
                                        const std::string& score_func) {
        DecodeLayerWeights w;
        const MlaVariant var = mla_variant(variant);
        w.mla = mla_weights(mla, heads, nope, rope, v, eps);
        const int64_t D = w.mla.dim;
        expect(x.ndim() == 2 && x.shape(1) == D, "x must be [tokens, dim]");
        expect_shape(attn_norm, {D}, "attn_norm");
        expect_shape(ffn_norm, {D}, "ffn_norm");
        w.attn_norm = attn_norm.data(), w.ffn_norm = ffn_norm.data();
        w.routed = expert_weights(w13, w2, s13, s2, fp8);
        expect(w.routed.dim == D, "the experts' dim must equal the MLA's");
        expect_shape(gate_w, {w.routed.n_experts, D}, "gate_weight");
        w.gate_w = gate_w.data();
        w.gate_bias = optional_bias(gate_bias, w.routed.n_experts, "gate_bias");
        if (!shared_w13.is_none()) {
            w.shared = expert_weights(shared_w13.cast<py::array>(), shared_w2.cast<py::array>(), shared_s13, shared_s2, fp8);
            expect(w.shared.n_experts == 1 && w.shared.dim == D, "shared weights must be [1, 2 * I_s, dim] and [1, dim, I_s]");
        }
        w.gate = gate_config(n_group, topk_group, top_k, route_scale, score_func);
        w.gate.validate(w.routed.n_experts, w.gate_bias != nullptr);
        expect_shape(freqs, {rope / 2}, "freqs");
        MlaSequenceCache c = sequence_cache(latent, k_pe, k_full, v_full, prefix, w.mla, var, x.shape(0));
        auto out = empty<uint16_t>({x.shape(0), D}, "decode_layer output [tokens, dim]");
        {
            py::gil_scoped_release nogil;
            decode_layer(var, w, x.data(), x.shape(0), freqs.data(), scale, c, out.mutable_data());
        }
        return out;
    }, py::arg("variant"), py::arg("x").noconvert(), py::arg("attn_norm").noconvert(), py::arg("ffn_norm").noconvert(),
       py::arg("mla"), py::arg("heads"), py::arg("nope"), py::arg("rope"), py::arg("v"), py::arg("eps"),
       py::arg("freqs").noconvert(), py::arg("softmax_scale"),
       // The cache arrays are written in place: a converting cast would write into a copy.
       py::arg("latent").noconvert(), py::arg("k_pe").noconvert(), py::arg("k_full"), py::arg("v_full"),
       py::arg("prefix"), py::arg("gate_weight").noconvert(), py::arg("gate_bias"), py::arg("w13"), py::arg("w2"),
       py::arg("w13_scale"), py::arg("w2_scale"), py::arg("fp8"), py::arg("shared_w13"), py::arg("shared_w2"),
       py::arg("shared_w13_scale"), py::arg("shared_w2_scale"), py::arg("n_group"), py::arg("topk_group"),
       py::arg("top_k"), py::arg("route_scale"), py::arg("score_func"));

    m.def("check_gate_config", [](int64_t n_experts, bool has_bias, int64_t n_group, int64_t topk_group,
                                  int64_t top_k, float route_scale, const std::string& score_func) {
        gate_config(n_group, topk_group, top_k, route_scale, score_func).validate(n_experts, has_bias);
    }, py::arg("n_experts"), py::arg("has_bias"), py::arg("n_group"), py::arg("topk_group"), py::arg("top_k"),
       py::arg("route_scale"), py::arg("score_func"),
       "The gate's configuration checked against the expert count (the GPU gate's check, with no CPU call)");
    m.def("moe_gate", [](Arr<float> logits, py::object bias, int64_t n_group, int64_t topk_group, int64_t top_k,
                         float route_scale, const std::string& score_func) {
        expect(logits.ndim() == 2, "logits must be 2-D [tokens, experts]");
        const int64_t T = logits.shape(0), E = logits.shape(1);
        const GateConfig cfg = gate_config(n_group, topk_group, top_k, route_scale, score_func);
        const float* b = optional_bias(bias, E, "bias");
        cfg.validate(E, b != nullptr);
        auto w = empty<float>({T, top_k}, "moe_gate weights [tokens, top_k]");
        auto ids = empty<int32_t>({T, top_k}, "moe_gate ids [tokens, top_k]");
        {
            py::gil_scoped_release nogil;
            moe_gate(logits.data(), T, E, b, cfg, w.mutable_data(), ids.mutable_data());
        }
        return py::make_tuple(w, ids);
    }, py::arg("logits").noconvert(), py::arg("bias"), py::arg("n_group"), py::arg("topk_group"), py::arg("top_k"),
       py::arg("route_scale"), py::arg("score_func"));

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

    m.def("experts_contiguous", [](Arr<uint16_t> x, Arr<int64_t> offsets, py::array w13, py::array w2,
                                   py::object s13, py::object s2, bool fp8) {
        const ExpertWeights w = expert_weights(w13, w2, s13, s2, fp8);
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
       py::arg("w2_scale"), py::arg("fp8"));
    m.def("experts_masked", [](Arr<uint16_t> x, Arr<int32_t> counts, py::array w13, py::array w2, py::object s13,
                               py::object s2, bool fp8) {
        const ExpertWeights w = expert_weights(w13, w2, s13, s2, fp8);
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
       py::arg("w2_scale"), py::arg("fp8"));

    m.def("moe_layer", [](Arr<uint16_t> x, Arr<uint16_t> gate_w, py::object gate_bias, py::array w13, py::array w2,
                          py::object s13, py::object s2, bool fp8, py::object shared_w13, py::object shared_w2,
                          py::object shared_s13, py::object shared_s2, int64_t n_group, int64_t topk_group,
                          int64_t top_k, float route_scale, const std::string& score_func) {
        const ExpertWeights routed = expert_weights(w13, w2, s13, s2, fp8);
        expect(x.ndim() == 2 && x.shape(1) == routed.dim, "x must be [tokens, dim] matching the experts");
        expect_shape(gate_w, {routed.n_experts, routed.dim}, "gate_weight");
        ExpertWeights shared;
        if (!shared_w13.is_none()) {
            // The shared experts as one FFN: [1, 2 * n_shared * inter, dim] and [1, dim, n_shared * inter].
            shared = expert_weights(shared_w13.cast<py::array>(), shared_w2.cast<py::array>(), shared_s13, shared_s2, fp8);
            expect(shared.n_experts == 1 && shared.dim == routed.dim, "shared weights must be [1, 2 * I_s, dim] and [1, dim, I_s]");
        }
        const float* b = optional_bias(gate_bias, routed.n_experts, "gate_bias");
        const GateConfig cfg = gate_config(n_group, topk_group, top_k, route_scale, score_func);
        cfg.validate(routed.n_experts, b != nullptr);
        auto y = empty<float>({x.shape(0), routed.dim}, "moe_layer output");
        {
            py::gil_scoped_release nogil;
            moe_layer(x.data(), x.shape(0), gate_w.data(), b, cfg, routed, shared, y.mutable_data());
        }
        return y;
    }, py::arg("x").noconvert(), py::arg("gate_weight").noconvert(), py::arg("gate_bias"), py::arg("w13"),
       py::arg("w2"), py::arg("w13_scale"), py::arg("w2_scale"), py::arg("fp8"), py::arg("shared_w13"),
       py::arg("shared_w2"), py::arg("shared_w13_scale"), py::arg("shared_w2_scale"), py::arg("n_group"),
       py::arg("topk_group"), py::arg("top_k"), py::arg("route_scale"), py::arg("score_func"));
}
