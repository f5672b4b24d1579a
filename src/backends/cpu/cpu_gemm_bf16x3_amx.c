/* cpu_gemm_bf16x3_amx.c - the bf16x3 GEMM on AMX tiles (cpu_gemm_bf16x3.h says what and
 * why): splitting A per call, the 32x32 tile kernel, the fused epilogue and the task
 * split over the thread pool. Compiled with AMX and AVX-512 flags (CMake: *_amx.c); only
 * called when cpu_bf16x3_usable().
 *
 * Tiles: 0-3 hold a 32x32 block of C (16x16 floats each), 4-5 two 16-row slices of A
 * (32 k each), 6-7 two 16-column strips of B. Per chunk of 32 k the three products take
 * eight tile loads: A lo with B hi, then A hi with B hi, then A hi with B lo, so each
 * load is used by two TDPBF16PS.
 */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_c16.h"
#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_scratch.h"

#define ROWS 32 /* rows of C per kernel call (two A tiles) */
#define COLS 32 /* columns of C per kernel call (two B strips) */

typedef struct tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void tiles_configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = 64;
        c.rows[i] = 16;
    }
    _tile_loadconfig(&c);
}

/* Lane i's element offset i * stride, for the gathers and scatters over NCHW planes (the
 * callers check that 15 * stride fits in 32 bits) */
static inline __m512i lane_offsets(int64_t stride) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)stride));
}

/* ---- A: hi/lo split ---------------------------------------------------------------- */

/* float bits to bfloat16 bits (in 32-bit lanes), rounded to nearest even; NaNs aside */
static inline __m512i round_bf16(__m512i u) {
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
}

/* 16 floats to their bfloat16 hi and lo parts, as split() in cpu_gemm_bf16x3.c. */
static inline void split16(__m512 x, __m256i *hi, __m256i *lo) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __mmask16 finite = _mm512_cmplt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __m512i h = round_bf16(u);
    h = _mm512_mask_or_epi32(h, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    /* a finite x whose rounding overflowed: truncate */
    __mmask16 over = _mm512_mask_cmpeq_epu32_mask(
        finite, _mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7f80));
    h = _mm512_mask_mov_epi32(h, over, _mm512_srli_epi32(u, 16));
    __m512 r = _mm512_maskz_sub_ps(finite, x, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    *hi = _mm512_cvtepi32_epi16(h);
    *lo = _mm512_cvtepi32_epi16(round_bf16(_mm512_castps_si512(r))); /* r is finite or 0 */
}

/* Where row r of A and its elements lie: a row-major matrix (row stride lda), or a 2-D
 * conv's implicit im2col matrix. There row r is output position r % out_size of image
 * r / out_size, and element k is input channel k % C at kernel tap k / C (taps row-major
 * over KH x KW) of an NCHW or C16 image (cpu_c16.h); taps over the padding read zero. */
typedef struct a_source {
    const float *A;
    int64_t lda;
    bool conv, c16;
    int64_t C, H, W, OW, out_size, sh, sw, KH, KW, pt, pl, dh, dw;
} a_source;

typedef struct split_job {
    a_source src;
    int64_t M, K, Kp;
    uint16_t *hi, *lo;
} split_job;

static inline void split_store16(__m512 v, uint16_t *h, uint16_t *l) {
    __m256i vh, vl;
    split16(v, &vh, &vl);
    _mm256_storeu_si256((__m256i *)h, vh);
    _mm256_storeu_si256((__m256i *)l, vl);
}

/* A conv row's output position: image n, output row oh and column ow of row r, found by
 * division once per range of rows and then stepped (a 64-bit division per row cost more
 * than splitting the row itself for 64-channel 1x1 convs). */
typedef struct conv_pos {
    int64_t n, oh, ow;
} conv_pos;

static conv_pos conv_pos_of(const a_source *a, int64_t r) {
    int64_t p = r % a->out_size;
    return (conv_pos){r / a->out_size, p / a->OW, p % a->OW};
}

static void conv_pos_next(const a_source *a, conv_pos *q) {
    if (++q->ow < a->OW) return;
    q->ow = 0;
    if (++q->oh * a->OW < a->out_size) return;
    q->oh = 0;
    q->n++;
}

/* The im2col row at output position q, tap by tap: each tap's input pixel once, then its
 * C channels 16 at a time (C is a multiple of 16); taps over the padding are zeros. */
static void split_conv_row(const a_source *a, conv_pos q, uint16_t *h, uint16_t *l) {
    int64_t plane = a->H * a->W;
    int64_t ih0 = q.oh * a->sh - a->pt, iw0 = q.ow * a->sw - a->pl;
    const float *img = a->A + q.n * a->C * plane;
    int64_t k = 0;
    for (int64_t kh = 0; kh < a->KH; kh++) {
        int64_t ih = ih0 + kh * a->dh;
        for (int64_t kw = 0; kw < a->KW; kw++) {
            int64_t iw = iw0 + kw * a->dw;
            bool inside = ih >= 0 && ih < a->H && iw >= 0 && iw < a->W;
            const float *px = img + ih * a->W + iw;
            for (int64_t c = 0; c < a->C; c += 16, k += 16) {
                __m512 v = !inside ? _mm512_setzero_ps() /* padding */
                           : a->c16 ? _mm512_loadu_ps(img + ((c / 16) * plane + ih * a->W + iw) * 16)
                                    /* NCHW: channels c.. lie a plane apart (fallback and timing path) */
                                    : _mm512_i32gather_ps(lane_offsets(plane), px + c * plane, 4);
                split_store16(v, h + k, l + k);
            }
        }
    }
}

static void split_rows(void *user, int64_t r0, int64_t r1) {
    const split_job *j = user;
    conv_pos q = {0, 0, 0};
    if (j->src.conv && r0 < j->M) q = conv_pos_of(&j->src, r0);
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *h = j->hi + r * j->Kp, *l = j->lo + r * j->Kp;
        int64_t k = 0;
        if (r < j->M && j->src.conv) {
            split_conv_row(&j->src, q, h, l);
            conv_pos_next(&j->src, &q);
            k = j->K;
        } else if (r < j->M)
            for (const float *a = j->src.A + r * j->src.lda; k < j->K; k += 16) {
                int64_t left = j->K - k;
                split_store16(_mm512_maskz_loadu_ps(left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1), a + k),
                              h + k, l + k);
            }
        /* rows past M, and K's padding up to the chunk size, are zero */
        memset(h + k, 0, (size_t)(j->Kp - k) * 2);
        memset(l + k, 0, (size_t)(j->Kp - k) * 2);
    }
}

/* ---- the kernel -------------------------------------------------------------------- */

/* Where element (m, n) of C (and of the epilogue's residual) goes: row-major (row stride
 * ld), or a conv's output, m = image * out_size + position and n the channel, in an NCHW
 * or C16 image of `channels` x out_size. */
typedef struct c_map {
    bool conv, c16;
    int64_t ld, out_size, channels;
} c_map;

typedef struct gemm_job {
    int64_t M, N, Mp, Kp, n_chunks;
    const uint16_t *ah, *al;    /* [Mp][Kp] */
    const uint16_t *b;          /* packed B */
    float *C;
    c_map cm, rm;               /* C's layout and the residual's */
    const cpu_epilogue *ep;
    int64_t m_blocks, rows_per_block, pairs_per_task, n_pairs;
} gemm_job;

/* Where one block's rows lie in a map: off[r] is element (m0 + r, n0), `strip` the
 * distance from there to (m0 + r, n0 + 16), `stride` the distance between consecutive n
 * (1 unless NCHW). The conv position is found by one division per block and then stepped
 * (a division per row and strip cost more than the products of a 64-channel conv). */
typedef struct block_rows {
    int64_t off[ROWS];
    int64_t stride, strip;
} block_rows;

static void block_rows_of(const c_map *c, int64_t m0, int64_t rows, int64_t n0, block_rows *b) {
    if (!c->conv) {
        b->stride = 1;
        b->strip = 16;
        for (int64_t r = 0; r < rows; r++) b->off[r] = (m0 + r) * c->ld + n0;
        return;
    }
    int64_t os = c->out_size, p = m0 % os, base = (m0 / os) * c->channels * os;
    b->stride = c->c16 ? 1 : os;
    b->strip = 16 * os;
    int64_t col = c->c16 ? (n0 / 16) * os * 16 : n0 * os;
    for (int64_t r = 0; r < rows; r++) {
        b->off[r] = base + col + (c->c16 ? p * 16 : p);
        if (++p == os) {
            p = 0;
            base += c->channels * os;
        }
    }
}

static inline __m512 rows_load16(const block_rows *b, const float *base, int64_t r, int strip, __mmask16 k) {
    const float *src = base + b->off[r] + strip * b->strip;
    if (b->stride == 1) return _mm512_maskz_loadu_ps(k, src);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, lane_offsets(b->stride), src, 4);
}

static inline void rows_store16(const block_rows *b, float *base, int64_t r, int strip, __mmask16 k, __m512 v) {
    float *dst = base + b->off[r] + strip * b->strip;
    if (b->stride == 1) {
        _mm512_mask_storeu_ps(dst, k, v);
        return;
    }
    _mm512_mask_i32scatter_ps(dst, k, lane_offsets(b->stride), v, 4);
}

/* C rows [m0, m0 + 32) x columns [n0, n0 + 32) from the block in t (row stride 32),
 * clipped to M x N, with the epilogue. With no activation or ReLU it is one pass: bias,
 * residual and the clamp in registers on the way to C (ResNet's conv3 + Add + Relu). Any
 * other activation is applied to all of t in one call after bias and residual (one
 * function-pointer call per block, not per row), then the rows are copied out. */
static void store_block(const gemm_job *j, float *t, int64_t m0, int64_t n0) {
    const cpu_epilogue *ep = j->ep;
    int64_t rows = j->M - m0 < ROWS ? j->M - m0 : ROWS, cols = j->N - n0 < COLS ? j->N - n0 : COLS;
    __mmask16 k0 = cols >= 16 ? 0xffff : (__mmask16)((1u << cols) - 1);
    __mmask16 k1 = cols >= 32 ? 0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
    block_rows at, oc;
    at.stride = 1, at.strip = 0;
    block_rows_of(&j->cm, m0, rows, n0, &oc);
    bool inline_act = !ep || ep->act.kind == CPU_ACT_NONE || ep->act.kind == CPU_ACT_RELU;
    if (ep) {
        bool col_bias = ep->bias_mode == CPU_BIAS_COL, row_bias = ep->bias_mode == CPU_BIAS_ROW;
        bool relu = ep->act.kind == CPU_ACT_RELU;
        __m512 cb0 = col_bias ? _mm512_maskz_loadu_ps(k0, ep->bias + n0) : _mm512_setzero_ps();
        __m512 cb1 = col_bias ? _mm512_maskz_loadu_ps(k1, ep->bias + n0 + 16) : _mm512_setzero_ps();
        if (ep->residual) block_rows_of(&j->rm, m0, rows, n0, &at);
        for (int64_t r = 0; r < rows; r++) {
            __m512 v0 = _mm512_add_ps(_mm512_load_ps(t + r * COLS), cb0);
            __m512 v1 = _mm512_add_ps(_mm512_load_ps(t + r * COLS + 16), cb1);
            if (row_bias) {
                __m512 b = _mm512_set1_ps(ep->bias[m0 + r]);
                v0 = _mm512_add_ps(v0, b);
                v1 = _mm512_add_ps(v1, b);
            }
            if (ep->residual) {
                v0 = _mm512_add_ps(v0, rows_load16(&at, ep->residual, r, 0, k0));
                if (k1) v1 = _mm512_add_ps(v1, rows_load16(&at, ep->residual, r, 1, k1));
            }
            if (!inline_act) {
                _mm512_store_ps(t + r * COLS, v0);
                _mm512_store_ps(t + r * COLS + 16, v1);
                continue;
            }
            if (relu) { /* max(v, 0) keeps NaN: vmaxps returns its second operand for NaN */
                v0 = _mm512_max_ps(_mm512_setzero_ps(), v0);
                v1 = _mm512_max_ps(_mm512_setzero_ps(), v1);
            }
            rows_store16(&oc, j->C, r, 0, k0, v0);
            if (k1) rows_store16(&oc, j->C, r, 1, k1, v1);
        }
        if (inline_act) return;
        cpu_act_apply(&ep->act, t, rows * COLS);
    }
    for (int64_t r = 0; r < rows; r++) {
        rows_store16(&oc, j->C, r, 0, k0, _mm512_load_ps(t + r * COLS));
        if (k1) rows_store16(&oc, j->C, r, 1, k1, _mm512_load_ps(t + r * COLS + 16));
    }
}

/* B's tiles come from memory on an m-block's first 32 rows (weights are read once per
 * inference) and from L2 after: on that first pass the tiles PF_CHUNKS chunks ahead are
 * prefetched. Cold-weight micro-benchmark (12 weights in rotation, 1 thread, interleaved
 * against the FP32 GEMM, three runs): speed-up over FP32 1.21-1.48 -> 1.39-1.63 on
 * 128x768x3072 and 1.54-1.75 -> 1.64-1.82 on 128x3072x768; 128x768x768 within noise. */
#define PF_CHUNKS 4

/* One 32x32 block of C: the 32 rows of the split A at ah0 / al0 against strips 2p, 2p + 1.
 * Tiles are not renamed, so a load into a tile waits for the TDPBF16PS still reading it;
 * each load is placed right after the last product that reads the old contents, with
 * independent products after it, and the next chunk's first tiles are loaded during this
 * chunk's last products (micro-benchmark, data in L2: 596 -> 643 bfloat16 GFLOP/s). */
static void block_32x32(const gemm_job *j, const uint16_t *ah0, const uint16_t *al0, int64_t p, float *t,
                        bool prefetch_b) {
    const int64_t stride = j->Kp * 2; /* bytes per row of ah / al */
    const uint16_t *ah1 = ah0 + 16 * j->Kp, *al1 = al0 + 16 * j->Kp;
    const uint16_t *b0 = j->b + (2 * p) * j->n_chunks * 1024, *b1 = b0 + j->n_chunks * 1024;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, al0, stride);
    _tile_loadd(5, al1, stride);
    _tile_loadd(6, b0, 64);
    _tile_loadd(7, b1, 64);
    for (int64_t c = 0; c < j->n_chunks; c++) {
        const int64_t k = c * 32, n = c + 1 < j->n_chunks ? k + 32 : k; /* the next chunk (or this one again) */
        const uint16_t *bh0 = b0 + c * 1024, *bh1 = b1 + c * 1024;
        if (prefetch_b && c + PF_CHUNKS < j->n_chunks)
            for (int l = 0; l < 2048; l += 64) {
                _mm_prefetch((const char *)(bh0 + PF_CHUNKS * 1024) + l, _MM_HINT_T0);
                _mm_prefetch((const char *)(bh1 + PF_CHUNKS * 1024) + l, _MM_HINT_T0);
            }
        /* A lo x B hi (loaded before) */
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(4, ah0 + k, stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(5, ah1 + k, stride);
        /* A hi x B hi */
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 5, 6);
        _tile_loadd(6, bh0 + 512, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(7, bh1 + 512, 64);
        /* A hi x B lo, then the next chunk's A lo and B hi */
        const int64_t nb = c + 1 < j->n_chunks ? 1024 : 0;
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(4, al0 + n, stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_loadd(6, bh0 + nb, 64);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(5, al1 + n, stride);
        _tile_loadd(7, bh1 + nb, 64);
    }
    _tile_stored(0, t, COLS * 4);
    _tile_stored(1, t + 16, COLS * 4);
    _tile_stored(2, t + 16 * COLS, COLS * 4);
    _tile_stored(3, t + 16 * COLS + 16, COLS * 4);
}

/* Task t: m-block t % m_blocks (rows_per_block rows) x pairs_per_task strip pairs. */
/* Rows [m_begin, m_end) of C, their split A at ah / al (row m_begin first), against
 * strip pairs [p_begin, p_end); t is a 32x32 buffer for the block being stored. */
static void run_rows(const gemm_job *j, const uint16_t *ah, const uint16_t *al, int64_t m_begin, int64_t m_end,
                     int64_t p_begin, int64_t p_end, float *t) {
    for (int64_t p = p_begin; p < p_end; p++)
        for (int64_t m0 = m_begin; m0 < m_end; m0 += ROWS) {
            int64_t off = (m0 - m_begin) * j->Kp;
            block_32x32(j, ah + off, al + off, p, t, m0 == m_begin);
            store_block(j, t, m0, p * COLS);
        }
}

static void gemm_tasks(void *user, int64_t t0, int64_t t1) {
    const gemm_job *j = user;
    _Alignas(64) float t[ROWS * COLS];
    tiles_configure();
    for (int64_t task = t0; task < t1; task++) {
        int64_t mb = task % j->m_blocks, nb = task / j->m_blocks;
        int64_t m_begin = mb * j->rows_per_block, m_end = m_begin + j->rows_per_block;
        if (m_end > j->Mp) m_end = j->Mp;
        int64_t p_begin = nb * j->pairs_per_task, p_end = p_begin + j->pairs_per_task;
        if (p_end > j->n_pairs) p_end = j->n_pairs;
        run_rows(j, j->ah + m_begin * j->Kp, j->al + m_begin * j->Kp, m_begin, m_end, p_begin, p_end, t);
    }
    _tile_release();
}

/* Split-as-you-go: each task is one m-block, split by the thread that runs it into its
 * own slot of scratch (so the split rows are in L2 when the tiles read them) and run
 * against every strip pair. Chosen when there are enough m-blocks for every thread: a
 * large conv's im2col split (29 MB for ResNet-50's batch-8 strided 3x3s) then never
 * goes through memory, where splitting all of A first wrote and re-read it. */
typedef struct fused_job {
    gemm_job g;
    split_job s;          /* hi / lo unused: each slot has its own */
    uint16_t *slots;      /* n_slots x rows_per_block x Kp x {hi, lo} */
    atomic_llong next;    /* the next m-block */
} fused_job;

static void fused_slots(void *user, int64_t s0, int64_t s1) {
    fused_job *f = user;
    const gemm_job *j = &f->g;
    _Alignas(64) float t[ROWS * COLS];
    bool configured = false;
    for (int64_t s = s0; s < s1; s++) {
        split_job sj = f->s;
        sj.hi = f->slots + s * 2 * j->rows_per_block * j->Kp;
        sj.lo = sj.hi + j->rows_per_block * j->Kp;
        for (;;) {
            long long mb = atomic_fetch_add(&f->next, 1);
            if (mb >= j->m_blocks) break;
            int64_t m_begin = mb * j->rows_per_block, m_end = m_begin + j->rows_per_block;
            if (m_end > j->Mp) m_end = j->Mp;
            /* split rows [m_begin, m_end) to the top of the slot: split_rows indexes its
             * output by absolute row, so shift the slot pointers back by m_begin */
            split_job part = sj;
            part.hi -= m_begin * j->Kp;
            part.lo -= m_begin * j->Kp;
            split_rows(&part, m_begin, m_end);
            if (!configured) tiles_configure(), configured = true;
            run_rows(j, sj.hi, sj.lo, m_begin, m_end, 0, j->n_pairs, t);
        }
    }
    if (configured) _tile_release();
}

/* Splits A (src) into scratch and runs the tiles: C[M, N] = A * B + epilogue, C and the
 * residual placed by cm and rm. */
static kiln_status bf16x3_run(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const a_source *src,
                              const cpu_bf16x3_b *pb, float *C, c_map cm, c_map rm, const cpu_epilogue *ep,
                              cpu_gemm_scratch *scratch, kiln_error *err) {
    if (!pb || !pb->data || pb->K != K || pb->N != N)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "bf16x3 packed B does not match the GEMM (%lldx%lld)",
                            (long long)K, (long long)N);
    int64_t Mp = (M + ROWS - 1) / ROWS * ROWS, Kp = pb->n_chunks * 32;
    if ((uint64_t)Mp * (uint64_t)Kp > (1ull << 34))
        return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM operand too large to split");
    gemm_job j = {M, N, Mp, Kp, pb->n_chunks, NULL, NULL, pb->data, C, cm, rm, cpu_epilogue_is_empty(ep) ? NULL : ep,
                  0, 0, 0, pb->n_strips / 2};
    /* m-blocks whose hi/lo rows stay in L2 (about 1 MiB of them) while the task's strip
     * pairs stream past, enough tasks that every thread gets four or more. 1 MiB against
     * 256 / 512 / 1536 KiB on BERT's six GEMM shapes (M = 128 and 1024, 1 thread): best or
     * within noise on all but one; 128x768x3072 needs 128 rows in one block (1.4x at
     * 256 KiB, 2.25x at 1 MiB over FP32) */
    int64_t rows = (1024 * 1024) / (Kp * 4) / ROWS * ROWS;
    if (rows < ROWS) rows = ROWS;
    /* Every m-block streams all of B: where all of A fits in L2 next to one strip pair
     * (and 128 KiB for the rest), one block reads B once. ResNet-50's batch-1 stage-4
     * 3x3s (64 rows of 4608 k, 9.4 MB of weights) took two blocks under the 1 MiB rule
     * and read their weights from memory twice. Else the blocks are balanced (ceil
     * division) instead of leaving a short last one. */
    int64_t l2 = cpu_l2_bytes(), pair_bytes = Kp * COLS * 4;
    if (l2 > 0 && Mp * Kp * 4 <= l2 - pair_bytes - 128 * 1024) rows = Mp;
    if (rows > Mp) rows = Mp;
    int64_t n_blocks = (Mp + rows - 1) / rows;
    rows = ((Mp + n_blocks - 1) / n_blocks + ROWS - 1) / ROWS * ROWS;
    j.rows_per_block = rows;
    j.m_blocks = (Mp + rows - 1) / rows;
    int64_t threads = cpu_threadpool_size(pool);
    split_job sj = {*src, M, K, Kp, NULL, NULL};
    if (j.m_blocks >= 2 * threads) {
        /* hi and lo of one m-block per thread: rows x Kp floats each */
        if (!cpu_scratch_grow(&scratch->data, &scratch->cap, (uint64_t)threads * (uint64_t)rows * (uint64_t)Kp))
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory splitting a GEMM operand");
        fused_job f = {.g = j, .s = sj, .slots = (uint16_t *)scratch->data};
        atomic_init(&f.next, 0);
        cpu_parallel_for_each(pool, threads, fused_slots, &f);
        return KILN_OK;
    }
    /* hi and lo of all of A: 2 x Mp x Kp bfloat16 = Mp x Kp floats of scratch */
    if (!cpu_scratch_grow(&scratch->data, &scratch->cap, (uint64_t)Mp * (uint64_t)Kp))
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory splitting a GEMM operand");
    sj.hi = (uint16_t *)scratch->data;
    sj.lo = sj.hi + Mp * Kp;
    j.ah = sj.hi;
    j.al = sj.lo;
    cpu_parallel_for(pool, Mp, 8, split_rows, &sj);
    int64_t want = 4 * threads;
    int64_t per = j.n_pairs * j.m_blocks / want;
    if (per < 1) per = 1;
    if (per > 8) per = 8;
    if (per > j.n_pairs) per = j.n_pairs;
    j.pairs_per_task = per;
    int64_t n_groups = (j.n_pairs + per - 1) / per;
    cpu_parallel_for_each(pool, j.m_blocks * n_groups, gemm_tasks, &j);
    return KILN_OK;
}

kiln_status cpu_sgemm_bf16x3(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const cpu_bf16x3_b *pb, float *C, int64_t ldc, const cpu_epilogue *ep,
                             cpu_gemm_scratch *scratch, kiln_error *err) {
    a_source src = {.A = A, .lda = lda};
    c_map cm = {.ld = ldc}, rm = {.ld = ep ? ep->ld_res : 0};
    return bf16x3_run(pool, M, N, K, &src, pb, C, cm, rm, ep, scratch, err);
}

kiln_status cpu_conv_bf16x3(cpu_threadpool *pool, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                            const float *x, const cpu_bf16x3_b *w, float *y, const cpu_epilogue *ep, unsigned layout,
                            cpu_gemm_scratch *scratch, kiln_error *err) {
    int64_t os = g->out_size;
    if ((int64_t)g->in_size * C > INT32_MAX || os * M > INT32_MAX)
        return kiln_err_set(err, KILN_ERR_LIMIT, "Conv image too large for the bf16x3 kernel");
    a_source src = {.A = x, .conv = true, .c16 = (layout & CPU_C16_X) != 0, .C = C, .H = g->in[0], .W = g->in[1],
                    .OW = g->out[1], .out_size = os, .sh = g->stride[0], .sw = g->stride[1], .KH = g->k[0], .KW = g->k[1],
                    .pt = g->pad0[0], .pl = g->pad0[1], .dh = g->dil[0], .dw = g->dil[1]};
    c_map cm = {.conv = true, .c16 = (layout & CPU_C16_Y) != 0, .out_size = os, .channels = M};
    c_map rm = {.conv = true, .c16 = (layout & CPU_C16_RES) != 0, .out_size = os, .channels = M};
    return bf16x3_run(pool, N * os, M, C * g->k[0] * g->k[1], &src, w, y, cm, rm, ep, scratch, err);
}
