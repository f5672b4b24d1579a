/* fold_constants.c - runs nodes whose inputs are all constants once, at build time, and
 * replaces them with initializers (Constant nodes, shape arithmetic on weights, ...).
 *
 * The CPU kernels compute the values, so folding agrees with running. A size budget
 * (build_pass_options.fold_max_bytes, 16 MiB by default) keeps folding from turning a
 * tiny model into a huge one: the ops that expand their inputs (ConstantOfShape,
 * Expand, Tile, Range) are sized from their inputs before running, and every other
 * kernel runs under rt_tensor_set_alloc_limit(budget), so an over-budget output fails
 * before any memory is allocated and the node is simply left in the graph. Random ops
 * and nodes with subgraphs are never folded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"
#include "build/passes/pass_util.h"
#include "build/passes/passes.h"
#include "onnx/onnx_load.h"

static bool never_fold(const ir_node *n) {
    static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Bernoulli", "Multinomial"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(n->op_type, ops[i])) return true;
    return n->domain[0] != 0 || pass_has_subgraph(n);
}

static bool read_i64s(const ir_tensor *t, int64_t *out, int64_t max, int64_t *n) {
    if (!t || (t->dtype != KILN_DTYPE_INT64 && t->dtype != KILN_DTYPE_INT32) || (int64_t)t->count > max ||
        (t->count && !t->data))
        return false;
    for (uint64_t i = 0; i < t->count; i++)
        out[i] = t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *n = (int64_t)t->count;
    return true;
}

/* Output element count of the expanding ops, from their (constant) inputs; -1 = unknown,
 * INT64_MAX = overflow. */
static int64_t expanded_count(const ir_graph *g, const ir_node *n) {
    int64_t v[RT_MAX_RANK], m = 0;
    double c = 1;
    if (!strcmp(n->op_type, "ConstantOfShape")) {
        if (!read_i64s(pass_const(g, n->inputs[0]), v, RT_MAX_RANK, &m)) return INT64_MAX;
        for (int64_t i = 0; i < m; i++) c *= v[i] > 0 ? (double)v[i] : 0;
    } else if (!strcmp(n->op_type, "Expand")) {
        const ir_tensor *x = pass_const(g, n->inputs[0]);
        if (n->n_inputs < 2 || !read_i64s(pass_const(g, n->inputs[1]), v, RT_MAX_RANK, &m) || !x) return INT64_MAX;
        int64_t r = m > x->rank ? m : x->rank;
        for (int64_t i = 0; i < r; i++) {
            int64_t a = i - (r - m) >= 0 ? v[i - (r - m)] : 1;
            int64_t b = i - (r - x->rank) >= 0 ? x->dims[i - (r - x->rank)] : 1;
            c *= (double)(a > b ? a : b);
        }
    } else if (!strcmp(n->op_type, "Tile")) {
        const ir_tensor *x = pass_const(g, n->inputs[0]);
        if (n->n_inputs < 2 || !read_i64s(pass_const(g, n->inputs[1]), v, RT_MAX_RANK, &m) || !x) return INT64_MAX;
        c = (double)x->count;
        for (int64_t i = 0; i < m; i++) c *= v[i] > 0 ? (double)v[i] : 0;
    } else if (!strcmp(n->op_type, "Range")) {
        double s[3];
        for (int k = 0; k < 3; k++) {
            const ir_tensor *t = k < n->n_inputs ? pass_const(g, n->inputs[k]) : NULL;
            double x;
            if (!t || t->count != 1 || !t->data) return INT64_MAX;
            switch (t->dtype) {
            case KILN_DTYPE_FLOAT: x = *(const float *)t->data; break;
            case KILN_DTYPE_DOUBLE: x = *(const double *)t->data; break;
            case KILN_DTYPE_INT64: x = (double)*(const int64_t *)t->data; break;
            case KILN_DTYPE_INT32: x = *(const int32_t *)t->data; break;
            case KILN_DTYPE_INT16: x = *(const int16_t *)t->data; break;
            default: return INT64_MAX;
            }
            s[k] = x;
        }
        if (s[2] == 0 || !isfinite(s[0]) || !isfinite(s[1]) || !isfinite(s[2])) return INT64_MAX;
        c = ceil((s[1] - s[0]) / s[2]);
        if (c < 0) c = 0;
    } else {
        return -1;
    }
    return c > 9e18 ? INT64_MAX : (int64_t)c;
}

kiln_status build_pass_fold_constants(ir_model *model, const build_pass_options *opts, build_pass_stats *stats,
                                      kiln_error *err) {
    ir_graph *g = model->graph;
    cpu_threadpool *pool = NULL;
    kiln_status st = cpu_threadpool_create(1, &pool, err);
    if (st != KILN_OK) return st;
    bool *dead = calloc((size_t)g->n_nodes + 1, sizeof *dead);
    if (!dead) {
        cpu_threadpool_free(pool);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory in a graph pass");
    }
    uint64_t budget = opts->fold_max_bytes;
    uint64_t prev_limit = rt_tensor_alloc_limit();
    int32_t folded = 0;
    for (int32_t i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        ir_node *n = &g->nodes[i];
        if (never_fold(n) || n->n_outputs < 1 || n->n_inputs > 64 || n->n_outputs > 16) continue;
        bool all_const = true;
        for (int32_t k = 0; k < n->n_inputs && all_const; k++) {
            int32_t v = n->inputs[k];
            if (v < 0) continue;
            ir_tensor *t = g->values[v].init;
            if (t && t->where == IR_DATA_EXTERNAL && !t->data && t->count) {
                kiln_error e = {0};
                if (onnx_tensor_load_external(model, t, &e) != KILN_OK) t = NULL;
                kiln_err_clear(&e);
            }
            all_const = pass_const(g, v) != NULL;
        }
        if (!all_const) continue;
        int64_t opset = n->opset > 0 ? n->opset : ir_model_opset(model, n->domain);
        cpu_kernel_fn fn = cpu_kernel_find(n->domain, n->op_type, opset);
        if (!fn) continue;
        int64_t cnt = expanded_count(g, n);
        if (cnt == INT64_MAX || (cnt >= 0 && (uint64_t)cnt > budget)) {
            /* more elements than budget bytes: over budget whatever the dtype */
            stats->fold_refused++;
            continue;
        }
        rt_value ins_v[64];
        const rt_value *ins[64];
        rt_value outs[16];
        memset(outs, 0, sizeof outs);
        bool ok = true;
        for (int32_t k = 0; k < n->n_inputs && ok; k++) {
            rt_value_init(&ins_v[k]);
            ins[k] = NULL;
            if (n->inputs[k] < 0) continue;
            kiln_error e = {0};
            ok = rt_tensor_from_ir(rt_value_as_tensor(&ins_v[k]), g->values[n->inputs[k]].init, &e) == KILN_OK;
            kiln_err_clear(&e);
            ins[k] = &ins_v[k];
        }
        void *state = NULL;
        void (*state_free)(void *) = NULL;
        kiln_error e = {0};
        if (ok) {
            cpu_kernel_ctx ctx;
            memset(&ctx, 0, sizeof ctx);
            ctx.model = model;
            ctx.graph = g;
            ctx.node = n;
            ctx.pool = pool;
            ctx.err = &e;
            ctx.state = &state;
            ctx.state_free = &state_free;
            rt_tensor_set_alloc_limit(budget);
            ok = fn(&ctx, ins, n->n_inputs, outs, n->n_outputs) == KILN_OK;
            rt_tensor_set_alloc_limit(prev_limit);
            if (!ok && e.code == KILN_ERR_LIMIT) stats->fold_refused++;
        }
        kiln_err_clear(&e);
        if (state && state_free) state_free(state);
        for (int32_t k = 0; k < n->n_outputs && ok; k++)
            ok = n->outputs[k] < 0 || (outs[k].kind == IR_TYPE_TENSOR && outs[k].t.nbytes <= budget);
        for (int32_t k = 0; k < n->n_outputs && ok && st == KILN_OK; k++)
            if (n->outputs[k] >= 0) st = pass_set_initializer(g, n->outputs[k], &outs[k].t, err);
        for (int32_t k = 0; k < n->n_outputs; k++) rt_value_release(&outs[k]);
        for (int32_t k = 0; k < n->n_inputs; k++) rt_value_release(&ins_v[k]);
        if (ok && st == KILN_OK) {
            dead[i] = true;
            folded++;
        }
    }
    if (st == KILN_OK && folded) pass_remove_nodes(g, dead);
    stats->folded += folded;
    free(dead);
    cpu_threadpool_free(pool);
    return st;
}
