/* cpu_sequence.c - value-plumbing kernels: Identity, Constant, Optional*, Sequence*,
 * SplitToSequence, ConcatFromSequence.
 *
 * Runtime representation (runtime/tensor.h): a SEQUENCE value holds its tensors in
 * items[]; an OPTIONAL holds a tensor in t, or a sequence's elements in items[] with
 * elem_kind SEQUENCE; an empty optional has has_value false. Outputs always own their
 * data (the executor frees inputs after their last use), so these kernels copy.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_axis_copy.h"
#include "backends/cpu/cpu_kernel.h"

static kiln_status copy_items(cpu_kernel_ctx *ctx, rt_value *dst, const rt_value *items, int32_t n, int32_t extra) {
    dst->items = calloc((size_t)(n + extra) + 1, sizeof *dst->items);
    if (!dst->items) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory copying a sequence");
    dst->n_items = n;
    for (int32_t i = 0; i < n; i++) {
        kiln_status st = rt_value_copy(&dst->items[i], &items[i], ctx->err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

static void make_sequence(rt_value *v, kiln_dtype dt) {
    rt_value_release(v);
    v->kind = IR_TYPE_SEQUENCE;
    v->has_value = true;
    v->elem_kind = IR_TYPE_TENSOR;
    v->elem_dtype = dt;
}

static kiln_status scalar_out_i64(cpu_kernel_ctx *ctx, rt_value *out, kiln_dtype dt, int64_t x) {
    rt_tensor *t = rt_value_as_tensor(out);
    kiln_status st = rt_tensor_alloc(t, dt, 0, NULL, ctx->err);
    if (st != KILN_OK) return st;
    if (dt == KILN_DTYPE_BOOL) *(uint8_t *)t->data = x != 0;
    else *(int64_t *)t->data = x;
    return KILN_OK;
}

static kiln_status read_index(cpu_kernel_ctx *ctx, const rt_tensor *t, const char *what, int64_t *out) {
    if (!t || t->count != 1 || !t->data)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must be a scalar", what);
    if (t->dtype == KILN_DTYPE_INT64) *out = *(const int64_t *)t->data;
    else if (t->dtype == KILN_DTYPE_INT32) *out = *(const int32_t *)t->data;
    else return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "%s must be int32 or int64", what);
    return KILN_OK;
}

kiln_status cpu_identity(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    if (n_in < 1 || !inputs[0]) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Identity needs an input");
    return rt_value_copy(&outputs[0], inputs[0], ctx->err);
}

kiln_status cpu_constant(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    const ir_node *n = ctx->node;
    rt_tensor *out = rt_value_as_tensor(&outputs[0]);
    for (int32_t i = 0; i < n->n_attrs; i++) {
        const ir_attr *a = &n->attrs[i];
        kiln_status st;
        int64_t len = a->n;
        if (!strcmp(a->name, "value") && a->type == IR_ATTR_TENSOR && a->t) {
            rt_tensor view;
            memset(&view, 0, sizeof view);
            if ((st = rt_tensor_from_ir(&view, a->t, ctx->err)) != KILN_OK) return st;
            st = rt_tensor_copy(out, &view, ctx->err);
            rt_tensor_release(&view); /* from_ir copies misaligned data: free that copy */
            return st;
        }
        if (!strcmp(a->name, "value_float") && a->type == IR_ATTR_FLOAT) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_FLOAT, 0, NULL, ctx->err)) != KILN_OK) return st;
            *(float *)out->data = a->f;
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_int") && a->type == IR_ATTR_INT) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_INT64, 0, NULL, ctx->err)) != KILN_OK) return st;
            *(int64_t *)out->data = a->i;
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_floats") && a->type == IR_ATTR_FLOATS) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_FLOAT, 1, &len, ctx->err)) != KILN_OK) return st;
            if (len) memcpy(out->data, a->floats, (size_t)len * sizeof(float));
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_ints") && a->type == IR_ATTR_INTS) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_INT64, 1, &len, ctx->err)) != KILN_OK) return st;
            if (len) memcpy(out->data, a->ints, (size_t)len * sizeof(int64_t));
            return KILN_OK;
        }
        if (!strcmp(a->name, "value_string") && a->type == IR_ATTR_STRING) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_STRING, 0, NULL, ctx->err)) != KILN_OK) return st;
            return rt_tensor_set_string(out, 0, a->s.data, a->s.len, ctx->err);
        }
        if (!strcmp(a->name, "value_strings") && a->type == IR_ATTR_STRINGS) {
            if ((st = rt_tensor_alloc(out, KILN_DTYPE_STRING, 1, &len, ctx->err)) != KILN_OK) return st;
            for (int64_t k = 0; k < len; k++)
                if ((st = rt_tensor_set_string(out, (uint64_t)k, a->strings[k].data, a->strings[k].len, ctx->err)) !=
                    KILN_OK)
                    return st;
            return KILN_OK;
        }
        if (!strcmp(a->name, "sparse_value"))
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "sparse_value constants are not supported yet");
    }
    return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                           "no value attribute (value, value_float(s), value_int(s), value_string(s))");
}

/* ---- Optional ------------------------------------------------------------------------ */

kiln_status cpu_optional(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                         int32_t n_out) {
    rt_value *o = &outputs[0];
    rt_value_release(o);
    o->kind = IR_TYPE_OPTIONAL;
    const rt_value *in = n_in > 0 ? inputs[0] : NULL;
    if (!in) {
        const ir_attr *a = ir_node_attr(ctx->node, "type");
        if (!a || a->type != IR_ATTR_TYPE_PROTO || !a->tp)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "an empty Optional needs the 'type' attribute");
        o->has_value = false;
        o->elem_kind = a->tp->kind;
        o->elem_dtype = a->tp->kind == IR_TYPE_SEQUENCE && a->tp->elem ? a->tp->elem->dtype : a->tp->dtype;
        return KILN_OK;
    }
    o->has_value = true;
    if (in->kind == IR_TYPE_TENSOR) {
        o->elem_kind = IR_TYPE_TENSOR;
        o->elem_dtype = in->t.dtype;
        return rt_tensor_copy(&o->t, &in->t, ctx->err);
    }
    if (in->kind == IR_TYPE_SEQUENCE) {
        o->elem_kind = IR_TYPE_SEQUENCE;
        o->elem_dtype = in->elem_dtype;
        return copy_items(ctx, o, in->items, in->n_items, 0);
    }
    return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Optional of an optional is not supported");
}

kiln_status cpu_optional_has_element(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out) {
    const rt_value *in = n_in > 0 ? inputs[0] : NULL;
    bool has = in && (in->kind != IR_TYPE_OPTIONAL || in->has_value);
    return scalar_out_i64(ctx, &outputs[0], KILN_DTYPE_BOOL, has);
}

kiln_status cpu_optional_get_element(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out) {
    const rt_value *in = n_in > 0 ? inputs[0] : NULL;
    if (!in) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "the input is missing");
    if (in->kind != IR_TYPE_OPTIONAL) return rt_value_copy(&outputs[0], in, ctx->err);
    if (!in->has_value)
        return cpu_kernel_fail(ctx, KILN_ERR_RUNTIME, "the optional input is empty (None): it has no element to get");
    if (in->elem_kind == IR_TYPE_SEQUENCE) {
        make_sequence(&outputs[0], in->elem_dtype);
        return copy_items(ctx, &outputs[0], in->items, in->n_items, 0);
    }
    return rt_tensor_copy(rt_value_as_tensor(&outputs[0]), &in->t, ctx->err);
}

/* ---- Sequences ----------------------------------------------------------------------- */

static const rt_value *seq_in(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in) {
    const rt_value *s = n_in > 0 ? inputs[0] : NULL;
    if (!s || s->kind != IR_TYPE_SEQUENCE) {
        cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input 0 must be a sequence");
        return NULL;
    }
    return s;
}

kiln_status cpu_sequence_empty(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    make_sequence(&outputs[0], (kiln_dtype)ir_node_attr_int(ctx->node, "dtype", KILN_DTYPE_FLOAT));
    return KILN_OK;
}

kiln_status cpu_sequence_construct(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                   rt_value *outputs, int32_t n_out) {
    for (int32_t i = 0; i < n_in; i++)
        if (!cpu_in(inputs, n_in, i)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input %d is not a tensor", (int)i);
    make_sequence(&outputs[0], n_in ? inputs[0]->t.dtype : KILN_DTYPE_FLOAT);
    outputs[0].items = calloc((size_t)n_in + 1, sizeof *outputs[0].items);
    if (!outputs[0].items) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n_in; i++) {
        outputs[0].n_items = i + 1;
        kiln_status st = rt_value_copy(&outputs[0].items[i], inputs[i], ctx->err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status cpu_sequence_length(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out) {
    const rt_value *s = seq_in(ctx, inputs, n_in);
    if (!s) return KILN_ERR_INVALID_MODEL;
    return scalar_out_i64(ctx, &outputs[0], KILN_DTYPE_INT64, s->n_items);
}

kiln_status cpu_sequence_at(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out) {
    const rt_value *s = seq_in(ctx, inputs, n_in);
    if (!s) return KILN_ERR_INVALID_MODEL;
    int64_t pos = 0;
    kiln_status st = read_index(ctx, cpu_in(inputs, n_in, 1), "position", &pos);
    if (st != KILN_OK) return st;
    if (pos < -(int64_t)s->n_items || pos >= s->n_items)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "position %lld is out of range for a sequence of %d tensors",
                               (long long)pos, (int)s->n_items);
    if (pos < 0) pos += s->n_items;
    return rt_value_copy(&outputs[0], &s->items[pos], ctx->err);
}

kiln_status cpu_sequence_insert(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                int32_t n_out) {
    const rt_value *s = seq_in(ctx, inputs, n_in);
    if (!s) return KILN_ERR_INVALID_MODEL;
    const rt_tensor *t = cpu_in(inputs, n_in, 1);
    if (!t) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input 1 must be a tensor");
    int64_t pos = s->n_items;
    if (cpu_in(inputs, n_in, 2)) {
        kiln_status st = read_index(ctx, cpu_in(inputs, n_in, 2), "position", &pos);
        if (st != KILN_OK) return st;
        if (pos < -(int64_t)s->n_items || pos > s->n_items)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "position %lld is out of range for a sequence of %d tensors",
                                   (long long)pos, (int)s->n_items);
        if (pos < 0) pos += s->n_items;
    }
    if (s->n_items > 0 && s->items[0].t.dtype != t->dtype)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "inserting a %s tensor into a sequence of %s",
                               kiln_dtype_name(t->dtype), kiln_dtype_name(s->items[0].t.dtype));
    rt_value *o = &outputs[0];
    make_sequence(o, t->dtype);
    o->items = calloc((size_t)s->n_items + 2, sizeof *o->items);
    if (!o->items) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    o->n_items = s->n_items + 1;
    for (int32_t i = 0, j = 0; i < o->n_items; i++) {
        kiln_status st = i == pos ? rt_value_copy(&o->items[i], inputs[1], ctx->err)
                                  : rt_value_copy(&o->items[i], &s->items[j++], ctx->err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status cpu_sequence_erase(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    const rt_value *s = seq_in(ctx, inputs, n_in);
    if (!s) return KILN_ERR_INVALID_MODEL;
    int64_t pos = -1;
    if (cpu_in(inputs, n_in, 1)) {
        kiln_status st = read_index(ctx, cpu_in(inputs, n_in, 1), "position", &pos);
        if (st != KILN_OK) return st;
    }
    if (pos < -(int64_t)s->n_items || pos >= s->n_items)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "position %lld is out of range for a sequence of %d tensors",
                               (long long)pos, (int)s->n_items);
    if (pos < 0) pos += s->n_items;
    rt_value *o = &outputs[0];
    make_sequence(o, s->elem_dtype);
    o->items = calloc((size_t)s->n_items + 1, sizeof *o->items);
    if (!o->items) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < s->n_items; i++) {
        if (i == pos) continue;
        kiln_status st = rt_value_copy(&o->items[o->n_items++], &s->items[i], ctx->err);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status cpu_split_to_sequence(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0);
    if (!x) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "input 0 must be a tensor");
    int32_t axis;
    int64_t ax = ir_node_attr_int(ctx->node, "axis", 0);
    if (!cpu_norm_axis(ax, x->rank, &axis))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)ax, (int)x->rank);
    bool keepdims = ir_node_attr_int(ctx->node, "keepdims", 1) != 0;
    const rt_tensor *split = cpu_in(inputs, n_in, 1);
    int64_t len = x->dims[axis];
    int64_t n_parts;
    int64_t chunk = 1;
    const int64_t *sizes = NULL;
    int64_t *conv = NULL;
    if (!split) {
        n_parts = len;
    } else {
        if (split->dtype != KILN_DTYPE_INT64 && split->dtype != KILN_DTYPE_INT32)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split must be int32 or int64");
        conv = malloc(((size_t)split->count + 1) * sizeof *conv);
        if (!conv) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        for (uint64_t i = 0; i < split->count; i++)
            conv[i] = split->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)split->data)[i]
                                                       : ((const int32_t *)split->data)[i];
        if (split->rank == 0) {
            chunk = conv[0];
            if (chunk <= 0) {
                free(conv);
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split size %lld must be positive", (long long)chunk);
            }
            n_parts = (len + chunk - 1) / chunk;
        } else {
            int64_t sum = 0;
            for (uint64_t i = 0; i < split->count; i++) {
                if (conv[i] < 0) {
                    free(conv);
                    return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split sizes must not be negative");
                }
                sum += conv[i];
            }
            if (sum != len) {
                free(conv);
                return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "split sizes add up to %lld but axis %d has %lld", (long long)sum,
                                       (int)axis, (long long)len);
            }
            sizes = conv;
            n_parts = (int64_t)split->count;
        }
    }
    if (n_parts > INT32_MAX - 1) {
        free(conv);
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "too many parts");
    }
    rt_value *o = &outputs[0];
    make_sequence(o, x->dtype);
    o->items = calloc((size_t)n_parts + 1, sizeof *o->items);
    if (!o->items) {
        free(conv);
        return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    int64_t pos = 0;
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n_parts && st == KILN_OK; i++) {
        int64_t l = sizes ? sizes[i] : (pos + chunk > len ? len - pos : chunk);
        o->n_items = (int32_t)i + 1;
        st = cpu_slice_axis(rt_value_as_tensor(&o->items[i]), x, axis, pos, l, split || keepdims, ctx->err);
        pos += l;
    }
    free(conv);
    return st;
}

kiln_status cpu_concat_from_sequence(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out) {
    const rt_value *s = seq_in(ctx, inputs, n_in);
    if (!s) return KILN_ERR_INVALID_MODEL;
    if (s->n_items == 0) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "the sequence is empty: nothing to concatenate");
    bool new_axis = ir_node_attr_int(ctx->node, "new_axis", 0) != 0;
    int64_t ax = ir_node_attr_int(ctx->node, "axis", 0);
    int32_t rank = s->items[0].t.rank + (new_axis ? 1 : 0), axis;
    if (!cpu_norm_axis(ax, rank, &axis))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "axis %lld is out of range", (long long)ax);
    const rt_tensor **parts = malloc((size_t)s->n_items * sizeof *parts);
    if (!parts) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < s->n_items; i++) parts[i] = &s->items[i].t;
    kiln_error e = {0};
    kiln_status st = cpu_concat_axis(rt_value_as_tensor(&outputs[0]), parts, s->n_items, axis, new_axis, false, &e);
    free(parts);
    if (st != KILN_OK) cpu_kernel_fail(ctx, st, "%s", kiln_err_msg(&e));
    kiln_err_clear(&e);
    return st;
}
