/* engine.c - the public builder / engine / context API (kiln.h) over the internal builder
 * (build/builder.h), engine files (engine/engine.h) and contexts (engine/context.h).
 * Handles carry their last error (SQLite's errmsg); freeing NULL is a no-op. Loading a
 * cuda engine checks the GPU it records against this one (engine_gpu.h), with the same
 * messages as kiln exec --loadEngine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/engine_gpu.h"
#include "api/model_internal.h"
#include "backends/cpu/cpu_kernel.h"
#include "build/builder.h"
#include "build/profile.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "ir/validate.h"
#include "onnx/onnx_load.h"

struct kiln_builder {
    kiln_error error;
    build_profile_set profiles;
    uint64_t workspace;
    int threads;
    uint32_t precision_flags;
    char *timing_cache;
};

struct kiln_engine {
    kiln_error error;
    engine_plan *plan;
};

struct kiln_context {
    kiln_error error;
    kiln_engine *engine;
    engine_context *ctx;
    int profile;
    int threads;
    int32_t n_in;
    const char **names;
    rt_value *inputs;
    int32_t n_out;
    rt_value *outputs;
};

static kiln_status reset(kiln_error *e) {
    kiln_err_clear(e);
    return KILN_OK;
}

kiln_status kiln_builder_create(kiln_builder **out) {
    if (!out) return KILN_ERR_INVALID_ARG;
    kiln_builder *b = calloc(1, sizeof *b);
    *out = b;
    if (!b) return KILN_ERR_NOMEM;
    build_profiles_init(&b->profiles);
    return KILN_OK;
}

void kiln_builder_free(kiln_builder *b) {
    if (!b) return;
    kiln_err_clear(&b->error);
    build_profiles_free(&b->profiles);
    free(b->timing_cache);
    free(b);
}

const char *kiln_builder_errmsg(const kiln_builder *b) { return b ? kiln_err_msg(&b->error) : "no builder"; }

kiln_status kiln_builder_set_workspace(kiln_builder *b, uint64_t bytes) {
    if (!b) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&b->error); /* the message is always the last call's */
    b->workspace = bytes;
    return reset(&b->error);
}

kiln_status kiln_builder_set_threads(kiln_builder *b, int threads) {
    if (!b) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&b->error); /* the message is always the last call's */
    if (threads < 0) return kiln_err_set(&b->error, KILN_ERR_INVALID_ARG, "threads must be >= 0 (0 = all CPUs)");
    b->threads = threads;
    return reset(&b->error);
}

kiln_status kiln_builder_allow_precision(kiln_builder *b, kiln_precision p) {
    if (!b) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&b->error); /* the message is always the last call's */
    switch (p) {
    case KILN_PRECISION_FP32: break;
    case KILN_PRECISION_FP16: b->precision_flags |= ENGINE_PREC_FLAG_FP16; break;
    case KILN_PRECISION_BF16: b->precision_flags |= ENGINE_PREC_FLAG_BF16; break;
    case KILN_PRECISION_INT8: b->precision_flags |= ENGINE_PREC_FLAG_INT8; break;
    default:
        return kiln_err_set(&b->error, KILN_ERR_UNSUPPORTED, "precision %d cannot be allowed on the CPU backend", (int)p);
    }
    return reset(&b->error);
}

kiln_status kiln_builder_add_shapes(kiln_builder *b, int profile, kiln_shape_point point, const char *spec) {
    if (!b) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&b->error);
    if (!spec) return kiln_err_set(&b->error, KILN_ERR_INVALID_ARG, "kiln_builder_add_shapes: no shape spec given (NULL)");
    kiln_status st = build_profiles_select(&b->profiles, profile, &b->error);
    if (st != KILN_OK) return st;
    static const build_shape_flag flags[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX, BUILD_FLAG_SHAPES};
    if ((int)point < 0 || (int)point > 3) return kiln_err_set(&b->error, KILN_ERR_INVALID_ARG, "bad shape point %d", (int)point);
    return build_profiles_add(&b->profiles, flags[point], spec, &b->error);
}

kiln_status kiln_builder_set_timing_cache(kiln_builder *b, const char *path) {
    if (!b) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&b->error); /* the message is always the last call's */
    free(b->timing_cache);
    b->timing_cache = path ? strdup(path) : NULL;
    if (path && !b->timing_cache) return kiln_err_set(&b->error, KILN_ERR_NOMEM, "out of memory");
    return reset(&b->error);
}

kiln_status kiln_builder_build(kiln_builder *b, const kiln_model *model, kiln_engine **out) {
    if (!b) return KILN_ERR_INVALID_ARG;
    if (out) *out = NULL;
    kiln_err_clear(&b->error);
    if (!model || !model->ir || !out)
        return kiln_err_set(&b->error, KILN_ERR_INVALID_ARG, "kiln_builder_build needs a loaded model and an output");
    /* The builder rewrites the graph, so it works on its own copy: re-import the model's
     * bytes (still mapped or owned by the caller; ir->path is only a display name for
     * models loaded from memory, so it is never reopened). */
    ir_model *ir = NULL;
    kiln_model_options mo = kiln_model_options_default();
    kiln_status st = onnx_load_bytes(model->ir->file_data, (size_t)model->ir->file_size,
                                     model->ir->path ? model->ir->path : "<memory>", model->ir->base_dir, &mo, &ir,
                                     &b->error);
    if (st != KILN_OK) return st;
    diag_list diags;
    diag_list_init(&diags);
    st = ir_validate(ir, &diags, &b->error);
    if (st != KILN_OK) {
        ir_model_free(ir);
        diag_list_free(&diags);
        return st;
    }
    build_options o = build_options_default();
    o.profiles = &b->profiles;
    o.workspace_limit = b->workspace;
    o.workspace_flag = "kiln_builder_set_workspace";
    o.threads = b->threads;
    o.precision_flags = b->precision_flags;
    o.timing_cache = b->timing_cache;
    o.cpu_features = cpu_features();
    o.source_model = model->ir->path;
    engine_plan *plan = NULL;
    st = build_engine(ir, &o, &diags, &plan, NULL, &b->error);
    if (st != KILN_OK && diags.n_errors) {
        strbuf sb;
        sb_init(&sb);
        for (int32_t i = 0; i < diags.n; i++)
            if (diags.items[i].severity == DIAG_ERROR) diag_render_text(&diags.items[i], &sb);
        kiln_err_prefix(&b->error, "%s", sb_cstr(&sb));
        sb_free(&sb);
    }
    diag_list_free(&diags);
    if (st != KILN_OK) return st;
    /* round-trip through the file format so a built engine is exactly a loadable one */
    uint8_t *bytes = NULL;
    size_t size = 0;
    st = engine_write_mem(plan, &bytes, &size, &b->error);
    engine_plan_free(plan);
    if (st != KILN_OK) return st;
    kiln_engine *e = calloc(1, sizeof *e);
    if (!e) {
        free(bytes);
        return kiln_err_set(&b->error, KILN_ERR_NOMEM, "out of memory");
    }
    /* the bytes were just written here and never left memory: no weights checksum */
    engine_read_options ro = {.cpu_features = cpu_features(), .display_name = "<built engine>", .skip_weights_crc = true};
    st = engine_read_mem(bytes, size, &ro, &e->plan, &b->error);
    if (st != KILN_OK) {
        free(bytes);
        free(e);
        return st;
    }
    /* the plan's model keeps pointing into `bytes`: hand them to the model to free */
    e->plan->model->file_mapping = bytes;
    e->plan->model->release_mapping = NULL;
    e->plan->map = bytes;
    e->plan->map_size = 0; /* not an mmap */
    *out = e;
    return KILN_OK;
}

/* ---- the GPU a cuda engine is checked against ---- */

static kiln_status real_gpu_probe(cuda_device_info *info, char *missing, size_t size) {
#if KILN_HAVE_CUDA
    kiln_error e = {0};
    kiln_status st = cuda_info_query(0, info, &e);
    if (st != KILN_OK) snprintf(missing, size, "this machine has no usable NVIDIA GPU (%s)", kiln_err_msg(&e));
    kiln_err_clear(&e);
    return st;
#else
    (void)info;
    snprintf(missing, size, "this kiln %s was built without the CUDA backend (CMake found no CUDA compiler)",
             KILN_VERSION_STRING);
    return KILN_ERR_UNSUPPORTED;
#endif
}

static kiln_api_gpu_probe_fn gpu_probe = real_gpu_probe;

void kiln_api_set_gpu_probe(kiln_api_gpu_probe_fn probe) { gpu_probe = probe ? probe : real_gpu_probe; }

/* The GPU fields of the read options for a cuda engine: the header (read alone, cheap)
 * says which backend; only a cuda engine makes the GPU be probed, so loading a CPU engine
 * never touches CUDA. A file or bytes that do not parse are left to the full read. */
typedef struct gpu_here {
    cuda_device_info info;
    char missing[640];
} gpu_here;

static void gpu_read_options(const char *path, const uint8_t *data, size_t size, const char *name,
                             engine_read_options *ro, gpu_here *g) {
    engine_read_options mo = {.metadata_only = true, .skip_compat = true, .display_name = name};
    engine_plan *mp = NULL;
    kiln_error e = {0};
    kiln_status st = path ? engine_read_file(path, &mo, &mp, &e) : engine_read_mem(data, size, &mo, &mp, &e);
    bool cuda = st == KILN_OK && mp->header.backend == ENGINE_BACKEND_CUDA;
    engine_plan_free(mp);
    kiln_err_clear(&e);
    if (!cuda) return;
    memset(g, 0, sizeof *g);
    if (gpu_probe(&g->info, g->missing, sizeof g->missing) == KILN_OK) {
        ro->gpu = &g->info;
    } else {
        if (!g->missing[0]) snprintf(g->missing, sizeof g->missing, "this machine has no usable NVIDIA GPU");
        ro->gpu_missing = g->missing;
    }
}

kiln_status kiln_engine_load_file(const char *path, kiln_engine **out) {
    kiln_engine *e = calloc(1, sizeof *e);
    if (out) *out = e;
    if (!e) return KILN_ERR_NOMEM;
    if (!path) return kiln_err_set(&e->error, KILN_ERR_INVALID_ARG, "no engine path given");
    engine_read_options ro = {.cpu_features = cpu_features(), .defer_weights_crc = true};
    gpu_here g;
    gpu_read_options(path, NULL, 0, path, &ro, &g);
    kiln_status st = engine_read_file(path, &ro, &e->plan, &e->error);
    if (!out) kiln_engine_free(e);
    return st;
}

kiln_status kiln_engine_load_bytes(const void *data, size_t size, const char *display_name, kiln_engine **out) {
    kiln_engine *e = calloc(1, sizeof *e);
    if (out) *out = e;
    if (!e) return KILN_ERR_NOMEM;
    if (!data && size) return kiln_err_set(&e->error, KILN_ERR_INVALID_ARG, "no engine bytes given (data is NULL)");
    static const uint8_t empty[1];
    engine_read_options ro = {.cpu_features = cpu_features(), .display_name = display_name ? display_name : "<memory>",
                              .defer_weights_crc = true};
    gpu_here g;
    gpu_read_options(NULL, data ? data : empty, data ? size : 0, ro.display_name, &ro, &g);
    kiln_status st = engine_read_mem(data ? data : empty, data ? size : 0, &ro, &e->plan, &e->error);
    if (!out) kiln_engine_free(e);
    return st;
}

kiln_status kiln_engine_save_file(kiln_engine *e, const char *path) {
    if (!e) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&e->error);
    if (!e->plan || !path)
        return kiln_err_set(&e->error, KILN_ERR_INVALID_ARG, "kiln_engine_save_file needs a loaded engine and a path");
    return engine_write_file(e->plan, path, &e->error);
}

kiln_status kiln_engine_serialize(kiln_engine *e, void **data, size_t *size) {
    if (!e) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&e->error);
    if (data) *data = NULL;
    if (size) *size = 0;
    if (!e->plan || !data || !size)
        return kiln_err_set(&e->error, KILN_ERR_INVALID_ARG, "kiln_engine_serialize needs a loaded engine and data/size outputs");
    uint8_t *p = NULL;
    kiln_status st = engine_write_mem(e->plan, &p, size, &e->error);
    *data = p;
    return st;
}

const char *kiln_engine_errmsg(const kiln_engine *e) { return e ? kiln_err_msg(&e->error) : "no engine"; }

void kiln_engine_free(kiln_engine *e) {
    if (!e) return;
    if (e->plan && e->plan->map && e->plan->map_size == 0) {
        void *bytes = e->plan->map; /* a built engine's serialized bytes (see kiln_builder_build) */
        e->plan->map = NULL;
        engine_plan_free(e->plan);
        free(bytes);
    } else {
        engine_plan_free(e->plan);
    }
    kiln_err_clear(&e->error);
    free(e);
}

int kiln_engine_num_inputs(const kiln_engine *e) { return e && e->plan ? e->plan->n_inputs : 0; }
int kiln_engine_num_outputs(const kiln_engine *e) { return e && e->plan ? e->plan->n_outputs : 0; }
const char *kiln_engine_input_name(const kiln_engine *e, int i) {
    return e && e->plan && i >= 0 && i < e->plan->n_inputs ? e->plan->inputs[i].name : NULL;
}
const char *kiln_engine_output_name(const kiln_engine *e, int i) {
    return e && e->plan && i >= 0 && i < e->plan->n_outputs ? e->plan->outputs[i].name : NULL;
}
int kiln_engine_num_profiles(const kiln_engine *e) { return e && e->plan ? e->plan->n_profiles : 0; }

kiln_status kiln_context_create(kiln_engine *e, int threads, kiln_context **out) {
    kiln_context *c = calloc(1, sizeof *c);
    if (out) *out = c;
    if (!c) return KILN_ERR_NOMEM;
    if (!e || !e->plan || !e->plan->model)
        return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "kiln_context_create needs a loaded engine");
    if (threads < 0) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "threads must be >= 0 (0 = all CPUs), got %d", threads);
    c->engine = e;
    c->threads = threads;
    c->n_in = e->plan->n_inputs;
    c->names = calloc((size_t)(c->n_in ? c->n_in : 1), sizeof *c->names);
    c->inputs = calloc((size_t)(c->n_in ? c->n_in : 1), sizeof *c->inputs);
    if (!c->names || !c->inputs) return kiln_err_set(&c->error, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < c->n_in; i++) c->names[i] = e->plan->inputs[i].name;
    engine_context_options o = {.threads = threads};
    return engine_context_create(e->plan, &o, &c->ctx, &c->error);
}

static void release_outputs(kiln_context *c) {
    for (int32_t i = 0; i < c->n_out; i++) rt_value_release(&c->outputs[i]);
    free(c->outputs);
    c->outputs = NULL;
    c->n_out = 0;
}

void kiln_context_free(kiln_context *c) {
    if (!c) return;
    release_outputs(c);
    for (int32_t i = 0; c->inputs && i < c->n_in; i++) rt_value_release(&c->inputs[i]);
    free(c->inputs);
    free(c->names);
    engine_context_free(c->ctx);
    kiln_err_clear(&c->error);
    free(c);
}

const char *kiln_context_errmsg(const kiln_context *c) { return c ? kiln_err_msg(&c->error) : "no context"; }

kiln_status kiln_context_set_profile(kiln_context *c, int profile) {
    if (!c) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&c->error);
    if (!c->engine || !c->ctx) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "the context was not created");
    if (profile < 0) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "profile %d does not exist (profiles count from 0)", profile);
    engine_context *nc = NULL;
    engine_context_options o = {.threads = c->threads, .profile_index = profile};
    kiln_status st = engine_context_create(c->engine->plan, &o, &nc, &c->error);
    if (st != KILN_OK) return st;
    engine_context_free(c->ctx);
    c->ctx = nc;
    c->profile = profile;
    return KILN_OK;
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, int dtype, int rank, const int64_t *dims,
                                   const void *data, size_t nbytes) {
    if (!c) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&c->error);
    if (!c->ctx) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "the context was not created");
    if (!name) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "kiln_context_set_input: no input name given (NULL)");
    for (int32_t i = 0; i < c->n_in; i++) {
        if (strcmp(c->names[i], name)) continue;
        /* whatever happens below, the input is unset until it succeeds: a failed call
         * never leaves half-written data for the next run */
        rt_value_release(&c->inputs[i]);
        if (!kiln_dtype_valid(dtype) || rank < 0 || rank > RT_MAX_RANK)
            return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "input '%s': bad dtype %d or rank %d (at most %d)", name,
                                dtype, rank, RT_MAX_RANK);
        if (rank > 0 && !dims)
            return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "input '%s': rank %d but dims is NULL", name, rank);
        rt_tensor tmp;
        memset(&tmp, 0, sizeof tmp);
        kiln_status st = rt_tensor_alloc(&tmp, (kiln_dtype)dtype, rank, dims, &c->error);
        if (st != KILN_OK) {
            kiln_err_prefix(&c->error, "input '%s': ", name);
            return st;
        }
        if (nbytes != tmp.nbytes) {
            rt_tensor_release(&tmp);
            return kiln_err_set(&c->error, KILN_ERR_SHAPE, "input '%s': %zu bytes given, the shape needs %llu", name, nbytes,
                                (unsigned long long)tmp.nbytes);
        }
        if (nbytes && !data) {
            rt_tensor_release(&tmp);
            return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "input '%s': data is NULL for %zu bytes", name, nbytes);
        }
        if (nbytes) memcpy(tmp.data, data, nbytes);
        *rt_value_as_tensor(&c->inputs[i]) = tmp;
        return KILN_OK;
    }
    return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "the engine has no input named '%s'", name);
}

kiln_status kiln_context_run(kiln_context *c) {
    if (!c) return KILN_ERR_INVALID_ARG;
    kiln_err_clear(&c->error);
    if (!c->ctx) return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "the context was not created");
    for (int32_t i = 0; i < c->n_in; i++)
        if (c->inputs[i].kind != IR_TYPE_TENSOR || !c->inputs[i].has_value)
            return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "input '%s' was not set: call kiln_context_set_input first",
                                c->names[i]);
    release_outputs(c);
    int32_t n = engine_context_n_outputs(c->ctx);
    c->outputs = calloc((size_t)(n ? n : 1), sizeof *c->outputs);
    if (!c->outputs) return kiln_err_set(&c->error, KILN_ERR_NOMEM, "out of memory");
    const rt_value **ptrs = calloc((size_t)(c->n_in ? c->n_in : 1), sizeof *ptrs);
    if (!ptrs) return kiln_err_set(&c->error, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < c->n_in; i++) ptrs[i] = &c->inputs[i];
    kiln_status st = engine_context_run(c->ctx, c->names, ptrs, c->n_in, c->outputs, &c->error);
    free(ptrs);
    if (st == KILN_OK) c->n_out = n;
    return st;
}

kiln_status kiln_context_get_output(kiln_context *c, int i, int *dtype, int *rank, const int64_t **dims,
                                    const void **data, size_t *nbytes) {
    if (!c) return KILN_ERR_INVALID_ARG;
    if (i < 0 || i >= c->n_out || c->outputs[i].kind != IR_TYPE_TENSOR)
        return kiln_err_set(&c->error, KILN_ERR_INVALID_ARG, "output %d is not available (run first; %d outputs)", i, c->n_out);
    const rt_tensor *t = &c->outputs[i].t;
    if (dtype) *dtype = (int)t->dtype;
    if (rank) *rank = t->rank;
    if (dims) *dims = t->dims;
    if (data) *data = t->data;
    if (nbytes) *nbytes = (size_t)t->nbytes;
    return KILN_OK;
}
