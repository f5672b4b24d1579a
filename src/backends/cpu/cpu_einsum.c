/* cpu_einsum.c - Einsum (opset 12) for any equation: explicit ("ij,jk->ik") or implicit
 * output (labels seen once, alphabetical, after the ellipsis dims), ellipsis broadcasting,
 * repeated labels within one operand (diagonals) and summed-out labels.
 *
 * The equation is parsed into labels; every label gets one size (size-1 dims broadcast)
 * and every operand and the output get a stride per label (summed when a label repeats
 * in one operand, which walks the diagonal; 0 where the label is absent). Two paths:
 *   - two float32 operands whose labels each split cleanly into batch (both inputs and
 *     the output), M (first input and output), N (second input and output) and K (both
 *     inputs, summed) go through strided copies into [batch, M, K] x [batch, K, N] and
 *     one sgemm per batch entry (the contraction path of real models: attention einsums,
 *     bilinear layers);
 *   - everything else runs an odometer over all labels, accumulating products in double.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_gemm.h"

#define ES_MAX_LABELS (52 + RT_MAX_RANK)
#define ES_MAX_OPS 16

typedef struct es_term {
    int n;                 /* number of subscripts (ellipsis expanded) */
    int lab[RT_MAX_RANK];  /* label id per dim */
} es_term;

static int es_letter(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + c - 'A';
    return -1;
}

/* Parses one term; ellipsis dims get ids 52.. right-aligned to ell_rank (the largest
 * ellipsis width over the inputs). rank is the operand's rank (-1 for the output). */
static kiln_status es_parse_term(cpu_kernel_ctx *ctx, const char *s, size_t len, int32_t rank, int *ell_rank,
                                 bool is_out, es_term *t) {
    int letters = 0;
    bool ell = false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            if (ell || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad ellipsis in the equation");
            ell = true;
            i += 2;
            continue;
        }
        if (es_letter(s[i]) < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "unexpected character '%c' in the equation", s[i]);
        letters++;
    }
    int ew = 0;
    if (!is_out) {
        if (ell) {
            ew = rank - letters;
            if (ew < 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a term has more labels than its input's rank");
            if (ew > *ell_rank) *ell_rank = ew;
        } else if (letters != rank) {
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "a term has %d labels but its input has rank %d", letters, (int)rank);
        }
    } else if (ell) {
        ew = *ell_rank;
    }
    if (letters + ew > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "too many subscripts");
    t->n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            /* ellipsis dims: ids 52..; inputs are right-aligned later by es_align */
            for (int k = 0; k < ew; k++) t->lab[t->n++] = 52 + k;
            i += 2;
            continue;
        }
        t->lab[t->n++] = es_letter(s[i]);
    }
    return KILN_OK;
}

/* Ellipsis labels of an input with width ew must be right-aligned: its k-th ellipsis dim
 * is label 52 + (ell_rank - ew + k). */
static void es_align(es_term *t, int ew, int ell_rank) {
    for (int d = 0; d < t->n; d++)
        if (t->lab[d] >= 52) t->lab[d] = 52 + (ell_rank - ew) + (t->lab[d] - 52);
}

typedef struct es_plan {
    int n_ops;
    es_term in[ES_MAX_OPS], out;
    int64_t size[ES_MAX_LABELS];
    bool used[ES_MAX_LABELS];
} es_plan;

static kiln_status es_parse(cpu_kernel_ctx *ctx, const char *eq, size_t len, const rt_tensor *const *ops, int n_ops,
                            es_plan *p) {
    memset(p, 0, sizeof *p);
    p->n_ops = n_ops;
    size_t arrow = len;
    for (size_t i = 0; i + 1 < len; i++)
        if (eq[i] == '-' && eq[i + 1] == '>') arrow = i;
    int ell_rank = 0, ew[ES_MAX_OPS] = {0};
    size_t start = 0;
    int k = 0;
    for (size_t i = 0; i <= arrow; i++) {
        if (i == arrow || eq[i] == ',') {
            if (k >= n_ops) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "the equation has more terms than inputs");
            kiln_status st = es_parse_term(ctx, eq + start, i - start, ops[k]->rank, &ell_rank, false, &p->in[k]);
            if (st != KILN_OK) return st;
            int letters = 0;
            for (int d = 0; d < p->in[k].n; d++) letters += p->in[k].lab[d] < 52;
            ew[k] = ops[k]->rank - letters;
            k++;
            start = i + 1;
        }
    }
    if (k != n_ops) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "the equation has %d terms for %d inputs", k, n_ops);
    for (int o = 0; o < n_ops; o++) es_align(&p->in[o], ew[o], ell_rank);
    if (arrow < len) {
        kiln_status st = es_parse_term(ctx, eq + arrow + 2, len - arrow - 2, -1, &ell_rank, true, &p->out);
        if (st != KILN_OK) return st;
        for (int d = 0; d < p->out.n; d++)
            for (int e = d + 1; e < p->out.n; e++)
                if (p->out.lab[d] == p->out.lab[e])
                    return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "an output label repeats");
    } else { /* implicit: ellipsis dims, then labels used exactly once, alphabetical */
        int count[52] = {0};
        for (int o = 0; o < n_ops; o++)
            for (int d = 0; d < p->in[o].n; d++)
                if (p->in[o].lab[d] < 52) count[p->in[o].lab[d]]++;
        p->out.n = 0;
        for (int e = 0; e < ell_rank; e++) p->out.lab[p->out.n++] = 52 + e;
        /* alphabetical in ASCII: uppercase (ids 26..51) sort before lowercase */
        for (int c = 26; c < 52; c++)
            if (count[c] == 1) p->out.lab[p->out.n++] = c;
        for (int c = 0; c < 26; c++)
            if (count[c] == 1) p->out.lab[p->out.n++] = c;
        if (p->out.n > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "output rank too large");
    }
    for (int l = 0; l < ES_MAX_LABELS; l++) p->size[l] = 1;
    for (int o = 0; o < n_ops; o++)
        for (int d = 0; d < p->in[o].n; d++) {
            int l = p->in[o].lab[d];
            int64_t s = ops[o]->dims[d];
            if (p->used[l] && p->size[l] != s && s != 1 && p->size[l] != 1)
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "label '%c' has sizes %lld and %lld",
                                       l < 26 ? 'a' + l : l < 52 ? 'A' + l - 26 : '.', (long long)p->size[l], (long long)s);
            if (!p->used[l] || p->size[l] == 1) p->size[l] = s;
            p->used[l] = true;
        }
    for (int d = 0; d < p->out.n; d++)
        if (!p->used[p->out.lab[d]])
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "output label not found in any input");
    return KILN_OK;
}

/* Stride per label for operand o (0 when absent or broadcast). */
static void es_strides(const es_plan *p, const es_term *t, const int64_t *dims, int64_t *str) {
    int64_t cs[RT_MAX_RANK];
    cpu_contiguous_strides(t->n, dims, cs);
    for (int l = 0; l < ES_MAX_LABELS; l++) str[l] = 0;
    for (int d = 0; d < t->n; d++)
        if (dims[d] != 1 || p->size[t->lab[d]] == 1) str[t->lab[d]] += cs[d];
}

/* Tries the GEMM path; returns false when the equation does not fit it. */
static bool es_try_gemm(const es_plan *p, const rt_tensor *a, const rt_tensor *b, rt_tensor *y, kiln_status *st,
                        cpu_kernel_ctx *ctx) {
    if (p->n_ops != 2 || a->dtype != KILN_DTYPE_FLOAT || b->dtype != KILN_DTYPE_FLOAT) return false;
    int ina[ES_MAX_LABELS] = {0}, inb[ES_MAX_LABELS] = {0}, ino[ES_MAX_LABELS] = {0};
    for (int d = 0; d < p->in[0].n; d++)
        if (ina[p->in[0].lab[d]]++) return false;
    for (int d = 0; d < p->in[1].n; d++)
        if (inb[p->in[1].lab[d]]++) return false;
    for (int d = 0; d < p->out.n; d++) ino[p->out.lab[d]] = 1;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != p->size[p->in[0].lab[d]]) return false; /* broadcasting: generic path */
    for (int d = 0; d < b->rank; d++)
        if (b->dims[d] != p->size[p->in[1].lab[d]]) return false;
    int bl[ES_MAX_LABELS], ml[ES_MAX_LABELS], nl[ES_MAX_LABELS], kl[ES_MAX_LABELS];
    int nb = 0, nm = 0, nn = 0, nk = 0;
    int64_t Bt = 1, M = 1, N = 1, K = 1;
    for (int l = 0; l < ES_MAX_LABELS; l++) {
        if (!ina[l] && !inb[l]) continue;
        if (ina[l] && inb[l] && ino[l]) bl[nb++] = l, Bt *= p->size[l];
        else if (ina[l] && !inb[l] && ino[l]) ml[nm++] = l, M *= p->size[l];
        else if (!ina[l] && inb[l] && ino[l]) nl[nn++] = l, N *= p->size[l];
        else if (ina[l] && inb[l] && !ino[l]) kl[nk++] = l, K *= p->size[l];
        else return false; /* a label summed within one operand */
    }
    if (Bt * M * K > ((int64_t)1 << 28) || Bt * K * N > ((int64_t)1 << 28)) return false;
    int64_t sa[ES_MAX_LABELS], sb[ES_MAX_LABELS], so[ES_MAX_LABELS];
    es_strides(p, &p->in[0], a->dims, sa);
    es_strides(p, &p->in[1], b->dims, sb);
    es_strides(p, &p->out, y->dims, so);
    float *pa = malloc(sizeof(float) * (size_t)(Bt * M * K + 1)), *pb = malloc(sizeof(float) * (size_t)(Bt * K * N + 1));
    float *pc = malloc(sizeof(float) * (size_t)(Bt * M * N + 1));
    if (!pa || !pb || !pc) {
        free(pa), free(pb), free(pc);
        *st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for Einsum");
        return true;
    }
    /* pack A as [B..., M..., K...], B as [B..., K..., N...] with cpu_strided_copy */
    int64_t dims[CPU_COPY_MAX_RANK], ss[CPU_COPY_MAX_RANK], ds[CPU_COPY_MAX_RANK];
    int r = 0;
#define ES_ADD(list, cnt, srcstr)                                                     \
    for (int i_ = 0; i_ < (cnt); i_++) dims[r] = p->size[(list)[i_]], ss[r] = (srcstr)[(list)[i_]], r++;
    ES_ADD(bl, nb, sa) ES_ADD(ml, nm, sa) ES_ADD(kl, nk, sa);
    cpu_contiguous_strides(r, dims, ds);
    cpu_strided_copy(ctx->pool, sizeof(float), r, dims, pa, ds, a->data, ss);
    r = 0;
    ES_ADD(bl, nb, sb) ES_ADD(kl, nk, sb) ES_ADD(nl, nn, sb);
    cpu_contiguous_strides(r, dims, ds);
    cpu_strided_copy(ctx->pool, sizeof(float), r, dims, pb, ds, b->data, ss);
    for (int64_t i = 0; i < Bt; i++) {
        cpu_sgemm(ctx->pool, false, false, M, N, K, 1.f, pa + i * M * K, K > 0 ? K : 1, pb + i * K * N, N > 0 ? N : 1, 0.f,
                  pc + i * M * N, N > 0 ? N : 1, NULL);
    }
    /* scatter [B..., M..., N...] into the output's label order */
    r = 0;
    ES_ADD(bl, nb, so) ES_ADD(ml, nm, so) ES_ADD(nl, nn, so);
#undef ES_ADD
    cpu_contiguous_strides(r, dims, ds);
    cpu_strided_copy(ctx->pool, sizeof(float), r, dims, y->data, ss, pc, ds);
    free(pa), free(pb), free(pc);
    *st = KILN_OK;
    return true;
}

kiln_status cpu_einsum(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    const ir_attr *eqa = ir_node_attr(ctx->node, "equation");
    if (!eqa || eqa->type != IR_ATTR_STRING) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "missing equation");
    if (n_in < 1 || n_in > ES_MAX_OPS) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Einsum takes 1 to %d inputs", ES_MAX_OPS);
    const rt_tensor *ops[ES_MAX_OPS];
    for (int i = 0; i < n_in; i++) {
        ops[i] = cpu_in(inputs, n_in, i);
        if (!ops[i]) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
        if (ops[i]->dtype != ops[0]->dtype) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inputs must share one type");
        if (ops[i]->dtype == KILN_DTYPE_STRING || ops[i]->dtype == KILN_DTYPE_BOOL || cpu_elem_size(ops[i]->dtype) == 0)
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Einsum on %s", kiln_dtype_name(ops[i]->dtype));
    }
    es_plan p;
    kiln_status st = es_parse(ctx, (const char *)eqa->s.data, eqa->s.len, ops, n_in, &p);
    if (st != KILN_OK) return st;
    int64_t od[RT_MAX_RANK];
    for (int d = 0; d < p.out.n; d++) od[d] = p.size[p.out.lab[d]];
    rt_tensor *y;
    if ((st = cpu_alloc_out(ctx, outputs, n_out, 0, ops[0]->dtype, p.out.n, od, &y)) != KILN_OK) return st;
    if (es_try_gemm(&p, ops[0], n_in > 1 ? ops[1] : NULL, y, &st, ctx)) return st;
    /* generic odometer */
    int labs[ES_MAX_LABELS], nl = 0;
    uint64_t total = 1;
    for (int l = 0; l < ES_MAX_LABELS; l++)
        if (p.used[l]) {
            labs[nl++] = l;
            if (p.size[l] == 0) total = 0;
            else if (total > ((uint64_t)1 << 40) / (uint64_t)p.size[l])
                return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "Einsum iteration space is too large for the generic path");
            else total *= (uint64_t)p.size[l];
        }
    int64_t str[ES_MAX_OPS + 1][ES_MAX_LABELS];
    for (int o = 0; o < n_in; o++) es_strides(&p, &p.in[o], ops[o]->dims, str[o]);
    es_strides(&p, &p.out, y->dims, str[n_in]);
    double *acc = calloc((size_t)y->count + 1, sizeof(double));
    if (!acc) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t idx[ES_MAX_LABELS] = {0}, off[ES_MAX_OPS + 1] = {0};
    for (uint64_t it = 0; it < total; it++) {
        double v = 1;
        for (int o = 0; o < n_in; o++) v *= cpu_load_f64(ops[o]->data, ops[o]->dtype, (uint64_t)off[o]);
        acc[off[n_in]] += v;
        for (int k = nl - 1; k >= 0; k--) { /* advance the odometer */
            int l = labs[k];
            idx[k]++;
            for (int o = 0; o <= n_in; o++) off[o] += str[o][l];
            if (idx[k] < p.size[l]) break;
            for (int o = 0; o <= n_in; o++) off[o] -= str[o][l] * p.size[l];
            idx[k] = 0;
        }
    }
    for (uint64_t i = 0; i < y->count; i++) cpu_store_f64(y->data, y->dtype, i, acc[i]);
    free(acc);
    return KILN_OK;
}
