/* test_infer_backend_models.c - shape inference against ground truth: every node test of
 * the ONNX backend test data declares its outputs' types, computed by ONNX itself. We
 * hide those declarations, run kiln's inference, and compare dtype, rank and each dim.
 *
 * Each case is counted as: match (every output equal), unknown (some output dim or type
 * left unknown by kiln, nothing contradicts), mismatch (a dtype, rank or constant dim
 * differs), unknown-op (kiln has no inference for an op in it), error (kiln reported an
 * error on a valid model). Mismatches and errors on valid models are bugs: the test fails
 * on any of them except the listed known differences, and prints the counts. */
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
#include <time.h>

#include "diag/diag.h"
#include "ir/infer.h"
#include "ir/symdim.h"
#include "ir/validate.h"
#include "onnx/onnx_load.h"

#define ROOT KILN_SHARED_DIR "/onnx-backend-tests/node"

/* Cases where kiln knowingly differs from the declared types, with the reason. */
static const struct {
    const char *name;
    const char *why;
} known_differences[] = {
    {"", ""},
};

static bool is_known_difference(const char *name) {
    for (size_t i = 0; i < sizeof known_differences / sizeof known_differences[0]; i++)
        if (known_differences[i].name[0] && !strcmp(name, known_differences[i].name)) return true;
    return false;
}

enum { R_MATCH, R_UNKNOWN, R_MISMATCH, R_UNKNOWN_OP, R_ERROR, R_SKIP, R_COUNT };
static const char *const r_names[R_COUNT] = {"match", "unknown", "mismatch", "unknown-op", "error", "skipped"};
static int counts[R_COUNT];
static int unexpected;
static double infer_seconds;
static int64_t infer_nodes;

/* 0 equal, 1 inferred knows less, 2 contradiction */
static int cmp_type(ir_model *m, const ir_type *decl, const ir_type *inf, int depth) {
    if (depth > 8 || decl->kind == IR_TYPE_UNKNOWN) return 0;
    if (inf->kind == IR_TYPE_UNKNOWN) return 1;
    if (decl->kind != inf->kind) return 2;
    if (decl->kind == IR_TYPE_SEQUENCE || decl->kind == IR_TYPE_OPTIONAL) {
        if (!decl->elem) return 0;
        if (!inf->elem) return 1;
        return cmp_type(m, decl->elem, inf->elem, depth + 1);
    }
    if (decl->kind != IR_TYPE_TENSOR) return 0;
    if (decl->dtype && inf->dtype && decl->dtype != inf->dtype) return 2;
    int res = (decl->dtype && !inf->dtype) ? 1 : 0;
    if (decl->rank < 0) return res;
    if (inf->rank < 0) return 1;
    if (decl->rank != inf->rank) return 2;
    for (int32_t i = 0; i < decl->rank; i++) {
        ir_dim d = decl->dims[i], x = inf->dims[i];
        if (d.kind == IR_DIM_UNKNOWN) continue;
        if (d.kind == IR_DIM_CONST) {
            if (x.kind == IR_DIM_CONST && x.value != d.value) return 2;
            if (x.kind != IR_DIM_CONST) res = res > 1 ? res : 1;
        } else if (!(x.kind == IR_DIM_SYM && x.sym == d.sym)) {
            if (x.kind == IR_DIM_CONST) return 2; /* declared symbolic, we claim a constant */
            res = res > 1 ? res : 1;
        }
    }
    return res;
}

static void check_case(const char *name, const char *dir) {
    char path[8192];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    struct stat st;
    if (stat(path, &st) != 0) return;
    ir_model *m = NULL;
    kiln_error err = {0};
    if (onnx_load_file(path, NULL, &m, &err) != KILN_OK) {
        counts[R_SKIP]++;
        kiln_err_clear(&err);
        return;
    }
    diag_list dl;
    diag_list_init(&dl);
    if (ir_validate(m, &dl, &err) != KILN_OK) {
        counts[R_SKIP]++;
        goto done;
    }
    ir_graph *g = m->graph;
    /* hide the declared output types: they are the answer */
    ir_type *answers = calloc((size_t)g->n_outputs + 1, sizeof *answers);
    for (int32_t i = 0; i < g->n_outputs; i++) {
        ir_value *v = ir_val(g, g->outputs[i]);
        answers[i] = v->type;
        if (!(v->flags & IR_VALUE_GRAPH_INPUT)) {
            v->flags &= ~(uint32_t)IR_VALUE_HAS_VALUE_INFO;
            memset(&v->type, 0, sizeof v->type);
            v->type.rank = -1;
        }
    }
    ir_infer_options o = {0};
    o.report_unknown_ops = true;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_status s = ir_infer(m, &o, &dl, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    infer_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    infer_nodes += g->n_nodes;
    int result;
    bool unknown_op = false;
    for (int32_t i = 0; i < dl.n; i++)
        if (!strcmp(dl.items[i].code, "infer-unknown-op")) {
            unknown_op = true;
            if (getenv("KILN_INFER_VERBOSE")) print_message("  %s: %s\n", name, dl.items[i].message);
        }
    int worst = 0;
    for (int32_t i = 0; i < g->n_outputs; i++) {
        int c = cmp_type(m, &answers[i], &ir_val(g, g->outputs[i])->type, 0);
        if (c == 2 && !getenv("KILN_INFER_QUIET"))
            print_message("  %s: output '%s' declared %s, inferred %s\n", name, ir_val(g, g->outputs[i])->name,
                          ir_type_str(m, &answers[i]), ir_type_str(m, &ir_val(g, g->outputs[i])->type));
        if (c > worst) worst = c;
    }
    if (s == KILN_ERR_SHAPE) result = R_ERROR;
    else if (s != KILN_OK) result = R_ERROR;
    else if (worst == 2) result = R_MISMATCH;
    else if (unknown_op) result = R_UNKNOWN_OP;
    else if (worst == 1) result = R_UNKNOWN;
    else result = R_MATCH;
    if ((result == R_ERROR || result == R_MISMATCH) && !is_known_difference(name)) {
        unexpected++;
        if (result == R_ERROR) {
            strbuf sb;
            sb_init(&sb);
            for (int32_t i = 0; i < dl.n; i++)
                if (dl.items[i].severity == DIAG_ERROR) diag_render_text(&dl.items[i], &sb);
            print_message("  %s: inference reported errors on a valid model:\n%s%s\n", name, sb_cstr(&sb),
                          kiln_err_msg(&err));
            sb_free(&sb);
        }
    }
    if (result == R_UNKNOWN && getenv("KILN_INFER_VERBOSE")) {
        for (int32_t i = 0; i < g->n_outputs; i++)
            print_message("  %s (unknown): declared %s, inferred %s\n", name, ir_type_str(m, &answers[i]),
                          ir_type_str(m, &ir_val(g, g->outputs[i])->type));
    }
    counts[result]++;
    free(answers);
    /* a second run (another profile point) starts from the declarations again */
    if (result == R_MATCH) {
        diag_list d2;
        diag_list_init(&d2);
        kiln_status s2 = ir_infer(m, &o, &d2, &err);
        if (s2 != KILN_OK) {
            unexpected++;
            print_message("  %s: second inference run failed\n", name);
        }
        diag_list_free(&d2);
    }
done:
    kiln_err_clear(&err);
    diag_list_free(&dl);
    ir_model_free(m);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void test_node_models(void **state) {
    (void)state;
    DIR *d = opendir(ROOT);
    if (!d) {
        print_message("skipping: %s not found (the shared ONNX backend test data is not present)\n", ROOT);
        skip();
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    const char *only = getenv("KILN_INFER_ONLY");
    for (size_t i = 0; i < n; i++) {
        if (!only || strstr(names[i], only)) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/%s", ROOT, names[i]);
            check_case(names[i], dir);
        }
        free(names[i]);
    }
    free(names);
    print_message("node models: ");
    for (int i = 0; i < R_COUNT; i++) print_message("%s %d%s", r_names[i], counts[i], i + 1 < R_COUNT ? ", " : "\n");
    print_message("inference time: %.1f ms for %lld nodes in total\n", infer_seconds * 1e3, (long long)infer_nodes);
    assert_int_equal(unexpected, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_node_models)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
