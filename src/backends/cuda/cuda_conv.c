/* cuda_conv.c - Conv through cuDNN (see cuda_internal.h). Built only with cuDNN.
 *
 * 1-D convolutions run as 2-D ones with H = 1. On a node's first run (and when shapes
 * change) cudnnFindConvolutionForwardAlgorithmEx times cuDNN's algorithms on the real
 * buffers under the workspace limit and the fastest is kept in the node's state. A
 * fused Relu with a bias goes through cudnnConvolutionBiasActivationForward (one
 * kernel); other biases/activations run as one bias+activation kernel afterwards. FP32
 * convolutions may use TF32 tensor cores (CUDNN_DEFAULT_MATH) unless no_tf32
 * (CUDNN_FMA_MATH).
 *
 * Half I/O convolutions (FP16 activations, NCHW or channels-last) first go through
 * cuDNN's graph API (cuda_conv_graph.c: Hopper's tensor-core engines, the bias/residual/
 * ReLU epilogue fused, heuristic configs timed, plans cached per node and shape); the
 * legacy path below is the fallback when no graph config finalizes, for float32, and with
 * KILN_CUDA_CONV_GRAPH=0.
 *
 * FP16, two forms. With FP16 activations (build/passes/precision_fp16.c made x, w, the
 * bias and y float16) cuDNN reads and writes half directly with a float convolution type
 * (CUDNN_DATA_HALF tensors, CUDNN_DATA_FLOAT compute, tensor-op math); bias + Relu (+ the
 * residual as z) go through cudnnConvolutionBiasActivationForward when the algorithm
 * allows, else one half bias/residual/activation kernel runs after. Without that pass
 * (float32 graph, backend option fp16) x and w are converted to half here (w once, x per
 * run; see cuda_fp16.c) into a half scratch output, and one kernel
 * (cuda_k_half_epilogue) writes the float32 output with bias, residual and activation.
 */
#if KILN_HAVE_CUDNN
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_conv_graph.h"
#include "backends/cuda/cuda_internal.h"

typedef struct conv_plan {
    int64_t key[13];
    bool valid, fused_ok;
    cuda_half_cache hc; /* FP16: the half copy of the weights, kept across shape changes */
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    /* channels-last 1x1 convolutions run as cuBLASLt GEMMs: that GEMM's plan (cuda_gemm.c) */
    void *gemm;
    void (*gemm_free)(void *);
    /* half convolutions through cuDNN's graph API (cuda_conv_graph.c), made once per shape
     * (cg_key); NULL after cg_tried when no graph config finalized (legacy API then) */
    cuda_cg_plan *cg;
    int64_t cg_key[13];
    bool cg_tried;
} conv_plan;

static void conv_clear(conv_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->ad) cudnnDestroyActivationDescriptor(p->ad);
    cuda_half_cache hc = p->hc;
    void *gemm = p->gemm;
    void (*gemm_free)(void *) = p->gemm_free;
    cuda_cg_plan *cg = p->cg;
    int64_t cg_key[13];
    memcpy(cg_key, p->cg_key, sizeof cg_key);
    bool cg_tried = p->cg_tried;
    memset(p, 0, sizeof *p);
    p->cg = cg;
    memcpy(p->cg_key, cg_key, sizeof cg_key);
    p->cg_tried = cg_tried;
    p->hc = hc;
    p->gemm = gemm;
    p->gemm_free = gemm_free;
}

static void conv_free(void *s) {
    conv_plan *p = s;
    conv_clear(p);
    cuda_half_cache_free(&p->hc);
    cuda_cg_plan_free(p->cg);
    if (p->gemm && p->gemm_free) p->gemm_free(p->gemm);
    free(p);
}

static kiln_status dnn_fail(rt_node_call *call, cudnnStatus_t s, const char *what) {
    return cuda_node_fail(call, KILN_ERR_RUNTIME, "cuDNN %s failed: %s", what, cudnnGetErrorString(s));
}

static kiln_status conv_run(cuda_ctx *c, rt_node_call *call, conv_plan *p, const int64_t *key, const rt_tensor *x,
                            const void *xdata, const void *wdata, void *ydata, rt_tensor *y, const rt_tensor *bias,
                            const rt_tensor *res, int act, float fa, float fb, int64_t N, int64_t C, int64_t H,
                            int64_t W, int64_t O, int64_t CI, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                            int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t group);

static int64_t attr_at(const ir_attr *a, int32_t i, int64_t dflt) { return a && i < a->n ? a->ints[i] : dflt; }

kiln_status cuda_run_conv(cuda_ctx *c, rt_node_call *call) {
    const ir_node *n = call->node;
    const rt_tensor *x = &call->inputs[0]->t, *w = &call->inputs[1]->t;
    const ir_attr *ra = ir_node_attr(n, "kiln_residual");
    bool res_at_2 = ra && ra->type == IR_ATTR_INT && ra->i == 2; /* no bias: the residual took slot 2 */
    const rt_tensor *bias = call->n_in > 2 && call->inputs[2] && !res_at_2 ? &call->inputs[2]->t : NULL;
    bool one_d = x->rank == 3;
    /* channels-last (domain kiln.nhwc, build/passes/layout_nhwc.c): x [N, H, W, C],
     * w [O, KH, KW, C/g], y [N, OH, OW, O]; half I/O only */
    bool nhwc = cuda_node_nhwc(n);
    if (nhwc && (x->rank != 4 || x->dtype != KILN_DTYPE_FLOAT16))
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "channels-last convolutions are 2-D float16 only");
    if ((x->rank != 4 && x->rank != 3) || w->rank != x->rank)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "only 1-D and 2-D convolutions on the GPU");
    const ir_attr *sa = ir_node_attr(n, "strides"), *pa = ir_node_attr(n, "pads"), *da = ir_node_attr(n, "dilations");
    int64_t N = x->dims[0], C = x->dims[1], H = one_d ? 1 : x->dims[2], W = x->dims[x->rank - 1];
    int64_t O = w->dims[0], CI = w->dims[1], KH = one_d ? 1 : w->dims[2], KW = w->dims[w->rank - 1];
    if (nhwc) {
        C = x->dims[3], H = x->dims[1], W = x->dims[2];
        CI = w->dims[3], KH = w->dims[1], KW = w->dims[2];
    }
    int64_t group = ir_node_attr_int(n, "group", 1);
    int64_t sh = one_d ? 1 : attr_at(sa, 0, 1), sw = attr_at(sa, one_d ? 0 : 1, 1);
    int64_t ph = one_d ? 0 : attr_at(pa, 0, 0), pw = attr_at(pa, one_d ? 0 : 1, 0);
    int64_t dh = one_d ? 1 : attr_at(da, 0, 1), dw = attr_at(da, one_d ? 0 : 1, 1);
    if (group < 1 || CI * group != C || O % group != 0)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "weight channels %lld x group %lld != input channels %lld",
                              (long long)CI, (long long)group, (long long)C);
    if (bias && (int64_t)bias->count != O) return cuda_node_fail(call, KILN_ERR_SHAPE, "bias must have M entries");
    bool hio = x->dtype == KILN_DTYPE_FLOAT16; /* FP16 activations: half in, half out */
    if (w->dtype != x->dtype || (bias && bias->dtype != x->dtype))
        return cuda_node_fail(call, KILN_ERR_SHAPE, "X, W and B differ in dtype");
    int64_t OH = (H + 2 * ph - ((KH - 1) * dh + 1)) / sh + 1, OW = (W + 2 * pw - ((KW - 1) * dw + 1)) / sw + 1;
    if (OH < 1 || OW < 1 || sh < 1 || sw < 1)
        return cuda_node_fail(call, KILN_ERR_SHAPE, "kernel larger than the padded input");
    int64_t odims[4] = {N, O, one_d ? OW : OH, OW};
    if (nhwc) odims[1] = OH, odims[2] = OW, odims[3] = O;
    rt_tensor *y;
    kiln_status st = cuda_out(c, &call->outputs[0], x->dtype, x->rank, odims, &y, call->err);
    if (st != KILN_OK || !y->count) return st;
    /* a fused residual Add (ResNet's skip connection): y starts as the residual and the
     * convolution accumulates into it (cuDNN's z input / beta = 1), before bias and act */
    int32_t ri;
    const rt_tensor *res = cuda_fused_input_dt(call, "kiln_residual", y->count, x->dtype, &ri, &st);
    if (st != KILN_OK) return st;

    int act = -1;
    float fa = 0, fb = 0;
    const ir_attr *aa = ir_node_attr(n, "kiln_activation");
    if (aa) {
        char name[32];
        size_t len = aa->s.len < sizeof name - 1 ? (size_t)aa->s.len : sizeof name - 1;
        memcpy(name, aa->s.data, len);
        name[len] = 0;
        act = cuda_act_code(name);
        fa = ir_node_attr_float(n, act == CU_CLIP ? "kiln_activation_min" : "kiln_activation_alpha",
                                act == CU_HSIGMOID ? 0.2f : 0.01f);
        fb = ir_node_attr_float(n, act == CU_CLIP ? "kiln_activation_max" : "kiln_activation_beta", 0.5f);
    }

    conv_plan *p = *call->state;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) return cuda_node_fail(call, KILN_ERR_NOMEM, "out of memory");
        *call->state = p;
        *call->state_free = conv_free;
    }
    /* key[12]: 0 float32, 1 half operands with float32 I/O, 2 half I/O, 3 half I/O NHWC */
    int64_t key[13] = {N, C, H, W, O, KH, KW, sh * 65536 + sw, ph * 65536 + pw, dh * 65536 + dw, group, c->tf32,
                       nhwc ? 3 : hio ? 2 : c->fp16};
    bool gemm1x1 = nhwc && KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && group == 1;
    /* half I/O: cuDNN's graph API first (Hopper's tensor-core engines, the epilogue fused);
     * KILN_CUDA_CONV_GRAPH=0 turns it off, KILN_CUDA_CONV_1X1_GEMM=1 keeps channels-last
     * 1x1 convolutions on cuBLASLt (for A/B timing) */
    const char *cge = getenv("KILN_CUDA_CONV_GRAPH"), *g1 = getenv("KILN_CUDA_CONV_1X1_GEMM");
    if (hio && !(cge && !strcmp(cge, "0")) && !(gemm1x1 && g1 && !strcmp(g1, "1"))) {
        cuda_cg_conv cv = {.n = N, .c = C, .h = H, .w = W, .o = O, .ci = CI, .kh = KH, .kw = KW, .oh = one_d ? 1 : OH,
                           .ow = OW, .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw, .group = group,
                           .nhwc = nhwc, .half = true, .bias = bias != NULL, .res = res != NULL, .act = act,
                           .fa = fa, .fb = fb};
        cuda_cg_ptrs ptrs = {x->data, w->data, bias ? bias->data : NULL, res ? res->data : NULL, y->data};
        if (!p->cg_tried || memcmp(p->cg_key, key, sizeof key) != 0) {
            cuda_cg_plan_free(p->cg);
            p->cg = NULL;
            memcpy(p->cg_key, key, sizeof key);
            p->cg_tried = true;
            st = cuda_cg_plan_make(c, call, &cv, &ptrs, &p->cg);
            if (st != KILN_OK) return st;
        }
        if (p->cg && cuda_cg_ptrs_aligned(&ptrs)) {
            st = cuda_cg_plan_run(c, call, p->cg, &ptrs);
            if (st != KILN_OK || cuda_cg_plan_fuse(p->cg) == CUDA_CG_FUSED || (!bias && !res && act < 0)) return st;
            return cuda_fail(call, cuda_k_bias_act(1, y->data, bias ? bias->data : NULL, res ? res->data : NULL,
                                                   nhwc ? N * OH * OW : N, O, nhwc ? 1 : OH * OW, act, fa, fb,
                                                   c->stream),
                             "bias/residual/activation kernel");
        }
    }
    /* channels-last 1x1, stride 1, no padding, one group: Y[N*H*W, O] = X[N*H*W, C] W[O, C]^T,
     * a plain GEMM; cuBLASLt's half GEMMs (bias/ReLU epilogue, the residual as C) beat
     * cuDNN's legacy algorithms there */
    if (gemm1x1)
        return cuda_gemm_rows_half(c, call, &p->gemm, &p->gemm_free, x->data, w->data, y->data,
                                   bias ? bias->data : NULL, res ? res->data : NULL, N * H * W, O, C, act, fa, fb);
    /* FP16: half views of x and w and a half output scratch (freed at the end) */
    const void *xdata = x->data, *wdata = w->data;
    void *ydata = y->data, *sx = NULL, *sy = NULL, *swt = NULL;
    if (c->fp16 && !hio) {
        st = cuda_half_operand(c, call, &p->hc, 1, w, &wdata, &swt);
        if (st == KILN_OK) st = cuda_half_operand(c, call, &p->hc, 0, x, &xdata, &sx);
        if (st == KILN_OK) st = cuda_scratch_alloc(c, y->count * 2, &sy, call->err);
        if (st != KILN_OK) {
            cuda_scratch_free(c, sx);
            cuda_scratch_free(c, swt);
            return st;
        }
        ydata = sy;
    }
    st = conv_run(c, call, p, key, x, xdata, wdata, ydata, y, bias, res, act, fa, fb, N, C, H, W, O, CI, KH, KW, OH, OW,
                  sh, sw, ph, pw, dh, dw, group);
    if (st == KILN_OK && c->fp16 && !hio)
        st = cuda_fail(call, cuda_k_half_epilogue(sy, y->data, res ? res->data : NULL, bias ? bias->data : NULL, N, O,
                                                  OH * OW, act, fa, fb, c->stream), "FP16 epilogue kernel");
    cuda_scratch_free(c, sx);
    cuda_scratch_free(c, sy);
    cuda_scratch_free(c, swt);
    return st;
}

/* The cuDNN part of cuda_run_conv: plan (descriptors, algorithm search) and the
 * convolution into ydata; in FP16 only the convolution (the caller's epilogue adds the
 * rest), in float32 also the bias/residual/activation. */
static kiln_status conv_run(cuda_ctx *c, rt_node_call *call, conv_plan *p, const int64_t *key, const rt_tensor *x,
                            const void *xdata, const void *wdata, void *ydata, rt_tensor *y, const rt_tensor *bias,
                            const rt_tensor *res, int act, float fa, float fb, int64_t N, int64_t C, int64_t H,
                            int64_t W, int64_t O, int64_t CI, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                            int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t group) {
    (void)x;
    kiln_status st;
    int mode = (int)key[12]; /* 0 float32, 1 half operands / float32 I/O, 2 half I/O, 3 half I/O NHWC */
    cudnnDataType_t dt = mode ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    cudnnTensorFormat_t fmt = mode == 3 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    cudnnHandle_t h = (cudnnHandle_t)c->dnn;
    cudnnStatus_t s;
    if (!p->valid || memcmp(p->key, key, sizeof p->key) != 0) {
        conv_clear(p);
        memcpy(p->key, key, sizeof p->key);
        cudnnCreateTensorDescriptor(&p->xd);
        cudnnCreateTensorDescriptor(&p->yd);
        cudnnCreateTensorDescriptor(&p->bd);
        cudnnCreateFilterDescriptor(&p->wd);
        cudnnCreateConvolutionDescriptor(&p->cd);
        cudnnCreateActivationDescriptor(&p->ad);
        if ((s = cudnnSetTensor4dDescriptor(p->xd, fmt, dt, (int)N, (int)C, (int)H, (int)W)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetTensor4dDescriptor(p->yd, fmt, dt, (int)N, (int)O, (int)OH, (int)OW)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetTensor4dDescriptor(p->bd, CUDNN_TENSOR_NCHW, mode >= 2 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, 1,
                                            (int)O, 1, 1)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetFilter4dDescriptor(p->wd, dt, fmt, (int)O, (int)CI, (int)KH,
                                            (int)KW)) != CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetConvolution2dDescriptor(p->cd, (int)ph, (int)pw, (int)sh, (int)sw, (int)dh, (int)dw,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) != CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetConvolutionGroupCount(p->cd, (int)group)) != CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetConvolutionMathType(p->cd, mode      ? CUDNN_TENSOR_OP_MATH
                                                     : c->tf32 ? CUDNN_DEFAULT_MATH
                                                               : CUDNN_FMA_MATH)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetActivationDescriptor(p->ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0)) !=
                CUDNN_STATUS_SUCCESS)
            return dnn_fail(call, s, "descriptor setup");
        /* tactic cache (cuda_tactics.c): an algorithm timed before for this signature,
         * when its workspace still fits */
        char sig[CUDA_TACTIC_SIG];
        cuda_tactic_sig(c, sig, sizeof sig, "conv x%lldx%lldx%lldx%lld w%lldx%lldx%lldx%lld s%lldx%lld p%lldx%lld "
                        "d%lldx%lld g%lld ws%llu m%d", (long long)N, (long long)C, (long long)H, (long long)W,
                        (long long)O, (long long)CI, (long long)KH, (long long)KW, (long long)sh, (long long)sw,
                        (long long)ph, (long long)pw, (long long)dh, (long long)dw, (long long)group,
                        (unsigned long long)c->workspace_bytes, mode);
        int cached = -1;
        size_t cws = 0;
        if (cuda_tactic_best(c, call->node, sig, "algo", CUDNN_CONVOLUTION_FWD_ALGO_COUNT, false, &cached) &&
            (cudnnGetConvolutionForwardWorkspaceSize(h, p->xd, p->wd, p->cd, p->yd, (cudnnConvolutionFwdAlgo_t)cached,
                                                     &cws) != CUDNN_STATUS_SUCCESS ||
             cws > c->workspace_bytes))
            cached = -1;
        if (cached >= 0) {
            p->algo = (cudnnConvolutionFwdAlgo_t)cached;
            p->ws = cws;
        } else {
            cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            int found = 0;
            s = cudnnFindConvolutionForwardAlgorithmEx(h, p->xd, xdata, p->wd, wdata, p->cd, p->yd, ydata,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf, c->workspace,
                                                       (size_t)c->workspace_bytes);
            if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(call, s, "algorithm search");
            int best = -1;
            for (int i = 0; i < found; i++) {
                bool fits = perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= c->workspace_bytes;
                if (fits) cuda_tactic_put(c, call->node, sig, "algo", (int)perf[i].algo, (double)perf[i].time);
                if (fits && best < 0) best = i;
            }
            if (best < 0) return cuda_node_fail(call, KILN_ERR_RUNTIME, "no cuDNN algorithm fits the workspace limit");
            p->algo = perf[best].algo;
            p->ws = perf[best].memory;
            /* KILN_CUDA_DEBUG_CONV=1: what cuDNN chose and its own timing, per plan (layout
             * and precision comparisons without a profiler) */
            if (getenv("KILN_CUDA_DEBUG_CONV"))
                fprintf(stderr, "conv-plan %s mode %d N%lld C%lld H%lld W%lld O%lld k%lldx%lld g%lld: algo %d %.4f ms "
                        "ws %zu\n", call->node->name, mode, (long long)N, (long long)C, (long long)H, (long long)W,
                        (long long)O, (long long)KH, (long long)KW, (long long)group, (int)perf[best].algo,
                        (double)perf[best].time, perf[best].memory);
        }
        p->fused_ok = mode != 1;
        p->valid = true;
    }
    float one = 1.f, zero = 0.f;
    if (mode == 1) {
        s = cudnnConvolutionForward(h, &one, p->xd, xdata, p->wd, wdata, p->cd, p->algo, c->workspace, p->ws, &zero,
                                    p->yd, ydata);
        return s == CUDNN_STATUS_SUCCESS ? KILN_OK : dnn_fail(call, s, "FP16 convolution");
    }
    /* after the algorithm search, which writes y; in half I/O the residual is read as z */
    if (res && mode == 0 && (st = cuda_fail(call, cudaMemcpyAsync(y->data, res->data, (size_t)y->nbytes, cudaMemcpyDeviceToDevice,
                                                     (cudaStream_t)c->stream), "residual copy")) != KILN_OK)
        return st;
    float beta = res ? 1.f : 0.f;
    if (bias && act == CU_RELU && p->fused_ok) {
        const void *z = mode >= 2 && res ? res->data : y->data;
        s = cudnnConvolutionBiasActivationForward(h, &one, p->xd, xdata, p->wd, wdata, p->cd, p->algo, c->workspace,
                                                  p->ws, &beta, p->yd, z, p->bd, bias->data, p->ad, p->yd, y->data);
        if (s == CUDNN_STATUS_SUCCESS) return KILN_OK;
        p->fused_ok = false; /* this algorithm cannot fuse: use the two-step path from now on */
        if (getenv("KILN_CUDA_DEBUG_CONV"))
            fprintf(stderr, "conv-fused-refused %s mode %d: %s\n", call->node->name, mode, cudnnGetErrorString(s));
    }
    if (mode >= 2) {
        s = cudnnConvolutionForward(h, &one, p->xd, xdata, p->wd, wdata, p->cd, p->algo, c->workspace, p->ws, &zero,
                                    p->yd, y->data);
        if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(call, s, "FP16 convolution");
        if (bias || res || act >= 0)
            return cuda_fail(call, cuda_k_bias_act(1, y->data, bias ? bias->data : NULL, res ? res->data : NULL,
                                                   mode == 3 ? N * OH * OW : N, O, mode == 3 ? 1 : OH * OW, act, fa, fb,
                                                   c->stream),
                             "bias/residual/activation kernel");
        return KILN_OK;
    }
    s = cudnnConvolutionForward(h, &one, p->xd, xdata, p->wd, wdata, p->cd, p->algo, c->workspace, p->ws, &beta,
                                p->yd, y->data);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(call, s, "convolution");
    if (bias || act >= 0)
        return cuda_fail(call, cuda_k_bias_act(0, y->data, bias ? bias->data : NULL, NULL, N, O, OH * OW, act, fa, fb,
                                               c->stream),
                         "bias/activation kernel");
    return KILN_OK;
}
#else
/* Built without cuDNN: Conv is not in the op table (cuda_ops.c) and runs on the CPU. */
typedef int cuda_conv_unused;
#endif
