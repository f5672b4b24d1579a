/* engine_plan.c - helpers that fill an engine_plan from its graph (I/O descriptions) and
 * look things up in it; shared by the builder, the public engine API and inspect. */
#include <string.h>

#include "engine/engine.h"

static kiln_status describe(engine_plan *p, const ir_graph *g, const int32_t *ids, int32_t n, engine_io **out,
                            int32_t *n_out, bool skip_init, kiln_error *err) {
    engine_io *io = ARENA_ARRAY(&p->arena, engine_io, n ? n : 1);
    if (!io) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const ir_value *v = &g->values[ids[i]];
        if (skip_init && (v->flags & IR_VALUE_INITIALIZER)) continue;
        engine_io *e = &io[k++];
        e->name = arena_strdup(&p->arena, v->name);
        e->dtype = v->type.kind == IR_TYPE_TENSOR ? (uint32_t)v->type.dtype : 0;
        e->rank = v->type.dims ? v->type.rank : -1;
        e->dims = ARENA_ARRAY(&p->arena, engine_dim, e->rank > 0 ? e->rank : 1);
        if (!e->name || !e->dims) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        for (int32_t d = 0; d < e->rank; d++) {
            ir_dim dim = v->type.dims[d];
            e->dims[d].kind = (uint8_t)dim.kind;
            e->dims[d].value = dim.kind == IR_DIM_CONST ? dim.value : 0;
            e->dims[d].symbol = "";
            if (dim.kind == IR_DIM_SYM && dim.sym >= 0 && dim.sym < g->model->n_syms) {
                e->dims[d].symbol = arena_strdup(&p->arena, g->model->syms[dim.sym].name);
                if (!e->dims[d].symbol) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
            }
        }
    }
    *out = io;
    *n_out = k;
    return KILN_OK;
}

kiln_status engine_plan_describe_io(engine_plan *p, kiln_error *err) {
    const ir_graph *g = p->model->graph;
    kiln_status st = describe(p, g, g->inputs, g->n_inputs, &p->inputs, &p->n_inputs, true, err);
    if (st == KILN_OK) st = describe(p, g, g->outputs, g->n_outputs, &p->outputs, &p->n_outputs, false, err);
    return st;
}

const engine_profile_input *engine_profile_find(const engine_profile *pr, const char *name) {
    for (int32_t i = 0; i < pr->n_inputs; i++)
        if (!strcmp(pr->inputs[i].name, name)) return &pr->inputs[i];
    return NULL;
}
