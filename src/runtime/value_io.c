/* value_io.c - onnx_value (decoded .pb) -> rt_value, borrowing tensor data (see value_io.h). */
#include "runtime/value_io.h"

#include <stdlib.h>

static const char *kind_word(ir_type_kind k) {
    switch (k) {
    case IR_TYPE_MAP: return "map";
    case IR_TYPE_SPARSE_TENSOR: return "sparse tensor";
    case IR_TYPE_OPTIONAL: return "optional";
    case IR_TYPE_SEQUENCE: return "sequence";
    case IR_TYPE_TENSOR: return "tensor";
    default: return "unknown";
    }
}

kiln_status rt_value_from_onnx(const onnx_value *src, const ir_type *decl, rt_value *out, kiln_error *err) {
    rt_value_init(out);
    switch (src->kind) {
    case IR_TYPE_TENSOR:
        if (!src->tensor) return kiln_err_set(err, KILN_ERR_FORMAT, "the tensor value has no data");
        out->kind = IR_TYPE_TENSOR;
        out->has_value = true;
        return rt_tensor_from_ir(&out->t, src->tensor, err);
    case IR_TYPE_SEQUENCE: {
        out->kind = IR_TYPE_SEQUENCE;
        out->has_value = true;
        out->elem_kind = IR_TYPE_TENSOR;
        const ir_type *et = decl && decl->kind == IR_TYPE_SEQUENCE ? decl->elem : NULL;
        out->elem_dtype = et ? et->dtype : KILN_DTYPE_UNDEFINED;
        if (src->n_elems < 0) return kiln_err_set(err, KILN_ERR_FORMAT, "negative sequence length");
        out->items = calloc((size_t)src->n_elems + 1, sizeof *out->items);
        if (!out->items) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        for (int32_t i = 0; i < src->n_elems; i++) {
            if (src->elems[i].kind != IR_TYPE_TENSOR)
                return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "sequences of %ss are not supported (item %d)",
                                    kind_word(src->elems[i].kind), (int)i);
            out->n_items = i + 1;
            kiln_status st = rt_value_from_onnx(&src->elems[i], et, &out->items[i], err);
            if (st != KILN_OK) return st;
            if (out->elem_dtype == KILN_DTYPE_UNDEFINED) out->elem_dtype = out->items[i].t.dtype;
        }
        return KILN_OK;
    }
    case IR_TYPE_OPTIONAL: {
        out->kind = IR_TYPE_OPTIONAL;
        const ir_type *et = decl && decl->kind == IR_TYPE_OPTIONAL ? decl->elem : NULL;
        out->elem_kind = et ? et->kind : IR_TYPE_TENSOR;
        if (!src->has_value || src->n_elems < 1) {
            out->has_value = false;
            return KILN_OK;
        }
        rt_value inner;
        kiln_status st = rt_value_from_onnx(&src->elems[0], et, &inner, err);
        if (st != KILN_OK) {
            rt_value_release(&inner);
            return st;
        }
        out->has_value = true;
        out->elem_kind = inner.kind;
        if (inner.kind == IR_TYPE_TENSOR) {
            out->t = inner.t;
            out->elem_dtype = inner.t.dtype;
        } else if (inner.kind == IR_TYPE_SEQUENCE) {
            out->items = inner.items;
            out->n_items = inner.n_items;
            out->elem_dtype = inner.elem_dtype;
        } else {
            rt_value_release(&inner);
            return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "optionals of a %s are not supported", kind_word(inner.kind));
        }
        return KILN_OK;
    }
    default:
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "%s values are not supported by the runtime",
                            kind_word(src->kind));
    }
}
