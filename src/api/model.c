/* model.c - the public model API: load (read + import + validate) and free. */
#include <stdlib.h>

#include "api/model_internal.h"
#include "ir/inline.h"
#include "ir/validate.h"
#include "onnx/onnx_load.h"

kiln_model_options kiln_model_options_default(void) {
    kiln_model_options o;
    o.check_external_data = 1;
    o.validate = 1;
    o.inline_functions = 1;
    return o;
}

static kiln_status finish_load(kiln_model *m, kiln_status st, const kiln_model_options *opts) {
    if (st == KILN_OK && opts->inline_functions) {
        st = ir_inline_functions(m->ir, NULL, &m->error);
        /* also a diagnostic, so kiln check lists it with everything else it finds */
        if (st != KILN_OK)
            diag_add(&m->diags, DIAG_ERROR, "function-inline", NULL, NULL, "%s", kiln_err_msg(&m->error));
    }
    if (st == KILN_OK && opts->validate) st = ir_validate(m->ir, &m->diags, &m->error);
    return st;
}

kiln_status kiln_model_load_file(const char *path, const kiln_model_options *opts, kiln_model **out) {
    kiln_model_options dflt = kiln_model_options_default();
    if (!opts) opts = &dflt;
    kiln_model *m = calloc(1, sizeof *m);
    if (out) *out = m;
    if (!m) return KILN_ERR_NOMEM;
    diag_list_init(&m->diags);
    if (!path) return kiln_err_set(&m->error, KILN_ERR_INVALID_ARG, "no model path given");
    kiln_status st = onnx_load_file(path, opts, &m->ir, &m->error);
    st = finish_load(m, st, opts);
    if (!out) kiln_model_free(m);
    return st;
}

kiln_status kiln_model_load_bytes(const void *data, size_t size, const char *display_name,
                                  const char *base_dir, const kiln_model_options *opts, kiln_model **out) {
    kiln_model_options dflt = kiln_model_options_default();
    if (!opts) opts = &dflt;
    kiln_model *m = calloc(1, sizeof *m);
    if (out) *out = m;
    if (!m) return KILN_ERR_NOMEM;
    diag_list_init(&m->diags);
    kiln_status st = onnx_load_bytes(data, size, display_name ? display_name : "<memory>", base_dir,
                                     opts, &m->ir, &m->error);
    st = finish_load(m, st, opts);
    if (!out) kiln_model_free(m);
    return st;
}

const char *kiln_model_errmsg(const kiln_model *m) { return m ? kiln_err_msg(&m->error) : "no model"; }

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    ir_model_free(m->ir);
    kiln_err_clear(&m->error);
    diag_list_free(&m->diags);
    free(m);
}
