/* cpu_attention.c - Attention (opset 23/24) and RotaryEmbedding (opset 23).
 *
 * Attention follows the ONNX function body: Q [B, Hq, S, Dqk] (or 3-D [B, S, Hq*Dqk] with
 * q_num_heads/kv_num_heads), K/V [B, Hkv, L, D] concatenated after past_key/past_value
 * along the sequence (present_key/present_value), scores = (Q K^T) * scale, optional
 * softcap c*tanh(s/c), plus a bias built from attn_mask (bool: false -> -inf; float:
 * added; a mask narrower than the total kv length is padded with -inf), is_causal
 * (query i sees key j <= i + past length, bottom-right aligned) and nonpad_kv_seqlen
 * (opset 24: keys at or past the length are masked). Softmax over keys; a row whose bias
 * is all -inf produces zeros (not NaN). Y = P V. GQA: query head h reads kv head
 * h / (Hq / Hkv). qk_matmul_output returns the scores at the stage chosen by
 * qk_matmul_output_mode (0 raw or softcapped scores, 2 with bias, 3 softmax).
 *
 * Each (batch, head) pair is one parallel task; math is float32 (cpu_fbuf.h converts
 * float16/float64). The common float32 case (no KV cache, no extra outputs) runs fused
 * through the packed GEMM (cpu_attention_fast.h); the rest uses the plain dot-product loop
 * below, which is also the reference the fused kernel is tested against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_attention_fast.h"
#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_gemm_packed.h"

typedef struct att_job {
    int64_t B, Hq, Hkv, S, L, past, T, Dq, Dv;
    int rank; /* 3 or 4 (layout of Q/K/V and Y) */
    const float *q, *k, *v;       /* inputs in their own layout */
    const float *pk, *pv;         /* past [B, Hkv, past, D] or NULL */
    float *ok, *ov;               /* present_key/value [B, Hkv, T, D] (float32 scratch) */
    const float *maskf;           /* float mask or NULL */
    const uint8_t *maskb;         /* bool mask or NULL */
    int64_t mstr[4], mdims[4];    /* mask strides for (b, h, i, j) (0 = broadcast) */
    int64_t mlen;                 /* mask width (<= T) */
    const int64_t *nonpad;        /* [B] or NULL */
    bool causal;
    float scale, softcap;
    int mode;
    float *y;  /* [B, Hq, S, Dv] or [B, S, Hq*Dv] */
    float *qk; /* [B, Hq, S, T] or NULL */
    int oom;   /* set by a task that could not get its row buffer */
} att_job;

/* Element (b, h, s, d) of a rank-3 ([B, S, H*D]) or rank-4 ([B, H, S, D]) tensor. */
static inline int64_t att_index(int rank, int64_t H, int64_t S, int64_t D, int64_t b, int64_t h, int64_t s,
                                int64_t d) {
    return rank == 4 ? ((b * H + h) * S + s) * D + d : (b * S + s) * H * D + h * D + d;
}

static void att_run(void *user, int64_t begin, int64_t end) {
    const att_job *j = user;
    float *row = malloc(sizeof(float) * (size_t)(2 * j->T + 1));
    if (!row) {
        __atomic_store_n(&((att_job *)user)->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    float *bias = row + j->T;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / j->Hq, h = bh % j->Hq;
        int64_t hk = h / (j->Hq / j->Hkv);
        const float *K = j->ok + (b * j->Hkv + hk) * j->T * j->Dq;
        const float *V = j->ov + (b * j->Hkv + hk) * j->T * j->Dv;
        int64_t offset = j->past;
        if (j->nonpad && !j->past) offset = j->nonpad[b] - j->S;
        for (int64_t i = 0; i < j->S; i++) {
            /* bias for this row */
            bool any = false;
            for (int64_t t = 0; t < j->T; t++) {
                float bv = 0.f;
                if (j->maskf || j->maskb) {
                    if (t >= j->mlen) bv = -INFINITY;
                    else {
                        int64_t mi = b * j->mstr[0] + h * j->mstr[1] + i * j->mstr[2] + t * j->mstr[3];
                        bv = j->maskb ? (j->maskb[mi] ? 0.f : -INFINITY) : j->maskf[mi];
                    }
                }
                if (j->causal && t > i + offset) bv = -INFINITY;
                if (j->nonpad && t >= j->nonpad[b]) bv = -INFINITY;
                bias[t] = bv;
                if (bv != -INFINITY) any = true;
            }
            for (int64_t t = 0; t < j->T; t++) {
                float s = 0.f;
                const float *kr = K + t * j->Dq;
                for (int64_t d = 0; d < j->Dq; d++)
                    s += j->q[att_index(j->rank, j->Hq, j->S, j->Dq, b, h, i, d)] * kr[d];
                s *= j->scale;
                if (j->softcap > 0.f) s = j->softcap * tanhf(s / j->softcap);
                row[t] = s;
            }
            float *qk = j->qk ? j->qk + ((b * j->Hq + h) * j->S + i) * j->T : NULL;
            if (qk && j->mode <= 1) memcpy(qk, row, sizeof(float) * (size_t)j->T);
            float mx = -INFINITY;
            for (int64_t t = 0; t < j->T; t++) {
                row[t] += bias[t];
                if (row[t] > mx) mx = row[t];
            }
            if (qk && j->mode == 2) memcpy(qk, row, sizeof(float) * (size_t)j->T);
            if (!any) {
                for (int64_t t = 0; t < j->T; t++) row[t] = 0.f;
            } else {
                if (mx == -INFINITY) mx = 0.f;
                float sum = 0.f;
                for (int64_t t = 0; t < j->T; t++) {
                    row[t] = expf(row[t] - mx);
                    sum += row[t];
                }
                float inv = sum > 0.f ? 1.f / sum : 1.f;
                for (int64_t t = 0; t < j->T; t++) row[t] *= inv;
            }
            if (qk && j->mode == 3) memcpy(qk, row, sizeof(float) * (size_t)j->T);
            for (int64_t d = 0; d < j->Dv; d++) {
                float acc = 0.f;
                for (int64_t t = 0; t < j->T; t++) acc += row[t] * V[t * j->Dv + d];
                j->y[att_index(j->rank, j->Hq, j->S, j->Dv, b, h, i, d)] = acc;
            }
        }
    }
    free(row);
}

/* Whether the fused kernel (cpu_attention_fast.h) covers this call: float32 Q/K/V, no KV
 * cache in or out, no scores output, no softcap or per-batch key lengths, and nothing
 * empty. Masks of any float type arrive as float32 (cpu_fbuf_any) or bool. */
static bool att_fast_applies(const cpu_kernel_ctx *ctx, const att_job *j, const rt_tensor *tq, const rt_tensor *tpk,
                             int32_t n_out) {
    return tq->dtype == KILN_DTYPE_FLOAT && !tpk && !j->nonpad && j->softcap == 0.f && !cpu_out_wanted(ctx, n_out, 1) &&
           !cpu_out_wanted(ctx, n_out, 2) && !cpu_out_wanted(ctx, n_out, 3) && j->S > 0 && j->T > 0 && j->Dq > 0 &&
           j->Dv > 0 && cpu_gemm_packed_supported();
}

/* The fused kernel's view of Q, K, V and Y in their rank-3 or rank-4 layouts. */
static cpu_att_problem att_fast_problem(const att_job *j, const float *q, const float *k, const float *v, float *y,
                                        int64_t row_stride) {
    cpu_att_problem p;
    memset(&p, 0, sizeof p);
    p.B = j->B, p.Hq = j->Hq, p.Hkv = j->Hkv, p.S = j->S, p.T = j->T, p.Dq = j->Dq, p.Dv = j->Dv;
    bool r4 = j->rank == 4;
    p.q = (cpu_att_operand){q, j->Hq * j->S * j->Dq, r4 ? j->S * j->Dq : j->Dq, r4 ? j->Dq : j->Hq * j->Dq};
    p.k = (cpu_att_operand){k, j->Hkv * j->L * j->Dq, r4 ? j->L * j->Dq : j->Dq, r4 ? j->Dq : j->Hkv * j->Dq};
    p.v = (cpu_att_operand){v, j->Hkv * j->L * j->Dv, r4 ? j->L * j->Dv : j->Dv, r4 ? j->Dv : j->Hkv * j->Dv};
    if (row_stride) { /* rank-3 views whose rows lie row_stride floats apart (cpu_attention_rows) */
        p.q.ss = p.k.ss = p.v.ss = row_stride;
        p.q.sb = j->S * row_stride;
        p.k.sb = p.v.sb = j->L * row_stride;
    }
    p.y = y;
    p.y_sb = j->Hq * j->S * j->Dv, p.y_sh = r4 ? j->S * j->Dv : j->Dv, p.y_ss = r4 ? j->Dv : j->Hq * j->Dv;
    p.maskf = j->maskf, p.maskb = j->maskb;
    memcpy(p.mstr, j->mstr, sizeof p.mstr);
    p.mlen = j->mlen;
    p.causal = j->causal;
    p.scale = j->scale;
    return p;
}

/* Copies past (may be NULL) then new keys (in the input layout) into present [B, H, T, D]. */
static void att_concat(const float *past, int64_t P, const float *cur, int rank, int64_t B, int64_t H, int64_t L,
                       int64_t D, float *out) {
    int64_t T = P + L;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float *o = out + (b * H + h) * T * D;
            if (P) memcpy(o, past + (b * H + h) * P * D, sizeof(float) * (size_t)(P * D));
            for (int64_t l = 0; l < L; l++)
                for (int64_t d = 0; d < D; d++) o[(P + l) * D + d] = cur[att_index(rank, H, L, D, b, h, l, d)];
        }
}

static kiln_status attention(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out, int64_t row_stride);

kiln_status cpu_attention(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out) {
    return attention(ctx, inputs, n_in, outputs, n_out, 0);
}

kiln_status cpu_attention_rows(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out, int64_t row_stride) {
    return attention(ctx, inputs, n_in, outputs, n_out, row_stride);
}

/* row_stride != 0: Q, K, V are rank-3 float32 views with rows that far apart, which only
 * the fused kernel reads correctly; anything it does not cover returns KILN_ERR_UNSUPPORTED
 * before touching an output (cpu_attention_rows). */
static kiln_status attention(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out, int64_t row_stride) {
    const rt_tensor *tq = cpu_in(inputs, n_in, 0), *tk = cpu_in(inputs, n_in, 1), *tv = cpu_in(inputs, n_in, 2);
    const rt_tensor *tm = cpu_in(inputs, n_in, 3), *tpk = cpu_in(inputs, n_in, 4), *tpv = cpu_in(inputs, n_in, 5);
    const rt_tensor *tnp = cpu_in(inputs, n_in, 6);
    if (!tq || !tk || !tv) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Q, K and V are required");
    if (tq->rank != tk->rank || tq->rank != tv->rank || (tq->rank != 3 && tq->rank != 4))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Q, K and V must all be rank 3 or all rank 4");
    if (tq->dtype != tk->dtype || tq->dtype != tv->dtype)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "Q, K and V must have one type");
    if ((tpk == NULL) != (tpv == NULL))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given together");
    att_job j;
    memset(&j, 0, sizeof j);
    j.rank = tq->rank;
    j.B = tq->dims[0];
    if (j.rank == 4) {
        j.Hq = tq->dims[1];
        j.S = tq->dims[2];
        j.Dq = tq->dims[3];
        j.Hkv = tk->dims[1];
        j.L = tk->dims[2];
        j.Dv = tv->dims[3];
        if (tk->dims[3] != j.Dq || tv->dims[1] != j.Hkv || tv->dims[2] != j.L)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "K must be [B, Hkv, L, Dq] and V [B, Hkv, L, Dv]");
    } else {
        j.Hq = ir_node_attr_int(ctx->node, "q_num_heads", 0);
        j.Hkv = ir_node_attr_int(ctx->node, "kv_num_heads", 0);
        if (j.Hq <= 0 || j.Hkv <= 0)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "3-D inputs need q_num_heads and kv_num_heads > 0");
        if (tq->dims[2] % j.Hq || tk->dims[2] % j.Hkv || tv->dims[2] % j.Hkv)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "hidden sizes must divide by the head counts");
        j.S = tq->dims[1];
        j.Dq = tq->dims[2] / j.Hq;
        j.L = tk->dims[1];
        j.Dv = tv->dims[2] / j.Hkv;
        if (tk->dims[2] / j.Hkv != j.Dq || tv->dims[1] != j.L)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "K's head size must equal Q's and V's length K's");
    }
    if (tk->dims[0] != j.B || tv->dims[0] != j.B) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "batch sizes differ");
    if (j.Hkv <= 0 || j.Hq % j.Hkv)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "q heads (%lld) must be a multiple of kv heads (%lld)",
                               (long long)j.Hq, (long long)j.Hkv);
    if (tpk) {
        if (tpk->rank != 4 || tpv->rank != 4 || tpk->dims[0] != j.B || tpk->dims[1] != j.Hkv ||
            tpk->dims[3] != j.Dq || tpv->dims[0] != j.B || tpv->dims[1] != j.Hkv || tpv->dims[3] != j.Dv ||
            tpv->dims[2] != tpk->dims[2])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "past_key/past_value must be [B, Hkv, P, D]");
        j.past = tpk->dims[2];
    }
    j.T = j.past + j.L;
    double sc = ir_node_attr_float(ctx->node, "scale", 0.f);
    const ir_attr *sa = ir_node_attr(ctx->node, "scale");
    j.scale = sa ? (float)sc : (float)(1.0 / sqrt((double)(j.Dq ? j.Dq : 1)));
    j.softcap = ir_node_attr_float(ctx->node, "softcap", 0.f);
    j.causal = ir_node_attr_int(ctx->node, "is_causal", 0) != 0;
    j.mode = (int)ir_node_attr_int(ctx->node, "qk_matmul_output_mode", 0);
    if (j.mode < 0 || j.mode > 3)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "qk_matmul_output_mode must be 0..3");

    kiln_status st = KILN_OK;
    const float *q = NULL, *k = NULL, *v = NULL, *pk = NULL, *pv = NULL;
    float *oq = NULL, *okk = NULL, *ovv = NULL, *opk = NULL, *opv = NULL, *mf = NULL, *pres_k = NULL,
          *pres_v = NULL, *ys = NULL, *qks = NULL, *yd = NULL, *qkd = NULL;
    int64_t *nonpad = NULL;
    rt_tensor *ty = NULL, *tqk = NULL;
    if ((st = cpu_fbuf_get(ctx, tq, "Q", &q, &oq)) != KILN_OK) goto done;
    if ((st = cpu_fbuf_get(ctx, tk, "K", &k, &okk)) != KILN_OK) goto done;
    if ((st = cpu_fbuf_get(ctx, tv, "V", &v, &ovv)) != KILN_OK) goto done;
    if (tpk) {
        if ((st = cpu_fbuf_get(ctx, tpk, "past_key", &pk, &opk)) != KILN_OK) goto done;
        if ((st = cpu_fbuf_get(ctx, tpv, "past_value", &pv, &opv)) != KILN_OK) goto done;
    }
    if (tm && tm->count) {
        if (tm->rank < 2 || tm->rank > 4)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "attn_mask must have rank 2 to 4");
        int64_t want[4] = {j.B, j.Hq, j.S, j.T};
        int64_t md[4] = {1, 1, 1, 1};
        for (int32_t i = 0; i < tm->rank; i++) md[4 - tm->rank + i] = tm->dims[i];
        int64_t stride = 1;
        for (int i = 3; i >= 0; i--) {
            if (i < 3 && md[i] != 1 && md[i] != want[i]) {
                st = cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "attn_mask dim %d (%lld) does not broadcast to %lld", i,
                                     (long long)md[i], (long long)want[i]);
                goto done;
            }
            j.mstr[i] = md[i] == 1 ? 0 : stride;
            stride *= md[i];
        }
        if (md[3] > j.T) {
            st = cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "attn_mask is wider (%lld) than the kv length (%lld)",
                                 (long long)md[3], (long long)j.T);
            goto done;
        }
        j.mlen = md[3];
        j.mstr[3] = 1;
        if (md[3] == 1 && j.T != 1) j.mstr[3] = 0, j.mlen = j.T;
        if (tm->dtype == KILN_DTYPE_BOOL) j.maskb = tm->data;
        else {
            if ((st = cpu_fbuf_any(ctx, tm, "attn_mask", &mf)) != KILN_OK) goto done;
            j.maskf = mf;
        }
    }
    if (tnp && tnp->count) {
        if (tnp->count != (uint64_t)j.B) {
            st = cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "nonpad_kv_seqlen must have one entry per batch");
            goto done;
        }
        nonpad = malloc(sizeof(int64_t) * (size_t)j.B);
        if (!nonpad) {
            st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int64_t b = 0; b < j.B; b++) nonpad[b] = cpu_load_i64(tnp->data, tnp->dtype, (uint64_t)b);
        j.nonpad = nonpad;
    }
    bool fast = att_fast_applies(ctx, &j, tq, tpk, n_out);
    if (row_stride && (j.rank != 3 || !fast)) {
        st = KILN_ERR_UNSUPPORTED;
        goto done;
    }
    /* the common case (no KV cache, no extra outputs) through the fused GEMM kernel */
    if (fast) {
        int64_t yd4f[4] = {j.B, j.Hq, j.S, j.Dv}, yd3f[3] = {j.B, j.S, j.Hq * j.Dv};
        rt_tensor *y = rt_value_as_tensor(&outputs[0]);
        st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, j.rank, j.rank == 4 ? yd4f : yd3f, ctx->err);
        if (st == KILN_OK) {
            cpu_att_problem pr = att_fast_problem(&j, q, k, v, y->data, row_stride);
            kiln_error e = {0};
            st = cpu_attention_fast(ctx->pool, &pr, &e);
            if (st != KILN_OK) st = cpu_kernel_fail(ctx, st, "%s", kiln_err_msg(&e));
            kiln_err_clear(&e);
        }
        goto done;
    }
    /* present_key / present_value (always built: the kernel reads keys from them) */
    int64_t pkd[4] = {j.B, j.Hkv, j.T, j.Dq}, pvd[4] = {j.B, j.Hkv, j.T, j.Dv};
    rt_tensor *tpres_k = NULL, *tpres_v = NULL;
    float *kbuf = NULL, *vbuf = NULL;
    if (cpu_out_wanted(ctx, n_out, 1)) {
        if ((st = cpu_fbuf_out(ctx, outputs, n_out, 1, tq->dtype, 4, pkd, &tpres_k, &kbuf, &pres_k)) != KILN_OK)
            goto done;
    } else {
        pres_k = malloc(sizeof(float) * (size_t)(j.B * j.Hkv * j.T * j.Dq + 1));
        kbuf = pres_k;
    }
    if (cpu_out_wanted(ctx, n_out, 2)) {
        if ((st = cpu_fbuf_out(ctx, outputs, n_out, 2, tq->dtype, 4, pvd, &tpres_v, &vbuf, &pres_v)) != KILN_OK)
            goto done;
    } else {
        pres_v = malloc(sizeof(float) * (size_t)(j.B * j.Hkv * j.T * j.Dv + 1));
        vbuf = pres_v;
    }
    if (!kbuf || !vbuf) {
        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the key/value cache");
        goto done;
    }
    att_concat(pk, j.past, k, j.rank, j.B, j.Hkv, j.L, j.Dq, kbuf);
    att_concat(pv, j.past, v, j.rank, j.B, j.Hkv, j.L, j.Dv, vbuf);
    j.q = q;
    j.ok = kbuf;
    j.ov = vbuf;
    int64_t yd4[4] = {j.B, j.Hq, j.S, j.Dv}, yd3[3] = {j.B, j.S, j.Hq * j.Dv};
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tq->dtype, j.rank, j.rank == 4 ? yd4 : yd3, &ty, &yd, &ys)) !=
        KILN_OK)
        goto done;
    j.y = yd;
    if (cpu_out_wanted(ctx, n_out, 3)) {
        int64_t qd[4] = {j.B, j.Hq, j.S, j.T};
        if ((st = cpu_fbuf_out(ctx, outputs, n_out, 3, tq->dtype, 4, qd, &tqk, &qkd, &qks)) != KILN_OK) goto done;
        j.qk = qkd;
    }
    if (j.B * j.Hq * j.S > 0) cpu_parallel_for(ctx->pool, j.B * j.Hq, 1, att_run, &j);
    if (j.oom) {
        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for attention rows");
        goto done;
    }
    cpu_fbuf_finish(ty, ys);
    ys = NULL;
    cpu_fbuf_finish(tqk, qks);
    qks = NULL;
    if (tpres_k) cpu_fbuf_finish(tpres_k, pres_k);
    else free(pres_k);
    if (tpres_v) cpu_fbuf_finish(tpres_v, pres_v);
    else free(pres_v);
    pres_k = pres_v = NULL;
done:
    free(oq), free(okk), free(ovv), free(opk), free(opv), free(mf), free(ys), free(qks), free(pres_k),
        free(pres_v), free(nonpad);
    return st;
}

/* ---- RotaryEmbedding ----------------------------------------------------------------- */

kiln_status cpu_rotary_embedding(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                 rt_value *outputs, int32_t n_out) {
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *tc = cpu_in(inputs, n_in, 1), *ts = cpu_in(inputs, n_in, 2);
    const rt_tensor *tp = cpu_in(inputs, n_in, 3);
    if (!tx || !tc || !ts) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "X, cos_cache and sin_cache are required");
    if (tx->rank != 3 && tx->rank != 4) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be rank 3 or 4");
    bool inter = ir_node_attr_int(ctx->node, "interleaved", 0) != 0;
    int64_t B = tx->dims[0], S, H, D;
    if (tx->rank == 4) {
        H = tx->dims[1];
        S = tx->dims[2];
        D = tx->dims[3];
    } else {
        H = ir_node_attr_int(ctx->node, "num_heads", 0);
        S = tx->dims[1];
        if (H <= 0 || tx->dims[2] % H)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "3-D X needs num_heads dividing its hidden size");
        D = tx->dims[2] / H;
    }
    int64_t R = ir_node_attr_int(ctx->node, "rotary_embedding_dim", 0);
    if (R == 0) R = D;
    if (R < 0 || R > D || R % 2) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad rotary_embedding_dim %lld", (long long)R);
    int64_t half = R / 2;
    if (tc->rank < 2 || tc->dims[tc->rank - 1] != half || ts->rank != tc->rank || ts->count != tc->count)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cos/sin caches must end in rotary_embedding_dim/2 = %lld",
                               (long long)half);
    int64_t *pos = NULL;
    kiln_status st = KILN_OK;
    const float *x, *c, *s;
    float *ox = NULL, *oc = NULL, *os = NULL, *ys = NULL, *y;
    rt_tensor *ty = NULL;
    if (tp) {
        if (tp->count != (uint64_t)(B * S) || tc->rank != 2)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "position_ids must be [B, S] with 2-D caches");
        pos = malloc(sizeof(int64_t) * (size_t)(B * S + 1));
        if (!pos) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < B * S; i++) {
            pos[i] = cpu_load_i64(tp->data, tp->dtype, (uint64_t)i);
            if (pos[i] < 0 || pos[i] >= tc->dims[0]) {
                long long bad = (long long)pos[i];
                free(pos);
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "position id %lld is outside the cache (%lld rows)",
                                       bad, (long long)tc->dims[0]);
            }
        }
    } else if (!((tc->rank == 3 && tc->dims[0] == B && tc->dims[1] == S) || (tc->rank == 2 && tc->dims[0] == S))) {
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "without position_ids the caches must be [B, S, R/2] or [S, R/2]");
    }
    if ((st = cpu_fbuf_get(ctx, tx, "X", &x, &ox)) != KILN_OK) goto done;
    if ((st = cpu_fbuf_get(ctx, tc, "cos_cache", &c, &oc)) != KILN_OK) goto done;
    if ((st = cpu_fbuf_get(ctx, ts, "sin_cache", &s, &os)) != KILN_OK) goto done;
    if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, tx->rank, tx->dims, &ty, &y, &ys)) != KILN_OK) goto done;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                int64_t off = tx->rank == 4 ? ((b * H + h) * S + i) * D : (b * S + i) * H * D + h * D;
                int64_t crow = pos ? pos[b * S + i] : (tc->rank == 3 ? b * S + i : i);
                const float *cr = c + crow * half, *sr = s + crow * half;
                const float *xr = x + off;
                float *yr = y + off;
                for (int64_t k = 0; k < half; k++) {
                    int64_t i1 = inter ? 2 * k : k, i2 = inter ? 2 * k + 1 : k + half;
                    float x1 = xr[i1], x2 = xr[i2];
                    yr[i1] = cr[k] * x1 - sr[k] * x2;
                    yr[i2] = sr[k] * x1 + cr[k] * x2;
                }
                for (int64_t k = R; k < D; k++) yr[k] = xr[k];
            }
    cpu_fbuf_finish(ty, ys);
    ys = NULL;
done:
    free(pos), free(ox), free(oc), free(os), free(ys);
    return st;
}
