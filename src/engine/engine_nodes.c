/* engine_nodes.c - per-node precision, layout and chosen tactic of a decoded engine, for
 * `kiln inspect` (src/cli/cli_inspect_engine.c). GPU engines are described from their
 * graph, not from LAYERS: the builder's GPU session adds nodes (FP16 casts, channels-last
 * Transposes) after LAYERS was made, so the graph and its kiln_gpu_tactics attributes are
 * what a load runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_nodes.h"
#include "runtime/session.h"

static bool layout_op(const char *op) {
    static const char *const ops[] = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                                      "GlobalMaxPool", "BatchNormalization", "LpPool", "GlobalLpPool"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(op, ops[i])) return true;
    return false;
}

typedef struct pick {
    char name[48];
    char sig[512];
    double ms;
    bool found;
} pick;

bool engine_gpu_tactic_choice(const char *text, char *tactic, size_t size, double *ms) {
    pick best[2]; /* [0]: graph API, [1]: cuBLASLt / legacy cuDNN */
    memset(best, 0, sizeof best);
    if (!text) return false;
    const char *line = text;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *t1 = memchr(line, '\t', len);
        const char *t2 = t1 ? memchr(t1 + 1, '\t', len - (size_t)(t1 + 1 - line)) : NULL;
        if (t1 && t2) {
            size_t nl = (size_t)(t2 - t1 - 1), sl = (size_t)(t1 - line);
            char name[48], num[32];
            size_t ml = len - (size_t)(t2 + 1 - line);
            if (nl < sizeof name && ml < sizeof num && sl < sizeof best[0].sig) {
                memcpy(name, t1 + 1, nl), name[nl] = 0;
                memcpy(num, t2 + 1, ml), num[ml] = 0;
                char *stop = NULL;
                double v = strtod(num, &stop);
                const char *hash = strchr(name, '#');
                size_t pl = hash ? (size_t)(hash - name) : 0;
                int k = -1;
                if (hash && pl == 2 && !strncmp(name, "cg", 2)) k = 0;
                else if (hash && ((pl == 2 && !strncmp(name, "lt", 2)) || (pl == 4 && !strncmp(name, "algo", 4)))) k = 1;
                if (k >= 0 && stop && stop != num && v >= 0 && v < 1e29 && (!best[k].found || v < best[k].ms)) {
                    snprintf(best[k].name, sizeof best[k].name, "%s", name);
                    memcpy(best[k].sig, line, sl), best[k].sig[sl] = 0;
                    best[k].ms = v, best[k].found = true;
                }
            }
        }
        line += len;
        if (*line == '\n') line++;
    }
    const pick *b = best[0].found ? &best[0] : best[1].found ? &best[1] : NULL;
    if (!b) return false;
    *ms = b->ms;
    snprintf(tactic, size, "%s", b->name);
    if (b == &best[0]) {
        /* the engine behind position pos: the check entry "cg<pos>e#<gidx>" of the same
         * signature */
        char pre[40];
        snprintf(pre, sizeof pre, "\tcg%se#", b->name + 3);
        size_t sl = strlen(b->sig);
        for (line = text; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            if (len > sl && !strncmp(line, b->sig, sl) && !strncmp(line + sl, pre, strlen(pre))) {
                long long g = strtoll(line + sl + strlen(pre), NULL, 10);
                snprintf(tactic, size, "%s engine %lld", b->name, g);
                break;
            }
            line += len;
            if (*line == '\n') line++;
        }
    }
    return true;
}

void engine_node_describe(const engine_plan *p, int32_t i, engine_node_info *out) {
    memset(out, 0, sizeof *out);
    out->precision = out->layout = "-";
    snprintf(out->tactic, sizeof out->tactic, "-");
    out->tactic_ms = -1;
    const ir_graph *g = p && p->model ? p->model->graph : NULL;
    if (!g || i < 0 || i >= g->n_nodes) return;
    const ir_node *n = &g->nodes[i];
    int32_t o = n->n_outputs > 0 ? n->outputs[0] : IR_NONE;
    const ir_type *t = o >= 0 && o < g->n_values ? &g->values[o].type : NULL;
    if (t && t->kind == IR_TYPE_TENSOR && kiln_dtype_valid(t->dtype) && t->dtype != KILN_DTYPE_UNDEFINED)
        out->precision = t->dtype == KILN_DTYPE_FLOAT16 ? "half" : t->dtype == KILN_DTYPE_FLOAT ? "float"
                                                                                                 : kiln_dtype_name(t->dtype);
    if (n->domain && !strcmp(n->domain, "kiln.nhwc")) out->layout = "nhwc";
    else if ((!n->domain || !n->domain[0]) && layout_op(n->op_type)) {
        /* the CPU's P16 blocks between 1x1 convs (build/passes/layout_p16.c: bit 2 the
         * output, bits 1 and 4 the input and the fused residual) */
        int64_t p16 = ir_node_attr_int(n, "kiln_p16", 0), c16 = ir_node_attr_int(n, "kiln_c16", 0);
        if (c16) /* the C16 blocks between channels-in-lanes convs (layout_c16.c, same bits) */
            out->layout = (c16 & 2) ? ((c16 & 5) ? "c16 in+out" : "c16 out") : "c16 in";
        else out->layout = !p16 ? "nchw" : (p16 & 2) ? ((p16 & 5) ? "p16 in+out" : "p16 out") : "p16 in";
    }
    if (p->header.backend == ENGINE_BACKEND_CUDA) {
        const ir_attr *a = ir_node_attr(n, RT_GPU_TACTICS_ATTR);
        if (a && a->type == IR_ATTR_STRING && a->s.data) {
            char *text = malloc((size_t)a->s.len + 1);
            if (!text) return;
            memcpy(text, a->s.data, (size_t)a->s.len);
            text[a->s.len] = 0;
            double ms = -1;
            if (engine_gpu_tactic_choice(text, out->tactic, sizeof out->tactic, &ms)) out->tactic_ms = ms;
            free(text);
        }
        return;
    }
    for (int32_t k = 0; k < p->n_layers; k++)
        if (p->layers[k].node == i) {
            snprintf(out->tactic, sizeof out->tactic, "%s", p->layers[k].tactic ? p->layers[k].tactic : "-");
            out->tactic_ms = p->layers[k].time_ms > 0 ? p->layers[k].time_ms : -1;
            break;
        }
}
