/* compare.c - output comparison with ONNX's tolerance rule (see compare.h). */
#include "runtime/compare.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

bool rt_tensor_get_f64(const rt_tensor *t, uint64_t i, double *out) {
    const void *p = t->data;
    switch (t->dtype) {
    case KILN_DTYPE_FLOAT: *out = ((const float *)p)[i]; return true;
    case KILN_DTYPE_DOUBLE: *out = ((const double *)p)[i]; return true;
    case KILN_DTYPE_FLOAT16: *out = kiln_fp16_to_fp32(((const uint16_t *)p)[i]); return true;
    case KILN_DTYPE_BFLOAT16: *out = kiln_bf16_to_fp32(((const uint16_t *)p)[i]); return true;
    case KILN_DTYPE_INT8: *out = ((const int8_t *)p)[i]; return true;
    case KILN_DTYPE_UINT8: *out = ((const uint8_t *)p)[i]; return true;
    case KILN_DTYPE_BOOL: *out = ((const uint8_t *)p)[i]; return true;
    case KILN_DTYPE_INT16: *out = ((const int16_t *)p)[i]; return true;
    case KILN_DTYPE_UINT16: *out = ((const uint16_t *)p)[i]; return true;
    case KILN_DTYPE_INT32: *out = ((const int32_t *)p)[i]; return true;
    case KILN_DTYPE_UINT32: *out = ((const uint32_t *)p)[i]; return true;
    case KILN_DTYPE_INT64: *out = (double)((const int64_t *)p)[i]; return true;
    case KILN_DTYPE_UINT64: *out = (double)((const uint64_t *)p)[i]; return true;
    case KILN_DTYPE_COMPLEX64: *out = ((const float *)p)[i]; return true;   /* i indexes float parts */
    case KILN_DTYPE_COMPLEX128: *out = ((const double *)p)[i]; return true;
    default: return false;
    }
}

static bool is_tolerant(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE || dt == KILN_DTYPE_FLOAT16 ||
           dt == KILN_DTYPE_BFLOAT16 || dt == KILN_DTYPE_COMPLEX64 || dt == KILN_DTYPE_COMPLEX128;
}

static void put_index(strbuf *sb, const rt_tensor *t, uint64_t flat) {
    int64_t idx[RT_MAX_RANK];
    uint64_t r = flat;
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        uint64_t n = t->dims[d] > 0 ? (uint64_t)t->dims[d] : 1;
        idx[d] = (int64_t)(r % n);
        r /= n;
    }
    sb_append(sb, "element [");
    for (int32_t d = 0; d < t->rank; d++) sb_printf(sb, "%s%" PRId64, d ? ", " : "", idx[d]);
    sb_printf(sb, "] (flat %" PRIu64 ")", flat);
}

static void put_shape(strbuf *sb, const rt_tensor *t) {
    char buf[512];
    sb_append(sb, rt_tensor_desc(t, buf, sizeof buf));
}

static bool same_shape(const rt_tensor *a, const rt_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

bool rt_compare_tensor(const rt_tensor *got, const rt_tensor *exp, double rtol, double atol, strbuf *why,
                       rt_compare_stats *stats) {
    if (got->dtype != exp->dtype) {
        sb_printf(why, "dtype %s, expected %s", kiln_dtype_name(got->dtype), kiln_dtype_name(exp->dtype));
        return false;
    }
    if (!same_shape(got, exp)) {
        sb_append(why, "shape ");
        put_shape(why, got);
        sb_append(why, ", expected ");
        put_shape(why, exp);
        return false;
    }
    if (exp->count == 0) return true;
    if (exp->dtype == KILN_DTYPE_STRING) {
        const ir_bytes *a = got->data, *b = exp->data;
        for (uint64_t i = 0; i < exp->count; i++) {
            if (a[i].len == b[i].len && (a[i].len == 0 || !memcmp(a[i].data, b[i].data, (size_t)a[i].len))) continue;
            put_index(why, exp, i);
            sb_printf(why, ": got \"%.*s\", expected \"%.*s\"", (int)(a[i].len > 64 ? 64 : a[i].len), a[i].data,
                      (int)(b[i].len > 64 ? 64 : b[i].len), b[i].data);
            return false;
        }
        return true;
    }
    if (!is_tolerant(exp->dtype)) {
        double x, y;
        if (!rt_tensor_get_f64(exp, 0, &y)) {
            /* fp8/fp4/sub-byte: bit-exact comparison */
            if (got->nbytes != exp->nbytes || memcmp(got->data, exp->data, (size_t)exp->nbytes)) {
                sb_printf(why, "%s data differs (compared bit for bit)", kiln_dtype_name(exp->dtype));
                return false;
            }
            return true;
        }
        for (uint64_t i = 0; i < exp->count; i++) {
            bool differ;
            if (exp->dtype == KILN_DTYPE_INT64) differ = ((const int64_t *)got->data)[i] != ((const int64_t *)exp->data)[i];
            else if (exp->dtype == KILN_DTYPE_UINT64)
                differ = ((const uint64_t *)got->data)[i] != ((const uint64_t *)exp->data)[i];
            else {
                rt_tensor_get_f64(got, i, &x);
                rt_tensor_get_f64(exp, i, &y);
                differ = x != y;
            }
            if (!differ) continue;
            put_index(why, exp, i);
            if (exp->dtype == KILN_DTYPE_INT64)
                sb_printf(why, ": got %" PRId64 ", expected %" PRId64, ((const int64_t *)got->data)[i],
                          ((const int64_t *)exp->data)[i]);
            else if (exp->dtype == KILN_DTYPE_UINT64)
                sb_printf(why, ": got %" PRIu64 ", expected %" PRIu64, ((const uint64_t *)got->data)[i],
                          ((const uint64_t *)exp->data)[i]);
            else {
                rt_tensor_get_f64(got, i, &x);
                sb_printf(why, ": got %.17g, expected %.17g (exact match required for %s)", x, y,
                          kiln_dtype_name(exp->dtype));
            }
            return false;
        }
        return true;
    }
    uint64_t n = exp->count;
    bool cplx = exp->dtype == KILN_DTYPE_COMPLEX64 || exp->dtype == KILN_DTYPE_COMPLEX128;
    if (cplx) n *= 2;
    for (uint64_t i = 0; i < n; i++) {
        double x, y;
        rt_tensor_get_f64(got, i, &x);
        rt_tensor_get_f64(exp, i, &y);
        bool ok;
        if (isnan(y)) ok = isnan(x);
        else if (isinf(y)) ok = x == y;
        else if (!isfinite(x)) ok = false;
        else {
            double d = fabs(x - y);
            ok = d <= atol + rtol * fabs(y);
            if (stats) {
                if (d > stats->max_abs_diff) stats->max_abs_diff = d;
                if (y != 0 && d / fabs(y) > stats->max_rel_diff) stats->max_rel_diff = d / fabs(y);
            }
        }
        if (stats) stats->elements++;
        if (ok) continue;
        put_index(why, exp, cplx ? i / 2 : i);
        if (cplx) sb_printf(why, " %s part", i % 2 ? "imaginary" : "real");
        sb_printf(why, ": got %.9g, expected %.9g", x, y);
        if (isfinite(x) && isfinite(y))
            sb_printf(why, " (|diff| %.3g > tolerance %.3g = atol %g + rtol %g * |expected|)", fabs(x - y),
                      atol + rtol * fabs(y), atol, rtol);
        return false;
    }
    return true;
}

static const char *kind_word(ir_type_kind k) {
    switch (k) {
    case IR_TYPE_TENSOR: return "tensor";
    case IR_TYPE_SEQUENCE: return "sequence";
    case IR_TYPE_OPTIONAL: return "optional";
    case IR_TYPE_MAP: return "map";
    default: return "nothing";
    }
}

bool rt_compare_value(const rt_value *got, const rt_value *exp, double rtol, double atol, strbuf *why,
                      rt_compare_stats *stats) {
    if (got->kind != exp->kind) {
        sb_printf(why, "got a %s, expected a %s", kind_word(got->kind), kind_word(exp->kind));
        return false;
    }
    switch (exp->kind) {
    case IR_TYPE_TENSOR: return rt_compare_tensor(&got->t, &exp->t, rtol, atol, why, stats);
    case IR_TYPE_SEQUENCE:
        if (got->n_items != exp->n_items) {
            sb_printf(why, "sequence of %d tensors, expected %d", (int)got->n_items, (int)exp->n_items);
            return false;
        }
        for (int32_t i = 0; i < exp->n_items; i++) {
            strbuf inner;
            sb_init(&inner);
            bool ok = rt_compare_value(&got->items[i], &exp->items[i], rtol, atol, &inner, stats);
            if (!ok) sb_printf(why, "item %d: %s", (int)i, sb_cstr(&inner));
            sb_free(&inner);
            if (!ok) return false;
        }
        return true;
    case IR_TYPE_OPTIONAL:
        if (got->has_value != exp->has_value) {
            sb_printf(why, "optional is %s, expected %s", got->has_value ? "set" : "empty",
                      exp->has_value ? "a value" : "empty (None)");
            return false;
        }
        if (!exp->has_value) return true;
        if (exp->elem_kind == IR_TYPE_SEQUENCE || got->elem_kind == IR_TYPE_SEQUENCE) {
            rt_value a = *got, b = *exp;
            a.kind = b.kind = IR_TYPE_SEQUENCE;
            return rt_compare_value(&a, &b, rtol, atol, why, stats);
        }
        return rt_compare_tensor(&got->t, &exp->t, rtol, atol, why, stats);
    default: sb_printf(why, "cannot compare a %s", kind_word(exp->kind)); return false;
    }
}
