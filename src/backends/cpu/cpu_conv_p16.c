/* cpu_conv_p16.c - conversions between the row-major layout of a per-image activation
 * [rows = channels, n = positions] and the CPU's two blocked layouts, P16 (cpu_gemm_packed.h:
 * blocks of 16 positions) and C16 (cpu_c16.h: blocks of 16 channels), and the Conv
 * fallback that uses them.
 *
 * The CPU layout passes (build/passes/layout_p16.c, layout_c16.c) mark convs whose input,
 * output or fused residual is P16 or C16 (the node's kiln_p16 / kiln_c16 bits). The fast
 * paths (cpu_conv.c) hand those to cpu_sgemm_conv1x1 and the C16 direct conv. Whatever
 * cannot take them - no AVX2 or AVX-512 (KILN_CPU_ISA), a weight that is not constant, a
 * kernel run without node state, an engine edited by hand - still gets the right answer
 * here: blocked inputs are copied to row-major, the ordinary Conv runs, and a blocked
 * output is rewritten in place. Slow, but never wrong.
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

void cpu_c16_from_rows(const float *src, int64_t rows, int64_t n, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < n; p++) dst[((r / 16) * n + p) * 16 + r % 16] = src[r * n + p];
}

void cpu_c16_to_rows(const float *src, int64_t rows, int64_t n, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < n; p++) dst[r * n + p] = src[((r / 16) * n + p) * 16 + r % 16];
}

/* One blocked layout: its converters, attribute name and what its blocks need. */
typedef struct blocked_layout {
    void (*to_rows)(const float *, int64_t, int64_t, float *);
    void (*from_rows)(const float *, int64_t, int64_t, float *);
    const char *attr, *name, *needs;
    bool rows_of_16; /* C16: channels in 16s; P16: positions */
} blocked_layout;

static const blocked_layout layouts[2] = {
    {cpu_p16_to_rows, cpu_p16_from_rows, "kiln_p16", "P16", "a multiple of 16 positions per channel", false},
    {cpu_c16_to_rows, cpu_c16_from_rows, "kiln_c16", "C16", "a multiple of 16 channels", true},
};

/* [N, C, spatial...] as images of C rows x (count / (N*C)) positions; false when the shape
 * cannot be in layout l (the passes never mark such a tensor; a hand-edited engine could). */
static bool blocked_image_shape(const blocked_layout *l, const rt_tensor *t, int64_t *images, int64_t *rows,
                                int64_t *n) {
    if (t->rank < 3 || t->dims[0] <= 0 || t->dims[1] <= 0) return false;
    *images = t->dims[0];
    *rows = t->dims[1];
    *n = (int64_t)t->count / (*images * *rows);
    return *n > 0 && (l->rows_of_16 ? *rows % 16 == 0 : *n % 16 == 0);
}

/* A row-major copy of blocked tensor t (caller frees *copy), viewed through *view. */
static kiln_status unpack_input(cpu_kernel_ctx *ctx, const blocked_layout *l, const rt_tensor *t, rt_value *view,
                                float **copy) {
    int64_t images, rows, n;
    if (t->dtype != KILN_DTYPE_FLOAT || !blocked_image_shape(l, t, &images, &rows, &n))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                               "%s marks an input that cannot be in the %s layout (float32 [N, C, ...] with %s); "
                               "rebuild the engine",
                               l->attr, l->name, l->needs);
    *copy = kiln_realloc_array(NULL, (size_t)t->count, sizeof(float));
    if (!*copy) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory converting a %s input", l->name);
    for (int64_t i = 0; i < images; i++) l->to_rows((const float *)t->data + i * rows * n, rows, n, *copy + i * rows * n);
    rt_value_init(view);
    rt_tensor_borrow(rt_value_as_tensor(view), KILN_DTYPE_FLOAT, t->rank, t->dims, *copy);
    return KILN_OK;
}

kiln_status cpu_conv_layout_fallback(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                     rt_value *outputs, int32_t n_out, int64_t bits, bool c16, cpu_conv_nchw_fn run,
                                     int algo) {
    const blocked_layout *l = &layouts[c16 ? 1 : 0];
    const rt_value *ins[CPU_CONV_P16_MAX_INPUTS];
    if (n_in > CPU_CONV_P16_MAX_INPUTS)
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Conv with %d inputs cannot carry %s", n_in, l->attr);
    for (int32_t i = 0; i < n_in; i++) ins[i] = inputs[i];
    rt_value views[2];
    float *copies[2] = {NULL, NULL};
    kiln_status st = KILN_OK;
    int32_t res_index = (int32_t)ir_node_attr_int(ctx->node, "kiln_residual", -1);
    if ((bits & CPU_CONV_P16_X) && cpu_in(inputs, n_in, 0)) {
        st = unpack_input(ctx, l, cpu_in(inputs, n_in, 0), &views[0], &copies[0]);
        if (st == KILN_OK) ins[0] = &views[0];
    }
    if (st == KILN_OK && (bits & CPU_CONV_P16_RES) && res_index >= 0 && cpu_in(inputs, n_in, res_index)) {
        if (copies[0] && inputs[res_index] == inputs[0]) ins[res_index] = &views[0]; /* X is its own residual */
        else {
            st = unpack_input(ctx, l, cpu_in(inputs, n_in, res_index), &views[1], &copies[1]);
            if (st == KILN_OK) ins[res_index] = &views[1];
        }
    }
    if (st == KILN_OK) st = run(ctx, ins, n_in, outputs, n_out, algo);
    if (st == KILN_OK && (bits & CPU_CONV_P16_Y) && n_out > 0 && outputs[0].kind == IR_TYPE_TENSOR) {
        rt_tensor *y = &outputs[0].t; /* the Conv's result, rewritten in place */
        int64_t images = 0, rows = 0, n = 0;
        float *tmp = NULL;
        if (!blocked_image_shape(l, y, &images, &rows, &n))
            st = cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL,
                                 "%s marks an output that cannot be in the %s layout; rebuild the engine", l->attr,
                                 l->name);
        else if (!(tmp = kiln_realloc_array(NULL, (size_t)(rows * n), sizeof(float))))
            st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory converting a %s output", l->name);
        for (int64_t i = 0; st == KILN_OK && i < images; i++) {
            float *img = (float *)y->data + i * rows * n;
            memcpy(tmp, img, (size_t)(rows * n) * sizeof(float));
            l->from_rows(tmp, rows, n, img);
        }
        free(tmp);
    }
    free(copies[0]);
    free(copies[1]);
    return st;
}
