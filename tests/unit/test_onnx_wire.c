/* test_onnx_wire.c - the protobuf wire-format reader (src/onnx/wire.c) on hand-made bytes:
 * varints at their limits, fixed values, lengths past the end, skipping every wire type
 * (groups included) and the element counting used to size arrays. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "onnx/wire.h"

static pb_result varint(const uint8_t *b, uint64_t n, uint64_t *v, uint64_t *pos) {
    *pos = 0;
    return pb_read_varint(b, pos, n, v);
}

static void test_varint_values(void **state) {
    (void)state;
    uint64_t v, pos;
    const uint8_t one[] = {0x01};
    assert_int_equal(varint(one, 1, &v, &pos), PB_OK);
    assert_int_equal(v, 1);
    assert_int_equal(pos, 1);
    const uint8_t v300[] = {0xAC, 0x02};
    assert_int_equal(varint(v300, 2, &v, &pos), PB_OK);
    assert_int_equal(v, 300);
    assert_int_equal(pos, 2);
    /* -1 as int64 is the longest legal varint: 9 x 0xFF then 0x01. */
    const uint8_t max[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    assert_int_equal(varint(max, 10, &v, &pos), PB_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(pos, 10);
    assert_int_equal((int64_t)v, -1);
    /* A redundant but legal zero-padded encoding of 1. */
    const uint8_t padded[] = {0x81, 0x80, 0x00};
    assert_int_equal(varint(padded, 3, &v, &pos), PB_OK);
    assert_int_equal(v, 1);
}

static void test_varint_errors(void **state) {
    (void)state;
    uint64_t v, pos;
    const uint8_t eleven[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    assert_int_equal(varint(eleven, 11, &v, &pos), PB_ERR_VARINT_LONG);
    const uint8_t overflow[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02};
    assert_int_equal(varint(overflow, 10, &v, &pos), PB_ERR_VARINT_OVERFLOW);
    const uint8_t cut[] = {0x80, 0x80};
    assert_int_equal(varint(cut, 2, &v, &pos), PB_ERR_TRUNCATED);
    assert_int_equal(varint(cut, 0, &v, &pos), PB_ERR_TRUNCATED);
    /* The end limit is honoured even when more bytes follow in memory. */
    const uint8_t ok_after_end[] = {0x80, 0x01};
    assert_int_equal(varint(ok_after_end, 1, &v, &pos), PB_ERR_TRUNCATED);
}

static void test_fixed_and_len(void **state) {
    (void)state;
    /* field 1 fixed32 = 0x04030201, field 2 fixed64, field 3 "abc" */
    const uint8_t b[] = {0x0D, 1, 2, 3, 4, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1A, 3, 'a', 'b', 'c'};
    pb_cursor c = pb_cursor_make(b, 0, sizeof b);
    pb_field f;
    assert_int_equal(pb_next(&c, &f), PB_OK);
    assert_int_equal(f.num, 1);
    assert_int_equal(f.wire, PB_FIXED32);
    assert_int_equal(f.value, 0x04030201u);
    assert_int_equal(pb_next(&c, &f), PB_OK);
    assert_int_equal(f.num, 2);
    assert_true(f.value == 0x0807060504030201ull);
    assert_int_equal(pb_next(&c, &f), PB_OK);
    assert_int_equal(f.num, 3);
    assert_int_equal(f.wire, PB_LEN);
    assert_int_equal(f.tag_pos, 14);
    assert_int_equal(f.pos, 16);
    assert_int_equal(f.len, 3);
    assert_false(f.short_len);
    assert_memory_equal(b + f.pos, "abc", 3);
    assert_int_equal(pb_next(&c, &f), PB_DONE);

    /* fixed32 cut short */
    c = pb_cursor_make(b, 0, 3);
    assert_int_equal(pb_next(&c, &f), PB_ERR_TRUNCATED);
}

static void test_len_past_end(void **state) {
    (void)state;
    /* field 9 (raw_data) declares 4096 bytes, 3 present */
    const uint8_t b[] = {0x4A, 0x80, 0x20, 'x', 'y', 'z'};
    pb_cursor c = pb_cursor_make(b, 0, sizeof b);
    pb_field f;
    assert_int_equal(pb_next(&c, &f), PB_OK);
    assert_int_equal(f.num, 9);
    assert_true(f.short_len);
    assert_int_equal(f.len, 4096);
    assert_int_equal(f.avail, 3);
    assert_int_equal(f.pos, 3);
    assert_int_equal(pb_next(&c, &f), PB_DONE); /* the cursor moved to the end */
    /* a length whose varint is itself cut */
    const uint8_t b2[] = {0x4A, 0x80};
    c = pb_cursor_make(b2, 0, sizeof b2);
    assert_int_equal(pb_next(&c, &f), PB_ERR_TRUNCATED);
    /* a huge 64-bit length does not wrap around */
    const uint8_t b3[] = {0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 'a'};
    c = pb_cursor_make(b3, 0, sizeof b3);
    assert_int_equal(pb_next(&c, &f), PB_OK);
    assert_true(f.short_len);
    assert_int_equal(f.avail, 1);
}

static void test_skip_every_wire_type(void **state) {
    (void)state;
    const uint8_t b[] = {
        0x08, 0x96, 0x01,                    /* 1: varint 150 */
        0x11, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F,  /* 2: fixed64 */
        0x1A, 0x02, 0x08, 0x01,              /* 3: len */
        0x23,                                /* 4: start group */
        0x08, 0x05,                          /*    1: varint */
        0x2B, 0x0D, 1, 2, 3, 4, 0x2C,        /*    5: nested group holding a fixed32 */
        0x12, 0x01, 'q',                     /*    2: len */
        0x24,                                /* 4: end group */
        0x2D, 1, 0, 0, 0,                    /* 5: fixed32 */
        0xF8, 0xFF, 0xFF, 0xFF, 0x0F, 0x07,  /* 536870911 (max field number): varint 7 */
    };
    pb_cursor c = pb_cursor_make(b, 0, sizeof b);
    pb_field f;
    uint32_t nums[8];
    uint64_t last_value = 0;
    int n = 0;
    pb_result r;
    while ((r = pb_next(&c, &f)) == PB_OK && n < 8) {
        nums[n++] = f.num;
        last_value = f.value;
    }
    assert_int_equal(r, PB_DONE);
    assert_int_equal(n, 6);
    assert_int_equal(nums[0], 1);
    assert_int_equal(nums[1], 2);
    assert_int_equal(nums[2], 3);
    assert_int_equal(nums[3], 4);
    assert_int_equal(nums[4], 5);
    assert_int_equal(nums[5], PB_MAX_FIELD_NUMBER);
    assert_int_equal(last_value, 7);
}

static void test_bad_tags_and_groups(void **state) {
    (void)state;
    pb_cursor c;
    pb_field f;
    const uint8_t wt6[] = {0x0E, 0};
    c = pb_cursor_make(wt6, 0, sizeof wt6);
    assert_int_equal(pb_next(&c, &f), PB_ERR_WIRE_TYPE);
    const uint8_t wt7[] = {0x0F, 0};
    c = pb_cursor_make(wt7, 0, sizeof wt7);
    assert_int_equal(pb_next(&c, &f), PB_ERR_WIRE_TYPE);
    const uint8_t field0[] = {0x00, 0};
    c = pb_cursor_make(field0, 0, sizeof field0);
    assert_int_equal(pb_next(&c, &f), PB_ERR_FIELD_NUMBER);
    const uint8_t big[] = {0x80, 0x80, 0x80, 0x80, 0x10, 0}; /* field 2^29 */
    c = pb_cursor_make(big, 0, sizeof big);
    assert_int_equal(pb_next(&c, &f), PB_ERR_FIELD_NUMBER);
    const uint8_t lone_end[] = {0x0C};
    c = pb_cursor_make(lone_end, 0, sizeof lone_end);
    assert_int_equal(pb_next(&c, &f), PB_ERR_GROUP);
    const uint8_t unterminated[] = {0x0B, 0x08, 0x01};
    c = pb_cursor_make(unterminated, 0, sizeof unterminated);
    assert_int_equal(pb_next(&c, &f), PB_ERR_GROUP);
    const uint8_t mismatched[] = {0x0B, 0x14};
    c = pb_cursor_make(mismatched, 0, sizeof mismatched);
    assert_int_equal(pb_next(&c, &f), PB_ERR_GROUP);
    /* groups nested deeper than the limit are refused, without recursion */
    uint8_t deep[2 * PB_MAX_GROUP_DEPTH + 4];
    size_t k = 0;
    for (int i = 0; i < PB_MAX_GROUP_DEPTH + 1; i++) deep[k++] = 0x0B;
    for (int i = 0; i < PB_MAX_GROUP_DEPTH + 1 && k < sizeof deep; i++) deep[k++] = 0x0C;
    c = pb_cursor_make(deep, 0, k);
    assert_int_equal(pb_next(&c, &f), PB_ERR_GROUP);
}

static void test_count(void **state) {
    (void)state;
    const uint8_t b[] = {
        0x0A, 0x04, 0x01, 0xAC, 0x02, 0x05, /* 1: packed varints 1, 300, 5 */
        0x08, 0x07,                         /* 1: single varint */
        0x25, 0, 0, 0x80, 0x3F,             /* 4: single float */
        0x22, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, /* 4: packed two floats */
        0x32, 0x00,                         /* 6: empty bytes */
        0x32, 0x01, 'a',                    /* 6 */
    };
    pb_counts cnt;
    pb_count(b, 0, sizeof b, 1u << 1, 1u << 4, 0, &cnt);
    assert_int_equal(cnt.n[1], 2);
    assert_int_equal(cnt.elems[1], 4);
    assert_int_equal(cnt.n[4], 2);
    assert_int_equal(cnt.elems[4], 3);
    assert_int_equal(cnt.n[6], 2);
    /* counting stops at a wire error instead of reading past it */
    const uint8_t bad[] = {0x08, 0x01, 0x0F, 0x08, 0x01};
    pb_count(bad, 0, sizeof bad, 0, 0, 0, &cnt);
    assert_int_equal(cnt.n[1], 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_values),   cmocka_unit_test(test_varint_errors),
        cmocka_unit_test(test_fixed_and_len),   cmocka_unit_test(test_len_past_end),
        cmocka_unit_test(test_skip_every_wire_type), cmocka_unit_test(test_bad_tags_and_groups),
        cmocka_unit_test(test_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
