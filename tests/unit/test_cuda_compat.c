/* test_cuda_compat.c - GPU engine compatibility checks with fabricated device info, in
 * every build (CPU-only and ASan included): an engine's recorded GPU/library versions
 * (src/engine/engine_gpu_info.c) round-trip through its META strings, and loading on
 * another architecture or major library version is refused with a message naming what
 * differs, both values and "rebuild"; minor differences are accepted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_info.h"

static cuda_device_info h200(void) {
    cuda_device_info a;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "NVIDIA H200");
    a.cc_major = 9, a.cc_minor = 0, a.runtime_version = 13000, a.driver_version = 13010;
    a.cublas_version = 130001, a.cudnn_version = 91300;
    return a;
}

static void test_meta_round_trip(void **state) {
    (void)state;
    cuda_device_info a = h200(), b;
    cuda_info_meta m;
    cuda_info_to_meta(&a, &m);
    assert_string_equal(m.gpu_arch, "sm_90 NVIDIA H200");
    kiln_error e = {0};
    assert_int_equal(cuda_info_from_meta(m.gpu_arch, m.cuda_version, m.cublas_version, m.cudnn_version, &b, &e),
                     KILN_OK);
    assert_string_equal(b.name, a.name);
    assert_int_equal(b.cc_major, 9);
    assert_int_equal(b.cc_minor, 0);
    assert_int_equal(b.runtime_version, 13000);
    assert_int_equal(b.driver_version, 13010);
    assert_int_equal(b.cublas_version, 130001);
    assert_int_equal(b.cudnn_version, 91300);
    assert_int_equal(cuda_info_compat(&b, &a, &e), KILN_OK);
}

static void test_meta_bad_strings(void **state) {
    (void)state;
    cuda_device_info b;
    kiln_error e = {0};
    /* a CPU engine records no GPU */
    assert_int_equal(cuda_info_from_meta("", "", "", "", &b, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "cpu backend"));
    kiln_err_clear(&e);
    assert_int_equal(cuda_info_from_meta("gfx90a", "13000 13000", "1", "1", &b, &e), KILN_ERR_FORMAT);
    assert_non_null(strstr(kiln_err_msg(&e), "gfx90a"));
    kiln_err_clear(&e);
    assert_int_equal(cuda_info_from_meta("sm_90 X", "13000", "1", "1", &b, &e), KILN_ERR_FORMAT);
    kiln_err_clear(&e);
    assert_int_equal(cuda_info_from_meta("sm_90 X", "13000 13000", "x", "1", &b, &e), KILN_ERR_FORMAT);
    kiln_err_clear(&e);
}

static void test_compat_mismatches(void **state) {
    (void)state;
    cuda_device_info built = h200(), here = h200();
    kiln_error e = {0};
    /* minor/patch versions and the driver may differ */
    here.cublas_version = 130205, here.cudnn_version = 91401, here.driver_version = 13020, here.runtime_version = 13020;
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_OK);

    here = h200();
    snprintf(here.name, sizeof here.name, "NVIDIA A100-SXM4-80GB");
    here.cc_major = 8;
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "sm_90"));
    assert_non_null(strstr(kiln_err_msg(&e), "sm_80"));
    assert_non_null(strstr(kiln_err_msg(&e), "A100"));
    assert_non_null(strstr(kiln_err_msg(&e), "rebuild"));
    kiln_err_clear(&e);

    here = h200();
    here.cc_minor = 9; /* same major, other minor architecture: still another target */
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_ERR_UNSUPPORTED);
    kiln_err_clear(&e);

    here = h200();
    here.runtime_version = 12080;
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "CUDA runtime 13.0"));
    assert_non_null(strstr(kiln_err_msg(&e), "12.8"));
    kiln_err_clear(&e);

    here = h200();
    here.cublas_version = 120903;
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "cuBLAS 13.0.1"));
    assert_non_null(strstr(kiln_err_msg(&e), "12.9.3"));
    kiln_err_clear(&e);

    here = h200();
    here.cudnn_version = 0; /* this kiln has no cuDNN */
    assert_int_equal(cuda_info_compat(&built, &here, &e), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_err_msg(&e), "cuDNN 9.13.0"));
    assert_non_null(strstr(kiln_err_msg(&e), "none"));
    kiln_err_clear(&e);
}

static void test_describe(void **state) {
    (void)state;
    cuda_device_info a = h200();
    a.sm_count = 132;
    char buf[512];
    cuda_info_describe(&a, buf, sizeof buf);
    assert_non_null(strstr(buf, "NVIDIA H200 (sm_90, 132 SMs"));
    assert_non_null(strstr(buf, "CUDA runtime 13.0"));
    assert_non_null(strstr(buf, "cuDNN 9.13.0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta_round_trip), cmocka_unit_test(test_meta_bad_strings),
        cmocka_unit_test(test_compat_mismatches), cmocka_unit_test(test_describe)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
