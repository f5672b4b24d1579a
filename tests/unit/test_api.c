/* test_api.c - the public C API (include/kiln/kiln.h) used exactly as an application
 * would: only "kiln/kiln.h" is included. Load a model, build an engine with a profile,
 * serialize it, load it back from bytes and from a file, run contexts, and compare every
 * path's outputs with the directly built engine's. Then the error paths: NULL arguments,
 * wrong names, shapes outside the profile, wrong byte counts, corrupt engines. Each must
 * return a status with a message from the *_errmsg accessors, and never crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

#define MODEL_PATH KILN_SOURCE_DIR "/examples/tiny_cnn.onnx"
#define DTYPE_FLOAT 1 /* ONNX TensorProto.FLOAT */

/* ---- helpers ------------------------------------------------------------------------ */

static kiln_model *load_model(void) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_file(MODEL_PATH, NULL, &m);
    if (st != KILN_OK) fail_msg("loading %s: %s", MODEL_PATH, kiln_model_errmsg(m));
    return m;
}

/* An engine for tiny_cnn with one profile: batch 1..4, opt 2. */
static kiln_engine *build_engine(void) {
    kiln_model *m = load_model();
    kiln_builder *b = NULL;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MIN, "input:1x3x32x32"), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_OPT, "input:2x3x32x32"), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MAX, "input:4x3x32x32"), KILN_OK);
    kiln_engine *e = NULL;
    kiln_status st = kiln_builder_build(b, m, &e);
    if (st != KILN_OK) fail_msg("build: %s", kiln_builder_errmsg(b));
    kiln_builder_free(b);
    kiln_model_free(m); /* the engine does not need the model */
    return e;
}

static float *make_input(int batch, unsigned seed) {
    size_t n = (size_t)batch * 3 * 32 * 32;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    unsigned s = seed * 2654435761u + 7u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    }
    return x;
}

/* Runs one input through a new context and returns a copy of the logits [batch, 10]. */
static float *run_once(kiln_engine *e, int threads, int batch, const float *x) {
    kiln_context *c = NULL;
    kiln_status st = kiln_context_create(e, threads, &c);
    if (st != KILN_OK) fail_msg("context: %s", kiln_context_errmsg(c));
    int64_t dims[4] = {batch, 3, 32, 32};
    size_t nbytes = (size_t)batch * 3 * 32 * 32 * sizeof(float);
    st = kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, dims, x, nbytes);
    if (st != KILN_OK) fail_msg("set_input: %s", kiln_context_errmsg(c));
    st = kiln_context_run(c);
    if (st != KILN_OK) fail_msg("run: %s", kiln_context_errmsg(c));
    int dtype = 0, rank = 0;
    const int64_t *od = NULL;
    const void *data = NULL;
    size_t ob = 0;
    assert_int_equal(kiln_context_get_output(c, 0, &dtype, &rank, &od, &data, &ob), KILN_OK);
    assert_int_equal(dtype, DTYPE_FLOAT);
    assert_int_equal(rank, 2);
    assert_int_equal(od[0], batch);
    assert_int_equal(od[1], 10);
    assert_int_equal(ob, (size_t)batch * 10 * sizeof(float));
    float *out = malloc(ob);
    assert_non_null(out);
    memcpy(out, data, ob);
    kiln_context_free(c);
    return out;
}

static void assert_same_bits(const float *a, const float *b, size_t n) {
    assert_memory_equal(a, b, n * sizeof(float));
}

/* ---- the happy path ----------------------------------------------------------------- */

static void test_build_describe(void **state) {
    (void)state;
    kiln_engine *e = build_engine();
    assert_string_equal(kiln_engine_errmsg(e), "");
    assert_int_equal(kiln_engine_num_inputs(e), 1);
    assert_int_equal(kiln_engine_num_outputs(e), 1);
    assert_string_equal(kiln_engine_input_name(e, 0), "input");
    assert_string_equal(kiln_engine_output_name(e, 0), "logits");
    assert_null(kiln_engine_input_name(e, 1));
    assert_null(kiln_engine_input_name(e, -1));
    assert_null(kiln_engine_output_name(e, 1));
    assert_int_equal(kiln_engine_num_profiles(e), 1);
    kiln_engine_free(e);
}

/* Built, serialized -> load_bytes, saved -> load_file: the same bits out of all three. */
static void test_round_trips_match_direct_build(void **state) {
    (void)state;
    kiln_engine *direct = build_engine();
    float *x = make_input(2, 1);
    float *want = run_once(direct, 1, 2, x);
    for (int i = 0; i < 20; i++) assert_true(isfinite(want[i]));

    void *bytes = NULL;
    size_t size = 0;
    assert_int_equal(kiln_engine_serialize(direct, &bytes, &size), KILN_OK);
    assert_true(size > 128);
    kiln_engine *from_bytes = NULL;
    kiln_status st = kiln_engine_load_bytes(bytes, size, "tiny.engine", &from_bytes);
    if (st != KILN_OK) fail_msg("load_bytes: %s", kiln_engine_errmsg(from_bytes));
    float *got = run_once(from_bytes, 1, 2, x);
    assert_same_bits(want, got, 20);
    free(got);

    char path[] = "/tmp/kiln_test_api_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(kiln_engine_save_file(direct, path), KILN_OK);
    kiln_engine *from_file = NULL;
    st = kiln_engine_load_file(path, &from_file);
    if (st != KILN_OK) fail_msg("load_file: %s", kiln_engine_errmsg(from_file));
    got = run_once(from_file, 1, 2, x);
    assert_same_bits(want, got, 20);
    free(got);
    /* more threads may sum in another order: close, not necessarily the same bits */
    got = run_once(from_file, 2, 2, x);
    for (int i = 0; i < 20; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-4f * (1.0f + fabsf(want[i])));
    free(got);

    /* serializing a loaded engine gives the same bytes */
    void *again = NULL;
    size_t again_size = 0;
    assert_int_equal(kiln_engine_serialize(from_file, &again, &again_size), KILN_OK);
    assert_int_equal(again_size, size);
    assert_memory_equal(again, bytes, size);
    free(again);

    kiln_engine_free(from_file);
    kiln_engine_free(from_bytes); /* before its bytes */
    free(bytes);
    remove(path);
    free(want);
    free(x);
    kiln_engine_free(direct);
}

/* Items of a batch are independent: batch 2 of (a, b) gives batch-1 results of a and b. */
static void test_batch_consistency_and_reuse(void **state) {
    (void)state;
    kiln_engine *e = build_engine();
    float *a = make_input(1, 3), *b = make_input(1, 4);
    float *ab = malloc(2 * 3 * 32 * 32 * sizeof(float));
    memcpy(ab, a, 3 * 32 * 32 * sizeof(float));
    memcpy(ab + 3 * 32 * 32, b, 3 * 32 * 32 * sizeof(float));
    float *ya = run_once(e, 1, 1, a), *yb = run_once(e, 1, 1, b), *yab = run_once(e, 1, 2, ab);
    for (int i = 0; i < 10; i++) {
        assert_true(fabsf(yab[i] - ya[i]) <= 1e-4f * (1.0f + fabsf(ya[i])));
        assert_true(fabsf(yab[10 + i] - yb[i]) <= 1e-4f * (1.0f + fabsf(yb[i])));
    }
    assert_memory_not_equal(ya, yb, 10 * sizeof(float)); /* the inputs matter */

    /* one context, several runs with new inputs: each run sees its own input */
    kiln_context *c = NULL;
    assert_int_equal(kiln_context_create(e, 1, &c), KILN_OK);
    int64_t d1[4] = {1, 3, 32, 32};
    const float *ins[2] = {a, b};
    const float *outs[2] = {ya, yb};
    for (int r = 0; r < 4; r++) {
        assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d1, ins[r % 2], 3 * 32 * 32 * sizeof(float)),
                         KILN_OK);
        assert_int_equal(kiln_context_run(c), KILN_OK);
        const void *data = NULL;
        assert_int_equal(kiln_context_get_output(c, 0, NULL, NULL, NULL, &data, NULL), KILN_OK);
        assert_same_bits(data, outs[r % 2], 10);
    }
    kiln_context_free(c);
    free(ya);
    free(yb);
    free(yab);
    free(a);
    free(b);
    free(ab);
    kiln_engine_free(e);
}

static void test_model_from_bytes(void **state) {
    (void)state;
    FILE *f = fopen(MODEL_PATH, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    void *buf = malloc((size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    kiln_model *m = NULL;
    assert_int_equal(kiln_model_load_bytes(buf, (size_t)n, "tiny_cnn.onnx", NULL, NULL, &m), KILN_OK);
    kiln_builder *b = NULL;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_ALL, "input:1x3x32x32"), KILN_OK);
    kiln_engine *e = NULL;
    kiln_status st = kiln_builder_build(b, m, &e);
    if (st != KILN_OK) fail_msg("build from bytes: %s", kiln_builder_errmsg(b));
    kiln_model_free(m);
    free(buf);
    float *x = make_input(1, 9);
    float *y = run_once(e, 1, 1, x);
    kiln_engine *ref = build_engine();
    float *z = run_once(ref, 1, 1, x);
    for (int i = 0; i < 10; i++) assert_true(fabsf(y[i] - z[i]) <= 1e-4f * (1.0f + fabsf(z[i])));
    free(x);
    free(y);
    free(z);
    kiln_engine_free(ref);
    kiln_engine_free(e);
    kiln_builder_free(b);
}

/* ---- error paths -------------------------------------------------------------------- */

static void test_free_null_and_null_handles(void **state) {
    (void)state;
    kiln_model_free(NULL);
    kiln_builder_free(NULL);
    kiln_engine_free(NULL);
    kiln_context_free(NULL);
    assert_non_null(kiln_model_errmsg(NULL));
    assert_non_null(kiln_builder_errmsg(NULL));
    assert_non_null(kiln_engine_errmsg(NULL));
    assert_non_null(kiln_context_errmsg(NULL));
    assert_string_equal(kiln_status_name(KILN_OK), "ok");
    assert_non_null(kiln_status_name((kiln_status)999));
    assert_string_equal(kiln_version_string(), KILN_VERSION_STRING);

    assert_int_equal(kiln_builder_create(NULL), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_set_workspace(NULL, 1), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_set_threads(NULL, 1), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_allow_precision(NULL, KILN_PRECISION_FP16), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_add_shapes(NULL, 0, KILN_SHAPE_ALL, "x:1"), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_set_timing_cache(NULL, "x"), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_builder_build(NULL, NULL, NULL), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_engine_save_file(NULL, "x"), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_engine_serialize(NULL, NULL, NULL), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_engine_num_inputs(NULL), 0);
    assert_int_equal(kiln_engine_num_outputs(NULL), 0);
    assert_int_equal(kiln_engine_num_profiles(NULL), 0);
    assert_null(kiln_engine_input_name(NULL, 0));
    assert_null(kiln_engine_output_name(NULL, 0));
    assert_int_equal(kiln_context_set_profile(NULL, 0), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_set_input(NULL, "input", DTYPE_FLOAT, 0, NULL, NULL, 0), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_run(NULL), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_get_output(NULL, 0, NULL, NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARG);
    /* without an out pointer nothing leaks and the status still says why */
    assert_int_equal(kiln_engine_load_file("/nonexistent/x.engine", NULL), KILN_ERR_IO);
}

static void test_builder_errors(void **state) {
    (void)state;
    kiln_builder *b = NULL;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_string_equal(kiln_builder_errmsg(b), "");
    kiln_engine *e = (kiln_engine *)(uintptr_t)1; /* must be reset to NULL on failure */
    assert_int_equal(kiln_builder_build(b, NULL, &e), KILN_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(kiln_builder_errmsg(b), "model"));
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MIN, NULL), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    assert_int_not_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MIN, "input:1xZx3"), KILN_OK);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    assert_int_equal(kiln_builder_add_shapes(b, 0, (kiln_shape_point)7, "input:1x3x32x32"), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    assert_int_equal(kiln_builder_set_threads(b, -1), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_builder_errmsg(b), "threads"));
    assert_int_equal(kiln_builder_allow_precision(b, (kiln_precision)99), KILN_ERR_UNSUPPORTED);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    assert_int_equal(kiln_builder_allow_precision(b, KILN_PRECISION_FP16), KILN_OK);
    assert_string_equal(kiln_builder_errmsg(b), "");
    kiln_builder_free(b);

    /* a profile naming an input the model lacks: the build fails and says which */
    kiln_model *m = load_model();
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_ALL, "imput:1x3x32x32"), KILN_OK);
    e = NULL;
    assert_int_not_equal(kiln_builder_build(b, m, &e), KILN_OK);
    assert_null(e);
    assert_non_null(strstr(kiln_builder_errmsg(b), "imput"));
    kiln_builder_free(b);

    /* min > max */
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MIN, "input:4x3x32x32"), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_OPT, "input:2x3x32x32"), KILN_OK);
    assert_int_equal(kiln_builder_add_shapes(b, 0, KILN_SHAPE_MAX, "input:1x3x32x32"), KILN_OK);
    assert_int_not_equal(kiln_builder_build(b, m, &e), KILN_OK);
    assert_null(e);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    kiln_builder_free(b);

    /* a model that failed to load cannot be built */
    kiln_model *bad = NULL;
    assert_int_not_equal(kiln_model_load_file("/nonexistent/model.onnx", NULL, &bad), KILN_OK);
    assert_true(strlen(kiln_model_errmsg(bad)) > 0);
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_builder_build(b, bad, &e), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_builder_errmsg(b)) > 0);
    kiln_builder_free(b);
    kiln_model_free(bad);
    kiln_model_free(m);
}

static void test_context_errors(void **state) {
    (void)state;
    kiln_engine *e = build_engine();
    kiln_context *c = NULL;
    assert_int_equal(kiln_context_create(e, 1, &c), KILN_OK);
    float *x = make_input(8, 2);
    int64_t d1[4] = {1, 3, 32, 32};
    size_t n1 = 3 * 32 * 32 * sizeof(float);

    /* output before any run */
    assert_int_equal(kiln_context_get_output(c, 0, NULL, NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_context_errmsg(c), "run"));
    /* running before the input is set */
    assert_int_not_equal(kiln_context_run(c), KILN_OK);
    assert_non_null(strstr(kiln_context_errmsg(c), "input"));

    /* wrong name */
    assert_int_equal(kiln_context_set_input(c, "imput", DTYPE_FLOAT, 4, d1, x, n1), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_context_errmsg(c), "imput"));
    assert_int_equal(kiln_context_set_input(c, NULL, DTYPE_FLOAT, 4, d1, x, n1), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    /* NULL data or dims with a non-empty tensor */
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d1, NULL, n1), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, NULL, x, n1), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    /* bad dtype, rank, negative dims, byte count */
    assert_int_equal(kiln_context_set_input(c, "input", 12345, 4, d1, x, n1), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, -1, d1, x, n1), KILN_ERR_INVALID_ARG);
    int64_t neg[4] = {1, -3, 32, 32};
    assert_int_not_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, neg, x, n1), KILN_OK);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d1, x, n1 - 4), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_context_errmsg(c), "bytes"));
    /* a failed set_input leaves the input unset: running still says so */
    assert_int_not_equal(kiln_context_run(c), KILN_OK);
    assert_non_null(strstr(kiln_context_errmsg(c), "input"));

    /* wrong dtype for the input: set is fine (the API copies bytes), run refuses */
    int64_t di[4] = {1, 3, 32, 32};
    assert_int_not_equal(kiln_context_set_input(c, "input", 7 /* INT64 */, 4, di, NULL, 0), KILN_OK);
    double *xd = calloc(3 * 32 * 32, sizeof *xd);
    assert_int_equal(kiln_context_set_input(c, "input", 11 /* DOUBLE */, 4, di, xd, 3 * 32 * 32 * sizeof *xd), KILN_OK);
    assert_int_not_equal(kiln_context_run(c), KILN_OK);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    free(xd);

    /* shape outside the profile (batch 8 > max 4) and wrong rank */
    int64_t d8[4] = {8, 3, 32, 32};
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d8, x, 8 * n1), KILN_OK);
    assert_int_equal(kiln_context_run(c), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_context_errmsg(c), "profile"));
    assert_non_null(strstr(kiln_context_errmsg(c), "--maxShapes=input:8x3x32x32"));
    int64_t d3[3] = {3, 32, 32};
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 3, d3, x, n1), KILN_OK);
    assert_int_equal(kiln_context_run(c), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_context_errmsg(c), "rank"));

    /* the context still works after all that */
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d1, x, n1), KILN_OK);
    assert_int_equal(kiln_context_run(c), KILN_OK);
    assert_string_equal(kiln_context_errmsg(c), "");
    assert_int_equal(kiln_context_get_output(c, 1, NULL, NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_get_output(c, -1, NULL, NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARG);

    /* profiles: 0 exists, 1 does not */
    assert_int_equal(kiln_context_set_profile(c, 0), KILN_OK);
    assert_int_equal(kiln_context_set_profile(c, 1), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_context_errmsg(c), "profile"));
    assert_int_equal(kiln_context_set_profile(c, -1), KILN_ERR_INVALID_ARG);
    assert_int_equal(kiln_context_set_input(c, "input", DTYPE_FLOAT, 4, d1, x, n1), KILN_OK);
    assert_int_equal(kiln_context_run(c), KILN_OK);
    kiln_context_free(c);

    /* a context needs an engine; the failed context still carries the message */
    c = NULL;
    assert_int_equal(kiln_context_create(NULL, 1, &c), KILN_ERR_INVALID_ARG);
    assert_non_null(c);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    assert_int_equal(kiln_context_run(c), KILN_ERR_INVALID_ARG);
    kiln_context_free(c);
    assert_int_equal(kiln_context_create(e, -2, &c), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_context_errmsg(c)) > 0);
    kiln_context_free(c);
    free(x);
    kiln_engine_free(e);
}

static void test_bad_engine_bytes(void **state) {
    (void)state;
    kiln_engine *direct = build_engine();
    void *bytes = NULL;
    size_t size = 0;
    assert_int_equal(kiln_engine_serialize(direct, &bytes, &size), KILN_OK);
    kiln_engine_free(direct);
    uint8_t *copy = malloc(size);

    /* junk, empty, NULL, truncated */
    kiln_engine *e = NULL;
    const char junk[] = "this is not an engine at all, just some text";
    assert_int_equal(kiln_engine_load_bytes(junk, sizeof junk, "junk.engine", &e), KILN_ERR_FORMAT);
    assert_non_null(strstr(kiln_engine_errmsg(e), "junk.engine"));
    assert_int_equal(kiln_engine_num_inputs(e), 0);
    kiln_context *c = NULL;
    assert_int_equal(kiln_context_create(e, 1, &c), KILN_ERR_INVALID_ARG);
    kiln_context_free(c);
    void *d = NULL;
    size_t n = 0;
    assert_int_equal(kiln_engine_serialize(e, &d, &n), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_engine_errmsg(e)) > 0);
    assert_int_equal(kiln_engine_save_file(e, "/tmp/never_written.engine"), KILN_ERR_INVALID_ARG);
    kiln_engine_free(e);
    assert_int_not_equal(kiln_engine_load_bytes(junk, 0, NULL, &e), KILN_OK);
    assert_true(strlen(kiln_engine_errmsg(e)) > 0);
    kiln_engine_free(e);
    assert_int_equal(kiln_engine_load_bytes(NULL, 10, NULL, &e), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_engine_errmsg(e)) > 0);
    kiln_engine_free(e);
    for (size_t cut = 0; cut < size; cut += size / 13 + 1) {
        assert_int_not_equal(kiln_engine_load_bytes(bytes, cut, "cut.engine", &e), KILN_OK);
        assert_non_null(strstr(kiln_engine_errmsg(e), "cut.engine"));
        kiln_engine_free(e);
    }
    assert_int_equal(kiln_engine_load_file("/nonexistent/dir/x.engine", &e), KILN_ERR_IO);
    assert_non_null(strstr(kiln_engine_errmsg(e), "/nonexistent/dir/x.engine"));
    kiln_engine_free(e);
    assert_int_equal(kiln_engine_load_file(NULL, &e), KILN_ERR_INVALID_ARG);
    assert_true(strlen(kiln_engine_errmsg(e)) > 0);
    kiln_engine_free(e);
    /* an ONNX model given as an engine */
    assert_int_equal(kiln_engine_load_file(MODEL_PATH, &e), KILN_ERR_FORMAT);
    assert_non_null(strstr(kiln_engine_errmsg(e), "ONNX"));
    kiln_engine_free(e);

    /* a flipped byte in the weights (the last bytes of the file): the load succeeds (the
     * weights' checksum runs in the background) but no context runs on them, and the
     * engine is not re-serialized with a fresh checksum */
    memcpy(copy, bytes, size);
    copy[size - 5] ^= 0x40;
    kiln_status st = kiln_engine_load_bytes(copy, size, "flip.engine", &e);
    if (st == KILN_OK) {
        assert_int_equal(kiln_context_create(e, 1, &c), KILN_ERR_FORMAT);
        assert_non_null(strstr(kiln_context_errmsg(c), "WEIGHTS"));
        kiln_context_free(c);
        assert_int_equal(kiln_engine_serialize(e, &d, &n), KILN_ERR_FORMAT);
        assert_null(d);
        assert_non_null(strstr(kiln_engine_errmsg(e), "WEIGHTS"));
    } else {
        assert_int_equal(st, KILN_ERR_FORMAT); /* a byte in padding may be caught at load */
    }
    kiln_engine_free(e);
    /* a flipped byte in the header */
    memcpy(copy, bytes, size);
    copy[20] ^= 1;
    assert_int_equal(kiln_engine_load_bytes(copy, size, "hdr.engine", &e), KILN_ERR_FORMAT);
    assert_non_null(strstr(kiln_engine_errmsg(e), "hdr.engine"));
    kiln_engine_free(e);
    free(copy);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_describe),
        cmocka_unit_test(test_round_trips_match_direct_build),
        cmocka_unit_test(test_batch_consistency_and_reuse),
        cmocka_unit_test(test_model_from_bytes),
        cmocka_unit_test(test_free_null_and_null_handles),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_context_errors),
        cmocka_unit_test(test_bad_engine_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
