/* cpu_winograd_avx2.c - Winograd F(4x4, 3x3) Conv with AVX2+FMA (see cpu_winograd.h).
 *
 * Data flow per call (all fp32):
 *   1. the image is copied once into a zero-padded, channel-blocked layout
 *      xb[n][C/8][Hp][Wp][8] (Hp = 4*tiles_h + 2, likewise Wp), so every tile's input
 *      transform is 36 aligned 8-channel vector loads with no edge tests;
 *   2. output tiles are cut into blocks of TB tiles (TB a multiple of 6), and each task
 *      (a tile block, optionally one group of output channels when there are too few
 *      blocks to keep every thread busy) runs, in its thread slot's private buffers:
 *        - input transform V = B^T d B of its tiles, 8 channels per vector, written
 *          straight into the A-panel layout of the GEMM below: V[xi][tile/6][C/8][6][8];
 *        - 36 GEMMs (one per transform point xi) M[xi] = V[xi] * U[xi], with a 6x16
 *          AVX2 microkernel (6 tiles x 16 output channels, 12 accumulators) whose A
 *          operand is read in the [C/8][6][8] layout the transform produced (kiln's
 *          packed GEMM reads A as [K][6]: that would need a transpose of every V);
 *        - output transform Y = A^T M A, 8 output channels per vector, with bias,
 *          residual and the activation applied before the one store into NCHW.
 *      When the tile blocks alone cannot keep the threads busy (batch 1: ResNet-50's
 *      28x28, 14x14 and 7x7 layers are one block), the input transform of a block is
 *      made once, by all threads over channel blocks, into one shared V, and the tasks are
 *      output-channel groups (about 2 per thread) that only run the GEMMs and the output
 *      transform. Before, each of exactly one group per thread transformed the same tiles
 *      itself, and a thread that started late held the layer. ResNet-50 batch 1, 2
 *      threads, `kiln exec --dumpProfile` medians of 20 runs, 6 interleaved rounds at load
 *      0.4-0.7: the 13 Winograd layers sum to 14.3 ms against 15.4 (fewer in 6 of 6
 *      rounds; the 28x28..7x7 layers 8-15% each, the 56x56 ones, which have 2 blocks,
 *      unchanged).
 *   The transformed weights U[xi][M/16][C][16] are made once per node (cpu_winograd_pack).
 *
 * Why tiles are the GEMM's row (broadcast) side: deep ResNet layers have few tiles
 * (7x7 output = 4 tiles of 4x4 at batch 1) and many channels; with tiles in the 16-wide
 * vector dimension those GEMMs would waste 3/4 of every FMA.
 *
 * Block sizes: a task's V and M buffers are kept to a few MiB (L3, per-xi slices in L2),
 * and a block holds as many tiles as fit so that U, the large operand (4x the weights), is
 * streamed as few times as possible. Accuracy: F(4x4, 3x3) in fp32 loses about 2 decimal
 * digits against direct convolution (transform constants up to 8 and 1/24); the unit test
 * and tests/models check the results against a direct reference and ONNX Runtime.
 */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_gemm_avx512.h"
#include "backends/cpu/cpu_winograd.h"
#include "core/alloc.h"
#include "core/bigalloc.h"

#define WG_KC 256 /* k-block depth: a 16 x 256 U panel is 16 KiB (L1) */

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static float *alloc_floats(uint64_t n) { return kiln_alloc_aligned((size_t)n * sizeof(float)); }

/* ---- weight transform ----------------------------------------------------------------- */

/* G (6x3) of F(4x4, 3x3) and (4x3) of F(2x2, 3x3): U = G g G^T. */
static const double wg_G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double wg_G[6][3] = {{1.0 / 4, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                  {0, 0, 1}};

kiln_status cpu_winograd_pack(int tile, const float *w, int64_t M, int64_t C, cpu_winograd_weights *out,
                              kiln_error *err) {
    memset(out, 0, sizeof *out);
    int64_t Cp = round_up(C, 8), Mp = round_up(M, 16);
    int al = tile + 2; /* input tile edge */
    const double(*G)[3] = tile == CPU_WINOGRAD_F23 ? wg_G2 : wg_G;
    uint64_t n;
    if ((tile != CPU_WINOGRAD_F23 && tile != CPU_WINOGRAD_F43) || M <= 0 || C <= 0 ||
        kiln_mul_overflow_u64((uint64_t)Cp, (uint64_t)Mp, &n) || kiln_mul_overflow_u64(n, (uint64_t)(al * al), &n) ||
        n > (1ull << 34))
        return kiln_err_set(err, KILN_ERR_LIMIT, "Winograd weights for %lldx%lld channels are too large", (long long)M,
                            (long long)C);
    out->u = alloc_floats(n);
    if (!out->u) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory transforming Conv weights");
    if (Cp > C) memset(out->u, 0, (size_t)n * sizeof(float)); /* rows of padded channels */
    out->tile = tile;
    out->C = C;
    out->M = M;
    out->Cp = Cp;
    out->Mp = Mp;
    out->src = w;
    /* 16 output channels per step in two vectors: their 9 taps are gathered once per
     * input channel, and each point's 16 results are one contiguous 64-byte store, so
     * every point's panel is written sequentially (a scalar m-by-m loop took ~300 ms for
     * a 512x512 layer, mostly scattered stores; this takes a few ms). float math: G's
     * entries are exact or within 1 ulp, well below the transform's own rounding. */
    int64_t pstride = (Mp / 16) * Cp * 16; /* floats between points */
    for (int64_t mb = 0; mb < Mp / 16; mb++)
        for (int64_t c = 0; c < C; c++) {
            _Alignas(32) float g[9][16];
            for (int j = 0; j < 16; j++) {
                int64_t m = mb * 16 + j;
                float tap[9] = {0};
                if (m < M) memcpy(tap, w + (m * C + c) * 9, sizeof tap);
                for (int i = 0; i < 9; i++) g[i][j] = tap[i];
            }
            for (int h = 0; h < 2; h++) { /* the two 8-channel halves */
                __m256 gv[3][3], t[6][3];
                for (int i = 0; i < 9; i++) gv[i / 3][i % 3] = _mm256_load_ps(&g[i][h * 8]);
                for (int i = 0; i < al; i++)
                    for (int j = 0; j < 3; j++)
                        t[i][j] = _mm256_fmadd_ps(
                            _mm256_set1_ps((float)G[i][0]), gv[0][j],
                            _mm256_fmadd_ps(_mm256_set1_ps((float)G[i][1]), gv[1][j],
                                            _mm256_mul_ps(_mm256_set1_ps((float)G[i][2]), gv[2][j])));
                float *dst = out->u + (mb * Cp + c) * 16 + h * 8;
                for (int i = 0; i < al; i++)
                    for (int k = 0; k < al; k++) {
                        __m256 u = _mm256_fmadd_ps(
                            t[i][0], _mm256_set1_ps((float)G[k][0]),
                            _mm256_fmadd_ps(t[i][1], _mm256_set1_ps((float)G[k][1]),
                                            _mm256_mul_ps(t[i][2], _mm256_set1_ps((float)G[k][2]))));
                        _mm256_store_ps(dst + (i * al + k) * pstride, u);
                    }
            }
        }
    return KILN_OK;
}

void cpu_winograd_weights_free(cpu_winograd_weights *w) {
    if (!w) return;
    free(w->u);
    memset(w, 0, sizeof *w);
}

void cpu_winograd_scratch_free(cpu_winograd_scratch *s) {
    if (!s) return;
    free(s->data);
    s->data = NULL;
    s->cap = 0;
}

/* ---- the plan of one call ----------------------------------------------------------------- */

typedef struct wg_plan {
    const cpu_conv_geom *g;
    const cpu_winograd_weights *w;
    const cpu_epilogue *ep;
    const float *x;
    float *y, *xb, *slots;
    int64_t N, C, M, H, W, OH, OW, pt, pl;
    int64_t TH, TW, T, Hp, Wp, Cp, Mp, CB;
    int64_t TB, NP, n_blocks, Mg, n_groups, n_tasks, slot_floats;
    float *vshared;           /* the block's shared V, or NULL: each task makes its own */
    int64_t cur_blk, task_end; /* shared V: the block being run; tasks end here */
    int tile, pts; /* output tile edge (2 or 4), transform points (16 or 36) */
    bool relu, other_act;
    bool x_c16, y_c16, res_c16; /* sides in the C16 layout (cpu_c16.h) instead of NCHW */
    atomic_llong next;
} wg_plan;

/* ---- 1. blocked, padded input ------------------------------------------------------------ */

/* One padded row hp of channel block cb of image n. */
static void block_rows(void *user, int64_t r0, int64_t r1) {
    const wg_plan *p = user;
    int64_t W = p->W, Wp = p->Wp, pl = p->pl;
    for (int64_t r = r0; r < r1; r++) {
        int64_t hp = r % p->Hp, cb = (r / p->Hp) % p->CB, n = r / (p->Hp * p->CB);
        float *dst = p->xb + r * Wp * 8;
        int64_t ih = hp - p->pt;
        if (ih < 0 || ih >= p->H) {
            memset(dst, 0, (size_t)(Wp * 8) * sizeof(float));
            continue;
        }
        if (p->x_c16) { /* the 8 channels are half of a C16 pixel's 16: one vector per pixel */
            const float *s16 = p->x + ((n * (p->C / 16) + cb / 2) * p->H + ih) * W * 16 + (cb % 2) * 8;
            memset(dst, 0, (size_t)(pl * 8) * sizeof(float));
            int64_t wend = pl + W < Wp ? pl + W : Wp;
            for (int64_t wp = pl; wp < wend; wp++) _mm256_store_ps(dst + wp * 8, _mm256_loadu_ps(s16 + (wp - pl) * 16));
            if (wend < Wp) memset(dst + wend * 8, 0, (size_t)((Wp - wend) * 8) * sizeof(float));
            continue;
        }
        const float *src[8];
        int nc = 0;
        for (int ci = 0; ci < 8; ci++) {
            int64_t c = cb * 8 + ci;
            src[ci] = c < p->C ? p->x + ((n * p->C + c) * p->H + ih) * W : NULL;
            if (src[ci]) nc++;
        }
        /* left padding, interior (8 columns at a time through a transpose), the rest */
        int64_t wp = 0, wend = pl + W < Wp ? pl + W : Wp;
        memset(dst, 0, (size_t)(pl * 8) * sizeof(float));
        wp = pl;
        if (nc == 8)
            for (; wp + 8 <= wend; wp += 8) {
                __m256 v[8];
                for (int ci = 0; ci < 8; ci++) v[ci] = _mm256_loadu_ps(src[ci] + (wp - pl));
                cpu_transpose8_ps(v); /* r[j]: column j of the 8 channels */
                for (int j = 0; j < 8; j++) _mm256_store_ps(dst + (wp + j) * 8, v[j]);
            }
        for (; wp < wend; wp++)
            for (int ci = 0; ci < 8; ci++) dst[wp * 8 + ci] = src[ci] ? src[ci][wp - pl] : 0.f;
        if (wp < Wp) memset(dst + wp * 8, 0, (size_t)((Wp - wp) * 8) * sizeof(float));
    }
}

/* ---- 2a. input transform ----------------------------------------------------------------- */

/* B^T (6x6) applied to a column d0..d5:
 *   r0 = 4d0 - 5d2 + d4            r1 = -4d1 - 4d2 + d3 + d4      r2 = 4d1 - 4d2 - d3 + d4
 *   r3 = -2d1 - d2 + 2d3 + d4      r4 = 2d1 - d2 - 2d3 + d4       r5 = 4d1 - 5d3 + d5 */
#define BT6(d0, d1, d2, d3, d4, d5, r0, r1, r2, r3, r4, r5)                                                            \
    do {                                                                                                               \
        __m256 a_ = _mm256_fmadd_ps(m4, d2, d4), b_ = _mm256_fmadd_ps(m4, d1, d3);                                     \
        __m256 c_ = _mm256_sub_ps(d4, d2), e_ = _mm256_mul_ps(two, _mm256_sub_ps(d3, d1));                             \
        r0 = _mm256_fmadd_ps(four, d0, _mm256_fmadd_ps(m5, d2, d4));                                                   \
        r1 = _mm256_add_ps(a_, b_);                                                                                    \
        r2 = _mm256_sub_ps(a_, b_);                                                                                    \
        r3 = _mm256_add_ps(c_, e_);                                                                                    \
        r4 = _mm256_sub_ps(c_, e_);                                                                                    \
        r5 = _mm256_fmadd_ps(four, d1, _mm256_fmadd_ps(m5, d3, d5));                                                   \
    } while (0)

/* Transforms the 6x6 tile at src (row stride ld floats, 8 channels per position) into 36
 * vectors stored at dst + xi * dstride. */
static inline void input_tile(const float *src, int64_t ld, float *dst, int64_t dstride) {
    const __m256 four = _mm256_set1_ps(4.f), m4 = _mm256_set1_ps(-4.f), m5 = _mm256_set1_ps(-5.f),
                 two = _mm256_set1_ps(2.f);
    __m256 t[6][6];
    for (int j = 0; j < 6; j++) { /* columns: B^T along the rows of the tile */
        const float *s = src + j * 8;
        __m256 d0 = _mm256_load_ps(s), d1 = _mm256_load_ps(s + ld), d2 = _mm256_load_ps(s + 2 * ld),
               d3 = _mm256_load_ps(s + 3 * ld), d4 = _mm256_load_ps(s + 4 * ld), d5 = _mm256_load_ps(s + 5 * ld);
        BT6(d0, d1, d2, d3, d4, d5, t[0][j], t[1][j], t[2][j], t[3][j], t[4][j], t[5][j]);
    }
    for (int i = 0; i < 6; i++) { /* then along each row */
        __m256 r0, r1, r2, r3, r4, r5;
        BT6(t[i][0], t[i][1], t[i][2], t[i][3], t[i][4], t[i][5], r0, r1, r2, r3, r4, r5);
        float *d = dst + (i * 6) * dstride;
        _mm256_store_ps(d, r0);
        _mm256_store_ps(d + dstride, r1);
        _mm256_store_ps(d + 2 * dstride, r2);
        _mm256_store_ps(d + 3 * dstride, r3);
        _mm256_store_ps(d + 4 * dstride, r4);
        _mm256_store_ps(d + 5 * dstride, r5);
    }
}

/* F(2x2, 3x3): B^T (4x4) on a column: r0 = d0 - d2, r1 = d1 + d2, r2 = d2 - d1,
 * r3 = d1 - d3. */
static inline void input_tile2(const float *src, int64_t ld, float *dst, int64_t dstride) {
    __m256 t[4][4];
    for (int j = 0; j < 4; j++) {
        const float *s = src + j * 8;
        __m256 d0 = _mm256_load_ps(s), d1 = _mm256_load_ps(s + ld), d2 = _mm256_load_ps(s + 2 * ld),
               d3 = _mm256_load_ps(s + 3 * ld);
        t[0][j] = _mm256_sub_ps(d0, d2);
        t[1][j] = _mm256_add_ps(d1, d2);
        t[2][j] = _mm256_sub_ps(d2, d1);
        t[3][j] = _mm256_sub_ps(d1, d3);
    }
    for (int i = 0; i < 4; i++) {
        float *d = dst + (i * 4) * dstride;
        _mm256_store_ps(d, _mm256_sub_ps(t[i][0], t[i][2]));
        _mm256_store_ps(d + dstride, _mm256_add_ps(t[i][1], t[i][2]));
        _mm256_store_ps(d + 2 * dstride, _mm256_sub_ps(t[i][2], t[i][1]));
        _mm256_store_ps(d + 3 * dstride, _mm256_sub_ps(t[i][1], t[i][3]));
    }
}

/* ---- 2b. GEMM microkernel ------------------------------------------------------------------ */

/* c[6][16] (row stride ldc) = (accumulate ? c : 0) + a * b over kc (a multiple of 8) with
 * a in [kc/8][6][8] (row i, depth k at (k/8)*48 + i*8 + k%8) and b in [kc][16]. */
static void wg_kernel(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, bool accumulate) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#define WSTEP(u)                                                                                                       \
    do {                                                                                                               \
        __m256 b0 = _mm256_load_ps(b + (u) * 16), b1 = _mm256_load_ps(b + (u) * 16 + 8), x;                           \
        x = _mm256_broadcast_ss(a + 0 * 8 + (u));                                                                      \
        c00 = _mm256_fmadd_ps(x, b0, c00);                                                                             \
        c01 = _mm256_fmadd_ps(x, b1, c01);                                                                             \
        x = _mm256_broadcast_ss(a + 1 * 8 + (u));                                                                      \
        c10 = _mm256_fmadd_ps(x, b0, c10);                                                                             \
        c11 = _mm256_fmadd_ps(x, b1, c11);                                                                             \
        x = _mm256_broadcast_ss(a + 2 * 8 + (u));                                                                      \
        c20 = _mm256_fmadd_ps(x, b0, c20);                                                                             \
        c21 = _mm256_fmadd_ps(x, b1, c21);                                                                             \
        x = _mm256_broadcast_ss(a + 3 * 8 + (u));                                                                      \
        c30 = _mm256_fmadd_ps(x, b0, c30);                                                                             \
        c31 = _mm256_fmadd_ps(x, b1, c31);                                                                             \
        x = _mm256_broadcast_ss(a + 4 * 8 + (u));                                                                      \
        c40 = _mm256_fmadd_ps(x, b0, c40);                                                                             \
        c41 = _mm256_fmadd_ps(x, b1, c41);                                                                             \
        x = _mm256_broadcast_ss(a + 5 * 8 + (u));                                                                      \
        c50 = _mm256_fmadd_ps(x, b0, c50);                                                                             \
        c51 = _mm256_fmadd_ps(x, b1, c51);                                                                             \
    } while (0)
    for (int64_t k = 0; k < kc; k += 8) {
        /* the U panel streams from memory on the first A panel: fetch the whole 8-deep
         * step (512 bytes) four steps ahead */
        for (int l = 0; l < 128; l += 16) _mm_prefetch((const char *)(b + 512 + l), _MM_HINT_T0);
        WSTEP(0);
        WSTEP(1);
        WSTEP(2);
        WSTEP(3);
        WSTEP(4);
        WSTEP(5);
        WSTEP(6);
        WSTEP(7);
        a += 48;
        b += 128;
    }
#undef WSTEP
#define WROW(i, v0, v1)                                                                                                \
    do {                                                                                                               \
        float *r_ = c + (i) * ldc;                                                                                     \
        if (accumulate) {                                                                                              \
            v0 = _mm256_add_ps(v0, _mm256_load_ps(r_));                                                                \
            v1 = _mm256_add_ps(v1, _mm256_load_ps(r_ + 8));                                                            \
        }                                                                                                              \
        _mm256_store_ps(r_, v0);                                                                                       \
        _mm256_store_ps(r_ + 8, v1);                                                                                   \
    } while (0)
    WROW(0, c00, c01);
    WROW(1, c10, c11);
    WROW(2, c20, c21);
    WROW(3, c30, c31);
    WROW(4, c40, c41);
    WROW(5, c50, c51);
#undef WROW
}

/* ---- 2c. output transform + epilogue ------------------------------------------------------- */

/* A^T (4x6) applied to m0..m5: o0 = m0+m1+m2+m3+m4, o1 = m1-m2+2(m3-m4),
 * o2 = m1+m2+4(m3+m4), o3 = m1-m2+8(m3-m4)+m5. */
#define AT6(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)                                                                    \
    do {                                                                                                               \
        __m256 a_ = _mm256_add_ps(m1, m2), b_ = _mm256_sub_ps(m1, m2);                                                 \
        __m256 c_ = _mm256_add_ps(m3, m4), d_ = _mm256_sub_ps(m3, m4);                                                 \
        o0 = _mm256_add_ps(_mm256_add_ps(m0, a_), c_);                                                                 \
        o1 = _mm256_fmadd_ps(two, d_, b_);                                                                             \
        o2 = _mm256_fmadd_ps(four, c_, a_);                                                                            \
        o3 = _mm256_add_ps(_mm256_fmadd_ps(eight, d_, b_), m5);                                                        \
    } while (0)

/* Where element (image n, channel m, oh, ow) of an [N, M, OH, OW] tensor lies, NCHW or C16. */
static inline int64_t elem_at(const wg_plan *p, bool c16, int64_t n, int64_t m, int64_t oh, int64_t ow) {
    int64_t OS = p->OH * p->OW, pos = oh * p->OW + ow;
    return c16 ? ((n * (p->M / 16) + m / 16) * OS + pos) * 16 + m % 16 : (n * p->M + m) * OS + pos;
}

/* One output value (bias already in f) with the residual and activation, into y at its
 * layout: the general path for mixed layouts and partial tiles. */
static inline void store_one(const wg_plan *p, int64_t n, int64_t m, int64_t oh, int64_t ow, float f) {
    const float *res = p->ep ? p->ep->residual : NULL;
    if (res) f += res[elem_at(p, p->res_c16, n, m, oh, ow)];
    if (p->relu && f < 0.f) f = 0.f;
    float *d = p->y + elem_at(p, p->y_c16, n, m, oh, ow);
    *d = f;
    if (p->other_act) cpu_act_apply(&p->ep->act, d, 1);
}

/* C16 y: each column's 8 channels are contiguous, so a vector is one store (a C16
 * residual one load); other residual layouts go value by value. */
static void store_row_c16(const wg_plan *p, int64_t n, int64_t m0, int64_t oh, int64_t ow0, const __m256 *v) {
    int64_t OW = p->OW;
    int nw = OW - ow0 < 4 ? (int)(OW - ow0) : 4;
    const float *res = p->ep ? p->ep->residual : NULL;
    for (int j = 0; j < nw; j++) {
        if (res && !p->res_c16) {
            _Alignas(32) float t[8];
            _mm256_store_ps(t, v[j]);
            for (int ci = 0; ci < 8; ci++) store_one(p, n, m0 + ci, oh, ow0 + j, t[ci]);
            continue;
        }
        int64_t off = elem_at(p, true, n, m0, oh, ow0 + j);
        __m256 x = v[j];
        if (res) x = _mm256_add_ps(x, _mm256_loadu_ps(res + off));
        if (p->relu) x = _mm256_max_ps(x, _mm256_setzero_ps());
        _mm256_storeu_ps(p->y + off, x);
        if (p->other_act) cpu_act_apply(&p->ep->act, p->y + off, 8);
    }
}

/* Writes output row oh, columns [ow0, ow0+4) of 8 output channels (m0.. m0+7) from four
 * vectors (one per column, 8 channels each), adding residual and applying the
 * activation. */
static void store_row(const wg_plan *p, int64_t n, int64_t m0, int64_t oh, int64_t ow0, __m256 v0, __m256 v1,
                      __m256 v2, __m256 v3) {
    if (p->y_c16) {
        __m256 v[4] = {v0, v1, v2, v3};
        store_row_c16(p, n, m0, oh, ow0, v);
        return;
    }
    if (p->res_c16 && p->ep && p->ep->residual) { /* NCHW y, C16 residual: value by value */
        _Alignas(32) float t[4][8];
        _mm256_store_ps(t[0], v0), _mm256_store_ps(t[1], v1), _mm256_store_ps(t[2], v2), _mm256_store_ps(t[3], v3);
        int nw = p->OW - ow0 < 4 ? (int)(p->OW - ow0) : 4, nm = p->M - m0 < 8 ? (int)(p->M - m0) : 8;
        for (int j = 0; j < nw; j++)
            for (int ci = 0; ci < nm; ci++) store_one(p, n, m0 + ci, oh, ow0 + j, t[j][ci]);
        return;
    }
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m128 r[8] = {_mm256_castps256_ps128(u0), _mm256_castps256_ps128(u1), _mm256_castps256_ps128(u2),
                   _mm256_castps256_ps128(u3), _mm256_extractf128_ps(u0, 1), _mm256_extractf128_ps(u1, 1),
                   _mm256_extractf128_ps(u2, 1), _mm256_extractf128_ps(u3, 1)};
    int64_t OW = p->OW, OS = p->OH * OW;
    int nw = OW - ow0 < 4 ? (int)(OW - ow0) : 4;
    int nm = p->M - m0 < 8 ? (int)(p->M - m0) : 8;
    const float *res = p->ep ? p->ep->residual : NULL;
    for (int ci = 0; ci < nm; ci++) {
        int64_t off = (n * p->M + m0 + ci) * OS + oh * OW + ow0;
        float *d = p->y + off;
        __m128 v = r[ci];
        if (nw == 4) {
            if (res) v = _mm_add_ps(v, _mm_loadu_ps(res + off));
            if (p->relu) v = _mm_max_ps(v, _mm_setzero_ps());
            _mm_storeu_ps(d, v);
        } else {
            float tmp[4];
            _mm_storeu_ps(tmp, v);
            for (int j = 0; j < nw; j++) {
                float f = tmp[j];
                if (res) f += res[off + j];
                if (p->relu && f < 0.f) f = 0.f;
                d[j] = f;
            }
        }
        if (p->other_act) cpu_act_apply(&p->ep->act, d, nw);
    }
}

static void output_tile(const wg_plan *p, const float *mb, int64_t mstride, int64_t n, int64_t ty, int64_t tx,
                        int64_t m0) {
    const __m256 two = _mm256_set1_ps(2.f), four = _mm256_set1_ps(4.f), eight = _mm256_set1_ps(8.f);
    __m256 s[4][6];
    for (int j = 0; j < 6; j++) { /* columns of the 6x6 */
        __m256 m[6];
        for (int i = 0; i < 6; i++) m[i] = _mm256_load_ps(mb + (i * 6 + j) * mstride);
        AT6(m[0], m[1], m[2], m[3], m[4], m[5], s[0][j], s[1][j], s[2][j], s[3][j]);
    }
    __m256 bias = _mm256_setzero_ps();
    if (p->ep && p->ep->bias_mode == CPU_BIAS_ROW && p->ep->bias) {
        if (m0 + 8 <= p->M) bias = _mm256_loadu_ps(p->ep->bias + m0);
        else {
            float b[8] = {0};
            for (int64_t i = m0; i < p->M; i++) b[i - m0] = p->ep->bias[i];
            bias = _mm256_loadu_ps(b);
        }
    }
    for (int r = 0; r < 4; r++) {
        int64_t oh = ty * 4 + r;
        if (oh >= p->OH) break;
        __m256 o0, o1, o2, o3;
        AT6(s[r][0], s[r][1], s[r][2], s[r][3], s[r][4], s[r][5], o0, o1, o2, o3);
        store_row(p, n, m0, oh, tx * 4, _mm256_add_ps(o0, bias), _mm256_add_ps(o1, bias), _mm256_add_ps(o2, bias),
                  _mm256_add_ps(o3, bias));
    }
}

/* F(2x2, 3x3): A^T (2x4): o0 = m0 + m1 + m2, o1 = m1 - m2 - m3. Few outputs per tile, so
 * the stores go through a small buffer. */
static void output_tile2(const wg_plan *p, const float *mb, int64_t mstride, int64_t n, int64_t ty, int64_t tx,
                         int64_t m0) {
    __m256 s[2][4];
    for (int j = 0; j < 4; j++) {
        __m256 a = _mm256_load_ps(mb + j * mstride), b = _mm256_load_ps(mb + (4 + j) * mstride),
               c = _mm256_load_ps(mb + (8 + j) * mstride), d = _mm256_load_ps(mb + (12 + j) * mstride);
        s[0][j] = _mm256_add_ps(_mm256_add_ps(a, b), c);
        s[1][j] = _mm256_sub_ps(_mm256_sub_ps(b, c), d);
    }
    _Alignas(32) float o[2][2][8]; /* [row][col][channel] */
    for (int r = 0; r < 2; r++) {
        _mm256_store_ps(o[r][0], _mm256_add_ps(_mm256_add_ps(s[r][0], s[r][1]), s[r][2]));
        _mm256_store_ps(o[r][1], _mm256_sub_ps(_mm256_sub_ps(s[r][1], s[r][2]), s[r][3]));
    }
    int64_t OW = p->OW, OS = p->OH * OW;
    int nm = p->M - m0 < 8 ? (int)(p->M - m0) : 8;
    const float *res = p->ep ? p->ep->residual : NULL;
    const float *bias = p->ep && p->ep->bias_mode == CPU_BIAS_ROW ? p->ep->bias : NULL;
    for (int r = 0; r < 2; r++) {
        int64_t oh = ty * 2 + r;
        if (oh >= p->OH) break;
        int nw = OW - tx * 2 < 2 ? 1 : 2;
        if (p->y_c16 || p->res_c16) { /* a C16 side: value by value through elem_at */
            for (int j = 0; j < nw; j++)
                for (int ci = 0; ci < nm; ci++)
                    store_one(p, n, m0 + ci, oh, tx * 2 + j, o[r][j][ci] + (bias ? bias[m0 + ci] : 0.f));
            continue;
        }
        for (int ci = 0; ci < nm; ci++) {
            int64_t off = (n * p->M + m0 + ci) * OS + oh * OW + tx * 2;
            float *d = p->y + off;
            for (int j = 0; j < nw; j++) {
                float f = o[r][j][ci];
                if (bias) f += bias[m0 + ci];
                if (res) f += res[off + j];
                if (p->relu && f < 0.f) f = 0.f;
                d[j] = f;
            }
            if (p->other_act) cpu_act_apply(&p->ep->act, d, nw);
        }
    }
}

/* ---- 2. one task -------------------------------------------------------------------------- */

/* Input transform of block blk's tiles for channel blocks [cb0, cb1) into V
 * (V[tile/6][xi][C/8][6][8]; one tile's 36 (16) points lie close together, so its
 * transforms touch a few pages, not one page per point). Rows past the block's tiles
 * (up to the next multiple of 6) are zeros, never stored. Split by channel blocks, two
 * threads write disjoint 64-byte lines (a cb's 6 tiles x 8 channels are 192 bytes). */
static void transform_block(const wg_plan *p, int64_t blk, float *V, int64_t cb0, int64_t cb1) {
    int64_t TB = p->TB, CB = p->CB, pts = p->pts, tile = p->tile;
    int64_t vstride = CB * 48, vpanel = pts * CB * 48; /* floats between points, panels */
    int64_t t0 = blk * TB, total = p->N * p->T;
    int64_t nt = total - t0 < TB ? total - t0 : TB;
    int64_t np = (nt + 5) / 6;
    for (int64_t lt = 0; lt < np * 6; lt++) {
        float *vt = V + (lt / 6) * vpanel + (lt % 6) * 8;
        if (lt >= nt) {
            for (int64_t xi = 0; xi < pts; xi++)
                for (int64_t cb = cb0; cb < cb1; cb++)
                    _mm256_store_ps(vt + xi * vstride + cb * 48, _mm256_setzero_ps());
            continue;
        }
        int64_t gt = t0 + lt, n = gt / p->T, t = gt % p->T, ty = t / p->TW, tx = t % p->TW;
        for (int64_t cb = cb0; cb < cb1; cb++) {
            const float *src = p->xb + (((n * CB + cb) * p->Hp + ty * tile) * p->Wp + tx * tile) * 8;
            if (tile == CPU_WINOGRAD_F43) input_tile(src, p->Wp * 8, vt + cb * 48, vstride);
            else input_tile2(src, p->Wp * 8, vt + cb * 48, vstride);
        }
    }
}

/* Tile block blk x output-channel group grp: input transform (unless V is shared and
 * already made), the GEMMs, the output transform with the epilogue. */
static void run_task(const wg_plan *p, int64_t blk, int64_t grp, float *slot) {
    int64_t TB = p->TB, CB = p->CB, Cp = p->Cp;
    int64_t mbeg = grp * p->Mg, mg = p->Mp - mbeg < p->Mg ? p->Mp - mbeg : p->Mg;
    int64_t pts = p->pts;
    float *V = p->vshared ? p->vshared : slot, *Mb = p->vshared ? slot : slot + pts * TB * Cp;
    int64_t vstride = CB * 48, vpanel = pts * CB * 48; /* floats between points, panels */
    int64_t t0 = blk * TB, total = p->N * p->T;
    int64_t nt = total - t0 < TB ? total - t0 : TB;
    int64_t np = (nt + 5) / 6;
    if (!p->vshared) transform_block(p, blk, V, 0, CB);
    /* one GEMM per point: Mb[xi][TB][mg] = V[xi][TB][Cp] * U[xi][Cp][mbeg .. mbeg+mg) */
    int64_t nkb = (Cp + WG_KC - 1) / WG_KC, kb = round_up((Cp + nkb - 1) / nkb, 8);
    bool use512 = cpu_gemm_avx512_usable();
    for (int64_t xi = 0; xi < pts; xi++) {
        const float *Vx = V + xi * vstride;
        const float *Ux = p->w->u + xi * (p->Mp / 16) * Cp * 16;
        float *Mx = Mb + xi * mg;
        for (int64_t k0 = 0; k0 < Cp; k0 += kb) {
            int64_t kc = Cp - k0 < kb ? Cp - k0 : kb;
            for (int64_t q = 0; q < mg / 16; q++) {
                const float *b = Ux + ((mbeg / 16 + q) * Cp + k0) * 16;
                if (use512 && q + 1 < mg / 16) {
                    /* two 16-channel U panels per AVX-512 kernel call (cpu_gemm_avx512.h) */
                    for (int64_t pp = 0; pp < np; pp++)
                        cpu_winograd_kernel_6x32_avx512(kc, Vx + pp * vpanel + (k0 / 8) * 48, b, b + Cp * 16,
                                                        Mx + pp * 6 * pts * mg + q * 16, pts * mg, k0 > 0);
                    q++;
                    continue;
                }
                for (int64_t pp = 0; pp < np; pp++)
                    wg_kernel(kc, Vx + pp * vpanel + (k0 / 8) * 48, b, Mx + pp * 6 * pts * mg + q * 16, pts * mg,
                              k0 > 0);
            }
        }
    }
    /* output transform + epilogue */
    for (int64_t lt = 0; lt < nt; lt++) {
        int64_t gt = t0 + lt, n = gt / p->T, t = gt % p->T, ty = t / p->TW, tx = t % p->TW;
        for (int64_t c8 = 0; c8 < mg; c8 += 8) {
            if (mbeg + c8 >= p->M) break;
            if (p->tile == CPU_WINOGRAD_F43) output_tile(p, Mb + lt * pts * mg + c8, mg, n, ty, tx, mbeg + c8);
            else output_tile2(p, Mb + lt * pts * mg + c8, mg, n, ty, tx, mbeg + c8);
        }
    }
}

/* Thread slots take tasks [next, task_end) one at a time (task = block * n_groups + group). */
static void slots_run(void *user, int64_t s0, int64_t s1) {
    wg_plan *p = user;
    for (int64_t s = s0; s < s1; s++) {
        float *slot = p->slots + s * p->slot_floats;
        for (;;) {
            long long task = atomic_fetch_add(&p->next, 1);
            if (task >= p->task_end) break;
            run_task(p, task / p->n_groups, task % p->n_groups, slot);
        }
    }
}

/* Shared V: channel blocks [cb0, cb1) of the current block's input transform. */
static void shared_v_run(void *user, int64_t cb0, int64_t cb1) {
    const wg_plan *p = user;
    transform_block(p, p->cur_blk, p->vshared, cb0, cb1);
}

/* ---- driver -------------------------------------------------------------------------------- */

kiln_status cpu_winograd_conv(cpu_threadpool *pool, const cpu_conv_geom *g, int64_t N, const float *x,
                              const cpu_winograd_weights *w, float *y, const cpu_epilogue *ep,
                              cpu_winograd_scratch *scratch, unsigned layout, kiln_error *err) {
    wg_plan p;
    memset(&p, 0, sizeof p);
    p.x_c16 = (layout & CPU_WINOGRAD_C16_X) && w->C % 16 == 0;
    p.y_c16 = (layout & CPU_WINOGRAD_C16_Y) && w->M % 16 == 0;
    p.res_c16 = (layout & CPU_WINOGRAD_C16_RES) && w->M % 16 == 0;
    p.g = g;
    p.w = w;
    p.ep = ep && !cpu_epilogue_is_empty(ep) ? ep : NULL;
    p.x = x;
    p.y = y;
    p.N = N;
    p.C = w->C;
    p.M = w->M;
    p.H = g->in[0];
    p.W = g->in[1];
    p.OH = g->out[0];
    p.OW = g->out[1];
    p.pt = g->pad0[0];
    p.pl = g->pad0[1];
    p.tile = w->tile;
    p.pts = (w->tile + 2) * (w->tile + 2);
    p.TH = (p.OH + p.tile - 1) / p.tile;
    p.TW = (p.OW + p.tile - 1) / p.tile;
    p.T = p.TH * p.TW;
    p.Hp = p.TH * p.tile + 2;
    p.Wp = p.TW * p.tile + 2;
    p.Cp = w->Cp;
    p.Mp = w->Mp;
    p.CB = p.Cp / 8;
    p.relu = p.ep && p.ep->act.kind == CPU_ACT_RELU;
    p.other_act = p.ep && p.ep->act.kind != CPU_ACT_NONE && p.ep->act.kind != CPU_ACT_RELU;
    if (N <= 0 || p.T <= 0) return KILN_OK;
    cpu_winograd_blocking bl;
    if (!cpu_winograd_plan(p.tile, N, p.C, p.M, p.OH, p.OW, cpu_threadpool_size(pool), &bl))
        return kiln_err_set(err, KILN_ERR_LIMIT, "Winograd scratch for this Conv is too large");
    p.TB = bl.TB;
    p.NP = bl.TB / 6;
    p.n_blocks = bl.n_blocks;
    p.Mg = bl.Mg;
    p.n_groups = bl.n_groups;
    p.n_tasks = bl.n_blocks * bl.n_groups;
    p.slot_floats = (int64_t)bl.slot_floats;
    if (bl.scratch_floats > scratch->cap) {
        free(scratch->data);
        scratch->data = alloc_floats(bl.scratch_floats);
        scratch->cap = scratch->data ? (size_t)bl.scratch_floats : 0;
        if (!scratch->data) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory for the Winograd scratch");
    }
    p.xb = scratch->data;
    p.vshared = bl.shared_v ? scratch->data + bl.xb_floats : NULL;
    p.slots = scratch->data + bl.xb_floats + bl.v_floats;
    int64_t rows = N * p.CB * p.Hp;
    cpu_parallel_for(pool, rows, 8, block_rows, &p);
    atomic_init(&p.next, 0);
    if (!bl.shared_v) {
        p.task_end = p.n_tasks;
        cpu_parallel_for(pool, bl.n_slots, 1, slots_run, &p);
        return KILN_OK;
    }
    for (int64_t blk = 0; blk < p.n_blocks; blk++) {
        p.cur_blk = blk;
        cpu_parallel_for(pool, p.CB, 1, shared_v_run, &p);
        atomic_store(&p.next, blk * p.n_groups);
        p.task_end = (blk + 1) * p.n_groups;
        cpu_parallel_for(pool, bl.n_slots, 1, slots_run, &p);
    }
    return KILN_OK;
}
