/* infer_internal.h - state of one inference run, shared by the driver (infer.c) and the
 * helpers op files call (infer_ctx.c). Nothing outside src/ir includes this. */
#ifndef KILN_IR_INFER_INTERNAL_H
#define KILN_IR_INFER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/hashmap.h"
#include "diag/diag.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/ops/ops.h"

typedef struct vstate {
    bool poisoned; /* inference failed here (reported): consumers stay silent */
    ir_known *kv;     /* known small value, NULL when not known */
} vstate;

typedef struct gstate {
    ir_graph *g;
    vstate *v; /* per value id */
    int32_t n;
} gstate;

struct infer_pass {
    ir_model *m;
    diag_list *diags;
    const ir_infer_options *opts;
    kiln_error *err;
    arena a; /* per-run scratch: value states, known values */
    gstate *gs; /* one per model->graphs entry */
    int32_t n_gs;
    hashmap unk; /* unknown op name -> index */
    const char **unk_names;
    int32_t *unk_counts;
    int32_t n_unk, cap_unk;
    int depth;
    bool oom;
};

vstate *infer_vstate(infer_pass *p, const ir_graph *g, int32_t v);
ir_known *infer_kv_from_tensor(infer_pass *p, const ir_tensor *t);

#endif
