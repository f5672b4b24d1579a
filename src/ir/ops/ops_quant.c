/* ops_quant.c - inference for QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear: output shape of the input, element type from the zero point,
 * the output_dtype attribute (opset 21) or the scale (dequantize, opset 19+). */
#include "ir/ops/ops.h"

void ir_infer_quantize(ir_ictx *c) {
    kiln_dtype dt = ir_has(c, 2) ? ir_in_dt(c, 2) : KILN_DTYPE_UINT8;
    int64_t od = ir_ai(c, "output_dtype", 0);
    if (!ir_has(c, 2) && od > 0 && od < KILN_DTYPE_COUNT) dt = (kiln_dtype)od;
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, dt, r, r > 0 ? t->dims : NULL);
}

void ir_infer_dequantize(ir_ictx *c) {
    kiln_dtype dt = c->opset >= 19 && ir_in_dt(c, 1) ? ir_in_dt(c, 1) : KILN_DTYPE_FLOAT;
    int64_t od = ir_ai(c, "output_dtype", 0);
    if (od > 0 && od < KILN_DTYPE_COUNT) dt = (kiln_dtype)od;
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, dt, r, r > 0 ? t->dims : NULL);
}

void ir_infer_dynamic_quantize(ir_ictx *c) {
    const ir_type *t = ir_in(c, 0);
    int32_t r = ir_in_rank(c, 0);
    ir_out(c, 0, KILN_DTYPE_UINT8, r, r > 0 ? t->dims : NULL);
    ir_out(c, 1, KILN_DTYPE_FLOAT, 0, NULL);
    ir_out(c, 2, KILN_DTYPE_UINT8, 0, NULL);
}
