/* cuda_layout.h - layout kernels of the CUDA backend (cuda_layout.cu) and the host-side
 * classification of transposes that picks them (cuda_layout_host.c).
 *
 * Channels-last FP16 models (build/passes/layout_nhwc.c) move whole activations between
 * layouts at region edges, and pool them in NHWC; the generic strided copy (cuda_k_copy_nd:
 * per-element index math, one scalar load and store each) ran those at a tenth of the
 * H200's bandwidth (ResNet-50 batch 128: 0.94 ms for a 205 MB transpose, MaxPool 0.82 ms).
 * These kernels are the fast paths: a shared-memory tiled batched 2-D transpose, the
 * padded-stem entry (NCHW -> NHWC with cast and zero channels in one pass) and MaxPool /
 * AveragePool over 8 half channels per thread (16-byte loads and stores).
 * Launchers enqueue on `stream` and return the launch error (cudaError_t) as an int.
 */
#ifndef KILN_BACKENDS_CUDA_CUDA_LAYOUT_H
#define KILN_BACKENDS_CUDA_CUDA_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[b, c, r] = x[b, r, c] for x [nb, rows, cols] (elem_size 1, 2, 4 or 8 bytes). */
int cuda_k_transpose_batched(const void *x, void *y, int elem_size, int64_t nb, int64_t rows, int64_t cols,
                             void *stream);

/* x [n, c, hw] (float32 when x_half is 0, else float16) -> y [n, hw, cp] (float16 when
 * y_half, else float32) with y[.., ch] = 0 for ch in [c, cp). */
int cuda_k_nchw_to_nhwc(const void *x, int x_half, void *y, int y_half, int64_t n, int64_t c, int64_t hw,
                        int64_t cp, void *stream);

/* Channels-last 2-D pooling: x [n, h, w, c] -> y [n, oh, ow, c]; max when is_max, else
 * average (count_include_pad). Half tensors with c % 8 == 0 take 8 channels per thread. */
int cuda_k_pool2d_nhwc(int half, const void *x, void *y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh,
                       int64_t ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int is_max,
                       int count_include_pad, void *stream);

/* ---- host side (cuda_layout_host.c, no GPU needed; unit-tested) ---- */

/* How a transposition of x (dims, perm; rank <= 8) can run: CUDA_PERM_COPY when it moves
 * no data (only size-1 axes move: a plain copy), CUDA_PERM_BATCHED when it is
 * [nb, rows, cols] -> [nb, cols, rows] after merging axes that stay adjacent (NCHW <->
 * NHWC are: [N, C, HW] <-> [N, HW, C]), CUDA_PERM_GENERAL otherwise. */
enum cuda_perm_kind { CUDA_PERM_GENERAL, CUDA_PERM_COPY, CUDA_PERM_BATCHED };
int cuda_perm_classify(int32_t rank, const int64_t *dims, const int64_t *perm, int64_t *nb, int64_t *rows,
                       int64_t *cols);

#ifdef __cplusplus
}
#endif

#endif
