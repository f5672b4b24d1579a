/* test_engine_format.c - engine file write/read: round trip, and rejection of truncated,
 * corrupted, foreign and incompatible files with messages that say what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "backends/cpu/cpu_kernel.h"
#include "engine/codec.h"
#include "engine/engine.h"
#include "engine_sample.h"

static uint8_t *sample_bytes(size_t *size) {
    engine_plan *p = sample_plan();
    uint8_t *buf = NULL;
    kiln_error err = {0};
    assert_int_equal(engine_write_mem(p, &buf, size, &err), KILN_OK);
    engine_plan_free(p);
    return buf;
}

static kiln_status try_read(const uint8_t *d, size_t n, uint64_t features, char **msg) {
    engine_read_options o = {.cpu_features = features, .display_name = "t.engine"};
    engine_plan *p = NULL;
    kiln_error err = {0};
    kiln_status st = engine_read_mem(d, n, &o, &p, &err);
    if (st == KILN_OK) assert_non_null(p);
    else assert_null(p);
    engine_plan_free(p);
    if (msg) *msg = err.msg ? strdup(err.msg) : strdup("");
    kiln_err_clear(&err);
    return st;
}

static void test_round_trip(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = sample_bytes(&n);
    engine_read_options o = {.display_name = "t.engine"};
    engine_plan *p = NULL;
    kiln_error err = {0};
    assert_int_equal(engine_read_mem(buf, n, &o, &p, &err), KILN_OK);
    const ir_graph *g = p->model->graph;
    assert_int_equal(g->n_nodes, 3);
    assert_string_equal(g->nodes[0].name, "/fc/MatMul");
    assert_int_equal(p->model->n_graphs, 3);
    int32_t w = ir_graph_find(g, "W");
    const ir_tensor *t = g->values[w].init;
    assert_non_null(t);
    assert_int_equal(t->where, IR_DATA_MAPPED);
    assert_true((const uint8_t *)t->data > buf && (const uint8_t *)t->data < buf + n);
    assert_int_equal(((uintptr_t)((const uint8_t *)t->data - buf)) % 64, 0);
    assert_true(((const float *)t->data)[3] == 2.5f);
    const ir_tensor *bt = g->values[ir_graph_find(g, "b")].init;
    assert_int_equal(bt->where, IR_DATA_OWNED);
    assert_true(((const float *)bt->data)[2] == -1.0f);
    const ir_value *x = &g->values[ir_graph_find(g, "x")];
    assert_int_equal(x->type.dims[0].kind, IR_DIM_SYM);
    assert_string_equal(p->model->syms[x->type.dims[0].sym].name, "batch");
    const ir_node *ifn = &g->nodes[2];
    assert_ptr_equal(ir_node_attr(ifn, "then_branch")->g->parent, g);
    assert_string_equal(ir_node_attr(ifn, "labels")->t->strings[1].data, "dog");
    assert_int_equal(ir_node_attr(ifn, "pads")->ints[2], 3);
    assert_string_equal(p->layers[0].tactic, "gemm_blas");
    assert_int_equal(p->n_profiles, 1);
    assert_int_equal(p->profiles[0].inputs[0].max[0], 8);
    assert_int_equal(p->n_inputs, 2);
    assert_string_equal(p->inputs[0].dims[0].symbol, "batch");
    assert_int_equal(p->mem.weights_bytes, 1024);

    /* writing what was read gives the same bytes: nothing is lost or reinterpreted */
    uint8_t *again = NULL;
    size_t n2 = 0;
    assert_int_equal(engine_write_mem(p, &again, &n2, &err), KILN_OK);
    assert_int_equal(n2, n);
    assert_memory_equal(again, buf, n);
    free(again);
    engine_plan_free(p);

    /* metadata only: no graph, same facts */
    o.metadata_only = true;
    assert_int_equal(engine_read_mem(buf, n, &o, &p, &err), KILN_OK);
    assert_null(p->model);
    assert_string_equal(p->layers[2].name, "/gate/If");
    engine_plan_free(p);
    free(buf);
}

static void test_file_round_trip(void **state) {
    (void)state;
    engine_plan *p = sample_plan();
    kiln_error err = {0};
    char path[] = "/tmp/kiln_test_engine_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(engine_write_file(p, path, &err), KILN_OK);
    engine_plan_free(p);
    engine_plan *q = NULL;
    assert_int_equal(engine_read_file(path, NULL, &q, &err), KILN_OK);
    assert_true(q->model_owns_map);
    const ir_tensor *t = q->model->graph->values[ir_graph_find(q->model->graph, "W")].init;
    assert_true(((const float *)t->data)[0] == 1.0f);
    engine_plan_free(q);
    remove(path);
}

static void test_truncated_every_prefix(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = sample_bytes(&n);
    for (size_t len = 0; len < n; len++) {
        uint8_t *copy = malloc(len ? len : 1); /* exact size so ASan sees any over-read */
        memcpy(copy, buf, len);
        char *msg;
        assert_int_not_equal(try_read(copy, len, 0, &msg), KILN_OK);
        if (len > 0) {
            if (!strstr(msg, "truncated")) fprintf(stderr, "len %zu: %s\n", len, msg);
            assert_non_null(strstr(msg, "truncated"));
        }
        free(msg);
        free(copy);
    }
    free(buf);
}

static void test_corrupt_each_section(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = sample_bytes(&n);
    engine_read_options o = {.display_name = "t.engine"};
    engine_plan *p = NULL;
    kiln_error err = {0};
    assert_int_equal(engine_read_mem(buf, n, &o, &p, &err), KILN_OK);
    for (int32_t s = 0; s < p->n_sections; s++) {
        const engine_section_entry *e = &p->sections[s];
        if (!e->size) continue;
        uint64_t offs[3] = {e->offset, e->offset + e->size / 2, e->offset + e->size - 1};
        for (int k = 0; k < 3; k++) {
            buf[offs[k]] ^= 0x5a;
            char *msg;
            assert_int_equal(try_read(buf, n, 0, &msg), KILN_ERR_FORMAT);
            assert_non_null(strstr(msg, "corrupt"));
            assert_non_null(strstr(msg, engine_section_name(e->id)));
            free(msg);
            buf[offs[k]] ^= 0x5a;
        }
    }
    engine_plan_free(p);
    /* header and section table */
    for (size_t off = 0; off < 128 + 5 * 32; off += 7) {
        buf[off] ^= 0x01;
        char *msg;
        assert_int_not_equal(try_read(buf, n, 0, &msg), KILN_OK);
        free(msg);
        buf[off] ^= 0x01;
    }
    assert_int_equal(try_read(buf, n, 0, NULL), KILN_OK);
    free(buf);
}

static void fix_header_crc(uint8_t *b) {
    le_put_u32(b + ENGINE_OFF_HEADER_CRC, (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, ENGINE_OFF_HEADER_CRC));
}

static void test_incompatible(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = sample_bytes(&n);
    char *msg;
    /* another kiln version */
    le_put_u16(buf + ENGINE_OFF_VERSION, 0);
    le_put_u16(buf + ENGINE_OFF_VERSION + 2, 3);
    fix_header_crc(buf);
    assert_int_equal(try_read(buf, n, CPU_FEATURE_AVX2, &msg), KILN_ERR_INCOMPATIBLE);
    assert_non_null(strstr(msg, "built by kiln 0.3.0"));
    assert_non_null(strstr(msg, "this is kiln " KILN_VERSION_STRING));
    assert_non_null(strstr(msg, "kiln exec --onnx=sample.onnx --saveEngine=t.engine"));
    free(msg);
    le_put_u16(buf + ENGINE_OFF_VERSION + 2, KILN_VERSION_MINOR);
    le_put_u16(buf + ENGINE_OFF_VERSION, KILN_VERSION_MAJOR);
    /* built for AVX-512, loaded on an AVX2 machine */
    le_put_u64(buf + ENGINE_OFF_REQ_FEATURES, CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW | CPU_FEATURE_AVX2);
    fix_header_crc(buf);
    assert_int_equal(try_read(buf, n, CPU_FEATURE_AVX2 | CPU_FEATURE_FMA, &msg), KILN_ERR_INCOMPATIBLE);
    assert_non_null(strstr(msg, "for AVX-512 (avx512f avx512bw avx2)"));
    assert_non_null(strstr(msg, "on a CPU with avx2 fma (missing: avx512f avx512bw)"));
    assert_non_null(strstr(msg, "rebuild the engine on this machine"));
    free(msg);
    /* the same engine on a machine that has the features loads */
    assert_int_equal(try_read(buf, n, CPU_FEATURE_AVX2 | CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW, NULL),
                     KILN_OK);
    /* another format version */
    le_put_u32(buf + ENGINE_OFF_FORMAT, 7);
    fix_header_crc(buf);
    assert_int_equal(try_read(buf, n, 0, &msg), KILN_ERR_INCOMPATIBLE);
    assert_non_null(strstr(msg, "engine format 7"));
    assert_non_null(strstr(msg, "reads format 1"));
    free(msg);
    free(buf);
}

/* An engine from a kiln with more kernels: a node whose op this build has no kernel for
 * (in the main graph, or only inside a subgraph) fails at load, naming op and node. */
static void test_missing_kernel(void **state) {
    (void)state;
    for (int where = 0; where < 2; where++) {
        engine_plan *p = sample_plan();
        ir_graph *g = p->model->graph;
        ir_graph *target = g;
        if (where == 1) /* the If node's then-branch */
            for (int32_t i = 0; i < g->n_nodes; i++)
                if (!strcmp(g->nodes[i].op_type, "If")) target = g->nodes[i].attrs[0].g;
        assert_true(target != g || where == 0);
        target->nodes[0].op_type = "KilnFutureOp";
        char node_name[128];
        snprintf(node_name, sizeof node_name, "%s", target->nodes[0].name);
        uint8_t *buf = NULL;
        size_t n = 0;
        kiln_error err = {0};
        assert_int_equal(engine_write_mem(p, &buf, &n, &err), KILN_OK);
        engine_plan_free(p);
        char *msg;
        assert_int_equal(try_read(buf, n, ~0ull, &msg), KILN_ERR_INCOMPATIBLE);
        assert_non_null(strstr(msg, "KilnFutureOp"));
        assert_non_null(strstr(msg, node_name));
        assert_non_null(strstr(msg, "this kiln " KILN_VERSION_STRING));
        assert_non_null(strstr(msg, "--saveEngine=t.engine"));
        free(msg);
        /* inspect-style reads (metadata only) still work */
        engine_read_options o = {.metadata_only = true, .skip_compat = true, .display_name = "t.engine"};
        engine_plan *q = NULL;
        assert_int_equal(engine_read_mem(buf, n, &o, &q, &err), KILN_OK);
        engine_plan_free(q);
        free(buf);
    }
}

static void test_foreign(void **state) {
    (void)state;
    char *msg;
    const uint8_t onnx[] = {0x08, 0x08, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'};
    assert_int_equal(try_read(onnx, sizeof onnx, 0, &msg), KILN_ERR_FORMAT);
    assert_non_null(strstr(msg, "is an ONNX model, not a kiln engine"));
    assert_non_null(strstr(msg, "--onnx="));
    free(msg);
    const char *lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n";
    assert_int_equal(try_read((const uint8_t *)lfs, strlen(lfs), 0, &msg), KILN_ERR_FORMAT);
    assert_non_null(strstr(msg, "Git LFS pointer"));
    free(msg);
    uint8_t rnd[300];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 24);
    rnd[0] = 0xff;
    assert_int_equal(try_read(rnd, sizeof rnd, 0, &msg), KILN_ERR_FORMAT);
    assert_non_null(strstr(msg, "not a kiln engine: it starts with bytes ff"));
    free(msg);
    assert_int_equal(try_read(rnd, 0, 0, &msg), KILN_ERR_FORMAT);
    assert_non_null(strstr(msg, "empty"));
    free(msg);
}

/* With checksums skipped (as the fuzz target does), random byte mutations must still be
 * rejected or accepted cleanly: the structural checks alone keep the reader safe. */
static void test_mutations_without_checksums(void **state) {
    (void)state;
    size_t n;
    uint8_t *buf = sample_bytes(&n);
    uint8_t *copy = malloc(n);
    uint32_t s = 777;
    int rejected = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(copy, buf, n);
        int flips = 1 + (int)((s = s * 1664525u + 1013904223u) >> 29);
        for (int k = 0; k < flips; k++) {
            s = s * 1664525u + 1013904223u;
            size_t off = 128 + 5 * 32 + (size_t)(s >> 8) % (n - 128 - 5 * 32);
            s = s * 1664525u + 1013904223u;
            copy[off] = (uint8_t)(s >> 24);
        }
        engine_read_options o = {.skip_checksums = true, .display_name = "m"};
        engine_plan *p = NULL;
        kiln_error err = {0};
        if (engine_read_mem(copy, n, &o, &p, &err) != KILN_OK) {
            rejected++;
            assert_non_null(err.msg);
        }
        engine_plan_free(p);
        kiln_err_clear(&err);
    }
    assert_true(rejected > 0);
    free(copy);
    free(buf);
}

int main(void) {
    const char *seeds = getenv("KILN_WRITE_ENGINE_SEED");
    if (seeds) { /* regenerates tests/fuzz/seeds/engine_reader/sample.engine */
        engine_plan *p = sample_plan();
        kiln_error err = {0};
        kiln_status st = engine_write_file(p, seeds, &err);
        engine_plan_free(p);
        return st == KILN_OK ? 0 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),           cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_truncated_every_prefix), cmocka_unit_test(test_corrupt_each_section),
        cmocka_unit_test(test_incompatible),         cmocka_unit_test(test_foreign),
        cmocka_unit_test(test_missing_kernel),
        cmocka_unit_test(test_mutations_without_checksums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
