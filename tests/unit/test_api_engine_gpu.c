/* test_api_engine_gpu.c - the public API's engine loaders (kiln_engine_load_bytes/_file,
 * src/api/engine.c) check a cuda engine's recorded GPU against this machine's, as kiln
 * exec --loadEngine does, without a GPU (every build, ASan included): the GPU "here" is
 * fabricated through kiln_api_set_gpu_probe. Another architecture, another cuDNN major
 * and no GPU at all are refused at load with the message naming both sides and the
 * rebuild command; the same GPU loads; a CPU engine never probes the GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/engine_gpu.h"
#include "api/model_internal.h"
#include "build/builder.h"
#include "engine/engine.h"
#include "kiln/kiln.h"

#define MODEL_PATH KILN_SOURCE_DIR "/examples/tiny_cnn.onnx"

static cuda_device_info h200(void) {
    cuda_device_info a;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "NVIDIA H200");
    a.cc_major = 9, a.cc_minor = 0, a.runtime_version = 13000, a.driver_version = 13010;
    a.cublas_version = 130001, a.cudnn_version = 91300;
    return a;
}

/* the fabricated GPU: which one, and how often the loaders asked */
static cuda_device_info fake;
static const char *fake_missing;
static int probes;

static kiln_status fake_probe(cuda_device_info *info, char *missing, size_t size) {
    probes++;
    if (fake_missing) {
        snprintf(missing, size, "%s", fake_missing);
        return KILN_ERR_UNSUPPORTED;
    }
    *info = fake;
    return KILN_OK;
}

/* tiny_cnn built for `backend` ("cuda": recorded as built on an H200, FP16) and serialized */
static void build_bytes(const char *backend, uint8_t **bytes, size_t *size) {
    kiln_model *m = NULL;
    if (kiln_model_load_file(MODEL_PATH, NULL, &m) != KILN_OK) fail_msg("loading %s: %s", MODEL_PATH, kiln_model_errmsg(m));
    ir_model *ir = m->ir;
    m->ir = NULL;
    kiln_model_free(m);
    cuda_device_info gi = h200();
    cuda_info_meta gm;
    cuda_info_to_meta(&gi, &gm);
    build_options o = build_options_default();
    o.backend = backend;
    o.source_model = "tiny_cnn.onnx";
    if (!strcmp(backend, "cuda")) {
        o.precision_flags = ENGINE_PREC_FLAG_FP16;
        o.gpu_arch = gm.gpu_arch;
        o.cuda_version = gm.cuda_version;
        o.cublas_version = gm.cublas_version;
        o.cudnn_version = gm.cudnn_version;
    }
    diag_list dl;
    diag_list_init(&dl);
    engine_plan *plan = NULL;
    kiln_error e = {0};
    kiln_status st = build_engine(ir, &o, &dl, &plan, NULL, &e);
    diag_list_free(&dl);
    if (st != KILN_OK) fail_msg("build: %s", kiln_err_msg(&e));
    assert_int_equal(engine_write_mem(plan, bytes, size, &e), KILN_OK);
    engine_plan_free(plan);
}

static void expect(kiln_status st, kiln_engine *e, const char *const *needles) {
    assert_int_equal(st, KILN_ERR_INCOMPATIBLE);
    const char *msg = kiln_engine_errmsg(e);
#if KILN_HAVE_CUDA
    for (int i = 0; needles[i]; i++)
        if (!strstr(msg, needles[i])) fail_msg("'%s' not in: %s", needles[i], msg);
#else
    (void)needles; /* a kiln without CUDA refuses every cuda engine, naming the backend */
    if (!strstr(msg, "built for the cuda backend, which this kiln")) fail_msg("unexpected: %s", msg);
#endif
}

static void test_load_bytes_checks_gpu(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    build_bytes("cuda", &bytes, &size);
    kiln_api_set_gpu_probe(fake_probe);
    kiln_engine *e = NULL;

    fake = h200(); /* another architecture */
    snprintf(fake.name, sizeof fake.name, "NVIDIA A100");
    fake.cc_major = 8;
    fake_missing = NULL;
    probes = 0;
    kiln_status st = kiln_engine_load_bytes(bytes, size, "g.engine", &e);
    expect(st, e, (const char *const[]){"engine 'g.engine' cannot run on this GPU", "sm_90 (NVIDIA H200)",
                                        "sm_80 (NVIDIA A100)",
                                        "hint: rebuild the engine here with: kiln exec --onnx=tiny_cnn.onnx "
                                        "--backend=cuda --saveEngine=g.engine --fp16",
                                        NULL});
#if KILN_HAVE_CUDA
    assert_int_equal(probes, 1);
#endif
    kiln_engine_free(e);

    fake = h200(); /* another cuDNN major */
    fake.cudnn_version = 80907;
    st = kiln_engine_load_bytes(bytes, size, "g.engine", &e);
    expect(st, e, (const char *const[]){"cuDNN 9.13.0", "cuDNN 8.9.7", "--backend=cuda --saveEngine=g.engine", NULL});
    kiln_engine_free(e);

    fake_missing = "this machine has no usable NVIDIA GPU (no CUDA driver)"; /* no GPU */
    st = kiln_engine_load_bytes(bytes, size, "g.engine", &e);
    expect(st, e, (const char *const[]){"engine 'g.engine' was built for the cuda backend on sm_90 NVIDIA H200, "
                                        "but this machine has no usable NVIDIA GPU (no CUDA driver)",
                                        "--backend=cpu --saveEngine=g.engine", NULL});
    kiln_engine_free(e);

    fake_missing = NULL; /* the same GPU, a newer driver: loads */
    fake = h200();
    fake.driver_version = 13020;
    st = kiln_engine_load_bytes(bytes, size, "g.engine", &e);
#if KILN_HAVE_CUDA
    if (st != KILN_OK) fail_msg("%s", kiln_engine_errmsg(e));
    assert_int_equal(kiln_engine_num_inputs(e), 1);
#else
    assert_int_equal(st, KILN_ERR_INCOMPATIBLE);
#endif
    kiln_engine_free(e);
    kiln_api_set_gpu_probe(NULL);
    free(bytes);
}

static void test_load_file_checks_gpu(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    build_bytes("cuda", &bytes, &size);
    char path[] = "/tmp/kiln_api_gpu_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, size), (ssize_t)size);
    close(fd);
    kiln_api_set_gpu_probe(fake_probe);
    fake = h200();
    snprintf(fake.name, sizeof fake.name, "NVIDIA A100");
    fake.cc_major = 8;
    fake_missing = NULL;
    kiln_engine *e = NULL;
    kiln_status st = kiln_engine_load_file(path, &e);
    char want[128];
    snprintf(want, sizeof want, "engine '%s' cannot run on this GPU", path);
    expect(st, e, (const char *const[]){want, "sm_80 (NVIDIA A100)", "--saveEngine=", NULL});
    kiln_engine_free(e);
    kiln_api_set_gpu_probe(NULL);
    unlink(path);
    free(bytes);
}

/* A CPU engine loads without asking for a GPU; garbage is the format error it always was. */
static void test_cpu_engine_never_probes(void **state) {
    (void)state;
    uint8_t *bytes = NULL;
    size_t size = 0;
    build_bytes("cpu", &bytes, &size);
    kiln_api_set_gpu_probe(fake_probe);
    fake_missing = "no GPU";
    probes = 0;
    kiln_engine *e = NULL;
    kiln_status st = kiln_engine_load_bytes(bytes, size, "c.engine", &e);
    if (st != KILN_OK) fail_msg("%s", kiln_engine_errmsg(e));
    kiln_engine_free(e);
    static const uint8_t junk[64] = {1, 2, 3};
    st = kiln_engine_load_bytes(junk, sizeof junk, "j.engine", &e);
    assert_int_not_equal(st, KILN_OK);
    kiln_engine_free(e);
    assert_int_equal(probes, 0);
    kiln_api_set_gpu_probe(NULL);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_bytes_checks_gpu),
        cmocka_unit_test(test_load_file_checks_gpu),
        cmocka_unit_test(test_cpu_engine_never_probes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
