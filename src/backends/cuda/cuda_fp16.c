/* cuda_fp16.c - FP16 operands for cuBLASLt GEMMs and cuDNN convolutions (--fp16).
 *
 * With rt_backend_options.fp16 the GEMM and convolution nodes compute in half precision
 * on tensor cores with float32 accumulation, while every tensor *between* nodes stays
 * float32: a node converts its operands to half itself and writes float32 results
 * (cuBLASLt: A/B half, C/D float; cuDNN: half data, float compute, then one epilogue
 * kernel back to float32 with bias/residual/activation). Constant operands (initializers
 * that are not graph inputs, i.e. the weights) are converted once, on the node's first
 * run, and kept in the node's state; activations are converted per run into stream-
 * ordered scratch (cudaMallocAsync/cudaFreeAsync, so CUDA graph recording still works).
 * This is the "per-node" form of FP16: elementwise/norm/softmax kernels keep float32 math
 * and float32 I/O. See docs/CUDA.md, "FP16".
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

static bool is_constant_input(const rt_node_call *call, int32_t k) {
    if (!call->graph || k >= call->node->n_inputs) return false;
    int32_t vid = call->node->inputs[k];
    if (vid < 0 || vid >= call->graph->n_values) return false;
    const ir_value *v = &call->graph->values[vid];
    return (v->flags & IR_VALUE_INITIALIZER) && !(v->flags & IR_VALUE_GRAPH_INPUT) && v->init;
}

void cuda_half_cache_free(cuda_half_cache *hc) {
    for (int i = 0; i < CUDA_HALF_SLOTS; i++)
        if (hc->half[i]) cudaFree(hc->half[i]);
    memset(hc, 0, sizeof *hc);
}

kiln_status cuda_half_operand(cuda_ctx *c, rt_node_call *call, cuda_half_cache *hc, int32_t k, const rt_tensor *t,
                              const void **out, void **scratch) {
    *out = NULL;
    *scratch = NULL;
    if (t->dtype != KILN_DTYPE_FLOAT)
        return cuda_node_fail(call, KILN_ERR_UNSUPPORTED, "FP16 operand %d is %s, not float32", (int)k,
                              kiln_dtype_name(t->dtype));
    if (k < CUDA_HALF_SLOTS && is_constant_input(call, k)) {
        if (hc->half[k] && hc->src[k] == t->data && hc->count[k] == t->count) {
            *out = hc->half[k];
            return KILN_OK;
        }
        if (hc->half[k]) cudaFree(hc->half[k]);
        hc->half[k] = NULL;
        /* plain cudaMalloc: weights live as long as the session, and this happens on the
         * first (never recorded) run */
        void *p = NULL;
        kiln_status st = cuda_fail(call, cudaMalloc(&p, (size_t)(t->count ? t->count : 1) * 2), "FP16 weight allocation");
        if (st != KILN_OK) return st;
        st = cuda_fail(call, cuda_k_cast(t->data, CD_F32, p, CD_F16, (int64_t)t->count, c->stream), "FP16 weight cast");
        if (st != KILN_OK) {
            cudaFree(p);
            return st;
        }
        hc->half[k] = p;
        hc->src[k] = t->data;
        hc->count[k] = t->count;
        *out = p;
        return KILN_OK;
    }
    kiln_status st = cuda_scratch_alloc(c, t->count * 2, scratch, call->err);
    if (st != KILN_OK) return st;
    st = cuda_fail(call, cuda_k_cast(t->data, CD_F32, *scratch, CD_F16, (int64_t)t->count, c->stream), "FP16 cast");
    if (st != KILN_OK) {
        cuda_scratch_free(c, *scratch);
        *scratch = NULL;
        return st;
    }
    *out = *scratch;
    return KILN_OK;
}

const rt_tensor *cuda_fused_input_dt(rt_node_call *call, const char *attr, uint64_t count, kiln_dtype dt,
                                     int32_t *index, kiln_status *st) {
    *st = KILN_OK;
    *index = -1;
    const ir_attr *a = ir_node_attr(call->node, attr);
    if (!a || a->type != IR_ATTR_INT) return NULL;
    const rt_value *v = a->i >= 0 && a->i < call->n_in ? call->inputs[a->i] : NULL;
    if (!v || v->kind != IR_TYPE_TENSOR || v->t.dtype != dt || v->t.device == RT_MEM_HOST || v->t.count != count) {
        *st = cuda_node_fail(call, KILN_ERR_SHAPE, "fused input %lld (%s) is missing or is not %llu %s elements on the GPU",
                             (long long)a->i, attr, (unsigned long long)count, kiln_dtype_name(dt));
        return NULL;
    }
    *index = (int32_t)a->i;
    return &v->t;
}
