/* test_pinned_pool.c - the page-locked output pool (runtime/pinned_pool.c) with a fake
 * backend whose host_alloc/host_free count: buffers are recycled, at most `cap` are out,
 * tensors that outlive the executor's close still free their buffer exactly once, and
 * the pool itself goes with the last holder (ASan in CI catches a leak or double free). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "runtime/pinned_pool.h"
#include "runtime/tensor.h"

static int n_alloc, n_free;

static kiln_status fake_alloc(void *ctx, uint64_t bytes, void **ptr, kiln_error *err) {
    (void)ctx, (void)err;
    *ptr = malloc((size_t)bytes);
    n_alloc += *ptr != NULL;
    return *ptr ? KILN_OK : KILN_ERR_NOMEM;
}
static void fake_free(void *ctx, void *ptr) {
    assert_null(ctx); /* host_free must work without the backend context */
    n_free++;
    free(ptr);
}

static rt_backend fake_backend(void) {
    rt_backend be;
    memset(&be, 0, sizeof be);
    be.host_alloc = fake_alloc;
    be.host_free = fake_free;
    return be;
}

static void test_recycles_and_caps(void **state) {
    (void)state;
    n_alloc = n_free = 0;
    rt_backend be = fake_backend();
    rt_pinned_pool *p = rt_pinned_pool_new(&be, NULL, 64, 2);
    assert_non_null(p);
    void *a = rt_pinned_pool_take(p);
    rt_pinned_pool_give(p, a);
    void *b = rt_pinned_pool_take(p);
    assert_ptr_equal(a, b); /* steady state: the same buffer, no new allocation */
    assert_int_equal(n_alloc, 1);
    void *c = rt_pinned_pool_take(p);
    assert_non_null(c);
    assert_null(rt_pinned_pool_take(p)); /* cap 2 out: the caller falls back to the heap */
    rt_pinned_pool_give(p, b);
    rt_pinned_pool_give(p, c);
    rt_pinned_pool_close(p);
    assert_int_equal(n_alloc, 2);
    assert_int_equal(n_free, 2);
}

/* A tensor holding a buffer after the executor closed the pool frees it on release. */
static void test_tensor_outlives_close(void **state) {
    (void)state;
    n_alloc = n_free = 0;
    rt_backend be = fake_backend();
    rt_pinned_pool *p = rt_pinned_pool_new(&be, NULL, 16, 4);
    void *idle = rt_pinned_pool_take(p);
    rt_pinned_pool_give(p, idle);
    rt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KILN_DTYPE_FLOAT;
    t.rank = 1;
    t.dims[0] = 4;
    t.count = 4;
    t.nbytes = 16;
    t.data = rt_pinned_pool_take(p);
    t.free_fn = rt_pinned_pool_give;
    t.free_ctx = p;
    assert_non_null(t.data);
    rt_pinned_pool_close(p); /* idle buffers: none (the one is held); pool stays for t */
    assert_int_equal(n_free, 0);
    rt_tensor_release(&t);
    assert_int_equal(n_free, 1);
    assert_int_equal(n_alloc, 1);
}

static void test_no_page_locked_memory(void **state) {
    (void)state;
    rt_backend none;
    memset(&none, 0, sizeof none);
    assert_null(rt_pinned_pool_new(&none, NULL, 64, 2)); /* CPU backend: no pool */
    assert_null(rt_pinned_pool_take(NULL));
    rt_pinned_pool_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recycles_and_caps),
        cmocka_unit_test(test_tensor_outlives_close),
        cmocka_unit_test(test_no_page_locked_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
