/* oneDNN BF16 matmul baseline for the expert benchmarks: y[M,N] (f32) = x[M,K] (bf16) @ w[N,K]^T (bf16).
 * The weights are reordered once into oneDNN's preferred layout (as a CPU user would at load time);
 * only the matmul is timed. Built by benchmarks/baselines/onednn.py against Debian's libdnnl-dev
 * (oneDNN 2.x C API; OpenMP threads). */
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHECK(call) do { if ((call) != dnnl_success) return -1.0; } while (0)

/* Evicts the caches by writing and reading a buffer larger than the L3 (`bytes`). */
static void flush_caches(size_t bytes) {
    volatile unsigned char* buf = malloc(bytes);
    if (!buf) return;
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; i += 64) buf[i] = (unsigned char)i;
    for (size_t i = 0; i < bytes; i += 64) sum += buf[i];
    free((void*)buf);
    (void)sum;
}

/* Runs the matmul `reps` (at most 64) times after one warm-up and returns the median run in seconds
 * (negative on a oneDNN error). With flush_bytes > 0 the caches are flushed before every timed
 * run, so the weights come from memory as they do when many experts take turns. */
double onednn_matmul_bf16(const void* x, const void* w, float* y, int64_t M, int64_t N, int64_t K, int reps,
                          int64_t flush_bytes) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    dnnl_memory_desc_t a_md, b_user_md, b_any_md, c_md;
    CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, dnnl_bf16, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&b_user_md, 2, b_dims, dnnl_bf16, dnnl_ba)); /* w[N,K] row-major */
    CHECK(dnnl_memory_desc_init_by_tag(&b_any_md, 2, b_dims, dnnl_bf16, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t mm_desc;
    CHECK(dnnl_matmul_desc_init(&mm_desc, &a_md, &b_any_md, NULL, &c_md));
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_primitive_desc_create(&pd, &mm_desc, NULL, eng, NULL));
    const dnnl_memory_desc_t* b_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t a_m, b_user_m, b_m, c_m;
    CHECK(dnnl_memory_create(&a_m, &a_md, eng, (void*)x));
    CHECK(dnnl_memory_create(&b_user_m, &b_user_md, eng, (void*)w));
    CHECK(dnnl_memory_create(&b_m, b_md, eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_create(&c_m, &c_md, eng, y));
    /* Reorder the weights once, untimed. */
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, &b_user_md, eng, b_md, eng, NULL));
    CHECK(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_SRC, b_user_m}, {DNNL_ARG_DST, b_m}};
    CHECK(dnnl_primitive_execute(reorder, st, 2, rargs));
    CHECK(dnnl_stream_wait(st));
    dnnl_primitive_t prim;
    CHECK(dnnl_primitive_create(&prim, pd));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a_m}, {DNNL_ARG_WEIGHTS, b_m}, {DNNL_ARG_DST, c_m}};
    double times[64];
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    for (int r = -1; r < reps; ++r) {
        if (flush_bytes > 0 && r >= 0) flush_caches((size_t)flush_bytes);
        const double t0 = now();
        CHECK(dnnl_primitive_execute(prim, st, 3, args));
        CHECK(dnnl_stream_wait(st));
        if (r >= 0) times[r] = now() - t0;
    }
    /* The median run: the machine is shared, and the benchmarks compare medians. */
    for (int i = 1; i < reps; ++i)
        for (int j = i; j > 0 && times[j - 1] > times[j]; --j) {
            const double t = times[j]; times[j] = times[j - 1]; times[j - 1] = t;
        }
    const double best = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(a_m); dnnl_memory_destroy(b_user_m); dnnl_memory_destroy(b_m); dnnl_memory_destroy(c_m);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return best;
}
