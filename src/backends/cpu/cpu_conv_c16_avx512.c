/* cpu_conv_c16_avx512.c - 2-D convolutions with output channels in the vector lanes, over
 * NCHW tensors: the input is copied once into a zero-padded C16 buffer (cpu_c16.h), every
 * tile of up to 6 output positions x 64 output channels is summed by the AVX-512 tile
 * kernel straight from that buffer (no packing), and the tile is transposed back into the
 * NCHW output with the epilogue applied on the way.
 *
 * Why: kiln's implicit GEMM (cpu_conv.c) keeps positions in the lanes and packs a B panel
 * per 16 positions and k-block from a phase-split copy of the input; for the strided
 * convs of ResNet-50 (3x3/2, the 7x7/2 stem, 1x1/2) that packing and the idle lanes of
 * 28-, 14- and 7-wide outputs left them 17-29% behind ONNX Runtime per layer on the
 * 2-core Sapphire Rapids-class dev VM (docs/BENCHMARKS.md, "Session 13").
 *
 * Input channels that are a multiple of 16 are read as C16 (16 channels per tile-kernel
 * block, ku 16); others (the RGB stem) are read from a padded NCHW copy, a kernel row of
 * 7 or 3 undilated taps per block (ku 7, 3), else one tap (ku 1). Compiled with -mavx512f; only called when cpu_gemm_avx512_usable().
 */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_c16.h"
#include "core/bigalloc.h"

#define OC_BLOCK 64 /* output channels per tile (4 vectors) */
#define TILE_POS 6  /* output positions per tile */

bool cpu_conv_c16_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M) {
    if (g->nsp != 2 || group != 1 || M % 16 != 0 || C < 1) return false;
    if (g->k[0] > 16 || g->k[1] > 16) return false;
    /* the padded copy and the offset table stay modest (a few MiB) */
    int64_t hp = g->in[0] + g->pad0[0] + g->pad1[0], wp = g->in[1] + g->pad0[1] + g->pad1[1];
    return hp > 0 && wp > 0 && hp <= 4096 && wp <= 4096 && C <= 8192;
}

/* k steps per offset-table entry: 16 channels of C16 data, else (NCHW data) a kernel row
 * of 7 or 3 undilated taps (neighbouring pixels), else one */
static int64_t ku_of(int64_t C, const cpu_conv_geom *g) {
    if (C % 16 == 0) return 16;
    if (g->dil[1] == 1 && (g->k[1] == 7 || g->k[1] == 3)) return g->k[1];
    return 1;
}

/* A 1x1 kernel with strides and no padding reads only every sh-th row and sw-th column:
 * its copy holds just those (OH x OW), and the conv runs on it with stride 1. */
static bool subsampled(const cpu_conv_geom *g) {
    return g->k[0] == 1 && g->k[1] == 1 && (g->stride[0] > 1 || g->stride[1] > 1) && !g->pad0[0] && !g->pad0[1] &&
           !g->pad1[0] && !g->pad1[1];
}

/* The copy's plane size and the strides the tiles step through it with. */
static void copy_geometry(const cpu_conv_geom *g, int64_t *hp, int64_t *wp, int64_t *sh, int64_t *sw) {
    if (subsampled(g)) {
        *hp = g->out[0], *wp = g->out[1], *sh = *sw = 1;
        return;
    }
    *hp = g->in[0] + g->pad0[0] + g->pad1[0], *wp = g->in[1] + g->pad0[1] + g->pad1[1];
    *sh = g->stride[0], *sw = g->stride[1];
}

int64_t cpu_conv_c16_scratch_floats(const cpu_conv_geom *g, int64_t C) {
    int64_t hp, wp, sh, sw;
    copy_geometry(g, &hp, &wp, &sh, &sw);
    return C * hp * wp;
}

/* Block b's input channel (ku 16: its block of 16 channels) and first tap. Channel blocks
 * are outermost, so a tile walks neighbouring input pixels of one block; a ku of 7 or 3
 * (= kw) is a kernel row (taps (b % kh) * kw + s), else every block is one tap. The packed
 * weights (cpu_conv_c16_pack) and the offset table (fill_koff) both follow it. */
static void block_origin(int64_t b, int64_t ku, int64_t kh, int64_t kw, int64_t *c, int64_t *tap) {
    if (ku == 16 || ku == 1) *c = b / (kh * kw), *tap = b % (kh * kw);
    else *c = b / kh, *tap = (b % kh) * kw;
}

void cpu_conv_c16_weights_free(cpu_conv_c16_weights *w) {
    if (!w) return;
    free(w->w);
    free(w->koff);
    memset(w, 0, sizeof *w);
}

kiln_status cpu_conv_c16_pack(const float *W, int64_t M, int64_t C, const cpu_conv_geom *g, cpu_conv_c16_weights *out,
                              kiln_error *err) {
    cpu_conv_c16_weights_free(out);
    int64_t taps = g->k[0] * g->k[1], ksteps = C * taps, ku = ku_of(C, g), nb = ksteps / ku;
    int64_t n_ob = (M + OC_BLOCK - 1) / OC_BLOCK;
    out->w = kiln_alloc_aligned((size_t)(n_ob * OC_BLOCK * ksteps) * sizeof(float));
    out->koff = malloc((size_t)nb * sizeof *out->koff);
    if (!out->w || !out->koff) {
        cpu_conv_c16_weights_free(out);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing Conv weights (C16)");
    }
    /* k step s of block b: ku 16 -> channel (block) * 16 + s at the block's tap; ku 7 or 3
     * -> the block's channel at tap (first tap) + s; ku 1 -> the block's channel and tap */
    for (int64_t ob = 0; ob < n_ob; ob++) {
        int64_t nv = (M - ob * OC_BLOCK) / 16 < 4 ? (M - ob * OC_BLOCK) / 16 : 4;
        float *d = out->w + ob * OC_BLOCK * ksteps;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t s = 0; s < ku; s++) {
                int64_t c, tap;
                block_origin(b, ku, g->k[0], g->k[1], &c, &tap);
                if (ku == 16) c = c * 16 + s;
                else if (ku != 1) tap += s;
                float *row = d + (b * ku + s) * nv * 16;
                for (int64_t j = 0; j < nv * 16; j++) row[j] = W[((ob * OC_BLOCK + j) * C + c) * taps + tap];
            }
    }
    out->M = M;
    out->C = C;
    out->taps = taps;
    out->ku = ku;
    out->src = W;
    out->kh = g->k[0];
    out->kw = g->k[1];
    out->pack_dw = g->dil[1];
    out->hp = out->wp = -1; /* koff filled for the first geometry it runs */
    return KILN_OK;
}

/* The byte offsets of each k block from a position's base, for padded planes hp x wp. */
static void fill_koff(cpu_conv_c16_weights *w, const cpu_conv_geom *g, int64_t hp, int64_t wp) {
    int64_t taps = w->taps, nb = w->C * taps / w->ku;
    for (int64_t b = 0; b < nb; b++) {
        int64_t cb, tap;
        block_origin(b, w->ku, w->kh, w->kw, &cb, &tap);
        int64_t kh = tap / w->kw, kwi = tap % w->kw;
        int64_t pix = (kh * g->dil[0]) * wp + kwi * g->dil[1];
        w->koff[b] = (int64_t)sizeof(float) * (w->ku == 16 ? (cb * hp * wp + pix) * 16 : cb * hp * wp + pix);
    }
    w->hp = hp;
    w->wp = wp;
    w->dh = g->dil[0];
    w->dw = g->dil[1];
}

/* ---- the padded copy ----------------------------------------------------------------- */

typedef struct copy_job {
    const float *x;
    float *xp;
    int64_t C, H, W, hp, wp, pt, pl;
    int64_t sh, sw; /* 1, or a 1x1 kernel's strides: only the pixels it reads are copied */
    bool c16;
    bool src_c16;  /* x is C16 itself: rows are copied whole between the zero pads */
    int64_t items; /* per image: (channel block or channel) x padded rows */
} copy_job;

/* one (channel block or channel, padded row) of one image */
static void copy_row(const copy_job *j, int64_t it) {
    int64_t cb = it / j->hp, r = it % j->hp, h = r - j->pt;
    if (j->sh > 1 || j->sw > 1) { /* a strided 1x1 kernel: pixel (r * sh, w * sw), no padding */
        float *d = j->xp + (cb * j->hp + r) * j->wp * (j->c16 ? 16 : 1);
        int64_t w0 = 0;
        if (j->c16 && j->sw == 2) { /* 8 pixels x 8 channels per transpose, from even columns */
            const float *s = j->x + (cb * 16 * j->H + r * j->sh) * j->W;
            int64_t cs = j->H * j->W;
            for (; w0 + 8 <= j->wp && 2 * w0 + 16 <= j->W; w0 += 8)
                for (int half = 0; half < 2; half++) {
                    __m256 r8[8];
                    for (int c = 0; c < 8; c++) r8[c] = cpu_even16_ps(s + (half * 8 + c) * cs + 2 * w0);
                    cpu_transpose8_ps(r8);
                    for (int q = 0; q < 8; q++) _mm256_storeu_ps(d + (w0 + q) * 16 + half * 8, r8[q]);
                }
        }
        for (int64_t c = 0; c < (j->c16 ? 16 : 1); c++) {
            const float *s = j->x + ((cb * (j->c16 ? 16 : 1) + c) * j->H + r * j->sh) * j->W;
            if (j->c16)
                for (int64_t w = w0; w < j->wp; w++) d[w * 16 + c] = s[w * j->sw];
            else
                for (int64_t w = 0; w < j->wp; w++) d[w] = s[w * j->sw];
        }
        return;
    }
    if (!j->c16) {
        float *d = j->xp + (cb * j->hp + r) * j->wp;
        if (h < 0 || h >= j->H) {
            memset(d, 0, (size_t)j->wp * sizeof(float));
            return;
        }
        memset(d, 0, (size_t)j->pl * sizeof(float));
        memcpy(d + j->pl, j->x + (cb * j->H + h) * j->W, (size_t)j->W * sizeof(float));
        memset(d + j->pl + j->W, 0, (size_t)(j->wp - j->pl - j->W) * sizeof(float));
        return;
    }
    float *d = j->xp + ((cb * j->hp + r) * j->wp) * 16;
    if (h < 0 || h >= j->H) {
        memset(d, 0, (size_t)j->wp * 16 * sizeof(float));
        return;
    }
    memset(d, 0, (size_t)j->pl * 16 * sizeof(float));
    int64_t tail = j->wp - j->pl - j->W;
    memset(d + (j->pl + j->W) * 16, 0, (size_t)tail * 16 * sizeof(float));
    if (j->src_c16) {
        memcpy(d + j->pl * 16, j->x + (cb * j->H + h) * j->W * 16, (size_t)j->W * 16 * sizeof(float));
        return;
    }
    /* 16 channel rows -> W pixels x 16 channels, 8 pixels x 8 channels per transpose */
    const float *s = j->x + (cb * 16 * j->H + h) * j->W;
    int64_t cs = j->H * j->W, w = 0;
    float *o = d + j->pl * 16;
    for (; w + 8 <= j->W; w += 8)
        for (int half = 0; half < 2; half++) {
            __m256 r8[8];
            for (int c = 0; c < 8; c++) r8[c] = _mm256_loadu_ps(s + (half * 8 + c) * cs + w);
            cpu_transpose8_ps(r8);
            for (int p = 0; p < 8; p++) _mm256_storeu_ps(o + (w + p) * 16 + half * 8, r8[p]);
        }
    for (; w < j->W; w++)
        for (int c = 0; c < 16; c++) o[w * 16 + c] = s[c * cs + w];
}

/* items: (image, channel block or channel, padded row) */
static void copy_run(void *user, int64_t i0, int64_t i1) {
    const copy_job *j = user;
    for (int64_t it = i0; it < i1; it++) {
        int64_t n = it / j->items;
        copy_job one = *j;
        one.x = j->x + n * j->C * j->H * j->W;
        one.xp = j->xp + n * j->C * j->hp * j->wp;
        copy_row(&one, it % j->items);
    }
}

/* ---- tiles ---------------------------------------------------------------------------- */

typedef struct run_job {
    const cpu_conv_geom *g;
    const cpu_conv_c16_weights *w;
    const float *xp; /* image n's copy at xp + n * xp_image */
    float *y;        /* image n's output at y + n * M * OS, its residual likewise */
    const cpu_epilogue *ep;
    int64_t n_ob, n_chunks, chunks_per_task, groups, n_tasks; /* groups: chunk groups per image */
    int64_t sh, sw;   /* strides of the tiles' positions over the copy */
    int64_t xp_image; /* floats per image of the copy */
    bool y_c16;       /* y in C16: tiles are stored as they are */
    bool res_c16;     /* the fused residual in C16 */
} run_job;

/* store_tile into C16 y: vector v of position i is 16 consecutive floats of block ob * 4 + v,
 * so each is one store, its bias one vector and a C16 residual one load (an NCHW one, where
 * a C16 region starts at a residual block, 16 channels a plane apart: one gather). */
static void store_tile_c16(const run_job *j, int64_t n, const float *acc, int64_t ob, int nv, int64_t p0, int np) {
    int64_t OS = j->g->out_size, img = n * j->w->M * OS;
    const cpu_epilogue *ep = j->ep;
    bool relu = ep && ep->act.kind == CPU_ACT_RELU, clip = ep && ep->act.kind == CPU_ACT_CLIP;
    __m512i planes = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm512_set1_epi32((int)OS));
    for (int v = 0; v < nv; v++) {
        int64_t oc0 = ob * OC_BLOCK + v * 16, at = img + ((oc0 / 16) * OS + p0) * 16;
        __m512 bias = ep && ep->bias_mode == CPU_BIAS_ROW ? _mm512_loadu_ps(ep->bias + oc0) : _mm512_setzero_ps();
        for (int i = 0; i < np; i++) {
            __m512 val = _mm512_add_ps(_mm512_load_ps(acc + i * 64 + v * 16), bias);
            if (ep && ep->residual && j->res_c16) val = _mm512_add_ps(val, _mm512_loadu_ps(ep->residual + at + i * 16));
            else if (ep && ep->residual)
                val = _mm512_add_ps(val, _mm512_i32gather_ps(planes, ep->residual + img + oc0 * OS + p0 + i, 4));
            if (relu) val = _mm512_max_ps(val, _mm512_setzero_ps());
            else if (clip) val = _mm512_min_ps(_mm512_set1_ps(ep->act.b), _mm512_max_ps(_mm512_set1_ps(ep->act.a), val));
            _mm512_storeu_ps(j->y + at + i * 16, val);
        }
        if (ep && ep->act.kind != CPU_ACT_NONE && !relu && !clip) cpu_act_apply(&ep->act, j->y + at, np * 16);
    }
}

/* Positions [p0, p0 + np) of output channel block ob, from acc[i][v * 16 + lane], with
 * bias, residual and ReLU/Clip (other activations: cpu_epilogue_apply after the store). */
static void store_tile(const run_job *j, int64_t n, const float *acc, int64_t ob, int nv, int64_t p0, int np) {
    if (j->y_c16) {
        store_tile_c16(j, n, acc, ob, nv, p0, np);
        return;
    }
    int64_t OS = j->g->out_size, img = n * j->w->M * OS;
    const cpu_epilogue *ep = j->ep;
    float *y = j->y + img;
    _Alignas(64) float sum[TILE_POS * 64];
    if (ep && ep->residual && j->res_c16) { /* a C16 residual lies as acc does: add it before the transpose */
        for (int i = 0; i < np; i++)
            for (int v = 0; v < nv; v++) {
                const float *r = ep->residual + img + (((ob * OC_BLOCK + v * 16) / 16) * OS + p0 + i) * 16;
                _mm512_store_ps(sum + i * 64 + v * 16, _mm512_add_ps(_mm512_load_ps(acc + i * 64 + v * 16),
                                                                     _mm512_loadu_ps(r)));
            }
        acc = sum;
    }
    __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(np), lanes);
    bool relu = ep && ep->act.kind == CPU_ACT_RELU, clip = ep && ep->act.kind == CPU_ACT_CLIP;
    for (int v = 0; v < nv; v++)
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int i = 0; i < TILE_POS; i++)
                r[i] = i < np ? _mm256_load_ps(acc + i * 64 + v * 16 + half * 8) : _mm256_setzero_ps();
            r[6] = r[7] = _mm256_setzero_ps();
            cpu_transpose8_ps(r); /* r[c]: channel c of the 8, positions 0..7 */
            for (int c = 0; c < 8; c++) {
                int64_t oc = ob * OC_BLOCK + v * 16 + half * 8 + c;
                float *dst = y + oc * OS + p0;
                __m256 val = r[c];
                if (ep && ep->bias_mode == CPU_BIAS_ROW) val = _mm256_add_ps(val, _mm256_set1_ps(ep->bias[oc]));
                if (ep && ep->residual && !j->res_c16)
                    val = _mm256_add_ps(val, _mm256_maskload_ps(ep->residual + img + oc * ep->ld_res + p0, mask));
                if (relu) val = _mm256_max_ps(val, _mm256_setzero_ps());
                else if (clip) /* operands ordered so a NaN stays NaN, as Clip */
                    val = _mm256_min_ps(_mm256_set1_ps(ep->act.b), _mm256_max_ps(_mm256_set1_ps(ep->act.a), val));
                _mm256_maskstore_ps(dst, mask, val);
            }
        }
    if (ep && ep->act.kind != CPU_ACT_NONE && !relu && !clip) {
        cpu_epilogue act_only = {CPU_BIAS_NONE, NULL, NULL, 0, ep->act};
        cpu_epilogue_apply(&act_only, y, OS, ob * OC_BLOCK, ob * OC_BLOCK + nv * 16, p0, p0 + np);
    }
}

/* k steps per k block: its weights (128 x 64 floats, 32 KiB) stay in L1 while every chunk
 * of the task runs that block, instead of the whole weight block (up to 1.2 MiB for
 * ResNet-50's 3x3 512-channel convs) streaming from L2 once per 6 positions. */
#define K_BLOCK 128
#define MAX_CHUNKS 32 /* per task: their tiles (1.5 KiB each, 48 KiB of stack) wait in L1/L2 between k blocks */

static void run_tasks(void *user, int64_t t0, int64_t t1) {
    const run_job *j = user;
    const cpu_conv_c16_weights *w = j->w;
    _Alignas(64) float acc[MAX_CHUNKS][TILE_POS * 64];
    int64_t OW = j->g->out[1], OS = j->g->out_size, ksteps = w->C * w->taps, scale = w->ku == 16 ? 16 : 1;
    int64_t nb = ksteps / w->ku, kblk = K_BLOCK / w->ku;
    for (int64_t t = t0; t < t1; t++) {
        int64_t n = t / (j->n_ob * j->groups), tr = t % (j->n_ob * j->groups);
        int64_t ob = tr % j->n_ob, c0 = (tr / j->n_ob) * j->chunks_per_task, c1 = c0 + j->chunks_per_task;
        const float *xp = j->xp + n * j->xp_image;
        if (c1 > j->n_chunks) c1 = j->n_chunks;
        int nv = (int)((w->M - ob * OC_BLOCK) / 16 < 4 ? (w->M - ob * OC_BLOCK) / 16 : 4);
        const float *wob = w->w + ob * OC_BLOCK * ksteps;
        /* each chunk's position pointers, once per task (one division, then counters,
         * instead of 6 divisions per tile and k block) */
        const float *pos[MAX_CHUNKS][TILE_POS];
        int npos[MAX_CHUNKS];
        int64_t oh = (c0 * TILE_POS) / OW, ow = (c0 * TILE_POS) % OW;
        for (int64_t c = c0; c < c1; c++) {
            int64_t p0 = c * TILE_POS;
            int np = (int)(OS - p0 < TILE_POS ? OS - p0 : TILE_POS);
            for (int i = 0; i < TILE_POS; i++) {
                if (i >= np) {
                    pos[c - c0][i] = pos[c - c0][0];
                    continue;
                }
                pos[c - c0][i] = xp + ((oh * j->sh) * w->wp + ow * j->sw) * scale;
                if (++ow == OW) ow = 0, oh++;
            }
            npos[c - c0] = np;
        }
        cpu_c16_tile_args ta;
        ta.nv = nv;
        ta.ku = (int)w->ku;
        for (int64_t b0 = 0; b0 < nb; b0 += kblk) {
            ta.koff = w->koff + b0;
            ta.n_blocks = nb - b0 < kblk ? nb - b0 : kblk;
            ta.w = wob + b0 * w->ku * nv * 16;
            ta.accumulate = b0 > 0;
            for (int64_t c = c0; c < c1; c++) {
                memcpy(ta.pos, pos[c - c0], sizeof ta.pos);
                ta.np = npos[c - c0];
                cpu_c16_tile_avx512(&ta, acc[c - c0]);
                /* one k block only (ResNet's 64-channel 1x1 convs): store the tile while
                 * its sums are in L1, not after the task's 32 tiles (48 KiB) */
                if (nb <= kblk) store_tile(j, n, acc[c - c0], ob, nv, c * TILE_POS, npos[c - c0]);
            }
        }
        for (int64_t c = c0; c < c1 && nb > kblk; c++) store_tile(j, n, acc[c - c0], ob, nv, c * TILE_POS, npos[c - c0]);
    }
}

bool cpu_conv_c16_reads_in_place(const cpu_conv_geom *g, int64_t C, unsigned layout) {
    return (layout & CPU_C16_X) && C % 16 == 0 && !g->pad0[0] && !g->pad0[1] && !g->pad1[0] && !g->pad1[1];
}

kiln_status cpu_conv_c16_run(cpu_threadpool *pool, const cpu_conv_geom *g, cpu_conv_c16_weights *w, int64_t N,
                             const float *x, float *y, const cpu_epilogue *ep, float *scratch, unsigned layout,
                             kiln_error *err) {
    int64_t hp, wp, sh, sw;
    int64_t C = w->C, c16 = w->ku == 16;
    /* C16 input without padding: the tiles read it where it lies, at the conv's strides */
    bool in_place = cpu_conv_c16_reads_in_place(g, C, layout);
    if (in_place) hp = g->in[0], wp = g->in[1], sh = g->stride[0], sw = g->stride[1];
    else copy_geometry(g, &hp, &wp, &sh, &sw);
    if (w->hp != hp || w->wp != wp || w->dh != g->dil[0] || w->dw != g->dil[1]) fill_koff(w, g, hp, wp);
    if (!in_place) {
        bool sub = subsampled(g), src_c16 = (layout & CPU_C16_X) && c16;
        copy_job cj = {x,  scratch, C, g->in[0], g->in[1], hp, wp, sub ? 0 : g->pad0[0], sub ? 0 : g->pad0[1],
                       sub ? g->stride[0] : 1, sub ? g->stride[1] : 1, c16 != 0, src_c16, (c16 ? C / 16 : C) * hp};
        cpu_parallel_for(pool, N * cj.items, 8, copy_run, &cj);
    }
    /* one job for the whole batch: the tasks of all images share one hand-out, so small
     * images (ResNet's 7x7: 9 chunks per image) still keep every thread busy */
    run_job j = {g, w, in_place ? x : scratch, y, ep, (w->M + OC_BLOCK - 1) / OC_BLOCK,
                 (g->out_size + TILE_POS - 1) / TILE_POS, 0, 0, 0, sh, sw, C * hp * wp, (layout & CPU_C16_Y) != 0,
                 (layout & CPU_C16_RES) != 0};
    /* tasks of a few chunks: at least ~8 per thread, so the atomic hand-out balances */
    int64_t threads = cpu_threadpool_size(pool), want = 8 * threads;
    int64_t per_image_ob = (want + N * j.n_ob - 1) / (N * j.n_ob);
    j.chunks_per_task = (j.n_chunks + per_image_ob - 1) / per_image_ob;
    if (j.chunks_per_task > MAX_CHUNKS) j.chunks_per_task = MAX_CHUNKS;
    if (j.chunks_per_task < 1) j.chunks_per_task = 1;
    j.groups = (j.n_chunks + j.chunks_per_task - 1) / j.chunks_per_task;
    j.n_tasks = N * j.n_ob * j.groups;
    cpu_parallel_for_each(pool, j.n_tasks, run_tasks, &j);
    (void)err;
    return KILN_OK;
}
