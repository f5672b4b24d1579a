/* test_engine_gpu.c - cuda engines without a GPU (every build, ASan included): the builder
 * records the GPU it was given in the engine's header and META, the strings round-trip
 * through a write and a read, and loading checks them against the GPU here: another
 * architecture or major library version, no GPU at all, a kiln built without CUDA, and
 * unreadable GPU fields are each refused with a message naming what differs and the
 * command that rebuilds the engine. The device info is fabricated (as kiln exec fills it
 * from cuda_info_query on a real GPU).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/model_internal.h"
#include "backends/cuda/cuda_info.h"
#include "build/builder.h"
#include "engine/engine.h"
#include "kiln/kiln.h"
#include "runtime/session.h"

#define MODEL_PATH KILN_SOURCE_DIR "/examples/tiny_cnn.onnx"

static cuda_device_info h200(void) {
    cuda_device_info a;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "NVIDIA H200");
    a.cc_major = 9, a.cc_minor = 0, a.runtime_version = 13000, a.driver_version = 13010;
    a.cublas_version = 130001, a.cudnn_version = 91300;
    return a;
}

static ir_model *load_ir(void) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_file(MODEL_PATH, NULL, &m);
    if (st != KILN_OK) fail_msg("loading %s: %s", MODEL_PATH, kiln_model_errmsg(m));
    ir_model *ir = m->ir;
    m->ir = NULL;
    kiln_model_free(m);
    return ir;
}

/* Builds tiny_cnn for the given backend ("cuda" with the H200's strings, or gpu_arch "" to
 * see the builder refuse) and serializes it. */
static kiln_status build_bytes(const char *backend, bool with_gpu, uint32_t prec, uint8_t **bytes, size_t *size,
                               kiln_error *err) {
    cuda_device_info gi = h200();
    cuda_info_meta gm;
    cuda_info_to_meta(&gi, &gm);
    build_options o = build_options_default();
    o.backend = backend;
    o.precision_flags = prec;
    o.source_model = "tiny_cnn.onnx";
    if (with_gpu) {
        o.gpu_arch = gm.gpu_arch;
        o.cuda_version = gm.cuda_version;
        o.cublas_version = gm.cublas_version;
        o.cudnn_version = gm.cudnn_version;
    }
    diag_list dl;
    diag_list_init(&dl);
    engine_plan *plan = NULL;
    kiln_status st = build_engine(load_ir(), &o, &dl, &plan, NULL, err);
    diag_list_free(&dl);
    if (st != KILN_OK) return st;
    assert_int_equal(plan->header.backend, !strcmp(backend, "cuda") ? ENGINE_BACKEND_CUDA : ENGINE_BACKEND_CPU);
    st = engine_write_mem(plan, bytes, size, err);
    engine_plan_free(plan);
    return st;
}

static void test_build_records_gpu(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    kiln_error e = {0};
    assert_int_equal(build_bytes("cuda", true, ENGINE_PREC_FLAG_NO_TF32, &bytes, &size, &e), KILN_OK);
    /* metadata (what kiln inspect shows) round-trips in every build */
    engine_read_options mo = {.metadata_only = true, .skip_compat = true, .display_name = "g.engine"};
    engine_plan *p = NULL;
    assert_int_equal(engine_read_mem(bytes, size, &mo, &p, &e), KILN_OK);
    assert_int_equal(p->header.backend, ENGINE_BACKEND_CUDA);
    assert_string_equal(p->meta.backend_name, "cuda");
    assert_string_equal(p->meta.gpu_arch, "sm_90 NVIDIA H200");
    assert_string_equal(p->meta.cuda_version, "13000 13010");
    assert_string_equal(p->meta.cublas_version, "130001");
    assert_string_equal(p->meta.cudnn_version, "91300");
    assert_true(p->meta.precision_flags & ENGINE_PREC_FLAG_NO_TF32);
    cuda_device_info back;
    assert_int_equal(cuda_info_from_meta(p->meta.gpu_arch, p->meta.cuda_version, p->meta.cublas_version,
                                         p->meta.cudnn_version, &back, &e),
                     KILN_OK);
    assert_int_equal(back.cc_major, 9);
    assert_int_equal(back.cudnn_version, 91300);
    engine_plan_free(p);

    /* a full load on the same GPU */
    cuda_device_info here = h200();
    here.driver_version = 13020; /* a newer driver is fine */
    engine_read_options ro = {.display_name = "g.engine", .gpu = &here};
    kiln_status st = engine_read_mem(bytes, size, &ro, &p, &e);
#if KILN_HAVE_CUDA
    if (st != KILN_OK) fail_msg("%s", kiln_err_msg(&e));
    assert_int_equal(st, KILN_OK);
    engine_plan_free(p);
#else
    /* a kiln without CUDA names the backend and the CPU alternative */
    assert_int_equal(st, KILN_ERR_INCOMPATIBLE);
    assert_non_null(strstr(kiln_err_msg(&e), "built for the cuda backend, which this kiln"));
    assert_non_null(strstr(kiln_err_msg(&e), "--backend=cpu --saveEngine=g.engine"));
    kiln_err_clear(&e);
#endif
    free(bytes);
}

static void expect_refused(const uint8_t *bytes, size_t size, const cuda_device_info *gpu, const char *missing,
                           const char *const *needles) {
    engine_read_options ro = {.display_name = "g.engine", .gpu = gpu, .gpu_missing = missing};
    engine_plan *p = NULL;
    kiln_error e = {0};
    kiln_status st = engine_read_mem(bytes, size, &ro, &p, &e);
    assert_int_equal(st, KILN_ERR_INCOMPATIBLE);
    assert_null(p);
    const char *msg = kiln_err_msg(&e);
#if KILN_HAVE_CUDA
    for (int i = 0; needles[i]; i++)
        if (!strstr(msg, needles[i])) fail_msg("'%s' not in: %s", needles[i], msg);
#else
    (void)needles;
    assert_non_null(strstr(msg, "which this kiln"));
#endif
    kiln_err_clear(&e);
}

static void test_load_checks_gpu(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    kiln_error e = {0};
    assert_int_equal(build_bytes("cuda", true, ENGINE_PREC_FLAG_FP16, &bytes, &size, &e), KILN_OK);
    cuda_device_info a100 = h200();
    snprintf(a100.name, sizeof a100.name, "NVIDIA A100");
    a100.cc_major = 8;
    const char *arch[] = {"engine 'g.engine' cannot run on this GPU", "sm_90 (NVIDIA H200)", "sm_80 (NVIDIA A100)",
                          "rebuild the engine here with: kiln exec --onnx=tiny_cnn.onnx --backend=cuda "
                          "--saveEngine=g.engine --fp16",
                          NULL};
    expect_refused(bytes, size, &a100, NULL, arch);
    cuda_device_info old = h200();
    old.cudnn_version = 80907;
    const char *dnn[] = {"cuDNN 9.13.0", "cuDNN 8.9.7", "--backend=cuda --saveEngine=g.engine", NULL};
    expect_refused(bytes, size, &old, NULL, dnn);
    const char *none[] = {"was built for the cuda backend on sm_90 NVIDIA H200, but this machine has no usable "
                          "NVIDIA GPU (no driver)",
                          "--backend=cpu --saveEngine=g.engine", NULL};
    expect_refused(bytes, size, NULL, "this machine has no usable NVIDIA GPU (no driver)", none);
    free(bytes);
}

/* The header says cuda but the GPU fields are garbage: a format error, not a crash. */
static void test_bad_gpu_fields(void **state) {
    (void)state;
    engine_plan *plan = NULL;
    kiln_error e = {0};
    build_options o = build_options_default();
    o.backend = "cuda";
    o.gpu_arch = "gpu-9000";
    o.cuda_version = "x";
    o.cublas_version = "1";
    o.cudnn_version = "1";
    diag_list dl;
    diag_list_init(&dl);
    assert_int_equal(build_engine(load_ir(), &o, &dl, &plan, NULL, &e), KILN_OK);
    diag_list_free(&dl);
    uint8_t *bytes = NULL;
    size_t size = 0;
    assert_int_equal(engine_write_mem(plan, &bytes, &size, &e), KILN_OK);
    engine_plan_free(plan);
    cuda_device_info here = h200();
    engine_read_options ro = {.display_name = "g.engine", .gpu = &here};
    engine_plan *p = NULL;
    kiln_status st = engine_read_mem(bytes, size, &ro, &p, &e);
    assert_null(p);
#if KILN_HAVE_CUDA
    assert_int_equal(st, KILN_ERR_FORMAT);
    assert_non_null(strstr(kiln_err_msg(&e), "GPU fields do not parse"));
    assert_non_null(strstr(kiln_err_msg(&e), "gpu-9000"));
#else
    assert_int_equal(st, KILN_ERR_INCOMPATIBLE);
#endif
    kiln_err_clear(&e);
    free(bytes);
}

/* The builder refuses a cuda engine without a GPU description, and unknown backends. */
static void test_builder_needs_gpu(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    kiln_error e = {0};
    assert_int_equal(build_bytes("cuda", false, 0, &bytes, &size, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "needs the GPU it is built for"));
    kiln_err_clear(&e);
    assert_int_equal(build_bytes("tpu", false, 0, &bytes, &size, &e), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&e), "unknown backend 'tpu'"));
    kiln_err_clear(&e);
    /* a CPU engine never looks at a GPU, even when told there is none */
    assert_int_equal(build_bytes("cpu", false, 0, &bytes, &size, &e), KILN_OK);
    engine_read_options ro = {.display_name = "c.engine", .gpu_missing = "no GPU here"};
    engine_plan *p = NULL;
    assert_int_equal(engine_read_mem(bytes, size, &ro, &p, &e), KILN_OK);
    assert_string_equal(p->meta.gpu_arch, "");
    engine_plan_free(p);
    free(bytes);
}

/* A GPU engine's node carries its build-time tactic timings; lookups match the whole
 * signature and tactic name, nothing else. */
static void test_node_tactic_lookup(void **state) {
    (void)state;
    ir_node n;
    memset(&n, 0, sizeof n);
    ir_attr a;
    memset(&a, 0, sizeof a);
    const char *text = "sm_90 lt130100 dnn91400 tf32|gemm m1 n8\tlt#0\t0.25\n"
                       "sm_90 lt130100 dnn91400 tf32|gemm m1 n8\tlt#1\t0.125\n"
                       "sm_90 lt130100 dnn91400 tf32|conv x1\talgo#6\t1e-3\n";
    a.name = RT_GPU_TACTICS_ATTR;
    a.type = IR_ATTR_STRING;
    a.s.data = text;
    a.s.len = strlen(text);
    n.attrs = &a;
    n.n_attrs = 1;
    double ms = 0;
    assert_true(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|gemm m1 n8", "lt#1", &ms));
    assert_true(ms == 0.125);
    assert_true(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|conv x1", "algo#6", &ms));
    assert_true(ms == 1e-3);
    /* a prefix of a signature, another GPU, another tactic: misses */
    assert_false(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|gemm m1", "lt#1", &ms));
    assert_false(rt_gpu_tactic_lookup(&n, "sm_80 lt130100 dnn91400 tf32|gemm m1 n8", "lt#1", &ms));
    assert_false(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|gemm m1 n8", "lt#2", &ms));
    assert_false(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|gemm m1 n8", "lt#", &ms));
    n.n_attrs = 0;
    assert_false(rt_gpu_tactic_lookup(&n, "sm_90 lt130100 dnn91400 tf32|gemm m1 n8", "lt#1", &ms));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_records_gpu),
        cmocka_unit_test(test_load_checks_gpu),
        cmocka_unit_test(test_bad_gpu_fields),
        cmocka_unit_test(test_builder_needs_gpu),
        cmocka_unit_test(test_node_tactic_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
