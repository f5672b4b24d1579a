/* test_cuda_tactics.c - the CUDA backend's tactic-cache logic (src/backends/cuda/
 * cuda_tactics.c) without a GPU: signatures name the GPU, library versions and precision;
 * the fastest recorded tactic is chosen; cuBLASLt-style lookups need every candidate
 * timed, cuDNN-style ones take the best of those recorded; without a cache nothing is
 * found. CUDA builds only (the file is host code, but it is compiled with the backend);
 * other builds print why they skip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_internal.h"

typedef struct fake_store {
    char sig[8][CUDA_TACTIC_SIG];
    char tactic[8][32];
    double ms[8];
    int n, gets, puts;
    const ir_node *last_node;
} fake_store;

static bool st_get(void *user, const ir_node *node, const char *sig, const char *tactic, double *ms) {
    fake_store *s = user;
    s->gets++;
    s->last_node = node;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->sig[i], sig) && !strcmp(s->tactic[i], tactic)) return *ms = s->ms[i], true;
    return false;
}

static void st_put(void *user, const ir_node *node, const char *sig, const char *tactic, double ms) {
    fake_store *s = user;
    s->puts++;
    s->last_node = node;
    if (s->n == 8) return;
    snprintf(s->sig[s->n], sizeof s->sig[0], "%s", sig);
    snprintf(s->tactic[s->n], sizeof s->tactic[0], "%s", tactic);
    s->ms[s->n++] = ms;
}

static cuda_ctx ctx_h200(void) {
    cuda_ctx c;
    memset(&c, 0, sizeof c);
    c.info.cc_major = 9, c.info.cc_minor = 0, c.info.cublas_version = 130100, c.info.cudnn_version = 91400;
    c.tf32 = true;
    return c;
}

static void test_signature(void **state) {
    (void)state;
    cuda_ctx c = ctx_h200();
    char sig[CUDA_TACTIC_SIG];
    cuda_tactic_sig(&c, sig, sizeof sig, "gemm m%d n%d", 1, 8);
    assert_string_equal(sig, "sm_90 lt130100 dnn91400 tf32|gemm m1 n8");
    c.tf32 = false;
    cuda_tactic_sig(&c, sig, sizeof sig, "x");
    assert_string_equal(sig, "sm_90 lt130100 dnn91400 fp32|x");
    c.fp16 = true;
    c.info.cc_minor = 9;
    cuda_tactic_sig(&c, sig, sizeof sig, "x");
    assert_string_equal(sig, "sm_99 lt130100 dnn91400 fp16|x");
}

static void test_best_and_put(void **state) {
    (void)state;
    cuda_ctx c = ctx_h200();
    ir_node node;
    memset(&node, 0, sizeof node);
    int best = -1;
    /* no cache: nothing is found, puts are dropped */
    assert_false(cuda_tactic_best(&c, &node, "s", "lt", 3, true, &best));
    cuda_tactic_put(&c, &node, "s", "lt", 0, 1.0);
    fake_store st;
    memset(&st, 0, sizeof st);
    rt_tactic_cache tc = {st_get, st_put, &st};
    c.tactics = &tc;
    cuda_tactic_put(&c, &node, "s", "lt", 0, 0.30);
    cuda_tactic_put(&c, &node, "s", "lt", 2, 0.10);
    assert_int_equal(st.puts, 2);
    assert_ptr_equal(st.last_node, &node);
    assert_string_equal(st.tactic[1], "lt#2");
    /* need_all: lt#1 was never timed, so the search must run */
    assert_false(cuda_tactic_best(&c, &node, "s", "lt", 3, true, &best));
    /* best of the recorded ones (cuDNN: only the algorithms that ran are recorded) */
    assert_true(cuda_tactic_best(&c, &node, "s", "lt", 3, false, &best));
    assert_int_equal(best, 2);
    cuda_tactic_put(&c, &node, "s", "lt", 1, 0.05);
    assert_true(cuda_tactic_best(&c, &node, "s", "lt", 3, true, &best));
    assert_int_equal(best, 1);
    /* another signature or prefix misses */
    assert_false(cuda_tactic_best(&c, &node, "t", "lt", 3, false, &best));
    assert_false(cuda_tactic_best(&c, &node, "s", "algo", 3, false, &best));
    assert_false(cuda_tactic_best(&c, &node, "s", "lt", 0, false, &best));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_best_and_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
    printf("test_cuda_tactics: SKIPPED: kiln was built without CUDA (cuda_tactics.c is part of the CUDA backend)\n");
    return 0;
}
#endif
