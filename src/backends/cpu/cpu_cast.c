/* cpu_cast.c - Cast and CastLike between every pair of byte-sized ONNX types and strings.
 *
 * Instead of one loop per (from, to) pair, each dtype has a block loader and a block
 * storer through a wide intermediate: int64 when both sides are integers/bool (so
 * int64 <-> uint64 and narrowing wrap exactly, bit for bit), double otherwise (float
 * -> int truncates toward zero; NaN and out-of-range values go through cpu_store_f64
 * so nothing is undefined). Same-type casts copy. Strings parse with strtod/strtoll
 * and print with the shortest round-trip-safe precision.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"
#include "backends/cpu/cpu_lowp.h"

#define CAST_BLOCK 512

/* ---- block loaders / storers -------------------------------------------------------- */

static void load_f64(kiln_dtype dt, const void *src, int64_t off, int64_t n, double *dst) {
    switch (dt) {
#define L(S, T)                                                                            \
    case KILN_DTYPE_##S:                                                                   \
        for (int64_t i = 0; i < n; i++) dst[i] = (double)((const T *)src)[off + i]; \
        break;
        CPU_NATIVE_TYPES(L)
#undef L
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_load_f64(src, dt, (uint64_t)(off + i));
    }
}

static void store_f64(kiln_dtype dt, void *dst, int64_t off, int64_t n, const double *src) {
    switch (dt) {
    case KILN_DTYPE_FLOAT:
        for (int64_t i = 0; i < n; i++) ((float *)dst)[off + i] = (float)src[i];
        break;
    case KILN_DTYPE_DOUBLE: memcpy((double *)dst + off, src, (size_t)n * sizeof(double)); break;
    default:
        for (int64_t i = 0; i < n; i++) cpu_store_f64(dst, dt, (uint64_t)(off + i), src[i]);
    }
}

static void load_i64(kiln_dtype dt, const void *src, int64_t off, int64_t n, int64_t *dst) {
    switch (dt) {
#define L(S, T)                                                                             \
    case KILN_DTYPE_##S:                                                                    \
        for (int64_t i = 0; i < n; i++) dst[i] = (int64_t)((const T *)src)[off + i]; \
        break;
        CPU_INT_TYPES(L)
#undef L
    default: /* BOOL */
        for (int64_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)src)[off + i] != 0;
    }
}

static void store_i64(kiln_dtype dt, void *dst, int64_t off, int64_t n, const int64_t *src) {
    switch (dt) {
#define S_(S, T)                                                                \
    case KILN_DTYPE_##S:                                                        \
        for (int64_t i = 0; i < n; i++) ((T *)dst)[off + i] = (T)(uint64_t)src[i]; \
        break;
        CPU_INT_TYPES(S_)
#undef S_
    default: /* BOOL */
        for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[off + i] = src[i] != 0;
    }
}

static bool int_like(kiln_dtype d) { return d == KILN_DTYPE_BOOL || (kiln_dtype_is_integer(d) && cpu_elem_size(d)); }
static bool castable(kiln_dtype d) {
    return int_like(d) || d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_DOUBLE || cpu_dtype_is_half(d);
}

typedef struct cast_job {
    kiln_dtype from, to;
    const void *x;
    void *y;
} cast_job;

static void cast_chunk(void *user, int64_t begin, int64_t end) {
    const cast_job *j = user;
    bool ints = int_like(j->from) && int_like(j->to);
    for (int64_t s = begin; s < end; s += CAST_BLOCK) {
        int64_t n = end - s < CAST_BLOCK ? end - s : CAST_BLOCK;
        if (ints) {
            int64_t buf[CAST_BLOCK];
            load_i64(j->from, j->x, s, n, buf);
            store_i64(j->to, j->y, s, n, buf);
        } else if (j->from == KILN_DTYPE_FLOAT && cpu_dtype_is_half(j->to)) {
            cpu_f32_to_half(j->to, (const float *)j->x + s, (uint16_t *)j->y + s, n);
        } else if (cpu_dtype_is_half(j->from) && j->to == KILN_DTYPE_FLOAT) {
            cpu_half_to_f32(j->from, (const uint16_t *)j->x + s, (float *)j->y + s, n);
        } else {
            double buf[CAST_BLOCK];
            load_f64(j->from, j->x, s, n, buf);
            store_f64(j->to, j->y, s, n, buf);
        }
    }
}

/* ---- strings ------------------------------------------------------------------------ */

static kiln_status to_string(cpu_kernel_ctx *ctx, const rt_tensor *x, rt_tensor *y) {
    char buf[64];
    for (uint64_t i = 0; i < x->count; i++) {
        int len;
        if (x->dtype == KILN_DTYPE_BOOL) {
            len = snprintf(buf, sizeof buf, "%s", ((const uint8_t *)x->data)[i] ? "1" : "0");
        } else if (int_like(x->dtype)) {
            if (x->dtype == KILN_DTYPE_UINT64)
                len = snprintf(buf, sizeof buf, "%" PRIu64, ((const uint64_t *)x->data)[i]);
            else
                len = snprintf(buf, sizeof buf, "%" PRId64, cpu_load_i64(x->data, x->dtype, i));
        } else {
            double v = cpu_load_f64(x->data, x->dtype, i);
            if (v != v) len = snprintf(buf, sizeof buf, "NaN");
            else if (v == __builtin_inf()) len = snprintf(buf, sizeof buf, "INF");
            else if (v == -__builtin_inf()) len = snprintf(buf, sizeof buf, "-INF");
            else len = snprintf(buf, sizeof buf, "%.*g", x->dtype == KILN_DTYPE_DOUBLE ? 17 : 9, v);
        }
        kiln_status st = rt_tensor_set_string(y, i, buf, (uint64_t)len, ctx->err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

static void from_string(const rt_tensor *x, rt_tensor *y) {
    const ir_bytes *s = x->data;
    for (uint64_t i = 0; i < x->count; i++) {
        char buf[128];
        size_t n = s[i].len < sizeof buf - 1 ? (size_t)s[i].len : sizeof buf - 1;
        if (n) memcpy(buf, s[i].data, n);
        buf[n] = 0;
        if (int_like(y->dtype) && y->dtype != KILN_DTYPE_BOOL) {
            char *end;
            long long v = strtoll(buf, &end, 10);
            if (*end == 0 && end != buf) {
                int64_t w = v;
                store_i64(y->dtype, y->data, (int64_t)i, 1, &w);
                continue;
            }
        }
        cpu_store_f64(y->data, y->dtype, i, strtod(buf, NULL));
    }
}

/* ---- float8 / float4 / int4 / int2: element by element through double -------------- */

static kiln_status cast_lowp(cpu_kernel_ctx *ctx, const rt_tensor *x, kiln_dtype to, rt_value *outputs,
                             int32_t n_out) {
    bool saturate = ir_node_attr_int(ctx->node, "saturate", 1) != 0;
    cpu_round_mode rm = CPU_ROUND_UP;
    const ir_attr *ra = ir_node_attr(ctx->node, "round_mode");
    if (ra && ra->type == IR_ATTR_STRING) {
        if (ra->s.len == 4 && !memcmp(ra->s.data, "down", 4)) rm = CPU_ROUND_DOWN;
        else if (ra->s.len == 7 && !memcmp(ra->s.data, "nearest", 7)) rm = CPU_ROUND_NEAREST;
    }
    rt_tensor *y = NULL;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, to, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    if (y->nbytes) memset(y->data, 0, (size_t)y->nbytes);
    bool lin = cpu_lowp_dtype(x->dtype), lout = cpu_lowp_dtype(to);
    for (uint64_t i = 0; i < x->count; i++) {
        double v = lin ? cpu_lowp_load(x->data, x->dtype, i) : cpu_load_f64(x->data, x->dtype, i);
        if (lout) cpu_lowp_store(y->data, to, i, v, saturate, rm);
        else cpu_store_f64(y->data, to, i, v);
    }
    return KILN_OK;
}

/* ---- kernels ------------------------------------------------------------------------ */

static kiln_status cast_to(cpu_kernel_ctx *ctx, const rt_tensor *x, kiln_dtype to, rt_value *outputs, int32_t n_out) {
    if (!kiln_dtype_valid((int)to) || to == KILN_DTYPE_UNDEFINED)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "target dtype %d is not a valid ONNX type", (int)to);
    if ((cpu_lowp_dtype(x->dtype) || cpu_lowp_dtype(to)) && x->dtype != to &&
        (castable(x->dtype) || cpu_lowp_dtype(x->dtype)) && (castable(to) || cpu_lowp_dtype(to)))
        return cast_lowp(ctx, x, to, outputs, n_out);
    bool from_ok = castable(x->dtype) || x->dtype == KILN_DTYPE_STRING;
    bool to_ok = castable(to) || to == KILN_DTYPE_STRING;
    if (!from_ok || !to_ok)
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "casting %s to %s is not supported yet",
                               kiln_dtype_name(x->dtype), kiln_dtype_name(to));
    if (x->dtype == to) return cpu_copy_reshaped(ctx, x, outputs, n_out, x->rank, x->dims);
    rt_tensor *y = NULL;
    kiln_status st = cpu_alloc_out(ctx, outputs, n_out, 0, to, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    if (to == KILN_DTYPE_STRING) return to_string(ctx, x, y);
    if (x->dtype == KILN_DTYPE_STRING) {
        from_string(x, y);
        return KILN_OK;
    }
    cast_job j = {x->dtype, to, x->data, y->data};
    if (x->count) cpu_parallel_for(ctx->pool, (int64_t)x->count, CPU_ELEM_GRAIN, cast_chunk, &j);
    return KILN_OK;
}

kiln_status cpu_Cast(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    const ir_attr *to = ir_node_attr(ctx->node, "to");
    if (!to || to->type != IR_ATTR_INT)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'to' (the target dtype) is required");
    if (to->i <= 0 || to->i >= KILN_DTYPE_COUNT)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'to' = %" PRId64 " is not an ONNX dtype", to->i);
    return cast_to(ctx, x, (kiln_dtype)to->i, outputs, n_out);
}

kiln_status cpu_CastLike(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    const rt_tensor *x, *like;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st == KILN_OK) st = cpu_need_input(ctx, inputs, n_in, 1, &like);
    if (st != KILN_OK) return st;
    return cast_to(ctx, x, like->dtype, outputs, n_out);
}
