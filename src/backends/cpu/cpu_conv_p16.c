/* cpu_conv_p16.c - conversions between the row-major and P16 layouts of a per-image
 * activation [rows = channels, N = positions] (cpu_gemm_packed.h defines P16), and the
 * Conv fallback that uses them.
 *
 * The CPU layout pass (build/passes/layout_p16.c) marks 1x1 convs whose input, output or
 * fused residual is P16 (the node's kiln_p16 bits). The fast path (cpu_conv.c) hands those
 * straight to cpu_sgemm_conv1x1. Whatever cannot take it - no AVX2 (KILN_CPU_ISA=scalar),
 * a weight that is not constant, a kernel run without node state, an engine edited by hand
 * - still gets the right answer here: P16 inputs are copied to row-major, the ordinary
 * Conv runs, and a P16 output is rewritten in place. Slow, but never wrong.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_conv.h"
#include "core/alloc.h"

void cpu_p16_from_rows(const float *src, int64_t rows, int64_t n, float *dst) {
    for (int64_t p = 0; p < n / 16; p++)
        for (int64_t r = 0; r < rows; r++) memcpy(dst + (p * rows + r) * 16, src + r * n + p * 16, 16 * sizeof(float));
}

void cpu_p16_to_rows(const float *src, int64_t rows, int64_t n, float *dst) {
    for (int64_t p = 0; p < n / 16; p++)
        for (int64_t r = 0; r < rows; r++) memcpy(dst + r * n + p * 16, src + (p * rows + r) * 16, 16 * sizeof(float));
}

/* [N, C, spatial...] as images of C rows x (count / (N*C)) positions; false when the shape
 * cannot be P16 (the pass never marks such a tensor; a hand-edited engine could). */
static bool p16_image_shape(const rt_tensor *t, int64_t *images, int64_t *rows, int64_t *n) {
    if (t->rank < 3 || t->dims[0] <= 0 || t->dims[1] <= 0) return false;
    *images = t->dims[0];
    *rows = t->dims[1];
    *n = (int64_t)t->count / (*images * *rows);
    return *n > 0 && *n % 16 == 0;
}

/* A row-major copy of P16 tensor t (caller frees *copy), viewed through *view. */
static kiln_status p16_unpack_input(cpu_kernel_ctx *ctx, const rt_tensor *t, rt_value *view, float **copy) {
    int64_t images, rows, n;
    if (t->dtype != KILN_DTYPE_FLOAT || !p16_image_shape(t, &images, &rows, &n))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                               "kiln_p16 marks an input that cannot be in the P16 layout (float32 [N, C, ...] with "
                               "a multiple of 16 positions per channel); rebuild the engine");
    *copy = kiln_realloc_array(NULL, (size_t)t->count, sizeof(float));
    if (!*copy) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory converting a P16 input");
    for (int64_t i = 0; i < images; i++)
        cpu_p16_to_rows((const float *)t->data + i * rows * n, rows, n, *copy + i * rows * n);
    rt_value_init(view);
    rt_tensor_borrow(rt_value_as_tensor(view), KILN_DTYPE_FLOAT, t->rank, t->dims, *copy);
    return KILN_OK;
}

kiln_status cpu_conv_p16_fallback(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out, int64_t p16, cpu_conv_nchw_fn run, int algo) {
    const rt_value *ins[CPU_CONV_P16_MAX_INPUTS];
    if (n_in > CPU_CONV_P16_MAX_INPUTS)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Conv with %d inputs cannot carry kiln_p16", n_in);
    for (int32_t i = 0; i < n_in; i++) ins[i] = inputs[i];
    rt_value views[2];
    float *copies[2] = {NULL, NULL};
    kiln_status st = KILN_OK;
    int32_t res_index = (int32_t)ir_node_attr_int(ctx->node, "kiln_residual", -1);
    if ((p16 & CPU_CONV_P16_X) && cpu_in(inputs, n_in, 0)) {
        st = p16_unpack_input(ctx, cpu_in(inputs, n_in, 0), &views[0], &copies[0]);
        if (st == KILN_OK) ins[0] = &views[0];
    }
    if (st == KILN_OK && (p16 & CPU_CONV_P16_RES) && res_index >= 0 && cpu_in(inputs, n_in, res_index)) {
        if (copies[0] && inputs[res_index] == inputs[0]) ins[res_index] = &views[0]; /* X is its own residual */
        else {
            st = p16_unpack_input(ctx, cpu_in(inputs, n_in, res_index), &views[1], &copies[1]);
            if (st == KILN_OK) ins[res_index] = &views[1];
        }
    }
    if (st == KILN_OK) st = run(ctx, ins, n_in, outputs, n_out, algo);
    if (st == KILN_OK && (p16 & CPU_CONV_P16_Y) && n_out > 0 && outputs[0].kind == IR_TYPE_TENSOR) {
        rt_tensor *y = &outputs[0].t; /* the Conv's result, rewritten in place */
        int64_t images = 0, rows = 0, n = 0;
        float *tmp = NULL;
        if (!p16_image_shape(y, &images, &rows, &n))
            st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                                 "kiln_p16 marks an output that cannot be in the P16 layout; rebuild the engine");
        else if (!(tmp = kiln_realloc_array(NULL, (size_t)(rows * n), sizeof(float))))
            st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory converting a P16 output");
        for (int64_t i = 0; st == KILN_OK && i < images; i++) {
            float *img = (float *)y->data + i * rows * n;
            memcpy(tmp, img, (size_t)(rows * n) * sizeof(float));
            cpu_p16_from_rows(tmp, rows, n, img);
        }
        free(tmp);
    }
    free(copies[0]);
    free(copies[1]);
    return st;
}
