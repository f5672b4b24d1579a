/* test_onnx_backend_models.c - every model of the ONNX backend test data loads with the
 * ONNX reader, and every input_K.pb / output_K.pb reads with the value-file reader.
 *
 * The data lives in ../shared/onnx-backend-tests (read-only, never copied into the repo).
 * Value files are read with the kind the model declares for that input/output, and a
 * tensor's data type must equal the declared element type: that checks the decoder got
 * the semantics right, not just that it did not fail. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx/onnx_load.h"
#include "onnx/onnx_value_file.h"

#define ROOT KILN_SHARED_DIR "/onnx-backend-tests"

static int n_models, n_values, n_failures;

/* The declared type of the K-th real input (initializers listed as inputs do not count). */
static const ir_type *declared(ir_model *m, bool input, int k) {
    ir_graph *g = m->graph;
    int seen = 0;
    int32_t n = input ? g->n_inputs : g->n_outputs;
    for (int32_t i = 0; i < n; i++) {
        ir_value *v = ir_val(g, input ? g->inputs[i] : g->outputs[i]);
        if (input && (v->flags & IR_VALUE_INITIALIZER)) continue;
        if (seen++ == k) return &v->type;
    }
    return NULL;
}

static void check_value_file(ir_model *m, const char *path, bool input, int k) {
    const ir_type *t = declared(m, input, k);
    arena a;
    arena_init(&a);
    onnx_value v;
    kiln_error e = {0};
    kiln_status st = onnx_read_value_file(path, t ? t->kind : IR_TYPE_UNKNOWN, &a, &v, &e);
    n_values++;
    if (st != KILN_OK) {
        n_failures++;
        print_error("value file failed: %s\n", kiln_err_msg(&e));
    } else if (t && t->kind == IR_TYPE_TENSOR && t->dtype && v.tensor->dtype != t->dtype) {
        n_failures++;
        print_error("%s: dtype %d but the model declares %d\n", path, v.tensor->dtype, t->dtype);
    }
    kiln_err_clear(&e);
    /* Without the hint the reader must guess the same kind (an optional can only be told
     * from a one-element sequence by the hint). */
    onnx_value g;
    if (onnx_read_value_file(path, IR_TYPE_UNKNOWN, &a, &g, &e) != KILN_OK) {
        n_failures++;
        print_error("value file failed without a hint: %s\n", kiln_err_msg(&e));
    } else if (t && t->kind != IR_TYPE_UNKNOWN && g.kind != t->kind &&
               !(t->kind == IR_TYPE_OPTIONAL && (g.kind == IR_TYPE_SEQUENCE || g.kind == IR_TYPE_TENSOR))) {
        n_failures++;
        print_error("%s: guessed kind %d, the model declares %d\n", path, g.kind, t->kind);
    }
    kiln_err_clear(&e);
    arena_free(&a);
}

static void check_case(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/model.onnx", dir) >= (int)sizeof path) return;
    struct stat sb;
    if (stat(path, &sb) != 0) return;
    ir_model *m = NULL;
    kiln_error e = {0};
    kiln_model_options o = kiln_model_options_default();
    n_models++;
    if (onnx_load_file(path, &o, &m, &e) != KILN_OK) {
        n_failures++;
        print_error("model failed: %s\n", kiln_err_msg(&e));
        kiln_err_clear(&e);
        return;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "test_data_set_", 14) != 0) continue;
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name) >= (int)sizeof sub) continue;
        DIR *d2 = opendir(sub);
        struct dirent *f;
        while (d2 && (f = readdir(d2)) != NULL) {
            int k;
            bool input = strncmp(f->d_name, "input_", 6) == 0;
            if (!input && strncmp(f->d_name, "output_", 7) != 0) continue;
            if (sscanf(f->d_name + (input ? 6 : 7), "%d", &k) != 1) continue;
            char fp[4096];
            if (snprintf(fp, sizeof fp, "%s/%s", sub, f->d_name) >= (int)sizeof fp) continue;
            check_value_file(m, fp, input, k);
        }
        if (d2) closedir(d2);
    }
    if (d) closedir(d);
    ir_model_free(m);
}

static void test_backend_models(void **state) {
    (void)state;
    struct stat sb;
    if (stat(ROOT, &sb) != 0) {
        print_message("skipping: %s is absent (the ONNX backend test data is not installed here)\n", ROOT);
        skip();
    }
    static const char *suites[] = {"node", "simple", "pytorch-converted", "pytorch-operator"};
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        char sp[4096];
        if (snprintf(sp, sizeof sp, "%s/%s", ROOT, suites[s]) >= (int)sizeof sp) continue;
        DIR *d = opendir(sp);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') continue;
            char cp[4096];
            if (snprintf(cp, sizeof cp, "%s/%s", sp, de->d_name) >= (int)sizeof cp) continue;
            check_case(cp);
        }
        if (d) closedir(d);
    }
    print_message("%d models, %d value files, %d failures\n", n_models, n_values, n_failures);
    assert_true(n_models > 1000);
    assert_int_equal(n_failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_backend_models)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
