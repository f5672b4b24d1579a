/* cpu_rnn.c - RNN, GRU and LSTM (opsets 7/14/22 semantics, layout 0 and 1).
 *
 * Shared driver for the three recurrences. Inputs are brought to float32 (cpu_fbuf.h)
 * and X to [seq, batch, input]. For each direction (forward, reverse, or both for
 * bidirectional) the input projection X * W^T for all time steps is one sgemm; each
 * step then multiplies the previous hidden state by R^T (one sgemm over the batch) and
 * applies the cell:
 *   RNN  h = f(xW + hR + Wb + Rb)
 *   GRU  z, r = f(..), n = g(xWn + (r*h)Rn + Rbn + Wbn) or, with linear_before_reset,
 *        g(xWn + r*(hRn + Rbn) + Wbn); h = (1-z)*n + z*h
 *   LSTM i, f = f(.. + P*c), c~ = g(..), c = f*c + i*c~, o = f(.. + Po*c), h = o*h(c);
 *        input_forget couples f = 1 - i; `clip` bounds every gate pre-activation.
 * Gate orders are ONNX's: GRU z,r,h; LSTM i,o,f,c; peepholes P = i,o,f.
 * sequence_lens stops a batch entry early: its later Y rows are zero and Y_h/Y_c keep
 * its last valid state; the reverse direction starts at that entry's own last step.
 * `activations` (with activation_alpha/beta consumed in order by the functions that take
 * them) overrides the defaults per direction.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_gemm.h"

typedef enum rnn_kind { RNN_SIMPLE, RNN_GRU, RNN_LSTM } rnn_kind;

typedef enum rnn_fn {
    RF_RELU,
    RF_TANH,
    RF_SIGMOID,
    RF_AFFINE,
    RF_LEAKYRELU,
    RF_THRESHOLDEDRELU,
    RF_SCALEDTANH,
    RF_HARDSIGMOID,
    RF_ELU,
    RF_SOFTSIGN,
    RF_SOFTPLUS
} rnn_fn;

typedef struct rnn_act {
    rnn_fn fn;
    float a, b;
} rnn_act;

static float rnn_apply(const rnn_act *f, float x) {
    switch (f->fn) {
    case RF_RELU: return x > 0 ? x : 0;
    case RF_TANH: return tanhf(x);
    case RF_SIGMOID: return 1.f / (1.f + expf(-x));
    case RF_AFFINE: return f->a * x + f->b;
    case RF_LEAKYRELU: return x >= 0 ? x : f->a * x;
    case RF_THRESHOLDEDRELU: return x > f->a ? x : 0;
    case RF_SCALEDTANH: return f->a * tanhf(f->b * x);
    case RF_HARDSIGMOID: {
        float v = f->a * x + f->b;
        return v < 0 ? 0 : v > 1 ? 1 : v;
    }
    case RF_ELU: return x >= 0 ? x : f->a * (expf(x) - 1);
    case RF_SOFTSIGN: return x / (1 + fabsf(x));
    case RF_SOFTPLUS: return log1pf(expf(x));
    }
    return x;
}

static const struct {
    const char *name;
    rnn_fn fn;
    int n_params; /* 0, 1 (alpha) or 2 (alpha, beta) */
    float da, db;
} rnn_fns[] = {{"Relu", RF_RELU, 0, 0, 0},
               {"Tanh", RF_TANH, 0, 0, 0},
               {"Sigmoid", RF_SIGMOID, 0, 0, 0},
               {"Affine", RF_AFFINE, 2, 1.f, 0.f},
               {"LeakyRelu", RF_LEAKYRELU, 1, 0.01f, 0},
               {"ThresholdedRelu", RF_THRESHOLDEDRELU, 1, 1.f, 0},
               {"ScaledTanh", RF_SCALEDTANH, 2, 1.f, 1.f},
               {"HardSigmoid", RF_HARDSIGMOID, 2, 0.2f, 0.5f},
               {"Elu", RF_ELU, 1, 1.f, 0},
               {"Softsign", RF_SOFTSIGN, 0, 0, 0},
               {"Softplus", RF_SOFTPLUS, 0, 0, 0}};

/* Fills acts[n_dir][per_dir] from the node's attributes or the defaults. */
static kiln_status rnn_parse_acts(cpu_kernel_ctx *ctx, int per_dir, int n_dir, const rnn_fn *defaults,
                                  rnn_act acts[2][3]) {
    const ir_attr *names = ir_node_attr(ctx->node, "activations");
    const ir_attr *al = ir_node_attr(ctx->node, "activation_alpha");
    const ir_attr *be = ir_node_attr(ctx->node, "activation_beta");
    int ia = 0, ib = 0;
    for (int d = 0; d < n_dir; d++)
        for (int k = 0; k < per_dir; k++) {
            acts[d][k].fn = defaults[k];
            acts[d][k].a = acts[d][k].b = 0;
        }
    if (!names || names->type != IR_ATTR_STRINGS || names->n == 0) return KILN_OK;
    if (names->n != per_dir && names->n != per_dir * n_dir)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "activations must list %d (or %d) functions, got %d",
                               per_dir * n_dir, per_dir, (int)names->n);
    for (int i = 0; i < names->n; i++) {
        int found = -1;
        for (size_t f = 0; f < sizeof rnn_fns / sizeof rnn_fns[0]; f++) {
            size_t len = strlen(rnn_fns[f].name);
            if (names->strings[i].len == len && !strncasecmp((const char *)names->strings[i].data, rnn_fns[f].name, len))
                found = (int)f;
        }
        if (found < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "unknown activation '%.*s'", (int)names->strings[i].len,
                                   (const char *)names->strings[i].data);
        rnn_act a = {rnn_fns[found].fn, rnn_fns[found].da, rnn_fns[found].db};
        if (rnn_fns[found].n_params >= 1 && al && al->type == IR_ATTR_FLOATS && ia < al->n) a.a = al->floats[ia++];
        if (rnn_fns[found].n_params >= 2 && be && be->type == IR_ATTR_FLOATS && ib < be->n) a.b = be->floats[ib++];
        int d = i / per_dir, k = i % per_dir;
        acts[d][k] = a;
        if (names->n == per_dir && n_dir == 2) acts[1][k] = a;
    }
    return KILN_OK;
}

static kiln_status rnn_common(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out, rnn_kind kind) {
    const int G = kind == RNN_SIMPLE ? 1 : kind == RNN_GRU ? 3 : 4;
    const rt_tensor *tx = cpu_in(inputs, n_in, 0), *tw = cpu_in(inputs, n_in, 1), *tr = cpu_in(inputs, n_in, 2);
    const rt_tensor *tb = cpu_in(inputs, n_in, 3), *tl = cpu_in(inputs, n_in, 4), *th0 = cpu_in(inputs, n_in, 5);
    const rt_tensor *tc0 = kind == RNN_LSTM ? cpu_in(inputs, n_in, 6) : NULL;
    const rt_tensor *tp = kind == RNN_LSTM ? cpu_in(inputs, n_in, 7) : NULL;
    if (!tx || !tw || !tr) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "X, W and R are required");
    if (tx->rank != 3 || tw->rank != 3 || tr->rank != 3)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X, W and R must be 3-D");
    int layout = (int)ir_node_attr_int(ctx->node, "layout", 0);
    const ir_attr *da = ir_node_attr(ctx->node, "direction");
    int n_dir = 1;
    bool reverse_only = false;
    if (da && da->type == IR_ATTR_STRING) {
        if (da->s.len == 13 && !memcmp(da->s.data, "bidirectional", 13)) n_dir = 2;
        else if (da->s.len == 7 && !memcmp(da->s.data, "reverse", 7)) reverse_only = true;
        else if (!(da->s.len == 7 && !memcmp(da->s.data, "forward", 7)))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "direction must be forward, reverse or bidirectional");
    }
    int64_t S = layout ? tx->dims[1] : tx->dims[0], Bn = layout ? tx->dims[0] : tx->dims[1], I = tx->dims[2];
    int64_t H = tr->dims[2];
    int64_t hs = ir_node_attr_int(ctx->node, "hidden_size", H);
    if (hs != H || tw->dims[0] != n_dir || tr->dims[0] != n_dir || tw->dims[1] != G * H || tr->dims[1] != G * H ||
        tw->dims[2] != I)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                               "W must be [%d, %lld, %lld] and R [%d, %lld, %lld] (hidden_size %lld)", n_dir,
                               (long long)(G * hs), (long long)I, n_dir, (long long)(G * hs), (long long)hs,
                               (long long)hs);
    if (tb && tb->count && tb->count != (uint64_t)(n_dir * 2 * G * H))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "B must be [num_directions, %lld]", (long long)(2 * G * H));
    uint64_t state_n = (uint64_t)(n_dir * Bn * H);
    if (th0 && th0->count && th0->count != state_n) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "initial_h has the wrong size");
    if (tc0 && tc0->count && tc0->count != state_n) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "initial_c has the wrong size");
    if (tp && tp->count && tp->count != (uint64_t)(n_dir * 3 * H)) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "P must be [num_directions, %lld]", (long long)(3 * H));
    if (tl && tl->count && tl->count != (uint64_t)Bn) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "sequence_lens must have one entry per batch");
    float clip = ir_node_attr_float(ctx->node, "clip", 0.f);
    bool has_clip = ir_node_attr(ctx->node, "clip") != NULL;
    bool lbr = ir_node_attr_int(ctx->node, "linear_before_reset", 0) != 0;
    bool input_forget = ir_node_attr_int(ctx->node, "input_forget", 0) != 0;
    static const rnn_fn d_rnn[] = {RF_TANH}, d_gru[] = {RF_SIGMOID, RF_TANH}, d_lstm[] = {RF_SIGMOID, RF_TANH, RF_TANH};
    int per_dir = kind == RNN_SIMPLE ? 1 : kind == RNN_GRU ? 2 : 3;
    rnn_act acts[2][3];
    kiln_status st = rnn_parse_acts(ctx, per_dir, n_dir, kind == RNN_SIMPLE ? d_rnn : kind == RNN_GRU ? d_gru : d_lstm, acts);
    if (st != KILN_OK) return st;

    const float *x = NULL, *w = NULL, *r = NULL, *b = NULL, *h0 = NULL, *c0 = NULL, *p = NULL;
    float *ox = NULL, *ow = NULL, *orr = NULL, *ob = NULL, *oh0 = NULL, *oc0 = NULL, *op = NULL;
    float *xs = NULL, *gx = NULL, *gh = NULL, *hcur = NULL, *ccur = NULL, *hnew = NULL, *ys = NULL, *yhs = NULL, *ycs = NULL;
    int64_t *lens = NULL;
    rt_tensor *ty = NULL, *tyh = NULL, *tyc = NULL;
    float *yd = NULL, *yhd = NULL, *ycd = NULL;
    if ((st = cpu_fbuf_get(ctx, tx, "X", &x, &ox)) || (st = cpu_fbuf_get(ctx, tw, "W", &w, &ow)) ||
        (st = cpu_fbuf_get(ctx, tr, "R", &r, &orr)))
        goto done;
    if (tb && tb->count && (st = cpu_fbuf_get(ctx, tb, "B", &b, &ob))) goto done;
    if (th0 && th0->count && (st = cpu_fbuf_get(ctx, th0, "initial_h", &h0, &oh0))) goto done;
    if (tc0 && tc0->count && (st = cpu_fbuf_get(ctx, tc0, "initial_c", &c0, &oc0))) goto done;
    if (tp && tp->count && (st = cpu_fbuf_get(ctx, tp, "P", &p, &op))) goto done;
    lens = malloc(sizeof(int64_t) * (size_t)(Bn + 1));
    size_t need = (size_t)(S * Bn * I + S * Bn * G * H + Bn * G * H + 3 * Bn * H + 3);
    xs = malloc(sizeof(float) * need);
    if (!lens || !xs) {
        st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the recurrence");
        goto done;
    }
    gx = xs + S * Bn * I;
    gh = gx + S * Bn * G * H;
    hcur = gh + Bn * G * H;
    ccur = hcur + Bn * H;
    hnew = ccur + Bn * H;
    for (int64_t i = 0; i < Bn; i++) {
        lens[i] = tl && tl->count ? cpu_load_i64(tl->data, tl->dtype, (uint64_t)i) : S;
        if (lens[i] < 0 || lens[i] > S) {
            st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                 (long long)i, (long long)lens[i], (long long)S);
            goto done;
        }
    }
    for (int64_t t = 0; t < S; t++) /* X as [S, B, I] */
        for (int64_t bb = 0; bb < Bn; bb++)
            memcpy(xs + (t * Bn + bb) * I, x + (layout ? (bb * S + t) : (t * Bn + bb)) * I, sizeof(float) * (size_t)I);
    /* outputs */
    if (cpu_out_wanted(ctx, n_out, 0)) {
        int64_t d0[4] = {S, n_dir, Bn, H}, d1[4] = {Bn, S, n_dir, H};
        if ((st = cpu_fbuf_out(ctx, outputs, n_out, 0, tx->dtype, 4, layout ? d1 : d0, &ty, &yd, &ys))) goto done;
        memset(yd, 0, sizeof(float) * (size_t)ty->count);
    }
    int64_t s0[3] = {n_dir, Bn, H}, s1[3] = {Bn, n_dir, H};
    if (cpu_out_wanted(ctx, n_out, 1) &&
        (st = cpu_fbuf_out(ctx, outputs, n_out, 1, tx->dtype, 3, layout ? s1 : s0, &tyh, &yhd, &yhs)))
        goto done;
    if (kind == RNN_LSTM && cpu_out_wanted(ctx, n_out, 2) &&
        (st = cpu_fbuf_out(ctx, outputs, n_out, 2, tx->dtype, 3, layout ? s1 : s0, &tyc, &ycd, &ycs)))
        goto done;

    for (int dir = 0; dir < n_dir; dir++) {
        bool rev = reverse_only || dir == 1;
        const float *W = w + dir * G * H * I, *R = r + dir * G * H * H;
        const float *Wb = b ? b + dir * 2 * G * H : NULL, *Rb = b ? Wb + G * H : NULL;
        const float *P = p ? p + dir * 3 * H : NULL;
        const rnn_act *f = acts[dir], *g = &acts[dir][1 < per_dir ? 1 : 0], *hh = &acts[dir][per_dir - 1];
        /* gx = X W^T (+ Wb, + Rb except GRU's h gate with linear_before_reset handled below) */
        cpu_sgemm(ctx->pool, false, true, S * Bn, G * H, I, 1.f, xs, I, W, I, 0.f, gx, G * H, NULL);
        for (int64_t bb = 0; bb < Bn; bb++)
            for (int64_t k = 0; k < H; k++) {
                /* initial_h / initial_c layout: [dir, B, H] or (layout 1) [B, dir, H] */
                int64_t si = layout ? (bb * n_dir + dir) * H + k : (dir * Bn + bb) * H + k;
                hcur[bb * H + k] = h0 ? h0[si] : 0.f;
                ccur[bb * H + k] = c0 ? c0[si] : 0.f;
            }
        for (int64_t step = 0; step < S; step++) {
            /* gh = H_{t-1} R^T for every batch entry */
            cpu_sgemm(ctx->pool, false, true, Bn, G * H, H, 1.f, hcur, H, R, H, 0.f, gh, G * H, NULL);
            for (int64_t bb = 0; bb < Bn; bb++) {
                if (step >= lens[bb]) continue;
                int64_t t = rev ? lens[bb] - 1 - step : step;
                const float *xg = gx + (t * Bn + bb) * G * H;
                const float *hg = gh + bb * G * H;
                float *hp = hcur + bb * H, *cp = ccur + bb * H, *hn = hnew + bb * H;
                for (int64_t k = 0; k < H; k++) {
                    float gv[4];
                    for (int q = 0; q < G; q++) {
                        float v = xg[q * H + k];
                        if (Wb) v += Wb[q * H + k];
                        if (!(kind == RNN_GRU && q == 2)) {
                            v += hg[q * H + k];
                            if (Rb) v += Rb[q * H + k];
                        }
                        gv[q] = v;
                    }
                    if (kind == RNN_SIMPLE) {
                        float v = gv[0];
                        if (has_clip) v = fminf(fmaxf(v, -clip), clip);
                        hn[k] = rnn_apply(&f[0], v);
                    } else if (kind == RNN_GRU) {
                        float zv = gv[0], rv = gv[1];
                        if (has_clip) zv = fminf(fmaxf(zv, -clip), clip), rv = fminf(fmaxf(rv, -clip), clip);
                        float z = rnn_apply(&f[0], zv), rr = rnn_apply(&f[0], rv);
                        hn[k] = z;                       /* park z: the h gate needs every r first */
                        gh[bb * G * H + 1 * H + k] = rr; /* r over its own (already read) slot */
                    } else {
                        float iv = gv[0], ov = gv[1], fv = gv[2], cv = gv[3];
                        if (P) iv += P[k] * cp[k], fv += P[2 * H + k] * cp[k];
                        if (has_clip) {
                            iv = fminf(fmaxf(iv, -clip), clip), fv = fminf(fmaxf(fv, -clip), clip);
                            cv = fminf(fmaxf(cv, -clip), clip);
                        }
                        float ig = rnn_apply(&f[0], iv), fg = input_forget ? 1.f - ig : rnn_apply(&f[0], fv);
                        float cg = rnn_apply(g, cv);
                        float cn = fg * cp[k] + ig * cg;
                        if (P) ov += P[H + k] * cn;
                        if (has_clip) ov = fminf(fmaxf(ov, -clip), clip);
                        float og = rnn_apply(&f[0], ov);
                        hn[k] = og * rnn_apply(hh, cn);
                        cp[k] = cn;
                    }
                }
                if (kind == RNN_GRU) {
                    /* h gate: needs (r * h_{t-1}) R_h^T, or r * (h R_h^T + Rb_h) */
                    const float *Rh = R + 2 * H * H;
                    for (int64_t k = 0; k < H; k++) {
                        float v = xg[2 * H + k] + (Wb ? Wb[2 * H + k] : 0.f);
                        float rk = gh[bb * G * H + H + k];
                        if (lbr) {
                            v += rk * (hg[2 * H + k] + (Rb ? Rb[2 * H + k] : 0.f));
                        } else {
                            float acc = 0.f;
                            for (int64_t j = 0; j < H; j++) acc += gh[bb * G * H + H + j] * hp[j] * Rh[k * H + j];
                            v += acc + (Rb ? Rb[2 * H + k] : 0.f);
                        }
                        if (has_clip) v = fminf(fmaxf(v, -clip), clip);
                        float n = rnn_apply(g, v), z = hn[k];
                        hn[k] = (1.f - z) * n + z * hp[k];
                    }
                }
                memcpy(hp, hn, sizeof(float) * (size_t)H);
                if (yd)
                    for (int64_t k = 0; k < H; k++) {
                        int64_t yi = layout ? ((bb * S + t) * n_dir + dir) * H + k : ((t * n_dir + dir) * Bn + bb) * H + k;
                        yd[yi] = hp[k];
                    }
            }
        }
        for (int64_t bb = 0; bb < Bn; bb++)
            for (int64_t k = 0; k < H; k++) {
                int64_t si = layout ? (bb * n_dir + dir) * H + k : (dir * Bn + bb) * H + k;
                if (yhd) yhd[si] = hcur[bb * H + k];
                if (ycd) ycd[si] = ccur[bb * H + k];
            }
    }
    cpu_fbuf_finish(ty, ys);
    cpu_fbuf_finish(tyh, yhs);
    cpu_fbuf_finish(tyc, ycs);
    ys = yhs = ycs = NULL;
done:
    free(ox), free(ow), free(orr), free(ob), free(oh0), free(oc0), free(op), free(xs), free(lens), free(ys), free(yhs),
        free(ycs);
    return st;
}

kiln_status cpu_rnn(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, int32_t n_out) {
    return rnn_common(ctx, inputs, n_in, outputs, n_out, RNN_SIMPLE);
}
kiln_status cpu_gru(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, int32_t n_out) {
    return rnn_common(ctx, inputs, n_in, outputs, n_out, RNN_GRU);
}
kiln_status cpu_lstm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    return rnn_common(ctx, inputs, n_in, outputs, n_out, RNN_LSTM);
}
