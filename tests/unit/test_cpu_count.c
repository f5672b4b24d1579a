/* test_cpu_count.c - the usable-CPU count behind every default thread count
 * (core/cpu_count.c): the affinity mask wins over the machine's CPU count, a cgroup CPU
 * quota (v2 cpu.max, v1 cfs quota/period) caps it rounded up, "max" and -1 mean no quota,
 * text that does not parse is ignored, and the live value agrees with this process's
 * affinity mask.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/cpu_count.h"

static void test_affinity_over_online_count(void **state) {
    (void)state;
    assert_int_equal(kiln_usable_cpus_from(2, 16, NULL, NULL, NULL), 2);
    assert_int_equal(kiln_usable_cpus_from(0, 16, NULL, NULL, NULL), 16); /* mask unknown */
    assert_int_equal(kiln_usable_cpus_from(0, -1, NULL, NULL, NULL), 1);
}

static void test_cgroup_v2_quota(void **state) {
    (void)state;
    assert_int_equal(kiln_usable_cpus_from(16, 16, "200000 100000\n", NULL, NULL), 2);
    assert_int_equal(kiln_usable_cpus_from(16, 16, "150000 100000\n", NULL, NULL), 2); /* 1.5 CPUs: rounded up */
    assert_int_equal(kiln_usable_cpus_from(16, 16, "50000 100000\n", NULL, NULL), 1);
    assert_int_equal(kiln_usable_cpus_from(16, 16, "max 100000\n", NULL, NULL), 16);
    assert_int_equal(kiln_usable_cpus_from(4, 16, "800000 100000\n", NULL, NULL), 4); /* the mask is smaller */
    assert_int_equal(kiln_usable_cpus_from(16, 16, "garbage", NULL, NULL), 16);
    assert_int_equal(kiln_usable_cpus_from(16, 16, "-5 100000", NULL, NULL), 16);
}

static void test_cgroup_v1_quota(void **state) {
    (void)state;
    assert_int_equal(kiln_usable_cpus_from(8, 8, NULL, "300000\n", "100000\n"), 3);
    assert_int_equal(kiln_usable_cpus_from(8, 8, NULL, "-1\n", "100000\n"), 8);
    assert_int_equal(kiln_usable_cpus_from(8, 8, NULL, "300000\n", "0\n"), 8);
    assert_int_equal(kiln_usable_cpus_from(8, 8, NULL, "300000\n", NULL), 8); /* half of the pair: ignored */
}

static void test_live_value_within_affinity(void **state) {
    (void)state;
    int n = kiln_usable_cpus();
    assert_true(n >= 1);
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) assert_true(n <= CPU_COUNT(&set));
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) assert_true(n <= online);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_affinity_over_online_count),
        cmocka_unit_test(test_cgroup_v2_quota),
        cmocka_unit_test(test_cgroup_v1_quota),
        cmocka_unit_test(test_live_value_within_affinity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
