/* cuda_conv_graph.h - convolutions through cuDNN's backend (graph) API.
 *
 * cuda_conv.c runs a Conv node through one cuDNN operation graph: convolution forward,
 * then, when they can fuse, pointwise ADD of the bias, ADD of the residual and the
 * activation (ReLU, or Clip(0, hi) as a clipped ReLU), all in one engine. The engine
 * configs come from cuDNN's heuristics (mode A, then the fallback list); up to
 * CUDA_CG_TOP of them are finalized and timed on the node's first run with new shapes
 * and the fastest is kept (cuda_conv_graph.c). The choice goes through the tactic cache
 * (cuda_tactics.c) as "cg#<position in the heuristic list>" plus a check entry
 * "cg<position>e#<engine global index>", so a loaded engine or a timing cache re-creates
 * the same config without timing: same signature (GPU, cuDNN version, shapes, fusion),
 * same heuristic list, and the engine at that position must still be the recorded one.
 * When no config finalizes (or pointers are not aligned) the caller uses the legacy API.
 *
 * This header's parameter functions (strides, fusion eligibility, tactic names) are
 * plain host code, unit-tested without a GPU (tests/unit/test_cuda_conv_graph.c).
 */
#ifndef KILN_BACKENDS_CUDA_CUDA_CONV_GRAPH_H
#define KILN_BACKENDS_CUDA_CUDA_CONV_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define CUDA_CG_TOP 8          /* engine configs timed per convolution */
#define CUDA_CG_HEUR_MAX 24    /* heuristic results asked for */
#define CUDA_CG_ALIGN 16       /* byte alignment declared for every tensor */

/* One 2-D convolution as the graph sees it (1-D ones have H = KH = 1). */
typedef struct cuda_cg_conv {
    int64_t n, c, h, w;    /* input, logical NCHW */
    int64_t o, ci, kh, kw; /* weights [O, C/group, KH, KW] */
    int64_t oh, ow;
    int64_t sh, sw, ph, pw, dh, dw, group;
    bool nhwc;             /* channels-last storage of x, w (OHWI), y, residual */
    bool half;             /* float16 tensors (else float32) */
    bool bias, res;        /* a bias [O] / a residual of y's shape is part of the node */
    int act;               /* cuda_unary_op (CU_RELU, CU_CLIP, ...) or -1 */
    float fa, fb;          /* activation parameters (Clip: min, max) */
} cuda_cg_conv;

/* What the operation graph holds. */
typedef enum cuda_cg_fuse {
    CUDA_CG_CONV_ONLY = 0, /* the caller adds bias/residual/activation */
    CUDA_CG_FUSED = 1      /* conv -> [+bias] -> [+residual] -> [act]: y is the node's output */
} cuda_cg_fuse;

/* Strides (in elements) of a tensor with logical dims [N, C, H, W] stored NCHW or
 * channels-last (NHWC; cuDNN takes dims in NCHW order and the layout from the strides). */
void cuda_cg_strides(bool nhwc, const int64_t dims[4], int64_t strides[4]);

/* Whether the epilogue (bias, residual, activation) can go into the graph: only ReLU and
 * Clip with min 0 (clipped ReLU) among activations, none of others. false with why. */
bool cuda_cg_epilogue_fusable(const cuda_cg_conv *cv, char *why, size_t why_size);

/* Whether the graph path is worth trying at all: half tensors only (float32 keeps the
 * legacy API, whose TF32/--noTF32 math modes are documented), 2-D, sizes within int32.
 * Runtime-fusion engines also want channel counts that are multiples of 8 (stated in
 * why, but not refused: precompiled engines may still take the graph). */
bool cuda_cg_eligible(const cuda_cg_conv *cv, char *why, size_t why_size);

/* Signature text (appended to cuda_tactic_sig's prefix) naming everything a plan depends
 * on: shapes, parameters, layout, fusion form and workspace limit. */
int cuda_cg_signature(const cuda_cg_conv *cv, cuda_cg_fuse fuse, uint64_t workspace, char *buf, size_t size);

/* Tactic names (cuda_tactics.c adds "#<i>"): prefix "cg", i = the position in the
 * heuristic list, holds that config's timing; the check entry, prefix "cg<pos>e" and
 * i = the engine's global index, records which engine that position was. */
#define CUDA_CG_PREFIX "cg"
int cuda_cg_check_prefix(int pos, char *buf, size_t size);

struct cuda_ctx;
struct ir_node;
/* Records one timed config: its timing under "cg#<pos>" and the check entry. */
void cuda_cg_record(const struct cuda_ctx *c, const struct ir_node *node, const char *sig, int pos, int64_t gidx,
                    double ms);
/* The recorded choice for sig: the fastest timed position (< n_pos), provided its check
 * entry names the engine that position holds now (engine_at(user, pos): its global
 * index, -1 when the list has no such position). -1: nothing usable, time again. */
int cuda_cg_cached_choice(const struct cuda_ctx *c, const struct ir_node *node, const char *sig, int n_pos,
                          int64_t (*engine_at)(void *user, int pos), void *user);

/* The two heuristic lists of one convolution graph, queried lazily. A position names
 * (list, index) as list * CUDA_CG_HEUR_MAX + index: list 0 is heuristics mode A, list 1
 * the fallback list. Each query costs host time on every plan creation (engine loads and
 * warm-cache builds included), so the fallback list is asked for only when a position
 * in it is needed (a recorded choice there, or mode A gave nothing usable); positions
 * in list 0 mean the same whether or not list 1 was ever queried. cfgs are cuDNN engine
 * config descriptors (void * in cuDNN's API); query and engine are the cuDNN calls
 * (cuda_conv_graph.c) or a test's fakes. */
typedef struct cuda_cg_lists {
    void *cfgs[2][CUDA_CG_HEUR_MAX];
    int n[2];
    bool have[2];
    int queries[2]; /* how often each list was queried (at most once) */
    /* fills cfgs (at most max), returns how many */
    int (*query)(void *user, int list, void **cfgs, int max);
    /* the config's engine global index; false when it is not usable */
    bool (*engine)(void *cfg, int64_t *gidx);
    void *user;
} cuda_cg_lists;
/* Entries in list l (0 or 1), querying it the first time. */
int cuda_cg_list_n(cuda_cg_lists *L, int l);
/* engine_at for cuda_cg_cached_choice over a cuda_cg_lists: the engine global index at
 * pos, -1 when there is no usable config there; queries only pos's list. */
int64_t cuda_cg_lists_engine_at(void *lists, int pos);

/* ---- the cuDNN part (cuda_conv_graph.c, builds with cuDNN only) ---- */
typedef struct cuda_cg_ptrs {
    const void *x, *w, *b, *r; /* b, r: bias / residual, NULL when absent */
    void *y;
} cuda_cg_ptrs;
typedef struct cuda_cg_plan cuda_cg_plan;
struct rt_node_call;
/* Whether every pointer has the byte alignment the graph's tensors declare. */
bool cuda_cg_ptrs_aligned(const cuda_cg_ptrs *p);
/* Builds the node's plan: the fused graph first when the epilogue fuses, else (or when
 * nothing finalizes) the convolution alone; configs re-created from the tactic cache or
 * timed on the real buffers (this synchronizes: first runs only). *out = NULL (and
 * KILN_OK) when no graph config finalizes: the caller uses the legacy API. */
kiln_status cuda_cg_plan_make(struct cuda_ctx *c, struct rt_node_call *call, const cuda_cg_conv *cv, const cuda_cg_ptrs *ptrs,
                      cuda_cg_plan **out);
/* Enqueues the plan on the backend stream (no sync, no allocation: recordable). */
kiln_status cuda_cg_plan_run(struct cuda_ctx *c, struct rt_node_call *call, cuda_cg_plan *p, const cuda_cg_ptrs *ptrs);
cuda_cg_fuse cuda_cg_plan_fuse(const cuda_cg_plan *p);
void cuda_cg_plan_free(cuda_cg_plan *p);

#endif
