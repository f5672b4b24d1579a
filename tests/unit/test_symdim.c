/* test_symdim.c - symbolic dim algebra: canonical forms (commutativity, folding, the
 * conv output formula), interning, rendering, equality, overflow and division by zero. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ir/symdim.h"

static const char *S(ir_model *m, ir_dim d) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    return ir_dim_str(m, d, buf[k], sizeof buf[k]);
}

static void test_commutative_and_interned(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim b = ir_dim_leaf(m, "batch"), s = ir_dim_leaf(m, "seq_len");
    ir_dim bs = ir_dim_mul(m, b, s), sb = ir_dim_mul(m, s, b);
    assert_int_equal(bs.kind, IR_DIM_SYM);
    assert_int_equal(bs.sym, sb.sym);
    assert_string_equal(S(m, bs), "batch*seq_len");
    /* (b + s) + 1 == 1 + (s + b) */
    ir_dim x = ir_dim_add(m, ir_dim_add(m, b, s), ir_dim_const(1));
    ir_dim y = ir_dim_add(m, ir_dim_const(1), ir_dim_add(m, s, b));
    assert_int_equal(x.sym, y.sym);
    assert_string_equal(S(m, x), "batch+seq_len+1");
    /* distributivity: b*(s+2) == b*s + 2*b */
    ir_dim d1 = ir_dim_mul(m, b, ir_dim_add(m, s, ir_dim_const(2)));
    ir_dim d2 = ir_dim_add(m, bs, ir_dim_mul(m, ir_dim_const(2), b));
    assert_int_equal(ir_dim_eq(m, d1, d2), IR_DIM_EQ);
    assert_int_equal(d1.sym, d2.sym);
    int32_t n = m->n_syms;
    (void)ir_dim_mul(m, s, b);
    assert_int_equal(m->n_syms, n); /* no new symbol for an existing expression */
    ir_model_free(m);
}

static void test_folding_and_identities(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim h = ir_dim_leaf(m, "H");
    ir_dim r = ir_dim_add(m, ir_dim_const(2), ir_dim_const(3));
    assert_true(ir_dim_is(r, 5));
    ir_dim x1 = ir_dim_mul(m, h, ir_dim_const(1));
    assert_int_equal(x1.kind, IR_DIM_SYM);
    assert_int_equal(x1.sym, h.sym);
    ir_dim x0 = ir_dim_add(m, h, ir_dim_const(0));
    assert_int_equal(x0.sym, h.sym);
    assert_true(ir_dim_is(ir_dim_mul(m, h, ir_dim_const(0)), 0));
    assert_true(ir_dim_is(ir_dim_sub(m, h, h), 0));
    ir_dim hh = ir_dim_sub(m, ir_dim_add(m, h, ir_dim_const(7)), ir_dim_const(7));
    assert_int_equal(hh.sym, h.sym);
    ir_model_free(m);
}

static void test_conv_formula(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim h = ir_dim_leaf(m, "H");
    /* (H + 2*1 - 3) / 2 + 1 */
    ir_dim num = ir_dim_sub(m, ir_dim_add(m, h, ir_dim_const(2)), ir_dim_const(3));
    ir_dim out = ir_dim_add(m, ir_dim_floordiv(m, num, ir_dim_const(2)), ir_dim_const(1));
    /* normal form keeps the constant remainder in [0, s): (H-1)/2+1 == (H+1)/2 */
    assert_string_equal(S(m, out), "(H+1)/2");
    ir_dim k7 = ir_dim_add(m, ir_dim_floordiv(m, ir_dim_sub(m, h, ir_dim_const(7)), ir_dim_const(2)), ir_dim_const(1));
    assert_string_equal(S(m, k7), "(H+1)/2-3");
    ir_dim h3 = ir_dim_floordiv(m, ir_dim_add(m, h, ir_dim_const(2)), ir_dim_const(3));
    assert_string_equal(S(m, h3), "(H+2)/3");
    /* stride 1, pad 1, kernel 3 keeps H exactly */
    ir_dim same = ir_dim_add(m, ir_dim_floordiv(m, num, ir_dim_const(1)), ir_dim_const(1));
    assert_int_equal(same.sym, h.sym);
    /* the same formula computed twice is the same symbol */
    ir_dim again = ir_dim_add(m, ir_dim_floordiv(m, ir_dim_sub(m, h, ir_dim_const(1)), ir_dim_const(2)), ir_dim_const(1));
    assert_int_equal(again.sym, out.sym);
    /* (2H + 4)/2 = H + 2 exactly */
    ir_dim e = ir_dim_floordiv(m, ir_dim_add(m, ir_dim_mul(m, ir_dim_const(2), h), ir_dim_const(4)), ir_dim_const(2));
    assert_string_equal(S(m, e), "H+2");
    /* ceil(H/2) == floor((H+1)/2) */
    ir_dim c1 = ir_dim_ceildiv(m, h, ir_dim_const(2));
    ir_dim c2 = ir_dim_floordiv(m, ir_dim_add(m, h, ir_dim_const(1)), ir_dim_const(2));
    assert_int_equal(c1.sym, c2.sym);
    assert_string_equal(S(m, c1), "(H+1)/2");
    ir_model_free(m);
}

static void test_exact_division(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim b = ir_dim_leaf(m, "batch"), s = ir_dim_leaf(m, "seq_len");
    ir_dim total = ir_dim_mul(m, ir_dim_mul(m, b, s), ir_dim_const(768));
    ir_dim q;
    assert_true(ir_dim_div_exact(m, total, ir_dim_const(768), &q));
    assert_string_equal(S(m, q), "batch*seq_len");
    assert_true(ir_dim_div_exact(m, total, ir_dim_mul(m, b, ir_dim_const(12)), &q));
    assert_string_equal(S(m, q), "64*seq_len");
    assert_false(ir_dim_div_exact(m, total, ir_dim_const(7), &q));
    ir_dim f = ir_dim_floordiv(m, ir_dim_mul(m, b, s), s);
    assert_int_equal(f.sym, b.sym);
    /* mod */
    ir_dim odd = ir_dim_add(m, ir_dim_mul(m, ir_dim_const(2), b), ir_dim_const(1));
    assert_true(ir_dim_is(ir_dim_mod(m, odd, ir_dim_const(2)), 1));
    assert_true(ir_dim_is(ir_dim_mod(m, ir_dim_const(-7), ir_dim_const(3)), 2));
    assert_true(ir_dim_is(ir_dim_floordiv(m, ir_dim_const(-7), ir_dim_const(2)), -4));
    ir_model_free(m);
}

static void test_equality(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim b = ir_dim_leaf(m, "batch"), s = ir_dim_leaf(m, "seq_len");
    assert_int_equal(ir_dim_eq(m, ir_dim_const(64), ir_dim_const(128)), IR_DIM_NE);
    assert_int_equal(ir_dim_eq(m, ir_dim_const(64), ir_dim_const(64)), IR_DIM_EQ);
    assert_int_equal(ir_dim_eq(m, b, ir_dim_add(m, b, ir_dim_const(1))), IR_DIM_NE);
    assert_int_equal(ir_dim_eq(m, b, s), IR_DIM_MAYBE);
    assert_int_equal(ir_dim_eq(m, b, ir_dim_const(4)), IR_DIM_MAYBE);
    assert_int_equal(ir_dim_eq(m, ir_dim_unknown(), ir_dim_const(4)), IR_DIM_MAYBE);
    assert_int_equal(ir_dim_eq(m, ir_dim_unknown(), ir_dim_unknown()), IR_DIM_MAYBE);
    /* min/max with a provable order simplify */
    ir_dim mx = ir_dim_max(m, b, ir_dim_add(m, b, ir_dim_const(1)));
    assert_string_equal(S(m, mx), "batch+1");
    ir_dim mn = ir_dim_min(m, s, b), mn2 = ir_dim_min(m, b, s);
    assert_int_equal(mn.sym, mn2.sym);
    assert_string_equal(S(m, mn), "min(batch, seq_len)");
    ir_model_free(m);
}

static void test_unknown_overflow_divzero(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    ir_dim b = ir_dim_leaf(m, "batch");
    assert_int_equal(ir_dim_add(m, ir_dim_const(INT64_MAX), ir_dim_const(1)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_mul(m, ir_dim_const(INT64_MAX / 2), ir_dim_const(3)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_mul(m, b, ir_dim_const(INT64_MAX)).kind, IR_DIM_SYM);
    assert_int_equal(ir_dim_mul(m, ir_dim_mul(m, b, ir_dim_const(INT64_MAX)), ir_dim_const(2)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_floordiv(m, b, ir_dim_const(0)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_mod(m, ir_dim_const(5), ir_dim_const(0)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_floordiv(m, ir_dim_const(INT64_MIN), ir_dim_const(-1)).kind, IR_DIM_UNKNOWN);
    assert_int_equal(ir_dim_add(m, b, ir_dim_unknown()).kind, IR_DIM_UNKNOWN);
    assert_true(ir_dim_is(ir_dim_mul(m, ir_dim_unknown(), ir_dim_const(0)), 0));
    /* a product of many symbols is bounded, not unbounded growth */
    ir_dim acc = ir_dim_const(1);
    char name[16];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "s%d", i);
        acc = ir_dim_mul(m, acc, ir_dim_leaf(m, name));
    }
    assert_int_equal(acc.kind, IR_DIM_UNKNOWN);
    /* (a+b)^k blows past the term limit -> unknown, not a crash */
    ir_dim sum = ir_dim_add(m, b, ir_dim_leaf(m, "s1"));
    ir_dim p = sum;
    for (int i = 0; i < 6; i++) p = ir_dim_mul(m, p, ir_dim_add(m, sum, ir_dim_leaf(m, "s2")));
    assert_int_equal(p.kind, IR_DIM_UNKNOWN);
    ir_model_free(m);
}

static void test_leaf_name_collision(void **state) {
    (void)state;
    ir_model *m = ir_model_new();
    /* a hostile dim_param spelled like an internal key must not be mistaken for it */
    ir_dim a = ir_dim_leaf(m, "a"), b = ir_dim_leaf(m, "b");
    char key[64];
    snprintf(key, sizeof key, "\x1f%d:s%d,s%d", (int)IR_SYM_MUL, a.sym, b.sym);
    ir_dim evil = ir_dim_leaf(m, key);
    ir_dim ab = ir_dim_mul(m, a, b);
    assert_int_not_equal(ab.sym, evil.sym);
    assert_int_equal(m->syms[ab.sym].op, IR_SYM_MUL);
    assert_true(ir_dim_is_leaf(m, evil));
    ir_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commutative_and_interned), cmocka_unit_test(test_folding_and_identities),
        cmocka_unit_test(test_conv_formula), cmocka_unit_test(test_exact_division),
        cmocka_unit_test(test_equality), cmocka_unit_test(test_unknown_overflow_divzero),
        cmocka_unit_test(test_leaf_name_collision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
