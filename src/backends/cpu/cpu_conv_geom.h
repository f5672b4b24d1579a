/* cpu_conv_geom.h - the spatial geometry shared by Conv, ConvTranspose, ConvInteger,
 * QLinearConv and the pooling ops: kernel shape, strides, dilations, pads (explicit or
 * auto_pad) and the resulting output size, computed once per call from the node's
 * attributes and the input shape. Also the im2col/col2im transforms over that geometry.
 */
#ifndef KILN_BACKENDS_CPU_CPU_CONV_GEOM_H
#define KILN_BACKENDS_CPU_CPU_CONV_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

#define CPU_CONV_MAX_SPATIAL 8

typedef struct cpu_conv_geom {
    int32_t nsp;                          /* number of spatial dims */
    int64_t in[CPU_CONV_MAX_SPATIAL];     /* input spatial size */
    int64_t out[CPU_CONV_MAX_SPATIAL];    /* output spatial size */
    int64_t k[CPU_CONV_MAX_SPATIAL];      /* kernel */
    int64_t stride[CPU_CONV_MAX_SPATIAL];
    int64_t dil[CPU_CONV_MAX_SPATIAL];
    int64_t pad0[CPU_CONV_MAX_SPATIAL];   /* begin pads */
    int64_t pad1[CPU_CONV_MAX_SPATIAL];   /* end pads */
    int64_t in_size, out_size, k_size;    /* products */
} cpu_conv_geom;

enum cpu_geom_kind {
    CPU_GEOM_CONV = 0, /* Conv and friends: floor division */
    CPU_GEOM_POOL = 1  /* pools: ceil_mode honoured */
};

/* Fills g from the node's kernel_shape (or `kernel` when given, e.g. from W), strides,
 * dilations, pads/auto_pad and ceil_mode (pools only). x_dims are the input's spatial dims.
 * Fails with a message on inconsistent attributes or a non-positive output size. */
kiln_status cpu_conv_geom_init(cpu_kernel_ctx *ctx, int kind, int32_t nsp, const int64_t *x_dims,
                               const int64_t *kernel, cpu_conv_geom *g);

/* im2col for one image and one group: col[(c*k_size + kpos) * out_size + opos] for c in
 * [0, channels); x points at the group's first channel. Rows are spread over the pool. */
void cpu_im2col(cpu_threadpool *pool, const cpu_conv_geom *g, const float *x, int64_t channels, float *col);
/* col2im (accumulating): y[c, ipos] += col[(c*k_size + kpos) * out_size + opos] with the
 * roles of in/out as in Conv (col is over g->out positions, y over g->in). Used by
 * ConvTranspose with a geometry whose "in" is the transposed conv's output. */
void cpu_col2im(const cpu_conv_geom *g, const float *col, int64_t channels, float *y);

#endif
