/* test_bigalloc.c - kiln_alloc_aligned (src/core/bigalloc.c): alignment, usable memory,
 * and that the whole 2 MiB pages of large blocks carry the huge-page advice the runtime
 * relies on for its arena and packed weights. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/bigalloc.h"

static void test_small_blocks_are_64_byte_aligned(void **state) {
    (void)state;
    size_t sizes[] = {0, 1, 63, 64, 65, 4096, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = kiln_alloc_aligned(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, sizes[i] ? sizes[i] : 1);
        assert_int_equal(p[sizes[i] ? sizes[i] - 1 : 0], 0xab);
        free(p);
    }
}

static void test_large_blocks_are_usable_and_page_aligned(void **state) {
    (void)state;
    size_t n = (5u << 20) + 100; /* two whole 2 MiB pages and a tail */
    unsigned char *p = kiln_alloc_aligned(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    if (kiln_bigalloc_huge_enabled()) assert_int_equal((uintptr_t)p % KILN_BIGALLOC_HUGE_MIN, 0);
    for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)i;
    p[n - 1] = 7;
    for (size_t i = 0; i < n; i += 4096) assert_int_equal(p[i], (unsigned char)i);
    assert_int_equal(p[n - 1], 7);
    free(p);
}

static void test_overflowing_size_is_refused(void **state) {
    (void)state;
    assert_null(kiln_alloc_aligned(SIZE_MAX - 10));
}

/* The mapping that holds a large block is marked for huge pages: /proc/self/smaps lists
 * "hg" in VmFlags for MADV_HUGEPAGE ranges. */
static void test_large_block_has_huge_page_advice(void **state) {
    (void)state;
    if (!kiln_bigalloc_huge_enabled()) {
        printf("skipped: huge-page advice is off in this process (KILN_HUGEPAGES=0 or not Linux)\n");
        return;
    }
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) {
        printf("skipped: /proc/self/smaps is not readable here\n");
        return;
    }
    size_t n = 4u << 20;
    unsigned char *p = kiln_alloc_aligned(n);
    assert_non_null(p);
    memset(p, 1, n);
    char line[512];
    bool in_block = false, advised = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in_block = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in_block && !strncmp(line, "VmFlags:", 8) && strstr(line, " hg")) advised = true;
    }
    fclose(f);
    free(p);
    assert_true(advised);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_blocks_are_64_byte_aligned),
        cmocka_unit_test(test_large_blocks_are_usable_and_page_aligned),
        cmocka_unit_test(test_overflowing_size_is_refused),
        cmocka_unit_test(test_large_block_has_huge_page_advice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
