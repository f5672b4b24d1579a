/* test_engine_tactics.c - tactic candidates and scratch sizes (Conv geometry; the C16 conv
 * offered where the Conv kernel would take it), timing picks
 * the faster of two registered variants, and the timing cache file (round trip, corrupt
 * and foreign files are ignored with a warning). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build/tactics.h"
#include "build/timing_cache.h"

static ir_type tensor_type(ir_model *m, int32_t rank, const int64_t *dims) {
    ir_type t = {.kind = IR_TYPE_TENSOR, .dtype = KILN_DTYPE_FLOAT, .rank = rank};
    t.dims = ARENA_ARRAY(&m->arena, ir_dim, rank);
    for (int32_t i = 0; i < rank; i++) t.dims[i] = (ir_dim){IR_DIM_CONST, 0, dims[i]};
    return t;
}

typedef struct conv_case {
    ir_model *m;
    ir_graph *g;
    ir_type tx, tw, ty;
    const ir_type *in[2], *out[1];
    build_tactic_query q;
} conv_case;

static void make_conv(conv_case *c, int64_t C, int64_t M, int64_t k, int64_t group, int64_t pad) {
    c->m = ir_model_new();
    c->g = ir_graph_new(c->m, NULL, "g");
    c->m->graph = c->g;
    int64_t xd[4] = {1, C, 32, 32}, wd[4] = {M, C / group, k, k}, yd[4] = {1, M, 32 + 2 * pad - k + 1, 32 + 2 * pad - k + 1};
    c->tx = tensor_type(c->m, 4, xd);
    c->tw = tensor_type(c->m, 4, wd);
    c->ty = tensor_type(c->m, 4, yd);
    int32_t idx = ir_graph_add_node(c->g);
    ir_node *n = ir_graph_node(c->g, idx);
    n->name = "conv";
    n->op_type = "Conv";
    n->opset = 17;
    n->n_attrs = 2;
    n->attrs = ARENA_ARRAY(&c->m->arena, ir_attr, 2);
    n->attrs[0] = (ir_attr){.name = "group", .type = IR_ATTR_INT, .i = group};
    int64_t *pads = ARENA_ARRAY(&c->m->arena, int64_t, 4);
    for (int i = 0; i < 4; i++) pads[i] = pad;
    n->attrs[1] = (ir_attr){.name = "pads", .type = IR_ATTR_INTS, .n = 4, .ints = pads};
    c->in[0] = &c->tx;
    c->in[1] = &c->tw;
    c->out[0] = &c->ty;
    c->q = (build_tactic_query){c->m, c->g, n, 2, 1, c->in, c->out};
}

static void test_conv_candidates_and_scratch(void **state) {
    (void)state;
    const build_tactic *cands[8];
    build_tactic generic;
    char gname[64];
    conv_case c;
    /* 3x3, pad 1: im2col with scratch C*kh*kw*OH*OW*4 */
    make_conv(&c, 8, 8, 3, 1, 1);
    int32_t n = build_tactics_for_node(NULL, &c.q, 0, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    assert_string_equal(cands[0]->name, "conv_im2col_gemm");
    assert_int_equal(build_tactic_scratch(cands[0], &c.q), 8 * 3 * 3 * 32 * 32 * 4);
    char *key = build_tactic_key(&c.q, CPU_FEATURE_AVX2);
    assert_non_null(strstr(key, "Conv|17|group=1;pads=[1,1,1,1];|float32[1,8,32,32],float32[8,8,3,3]|isa=1"));
    free(key);
    ir_model_free(c.m);
    /* 1x1, no pad: pointwise, no scratch */
    make_conv(&c, 8, 16, 1, 1, 0);
    n = build_tactics_for_node(NULL, &c.q, 0, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    assert_string_equal(cands[0]->name, "conv_pointwise_gemm");
    assert_int_equal(build_tactic_scratch(cands[0], &c.q), 0);
    ir_model_free(c.m);
    /* depthwise */
    make_conv(&c, 8, 8, 3, 8, 1);
    n = build_tactics_for_node(NULL, &c.q, 0, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    assert_string_equal(cands[0]->name, "conv_depthwise_direct");
    ir_model_free(c.m);
    /* 3x3 stride 1 with >= 16 channels: two Winograd variants next to the implicit GEMM on
     * an AVX2+FMA CPU (first = the untimed default), only the GEMM without those features */
    make_conv(&c, 16, 32, 3, 1, 1);
    n = build_tactics_for_node(NULL, &c.q, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, cands, 8, &generic, gname);
    assert_int_equal(n, 3);
    assert_string_equal(cands[0]->name, "conv_winograd_f43");
    assert_string_equal(cands[1]->name, "conv_winograd_f23");
    assert_string_equal(cands[2]->name, "conv_im2col_gemm");
    assert_non_null(cands[0]->run);
    assert_non_null(cands[1]->run);
    assert_non_null(cands[2]->run);
    /* Winograd scratch: the blocked padded input plus the thread slots' tile buffers */
    uint64_t s43 = build_tactic_scratch(cands[0], &c.q), s23 = build_tactic_scratch(cands[1], &c.q);
    assert_true(s43 >= 16ull * 34 * 34 * 4 && s43 < (64ull << 20));
    assert_true(s23 >= 16ull * 34 * 34 * 4 && s23 < (64ull << 20));
    n = build_tactics_for_node(NULL, &c.q, CPU_FEATURE_AVX2, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    assert_string_equal(cands[0]->name, "conv_im2col_gemm");
    ir_model_free(c.m);
    /* 8 input channels: Winograd does not apply */
    make_conv(&c, 8, 32, 3, 1, 1);
    n = build_tactics_for_node(NULL, &c.q, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    ir_model_free(c.m);
}

static bool has_tactic(const build_tactic *const *cands, int32_t n, const char *name) {
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(cands[i]->name, name)) return true;
    return false;
}

/* The channels-in-lanes direct conv is offered on AVX-512F where the Conv kernel takes it
 * by default (cpu_conv_c16_candidate on the kernel's own geometry) and, for timing, over
 * any other multiple of 16 input channels (cpu_conv_c16_offered); never without AVX-512F. */
static void test_conv_c16_candidates(void **state) {
    (void)state;
    const build_tactic *cands[8];
    build_tactic generic;
    char gname[64];
    conv_case c;
    const uint64_t avx512 = CPU_FEATURE_AVX2 | CPU_FEATURE_FMA | CPU_FEATURE_AVX512F;
    /* 5x5 over 16 channels (no Winograd): C16 first, the GEMM after it */
    make_conv(&c, 16, 32, 5, 1, 2);
    int32_t n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_int_equal(n, 2);
    assert_string_equal(cands[0]->name, "conv_c16_direct");
    assert_string_equal(cands[1]->name, "conv_im2col_gemm");
    /* scratch: the padded input copy, N x C x (H + k) x (W + k) floats */
    assert_int_equal(build_tactic_scratch(cands[0], &c.q), 16ull * 37 * 37 * 4);
    n = build_tactics_for_node(NULL, &c.q, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, cands, 8, &generic, gname);
    assert_false(has_tactic(cands, n, "conv_c16_direct"));
    ir_model_free(c.m);
    /* an RGB 7x7 stem: offered; the same kernel dilated: not (the kernel's default takes
     * the GEMM there) */
    make_conv(&c, 3, 64, 7, 1, 3);
    n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_true(has_tactic(cands, n, "conv_c16_direct"));
    ir_node *node = (ir_node *)c.q.node;
    ir_attr *attrs = ARENA_ARRAY(&c.m->arena, ir_attr, 3);
    memcpy(attrs, node->attrs, 2 * sizeof *attrs);
    int64_t *dil = ARENA_ARRAY(&c.m->arena, int64_t, 2);
    dil[0] = dil[1] = 2;
    attrs[2] = (ir_attr){.name = "dilations", .type = IR_ATTR_INTS, .n = 2, .ints = dil};
    node->attrs = attrs;
    node->n_attrs = 3;
    n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_false(has_tactic(cands, n, "conv_c16_direct"));
    ir_model_free(c.m);
    /* a 1x1 over 16 channels with padding, and one without over a 32x32 image (1024
     * positions > 256): not the kernel's default, but offered for timing (a C16 region
     * takes them, builder.c chain_c16); over 8 channels: not offered */
    make_conv(&c, 16, 32, 1, 1, 1);
    n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_true(has_tactic(cands, n, "conv_c16_direct"));
    ir_model_free(c.m);
    make_conv(&c, 16, 32, 1, 1, 0);
    n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_int_equal(n, 2);
    assert_string_equal(cands[0]->name, "conv_c16_direct");
    assert_string_equal(cands[1]->name, "conv_pointwise_gemm");
    ir_model_free(c.m);
    make_conv(&c, 8, 32, 1, 1, 0);
    n = build_tactics_for_node(NULL, &c.q, avx512, cands, 8, &generic, gname);
    assert_int_equal(n, 1);
    assert_string_equal(cands[0]->name, "conv_pointwise_gemm");
    ir_model_free(c.m);
}

static kiln_status run_fast(cpu_kernel_ctx *ctx, const rt_value *const *in, int32_t n_in, rt_value *out, int32_t n_out) {
    (void)ctx, (void)in, (void)n_in, (void)out, (void)n_out;
    return KILN_OK;
}
static kiln_status run_slow(cpu_kernel_ctx *ctx, const rt_value *const *in, int32_t n_in, rt_value *out, int32_t n_out) {
    (void)ctx, (void)in, (void)n_in, (void)out, (void)n_out;
    struct timespec ts = {0, 2000000}; /* 2 ms */
    nanosleep(&ts, NULL);
    return KILN_OK;
}
static uint64_t scratch_big(const build_tactic_query *q) {
    (void)q;
    return 1ull << 40;
}

static void test_timing_picks_faster_variant(void **state) {
    (void)state;
    conv_case c;
    make_conv(&c, 4, 4, 1, 1, 0);
    ir_graph_node(c.g, 0)->op_type = "KilnTestOp";
    const build_tactic extra[] = {
        {"", "KilnTestOp", "slow", 0, NULL, NULL, run_slow, false},
        {"", "KilnTestOp", "fast", 0, NULL, NULL, run_fast, false},
        {"", "KilnTestOp", "huge_scratch", 0, NULL, scratch_big, run_fast, false},
        {"", "KilnTestOp", "needs_avx512", CPU_FEATURE_AVX512F, NULL, NULL, run_fast, false},
    };
    build_tactic_registry reg = {extra, 4};
    const build_tactic *cands[8];
    build_tactic generic;
    char gname[64];
    int32_t n = build_tactics_for_node(&reg, &c.q, CPU_FEATURE_AVX2, cands, 8, &generic, gname);
    assert_int_equal(n, 3); /* the AVX-512 variant is not offered on an AVX2 CPU */
    assert_int_equal(build_tactic_scratch(cands[2], &c.q), 1ull << 40);
    double slow_ms, fast_ms;
    kiln_error err = {0};
    assert_int_equal(build_tactic_time(cands[0], &c.q, NULL, 3, &slow_ms, &err), KILN_OK);
    assert_int_equal(build_tactic_time(cands[1], &c.q, NULL, 3, &fast_ms, &err), KILN_OK);
    assert_true(slow_ms >= 1.5);  /* it sleeps 2 ms per run */
    assert_true(fast_ms < slow_ms);
    ir_model_free(c.m);
}

/* A machine that is slow for its first SPELL_RUNS kernel runs (+6 ms each), whichever
 * tactic runs then: "early" is the faster tactic (1 ms against 3 ms) and is listed first.
 * Timed back to back, all of its runs would fall in the slow spell and "late" would win. */
#define SPELL_RUNS 5
static int g_runs;
static void sleep_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}
static kiln_status run_early(cpu_kernel_ctx *ctx, const rt_value *const *in, int32_t n_in, rt_value *out, int32_t n_out) {
    (void)ctx, (void)in, (void)n_in, (void)out, (void)n_out;
    sleep_ms(++g_runs <= SPELL_RUNS ? 7 : 1);
    return KILN_OK;
}
static kiln_status run_late(cpu_kernel_ctx *ctx, const rt_value *const *in, int32_t n_in, rt_value *out, int32_t n_out) {
    (void)ctx, (void)in, (void)n_in, (void)out, (void)n_out;
    sleep_ms(++g_runs <= SPELL_RUNS ? 9 : 3);
    return KILN_OK;
}
static kiln_status run_fails(cpu_kernel_ctx *ctx, const rt_value *const *in, int32_t n_in, rt_value *out, int32_t n_out) {
    (void)in, (void)n_in, (void)out, (void)n_out;
    return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "not on this input");
}

static void test_timing_alternates_through_a_slow_spell(void **state) {
    (void)state;
    conv_case c;
    make_conv(&c, 4, 4, 1, 1, 0);
    ir_graph_node(c.g, 0)->op_type = "KilnTestOp";
    const build_tactic early = {"", "KilnTestOp", "early", 0, NULL, NULL, run_early, false};
    const build_tactic late = {"", "KilnTestOp", "late", 0, NULL, NULL, run_late, false};
    const build_tactic fails = {"", "KilnTestOp", "fails", 0, NULL, NULL, run_fails, false};
    const build_tactic *ts[] = {&early, &fails, &late};
    double ms[3];
    kiln_error err = {0};
    g_runs = 0;
    assert_int_equal(build_tactics_time(ts, 3, &c.q, NULL, 4, ms, &err), KILN_OK);
    assert_int_equal(g_runs, 10); /* 1 warm-up + 4 timed rounds, each tactic once a round */
    /* its best run came after the spell (7 ms runs), with room for a loaded machine (one
     * run under ctest -j16 on the GPU host's Xeon overslept a 1 ms sleep past 3 ms) */
    assert_true(ms[0] >= 0.9 && ms[0] < 6.0);
    assert_true(ms[1] < 0); /* a failing tactic is reported, the others still timed */
    assert_true(ms[2] >= 2.9);
    assert_true(ms[0] < ms[2]);
    /* alone, the failing tactic is an error */
    assert_int_not_equal(build_tactic_time(&fails, &c.q, NULL, 2, ms, &err), KILN_OK);
    kiln_err_clear(&err);
    ir_model_free(c.m);
}

static void test_timing_cache_file(void **state) {
    (void)state;
    char path[] = "/tmp/kiln_tc_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    build_timing_cache c;
    build_timing_cache_init(&c);
    assert_true(build_timing_cache_put(&c, "Conv|17|k=\"q\"\t|x", "conv_im2col_gemm", 0.25));
    assert_true(build_timing_cache_put(&c, "MatMul|13||float32[1,2]", "gemm", 1.5));
    kiln_error err = {0};
    assert_int_equal(build_timing_cache_save(&c, path, &err), KILN_OK);
    build_timing_cache_free(&c);
    build_timing_cache_init(&c);
    strbuf w;
    sb_init(&w);
    assert_true(build_timing_cache_load(&c, path, &w));
    double ms = 0;
    assert_true(build_timing_cache_get(&c, "Conv|17|k=\"q\"\t|x", "conv_im2col_gemm", &ms));
    assert_true(ms == 0.25);
    assert_false(build_timing_cache_get(&c, "Conv|17|k=\"q\"\t|x", "other", &ms));
    build_timing_cache_free(&c);
    /* corrupt, foreign and other-version files: ignored with a warning, cache empty */
    const char *bad[] = {"{\"format\": \"kiln-timing-cache\", \"version\": 2, \"entries\": [{\"key\": 3}]}",
                         "{\"format\": \"something-else\", \"version\": 2, \"entries\": []}",
                         "{\"format\": \"kiln-timing-cache\", \"version\": 99, \"entries\": []}", "\x01\x02garbage",
                         /* version 1: keys without the thread count, dropped as a whole */
                         ("{\"format\": \"kiln-timing-cache\", \"version\": 1, \"entries\": [{\"key\": \"Conv|17||"
                          "float32[1]|isa=3\", \"tactic\": \"conv_im2col_gemm\", \"ms\": 0.5}]}")};
    const char *why[] = {"malformed", "not a kiln timing cache", "another timing-cache format version", "not valid JSON",
                         "older kiln (format version 1, whose keys lack the CPU thread count"};
    for (int i = 0; i < 5; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        build_timing_cache_init(&c);
        sb_reset(&w);
        assert_false(build_timing_cache_load(&c, path, &w));
        assert_non_null(strstr(sb_cstr(&w), why[i]));
        assert_int_equal(c.n, 0);
        build_timing_cache_free(&c);
    }
    /* a missing file is an empty cache, no warning */
    remove(path);
    build_timing_cache_init(&c);
    sb_reset(&w);
    assert_true(build_timing_cache_load(&c, path, &w));
    assert_int_equal(w.len, 0);
    build_timing_cache_free(&c);
    sb_free(&w);
}

/* The cache key carries the timing thread count: a time taken at 1 thread must not be
 * reused for a 2-thread build (issue 4), and 0 means the online CPU count. */
static void test_timing_cache_key_threads(void **state) {
    (void)state;
    conv_case c;
    make_conv(&c, 16, 32, 3, 1, 1);
    uint64_t f = CPU_FEATURE_AVX2 | CPU_FEATURE_FMA;
    char *k1 = build_tactic_key_threads(&c.q, f, 1), *k2 = build_tactic_key_threads(&c.q, f, 2);
    char *k0 = build_tactic_key_threads(&c.q, f, 0), *base = build_tactic_key(&c.q, f);
    assert_non_null(k1);
    assert_non_null(k2);
    assert_non_null(k0);
    assert_non_null(base);
    assert_string_not_equal(k1, k2);
    /* the thread count is appended to the old signature, nothing else changes */
    assert_int_equal(strncmp(k1, base, strlen(base)), 0);
    assert_string_equal(k1 + strlen(base), "|threads=1");
    assert_string_equal(k2 + strlen(base), "|threads=2");
    char want0[32];
    snprintf(want0, sizeof want0, "|threads=%d", build_tactic_threads_resolve(0));
    assert_true(build_tactic_threads_resolve(0) >= 1);
    assert_string_equal(k0 + strlen(base), want0);
    /* through the cache and its file: the 1-thread time is not found under 2 threads */
    char path[] = "/tmp/kiln_tck_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    build_timing_cache tc;
    build_timing_cache_init(&tc);
    assert_true(build_timing_cache_put(&tc, k1, "conv_winograd_f43", 0.75));
    kiln_error err = {0};
    assert_int_equal(build_timing_cache_save(&tc, path, &err), KILN_OK);
    build_timing_cache_free(&tc);
    build_timing_cache_init(&tc);
    strbuf w;
    sb_init(&w);
    assert_true(build_timing_cache_load(&tc, path, &w));
    double ms = 0;
    assert_true(build_timing_cache_get(&tc, k1, "conv_winograd_f43", &ms));
    assert_true(ms == 0.75);
    assert_false(build_timing_cache_get(&tc, k2, "conv_winograd_f43", &ms));
    build_timing_cache_free(&tc);
    sb_free(&w);
    remove(path);
    free(k0);
    free(k1);
    free(k2);
    free(base);
    ir_model_free(c.m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timing_cache_key_threads),
        cmocka_unit_test(test_conv_candidates_and_scratch),
        cmocka_unit_test(test_conv_c16_candidates),
        cmocka_unit_test(test_timing_picks_faster_variant),
        cmocka_unit_test(test_timing_alternates_through_a_slow_spell),
        cmocka_unit_test(test_timing_cache_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
