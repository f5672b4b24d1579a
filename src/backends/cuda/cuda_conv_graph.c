/* cuda_conv_graph.c - the cuDNN backend (graph) API part of the convolution path
 * (see cuda_conv_graph.h for the design). Built only with cuDNN.
 *
 * One plan per node and shape: tensor descriptors (x, w, y, bias, residual and float32
 * virtual intermediates), the convolution and pointwise operations, the operation graph,
 * the heuristics' engine configs, and the finalized execution plan. Creating a plan is
 * slow (runtime-fusion engines compile with NVRTC), so cuda_conv.c keeps it in the
 * node's state and only re-creates it when the shapes change. Running a plan is one
 * cudnnBackendExecute on the backend stream with a variant pack of the current pointers
 * (rebuilt only when they change) and the backend's shared workspace: nothing
 * synchronizes or allocates, so CUDA graph recording captures it.
 *
 * Engines whose numerical notes say REDUCED_PRECISION_REDUCTION (half accumulation) or
 * NONDETERMINISTIC are skipped: kiln's FP16 accumulates in float32, and the replay check
 * of `kiln run` expects a recorded graph to reproduce a node-by-node run exactly.
 */
#if KILN_HAVE_CUDNN
#include <cuda_runtime.h>
#include <cudnn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_conv_graph.h"
#include "backends/cuda/cuda_internal.h"

/* The handle attributes are marked deprecated in cuDNN 9.x headers (a device-property
 * descriptor may replace them) but remain how a graph and a plan name their handle in
 * every cuDNN 9 release; their numeric values avoid the deprecation warning (-Werror). */
#define CG_ATTR_OPGRAPH_HANDLE ((cudnnBackendAttributeName_t)800)
#define CG_ATTR_PLAN_HANDLE ((cudnnBackendAttributeName_t)400)

enum { UID_X = 1, UID_W, UID_Y, UID_B, UID_R, UID_V0 = 10 };
#define CG_MAX_DESC 24

struct cuda_cg_plan {
    cudnnBackendDescriptor_t keep[CG_MAX_DESC]; /* graph descriptors, alive as long as the plan */
    int n_keep;
    cudnnBackendDescriptor_t plan, vp;
    int64_t ws;
    cuda_cg_fuse fuse;
    int64_t uids[5];
    int n_uids;
    cuda_cg_ptrs last; /* pointers in vp */
    int pos;
    int64_t gidx;
    /* plans are shared by the nodes of one cuDNN handle with the same signature (ResNet's
     * repeated blocks): finalizing runtime-fusion engines compiles kernels, once is enough */
    void *dnn;
    char sig[CUDA_TACTIC_SIG];
    int refs;
    struct cuda_cg_plan *next;
};

static pthread_mutex_t cg_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_cg_plan *cg_shared; /* guarded by cg_lock */

/* A graph under construction: the descriptors made so far (all freed on failure). */
typedef struct cg_build {
    cudnnBackendDescriptor_t d[CG_MAX_DESC];
    int n;
    cudnnStatus_t s;
    const char *what;
} cg_build;

static cudnnBackendDescriptor_t cg_new(cg_build *b, cudnnBackendDescriptorType_t type, const char *what) {
    if (b->s != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->n >= CG_MAX_DESC) {
        b->s = CUDNN_STATUS_INTERNAL_ERROR, b->what = "too many descriptors";
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    b->s = cudnnBackendCreateDescriptor(type, &d);
    if (b->s != CUDNN_STATUS_SUCCESS) {
        b->what = what;
        return NULL;
    }
    b->d[b->n++] = d;
    return d;
}

static void cg_set(cg_build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                   int64_t n, const void *v, const char *what) {
    if (b->s != CUDNN_STATUS_SUCCESS) return;
    b->s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (b->s != CUDNN_STATUS_SUCCESS) b->what = what;
}

static void cg_fin(cg_build *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->s != CUDNN_STATUS_SUCCESS) return;
    b->s = cudnnBackendFinalize(d);
    if (b->s != CUDNN_STATUS_SUCCESS) b->what = what;
}

static void cg_build_free(cg_build *b) {
    for (int i = b->n - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(b->d[i]);
    b->n = 0;
}

static cudnnBackendDescriptor_t cg_tensor(cg_build *b, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                                          bool nhwc, bool is_virtual) {
    int64_t strides[4], align = CUDA_CG_ALIGN;
    cuda_cg_strides(nhwc, dims, strides);
    cudnnBackendDescriptor_t d = cg_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    cg_set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    cg_set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    cg_set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    cg_set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    cg_set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    bool v = is_virtual;
    cg_set(b, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor virtual flag");
    cg_fin(b, d, "tensor finalize");
    return d;
}

/* y = mode(x[, b]) as one pointwise operation (float math). */
static cudnnBackendDescriptor_t cg_pointwise(cg_build *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                             cudnnBackendDescriptor_t bd, cudnnBackendDescriptor_t y, bool clip,
                                             float hi) {
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw = cg_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    cg_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    cg_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (clip) {
        float lo = 0.f;
        cg_set(b, pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_FLOAT, 1, &lo, "relu lower clip");
        cg_set(b, pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_FLOAT, 1, &hi, "relu upper clip");
    }
    cg_fin(b, pw, "pointwise finalize");
    cudnnBackendDescriptor_t op = cg_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pw desc");
    cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pw x");
    if (bd) cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bd, "pw b");
    cg_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pw y");
    cg_fin(b, op, "pointwise operation finalize");
    return op;
}

/* The operation graph of the convolution (and its epilogue when fuse); the last
 * descriptor made is the graph. */
static cudnnBackendDescriptor_t cg_graph(cg_build *b, cudnnHandle_t h, const cuda_cg_conv *cv, cuda_cg_fuse fuse) {
    cudnnDataType_t io = cv->half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, acc = CUDNN_DATA_FLOAT;
    int64_t xd[4] = {cv->n, cv->c, cv->h, cv->w}, wd[4] = {cv->o, cv->ci, cv->kh, cv->kw};
    int64_t yd[4] = {cv->n, cv->o, cv->oh, cv->ow}, bd[4] = {1, cv->o, 1, 1};
    bool epi = fuse == CUDA_CG_FUSED;
    cudnnBackendDescriptor_t x = cg_tensor(b, UID_X, io, xd, cv->nhwc, false);
    cudnnBackendDescriptor_t w = cg_tensor(b, UID_W, io, wd, cv->nhwc, false);
    cudnnBackendDescriptor_t y = cg_tensor(b, UID_Y, io, yd, cv->nhwc, false);
    int64_t vuid = UID_V0;
    cudnnBackendDescriptor_t cur = epi ? cg_tensor(b, vuid++, acc, yd, cv->nhwc, true) : y;

    int64_t sd = 2, dil[2] = {cv->dh, cv->dw}, str[2] = {cv->sh, cv->sw}, pad[2] = {cv->ph, cv->pw};
    cudnnConvolutionMode_t cm = CUDNN_CROSS_CORRELATION;
    cudnnBackendDescriptor_t conv = cg_new(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution descriptor");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &acc, "conv compute type");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &cm, "conv mode");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd, "conv spatial dims");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "conv dilations");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, "conv strides");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv pre paddings");
    cg_set(b, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "conv post paddings");
    cg_fin(b, conv, "conv descriptor finalize");

    float alpha = 1.f, beta = 0.f;
    cudnnBackendDescriptor_t ops[4];
    int n_ops = 0;
    cudnnBackendDescriptor_t op = cg_new(b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "conv operation");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "conv x");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "conv w");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cur, "conv y");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv,
           "conv desc");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "conv alpha");
    cg_set(b, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "conv beta");
    cg_fin(b, op, "conv operation finalize");
    ops[n_ops++] = op;

    if (epi) {
        /* conv -> [+ bias] -> [+ residual] -> [ReLU / clipped ReLU]; the last writes y */
        int steps = (cv->bias ? 1 : 0) + (cv->res ? 1 : 0) + (cv->act >= 0 ? 1 : 0), done = 0;
        if (cv->bias) {
            cudnnBackendDescriptor_t bt = cg_tensor(b, UID_B, io, bd, cv->nhwc, false);
            cudnnBackendDescriptor_t out = ++done == steps ? y : cg_tensor(b, vuid++, acc, yd, cv->nhwc, true);
            ops[n_ops++] = cg_pointwise(b, CUDNN_POINTWISE_ADD, cur, bt, out, false, 0);
            cur = out;
        }
        if (cv->res) {
            cudnnBackendDescriptor_t rt = cg_tensor(b, UID_R, io, yd, cv->nhwc, false);
            cudnnBackendDescriptor_t out = ++done == steps ? y : cg_tensor(b, vuid++, acc, yd, cv->nhwc, true);
            ops[n_ops++] = cg_pointwise(b, CUDNN_POINTWISE_ADD, cur, rt, out, false, 0);
            cur = out;
        }
        if (cv->act >= 0)
            ops[n_ops++] = cg_pointwise(b, CUDNN_POINTWISE_RELU_FWD, cur, NULL, y, cv->act == CU_CLIP, cv->fb);
    }
    cudnnBackendDescriptor_t g = cg_new(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    cg_set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, "graph ops");
    cg_set(b, g, CG_ATTR_OPGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    cg_fin(b, g, "operation graph finalize");
    return b->s == CUDNN_STATUS_SUCCESS ? g : NULL;
}

/* The engine configs of one heuristic mode into cfgs (created here; destroy them). */
static int cg_heuristics(cudnnBackendDescriptor_t g, cudnnBackendHeurMode_t mode, cudnnBackendDescriptor_t *cfgs,
                         int max) {
    cudnnBackendDescriptor_t heur = NULL;
    int64_t got = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) return 0;
    int created = 0;
    if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS) {
        for (; created < max; created++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[created]) !=
                CUDNN_STATUS_SUCCESS)
                break;
        if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, created,
                                     &got, cfgs) != CUDNN_STATUS_SUCCESS)
            got = 0;
    }
    cudnnBackendDestroyDescriptor(heur);
    if (got > created) got = created;
    for (int i = (int)got; i < created; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
    return (int)got;
}

/* The config's engine: global index, and whether its numerical notes are acceptable. */
static bool cg_engine_info(cudnnBackendDescriptor_t cfg, int64_t *gidx) {
    cudnnBackendDescriptor_t e = NULL;
    int64_t n = 0;
    *gidx = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS) return false;
    bool ok = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) ==
                  CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, gidx) ==
                  CUDNN_STATUS_SUCCESS;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (ok && cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
            if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
                notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
                ok = false;
    cudnnBackendDestroyDescriptor(e);
    return ok;
}

/* cuda_cg_lists' cuDNN calls (the lazy lists themselves: cuda_conv_graph_host.c) */
static int cg_query(void *user, int l, void **cfgs, int max) {
    return cg_heuristics((cudnnBackendDescriptor_t)user, l ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A,
                         (cudnnBackendDescriptor_t *)cfgs, max);
}

static bool cg_engine(void *cfg, int64_t *gidx) { return cg_engine_info((cudnnBackendDescriptor_t)cfg, gidx); }

static cudnnBackendDescriptor_t cg_plan_for(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws) {
    cudnnBackendDescriptor_t p = NULL;
    int64_t n = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS) return NULL;
    if (cudnnBackendSetAttribute(p, CG_ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(p) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, ws) !=
            CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(p);
        return NULL;
    }
    return p;
}

bool cuda_cg_ptrs_aligned(const cuda_cg_ptrs *p) {
    const void *v[5] = {p->x, p->w, p->b, p->r, p->y};
    for (int i = 0; i < 5; i++)
        if (v[i] && ((uintptr_t)v[i] % CUDA_CG_ALIGN) != 0) return false;
    return true;
}

static cudnnStatus_t cg_variant_pack(cuda_ctx *c, cuda_cg_plan *p, const cuda_cg_ptrs *ptrs) {
    if (p->vp && !memcmp(&p->last, ptrs, sizeof *ptrs)) return CUDNN_STATUS_SUCCESS;
    if (p->vp) cudnnBackendDestroyDescriptor(p->vp), p->vp = NULL;
    void *data[5];
    for (int i = 0; i < p->n_uids; i++) {
        int64_t u = p->uids[i];
        data[i] = u == UID_X   ? (void *)ptrs->x
                  : u == UID_W ? (void *)ptrs->w
                  : u == UID_Y ? ptrs->y
                  : u == UID_B ? (void *)ptrs->b
                               : (void *)ptrs->r;
    }
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &p->vp);
    void *ws = c->workspace;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(p->vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, p->n_uids, p->uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(p->vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, p->n_uids,
                                     data);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(p->vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(p->vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        if (p->vp) cudnnBackendDestroyDescriptor(p->vp);
        p->vp = NULL;
        return s;
    }
    p->last = *ptrs;
    return s;
}

static void cg_plan_destroy(cuda_cg_plan *p) {
    if (!p) return;
    if (p->vp) cudnnBackendDestroyDescriptor(p->vp);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->n_keep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
    free(p);
}

void cuda_cg_plan_free(cuda_cg_plan *p) {
    if (!p) return;
    pthread_mutex_lock(&cg_lock);
    bool last = --p->refs <= 0;
    if (last)
        for (cuda_cg_plan **q = &cg_shared; *q; q = &(*q)->next)
            if (*q == p) {
                *q = p->next;
                break;
            }
    pthread_mutex_unlock(&cg_lock);
    if (last) cg_plan_destroy(p);
}

/* A plan made earlier for this handle and signature (one more reference), or NULL. */
static cuda_cg_plan *cg_shared_get(void *dnn, const char *sig) {
    pthread_mutex_lock(&cg_lock);
    cuda_cg_plan *p = cg_shared;
    while (p && (p->dnn != dnn || strcmp(p->sig, sig) != 0)) p = p->next;
    if (p) p->refs++;
    pthread_mutex_unlock(&cg_lock);
    return p;
}

static void cg_shared_add(cuda_cg_plan *p, void *dnn, const char *sig) {
    p->dnn = dnn;
    snprintf(p->sig, sizeof p->sig, "%s", sig);
    p->refs = 1;
    pthread_mutex_lock(&cg_lock);
    p->next = cg_shared;
    cg_shared = p;
    pthread_mutex_unlock(&cg_lock);
}

cuda_cg_fuse cuda_cg_plan_fuse(const cuda_cg_plan *p) { return p->fuse; }

kiln_status cuda_cg_plan_run(cuda_ctx *c, rt_node_call *call, cuda_cg_plan *p, const cuda_cg_ptrs *ptrs) {
    cudnnStatus_t s = cg_variant_pack(c, p, ptrs);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute((cudnnHandle_t)c->dnn, p->plan, p->vp);
    if (s != CUDNN_STATUS_SUCCESS)
        return cuda_node_fail(call, KILN_ERR_RUNTIME, "cuDNN graph convolution (engine %lld) failed: %s",
                              (long long)p->gidx, cudnnGetErrorString(s));
    return KILN_OK;
}

/* Mean ms of a few executions of plan (after one warm-up); negative when it fails. */
static double cg_time(cuda_ctx *c, cuda_cg_plan *p, const cuda_cg_ptrs *ptrs) {
    cudaStream_t st = (cudaStream_t)c->stream;
    cudaEvent_t e0, e1;
    if (cg_variant_pack(c, p, ptrs) != CUDNN_STATUS_SUCCESS) return -1;
    if (cudnnBackendExecute((cudnnHandle_t)c->dnn, p->plan, p->vp) != CUDNN_STATUS_SUCCESS) return -1;
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    const int reps = 5;
    bool ok = cudaEventRecord(e0, st) == cudaSuccess;
    for (int i = 0; ok && i < reps; i++)
        ok = cudnnBackendExecute((cudnnHandle_t)c->dnn, p->plan, p->vp) == CUDNN_STATUS_SUCCESS;
    float ms = -1;
    if (ok) ok = cudaEventRecord(e1, st) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (!ok) {
        cudaGetLastError(); /* a failed engine leaves no sticky error behind */
        return -1;
    }
    return (double)ms / reps;
}

static cuda_cg_plan *cg_plan_new(cg_build *b, cuda_cg_fuse fuse, const cuda_cg_conv *cv) {
    cuda_cg_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fuse = fuse;
    p->uids[p->n_uids++] = UID_X;
    p->uids[p->n_uids++] = UID_W;
    p->uids[p->n_uids++] = UID_Y;
    if (fuse == CUDA_CG_FUSED && cv->bias) p->uids[p->n_uids++] = UID_B;
    if (fuse == CUDA_CG_FUSED && cv->res) p->uids[p->n_uids++] = UID_R;
    memcpy(p->keep, b->d, sizeof(b->d[0]) * (size_t)b->n);
    p->n_keep = b->n;
    b->n = 0; /* owned by the plan now */
    return p;
}

/* One fusion form: its graph, then a cached config or the timed best of the top ones. */
static cuda_cg_plan *cg_make_form(cuda_ctx *c, rt_node_call *call, const cuda_cg_conv *cv, cuda_cg_fuse fuse,
                                  const cuda_cg_ptrs *ptrs, bool debug) {
    cudnnHandle_t h = (cudnnHandle_t)c->dnn;
    char body[256], sig[CUDA_TACTIC_SIG];
    cuda_cg_signature(cv, fuse, c->workspace_bytes, body, sizeof body);
    cuda_tactic_sig(c, sig, sizeof sig, "%s", body);
    cuda_cg_plan *shared = cg_shared_get(c->dnn, sig);
    if (shared) {
        if (debug)
            fprintf(stderr, "conv-graph %s form %d: shares the plan of position %d engine %lld\n", call->node->name,
                    (int)fuse, shared->pos, (long long)shared->gidx);
        return shared;
    }
    cg_build b = {.s = CUDNN_STATUS_SUCCESS};
    cudnnBackendDescriptor_t g = cg_graph(&b, h, cv, fuse);
    if (!g) {
        if (debug)
            fprintf(stderr, "conv-graph %s form %d: graph refused at %s: %s\n", call->node->name, (int)fuse,
                    b.what ? b.what : "?", cudnnGetErrorString(b.s));
        cg_build_free(&b);
        return NULL;
    }

    /* the candidate list: heuristic mode A, then the fallback list; a position names
     * (list, index) as list * CUDA_CG_HEUR_MAX + index */
    cuda_cg_lists lists;
    memset(&lists, 0, sizeof lists);
    lists.query = cg_query;
    lists.engine = cg_engine;
    lists.user = g;
    int chosen = -1;
    cuda_cg_plan *best = cg_plan_new(&b, fuse, cv);
    cg_build_free(&b);
    if (!best) goto done;
    best->pos = -1;

    int cached = cuda_cg_cached_choice(c, call->node, sig, 2 * CUDA_CG_HEUR_MAX, cuda_cg_lists_engine_at, &lists);
    if (cached >= 0) {
        int l = cached / CUDA_CG_HEUR_MAX, i = cached % CUDA_CG_HEUR_MAX;
        int64_t ws = 0;
        cudnnBackendDescriptor_t pl = cg_plan_for(h, lists.cfgs[l][i], &ws);
        if (pl && ws >= 0 && (uint64_t)ws <= c->workspace_bytes) {
            best->plan = pl, best->ws = ws, best->pos = cached, best->gidx = cuda_cg_lists_engine_at(&lists, cached);
            chosen = cached;
        } else if (pl) {
            cudnnBackendDestroyDescriptor(pl);
        }
        if (debug)
            fprintf(stderr, "conv-graph %s form %d: cached position %d engine %lld %s\n", call->node->name, (int)fuse,
                    cached, (long long)cuda_cg_lists_engine_at(&lists, cached),
                    best->plan ? "re-created" : "did not re-create: timing again");
        if (best->plan) goto done;
    }

    double best_ms = -1;
    int timed = 0, top = CUDA_CG_TOP;
    const char *te = getenv("KILN_CUDA_CONV_GRAPH_TOP"); /* candidates timed (1..24), for experiments */
    if (te && atoi(te) >= 1 && atoi(te) <= CUDA_CG_HEUR_MAX) top = atoi(te);
    for (int l = 0; l < 2 && timed < top; l++) {
        if (l == 1 && best_ms >= 0) break; /* the fallback list only when mode A gave nothing */
        for (int i = 0; i < cuda_cg_list_n(&lists, l) && timed < top; i++) {
            int64_t gidx = -1, ws = 0;
            if (!cg_engine_info(lists.cfgs[l][i], &gidx)) continue;
            cudnnBackendDescriptor_t pl = cg_plan_for(h, lists.cfgs[l][i], &ws);
            if (!pl) continue;
            if (ws < 0 || (uint64_t)ws > c->workspace_bytes) {
                cudnnBackendDestroyDescriptor(pl);
                continue;
            }
            cudnnBackendDescriptor_t keep_plan = best->plan, keep_vp = best->vp;
            cuda_cg_ptrs keep_last = best->last;
            best->plan = pl, best->vp = NULL;
            double ms = cg_time(c, best, ptrs);
            cudnnBackendDescriptor_t cand_vp = best->vp;
            best->plan = keep_plan, best->vp = keep_vp, best->last = keep_last;
            if (cand_vp) cudnnBackendDestroyDescriptor(cand_vp);
            timed++;
            int pos = l * CUDA_CG_HEUR_MAX + i;
            if (debug)
                fprintf(stderr, "conv-graph %s form %d: candidate %d engine %lld ws %lld: %.4f ms\n",
                        call->node->name, (int)fuse, pos, (long long)gidx, (long long)ws, ms);
            if (ms < 0) {
                cudnnBackendDestroyDescriptor(pl);
                continue;
            }
            cuda_cg_record(c, call->node, sig, pos, gidx, ms);
            if (best_ms < 0 || ms < best_ms) {
                if (best->plan) cudnnBackendDestroyDescriptor(best->plan);
                if (best->vp) cudnnBackendDestroyDescriptor(best->vp), best->vp = NULL;
                best->plan = pl, best->ws = ws, best->pos = pos, best->gidx = gidx;
                best_ms = ms;
                chosen = pos;
            } else {
                cudnnBackendDestroyDescriptor(pl);
            }
        }
    }
    if (debug && best->plan)
        fprintf(stderr, "conv-graph %s form %d: chose position %d engine %lld (%.4f ms of %d timed)\n",
                call->node->name, (int)fuse, best->pos, (long long)best->gidx, best_ms, timed);
done:
    /* the chosen config stays alive with its plan (the plan was finalized from it) */
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < (lists.have[l] ? lists.n[l] : 0); i++) {
            if (best && best->plan && l * CUDA_CG_HEUR_MAX + i == chosen && best->n_keep < CG_MAX_DESC)
                best->keep[best->n_keep++] = lists.cfgs[l][i];
            else
                cudnnBackendDestroyDescriptor(lists.cfgs[l][i]);
        }
    if (best && !best->plan) {
        if (debug) fprintf(stderr, "conv-graph %s form %d: no engine config finalized\n", call->node->name, (int)fuse);
        cg_plan_destroy(best);
        best = NULL;
    }
    if (best) cg_shared_add(best, c->dnn, sig);
    return best;
}

kiln_status cuda_cg_plan_make(cuda_ctx *c, rt_node_call *call, const cuda_cg_conv *cv, const cuda_cg_ptrs *ptrs,
                              cuda_cg_plan **out) {
    *out = NULL;
    bool debug = getenv("KILN_CUDA_DEBUG_CONV") != NULL;
    char why[160];
    if (!c->dnn || !cuda_cg_eligible(cv, why, sizeof why) || !cuda_cg_ptrs_aligned(ptrs)) return KILN_OK;
    bool has_epi = cv->bias || cv->res || cv->act >= 0;
    if (has_epi && cuda_cg_epilogue_fusable(cv, NULL, 0)) *out = cg_make_form(c, call, cv, CUDA_CG_FUSED, ptrs, debug);
    if (!*out) *out = cg_make_form(c, call, cv, CUDA_CG_CONV_ONLY, ptrs, debug);
    cudaGetLastError();
    return KILN_OK;
}
#else
/* Built without cuDNN: convolutions are not in the op table (cuda_ops.c). */
typedef int cuda_conv_graph_unused;
#endif
