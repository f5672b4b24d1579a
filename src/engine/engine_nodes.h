/* engine_nodes.h - per-node facts of a decoded engine graph for `kiln inspect`: the
 * precision a node computes in, its data layout, and the tactic chosen for it (a GPU
 * engine's kiln_gpu_tactics attribute, or a CPU engine's LAYERS entry). */
#ifndef KILN_ENGINE_ENGINE_NODES_H
#define KILN_ENGINE_ENGINE_NODES_H

#include "engine/engine.h"
#include "ir/graph.h"

typedef struct engine_node_info {
    const char *precision; /* "half", "float", another dtype name, or "-" (type unknown) */
    const char *layout;    /* "nhwc" (kiln.nhwc), "nchw" (layout-sensitive ONNX ops), "p16 in",
                            * "p16 out", "p16 in+out" (CPU 1x1 and depthwise convs, layout_p16.c), "-" */
    char tactic[96];       /* "cg#2 engine 7", "lt#0", "algo#1", a CPU kernel, or "-" */
    double tactic_ms;      /* its recorded time, -1 when none */
} engine_node_info;

/* Facts of node i of the plan's main graph (p->model must be decoded). */
void engine_node_describe(const engine_plan *p, int32_t i, engine_node_info *out);

/* The chosen GPU tactic in a kiln_gpu_tactics text ("signature\ttactic\tms" lines): the
 * fastest cuDNN graph-API config ("cg#<pos>", with its engine from the "cg<pos>e#<gidx>"
 * check entry) when there is one (that path runs first), else the fastest cuBLASLt
 * ("lt#") or legacy cuDNN ("algo#") entry. Entries of 1e29 ms or more (could not run)
 * are never chosen. False when nothing usable is recorded. */
bool engine_gpu_tactic_choice(const char *text, char *tactic, size_t size, double *ms);

#endif
