/* test_cuda_conv_graph.c - the host-side logic of the cuDNN graph-API convolution path
 * (src/backends/cuda/cuda_conv_graph_host.c) without a GPU: tensor strides for NCHW and
 * channels-last, which epilogues fuse, eligibility, signatures, and the tactic-cache
 * round trip of a chosen engine config (position + engine global index check). Also,
 * in every build, when a --fp16 session goes channels-last (build_layout_nhwc_wanted).
 * The cuDNN calls themselves need a GPU: tests/gpu/conv_graph_check.sh runs them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "build/passes/passes.h"

static void test_nhwc_default(void **state) {
    (void)state;
    /* unset: on for kiln run / verify sessions (graph passes), off for engine builds/loads */
    assert_true(build_layout_nhwc_wanted(NULL, true));
    assert_false(build_layout_nhwc_wanted(NULL, false));
    /* KILN_NHWC=0 turns it off everywhere, any other value on everywhere */
    assert_false(build_layout_nhwc_wanted("0", true));
    assert_true(build_layout_nhwc_wanted("1", false));
    assert_true(build_layout_nhwc_wanted("yes", true));
}

#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_conv_graph.h"
#include "backends/cuda/cuda_internal.h"

static void test_strides(void **state) {
    (void)state;
    int64_t d[4] = {2, 64, 56, 48}, s[4];
    cuda_cg_strides(false, d, s);
    int64_t nchw[4] = {64 * 56 * 48, 56 * 48, 48, 1};
    assert_memory_equal(s, nchw, sizeof s);
    /* channels-last: element (n, c, h, w) at ((n * H + h) * W + w) * C + c */
    cuda_cg_strides(true, d, s);
    int64_t nhwc[4] = {56 * 48 * 64, 1, 48 * 64, 64};
    assert_memory_equal(s, nhwc, sizeof s);
    /* OHWI weights [O=32, C/g=16, KH=3, KW=3] */
    int64_t w[4] = {32, 16, 3, 3};
    cuda_cg_strides(true, w, s);
    int64_t ohwi[4] = {3 * 3 * 16, 1, 3 * 16, 16};
    assert_memory_equal(s, ohwi, sizeof s);
    /* the bias [1, O, 1, 1] is contiguous either way */
    int64_t b[4] = {1, 32, 1, 1};
    cuda_cg_strides(true, b, s);
    assert_int_equal(s[1], 1);
    cuda_cg_strides(false, b, s);
    assert_int_equal(s[1], 1);
}

static cuda_cg_conv conv3x3(void) {
    cuda_cg_conv cv = {.n = 1, .c = 64, .h = 56, .w = 56, .o = 64, .ci = 64, .kh = 3, .kw = 3, .oh = 56, .ow = 56,
                       .sh = 1, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .group = 1, .nhwc = true, .half = true,
                       .bias = true, .res = false, .act = CU_RELU};
    return cv;
}

static void test_fusion_and_eligibility(void **state) {
    (void)state;
    char why[160];
    cuda_cg_conv cv = conv3x3();
    assert_true(cuda_cg_epilogue_fusable(&cv, why, sizeof why));
    cv.act = -1;
    assert_true(cuda_cg_epilogue_fusable(&cv, why, sizeof why));
    cv.act = CU_CLIP, cv.fa = 0.f, cv.fb = 6.f; /* ReLU6 */
    assert_true(cuda_cg_epilogue_fusable(&cv, why, sizeof why));
    cv.fa = -1.f; /* a general Clip is no clipped ReLU */
    assert_false(cuda_cg_epilogue_fusable(&cv, why, sizeof why));
    assert_non_null(strstr(why, "does not fuse"));
    cv.act = CU_SIGMOID;
    assert_false(cuda_cg_epilogue_fusable(&cv, why, sizeof why));

    cv = conv3x3();
    assert_true(cuda_cg_eligible(&cv, why, sizeof why));
    assert_string_equal(why, "");
    cv.ci = 3, cv.c = 3; /* an image stem: still tried, the reason says why fusion may not apply */
    assert_true(cuda_cg_eligible(&cv, why, sizeof why));
    assert_non_null(strstr(why, "multiples of 8"));
    cv = conv3x3();
    cv.half = false;
    assert_false(cuda_cg_eligible(&cv, why, sizeof why));
    assert_non_null(strstr(why, "legacy"));
    cv = conv3x3();
    cv.n = 0;
    assert_false(cuda_cg_eligible(&cv, why, sizeof why));
    cv = conv3x3();
    cv.n = 1 << 20; /* 2^20 * 64 * 56 * 56 elements: beyond int32 */
    assert_false(cuda_cg_eligible(&cv, why, sizeof why));
    cv = conv3x3();
    cv.dh = 0;
    assert_false(cuda_cg_eligible(&cv, why, sizeof why));
}

static void test_signature(void **state) {
    (void)state;
    cuda_cg_conv a = conv3x3(), b = conv3x3();
    char sa[256], sb[256];
    cuda_cg_signature(&a, CUDA_CG_FUSED, 1u << 28, sa, sizeof sa);
    cuda_cg_signature(&b, CUDA_CG_FUSED, 1u << 28, sb, sizeof sb);
    assert_string_equal(sa, sb);
    assert_non_null(strstr(sa, "x1x64x56x56 w64x64x3x3 s1x1 p1x1 d1x1 g1 nhwc f16"));
    /* everything a plan depends on changes the signature */
    b.nhwc = false;
    cuda_cg_signature(&b, CUDA_CG_FUSED, 1u << 28, sb, sizeof sb);
    assert_string_not_equal(sa, sb);
    b = conv3x3();
    b.res = true;
    cuda_cg_signature(&b, CUDA_CG_FUSED, 1u << 28, sb, sizeof sb);
    assert_string_not_equal(sa, sb);
    cuda_cg_signature(&a, CUDA_CG_CONV_ONLY, 1u << 28, sb, sizeof sb);
    assert_string_not_equal(sa, sb);
    cuda_cg_signature(&a, CUDA_CG_FUSED, 1u << 20, sb, sizeof sb);
    assert_string_not_equal(sa, sb);
    /* the conv-only form does not depend on the epilogue */
    b = conv3x3();
    b.act = -1, b.bias = false;
    cuda_cg_signature(&a, CUDA_CG_CONV_ONLY, 1u << 28, sa, sizeof sa);
    cuda_cg_signature(&b, CUDA_CG_CONV_ONLY, 1u << 28, sb, sizeof sb);
    assert_string_equal(sa, sb);
}

typedef struct fake_store {
    char sig[16][CUDA_TACTIC_SIG];
    char tactic[16][32];
    double ms[16];
    int n;
} fake_store;

static bool st_get(void *user, const ir_node *node, const char *sig, const char *tactic, double *ms) {
    (void)node;
    fake_store *s = user;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->sig[i], sig) && !strcmp(s->tactic[i], tactic)) return *ms = s->ms[i], true;
    return false;
}

static void st_put(void *user, const ir_node *node, const char *sig, const char *tactic, double ms) {
    (void)node;
    fake_store *s = user;
    if (s->n == 16) return;
    snprintf(s->sig[s->n], sizeof s->sig[0], "%s", sig);
    snprintf(s->tactic[s->n], sizeof s->tactic[0], "%s", tactic);
    s->ms[s->n++] = ms;
}

/* a heuristic list: the engine global index at each position */
typedef struct fake_list {
    int64_t gidx[4];
    int n;
} fake_list;

static int64_t list_at(void *user, int pos) {
    fake_list *l = user;
    return pos >= 0 && pos < l->n ? l->gidx[pos] : -1;
}

static void test_tactic_round_trip(void **state) {
    (void)state;
    cuda_ctx c;
    memset(&c, 0, sizeof c);
    c.info.cc_major = 9, c.fp16 = true;
    ir_node node;
    memset(&node, 0, sizeof node);
    fake_store st;
    memset(&st, 0, sizeof st);
    rt_tactic_cache tc = {st_get, st_put, &st};
    fake_list list = {{11, 39, 7, 10}, 4};
    /* no cache at all: nothing */
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 48, list_at, &list), -1);
    c.tactics = &tc;
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 48, list_at, &list), -1);
    /* timings of positions 0, 2, 3: the fastest (2, engine 7) is re-created */
    cuda_cg_record(&c, &node, "s", 0, 11, 0.020);
    cuda_cg_record(&c, &node, "s", 2, 7, 0.007);
    cuda_cg_record(&c, &node, "s", 3, 10, 0.009);
    assert_string_equal(st.tactic[0], "cg#0");
    assert_string_equal(st.tactic[1], "cg0e#11");
    assert_string_equal(st.tactic[3], "cg2e#7");
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 48, list_at, &list), 2);
    /* another signature misses */
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "t", 48, list_at, &list), -1);
    /* the heuristic list changed (another engine at position 2): time again, never
     * run a config that was not the one timed */
    list.gidx[2] = 12;
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 48, list_at, &list), -1);
    /* a shorter list (the position is gone) also misses */
    list.gidx[2] = 7, list.n = 2;
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 48, list_at, &list), -1);
    /* positions beyond n_pos are not looked at */
    list.n = 4;
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 2, list_at, &list), 0);
}

/* Fake cuDNN calls for cuda_cg_lists: a config is a pointer into gidx tables; a negative
 * global index stands for a config whose engine is not usable (numerical notes). */
typedef struct fake_heur {
    int64_t a[CUDA_CG_HEUR_MAX], fb[CUDA_CG_HEUR_MAX];
    int na, nfb;
} fake_heur;

static int fh_query(void *user, int l, void **cfgs, int max) {
    fake_heur *h = user;
    int n = l ? h->nfb : h->na;
    for (int i = 0; i < n && i < max; i++) cfgs[i] = l ? &h->fb[i] : &h->a[i];
    return n;
}

static bool fh_engine(void *cfg, int64_t *gidx) {
    *gidx = *(const int64_t *)cfg;
    return *gidx >= 0;
}

static cuda_cg_lists fake_lists(fake_heur *h) {
    cuda_cg_lists L;
    memset(&L, 0, sizeof L);
    L.query = fh_query;
    L.engine = fh_engine;
    L.user = h;
    return L;
}

/* The lazy heuristic lists (positions list * 24 + index): a recorded mode-A choice is
 * re-created without ever querying the fallback list, a recorded fallback position
 * queries it (once) and still names the same config, positions outside the lists or of
 * unusable engines give -1, and each list is queried at most once. */
static void test_lazy_lists(void **state) {
    (void)state;
    fake_heur h;
    memset(&h, 0, sizeof h);
    h.na = 3, h.a[0] = 11, h.a[1] = -1, h.a[2] = 7;
    h.nfb = 2, h.fb[0] = 40, h.fb[1] = 41;
    cuda_ctx c;
    memset(&c, 0, sizeof c);
    c.info.cc_major = 9, c.fp16 = true;
    ir_node node;
    memset(&node, 0, sizeof node);
    fake_store st;
    memset(&st, 0, sizeof st);
    rt_tactic_cache tc = {st_get, st_put, &st};
    c.tactics = &tc;

    /* a build timed mode A positions 0 and 2: 2 (engine 7) was fastest */
    cuda_cg_record(&c, &node, "s", 0, 11, 0.020);
    cuda_cg_record(&c, &node, "s", 2, 7, 0.010);
    cuda_cg_lists L = fake_lists(&h);
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "s", 2 * CUDA_CG_HEUR_MAX, cuda_cg_lists_engine_at, &L), 2);
    assert_int_equal(L.queries[0], 1);
    assert_int_equal(L.queries[1], 0); /* the fallback list was never asked for */
    assert_true(L.cfgs[0][2] == &h.a[2]);
    assert_int_equal(cuda_cg_lists_engine_at(&L, 2), 7);
    assert_int_equal(L.queries[0], 1); /* asked once */

    /* a config chosen from the fallback list (mode A gave nothing usable) records
     * position 24 + index; re-creating it queries the fallback list and finds it there */
    memset(&st, 0, sizeof st);
    cuda_cg_record(&c, &node, "f", CUDA_CG_HEUR_MAX + 1, 41, 0.030);
    assert_string_equal(st.tactic[0], "cg#25");
    assert_string_equal(st.tactic[1], "cg25e#41");
    L = fake_lists(&h);
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "f", 2 * CUDA_CG_HEUR_MAX, cuda_cg_lists_engine_at, &L),
                     CUDA_CG_HEUR_MAX + 1);
    assert_int_equal(L.queries[0], 0);
    assert_int_equal(L.queries[1], 1);
    assert_true(L.cfgs[1][1] == &h.fb[1]);
    /* the fallback list changed (engine 41 no longer at index 1): time again */
    h.fb[1] = 42;
    L = fake_lists(&h);
    assert_int_equal(cuda_cg_cached_choice(&c, &node, "f", 2 * CUDA_CG_HEUR_MAX, cuda_cg_lists_engine_at, &L), -1);

    /* edges: an unusable engine, an index beyond the list, positions out of range */
    L = fake_lists(&h);
    assert_int_equal(cuda_cg_lists_engine_at(&L, 1), -1);
    assert_int_equal(cuda_cg_lists_engine_at(&L, 3), -1);
    assert_int_equal(cuda_cg_lists_engine_at(&L, -1), -1);
    assert_int_equal(cuda_cg_lists_engine_at(&L, 2 * CUDA_CG_HEUR_MAX), -1);
    assert_int_equal(cuda_cg_list_n(&L, 2), 0);
    assert_int_equal(L.queries[0], 1);
    assert_int_equal(L.queries[1], 0);
    /* a query that fails (a negative count) gives an empty list */
    h.na = -3;
    L = fake_lists(&h);
    assert_int_equal(cuda_cg_list_n(&L, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nhwc_default),     cmocka_unit_test(test_strides),
        cmocka_unit_test(test_fusion_and_eligibility), cmocka_unit_test(test_signature),
        cmocka_unit_test(test_tactic_round_trip), cmocka_unit_test(test_lazy_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_nhwc_default)};
    printf("test_cuda_conv_graph: the graph-API parameter tests are SKIPPED: kiln was built without CUDA "
           "(cuda_conv_graph_host.c is part of the CUDA backend)\n");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
