/* cpu_linear_attention.c - the opset-27 recurrent sequence ops: LinearAttention and
 * CausalConvWithState.
 *
 * LinearAttention keeps one state matrix S [d_k, d_v] per (batch, KV head) and walks the
 * T tokens in order (the recurrence is inherently sequential):
 *   linear:      S = S + k v^T
 *   gated:       S = exp(g) * S + k v^T
 *   delta:       S = S + beta * k (v - S^T k)^T
 *   gated_delta: S = exp(g) * S, then as delta with the decayed S
 * and every query head sharing that KV head reads o = scale * q^T S. The decay g is per
 * KV head ([B, T, H_kv]) or per key dimension ([B, T, H_kv * d_k], scaling rows of S);
 * beta is per KV head ([B, T, H_kv]) or one per token ([B, T, 1]). Inputs are packed
 * [B, T, heads * dim]; states are [B, H_kv, d_k, d_v]. Arithmetic is double precision
 * on values loaded from any float dtype, stored back in the input's dtype.
 *
 * CausalConvWithState is a depthwise causal 1-D convolution with a carried state: the
 * past K-1 steps (past_state, zeros when absent) are prepended to the input, each
 * channel is convolved with its own K taps (+ bias, optional SiLU), and the last K-1
 * steps of the padded input become present_state.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

static bool is_float(kiln_dtype d) { return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_DOUBLE || cpu_dtype_is_half(d); }

static bool str_attr_is(const ir_node *n, const char *name, const char *v) {
    const ir_attr *a = ir_node_attr(n, name);
    size_t l = strlen(v);
    return a && a->type == IR_ATTR_STRING && a->s.len == l && !memcmp(a->s.data, v, l);
}

enum { LA_LINEAR, LA_GATED, LA_DELTA, LA_GATED_DELTA };

kiln_status cpu_LinearAttention(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out) {
    const rt_tensor *q, *k, *v, *past = cpu_in(inputs, n_in, 3), *decay = cpu_in(inputs, n_in, 4),
                                *beta = cpu_in(inputs, n_in, 5);
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &q);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &k);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 2, &v);
    if (st != KILN_OK) return st;
    const ir_node *nd = ctx->node;
    int rule = LA_GATED_DELTA;
    const ir_attr *ua = ir_node_attr(nd, "update_rule");
    if (ua) {
        if (str_attr_is(nd, "update_rule", "linear")) rule = LA_LINEAR;
        else if (str_attr_is(nd, "update_rule", "gated")) rule = LA_GATED;
        else if (str_attr_is(nd, "update_rule", "delta")) rule = LA_DELTA;
        else if (!str_attr_is(nd, "update_rule", "gated_delta"))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "update_rule must be linear, gated, delta or "
                                                                "gated_delta");
    }
    int64_t Hq = ir_node_attr_int(nd, "q_num_heads", 0), Hkv = ir_node_attr_int(nd, "kv_num_heads", 0);
    if (!is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "query/key/value must share a float dtype");
    if (q->rank != 3 || k->rank != 3 || v->rank != 3 || Hq < 1 || Hkv < 1 || Hq % Hkv ||
        q->dims[2] % Hq || v->dims[2] % Hkv)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "expected packed [B, T, H*D] inputs with q_num_heads a multiple "
                                                    "of kv_num_heads dividing the last dims");
    int64_t B = q->dims[0], T = q->dims[1], dk = q->dims[2] / Hq, dv = v->dims[2] / Hkv;
    if (k->dims[0] != B || v->dims[0] != B || k->dims[1] != T || v->dims[1] != T || dk == 0 || k->dims[2] % dk ||
        k->dims[2] / dk < 1 || Hkv % (k->dims[2] / dk))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "key must be [B, T, H_k * d_k] with H_k dividing kv_num_heads");
    int64_t Hk = k->dims[2] / dk;
    bool gated = rule == LA_GATED || rule == LA_GATED_DELTA, delta = rule == LA_DELTA || rule == LA_GATED_DELTA;
    bool decay_per_dim = false;
    int64_t beta_heads = 0;
    if (gated) {
        if (!decay || decay->rank != 3 || decay->dims[0] != B || decay->dims[1] != T ||
            (decay->dims[2] != Hkv && decay->dims[2] != Hkv * dk))
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "decay must be [B, T, H_kv] or [B, T, H_kv * d_k]");
        decay_per_dim = decay->dims[2] == Hkv * dk && Hkv * dk != Hkv;
    }
    if (delta) {
        if (!beta || beta->rank != 3 || beta->dims[0] != B || beta->dims[1] != T ||
            (beta->dims[2] != Hkv && beta->dims[2] != 1))
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "beta must be [B, T, H_kv] or [B, T, 1]");
        beta_heads = beta->dims[2];
    }
    if (past && (past->rank != 4 || past->dims[0] != B || past->dims[1] != Hkv || past->dims[2] != dk ||
                 past->dims[3] != dv))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "past_state must be [B, H_kv, d_k, d_v]");
    double scale = 1.0 / sqrt((double)dk);
    const ir_attr *sa = ir_node_attr(nd, "scale");
    if (sa && sa->type == IR_ATTR_FLOAT && sa->f != 0.0f) scale = sa->f;
    int64_t od[3] = {B, T, Hq * dv}, sd[4] = {B, Hkv, dk, dv};
    rt_tensor *out, *present = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, q->dtype, 3, od, &out);
    if (st == KILN_OK && n_out > 1)
        st = cpu_alloc_out(ctx, outputs, n_out, 1, past ? past->dtype : q->dtype, 4, sd, &present);
    if (st != KILN_OK) return st;
    double *S = malloc(sizeof(double) * (size_t)(dk * dv + dk + dv + 1));
    if (!S) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    double *kv = S + dk * dv, *u = kv + dk; /* key vector, S^T k */
    int64_t group = Hq / Hkv, kgroup = Hkv / Hk;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++) {
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] = past ? cpu_load_f64(past->data, past->dtype, (uint64_t)(((b * Hkv + h) * dk) * dv + i)) : 0.0;
            for (int64_t t = 0; t < T; t++) {
                uint64_t bt = (uint64_t)(b * T + t);
                int64_t kh = h / kgroup;
                for (int64_t i = 0; i < dk; i++)
                    kv[i] = cpu_load_f64(k->data, k->dtype, bt * (uint64_t)(Hk * dk) + (uint64_t)(kh * dk + i));
                if (gated)
                    for (int64_t i = 0; i < dk; i++) {
                        uint64_t gi = decay_per_dim ? bt * (uint64_t)(Hkv * dk) + (uint64_t)(h * dk + i)
                                                    : bt * (uint64_t)Hkv + (uint64_t)h;
                        double g = exp(cpu_load_f64(decay->data, decay->dtype, gi));
                        for (int64_t j = 0; j < dv; j++) S[i * dv + j] *= g;
                    }
                double bta = 1.0;
                if (delta) {
                    bta = cpu_load_f64(beta->data, beta->dtype, bt * (uint64_t)beta_heads + (uint64_t)(beta_heads == 1 ? 0 : h));
                    for (int64_t j = 0; j < dv; j++) {
                        double acc = 0;
                        for (int64_t i = 0; i < dk; i++) acc += S[i * dv + j] * kv[i];
                        u[j] = acc;
                    }
                }
                for (int64_t j = 0; j < dv; j++) {
                    double vj = cpu_load_f64(v->data, v->dtype, bt * (uint64_t)(Hkv * dv) + (uint64_t)(h * dv + j));
                    double w = delta ? bta * (vj - u[j]) : vj;
                    for (int64_t i = 0; i < dk; i++) S[i * dv + j] += kv[i] * w;
                }
                for (int64_t g = 0; g < group; g++) {
                    int64_t qh = h * group + g;
                    for (int64_t j = 0; j < dv; j++) {
                        double acc = 0;
                        for (int64_t i = 0; i < dk; i++)
                            acc += cpu_load_f64(q->data, q->dtype, bt * (uint64_t)(Hq * dk) + (uint64_t)(qh * dk + i)) *
                                   S[i * dv + j];
                        cpu_store_f64(out->data, out->dtype, bt * (uint64_t)(Hq * dv) + (uint64_t)(qh * dv + j),
                                      scale * acc);
                    }
                }
            }
            if (present)
                for (int64_t i = 0; i < dk * dv; i++)
                    cpu_store_f64(present->data, present->dtype, (uint64_t)(((b * Hkv + h) * dk) * dv + i), S[i]);
        }
    free(S);
    return KILN_OK;
}

kiln_status cpu_CausalConvWithState(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                    rt_value *outputs, int32_t n_out) {
    const rt_tensor *x, *w, *bias = cpu_in(inputs, n_in, 2), *past = cpu_in(inputs, n_in, 3);
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &w);
    if (st != KILN_OK) return st;
    if (!is_float(x->dtype) || w->dtype != x->dtype)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "input and weight must share a float dtype");
    if (x->rank != 3 || w->rank != 3 || w->dims[0] != x->dims[1] || w->dims[1] != 1 || w->dims[2] < 1)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "expected input [B, C, L] and depthwise weight [C, 1, K]");
    int64_t B = x->dims[0], C = x->dims[1], L = x->dims[2], K = w->dims[2];
    if (bias && bias->count != (uint64_t)C) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "bias must be [C]");
    if (past && (past->rank != 3 || past->dims[0] != B || past->dims[1] != C || past->dims[2] != K - 1))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "past_state must be [B, C, K-1]");
    bool silu = str_attr_is(ctx->node, "activation", "silu") || str_attr_is(ctx->node, "activation", "swish");
    if (!silu && ir_node_attr(ctx->node, "activation") && !str_attr_is(ctx->node, "activation", "none") &&
        !str_attr_is(ctx->node, "activation", "identity") && !str_attr_is(ctx->node, "activation", ""))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "activation must be silu, swish or none");
    int64_t sd[3] = {B, C, K - 1};
    rt_tensor *y, *present = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, 3, x->dims, &y);
    if (st == KILN_OK && n_out > 1) st = cpu_alloc_out(ctx, outputs, n_out, 1, past ? past->dtype : x->dtype, 3, sd, &present);
    if (st != KILN_OK) return st;
    int64_t P = L + K - 1;
    double *row = malloc(sizeof(double) * (size_t)(P + 1));
    if (!row) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            for (int64_t i = 0; i < K - 1; i++)
                row[i] = past ? cpu_load_f64(past->data, past->dtype, (uint64_t)((b * C + c) * (K - 1) + i)) : 0.0;
            for (int64_t i = 0; i < L; i++) row[K - 1 + i] = cpu_load_f64(x->data, x->dtype, (uint64_t)((b * C + c) * L + i));
            double bv = bias ? cpu_load_f64(bias->data, bias->dtype, (uint64_t)c) : 0.0;
            for (int64_t o = 0; o < L; o++) {
                double acc = bv;
                for (int64_t t = 0; t < K; t++) acc += row[o + t] * cpu_load_f64(w->data, w->dtype, (uint64_t)(c * K + t));
                if (silu) acc = acc / (1.0 + exp(-acc));
                cpu_store_f64(y->data, y->dtype, (uint64_t)((b * C + c) * L + o), acc);
            }
            if (present)
                for (int64_t i = 0; i < K - 1; i++)
                    cpu_store_f64(present->data, present->dtype, (uint64_t)((b * C + c) * (K - 1) + i), row[L + i]);
        }
    free(row);
    return KILN_OK;
}
