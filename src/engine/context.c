/* context.c - execution contexts over engines (see context.h). The graph in an engine has
 * already been through the builder's passes, so the session is created without them. */
#include "engine/context.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "runtime/session.h"

struct engine_context {
    engine_plan *plan;
    rt_session *session;
    int32_t profile;
};

kiln_status engine_context_create(engine_plan *plan, const engine_context_options *o, engine_context **out,
                                  kiln_error *err) {
    *out = NULL;
    if (!plan || !plan->model) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "the engine has no graph loaded");
    /* the weights are read from here on: wait for a deferred checksum (engine.h) */
    kiln_status st = engine_plan_weights_ready(plan, NULL, err);
    if (st != KILN_OK) return st;
    engine_context *c = calloc(1, sizeof *c);
    if (!c) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    c->plan = plan;
    c->profile = o && o->profile_index > 0 ? o->profile_index : 0;
    if (plan->n_profiles && c->profile >= plan->n_profiles) {
        int32_t bad = c->profile;
        free(c);
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "profile %d does not exist: the engine has %d profile%s (0..%d)",
                            bad, plan->n_profiles, plan->n_profiles == 1 ? "" : "s", plan->n_profiles - 1);
    }
    rt_session_options so = rt_session_options_default();
    so.backend = "cpu";
    so.threads = o ? o->threads : 0;
    so.profile = o && o->profile;
    so.run_passes = false;
    if (plan->header.backend == ENGINE_BACKEND_CUDA) {
        /* the precision and workspace the engine was built with */
        so.backend = "cuda";
        so.fp16 = (plan->meta.precision_flags & (ENGINE_PREC_FLAG_FP16 | ENGINE_PREC_FLAG_BEST)) != 0;
        so.no_tf32 = (plan->meta.precision_flags & ENGINE_PREC_FLAG_NO_TF32) != 0;
        so.workspace_bytes = plan->meta.workspace_limit;
        so.no_device_graph = o && o->no_device_graph;
        so.quiet_fallback = o && o->quiet_fallback;
    }
    st = rt_session_create(plan->model, &so, &c->session, err);
    if (st != KILN_OK) {
        free(c);
        return st;
    }
    *out = c;
    return KILN_OK;
}

void engine_context_free(engine_context *c) {
    if (!c) return;
    rt_session_free(c->session);
    free(c);
}

static void dims_x(strbuf *sb, const int64_t *d, int32_t rank) {
    for (int32_t i = 0; i < rank; i++) sb_printf(sb, "%s%" PRId64, i ? "x" : "", d[i]);
}

kiln_status engine_check_profile(const engine_plan *plan, int32_t profile, const char *const *names,
                                 const rt_value *const *inputs, int32_t n, kiln_error *err) {
    if (!plan->n_profiles) return KILN_OK;
    const engine_profile *pr = &plan->profiles[profile];
    for (int32_t i = 0; i < n; i++) {
        const engine_profile_input *pi = engine_profile_find(pr, names[i]);
        if (!pi || !inputs[i] || inputs[i]->kind != IR_TYPE_TENSOR) continue;
        const rt_tensor *t = &inputs[i]->t;
        if (t->rank != pi->rank)
            return kiln_err_set(err, KILN_ERR_SHAPE, "input '%s' has rank %d but the engine's profile %d has rank %d for it",
                                names[i], t->rank, profile, pi->rank);
        for (int32_t d = 0; d < t->rank; d++) {
            if (t->dims[d] >= pi->min[d] && t->dims[d] <= pi->max[d]) continue;
            strbuf sb;
            sb_init(&sb);
            dims_x(&sb, t->dims, t->rank);
            char *shape = sb_take(&sb);
            strbuf mn, mx;
            sb_init(&mn);
            sb_init(&mx);
            dims_x(&mn, pi->min, pi->rank);
            dims_x(&mx, pi->max, pi->rank);
            kiln_err_set(err, KILN_ERR_SHAPE,
                         "input '%s' shape %s is outside the engine's profile %d: dimension %d is %" PRId64
                         ", the profile allows %" PRId64 "..%" PRId64 " (min %s, max %s).\n"
                         "hint: run with a shape inside the profile, or rebuild the engine with a profile that "
                         "covers it, e.g. --minShapes=%s:%s --maxShapes=%s:%s",
                         names[i], shape ? shape : "?", profile, d, t->dims[d], pi->min[d], pi->max[d], sb_cstr(&mn),
                         sb_cstr(&mx), names[i], t->dims[d] < pi->min[d] ? (shape ? shape : "?") : sb_cstr(&mn),
                         names[i], t->dims[d] > pi->max[d] ? (shape ? shape : "?") : sb_cstr(&mx));
            free(shape);
            sb_free(&mn);
            sb_free(&mx);
            return KILN_ERR_SHAPE;
        }
    }
    return KILN_OK;
}

kiln_status engine_context_run(engine_context *c, const char *const *names, const rt_value *const *inputs, int32_t n,
                               rt_value *outputs, kiln_error *err) {
    kiln_status st = engine_check_profile(c->plan, c->profile, names, inputs, n, err);
    if (st != KILN_OK) return st;
    return rt_session_run(c->session, names, inputs, n, outputs, err);
}

int32_t engine_context_n_outputs(const engine_context *c) { return rt_session_n_outputs(c->session); }
const char *engine_context_output_name(const engine_context *c, int32_t i) { return rt_session_output_name(c->session, i); }
rt_executor *engine_context_executor(engine_context *c) { return rt_session_executor(c->session); }
struct rt_session *engine_context_session(engine_context *c) { return c->session; }
