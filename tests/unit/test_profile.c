/* test_profile.c - trtexec shape-flag parsing and optimization-profile checks
 * (src/build/profile.h): spec edge cases (malformed, overflow, quoting, spaces) and the
 * diagnostics a profile gets against a small hand-built model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "build/profile.h"

/* ---- spec parsing --------------------------------------------------------------------- */

typedef struct parsed {
    arena a;
    build_shape_entry *e;
    int32_t n;
    kiln_error err;
    kiln_status st;
} parsed;

static void parse(parsed *p, const char *spec) {
    memset(p, 0, sizeof *p);
    arena_init(&p->a);
    p->st = build_shape_spec_parse(spec, &p->a, &p->e, &p->n, &p->err);
}

static void done(parsed *p) {
    kiln_err_clear(&p->err);
    arena_free(&p->a);
}

static void expect_error(const char *spec, const char *needle, int column) {
    parsed p;
    parse(&p, spec);
    if (p.st == KILN_OK) fail_msg("spec '%s' was accepted", spec);
    const char *msg = kiln_err_msg(&p.err);
    if (!strstr(msg, needle)) fail_msg("spec '%s': message lacks '%s':\n%s", spec, needle, msg);
    if (column > 0) {
        char col[32];
        snprintf(col, sizeof col, "column %d:", column);
        if (!strstr(msg, col)) fail_msg("spec '%s': message lacks '%s':\n%s", spec, col, msg);
    }
    done(&p);
}

static void test_parse_basic(void **state) {
    (void)state;
    parsed p;
    parse(&p, "input:1x3x224x224,mask:1x128");
    assert_int_equal(p.st, KILN_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.e[0].name, "input");
    assert_int_equal(p.e[0].rank, 4);
    assert_int_equal(p.e[0].dims[0], 1);
    assert_int_equal(p.e[0].dims[3], 224);
    assert_string_equal(p.e[1].name, "mask");
    assert_int_equal(p.e[1].rank, 2);
    assert_int_equal(p.e[1].dims[1], 128);
    assert_int_equal(p.e[1].column, 19);
    done(&p);
}

static void test_parse_quoted_and_colons(void **state) {
    (void)state;
    parsed p;
    parse(&p, "'input:0':1x3,'a,b':7");
    assert_int_equal(p.st, KILN_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.e[0].name, "input:0");
    assert_int_equal(p.e[0].rank, 2);
    assert_string_equal(p.e[1].name, "a,b"); /* quoting protects commas too */
    assert_int_equal(p.e[1].dims[0], 7);
    done(&p);
    /* unquoted: the name ends at the entry's last colon */
    parse(&p, "input:0:1x3");
    assert_int_equal(p.st, KILN_OK);
    assert_string_equal(p.e[0].name, "input:0");
    assert_int_equal(p.e[0].rank, 2);
    done(&p);
}

static void test_parse_scalars(void **state) {
    (void)state;
    parsed p;
    parse(&p, "s:,t:scalar,u:2");
    assert_int_equal(p.st, KILN_OK);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.e[0].rank, 0);
    assert_int_equal(p.e[1].rank, 0);
    assert_int_equal(p.e[2].rank, 1);
    done(&p);
}

static void test_parse_spaces(void **state) {
    (void)state;
    parsed p;
    parse(&p, "  x : 1 x 3 ,  y:2  ");
    assert_int_equal(p.st, KILN_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.e[0].name, "x");
    assert_int_equal(p.e[0].rank, 2);
    assert_int_equal(p.e[0].dims[1], 3);
    assert_string_equal(p.e[1].name, "y");
    done(&p);
}

static void test_parse_malformed(void **state) {
    (void)state;
    expect_error("", "empty", 1);
    expect_error("   ", "empty", 1);
    expect_error("x1x3", "expected ':'", 5);
    expect_error("x:1x", "expected a dimension", 5);
    expect_error("x:1xy", "found 'y'", 5);
    expect_error("x:1*3", "expected 'x' between dimensions", 4);
    expect_error("x:1,,y:2", "empty entry", 5);
    expect_error("x:1,", "trailing ','", 4);
    expect_error(",x:1", "empty entry", 1);
    expect_error("'x:1", "never closed", 1);
    expect_error("'x'1", "expected ':' after the quoted name", 4);
    expect_error("'':1", "quoted input name is empty", 1);
    expect_error(":1x3", "name before ':' is empty", 1);
    expect_error("x:1,x:2", "given twice", 5);
    expect_error("x:scalarx", "after 'scalar'", 9);
    /* the caret line points under the bad character */
    parsed p;
    parse(&p, "x:1xy");
    assert_non_null(strstr(kiln_err_msg(&p.err), "\n  x:1xy\n      ^"));
    done(&p);
}

static void test_parse_values(void **state) {
    (void)state;
    expect_error("x:0x3", "is 0", 3);
    expect_error("x:1x-1", "negative", 5);
    expect_error("x:99999999999999999999999", "too large", 3);
    expect_error("x:2147483648", "too large", 3);
    parsed p;
    parse(&p, "x:2147483647");
    assert_int_equal(p.st, KILN_OK);
    assert_int_equal(p.e[0].dims[0], 2147483647LL);
    done(&p);
    /* more dimensions than any tensor may have */
    char big[1024] = "x:1";
    for (int i = 0; i < IR_MAX_RANK; i++) strcat(big, "x1");
    expect_error(big, "more than", -1);
}

/* ---- the set ---------------------------------------------------------------------------- */

static void test_profiles_select_and_duplicates(void **state) {
    (void)state;
    build_profile_set s;
    build_profiles_init(&s);
    kiln_error err = {0};
    assert_int_equal(build_profiles_add(&s, BUILD_FLAG_MIN, "x:1x3", &err), KILN_OK);
    assert_int_equal(build_profiles_add(&s, BUILD_FLAG_MIN, "x:2x3", &err), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&err), "--minShapes: input 'x' is given twice for profile 0"));
    kiln_err_clear(&err);
    assert_int_equal(build_profiles_select(&s, 2, &err), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&err), "--profile=1"));
    kiln_err_clear(&err);
    assert_int_equal(build_profiles_select(&s, -1, &err), KILN_ERR_INVALID_ARG);
    kiln_err_clear(&err);
    assert_int_equal(build_profiles_select(&s, 1, &err), KILN_OK);
    assert_int_equal(build_profiles_add(&s, BUILD_FLAG_MIN, "x:2x3", &err), KILN_OK);
    assert_int_equal(s.n_profiles, 2);
    /* a malformed spec names its flag */
    assert_int_equal(build_profiles_add(&s, BUILD_FLAG_MAX, "x:2xx", &err), KILN_ERR_INVALID_ARG);
    assert_non_null(strstr(kiln_err_msg(&err), "--maxShapes: malformed shape spec at column 5"));
    kiln_err_clear(&err);
    build_profiles_free(&s);
}

/* A model with inputs x [batch, 3, 224, 224], mask [batch, seq] and a weight w [4]. */
static ir_model *make_model(void) {
    ir_model *m = ir_model_new();
    ir_graph *g = ir_graph_new(m, NULL, "main");
    m->graph = g;
    int32_t batch = ir_sym_leaf(m, "batch"), seq = ir_sym_leaf(m, "seq");
    const char *names[] = {"x", "mask", "w"};
    g->inputs = ARENA_ARRAY(&m->arena, int32_t, 3);
    for (int i = 0; i < 3; i++) {
        int32_t id = ir_graph_add_value(g, names[i]);
        ir_value *v = ir_val(g, id);
        v->flags = IR_VALUE_GRAPH_INPUT | (i == 2 ? IR_VALUE_INITIALIZER : 0);
        v->type.kind = IR_TYPE_TENSOR;
        v->type.dtype = KILN_DTYPE_FLOAT;
        v->type.rank = i == 0 ? 4 : (i == 1 ? 2 : 1);
        v->type.dims = ARENA_ARRAY(&m->arena, ir_dim, 4);
        g->inputs[g->n_inputs++] = id;
    }
    ir_value *x = ir_val(g, 0), *mask = ir_val(g, 1), *w = ir_val(g, 2);
    x->type.dims[0] = (ir_dim){IR_DIM_SYM, batch, 0};
    x->type.dims[1] = (ir_dim){IR_DIM_CONST, 0, 3};
    x->type.dims[2] = (ir_dim){IR_DIM_CONST, 0, 224};
    x->type.dims[3] = (ir_dim){IR_DIM_CONST, 0, 224};
    mask->type.dims[0] = (ir_dim){IR_DIM_SYM, batch, 0};
    mask->type.dims[1] = (ir_dim){IR_DIM_SYM, seq, 0};
    w->type.dims[0] = (ir_dim){IR_DIM_CONST, 0, 4};
    return m;
}

typedef struct checked {
    build_profile_set s;
    diag_list dl;
    ir_model *m;
} checked;

/* Applies flags given as pairs (flag, spec); flag -1 selects a profile (spec = "N"). */
static void run_check(checked *c, int n, const int *flags, const char *const *specs) {
    build_profiles_init(&c->s);
    diag_list_init(&c->dl);
    c->m = make_model();
    kiln_error err = {0};
    for (int i = 0; i < n; i++) {
        kiln_status st = flags[i] < 0 ? build_profiles_select(&c->s, atoi(specs[i]), &err)
                                      : build_profiles_add(&c->s, (build_shape_flag)flags[i], specs[i], &err);
        if (st != KILN_OK) fail_msg("flag %d '%s' rejected: %s", flags[i], specs[i], kiln_err_msg(&err));
    }
    build_profiles_check(&c->s, c->m, &c->dl);
}

static void free_check(checked *c) {
    build_profiles_free(&c->s);
    diag_list_free(&c->dl);
    ir_model_free(c->m);
}

/* The first diagnostic with this code, or fail. */
static const diag *find(const checked *c, const char *code) {
    for (int32_t i = 0; i < c->dl.n; i++)
        if (!strcmp(c->dl.items[i].code, code)) return &c->dl.items[i];
    strbuf sb;
    sb_init(&sb);
    for (int32_t i = 0; i < c->dl.n; i++) diag_render_text(&c->dl.items[i], &sb);
    fail_msg("no %s diagnostic; got:\n%s", code, sb_cstr(&sb));
    return NULL;
}

static bool text_has(const diag *d, const char *needle) {
    strbuf sb;
    sb_init(&sb);
    diag_render_text(d, &sb);
    bool r = strstr(sb_cstr(&sb), needle) != NULL;
    if (!r) print_error("missing '%s' in:\n%s", needle, sb_cstr(&sb));
    sb_free(&sb);
    return r;
}

static void test_check_valid_profile(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX};
    const char *s[] = {"x:1x3x224x224,mask:1x1", "x:4x3x224x224,mask:4x64", "x:8x3x224x224,mask:8x128"};
    run_check(&c, 3, f, s);
    assert_int_equal(c.dl.n, 0);
    ir_input_shape shapes[4];
    int32_t n = build_profile_point_shapes(&c.s, 0, BUILD_POINT_MAX, shapes, 4);
    assert_int_equal(n, 2);
    assert_string_equal(shapes[0].name, "x");
    assert_int_equal(shapes[0].dims[0], 8);
    assert_int_equal(shapes[1].dims[1], 128);
    free_check(&c);
}

static void test_check_opt_only_and_shapes_fill(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_OPT, BUILD_FLAG_SHAPES};
    const char *s[] = {"x:2x3x224x224", "mask:2x16"};
    run_check(&c, 2, f, s);
    assert_int_equal(c.dl.n_errors, 0);
    ir_input_shape shapes[4];
    assert_int_equal(build_profile_point_shapes(&c.s, 0, BUILD_POINT_MIN, shapes, 4), 2);
    assert_int_equal(shapes[0].dims[0], 2);
    assert_int_equal(shapes[1].dims[1], 16);
    free_check(&c);
}

static void test_check_unknown_input(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_SHAPES};
    const char *s[] = {"msk:1x4,x:1x3x224x224"};
    run_check(&c, 1, f, s);
    const diag *d = find(&c, "profile-unknown-input");
    assert_true(text_has(d, "no input of that name"));
    assert_true(text_has(d, "did you mean 'mask'?"));
    assert_true(text_has(d, "'x' [batch, 3, 224, 224]"));
    free_check(&c);
    /* a weight is not an input */
    const char *s2[] = {"w:4"};
    run_check(&c, 1, f, s2);
    assert_true(text_has(find(&c, "profile-unknown-input"), "is an initializer"));
    free_check(&c);
}

static void test_check_rank_and_static(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX};
    const char *s[] = {"x:1x3x224", "x:1x4x224x224", "x:1x3x224x224"};
    run_check(&c, 3, f, s);
    const diag *d = find(&c, "profile-rank-mismatch");
    assert_true(text_has(d, "input 'x' has 4 dimensions [batch, 3, 224, 224] but --minShapes gives 3: 1x3x224"));
    d = find(&c, "profile-static-dim-conflict");
    assert_true(text_has(d, "dimension 1 of 'x' is fixed at 3 in the model but --optShapes gives 4"));
    free_check(&c);
}

static void test_check_order(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX};
    const char *s[] = {"mask:8x1", "mask:4x64", "mask:16x32"};
    run_check(&c, 3, f, s);
    int n_order = 0;
    for (int32_t i = 0; i < c.dl.n; i++)
        if (!strcmp(c.dl.items[i].code, "profile-order")) {
            n_order++;
            const diag *d = &c.dl.items[i];
            if (strstr(d->message, "dimension 0"))
                assert_true(text_has(d, "input 'mask' dimension 0 (batch): min 8 > opt 4"));
            else
                assert_true(text_has(d, "input 'mask' dimension 1 (seq): opt 64 > max 32"));
        }
    assert_int_equal(n_order, 2);
    free_check(&c);
}

static void test_check_missing_partner(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT};
    const char *s[] = {"mask:1x1", "mask:4x64"};
    run_check(&c, 2, f, s);
    const diag *d = find(&c, "profile-missing-shape");
    assert_true(text_has(d, "input 'mask' has --minShapes and --optShapes but no --maxShapes"));
    assert_true(text_has(d, "add --maxShapes=mask:4x64"));
    free_check(&c);
}

static void test_check_uncovered_and_static(void **state) {
    (void)state;
    checked c;
    run_check(&c, 0, NULL, NULL);
    assert_int_equal(c.dl.n_errors, 0);
    const diag *d = find(&c, "profile-missing");
    assert_int_equal(d->severity, DIAG_WARNING);
    assert_true(text_has(d, "input 'x' [batch, 3, 224, 224] has dynamic dimensions [batch]"));
    assert_true(text_has(d, "--minShapes=x:1x3x224x224 --optShapes=x:1x3x224x224 --maxShapes=x:1x3x224x224"));
    assert_true(text_has(d, "for all dynamic inputs at once: --minShapes=x:1x3x224x224,mask:1x1"));
    free_check(&c);
}

static void test_check_symbol_conflict(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_SHAPES};
    const char *s[] = {"x:8x3x224x224,mask:4x16"};
    run_check(&c, 1, f, s);
    assert_true(text_has(find(&c, "profile-symbol-conflict"),
                         "dimension 'batch' is 8 in input 'x' but 4 in input 'mask'"));
    free_check(&c);
}

static void test_check_shapes_outside_profile(void **state) {
    (void)state;
    checked c;
    const int f[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX, BUILD_FLAG_SHAPES};
    const char *s[] = {"mask:1x1", "mask:2x8", "mask:4x16", "mask:8x8"};
    run_check(&c, 4, f, s);
    assert_true(text_has(find(&c, "profile-shapes-outside"), "dimension 0 = 8 but profile 0 allows 1..4"));
    free_check(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_basic),
        cmocka_unit_test(test_parse_quoted_and_colons),
        cmocka_unit_test(test_parse_scalars),
        cmocka_unit_test(test_parse_spaces),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_profiles_select_and_duplicates),
        cmocka_unit_test(test_check_valid_profile),
        cmocka_unit_test(test_check_opt_only_and_shapes_fill),
        cmocka_unit_test(test_check_unknown_input),
        cmocka_unit_test(test_check_rank_and_static),
        cmocka_unit_test(test_check_order),
        cmocka_unit_test(test_check_missing_partner),
        cmocka_unit_test(test_check_uncovered_and_static),
        cmocka_unit_test(test_check_symbol_conflict),
        cmocka_unit_test(test_check_shapes_outside_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
