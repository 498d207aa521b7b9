// How a deployment's weights are stored, declared once for both languages: the flags a Deployment
// carries (which GEMM tables price attention, wo and the experts, and what their weights weigh in
// memory), and the named formats (a checkpoint's layout) that set them. The binding exposes both
// (step_model.WEIGHT_FLAGS, step_model.WEIGHT_FORMATS, Deployment.weight_dtype); Python's
// grounded.WeightFormat and grounded.WEIGHT_FORMATS are built from them.
#pragma once
#include <cstddef>
#include <string_view>

namespace dsperf {

// (flag, default), with what each means. A Deployment's fields, the explorer grid's, the binding's
// and Python's WeightFormat fields are generated from this list.
#define DSPERF_WEIGHT_FLAGS(X)                                                                           \
    X(weights_fp8, true)  /* FP8 block-scaled weights (DeepSeek's 128x128 scales) outside the NVFP4     \
                             modules: attention, dense MLP, LM head; else BF16 */                        \
    X(experts_fp4, false) /* NVFP4 routed and shared experts on FP4 tensor cores */                      \
    X(wo_fp4, false)      /* NVFP4 attention output projection (wo) on FP4 tensor cores */

#define DSPERF_COUNT_WEIGHT_FLAG(flag, init) +1
inline constexpr size_t kWeightFlagCount = 0 DSPERF_WEIGHT_FLAGS(DSPERF_COUNT_WEIGHT_FLAG);
#undef DSPERF_COUNT_WEIGHT_FLAG

struct WeightFlags {
#define DSPERF_DECLARE_WEIGHT_FLAG(flag, init) bool flag = init;
    DSPERF_WEIGHT_FLAGS(DSPERF_DECLARE_WEIGHT_FLAG)
#undef DSPERF_DECLARE_WEIGHT_FLAG
    constexpr bool operator==(const WeightFlags& o) const {
        return true
#define DSPERF_SAME_WEIGHT_FLAG(flag, init) &&flag == o.flag
            DSPERF_WEIGHT_FLAGS(DSPERF_SAME_WEIGHT_FLAG)
#undef DSPERF_SAME_WEIGHT_FLAG
            ;
    }
};

struct WeightFormat {
    const char* name;
    WeightFlags flags;  // in DSPERF_WEIGHT_FLAGS's order
};

// The formats by name (the `weight_dtype` argument of every entry point):
// - fp8: DeepSeek's FP8 checkpoint, 128x128 block scales everywhere;
// - bf16: BF16 weights (priced from the Hopper table's cuBLAS rows, timed on an H200, and the
//   Blackwell tables derived from them);
// - fp4: NVFP4 experts, FP8 elsewhere (TensorRT-LLM's throughput recipe on Blackwell: FP8 attention);
// - fp4_bf16: NVFP4 experts, BF16 elsewhere, as nvidia/DeepSeek-R1-FP4 stores them (its attention is
//   left out of quantization, the FP4-v2 model card says) and TensorRT-LLM's B200 min-latency recipe
//   runs them (its blog: "64x Attention Modules: bf16");
// - fp4_v2: as fp4_bf16 with wo in NVFP4 too, as nvidia/DeepSeek-R1-0528-FP4-v2 stores it (its model
//   card: "additionally quantizes the wo module in attention layers").
inline constexpr WeightFormat kWeightFormats[] = {
    {"fp8", {true, false, false}},
    {"bf16", {false, false, false}},
    {"fp4", {true, true, false}},
    {"fp4_bf16", {false, true, false}},
    {"fp4_v2", {false, true, true}},
};

// The format of that name, or of those flags; nullptr where none is.
inline const WeightFormat* find_weight_format(std::string_view name) {
    for (const WeightFormat& f : kWeightFormats)
        if (name == f.name) return &f;
    return nullptr;
}
inline const WeightFormat* find_weight_format(const WeightFlags& flags) {
    for (const WeightFormat& f : kWeightFormats)
        if (flags == f.flags) return &f;
    return nullptr;
}

}  // namespace dsperf
