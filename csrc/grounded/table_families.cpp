// What each kernel table family is: its name, the work (FLOPs and bytes) a row's shape stands for,
// the axis its rows are interpolated along, the keys that group its rows, the fields a row needs,
// and the roofline its efficiency is measured against. Declared in kernel_table.hpp; the curves and
// lookups that read these are in kernel_table.cpp.
#include "grounded/kernel_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace dsperf {

const std::vector<std::string>& table_family_names() {
    static const std::vector<std::string> names = {
        "gemm_fp8",    "gemm_bf16",   "grouped_contiguous", "grouped_masked",  "gemm_fp4",       "grouped_fp4",
        "mla_decode",  "mla_prefill", "elementwise",        "dispatch_ll",     "combine_ll",     "dispatch_normal",
        "combine_normal", "allreduce"};
    return names;
}

TableFamily table_family_from_name(const std::string& name) {
    const auto& names = table_family_names();
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return static_cast<TableFamily>(i);
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown kernel family '" + name + "'; known: " + known);
}

bool is_comm_family(TableFamily f) { return f >= TableFamily::kDispatchLowLatency; }

bool is_attention_family(TableFamily f) { return f == TableFamily::kMlaDecode || f == TableFamily::kMlaPrefill; }

bool table_reads_fp8(TableFamily f, const KernelShape& s) {
    switch (f) {
        case TableFamily::kGemmFp8:
            return true;
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
        case TableFamily::kMlaDecode:
            return s.fp8;
        default:
            return false;
    }
}

KernelWork table_work(TableFamily f, const KernelShape& s) {
    switch (f) {
        case TableFamily::kGemmFp8:
        case TableFamily::kGemmBf16: {
            KernelWork w = linear_work(int64_t(std::ceil(s.m)), int64_t(s.n), int64_t(s.k), f == TableFamily::kGemmFp8);
            w.flops *= s.groups, w.bytes *= s.groups;  // per-head GEMMs run as one batched call
            return w;
        }
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
            return grouped_gemm_work(s.m, s.groups, s.n, s.k, s.fp8);
        case TableFamily::kGemmFp4:  // per-head GEMMs run as one batched call, as above
            return nvfp4_gemm_work(std::ceil(s.m) * s.groups, s.groups, s.n, s.k);
        case TableFamily::kGroupedFp4:
            return nvfp4_gemm_work(s.m * s.groups, s.groups, s.n, s.k);
        case TableFamily::kMlaDecode: {
            // kv_lora 512 + rope 64 per key: DeepSeek-V3's latent cache.
            const double keys = s.batch * s.kv_len;
            KernelWork w = mla_decode_work(int64_t(keys), std::max<int64_t>(1, int64_t(s.batch)),
                                           std::max<int64_t>(1, int64_t(s.q_len)), std::max<int64_t>(1, int64_t(s.heads)),
                                           512, 64, s.fp8);
            w.fp8 = s.fp8_math;
            return w;
        }
        case TableFamily::kMlaPrefill: {
            // DeepSeek-V3's decompressed heads: q/k 128 + 64, v 128.
            KernelWork w = causal_attention_work(s.m, std::max(0.0, s.kv_len - s.m), s.heads, 192, 128);
            w.fp8 = s.fp8_math;
            return w;
        }
        case TableFamily::kElementwise: {
            KernelWork w;
            w.bytes = s.bytes;
            return w;
        }
        default:
            throw std::invalid_argument("table_work: '" + table_family_names()[int(f)] +
                                        "' is a communication family (priced by bandwidth)");
    }
}

double table_primary(TableFamily f, const KernelShape& s) {
    switch (f) {
        case TableFamily::kGemmFp8:
        case TableFamily::kGemmBf16:
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
        case TableFamily::kGemmFp4:
        case TableFamily::kGroupedFp4:
        case TableFamily::kMlaPrefill:
            return s.m;
        case TableFamily::kMlaDecode:
            return s.kv_len;
        case TableFamily::kElementwise:
            return s.bytes;
        case TableFamily::kAllReduce:
            return s.tp;
        default:
            return s.ep;
    }
}

TableKeys table_keys(TableFamily f, const KernelShape& s) {
    TableKeys k;
    switch (f) {
        case TableFamily::kGemmFp8:
        case TableFamily::kGemmBf16:
        case TableFamily::kGemmFp4:
            k.v[0] = s.n, k.v[1] = s.k, k.n = 2;
            break;
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
        case TableFamily::kGroupedFp4:
            k.v[0] = s.groups, k.v[1] = s.n, k.v[2] = s.k, k.n = 3;
            break;
        case TableFamily::kMlaDecode:
            k.v[0] = s.batch * s.q_len * s.heads / 128, k.n = 1;  // query rows per key, in 128-head requests
            break;
        default:
            break;
    }
    return k;
}

const std::vector<std::string>& table_row_fields(TableFamily f) {
    static const std::vector<std::string> gemm = {"m", "n", "k"}, grouped = {"m", "n", "k", "groups"},
                                          decode = {"batch", "kv_len"}, prefill = {"m"}, bytes = {"bytes"},
                                          tp = {"tp"}, ep = {"ep"};
    switch (f) {
        case TableFamily::kGemmFp8:
        case TableFamily::kGemmBf16:
        case TableFamily::kGemmFp4:
            return gemm;
        case TableFamily::kGroupedContiguous:
        case TableFamily::kGroupedMasked:
        case TableFamily::kGroupedFp4:
            return grouped;
        case TableFamily::kMlaDecode:
            return decode;
        case TableFamily::kMlaPrefill:
            return prefill;
        case TableFamily::kElementwise:
            return bytes;
        case TableFamily::kAllReduce:
            return tp;
        default:
            return ep;
    }
}

double datasheet_roofline_s(const KernelWork& w, const DeviceSpec& d, double clock_ratio) {
    const double peak = (w.fp4 && d.fp4_tflops > 0 ? d.fp4_tflops : w.fp8 && d.fp8_tflops > 0 ? d.fp8_tflops : d.fp16_tflops) *
                        1e12 * clock_ratio;
    return std::max(w.flops / peak, w.bytes / (d.mem_bw_gbps * 1e9));
}

}  // namespace dsperf
