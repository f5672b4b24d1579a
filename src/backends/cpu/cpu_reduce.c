/* cpu_reduce.c - ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and
 * ArgMax/ArgMin.
 *
 * Axes come from the "axes" attribute in old opsets and from input 1 in new ones
 * (ReduceSum since 13, the others since 18); both are accepted whichever is present.
 * The input's dims split into kept and reduced ones; every output element walks its
 * reduced sub-block with an odometer whose innermost loop is the last reduced dim (for
 * the common "reduce the last axis" it is a contiguous run). Floats accumulate in
 * double; integer Sum/Prod/Max/Min/SumSquare/L1/Mean stay in int64 (wrapping) so int64
 * values are exact. Reducing an empty set gives the identity (0, 1, -inf, +inf, NaN
 * for Mean) like the reference.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

typedef enum red_op {
    R_SUM,
    R_MEAN,
    R_MAX,
    R_MIN,
    R_PROD,
    R_L1,
    R_L2,
    R_LOGSUM,
    R_LOGSUMEXP,
    R_SUMSQ
} red_op;

typedef struct red_plan {
    red_op op;
    const rt_tensor *x;
    rt_tensor *y;
    bool ints; /* integer accumulation */
    int32_t nk, nr;
    int64_t kd[RT_MAX_RANK], ks[RT_MAX_RANK]; /* kept dims and input strides */
    int64_t rd[RT_MAX_RANK], rs[RT_MAX_RANK]; /* reduced dims and input strides */
    int64_t rcount;
} red_plan;

static inline double ld(const red_plan *p, int64_t i) {
    if (p->x->dtype == KILN_DTYPE_FLOAT) return ((const float *)p->x->data)[i];
    return cpu_load_f64(p->x->data, p->x->dtype, (uint64_t)i);
}

/* Walks the reduced block at `base`, folding values with the op's accumulation.
 * `shift` is subtracted before exp (LogSumExp's max). */
static void walk_f64(const red_plan *p, int64_t base, double shift, double *acc_out) {
    int64_t idx[RT_MAX_RANK] = {0};
    double acc = p->op == R_PROD ? 1.0 : p->op == R_MAX ? -__builtin_inf() : p->op == R_MIN ? __builtin_inf() : 0.0;
    if (p->rcount == 0) {
        *acc_out = acc;
        return;
    }
    int32_t nr = p->nr;
    int64_t inner = nr ? p->rd[nr - 1] : 1, is = nr ? p->rs[nr - 1] : 0;
    int64_t off = base;
    for (;;) {
        const float *fp = p->x->dtype == KILN_DTYPE_FLOAT ? (const float *)p->x->data + off : NULL;
        switch (p->op) {
        case R_MAX:
            for (int64_t k = 0; k < inner; k++) {
                double v = fp ? fp[k * is] : ld(p, off + k * is);
                acc = (v > acc || v != v) ? v : acc;
            }
            break;
        case R_MIN:
            for (int64_t k = 0; k < inner; k++) {
                double v = fp ? fp[k * is] : ld(p, off + k * is);
                acc = (v < acc || v != v) ? v : acc;
            }
            break;
        case R_PROD:
            for (int64_t k = 0; k < inner; k++) acc *= fp ? fp[k * is] : ld(p, off + k * is);
            break;
        case R_L1:
            for (int64_t k = 0; k < inner; k++) acc += fabs(fp ? fp[k * is] : ld(p, off + k * is));
            break;
        case R_L2:
        case R_SUMSQ:
            for (int64_t k = 0; k < inner; k++) {
                double v = fp ? fp[k * is] : ld(p, off + k * is);
                acc += v * v;
            }
            break;
        case R_LOGSUMEXP:
            for (int64_t k = 0; k < inner; k++) acc += exp((fp ? fp[k * is] : ld(p, off + k * is)) - shift);
            break;
        default:
            if (fp && is == 1) {
                for (int64_t k = 0; k < inner; k++) acc += fp[k];
            } else {
                for (int64_t k = 0; k < inner; k++) acc += fp ? fp[k * is] : ld(p, off + k * is);
            }
        }
        int32_t k = nr - 2;
        for (; k >= 0; k--) {
            off += p->rs[k];
            if (++idx[k] < p->rd[k]) break;
            off -= p->rs[k] * p->rd[k];
            idx[k] = 0;
        }
        if (k < 0) break;
    }
    *acc_out = acc;
}

static int64_t walk_i64(const red_plan *p, int64_t base) {
    int64_t idx[RT_MAX_RANK] = {0};
    int64_t acc = p->op == R_PROD ? 1 : p->op == R_MAX ? INT64_MIN : p->op == R_MIN ? INT64_MAX : 0;
    if (p->x->dtype == KILN_DTYPE_UINT64 || p->x->dtype == KILN_DTYPE_UINT32 || p->x->dtype == KILN_DTYPE_UINT16 ||
        p->x->dtype == KILN_DTYPE_UINT8) {
        if (p->op == R_MAX) acc = 0;
        if (p->op == R_MIN) acc = p->x->dtype == KILN_DTYPE_UINT64 ? -1 : INT64_MAX;
    }
    if (p->rcount == 0) return acc;
    int32_t nr = p->nr;
    int64_t inner = nr ? p->rd[nr - 1] : 1, is = nr ? p->rs[nr - 1] : 0;
    int64_t off = base;
    bool u64 = p->x->dtype == KILN_DTYPE_UINT64;
    for (;;) {
        for (int64_t k = 0; k < inner; k++) {
            int64_t v = cpu_load_i64(p->x->data, p->x->dtype, (uint64_t)(off + k * is));
            switch (p->op) {
            case R_MAX: acc = (u64 ? (uint64_t)v > (uint64_t)acc : v > acc) ? v : acc; break;
            case R_MIN: acc = (u64 ? (uint64_t)v < (uint64_t)acc : v < acc) ? v : acc; break;
            case R_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
            case R_L1: acc = (int64_t)((uint64_t)acc + (uint64_t)(v < 0 ? -(uint64_t)v : (uint64_t)v)); break;
            case R_SUMSQ: acc = (int64_t)((uint64_t)acc + (uint64_t)v * (uint64_t)v); break;
            default: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
            }
        }
        int32_t k = nr - 2;
        for (; k >= 0; k--) {
            off += p->rs[k];
            if (++idx[k] < p->rd[k]) break;
            off -= p->rs[k] * p->rd[k];
            idx[k] = 0;
        }
        if (k < 0) break;
    }
    return acc;
}

static void reduce_chunk(void *user, int64_t begin, int64_t end) {
    const red_plan *p = user;
    int64_t idx[RT_MAX_RANK] = {0}, rem = begin, base = 0;
    for (int32_t k = p->nk - 1; k >= 0; k--) {
        idx[k] = rem % p->kd[k];
        rem /= p->kd[k];
        base += idx[k] * p->ks[k];
    }
    kiln_dtype dt = p->y->dtype;
    for (int64_t o = begin; o < end; o++) {
        if (p->ints) {
            int64_t v = walk_i64(p, base);
            if (p->op == R_MEAN) v = p->rcount ? v / p->rcount : 0;
            if (dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_UINT64) ((int64_t *)p->y->data)[o] = v;
            else cpu_store_f64(p->y->data, dt, (uint64_t)o, (double)v);
        } else {
            double shift = 0, acc;
            if (p->op == R_LOGSUMEXP) {
                red_plan q = *p;
                q.op = R_MAX;
                walk_f64(&q, base, 0, &shift);
                if (isinf(shift) || shift != shift) shift = 0;
            }
            walk_f64(p, base, shift, &acc);
            switch (p->op) {
            case R_MEAN: acc = acc / (double)p->rcount; break;
            case R_L2: acc = sqrt(acc); break;
            case R_LOGSUM: acc = log(acc); break;
            case R_LOGSUMEXP: acc = log(acc) + shift; break;
            default: break;
            }
            if (dt == KILN_DTYPE_FLOAT) ((float *)p->y->data)[o] = (float)acc;
            else cpu_store_f64(p->y->data, dt, (uint64_t)o, acc);
        }
        for (int32_t k = p->nk - 1; k >= 0; k--) {
            base += p->ks[k];
            if (++idx[k] < p->kd[k]) break;
            base -= p->ks[k] * p->kd[k];
            idx[k] = 0;
        }
    }
}

static kiln_status reduce(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                          int32_t n_out, red_op op) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    bool num = (kiln_dtype_is_integer(x->dtype) || x->dtype == KILN_DTYPE_FLOAT || x->dtype == KILN_DTYPE_DOUBLE ||
                cpu_dtype_is_half(x->dtype) || (x->dtype == KILN_DTYPE_BOOL && (op == R_MAX || op == R_MIN))) &&
               cpu_elem_size(x->dtype);
    if (!num) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t axes[RT_MAX_RANK];
    int32_t na;
    bool present;
    st = cpu_ints_input_or_attr(ctx, inputs, n_in, 1, "axes", axes, RT_MAX_RANK, &na, &present);
    if (st != KILN_OK) return st;
    bool keep = ir_node_attr_int(ctx->node, "keepdims", 1) != 0;
    bool noop = ir_node_attr_int(ctx->node, "noop_with_empty_axes", 0) != 0;
    bool red[RT_MAX_RANK] = {false};
    if (na == 0) {
        for (int32_t i = 0; i < x->rank; i++) red[i] = !noop;
    } else {
        for (int32_t k = 0; k < na; k++) {
            int32_t a;
            st = cpu_check_axis(ctx, axes[k], x->rank, "axis", &a);
            if (st != KILN_OK) return st;
            red[a] = true;
        }
    }
    red_plan p = {.op = op, .x = x, .rcount = 1};
    p.ints = (kiln_dtype_is_integer(x->dtype) || x->dtype == KILN_DTYPE_BOOL) && op != R_L2 && op != R_LOGSUM && op != R_LOGSUMEXP;
    int64_t xs[RT_MAX_RANK], d[RT_MAX_RANK];
    cpu_contiguous_strides(x->rank, x->dims, xs);
    int32_t r = 0;
    for (int32_t i = 0; i < x->rank; i++) {
        if (red[i]) {
            p.rd[p.nr] = x->dims[i];
            p.rs[p.nr++] = xs[i];
            p.rcount *= x->dims[i];
            if (keep) d[r++] = 1;
        } else {
            p.kd[p.nk] = x->dims[i];
            p.ks[p.nk++] = xs[i];
            d[r++] = x->dims[i];
        }
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, x->dtype, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    p.y = y;
    int64_t grain = p.rcount ? CPU_ELEM_GRAIN / p.rcount : CPU_ELEM_GRAIN;
    cpu_parallel_for(ctx->pool, (int64_t)y->count, grain < 1 ? 1 : grain, reduce_chunk, &p);
    return KILN_OK;
}

#define RED_KERNEL(Op, code)                                                                                    \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out) {                                                                       \
        return reduce(ctx, inputs, n_in, outputs, n_out, code);                                                 \
    }
RED_KERNEL(ReduceSum, R_SUM)
RED_KERNEL(ReduceMean, R_MEAN)
RED_KERNEL(ReduceMax, R_MAX)
RED_KERNEL(ReduceMin, R_MIN)
RED_KERNEL(ReduceProd, R_PROD)
RED_KERNEL(ReduceL1, R_L1)
RED_KERNEL(ReduceL2, R_L2)
RED_KERNEL(ReduceLogSum, R_LOGSUM)
RED_KERNEL(ReduceLogSumExp, R_LOGSUMEXP)
RED_KERNEL(ReduceSumSquare, R_SUMSQ)

/* ---- ArgMax / ArgMin ---------------------------------------------------------------- */

static kiln_status arg_reduce(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out, bool is_max) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (!(kiln_dtype_is_integer(x->dtype) || x->dtype == KILN_DTYPE_FLOAT || x->dtype == KILN_DTYPE_DOUBLE ||
          cpu_dtype_is_half(x->dtype)) || !cpu_elem_size(x->dtype))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "dtype %s is not supported", kiln_dtype_name(x->dtype));
    int32_t axis;
    st = cpu_check_axis(ctx, ir_node_attr_int(ctx->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    bool keep = ir_node_attr_int(ctx->node, "keepdims", 1) != 0;
    bool last = ir_node_attr_int(ctx->node, "select_last_index", 0) != 0;
    int64_t n = x->dims[axis];
    if (n == 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "cannot take Arg%s over an empty axis", is_max ? "Max" : "Min");
    int64_t d[RT_MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < x->rank; i++) {
        if (i != axis) d[r++] = x->dims[i];
        else if (keep) d[r++] = 1;
    }
    rt_tensor *y = NULL;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_INT64, r, d, &y);
    if (st != KILN_OK || !y->count) return st;
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++) outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
    bool ints = kiln_dtype_is_integer(x->dtype) && x->dtype != KILN_DTYPE_UINT64;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            int64_t best = 0;
            uint64_t p0 = (uint64_t)(a * n * inner + c);
            double bv = ints ? 0 : cpu_load_f64(x->data, x->dtype, p0);
            int64_t bi = ints ? cpu_load_i64(x->data, x->dtype, p0) : 0;
            for (int64_t j = 1; j < n; j++) {
                uint64_t pj = (uint64_t)((a * n + j) * inner + c);
                bool better, equal;
                if (ints) {
                    int64_t v = cpu_load_i64(x->data, x->dtype, pj);
                    better = is_max ? v > bi : v < bi;
                    equal = v == bi;
                    if (better || (equal && last)) bi = v;
                } else {
                    double v = cpu_load_f64(x->data, x->dtype, pj);
                    better = is_max ? v > bv : v < bv;
                    equal = v == bv;
                    if (better || (equal && last)) bv = v;
                }
                if (better || (equal && last)) best = j;
            }
            ((int64_t *)y->data)[a * inner + c] = best;
        }
    return KILN_OK;
}

kiln_status cpu_ArgMax(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    return arg_reduce(ctx, inputs, n_in, outputs, n_out, true);
}
kiln_status cpu_ArgMin(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                       int32_t n_out) {
    return arg_reduce(ctx, inputs, n_in, outputs, n_out, false);
}
