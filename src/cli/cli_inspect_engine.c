/* cli_inspect_engine.c - `kiln inspect FILE.engine`: what an engine holds, read from its
 * metadata sections (header, META, LAYERS, MEMPLAN): build facts, compatibility with
 * this machine, profiles, I/O, every layer with its kernel (tactic) and precision, and
 * memory sizes. Then the graph is decoded (no weights checksum, no execution context, no
 * compatibility check, so it works on engines built for other CPUs or GPUs) for the
 * per-node table: precision, layout (nchw/nhwc) and chosen tactic (engine_nodes.c), which
 * for GPU engines is the only accurate per-layer view (their LAYERS predate the nodes the
 * GPU session adds). A graph that does not decode is reported, not fatal. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_kernel.h"
#include "backends/cuda/cuda_info.h"
#include "build/tactics.h"
#include "cli/cli.h"
#include "core/strbuf.h"
#include "engine/engine.h"
#include "engine/engine_nodes.h"

#include "cli/cli_inspect_engine.h"

static void dims_text(strbuf *sb, const engine_io *io) {
    if (io->rank < 0) {
        sb_append(sb, "[?]");
        return;
    }
    sb_putc(sb, '[');
    for (int32_t d = 0; d < io->rank; d++) {
        if (d) sb_append(sb, ", ");
        if (io->dims[d].kind == 1) sb_printf(sb, "%" PRId64, io->dims[d].value);
        else if (io->dims[d].kind == 2) sb_append(sb, io->dims[d].symbol);
        else sb_putc(sb, '?');
    }
    sb_putc(sb, ']');
}

static void json_str(strbuf *sb, const char *s) { sb_json_string(sb, s ? s : "", s ? strlen(s) : 0); }

static void json_dims(strbuf *sb, const int64_t *d, int32_t rank) {
    sb_putc(sb, '[');
    for (int32_t i = 0; i < rank; i++) sb_printf(sb, "%s%" PRId64, i ? ", " : "", d[i]);
    sb_putc(sb, ']');
}

static void json_io(strbuf *sb, const engine_io *io, int32_t n) {
    sb_putc(sb, '[');
    for (int32_t i = 0; i < n; i++) {
        sb_append(sb, i ? ", {\"name\": " : "{\"name\": ");
        json_str(sb, io[i].name);
        sb_append(sb, ", \"dtype\": ");
        json_str(sb, io[i].dtype ? kiln_dtype_name((kiln_dtype)io[i].dtype) : "unknown");
        sb_append(sb, ", \"shape\": ");
        if (io[i].rank < 0) sb_append(sb, "null");
        else {
            sb_putc(sb, '[');
            for (int32_t d = 0; d < io[i].rank; d++) {
                if (d) sb_append(sb, ", ");
                if (io[i].dims[d].kind == 1) sb_printf(sb, "%" PRId64, io[i].dims[d].value);
                else if (io[i].dims[d].kind == 2) json_str(sb, io[i].dims[d].symbol);
                else sb_append(sb, "null");
            }
            sb_putc(sb, ']');
        }
        sb_putc(sb, '}');
    }
    sb_putc(sb, ']');
}

static const char *prec_flags_str(uint32_t f, char *buf, size_t n) {
    snprintf(buf, n, "fp32%s%s%s%s%s", f & ENGINE_PREC_FLAG_FP16 ? " +fp16" : "", f & ENGINE_PREC_FLAG_BF16 ? " +bf16" : "",
             f & ENGINE_PREC_FLAG_INT8 ? " +int8" : "", f & ENGINE_PREC_FLAG_BEST ? " (best)" : "",
             f & ENGINE_PREC_FLAG_NO_TF32 ? " (noTF32)" : "");
    return buf;
}

static const char *ver3(int v, char *buf, size_t n) {
    if (v <= 0) snprintf(buf, n, "none");
    else snprintf(buf, n, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    return buf;
}

/* "gpu         NVIDIA H200 (sm_90); built with CUDA runtime 13.0 (driver 13.0), cuBLAS ..." */
static void gpu_text(strbuf *sb, const engine_meta *m) {
    cuda_device_info g;
    kiln_error e = {0};
    if (cuda_info_from_meta(m->gpu_arch, m->cuda_version, m->cublas_version, m->cudnn_version, &g, &e) != KILN_OK) {
        sb_printf(sb, "gpu         (unreadable: %s) gpu_arch '%s', cuda_version '%s', cublas_version '%s', "
                      "cudnn_version '%s'\n", kiln_err_msg(&e), m->gpu_arch, m->cuda_version, m->cublas_version,
                  m->cudnn_version);
        kiln_err_clear(&e);
        return;
    }
    char a[32], b[32];
    sb_printf(sb, "gpu         %s (sm_%d%d); built with CUDA runtime %d.%d (driver %d.%d), cuBLAS %s, cuDNN %s\n",
              g.name, g.cc_major, g.cc_minor, g.runtime_version / 1000, (g.runtime_version % 1000) / 10,
              g.driver_version / 1000, (g.driver_version % 1000) / 10, ver3(g.cublas_version, a, sizeof a),
              ver3(g.cudnn_version, b, sizeof b));
}

int cli_inspect_engine(const char *path, bool json) {
    uint64_t here = cpu_features();
    engine_read_options o = {.metadata_only = true, .skip_compat = true, .cpu_features = here, .display_name = path};
    engine_plan *p = NULL;
    kiln_error err = {0};
    if (engine_read_file(path, &o, &p, &err) != KILN_OK) {
        fprintf(stderr, "kiln inspect: error: %s\n", kiln_err_msg(&err));
        kiln_err_clear(&err);
        return CLI_EXIT_FAILED;
    }
    /* would it load here? the same check a real load does (for a cuda engine, against
     * this machine's GPU) */
    engine_read_options full = {.metadata_only = true, .cpu_features = here, .display_name = path};
    cuda_device_info gpu_here;
    char gpu_missing[600] = "";
    if (p->header.backend == ENGINE_BACKEND_CUDA) {
#if KILN_HAVE_CUDA
        kiln_error ge = {0};
        if (cuda_info_query(0, &gpu_here, &ge) == KILN_OK) full.gpu = &gpu_here;
        else snprintf(gpu_missing, sizeof gpu_missing, "this machine has no usable NVIDIA GPU (%s)", kiln_err_msg(&ge));
        kiln_err_clear(&ge);
#else
        (void)gpu_here;
        snprintf(gpu_missing, sizeof gpu_missing, "this kiln was built without the CUDA backend");
#endif
        if (gpu_missing[0]) full.gpu_missing = gpu_missing;
    }
    engine_plan *q = NULL;
    kiln_error cerr = {0};
    bool loads = engine_read_file(path, &full, &q, &cerr) == KILN_OK;
    engine_plan_free(q);
    /* the graph, for the per-node table */
    engine_read_options go = {.skip_compat = true, .skip_weights_crc = true, .cpu_features = here, .display_name = path};
    engine_plan *gp = NULL;
    kiln_error gerr = {0};
    bool have_graph = engine_read_file(path, &go, &gp, &gerr) == KILN_OK && gp->model && gp->model->graph;
    const engine_header *h = &p->header;
    const engine_meta *m = &p->meta;
    char req[256], host[256], pf[64], b1[32], b2[32], b3[32];
    engine_features_str(h->required_features, req, sizeof req);
    engine_features_str(engine_isa_features(here), host, sizeof host);
    prec_flags_str(m->precision_flags, pf, sizeof pf);
    strbuf sb;
    sb_init(&sb);
    if (json) {
        sb_printf(&sb, "{\"file\": ");
        json_str(&sb, path);
        sb_printf(&sb, ", \"size_bytes\": %" PRIu64 ", \"format_version\": %u, \"kiln_version\": ", h->file_size, h->format_version);
        json_str(&sb, m->kiln_version);
        sb_append(&sb, ", \"backend\": ");
        json_str(&sb, engine_backend_name(h->backend));
        sb_append(&sb, ", \"required_cpu_features\": ");
        json_str(&sb, req);
        sb_printf(&sb, ", \"loads_here\": %s, \"incompatibility\": ", loads ? "true" : "false");
        if (loads) sb_append(&sb, "null");
        else json_str(&sb, kiln_err_msg(&cerr));
        sb_append(&sb, ", \"source_model\": ");
        json_str(&sb, m->source_model);
        sb_printf(&sb, ", \"build_unix_time\": %" PRIu64 ", \"build_seconds\": %.6f, \"precision\": ", m->build_unix_time,
                  m->build_seconds);
        json_str(&sb, pf);
        sb_printf(&sb, ", \"workspace_limit_bytes\": %" PRIu64 ", \"build_threads\": %d, \"timing_cache_used\": %s",
                  m->workspace_limit, m->build_threads, m->build_flags & ENGINE_BUILD_TIMING_CACHE ? "true" : "false");
        /* the GPU a cuda engine was built on (empty strings for CPU engines) */
        const char *gk[4] = {"gpu_arch", "cuda_version", "cublas_version", "cudnn_version"};
        const char *gv[4] = {m->gpu_arch, m->cuda_version, m->cublas_version, m->cudnn_version};
        for (int k = 0; k < 4; k++) {
            sb_printf(&sb, ", \"%s\": ", gk[k]);
            json_str(&sb, gv[k] ? gv[k] : "");
        }
        sb_append(&sb, ", \"inputs\": ");
        json_io(&sb, p->inputs, p->n_inputs);
        sb_append(&sb, ", \"outputs\": ");
        json_io(&sb, p->outputs, p->n_outputs);
        sb_append(&sb, ", \"profiles\": [");
        for (int32_t i = 0; i < p->n_profiles; i++) {
            sb_printf(&sb, "%s{\"index\": %d, \"inputs\": [", i ? ", " : "", i);
            for (int32_t k = 0; k < p->profiles[i].n_inputs; k++) {
                const engine_profile_input *pi = &p->profiles[i].inputs[k];
                sb_append(&sb, k ? ", {\"name\": " : "{\"name\": ");
                json_str(&sb, pi->name);
                sb_append(&sb, ", \"min\": ");
                json_dims(&sb, pi->min, pi->rank);
                sb_append(&sb, ", \"opt\": ");
                json_dims(&sb, pi->opt, pi->rank);
                sb_append(&sb, ", \"max\": ");
                json_dims(&sb, pi->max, pi->rank);
                sb_putc(&sb, '}');
            }
            sb_append(&sb, "]}");
        }
        sb_append(&sb, "], \"layers\": [");
        for (int32_t i = 0; i < p->n_layers; i++) {
            const engine_layer *l = &p->layers[i];
            sb_append(&sb, i ? ", {\"name\": " : "{\"name\": ");
            json_str(&sb, l->name);
            sb_append(&sb, ", \"op\": ");
            json_str(&sb, l->op_type);
            sb_append(&sb, ", \"tactic\": ");
            json_str(&sb, l->tactic);
            sb_append(&sb, ", \"precision\": ");
            json_str(&sb, engine_precision_name(l->precision));
            sb_printf(&sb, ", \"scratch_bytes\": %" PRIu64 ", \"timed_ms\": %.6f}", l->scratch_bytes, l->time_ms);
        }
        sb_append(&sb, "], \"nodes\": ");
        if (!have_graph) sb_append(&sb, "null");
        for (int32_t i = 0; have_graph && i < gp->model->graph->n_nodes; i++) {
            const ir_node *n = &gp->model->graph->nodes[i];
            engine_node_info ni;
            engine_node_describe(gp, i, &ni);
            sb_append(&sb, i ? ", {\"name\": " : "[{\"name\": ");
            json_str(&sb, n->name);
            sb_append(&sb, ", \"op\": ");
            json_str(&sb, n->op_type);
            sb_append(&sb, ", \"domain\": ");
            json_str(&sb, n->domain);
            sb_append(&sb, ", \"precision\": ");
            json_str(&sb, ni.precision);
            sb_append(&sb, ", \"layout\": ");
            json_str(&sb, ni.layout);
            sb_append(&sb, ", \"tactic\": ");
            json_str(&sb, ni.tactic);
            if (ni.tactic_ms >= 0) sb_printf(&sb, ", \"tactic_ms\": %.6f}", ni.tactic_ms);
            else sb_append(&sb, ", \"tactic_ms\": null}");
        }
        if (have_graph) sb_append(&sb, gp->model->graph->n_nodes ? "]" : "[]");
        if (!have_graph) {
            sb_append(&sb, ", \"nodes_error\": ");
            json_str(&sb, kiln_err_msg(&gerr));
        }
        sb_printf(&sb, ", \"memory\": {\"weights_bytes\": %" PRIu64 ", \"workspace_limit_bytes\": %" PRIu64
                       ", \"max_scratch_bytes\": %" PRIu64 ", \"activations\": [",
                  p->mem.weights_bytes, p->mem.workspace_limit, p->mem.max_scratch_bytes);
        for (int32_t i = 0; i < p->mem.n_profiles; i++)
            sb_printf(&sb, "%s{\"profile\": %d, \"opt_bytes\": %" PRIu64 ", \"max_bytes\": %" PRIu64 "}", i ? ", " : "", i,
                      p->mem.activation_opt[i], p->mem.activation_max[i]);
        sb_append(&sb, "]}}\n");
    } else {
        char ts[64] = "?";
        time_t t = (time_t)m->build_unix_time;
        struct tm tmv;
        if (gmtime_r(&t, &tmv)) strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", &tmv);
        sb_printf(&sb, "file        %s (%s)\n", path, build_bytes_str(h->file_size, b1, sizeof b1));
        sb_printf(&sb, "engine      kiln engine format %u, built by kiln %s on %s in %.2f s\n", h->format_version,
                  m->kiln_version, ts, m->build_seconds);
        sb_printf(&sb, "backend     %s, for %s\n", engine_backend_name(h->backend), req);
        if (h->backend == ENGINE_BACKEND_CUDA) gpu_text(&sb, m);
        if (loads) sb_printf(&sb, "this host   compatible (%s)\n", host);
        else sb_printf(&sb, "this host   NOT loadable here: %s\n", kiln_err_msg(&cerr));
        sb_printf(&sb, "model       %s\n", *m->source_model ? m->source_model : "(unknown)");
        sb_printf(&sb, "build       precision %s, workspace %s, timing cache %s\n", pf,
                  m->workspace_limit ? build_bytes_str(m->workspace_limit, b1, sizeof b1) : "unlimited",
                  m->build_flags & ENGINE_BUILD_TIMING_CACHE ? "used" : "not used");
        sb_printf(&sb, "\ninputs (%d)\n", p->n_inputs);
        for (int32_t i = 0; i < p->n_inputs; i++) {
            sb_printf(&sb, "  %s  %s", p->inputs[i].name, p->inputs[i].dtype ? kiln_dtype_name((kiln_dtype)p->inputs[i].dtype) : "?");
            dims_text(&sb, &p->inputs[i]);
            sb_putc(&sb, '\n');
        }
        sb_printf(&sb, "outputs (%d)\n", p->n_outputs);
        for (int32_t i = 0; i < p->n_outputs; i++) {
            sb_printf(&sb, "  %s  %s", p->outputs[i].name, p->outputs[i].dtype ? kiln_dtype_name((kiln_dtype)p->outputs[i].dtype) : "?");
            dims_text(&sb, &p->outputs[i]);
            sb_putc(&sb, '\n');
        }
        sb_printf(&sb, "\nprofiles (%d)\n", p->n_profiles);
        for (int32_t i = 0; i < p->n_profiles; i++) {
            if (!p->profiles[i].n_inputs) sb_printf(&sb, "  %d  (static shapes)\n", i);
            for (int32_t k = 0; k < p->profiles[i].n_inputs; k++) {
                const engine_profile_input *pi = &p->profiles[i].inputs[k];
                sb_printf(&sb, "  %d  %s  min ", i, pi->name);
                for (int32_t d = 0; d < pi->rank; d++) sb_printf(&sb, "%s%" PRId64, d ? "x" : "", pi->min[d]);
                sb_append(&sb, "  opt ");
                for (int32_t d = 0; d < pi->rank; d++) sb_printf(&sb, "%s%" PRId64, d ? "x" : "", pi->opt[d]);
                sb_append(&sb, "  max ");
                for (int32_t d = 0; d < pi->rank; d++) sb_printf(&sb, "%s%" PRId64, d ? "x" : "", pi->max[d]);
                sb_putc(&sb, '\n');
            }
        }
        sb_printf(&sb, "\nlayers (%d)\n", p->n_layers);
        int w = 4;
        for (int32_t i = 0; i < p->n_layers; i++) {
            int len = (int)strlen(p->layers[i].name);
            if (len > w) w = len;
        }
        if (w > 60) w = 60;
        sb_printf(&sb, "  %-*s  %-18s %-24s %-6s %s\n", w, "name", "op", "kernel", "prec", "scratch");
        for (int32_t i = 0; i < p->n_layers; i++) {
            const engine_layer *l = &p->layers[i];
            sb_printf(&sb, "  %-*s  %-18s %-24s %-6s %s\n", w, l->name, l->op_type, l->tactic,
                      engine_precision_name(l->precision), build_bytes_str(l->scratch_bytes, b1, sizeof b1));
        }
        if (have_graph) {
            const ir_graph *g = gp->model->graph;
            int nw = 4;
            for (int32_t i = 0; i < g->n_nodes; i++) {
                int len = (int)strlen(g->nodes[i].name);
                if (len > nw) nw = len;
            }
            if (nw > 60) nw = 60;
            sb_printf(&sb, "\nnodes (%d)%s\n", g->n_nodes,
                      h->backend == ENGINE_BACKEND_CUDA ? " - what a load runs: precision, layout, chosen GPU tactic" : "");
            /* the node index first: a row never reads like a "layers" row (name op kernel),
             * which scripts scrape */
            sb_printf(&sb, "  %-4s %-*s  %-28s %-6s %-10s %s\n", "#", nw, "name", "op", "prec", "layout", "tactic");
            for (int32_t i = 0; i < g->n_nodes; i++) {
                const ir_node *n = &g->nodes[i];
                engine_node_info ni;
                engine_node_describe(gp, i, &ni);
                char op[80];
                snprintf(op, sizeof op, "%s%s%s", n->domain[0] ? n->domain : "", n->domain[0] ? ":" : "", n->op_type);
                sb_printf(&sb, "  %-4d %-*s  %-28s %-6s %-10s %s", i, nw, n->name, op, ni.precision, ni.layout,
                          ni.tactic);
                if (ni.tactic_ms >= 0) sb_printf(&sb, " (%.4f ms)", ni.tactic_ms);
                sb_putc(&sb, '\n');
            }
        } else {
            sb_printf(&sb, "\nnodes      (graph not decoded: %s)\n", kiln_err_msg(&gerr));
        }
        sb_printf(&sb, "\nmemory\n  weights     %s\n  workspace   limit %s, largest chosen scratch %s\n",
                  build_bytes_str(p->mem.weights_bytes, b1, sizeof b1),
                  p->mem.workspace_limit ? build_bytes_str(p->mem.workspace_limit, b2, sizeof b2) : "unlimited",
                  build_bytes_str(p->mem.max_scratch_bytes, b3, sizeof b3));
        for (int32_t i = 0; i < p->mem.n_profiles; i++)
            sb_printf(&sb, "  activations profile %d: %s at opt, %s at max shapes\n", i,
                      build_bytes_str(p->mem.activation_opt[i], b1, sizeof b1),
                      build_bytes_str(p->mem.activation_max[i], b2, sizeof b2));
    }
    fputs(sb_cstr(&sb), stdout);
    sb_free(&sb);
    kiln_err_clear(&cerr);
    kiln_err_clear(&gerr);
    engine_plan_free(gp);
    engine_plan_free(p);
    return CLI_EXIT_OK;
}
