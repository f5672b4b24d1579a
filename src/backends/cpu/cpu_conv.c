/* cpu_conv.c - Conv (float32, NCHW, 1-D/2-D/3-D and beyond, groups, dilations, auto_pad)
 * and ConvTranspose.
 *
 * Algorithms, chosen per call from the geometry:
 *   - pointwise (1x1, stride 1, no pad): the image *is* the GEMM's B matrix [C, H*W], so
 *     Y = W * X with no copy at all (most of ResNet-50's and MobileNet's FLOPs);
 *   - depthwise (one input and one output channel per group, 2-D): a direct kernel over
 *     output rows, one channel per task, because as a GEMM it would be M=1 per group;
 *   - 3x3 stride-1 single-group convs with >= 16 channels: Winograd F(4x4, 3x3) or
 *     F(2x2, 3x3) (cpu_winograd_avx2.c) when the builder timed one of them fastest on the
 *     node's shape (tactic "conv_winograd_f43" / "_f23" in the node's kiln_tactic
 *     attribute, cpu_conv.h); without a timed choice F(4x4, 3x3), or F(2x2, 3x3) for
 *     fewer than 16 output tiles (conv_winograd_tile);
 *   - other 2-D convs with constant weights on AVX2: implicit GEMM, B panels packed
 *     from a phase-split copy of the image (cpu_conv_strided.h: each stride phase a plane,
 *     padding written in, so every kernel tap is a contiguous read; a strided 1x1 conv's
 *     one phase is the subsampled image, run as a pointwise conv); when B is large (the
 *     stem, 56x56 layers) the panels are packed slice by slice inside the GEMM's tasks,
 *     never written out whole (cpu_sgemm_packed_a_fn_local; 1x1 convs through
 *     cpu_sgemm_packed_a_rows_local);
 *   - everything else: im2col into a scratch buffer kept in the node's state (grown once,
 *     reused every run: no allocation in steady state), then one GEMM per group.
 * Bias, a fused residual Add and a fused activation (cpu_gemm.h) are applied by the GEMM's
 * epilogue, so the output is written once.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_c16.h"
#include "backends/cpu/cpu_conv.h"
#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_conv_geom.h"
#include "backends/cpu/cpu_conv_strided.h"
#include "backends/cpu/cpu_fbuf.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_gemm_avx512.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_winograd.h"
#include "core/alloc.h"
#include "core/bigalloc.h"

typedef struct conv_state {
    float *col;
    size_t col_cap; /* floats */
    /* Constant weights packed once for cpu_sgemm_packed (one per group), keyed by the
     * weight data pointer and shape so a changed binding repacks. */
    cpu_gemm_packed *packed;
    int64_t n_packed, packed_M, packed_K;
    const float *packed_src;
    cpu_gemm_scratch scratch;
    cpu_winograd_weights wg; /* Winograd-transformed weights (wg.u NULL when unused) */
    cpu_winograd_scratch wg_scratch;
    float *phase; /* phase-split input of strided convs (cpu_conv_strided.h), 64-byte aligned */
    size_t phase_cap; /* floats */
    cpu_conv_c16_weights c16; /* weights of the channels-in-lanes direct conv (c16.w NULL when unused) */
    cpu_bf16x3_b amx;         /* W^T split for the AMX bf16x3 tactic (amx.data NULL when unused) */
    const float *amx_src;
} conv_state;

static void conv_packed_clear(conv_state *s) {
    for (int64_t i = 0; i < s->n_packed; i++) cpu_gemm_packed_free(&s->packed[i]);
    free(s->packed);
    s->packed = NULL;
    s->n_packed = 0;
}

static void conv_state_free(void *p) {
    conv_state *s = p;
    if (s) {
        free(s->col);
        free(s->phase);
        conv_packed_clear(s);
        cpu_gemm_scratch_free(&s->scratch);
        cpu_winograd_weights_free(&s->wg);
        cpu_winograd_scratch_free(&s->wg_scratch);
        cpu_conv_c16_weights_free(&s->c16);
        cpu_bf16x3_b_free(&s->amx);
    }
    free(s);
}

/* The node's scratch buffer (ctx->state non-NULL) with room for `n` floats; NULL on
 * out-of-memory. Grows only, so steady-state runs allocate nothing. */
static conv_state *conv_state_get(cpu_kernel_ctx *ctx) {
    conv_state *s = *ctx->state;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        *ctx->state = s;
        if (ctx->state_free) *ctx->state_free = conv_state_free;
    }
    return s;
}

/* Scratch for this run: the context's shared set (cpu_scratch.h) when there is one, else
 * the node's own buffers (grow only, so steady-state runs allocate nothing). */
static float *conv_scratch(cpu_kernel_ctx *ctx, uint64_t n) {
    if (ctx->scratch) return cpu_scratch_grow(&ctx->scratch->col, &ctx->scratch->col_cap, n);
    conv_state *s = conv_state_get(ctx);
    return s ? cpu_scratch_grow(&s->col, &s->col_cap, n) : NULL;
}

/* The phase-plane buffer with room for `n` floats; NULL on OOM. */
static float *conv_phase_buf(cpu_kernel_ctx *ctx, conv_state *s, uint64_t n) {
    if (ctx->scratch) return cpu_scratch_grow(&ctx->scratch->phase, &ctx->scratch->phase_cap, n);
    return cpu_scratch_grow(&s->phase, &s->phase_cap, n);
}

/* ---- channels in lanes (AVX-512, cpu_c16.h) ---------------------------------------------- */

/* KILN_CONV_C16=0 keeps every non-pointwise conv on the implicit GEMM (A/B measurements). */
static bool conv_c16_enabled(void) {
    static _Atomic int cached = -1;
    return cpu_env_switch("KILN_CONV_C16", &cached);
}

/* Where the direct conv measured faster than the implicit GEMM in ResNet-50 on the
 * Sapphire Rapids-class dev VM (in the network, against 1x1 control layers;
 * docs/BENCHMARKS.md "Session 13"): kernels larger than 1x1 over a multiple of 16 input
 * channels (the 3x3/2 convs: 10-27% faster at batch 1 and 8, 1 and 2 threads); the RGB
 * 7x7 stem (a kernel row of 7 taps per k block: level with the GEMM, but its output is
 * stored in cache instead of streamed past it, and the MaxPool reading it next ran 37%
 * faster); and 1x1 stride-1 convs over small images (at most 256 positions: ResNet's
 * 14x14 and 7x7 stages), where 196 and 49 positions leave the GEMM's 16-position lanes
 * partly idle (single layers against ONNX Runtime's conv node: 0.75 -> 0.95 and
 * 0.79 -> 0.95 of its speed). The strided 1x1 convs (0.83-0.99) and larger images' 1x1
 * convs (56x56: 0.51-0.69 of ORT against 0.67-0.76 on the GEMM) stay on the GEMM. */
bool cpu_conv_c16_candidate(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M) {
    bool pointwise = g->k[0] == 1 && g->k[1] == 1 && g->stride[0] == 1 && g->stride[1] == 1 && !g->pad0[0] &&
                     !g->pad0[1] && !g->pad1[0] && !g->pad1[1];
    bool deep = C % 16 == 0 && (g->k[0] > 1 || g->k[1] > 1);
    bool small_pointwise = C % 16 == 0 && pointwise && g->out[0] * g->out[1] <= 256;
    bool stem = C < 16 && g->k[1] == 7 && g->dil[1] == 1;
    return (deep || small_pointwise || stem) && cpu_conv_c16_applies(g, group, C, M);
}

/* Where the builder also times it: every conv over a multiple of 16 channels, 1x1 ones
 * over large images and strided ones included. Over NCHW data those ran 0.51-0.99 of the
 * GEMM's speed, so they are not the default; in a C16 region (layout_c16.c) they read
 * their input in place (at their strides) and store their tiles as they are, with no
 * packing, copy or transpose, and the builder takes them there (builder.c, chain_c16). */
bool cpu_conv_c16_offered(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M) {
    return cpu_conv_c16_candidate(g, group, C, M) || (C % 16 == 0 && cpu_conv_c16_applies(g, group, C, M));
}

/* layout: kiln_c16's bits (CPU_C16_X / _Y / _RES), 0 for NCHW data */
static kiln_status conv_c16(cpu_kernel_ctx *ctx, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                            const float *X, const float *Wt, float *Y, const cpu_epilogue *ep, unsigned layout) {
    conv_state *cs = conv_state_get(ctx);
    if (!cs) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the Conv state");
    if (!cs->c16.w || cs->c16.src != Wt || cs->c16.M != M || cs->c16.C != C || cs->c16.kh != g->k[0] ||
        cs->c16.kw != g->k[1] || cs->c16.pack_dw != g->dil[1]) {
        kiln_status st = cpu_conv_c16_pack(Wt, M, C, g, &cs->c16, ctx->err);
        if (st != KILN_OK) return st;
    }
    float *xp = NULL;
    if (!cpu_conv_c16_reads_in_place(g, C, layout)) {
        uint64_t need;
        if (kiln_mul_overflow_u64((uint64_t)N, (uint64_t)cpu_conv_c16_scratch_floats(g, C), &need) ||
            need > (1ull << 34))
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "Conv input copy of %lld images is too large", (long long)N);
        xp = conv_phase_buf(ctx, cs, need);
        if (!xp) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the Conv input copy");
    }
    cpu_epilogue e = *ep;
    e.ld_res = g->out_size;
    return cpu_conv_c16_run(ctx->pool, g, &cs->c16, N, X, Y, &e, xp, layout, ctx->err);
}

/* ---- AMX bf16x3 convs (cpu_gemm_bf16x3.h) ------------------------------------------- */

/* At least 128 products per output (C * KH * KW): with 64 (ResNet-50's 64 -> 256 1x1 convs
 * at 56x56) a 32x32 block is two 32-k chunks, too short to pay for the tile stores and the
 * split input, and in the network those ran 10-37% slower than the C16 kernel at batch 1
 * and 8 (ab_kiln --by node, docs/BENCHMARKS.md "Session 15"), though timed alone they
 * tied it. Channels in 16s: a C16 region's convs, and a 16-float load per tap. Kernels
 * larger than 1x1 split KH * KW copies of their input (the im2col matrix, in bfloat16
 * pairs); where there are enough row blocks the GEMM splits each as it runs it, so the
 * copy stays in L2 (before, a 2 MiB cap kept ResNet-50's batch-8 strided 3x3s, 29 MB
 * copies, off AMX). The builder's timing decides against Winograd and the C16 kernel. */
bool cpu_conv_amx_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M) {
    return g->nsp == 2 && group == 1 && C % 16 == 0 && M % 16 == 0 && C * g->k[0] * g->k[1] >= 128 && g->k[0] <= 16 &&
           g->k[1] <= 16;
}
/* The conv as Y^T = im2col(X)^T W^T on AMX tiles, reading and writing NCHW or C16
 * (layout: kiln_c16's bits); the per-channel bias becomes a column bias of that GEMM. The
 * weights [M][C][KH][KW] are reordered to [M][KH][KW][C] (the split's tap-major k) and
 * packed once per node. */
static kiln_status conv_amx(cpu_kernel_ctx *ctx, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                            const float *X, const float *Wt, float *Y, const cpu_epilogue *ep, unsigned layout) {
    conv_state *cs = conv_state_get(ctx);
    if (!cs) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the Conv state");
    int64_t taps = g->k[0] * g->k[1], K = C * taps;
    if (!cs->amx.data || cs->amx_src != Wt || cs->amx.K != K || cs->amx.N != M) {
        cpu_bf16x3_b_free(&cs->amx);
        cs->amx_src = NULL;
        float *wr = kiln_realloc_array(NULL, (size_t)(M * K), sizeof(float));
        if (!wr) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory reordering Conv weights");
        for (int64_t m = 0; m < M; m++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t t = 0; t < taps; t++) wr[m * K + t * C + c] = Wt[(m * C + c) * taps + t];
        kiln_status st = cpu_bf16x3_pack_b(wr, K, K, M, true, &cs->amx, ctx->err);
        free(wr);
        if (st != KILN_OK) return st;
        cs->amx_src = Wt;
    }
    cpu_epilogue e = *ep;
    if (e.bias_mode == CPU_BIAS_ROW) e.bias_mode = CPU_BIAS_COL;
    return cpu_conv_bf16x3(ctx->pool, g, N, C, M, X, &cs->amx, Y, &e, layout, cpu_scratch_gemm(ctx, &cs->scratch),
                           ctx->err);
}

/* ---- implicit-GEMM packing (2-D, packed weights) ----------------------------------- */

/* Packs panel `panel` (16 output positions) of the virtual im2col matrix, rows [k0,
 * k0+kc), straight from the image: the 16 positions are split into runs that share an
 * output row, so each run is one contiguous (stride 1) or strided read per kernel tap.
 * Only for kernels too long for the phase-split input (cpu_conv_strided.h, which every
 * other implicit-GEMM conv takes); its stride-2 AVX2 gathers went with that change. */
typedef struct conv_pack_ctx {
    const cpu_conv_geom *g;
    const float *x; /* this image and group: [Cg, H, W] */
} conv_pack_ctx;

static void conv_pack_b(void *user, int64_t panel, int64_t k0, int64_t kc, float *dst) {
    const conv_pack_ctx *pc = user;
    const cpu_conv_geom *g = pc->g;
    int64_t H = g->in[0], W = g->in[1], OW = g->out[1], OS = g->out_size, KH = g->k[0], KW = g->k[1];
    int64_t sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1], pt = g->pad0[0], pl = g->pad0[1];
    int64_t p0 = panel * 16;
    int64_t seg_oh[16], seg_ow[16], seg_j[16], seg_len[16];
    int ns = 0;
    for (int64_t j = 0; j < 16 && p0 + j < OS;) {
        int64_t p = p0 + j, oh = p / OW, ow = p % OW, len = OW - ow;
        if (len > 16 - j) len = 16 - j;
        if (len > OS - p) len = OS - p;
        seg_oh[ns] = oh;
        seg_ow[ns] = ow;
        seg_j[ns] = j;
        seg_len[ns++] = len;
        j += len;
    }
    /* the row index r = (c, kh, kw) advances as an odometer: no divisions per row */
    int64_t c = k0 / (KH * KW), kh = (k0 / KW) % KH, kw = k0 % KW;
    bool one_seg = ns == 1 && seg_len[0] == 16;
    for (int64_t k = 0; k < kc; k++) {
        float *d = dst + k * 16;
        const float *xc = pc->x + c * H * W;
        if (one_seg) {
            /* the common case: 16 positions on one output row */
            int64_t ih = seg_oh[0] * sh + kh * dh - pt, iw0 = seg_ow[0] * sw + kw * dw - pl;
            if (ih >= 0 && ih < H && iw0 >= 0 && iw0 + 15 * sw < W) {
                const float *src = xc + ih * W + iw0;
                if (sw == 1) memcpy(d, src, 16 * sizeof(float));
                else
                    for (int t = 0; t < 16; t++) d[t] = src[t * sw];
                goto next;
            }
        }
        memset(d, 0, 16 * sizeof(float));
        for (int s = 0; s < ns; s++) {
            int64_t ih = seg_oh[s] * sh + kh * dh - pt;
            if (ih < 0 || ih >= H) continue;
            const float *row = xc + ih * W;
            int64_t iw0 = seg_ow[s] * sw + kw * dw - pl, len = seg_len[s];
            float *ds = d + seg_j[s];
            if (iw0 >= 0 && iw0 + (len - 1) * sw < W) {
                if (sw == 1) memcpy(ds, row + iw0, (size_t)len * sizeof(float));
                else
                    for (int64_t t = 0; t < len; t++) ds[t] = row[iw0 + t * sw];
            } else
                for (int64_t t = 0; t < len; t++) {
                    int64_t iw = iw0 + t * sw;
                    if (iw >= 0 && iw < W) ds[t] = row[iw];
                }
        }
    next:
        if (++kw == KW) {
            kw = 0;
            if (++kh == KH) {
                kh = 0;
                c++;
            }
        }
    }
}

/* ---- depthwise ----------------------------------------------------------------------- */

typedef struct dw_job {
    const cpu_conv_geom *g;
    const float *x, *w;
    float *y;
    const cpu_epilogue *ep;
    int64_t channels;   /* per image */
    bool avx2;          /* cpu_conv_dw8_avx2 may run */
    bool x_p16, y_p16;  /* input / output in the P16 layout (dw8_run only: conv_p16_direct_dw) */
    _Atomic bool nomem; /* a P16 group found no row buffer (the portable loop reads planes only) */
} dw_job;

static void dw_run(void *user, int64_t begin, int64_t end);

/* What of the epilogue the vector depthwise kernels apply in registers: with `on` (no
 * residual, no activation other than ReLU or Clip) the bias, ReLU, or the clamp [lo, hi]
 * (infinite without Clip); without it the caller applies the whole epilogue after each
 * plane. */
typedef struct dw_inreg {
    bool on, relu;
    float lo, hi;
} dw_inreg;

static dw_inreg dw_inreg_of(const cpu_epilogue *ep) {
    bool on = !ep->residual &&
              (ep->act.kind == CPU_ACT_NONE || ep->act.kind == CPU_ACT_RELU || ep->act.kind == CPU_ACT_CLIP);
    bool clip = on && ep->act.kind == CPU_ACT_CLIP;
    return (dw_inreg){on, on && ep->act.kind == CPU_ACT_RELU, clip ? ep->act.a : -INFINITY,
                      clip ? ep->act.b : INFINITY};
}

/* Whether the depthwise conv runs 8 channels at a time (cpu_conv_dw8_avx2) rather than a
 * plane at a time. First (session 6) for output planes up to 56x56, where the plane
 * kernel's per-row setup outweighs its FMAs. MobileNetV2's 3x3 depthwise shapes,
 * bench_layers, 1 thread, thread clock, minimum of 21 runs, four rounds alternating the
 * two builds (the machine's speed moved ~2x between rounds, so ranges; plane -> 8
 * channels, ms): 960 ch 7x7 0.27-0.49 -> 0.12-0.17, 576 ch 14x14/2 0.29-0.58 -> 0.09-0.15,
 * 576 ch 14x14 0.40-0.74 -> 0.18-0.27, 384 ch 14x14 0.26-0.50 -> 0.12-0.18, 192 ch 28x28/2
 * 0.22-0.38 -> 0.09-0.13, 192 ch 28x28 0.29-0.54 -> 0.17-0.26, 144 ch 56x56/2 0.35-0.66 ->
 * 0.20-0.29, 144 ch 56x56 0.47-0.86 -> 0.44-0.54, 96 ch 112x112/2 0.65-1.01 -> 0.63-0.73.
 * Since its input is transposed a strip of rows at a time (session 8) it wins on every
 * size (medians of 15, 6 alternating rounds, plane -> 8 channels): 32 ch 112x112 0.56 ->
 * 0.32 ms, 16 ch 224x224 0.92 -> 0.68, 32 ch 150x150 0.75 -> 0.67, 64 ch 224x224/2 2.42
 * -> 1.39, so the plane kernel is gone; the portable loop (dw_run) takes what this does
 * not: no AVX2, more than CPU_CONV_DW_MAX_TAPS taps, or a strip buffer over the limit. */
static bool dw_blocked(const cpu_conv_geom *g, bool avx2) {
    return avx2 && g->k[0] * g->k[1] <= CPU_CONV_DW_MAX_TAPS && cpu_conv_dw8_scratch(g) >= 0;
}

/* Up to this many floats of the next group's planes are prefetched (dw8_run): 64 KiB, the
 * 8 + 8 planes of a 28x28 depthwise layer (-5% at batch 8 there; 56x56/2 unchanged). */
#define DW8_PREFETCH_FLOATS (16 * 1024)

/* Channel c0's side of a depthwise conv for the 8-channel kernel (cpu_conv.h): its plane
 * (plane floats each), or in P16 its 16 floats in block 0. */
static cpu_dw8_side dw8_side(const float *data, bool p16, int64_t c0, int64_t plane, int64_t channels) {
    return p16 ? (cpu_dw8_side){(float *)data + c0 * 16, 16, 16 * channels}
               : (cpu_dw8_side){(float *)data + c0 * plane, plane, 0};
}

/* Groups [begin, end) of 8 channels through the channel-interleaved kernel (dw_blocked). */
static void dw8_run(void *user, int64_t begin, int64_t end) {
    const dw_job *j = user;
    const cpu_conv_geom *g = j->g;
    int64_t KK = g->k[0] * g->k[1], IS = g->in[0] * g->in[1], OS = g->out[0] * g->out[1];
    int64_t scratch = cpu_conv_dw8_scratch(g); /* >= 0: dw_blocked checked */
    float *buf = kiln_realloc_array(NULL, (size_t)scratch + 16, sizeof(float));
    bool p16 = j->x_p16 || j->y_p16;
    if (!buf) { /* the portable loop needs no buffer, but reads and writes planes */
        if (p16) ((dw_job *)user)->nomem = true;
        else dw_run(user, begin * 8, end * 8 < j->channels ? end * 8 : j->channels);
        return;
    }
    const cpu_epilogue *ep = j->ep;
    dw_inreg in = dw_inreg_of(ep);
    /* A P16 side holds a group's 8 channels as 8 lines of every 16-position block, the
     * blocks 16 * channels floats apart. Group by group over whole planes that is a long
     * stride through the tensor; strip by strip, every group's lines of a block are used
     * together. 96 channels at 112x112/2, P16 in and out, against planes (in-process,
     * interleaved calls): +118% group by group, +50% strip by strip. (In the network the
     * stride-1 layers came out even and the 1x1 convs around them gained; the layout
     * pass leaves stride-2 ones NCHW: docs/BENCHMARKS.md, "Session 9".) */
    if (p16) {
        for (int64_t oh0 = 0; oh0 < g->out[0]; oh0 += CPU_CONV_DW8_STRIP)
            for (int64_t b = begin; b < end; b++) {
                int64_t c0 = b * 8;
                int nc = (int)(j->channels - c0 < 8 ? j->channels - c0 : 8);
                const float *bias = ep->bias_mode == CPU_BIAS_ROW && ep->bias ? ep->bias + c0 : NULL;
                cpu_conv_dw8_avx2(g, dw8_side(j->x, j->x_p16, c0, IS, j->channels), j->w + c0 * KK, nc,
                                  dw8_side(j->y, j->y_p16, c0, OS, j->channels), bias, in.relu, in.lo, in.hi, oh0,
                                  oh0 + CPU_CONV_DW8_STRIP, buf);
            }
        free(buf);
        return;
    }
    /* Small planes: the next group's 8 input and 8 output planes (contiguous runs of 8 * IS
     * and 8 * OS floats) are prefetched while this group runs. Their rows are only 7-32
     * floats, and a group is done in a few microseconds, so once a batch no longer fits L2
     * the misses were taken one short row at a time: 576 channels at 14x14 took 2.6 ms at
     * batch 8 against 0.20 ms at batch 1 (docs/BENCHMARKS.md, "Session 8"). */
    bool ahead = 8 * (IS + OS) <= DW8_PREFETCH_FLOATS;
    for (int64_t b = begin; b < end; b++) {
        int64_t c0 = b * 8;
        int nc = (int)(j->channels - c0 < 8 ? j->channels - c0 : 8);
        if (ahead && c0 + 8 < j->channels) {
            const float *xn = j->x + (c0 + 8) * IS, *yn = j->y + (c0 + 8) * OS;
            int64_t nx = (j->channels - c0 - 8 < 8 ? j->channels - c0 - 8 : 8) * IS;
            int64_t ny = nx / IS * OS;
            for (int64_t o = 0; o < nx; o += 16) __builtin_prefetch(xn + o, 0, 3);
            for (int64_t o = 0; o < ny; o += 16) __builtin_prefetch(yn + o, 1, 3);
        }
        const float *bias = in.on && ep->bias_mode == CPU_BIAS_ROW && ep->bias ? ep->bias + c0 : NULL;
        cpu_conv_dw8_avx2(g, dw8_side(j->x, false, c0, IS, j->channels), j->w + c0 * KK, nc,
                          dw8_side(j->y, false, c0, OS, j->channels), bias, in.relu, in.lo, in.hi, 0, g->out[0], buf);
        if (!in.on) cpu_epilogue_apply(ep, j->y, OS, c0, c0 + nc, 0, OS);
    }
    free(buf);
}

/* The portable loop: (image, channel) planes [begin, end), for CPUs without AVX2, more
 * than CPU_CONV_DW_MAX_TAPS taps, or a row strip too large for the 8-channel kernel. */
static void dw_run(void *user, int64_t begin, int64_t end) {
    const dw_job *j = user;
    const cpu_conv_geom *g = j->g;
    int64_t H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    int64_t KH = g->k[0], KW = g->k[1], sh = g->stride[0], sw = g->stride[1];
    for (int64_t t = begin; t < end; t++) { /* t = image * channels + channel */
        int64_t c = t % j->channels;
        const float *xc = j->x + t * H * W, *wc = j->w + c * KH * KW;
        float *yc = j->y + t * OH * OW;
        memset(yc, 0, sizeof(float) * (size_t)(OH * OW));
        for (int64_t kw = 0; kw < KW; kw++) {
            int64_t woff = kw * g->dil[1] - g->pad0[1];
            int64_t ow_lo = woff >= 0 ? 0 : (-woff + sw - 1) / sw;
            int64_t ow_hi = W - woff <= 0 ? 0 : (W - woff + sw - 1) / sw;
            if (ow_hi > OW) ow_hi = OW;
            if (ow_lo >= ow_hi) continue;
            for (int64_t oh = 0; oh < OH; oh++) {
                float *yr = yc + oh * OW;
                for (int64_t kh = 0; kh < KH; kh++) {
                    int64_t ih = oh * sh + kh * g->dil[0] - g->pad0[0];
                    if (ih < 0 || ih >= H) continue;
                    float wv = wc[kh * KW + kw];
                    const float *xr = xc + ih * W + woff;
                    if (sw == 1)
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++) yr[ow] += wv * xr[ow];
                    else
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++) yr[ow] += wv * xr[ow * sw];
                }
            }
        }
        /* bias/residual/activation for this channel: rows are (image, channel) planes */
        cpu_epilogue_apply(j->ep, j->y, OH * OW, t, t + 1, 0, OH * OW);
    }
}

/* ---- Conv ---------------------------------------------------------------------------- */

enum conv_algo { CONV_AUTO = 0, CONV_GEMM, CONV_WINOGRAD, CONV_WINOGRAD_F23, CONV_C16, CONV_AMX };

static kiln_status conv_run(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out, enum conv_algo algo);

kiln_status cpu_conv(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                     int32_t n_out) {
    static const struct {
        const char *name;
        enum conv_algo algo;
    } by_tactic[] = {{CPU_CONV_TACTIC_WINOGRAD, CONV_WINOGRAD}, {CPU_CONV_TACTIC_WINOGRAD_F23, CONV_WINOGRAD_F23},
                     {CPU_CONV_TACTIC_GEMM, CONV_GEMM},         {CPU_CONV_TACTIC_POINTWISE, CONV_GEMM},
                     {CPU_CONV_TACTIC_C16, CONV_C16},           {CPU_CONV_TACTIC_AMX, CONV_AMX}};
    enum conv_algo algo = CONV_AUTO;
    for (size_t i = 0; i < sizeof by_tactic / sizeof by_tactic[0]; i++)
        if (ir_node_attr_str_is(ctx->node, "kiln_tactic", by_tactic[i].name)) algo = by_tactic[i].algo;
    return conv_run(ctx, inputs, n_in, outputs, n_out, algo);
}

kiln_status cpu_conv_run_gemm(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                              int32_t n_out) {
    return conv_run(ctx, inputs, n_in, outputs, n_out, CONV_GEMM);
}

kiln_status cpu_conv_run_c16(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out) {
    return conv_run(ctx, inputs, n_in, outputs, n_out, CONV_C16);
}

kiln_status cpu_conv_run_amx(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                             int32_t n_out) {
    return conv_run(ctx, inputs, n_in, outputs, n_out, CONV_AMX);
}

kiln_status cpu_conv_run_winograd(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                  rt_value *outputs, int32_t n_out) {
    return conv_run(ctx, inputs, n_in, outputs, n_out, CONV_WINOGRAD);
}

kiln_status cpu_conv_run_winograd_f23(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                      rt_value *outputs, int32_t n_out) {
    return conv_run(ctx, inputs, n_in, outputs, n_out, CONV_WINOGRAD_F23);
}

/* Winograd for this call: transforms the weights once (kept in the node's state) and runs.
 * Returns false (nothing done) when the state cannot be had; errors go to *st. */
static bool conv_winograd(cpu_kernel_ctx *ctx, int tile, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                          const float *X, const float *Wt, float *Y, const cpu_epilogue *ep, unsigned layout,
                          kiln_status *st) {
    conv_state *cs = conv_state_get(ctx);
    if (!cs) {
        *st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the Conv state");
        return true;
    }
    if (!cs->wg.u || cs->wg.src != Wt || cs->wg.C != C || cs->wg.M != M || cs->wg.tile != tile) {
        cpu_winograd_weights_free(&cs->wg);
        *st = cpu_winograd_pack(tile, Wt, M, C, &cs->wg, ctx->err);
        if (*st != KILN_OK) return true;
    }
    conv_packed_clear(cs); /* the GEMM's packed weights are not needed any more */
    *st = cpu_winograd_conv(ctx->pool, g, N, X, &cs->wg, Y, ep, cpu_scratch_winograd(ctx, &cs->wg_scratch), layout,
                            ctx->err);
    return true;
}

/* The Winograd variant: the forced one, or without a timed choice F(4x4, 3x3) unless the
 * batch has fewer than 16 of its 4x4 tiles (ResNet's 7x7 layers at batch 1: 4), where
 * streaming its transformed weights (4x the weights) for so few tiles makes F(2x2, 3x3)
 * faster, as the builder's timing finds. */
static int conv_winograd_tile(enum conv_algo algo, const cpu_conv_geom *g, int64_t N) {
    if (algo == CONV_WINOGRAD_F23) return CPU_WINOGRAD_F23;
    if (algo == CONV_WINOGRAD) return CPU_WINOGRAD_F43;
    return N * ((g->out[0] + 3) / 4) * ((g->out[1] + 3) / 4) >= 16 ? CPU_WINOGRAD_F43 : CPU_WINOGRAD_F23;
}

static kiln_status conv_run_impl(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                 rt_value *outputs, int32_t n_out, enum conv_algo algo, int64_t p16, int64_t c16);

static kiln_status conv_run_rows(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                                 int32_t n_out, int algo) {
    return conv_run_impl(ctx, inputs, n_in, outputs, n_out, (enum conv_algo)algo, 0, 0);
}

static kiln_status conv_run(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                            int32_t n_out, enum conv_algo algo) {
    return conv_run_impl(ctx, inputs, n_in, outputs, n_out, algo, ir_node_attr_int(ctx->node, "kiln_p16", 0),
                         ir_node_attr_int(ctx->node, "kiln_c16", 0));
}

/* Whether a Conv marked C16 (layout_c16.c) runs the C16 kernel on its data as it lies:
 * AVX-512 and the kernel on, constant weights, a geometry it takes, and C16 input
 * channels in 16s. */
static bool conv_c16_direct(const cpu_conv_geom *g, int32_t nsp, int64_t group, int64_t C, int64_t M, bool packable,
                            int64_t p16, int64_t c16) {
    return nsp == 2 && packable && !p16 && cpu_gemm_avx512_usable() && conv_c16_enabled() &&
           cpu_conv_c16_applies(g, group, C, M) && (!(c16 & CPU_C16_X) || C % 16 == 0);
}

/* Whether a Conv marked P16 can run its P16 data directly: a 2-D pointwise dense conv
 * whose weights the packed GEMM takes (packable), a multiple of 16 positions, and a
 * 32-byte aligned P16 input (the kernels' aligned loads). */
static bool conv_p16_direct(const cpu_conv_geom *g, int32_t nsp, int64_t group, bool pointwise, bool packable,
                            const float *X, int64_t p16) {
    return nsp == 2 && group == 1 && pointwise && packable && g->out_size % 16 == 0 &&
           (!(p16 & CPU_CONV_P16_X) || ((uintptr_t)X & 31) == 0);
}

/* The same for a 2-D depthwise conv: the 8-channel kernel runs it (AVX2, few enough taps,
 * a row buffer in range) with the whole epilogue in registers (so no residual), and each
 * P16 side has rows of a multiple of 8 positions (cpu_conv.h). */
static bool conv_p16_direct_dw(const cpu_conv_geom *g, int64_t p16, const cpu_epilogue *ep) {
    return !(p16 & CPU_CONV_P16_RES) && dw_blocked(g, cpu_gemm_packed_supported()) && dw_inreg_of(ep).on &&
           (!(p16 & CPU_CONV_P16_X) || g->in[1] % 8 == 0) && (!(p16 & CPU_CONV_P16_Y) || g->out[1] % 8 == 0);
}

static kiln_status conv_run_impl(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in,
                                 rt_value *outputs, int32_t n_out, enum conv_algo algo, int64_t p16, int64_t c16) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *w = cpu_in(inputs, n_in, 1), *b = cpu_in(inputs, n_in, 2);
    if (!x || !w) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "Conv needs inputs X and W");
    if (x->dtype != KILN_DTYPE_FLOAT && x->dtype == w->dtype && cpu_fbuf_dtype_ok(x->dtype))
        return cpu_fbuf_call_f32(ctx, inputs, n_in, outputs, n_out,
                                 algo == CONV_WINOGRAD       ? cpu_conv_run_winograd
                                 : algo == CONV_WINOGRAD_F23 ? cpu_conv_run_winograd_f23
                                 : algo == CONV_GEMM         ? cpu_conv_run_gemm
                                                             : cpu_conv); /* float16/float64 via float32 */
    if (x->dtype != KILN_DTYPE_FLOAT || w->dtype != KILN_DTYPE_FLOAT || (b && b->dtype != KILN_DTYPE_FLOAT))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "Conv supports float32 only (got %s)",
                               kiln_dtype_name(x->dtype));
    if (x->rank < 3 || w->rank != x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 3 and W the same rank (got %d and %d)",
                               x->rank, w->rank);
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0];
    int64_t group = ir_node_attr_int(ctx->node, "group", 1);
    if (group < 1 || C % group != 0 || M % group != 0 || w->dims[1] != C / group)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                               "group=%lld does not fit: X has %lld channels, W is [%lld, %lld, ...] (W dim 1 "
                               "must be channels/group)",
                               (long long)group, (long long)C, (long long)M, (long long)w->dims[1]);
    if (b && (b->rank != 1 || b->dims[0] != M))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "bias B must be 1-D with %lld elements", (long long)M);
    int32_t nsp = x->rank - 2;
    cpu_conv_geom g;
    kiln_status st = cpu_conv_geom_init(ctx, CPU_GEOM_CONV, nsp, x->dims + 2, w->dims + 2, &g);
    if (st != KILN_OK) return st;
    for (int32_t i = 0; i < nsp; i++)
        if (w->dims[2 + i] != g.k[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "kernel_shape[%d]=%lld differs from W's dim %lld", i,
                                   (long long)g.k[i], (long long)w->dims[2 + i]);
    bool pointwise = true; /* 1x1, stride 1, no padding */
    for (int32_t i = 0; i < nsp; i++)
        if (g.k[i] != 1 || g.stride[i] != 1 || g.pad0[i] != 0 || g.pad1[i] != 0) pointwise = false;
    /* constant weights on an AVX2 machine: packed once into the node state for kiln's own
     * GEMM (cpu_gemm_avx2.c says why) or transformed for Winograd */
    bool packable = ctx->state && cpu_gemm_packed_supported() && cpu_input_is_const(ctx, 1);
    bool depthwise = C / group == 1 && M / group == 1 && nsp == 2 && C > 1;
    if (p16) {
        bool direct;
        if (depthwise) {
            cpu_epilogue e;
            st = cpu_epilogue_from_node(ctx, inputs, n_in, (uint64_t)N * (uint64_t)M * (uint64_t)g.out_size, &e);
            if (st != KILN_OK) return st;
            direct = conv_p16_direct_dw(&g, p16, &e);
        } else direct = conv_p16_direct(&g, nsp, group, pointwise, packable, x->data, p16);
        if (!direct)
            return cpu_conv_layout_fallback(ctx, inputs, n_in, outputs, n_out, p16, false, conv_run_rows, (int)algo);
    }
    /* Winograd where it applies, unless a GEMM or the C16 kernel is forced */
    bool winograd = algo != CONV_GEMM && algo != CONV_C16 && algo != CONV_AMX && packable &&
                    cpu_winograd_applies(&g, group, C, M);
    /* the AMX tactic reads and writes NCHW and C16 alike; where AMX cannot run (KILN_NO_AMX,
     * another CPU) a C16-marked node takes the C16 kernel below, an unmarked one the GEMM */
    bool amx = algo == CONV_AMX && packable && !p16 && nsp == 2 && cpu_bf16x3_usable() &&
               cpu_conv_amx_applies(&g, group, C, M);
    if (c16 && !amx) {
        /* the builder marked it for the C16 kernel or for Winograd (which reads and
         * writes C16 through its own 8-channel blocks) */
        bool wino = winograd && !p16 && C % 16 == 0 && M % 16 == 0;
        if (!wino && !conv_c16_direct(&g, nsp, group, C, M, packable, p16, c16))
            return cpu_conv_layout_fallback(ctx, inputs, n_in, outputs, n_out, c16, true, conv_run_rows, (int)algo);
        if (!wino) algo = CONV_C16, winograd = false;
    }
    int64_t ydims[RT_MAX_RANK];
    ydims[0] = N;
    ydims[1] = M;
    for (int32_t i = 0; i < nsp; i++) ydims[2 + i] = g.out[i];
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    st = rt_tensor_alloc(y, KILN_DTYPE_FLOAT, x->rank, ydims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;

    cpu_epilogue ep;
    st = cpu_epilogue_from_node(ctx, inputs, n_in, y->count, &ep);
    if (st != KILN_OK) return st;
    if (b) {
        ep.bias_mode = CPU_BIAS_ROW;
        ep.bias = b->data;
    }
    const float *X = x->data, *Wt = w->data;
    float *Y = y->data;
    int64_t Cg = C / group, Mg = M / group, OS = g.out_size, IS = g.in_size;
    int64_t Kdim = Cg * g.k_size;

    if (depthwise) {
        /* bias indexed per (image, channel) row, so give it a per-image view; P16 sides
         * (conv_p16_direct_dw checked them) only ever reach dw8_run */
        for (int64_t n = 0; n < N; n++) {
            cpu_epilogue e = ep;
            if (e.residual) e.residual += n * M * OS;
            e.ld_res = OS;
            dw_job j = {&g, X + n * C * IS, Wt, Y + n * M * OS, &e, C, cpu_gemm_packed_supported(),
                        (p16 & CPU_CONV_P16_X) != 0, (p16 & CPU_CONV_P16_Y) != 0, false};
            if (dw_blocked(&g, j.avx2)) cpu_parallel_for(ctx->pool, (C + 7) / 8, 1, dw8_run, &j);
            else cpu_parallel_for(ctx->pool, C, 1, dw_run, &j);
            if (j.nomem) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for a depthwise Conv's row buffer");
        }
        return KILN_OK;
    }

    if (amx) return conv_amx(ctx, &g, N, C, M, X, Wt, Y, &ep, (unsigned)c16);
    if (winograd && conv_winograd(ctx, conv_winograd_tile(algo, &g, N), &g, N, C, M, X, Wt, Y, &ep, (unsigned)c16, &st))
        return st;

    /* the channels-in-lanes direct conv: where the builder timed it fastest, or by default
     * where it is a candidate (cpu_conv_c16_candidate) */
    if (packable && !p16 && cpu_gemm_avx512_usable() && conv_c16_enabled() &&
        (algo == CONV_C16 ? cpu_conv_c16_applies(&g, group, C, M)
                          : algo == CONV_AUTO && cpu_conv_c16_candidate(&g, group, C, M)))
        return conv_c16(ctx, &g, N, C, M, X, Wt, Y, &ep, (unsigned)c16);

    /* packable: pack the weights once and use kiln's own GEMM; otherwise OpenBLAS through
     * cpu_sgemm */
    conv_state *cs = NULL;
    if (packable) {
        cs = conv_state_get(ctx);
        if (!cs) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the Conv state");
        if (!cs->packed || cs->packed_src != Wt || cs->n_packed != group || cs->packed_M != Mg || cs->packed_K != Kdim) {
            conv_packed_clear(cs);
            cs->packed = calloc((size_t)group, sizeof *cs->packed);
            if (!cs->packed) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory packing Conv weights");
            cs->n_packed = group;
            for (int64_t gi = 0; gi < group; gi++) {
                st = cpu_gemm_pack_a(Wt + gi * Mg * Kdim, Kdim, Mg, Kdim, &cs->packed[gi], ctx->err);
                if (st != KILN_OK) {
                    conv_packed_clear(cs);
                    return st;
                }
            }
            cs->packed_src = Wt;
            cs->packed_M = Mg;
            cs->packed_K = Kdim;
        }
    }
    float *col = NULL;
    bool col_owned = false;
    /* 2-D with packed weights: B panels are packed straight from the image (no im2col) */
    bool implicit = cs && nsp == 2 && !pointwise;
    /* The image is first split into its stride phases with the padding written in
     * (cpu_conv_strided.h; for stride 1 a padded copy), so B panels pack with plain loads;
     * a 1x1 kernel's single phase is the subsampled image [C, OH*OW], run as a pointwise
     * conv on it. conv_pack_b stays for kernels longer than CPU_CONV_PHASE_MAX_K. */
    cpu_conv_phase ph;
    bool phased = implicit && cpu_conv_phase_plan(&g, &ph);
    bool sub1x1 = phased && g.k[0] == 1 && g.k[1] == 1;
    float *phase = NULL;
    if (phased) {
        uint64_t need;
        if (kiln_mul_overflow_u64((uint64_t)C, (uint64_t)ph.cstride, &need) || need > (1ull << 34))
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "strided Conv input copy of %lld x %lld floats is too large",
                                   (long long)C, (long long)ph.cstride);
        phase = conv_phase_buf(ctx, cs, need);
        if (!phase) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the strided Conv input copy");
    }
    if (!pointwise && !implicit) {
        uint64_t need;
        if (kiln_mul_overflow_u64((uint64_t)Kdim, (uint64_t)OS, &need) || need > (1ull << 34))
            return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "im2col buffer of %lld x %lld floats is too large",
                                   (long long)Kdim, (long long)OS);
        if (ctx->state) col = conv_scratch(ctx, need);
        else {
            col = kiln_realloc_array(NULL, (size_t)need, sizeof(float));
            col_owned = true;
        }
        if (!col) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the im2col buffer");
    }
    if (p16) { /* conv_p16_direct held: pointwise, group 1, packed weights */
        cpu_gemm_io io = {(p16 & CPU_CONV_P16_X) != 0, (p16 & CPU_CONV_P16_Y) != 0, (p16 & CPU_CONV_P16_RES) != 0};
        for (int64_t n = 0; n < N; n++) {
            cpu_epilogue e = ep;
            if (e.residual) e.residual += n * M * OS;
            e.ld_res = OS;
            st = cpu_sgemm_conv1x1(ctx->pool, M, OS, C, &cs->packed[0], X + n * C * IS, Y + n * M * OS, &e, io,
                                   cpu_scratch_gemm(ctx, &cs->scratch), ctx->err);
            if (st != KILN_OK) return st;
        }
        return KILN_OK;
    }
    for (int64_t n = 0; n < N; n++) {
        if (phased) cpu_conv_phase_build(ctx->pool, &ph, X + n * C * IS, C, phase);
        for (int64_t gi = 0; gi < group; gi++) {
            const float *xg = X + (n * C + gi * Cg) * IS;
            const float *B = sub1x1 ? phase + gi * Cg * ph.cstride : xg;
            if (!pointwise && !implicit) {
                cpu_im2col(ctx->pool, &g, xg, Cg, col);
                B = col;
            }
            cpu_epilogue e = ep;
            if (e.bias) e.bias += gi * Mg;
            if (e.residual) e.residual += (n * M + gi * Mg) * OS;
            e.ld_res = OS;
            /* large B: packed slice by slice inside the GEMM's tasks (cpu_gemm_packed.h) */
            bool local = cs && (implicit || pointwise) && cpu_sgemm_local_b_preferred(ctx->pool, Mg, OS, Kdim);
            if (implicit && !sub1x1) {
                conv_pack_ctx pc = {&g, xg};
                cpu_conv_phase_pack pp = {&ph, phased ? phase + gi * Cg * ph.cstride : NULL};
                st = (local ? cpu_sgemm_packed_a_fn_local : cpu_sgemm_packed_a_fn)(
                    ctx->pool, Mg, OS, Kdim, &cs->packed[gi], phased ? cpu_conv_phase_pack_b : conv_pack_b,
                    phased ? (void *)&pp : (void *)&pc, Y + (n * M + gi * Mg) * OS, OS, &e,
                    cpu_scratch_gemm(ctx, &cs->scratch), ctx->err);
                if (st != KILN_OK) return st;
            } else if (local) {
                st = cpu_sgemm_packed_a_rows_local(ctx->pool, Mg, OS, Kdim, &cs->packed[gi], B, OS,
                                                   Y + (n * M + gi * Mg) * OS, OS, &e,
                                                   cpu_scratch_gemm(ctx, &cs->scratch), ctx->err);
                if (st != KILN_OK) return st;
            } else if (cs) {
                st = cpu_sgemm_packed(ctx->pool, Mg, OS, Kdim, &cs->packed[gi], NULL, 0, NULL, B, OS,
                                      Y + (n * M + gi * Mg) * OS, OS, &e, cpu_scratch_gemm(ctx, &cs->scratch),
                                      ctx->err);
                if (st != KILN_OK) {
                    if (col_owned) free(col);
                    return st;
                }
            } else
                cpu_sgemm(ctx->pool, false, false, Mg, OS, Kdim, 1.f, Wt + gi * Mg * Kdim, Kdim, B, OS, 0.f,
                          Y + (n * M + gi * Mg) * OS, OS, &e);
        }
    }
    if (col_owned) free(col);
    return KILN_OK;
}

/* ---- ConvTranspose ------------------------------------------------------------------- */

kiln_status cpu_conv_transpose(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs,
                               int32_t n_out) {
    const rt_tensor *x = cpu_in(inputs, n_in, 0), *w = cpu_in(inputs, n_in, 1), *b = cpu_in(inputs, n_in, 2);
    if (!x || !w) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "ConvTranspose needs inputs X and W");
    if (x->dtype != KILN_DTYPE_FLOAT || w->dtype != KILN_DTYPE_FLOAT || (b && b->dtype != KILN_DTYPE_FLOAT))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "ConvTranspose supports float32 only");
    if (x->rank < 3 || w->rank != x->rank)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must have rank >= 3 and W the same rank");
    int32_t nsp = x->rank - 2;
    if (nsp > CPU_CONV_MAX_SPATIAL) return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "too many spatial dims");
    int64_t N = x->dims[0], C = x->dims[1];
    int64_t group = ir_node_attr_int(ctx->node, "group", 1);
    if (group < 1 || C % group != 0 || w->dims[0] != C)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "W must be [C=%lld, M/group, k...] with C divisible by group",
                               (long long)C);
    int64_t Mg = w->dims[1], M = Mg * group, Cg = C / group;
    if (b && (b->rank != 1 || b->dims[0] != M))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "bias B must be 1-D with %lld elements", (long long)M);

    /* attributes */
    int64_t k[CPU_CONV_MAX_SPATIAL], s[CPU_CONV_MAX_SPATIAL], d[CPU_CONV_MAX_SPATIAL];
    int64_t op[CPU_CONV_MAX_SPATIAL], osh[CPU_CONV_MAX_SPATIAL], pads[2 * CPU_CONV_MAX_SPATIAL];
    const char *names[5] = {"kernel_shape", "strides", "dilations", "output_padding", "output_shape"};
    int64_t *dst[5] = {k, s, d, op, osh};
    bool have[6] = {0};
    for (int a = 0; a < 5; a++) {
        const ir_attr *at = ir_node_attr(ctx->node, names[a]);
        for (int32_t i = 0; i < nsp; i++) dst[a][i] = a == 0 ? w->dims[2 + i] : (a == 3 ? 0 : 1);
        if (!at) continue;
        if (at->type != IR_ATTR_INTS || (a == 4 ? at->n < nsp : at->n != nsp))
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute %s must list %d integers", names[a], nsp);
        /* output_shape may include N and C; take the trailing spatial entries */
        for (int32_t i = 0; i < nsp; i++) dst[a][i] = at->ints[at->n - nsp + i];
        have[a] = true;
    }
    const ir_attr *pa = ir_node_attr(ctx->node, "pads");
    for (int32_t i = 0; i < 2 * nsp; i++) pads[i] = 0;
    if (pa) {
        if (pa->type != IR_ATTR_INTS || pa->n != 2 * nsp)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute pads must list %d integers", 2 * nsp);
        for (int32_t i = 0; i < 2 * nsp; i++) pads[i] = pa->ints[i];
    }
    const ir_attr *ap = ir_node_attr(ctx->node, "auto_pad");
    bool same_upper = ap && ap->type == IR_ATTR_STRING && ap->s.len == 10 && !memcmp(ap->s.data, "SAME_UPPER", 10);
    bool same_lower = ap && ap->type == IR_ATTR_STRING && ap->s.len == 10 && !memcmp(ap->s.data, "SAME_LOWER", 10);
    bool valid = ap && ap->type == IR_ATTR_STRING && ap->s.len == 5 && !memcmp(ap->s.data, "VALID", 5);

    /* Geometry of the equivalent forward conv: its input is our output (g.in) and its
     * output is our input (g.out). */
    cpu_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nsp = nsp;
    g.in_size = g.out_size = g.k_size = 1;
    for (int32_t i = 0; i < nsp; i++) {
        int64_t in = x->dims[2 + i];
        if (k[i] < 1 || s[i] < 1 || d[i] < 1)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "kernel, strides and dilations must be >= 1");
        if (w->dims[2 + i] != k[i])
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "kernel_shape differs from W's spatial dims");
        int64_t ek = (k[i] - 1) * d[i] + 1;
        int64_t full = s[i] * (in - 1) + op[i] + ek;
        int64_t outsz, p0, p1;
        if (have[4]) {
            outsz = osh[i];
            int64_t total = full - outsz;
            if (total < 0) total = 0;
            if (same_upper || !same_lower) { /* spec: default split puts the extra at the end */
                p0 = total / 2;
                p1 = total - p0;
            } else {
                p1 = total / 2;
                p0 = total - p1;
            }
            if (!same_upper && !same_lower && pa) {
                p0 = pads[i];
                p1 = pads[i + nsp];
            }
        } else if (same_upper || same_lower) {
            outsz = in * s[i];
            int64_t total = full - outsz;
            if (total < 0) total = 0;
            if (same_upper) {
                p0 = total / 2;
                p1 = total - p0;
            } else {
                p1 = total / 2;
                p0 = total - p1;
            }
        } else {
            p0 = valid ? 0 : pads[i];
            p1 = valid ? 0 : pads[i + nsp];
            outsz = full - p0 - p1;
        }
        if (outsz < 0 || p0 < 0 || p1 < 0)
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "spatial axis %d: output size %lld is negative", i,
                                   (long long)outsz);
        g.in[i] = outsz;
        g.out[i] = in;
        g.k[i] = k[i];
        g.stride[i] = s[i];
        g.dil[i] = d[i];
        g.pad0[i] = p0;
        g.pad1[i] = p1;
        g.in_size *= outsz;
        g.out_size *= in;
        g.k_size *= k[i];
    }
    int64_t ydims[RT_MAX_RANK];
    ydims[0] = N;
    ydims[1] = M;
    for (int32_t i = 0; i < nsp; i++) ydims[2 + i] = g.in[i];
    rt_tensor *y = rt_value_as_tensor(&outputs[0]);
    kiln_status st = rt_tensor_alloc_zero(y, KILN_DTYPE_FLOAT, x->rank, ydims, ctx->err);
    if (st != KILN_OK || y->count == 0) return st;
    int64_t rows = Mg * g.k_size, IS = g.out_size, OS = g.in_size;
    uint64_t need;
    if (kiln_mul_overflow_u64((uint64_t)rows, (uint64_t)IS, &need) || need > (1ull << 34))
        return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "col buffer too large");
    float *col = kiln_realloc_array(NULL, (size_t)need + 1, sizeof(float));
    if (!col) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory for the col buffer");
    const float *X = x->data, *Wt = w->data;
    float *Y = y->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < group; gi++) {
            /* col[Mg*k, IS] = W_g^T [Mg*k, Cg] * X_g [Cg, IS] */
            cpu_sgemm(ctx->pool, true, false, rows, IS, Cg, 1.f, Wt + gi * Cg * rows, rows, X + (n * C + gi * Cg) * IS,
                      IS, 0.f, col, IS, NULL);
            cpu_col2im(&g, col, Mg, Y + (n * M + gi * Mg) * OS);
        }
    free(col);
    if (b)
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                float bv = ((const float *)b->data)[m];
                float *yc = Y + (n * M + m) * OS;
                for (int64_t i = 0; i < OS; i++) yc[i] += bv;
            }
    return KILN_OK;
}
