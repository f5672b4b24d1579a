/* model_internal.h - what a public kiln_model handle holds, for the CLI and other modules. */
#ifndef KILN_API_MODEL_INTERNAL_H
#define KILN_API_MODEL_INTERNAL_H

#include "core/status.h"
#include "diag/diag.h"
#include "ir/graph.h"
#include "kiln/kiln.h"

struct kiln_model {
    ir_model *ir;     /* NULL when loading failed */
    kiln_error error; /* why loading failed */
    diag_list diags;  /* every structural problem found while loading */
};

static inline ir_model *kiln_model_ir(kiln_model *m) { return m ? m->ir : NULL; }

#endif
