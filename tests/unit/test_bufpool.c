/* test_bufpool.c - the executor's intermediate-buffer pool (runtime/bufpool.c) and the
 * rt_tensor_alloc hook it is reached through: only targeted tensors take pooled memory,
 * live pooled buffers never overlap (each is poisoned and checked after the others are
 * written), released buffers are recycled for the same size, trimming frees only the
 * buffers that are not handed out, and a pool freed with buffers still out (graph
 * outputs the caller holds) lives until the last of them comes back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "runtime/bufpool.h"
#include "runtime/tensor.h"

/* A buffer of n bytes from the pool, which must have one. */
static uint8_t *take(rt_bufpool *pool, uint64_t n) {
    uint8_t *b = rt_bufpool_get(pool, n);
    assert_non_null(b);
    return b;
}

static void test_hook_targets_only(void **state) {
    (void)state;
    rt_bufpool *pool = rt_bufpool_create();
    assert_non_null(pool);
    rt_tensor a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    rt_tensor *targets[1] = {&a};
    rt_alloc_hook hook = {rt_bufpool_get, rt_bufpool_put, pool, targets, 1, NULL};
    rt_tensor_set_alloc_hook(&hook);
    kiln_error err = {0};
    int64_t dims[2] = {3, 5};
    assert_int_equal(rt_tensor_alloc(&a, KILN_DTYPE_FLOAT, 2, dims, &err), KILN_OK);
    assert_int_equal(rt_tensor_alloc(&b, KILN_DTYPE_FLOAT, 2, dims, &err), KILN_OK);
    rt_tensor_set_alloc_hook(NULL);
    assert_ptr_equal(a.free_fn, rt_bufpool_put); /* pooled */
    assert_null(b.free_fn);                      /* not a target: heap */
    assert_int_equal((uintptr_t)a.data % 64, 0);
    rt_bufpool_stats s = rt_bufpool_get_stats(pool);
    assert_int_equal(s.misses, 1);
    void *first = a.data;
    rt_tensor_release(&a);
    rt_tensor_release(&b);
    s = rt_bufpool_get_stats(pool);
    assert_true(s.bytes_free >= 15 * sizeof(float));
    /* same size again: recycled, no new allocation */
    rt_tensor_set_alloc_hook(&hook);
    assert_int_equal(rt_tensor_alloc(&a, KILN_DTYPE_FLOAT, 2, dims, &err), KILN_OK);
    rt_tensor_set_alloc_hook(NULL);
    assert_ptr_equal(a.data, first);
    s = rt_bufpool_get_stats(pool);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 1);
    rt_tensor_release(&a);
    rt_bufpool_free(pool);
}

/* Many live buffers of mixed sizes, allocated and released in an interleaved order like
 * a graph's intermediates: each is filled with its own byte pattern and re-checked after
 * every other allocation, so any overlap between live buffers shows up. */
static void test_live_buffers_never_overlap(void **state) {
    (void)state;
    rt_bufpool *pool = rt_bufpool_create();
    enum { N = 40 };
    uint8_t *buf[N] = {0};
    uint64_t size[N] = {0};
    uint32_t rng = 7;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            rng = rng * 1103515245u + 12345u;
            size[i] = 1 + (rng >> 16) % 5000 + (uint64_t)(i % 4) * 100000;
            buf[i] = take(pool, size[i]);
            memset(buf[i], i + 1, size[i]);
            if (i >= 3 && (i % 3) == 0) { /* release an older one: lifetimes overlap partially */
                int r = i - 3;
                for (uint64_t k = 0; k < size[r]; k++) assert_int_equal(buf[r][k], r + 1);
                rt_bufpool_put(pool, buf[r]);
                buf[r] = NULL;
            }
            for (int j = 0; j <= i; j++)
                if (buf[j])
                    for (uint64_t k = 0; k < size[j]; k += 97) assert_int_equal(buf[j][k], j + 1);
        }
        for (int i = 0; i < N; i++)
            if (buf[i]) {
                rt_bufpool_put(pool, buf[i]);
                buf[i] = NULL;
            }
    }
    rt_bufpool_stats s = rt_bufpool_get_stats(pool);
    assert_true(s.hits > 0);
    assert_int_equal(s.bytes_free, s.bytes_owned); /* everything returned */
    rt_bufpool_free(pool);
}

/* rt_bufpool_trim (called when the activation arena takes over): the free buffers go back
 * to the system, a buffer still in use stays valid and can be returned afterwards, and a
 * later request of a trimmed size is a fresh allocation. */
static void test_trim_frees_only_free_buffers(void **state) {
    (void)state;
    rt_bufpool *pool = rt_bufpool_create();
    assert_non_null(pool);
    uint8_t *a = take(pool, 4096), *b = take(pool, 1000), *held = take(pool, 300);
    memset(held, 0x5a, 300);
    rt_bufpool_put(pool, a);
    rt_bufpool_put(pool, b);
    rt_bufpool_stats s = rt_bufpool_get_stats(pool);
    assert_true(s.bytes_free >= 5096);
    rt_bufpool_trim(pool);
    s = rt_bufpool_get_stats(pool);
    assert_int_equal(s.bytes_free, 0);
    assert_true(s.bytes_owned >= 300 && s.bytes_owned < 1000); /* only the held buffer */
    for (int k = 0; k < 300; k++) assert_int_equal(held[k], 0x5a);
    uint64_t misses = s.misses;
    uint8_t *again = take(pool, 4096);
    s = rt_bufpool_get_stats(pool);
    assert_int_equal(s.misses, misses + 1); /* nothing left to recycle */
    rt_bufpool_put(pool, again);
    rt_bufpool_put(pool, held);
    s = rt_bufpool_get_stats(pool);
    assert_int_equal(s.bytes_free, s.bytes_owned);
    rt_bufpool_trim(NULL); /* no pool (KILN_NO_BUFPOOL): nothing to do */
    rt_bufpool_free(pool);
}

/* rt_bufpool_free while buffers are out: they stay valid and writable, each put frees
 * its buffer (the pool keeps nothing any more), and the last put frees the pool (ASan in
 * CI reports a leak or a use after free otherwise). */
static void test_free_with_buffers_out(void **state) {
    (void)state;
    rt_bufpool *pool = rt_bufpool_create();
    assert_non_null(pool);
    uint8_t *a = take(pool, 5000), *b = take(pool, 70), *c = take(pool, 64);
    memset(a, 1, 5000);
    memset(b, 2, 70);
    rt_bufpool_put(pool, c); /* in the free list: freed with the pool's list */
    rt_bufpool_free(pool);
    for (int k = 0; k < 5000; k++) assert_int_equal(a[k], 1);
    memset(a, 3, 5000);
    rt_bufpool_put(pool, a);
    for (int k = 0; k < 70; k++) assert_int_equal(b[k], 2);
    rt_bufpool_put(pool, b); /* the last one: the pool goes too */
    /* nothing out: freeing is immediate, as before */
    rt_bufpool *p2 = rt_bufpool_create();
    rt_bufpool_put(p2, take(p2, 100));
    rt_bufpool_free(p2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_targets_only),
        cmocka_unit_test(test_live_buffers_never_overlap),
        cmocka_unit_test(test_trim_frees_only_free_buffers),
        cmocka_unit_test(test_free_with_buffers_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
