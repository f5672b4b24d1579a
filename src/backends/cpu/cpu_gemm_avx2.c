/* cpu_gemm_avx2.c - kiln's packed-operand SGEMM: 6x16 AVX2+FMA microkernel, constant
 * operand packed once per node, fused epilogue per output tile (see cpu_gemm_packed.h).
 *
 * Why not OpenBLAS here: OpenBLAS 0.3.21 re-packs both operands on every call and, on the
 * 2-core Zen 3 dev machine, reached only 52-68 GFLOP/s (1 thread) on the shapes that
 * dominate ResNet-50 and BERT (2048x49x512 stage-4 1x1 convs, 128x768x768 and
 * 128x3072x768 BERT projections), against ~92 GFLOP/s on 2048^3; its epilogue also needs
 * a second pass over C. Quiet-machine GEMM microbenchmark, 1 thread, GFLOP/s, this path
 * (including packing the per-call operand) / OpenBLAS (first version of this kernel):
 *   64x3136x576  61 / 76 (B packed from a materialised im2col: Conv packs from the image
 *                instead, see cpu_conv.c)      256x784x1152  90 / 91    512x196x2304  89 / 88
 *   2048x49x512  73 / 71     512x49x4608  66 / 67     128x768x768  93 / 88
 *   128x3072x768 86 / 87     1024x3072x768  93 / 92
 * So it is on par with OpenBLAS on the GEMM itself; the gain is the per-node weight
 * packing, the epilogue fused into the tile store and the im2col-free Conv packing.
 * End-to-end numbers are in docs/BENCHMARKS.md ("CPU runtime vs ONNX Runtime", perf
 * branch). OpenBLAS stays the path for every GEMM without a constant operand (cpu_sgemm),
 * for Gemm nodes, and whenever AVX2+FMA is missing or KILN_GEMM=blas is set.
 *
 * Layout. k-blocks of at most KC = 320 (kc_block: equal depths). A packed: for the k-block
 * starting at k0 (length kc),
 * panel p of 6 rows lives at data + k0*Mpad + p*6*kc, element (k, i) at +k*6+i, rows past
 * M zero. B packed likewise with 16-column panels: data + k0*Npad + p*16*kc + k*16 + j.
 * So a 6x16 microkernel call streams a 6*kc A panel (from L2) against a 16*kc B panel
 * (up to 20 KiB, stays in L1 across the inner loop over A panels).
 *
 * Threading: the output is cut into tasks of up to MC_PANELS A panels x NC_PANELS B
 * panels, spread over kiln's pool (OpenBLAS is not involved, so no oversubscription),
 * handed out one task at a time (cpu_parallel_for_each): with cpu_parallel_for's 4
 * chunks per thread a thread could be left idle for a whole chunk (1/8 of the GEMM at 2
 * threads) at the end of every GEMM. BERT's batch-8 GEMMs (1024x768x768, 1024x3072x768,
 * 1024x768x3072, bench_layers, 2 threads, min of 7 x 4 rounds, two runs at load 2.4):
 * 72.2 / 71.7 ms against 77.1 / 73.5 ms chunked; 1 thread 144.6 ms, so 2.0x scaling.
 * Each task runs k-blocks outermost and writes its tiles (first k-block) or adds into
 * them; the last k-block applies the epilogue to the tile while it is hot.
 */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_gelu_avx2.h"
#include "backends/cpu/cpu_gemm_avx512.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "core/alloc.h"
#include "core/bigalloc.h"

#define MR 6
#define NR 16
#define KC 320
#define MC_PANELS 12 /* 72 rows: a 72x256 A block is 72 KiB, fits L2 */
#define NC_PANELS 8  /* 128 columns */

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* k-block depth: K split into equal blocks of at most KC (576 -> 2 x 288, not 256+256+64:
 * a short last block costs a full read-modify-write of C for little work). Every packer
 * and the driver use the same function, so the layouts agree. */
static int64_t kc_block(int64_t K) {
    int64_t nb = (K + KC - 1) / KC;
    return nb > 0 ? (K + nb - 1) / nb : 1;
}

static float *alloc_floats(int64_t n) { return kiln_alloc_aligned((size_t)n * sizeof(float)); }

static bool size_ok(int64_t a, int64_t b) {
    uint64_t t;
    return a > 0 && b > 0 && !kiln_mul_overflow_u64((uint64_t)a, (uint64_t)b, &t) && t < (1ull << 36);
}

/* ---- packing ------------------------------------------------------------------------- */

typedef struct pack_job {
    const float *src;
    int64_t ld, rows, K, pad;
    float *dst;
} pack_job;

/* Packs a full 6-row panel slice: rows s[i*ld + k] (i < 6, k < kc) to d[k*6 + i], 8 k at a
 * time through an 8x8 register transpose (rows 6 and 7 zero). The scalar scatter it
 * replaces took ~5% of BERT's 128x768x768 projections (A is packed on every call). Lane
 * 6-7 spill of each store lands on the next k's first two slots, which the next store
 * (or the scalar tail) overwrites; the last store of the slice is masked instead. */
static void pack_a_panel_avx2(const float *s, int64_t ld, int64_t kc, float *d) {
    const __m256i mask6 = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < MR; i++) r[i] = _mm256_loadu_ps(s + i * ld + k);
        r[6] = r[7] = _mm256_setzero_ps();
        cpu_transpose8_ps(r);
        float *o = d + k * MR;
        for (int i = 0; i < 7; i++) _mm256_storeu_ps(o + i * MR, r[i]);
        _mm256_maskstore_ps(o + 7 * MR, mask6, r[7]);
    }
    for (; k < kc; k++)
        for (int i = 0; i < MR; i++) d[k * MR + i] = s[i * ld + k];
}

/* Packs one B panel from B's transpose: column j of the panel is row j of s (row stride
 * ld, `rows` <= 16 of them valid, the rest zero), so d[k*16 + j] = s[j*ld + k] for k < kc.
 * Attention's scores Q K^T take K as it is stored, [L, D] rows, through this. */
static void pack_bt_panel(const float *s, int64_t ld, int64_t rows, int64_t kc, float *d) {
    int64_t k = 0;
    if (rows == NR)
        for (; k + 8 <= kc; k += 8)
            for (int half = 0; half < 2; half++) {
                __m256 r[8];
                for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + (half * 8 + i) * ld + k);
                cpu_transpose8_ps(r);
                for (int i = 0; i < 8; i++) _mm256_store_ps(d + (k + i) * NR + half * 8, r[i]);
            }
    for (; k < kc; k++)
        for (int j = 0; j < NR; j++) d[k * NR + j] = j < rows ? s[j * ld + k] : 0.f;
}

/* A panels: rows [p*6, p*6+6) of a row-major [rows, K] matrix. */
static void pack_a_run(void *user, int64_t p0, int64_t p1) {
    const pack_job *j = user;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t k0 = 0, kb = kc_block(j->K); k0 < j->K; k0 += kb) {
            int64_t kc = j->K - k0 < kb ? j->K - k0 : kb;
            float *d = j->dst + k0 * j->pad + p * MR * kc;
            if ((p + 1) * MR <= j->rows) {
                pack_a_panel_avx2(j->src + p * MR * j->ld + k0, j->ld, kc, d);
                continue;
            }
            for (int i = 0; i < MR; i++) {
                int64_t r = p * MR + i;
                if (r < j->rows) {
                    const float *s = j->src + r * j->ld + k0;
                    for (int64_t k = 0; k < kc; k++) d[k * MR + i] = s[k];
                } else
                    for (int64_t k = 0; k < kc; k++) d[k * MR + i] = 0.f;
            }
        }
}

/* Packs panels [np0, np1) of rows [k0, k0+kc) of a row-major B into buf (panel p at
 * (p-np0)*NR*kc), one source row at a time: each row is read as one contiguous run of up
 * to 128 floats (8 panels x 64 bytes), with the row 4 ahead prefetched. The per-panel
 * packer (pack_b callback) walked the same rows once per panel, 64 bytes at a time and a
 * whole image row apart (12.5 KB at 56x56), an order the hardware prefetchers do not
 * follow: ResNet-50's 1x1 convs read B from L3 at batch 1 and from memory at batch 8. */
static void pack_b_rows(const float *B, int64_t ldb, int64_t N, int64_t np0, int64_t np1, int64_t k0, int64_t kc,
                        float *buf) {
    int64_t c0 = np0 * NR, c1 = np1 * NR < N ? np1 * NR : N;
    for (int64_t k = 0; k < kc; k++) {
        const float *src = B + (k0 + k) * ldb;
        if (k + 4 < kc)
            for (int64_t c = c0; c < c1; c += 16) _mm_prefetch((const char *)(src + 4 * ldb + c), _MM_HINT_T0);
        for (int64_t p = np0; p < np1; p++) {
            float *d = buf + (p - np0) * NR * kc + k * NR;
            int64_t n0 = p * NR, w = N - n0 < NR ? N - n0 : NR;
            if (w == NR) {
                _mm256_store_ps(d, _mm256_loadu_ps(src + n0));
                _mm256_store_ps(d + 8, _mm256_loadu_ps(src + n0 + 8));
            } else {
                memcpy(d, src + n0, (size_t)w * sizeof(float));
                memset(d + w, 0, (size_t)(NR - w) * sizeof(float));
            }
        }
    }
}

/* B panels [p0, p1): columns [p*16, p*16+16) of a row-major [K, cols] matrix (rows = cols
 * here), every k-block, read row by row (pack_b_rows). */
static void pack_b_run(void *user, int64_t p0, int64_t p1) {
    const pack_job *j = user;
    for (int64_t k0 = 0, kb = kc_block(j->K); k0 < j->K; k0 += kb) {
        int64_t kc = j->K - k0 < kb ? j->K - k0 : kb;
        pack_b_rows(j->src, j->ld, j->rows, p0, p1, k0, kc, j->dst + k0 * j->pad + p0 * NR * kc);
    }
}

/* Packs a row-major operand into tiles: A ([M, K], rows = M) in panels of MR rows, B
 * ([K, N], rows = N) in panels of NR columns; the edge panel is zero-padded. */
static kiln_status pack_operand(const float *src, int64_t ld, int64_t rows, int64_t K, bool is_b,
                                cpu_gemm_packed *out, kiln_error *err) {
    memset(out, 0, sizeof *out);
    int64_t tile = is_b ? NR : MR;
    int64_t pad = round_up(rows, tile);
    if (!size_ok(pad, K))
        return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM operand %lldx%lld too large to pack",
                            (long long)(is_b ? K : rows), (long long)(is_b ? rows : K));
    out->data = alloc_floats(pad * K);
    if (!out->data) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM operand");
    out->rows = rows;
    out->K = K;
    out->is_b = is_b;
    pack_job j = {src, ld, rows, K, pad, out->data};
    if (is_b) pack_b_run(&j, 0, pad / NR);
    else pack_a_run(&j, 0, pad / MR);
    return KILN_OK;
}

kiln_status cpu_gemm_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, cpu_gemm_packed *out,
                            kiln_error *err) {
    return pack_operand(A, lda, M, K, false, out, err);
}

kiln_status cpu_gemm_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, cpu_gemm_packed *out,
                            kiln_error *err) {
    return pack_operand(B, ldb, N, K, true, out, err);
}

void cpu_gemm_packed_free(cpu_gemm_packed *p) {
    if (!p) return;
    free(p->data);
    p->data = NULL;
}

void cpu_gemm_scratch_free(cpu_gemm_scratch *s) {
    if (!s) return;
    free(s->data);
    s->data = NULL;
    s->cap = 0;
}

/* ---- microkernel --------------------------------------------------------------------- */

/* Activations the tile store applies itself: ReLU and Clip in registers, GELU (BERT's FFN, after
 * fuse_gelu.c) over the just-stored 16-column tile rows while they are in L1; the others
 * run through cpu_epilogue_apply after the tile. GELU sits in a separate non-inlined
 * function on purpose: inlined into the microkernel its ~20 constants made GCC keep
 * values live across the k loop, which spilled accumulators and cost 1.7x on every
 * MatMul (measured), not only the GELU ones. Per tile, two vectors per step, is as fast as
 * it gets here (BENCHMARKS.md, "Session 5: GELU epilogue"): the GELU is throughput-bound,
 * four vectors per step measured the same, and a whole 6-row strip after the last k-block
 * only 4% faster in isolation. */
static inline bool act_in_tile(cpu_act_kind k) {
    return k == CPU_ACT_NONE || k == CPU_ACT_RELU || k == CPU_ACT_CLIP || k == CPU_ACT_GELU ||
           k == CPU_ACT_GELU_TANH;
}

/* Clip to [act.a, act.b] (ReLU6 in MobileNets) with the operands ordered so a NaN stays
 * NaN, as the Clip op. Before it ran here, cpu_epilogue_apply's scalar pass over every
 * tile took 41% of MobileNetV2's 16 -> 96 1x1 conv at 112x112 (perf, bench_layers). */
static inline __m256 clip8(__m256 v, const cpu_epilogue *ep) {
    return _mm256_min_ps(_mm256_set1_ps(ep->act.b), _mm256_max_ps(_mm256_set1_ps(ep->act.a), v));
}

__attribute__((noinline)) static void gelu_tile(float *c, int64_t ldc, int rows, cpu_act_kind k) {
    for (int i = 0; i < rows; i++, c += ldc) {
        __m256 v0 = _mm256_loadu_ps(c), v1 = _mm256_loadu_ps(c + 8);
        if (k == CPU_ACT_GELU) {
            v0 = cpu_gelu_erf8(v0);
            v1 = cpu_gelu_erf8(v1);
        } else {
            v0 = cpu_gelu_tanh8(v0);
            v1 = cpu_gelu_tanh8(v1);
        }
        _mm256_storeu_ps(c, v0);
        _mm256_storeu_ps(c + 8, v1);
    }
}

/* One output row of a full tile: add C (later k-blocks), then on the last k-block the
 * fusable epilogue (bias, residual, ReLU), and store (GELU follows in gelu_tile). */
static inline void row_out(float *c, __m256 v0, __m256 v1, bool accumulate, bool fuse, const cpu_epilogue *ep,
                           int64_t m, int64_t n0, bool nt) {
    if (accumulate) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(c));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(c + 8));
    }
    if (fuse) {
        if (ep->bias_mode == CPU_BIAS_ROW) {
            __m256 bv = _mm256_set1_ps(ep->bias[m]);
            v0 = _mm256_add_ps(v0, bv);
            v1 = _mm256_add_ps(v1, bv);
        } else if (ep->bias_mode == CPU_BIAS_COL) {
            v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ep->bias + n0));
            v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ep->bias + n0 + 8));
        }
        if (ep->residual) {
            const float *r = ep->residual + m * ep->ld_res + n0;
            v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));
            v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));
        }
        if (ep->act.kind == CPU_ACT_RELU) {
            v0 = _mm256_max_ps(v0, _mm256_setzero_ps());
            v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
        } else if (ep->act.kind == CPU_ACT_CLIP) {
            v0 = clip8(v0, ep);
            v1 = clip8(v1, ep);
        }
    }
    /* streaming stores (local_task says why) only where the 16 floats are one whole cache
     * line: a line written half by them and half by an ordinary store (a neighbouring tile)
     * would leave a partly filled write-combining buffer to be flushed piecemeal */
    if (nt && ((uintptr_t)c & 63) == 0) {
        _mm256_stream_ps(c, v0);
        _mm256_stream_ps(c + 8, v1);
        return;
    }
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
}

/* a_panel[kc][6] * b_panel[kc][16]. A full tile (c != NULL) goes straight to C at row m0,
 * column n0 (row_out; with nt, non-temporal stores); otherwise the 6x16 result lands in t
 * for store_tile. The k loop is unrolled by two: 12 accumulators + 2 B vectors + 1
 * broadcast = 15 of 16 ymm registers. */
static void kernel_6x16(int64_t kc, const float *a, const float *b, float *t, float *c, int64_t ldc, int64_t m0,
                        int64_t n0, bool accumulate, bool fuse, const cpu_epilogue *ep, bool nt) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#define KSTEP(A, B)                                                                                                    \
    do {                                                                                                               \
        __m256 b0 = _mm256_load_ps(B), b1 = _mm256_load_ps((B) + 8), x;                                                \
        x = _mm256_broadcast_ss((A) + 0);                                                                              \
        c00 = _mm256_fmadd_ps(x, b0, c00);                                                                             \
        c01 = _mm256_fmadd_ps(x, b1, c01);                                                                             \
        x = _mm256_broadcast_ss((A) + 1);                                                                              \
        c10 = _mm256_fmadd_ps(x, b0, c10);                                                                             \
        c11 = _mm256_fmadd_ps(x, b1, c11);                                                                             \
        x = _mm256_broadcast_ss((A) + 2);                                                                              \
        c20 = _mm256_fmadd_ps(x, b0, c20);                                                                             \
        c21 = _mm256_fmadd_ps(x, b1, c21);                                                                             \
        x = _mm256_broadcast_ss((A) + 3);                                                                              \
        c30 = _mm256_fmadd_ps(x, b0, c30);                                                                             \
        c31 = _mm256_fmadd_ps(x, b1, c31);                                                                             \
        x = _mm256_broadcast_ss((A) + 4);                                                                              \
        c40 = _mm256_fmadd_ps(x, b0, c40);                                                                             \
        c41 = _mm256_fmadd_ps(x, b1, c41);                                                                             \
        x = _mm256_broadcast_ss((A) + 5);                                                                              \
        c50 = _mm256_fmadd_ps(x, b0, c50);                                                                             \
        c51 = _mm256_fmadd_ps(x, b1, c51);                                                                             \
    } while (0)
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        /* A 64 k-steps (1.5 KiB) ahead: far enough to cover a miss to memory. Conv weights
         * are A, and inside a network they come from DRAM (ResNet-50's ~100 MB do not stay
         * in L3); the panels of a k-block are contiguous, so the prefetch runs on into the
         * next A panel. The old distance (8 k-steps, 48 floats) hid only an L2 hit.
         * ResNet-50's 41 non-Winograd convs at batch 1 (bench_layers, 1 thread, sum of
         * per-layer minima, min of 3 rounds, load ~2.5): caches evicted before each run
         * 82.1 / 86.3 -> 71.6 / 70.4 ms (two runs), warm 75.6 -> 66.1 ms; BERT's GEMMs
         * unchanged cold (154.4 / 154.7 ms), warm 149.1 -> 140.2. Distances of 288 and
         * 576-768 floats measured between the two. */
        _mm_prefetch((const char *)(a + 6 * 64), _MM_HINT_T0);
        KSTEP(a, b);
        KSTEP(a + MR, b + NR);
        a += 2 * MR;
        b += 2 * NR;
    }
    if (k < kc) KSTEP(a, b);
#undef KSTEP
    if (c) {
        row_out(c + (m0 + 0) * ldc + n0, c00, c01, accumulate, fuse, ep, m0 + 0, n0, nt);
        row_out(c + (m0 + 1) * ldc + n0, c10, c11, accumulate, fuse, ep, m0 + 1, n0, nt);
        row_out(c + (m0 + 2) * ldc + n0, c20, c21, accumulate, fuse, ep, m0 + 2, n0, nt);
        row_out(c + (m0 + 3) * ldc + n0, c30, c31, accumulate, fuse, ep, m0 + 3, n0, nt);
        row_out(c + (m0 + 4) * ldc + n0, c40, c41, accumulate, fuse, ep, m0 + 4, n0, nt);
        row_out(c + (m0 + 5) * ldc + n0, c50, c51, accumulate, fuse, ep, m0 + 5, n0, nt);
        if (fuse && (ep->act.kind == CPU_ACT_GELU || ep->act.kind == CPU_ACT_GELU_TANH))
            gelu_tile(c + m0 * ldc + n0, ldc, MR, ep->act.kind);
        return;
    }
    _mm256_store_ps(t + 0, c00);
    _mm256_store_ps(t + 8, c01);
    _mm256_store_ps(t + 16, c10);
    _mm256_store_ps(t + 24, c11);
    _mm256_store_ps(t + 32, c20);
    _mm256_store_ps(t + 40, c21);
    _mm256_store_ps(t + 48, c30);
    _mm256_store_ps(t + 56, c31);
    _mm256_store_ps(t + 64, c40);
    _mm256_store_ps(t + 72, c41);
    _mm256_store_ps(t + 80, c50);
    _mm256_store_ps(t + 88, c51);
}

/* Right-edge tiles with at most 8 valid columns (ResNet stage 4: N = 49 = 3*16 + 1): half
 * the FMAs of kernel_6x16; the 6x8 result lands in the first 8 columns of t. */
static void kernel_6x8(int64_t kc, const float *a, const float *b, float *t) {
    /* two sets of 6 accumulators (even and odd k), summed at the end: one set alone is 6
     * dependent FMA chains, fewer than the 8 that two 4-cycle FMA pipes need in flight */
    __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps(),
           c3 = _mm256_setzero_ps(), c4 = _mm256_setzero_ps(), c5 = _mm256_setzero_ps();
    __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps(), d2 = _mm256_setzero_ps(),
           d3 = _mm256_setzero_ps(), d4 = _mm256_setzero_ps(), d5 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        _mm_prefetch((const char *)(a + 6 * 64), _MM_HINT_T0);
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + NR);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 0), b0, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 1), b0, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2), b0, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 3), b0, c3);
        c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 4), b0, c4);
        c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 5), b0, c5);
        d0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 6), b1, d0);
        d1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 7), b1, d1);
        d2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 8), b1, d2);
        d3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 9), b1, d3);
        d4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 10), b1, d4);
        d5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 11), b1, d5);
        a += 2 * MR;
        b += 2 * NR;
    }
    if (k < kc) {
        __m256 b0 = _mm256_load_ps(b);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 0), b0, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 1), b0, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2), b0, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 3), b0, c3);
        c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 4), b0, c4);
        c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 5), b0, c5);
    }
    _mm256_store_ps(t + 0, _mm256_add_ps(c0, d0));
    _mm256_store_ps(t + 16, _mm256_add_ps(c1, d1));
    _mm256_store_ps(t + 32, _mm256_add_ps(c2, d2));
    _mm256_store_ps(t + 48, _mm256_add_ps(c3, d3));
    _mm256_store_ps(t + 64, _mm256_add_ps(c4, d4));
    _mm256_store_ps(t + 80, _mm256_add_ps(c5, d5));
}

/* Right-edge tiles with 1-2 valid columns (ResNet stage 4: N = 49 = 3*16 + 1).
 * kernel_6x8 broadcasts the 6 A values of a k-step against 8 B lanes, 7 of them padding
 * here: 6 FMAs per k for one useful column. This turns it around: the k-step's 6 A values
 * are one vector (lanes 6-7 masked off) and each valid column's B value is broadcast, so a
 * k-step costs 1-2 FMAs, over 4 independent accumulator chains. perf, 1 thread, a 2048 ->
 * 512 1x1 conv on 7x7: the edge tiles took 14.4% of the run in kernel_6x8, 7.8% here
 * (first version, whose accumulators GCC kept in memory). bench_layers, ResNet-50's
 * stage-4 convs (1x1 conv1, conv3 with residual, the 3x3/2), sums of medians of 31 runs,
 * 6 interleaved rounds, 1 thread: 7.65 -> 6.83 ms (faster in 5 of 6). For 3-4 columns
 * (stage 3: N = 196 = 12*16 + 4) the same scheme measured slower than kernel_6x8 (2 of 10
 * rounds faster, 2 threads), so those keep kernel_6x8. The result lands in column j of
 * t's first 6 rows, as kernel_6x8 leaves it. */
static inline __attribute__((always_inline)) void kernel_6xn_impl(int64_t kc, const float *a, const float *b, float *t,
                                                                  const int nre) {
    /* named accumulators, not an array: GCC kept an accumulator array in memory (a store
     * after every FMA), which made 3-4 column edges slower than kernel_6x8.
     * c0..c3: even k, d0..d3: odd k, one per column; one column runs four chains (c0,
     * d0, c1, d1 over k = 4i .. 4i+3). */
    const __m256i m6 = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps(), c2 = _mm256_setzero_ps(), c3 = _mm256_setzero_ps();
    __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps(), d2 = _mm256_setzero_ps(), d3 = _mm256_setzero_ps();
    int64_t k = 0;
#define NX_STEP(ACC0, ACC1, ACC2, ACC3, KK)                                                                            \
    do {                                                                                                               \
        /* masked: the last k-step of the last panel must not read past the buffer */                                  \
        __m256 av = _mm256_maskload_ps(a + (KK) * MR, m6);                                                             \
        const float *bk = b + (KK) * NR;                                                                               \
        ACC0 = _mm256_fmadd_ps(av, _mm256_broadcast_ss(bk), ACC0);                                                     \
        if (nre > 1) ACC1 = _mm256_fmadd_ps(av, _mm256_broadcast_ss(bk + 1), ACC1);                                    \
        if (nre > 2) ACC2 = _mm256_fmadd_ps(av, _mm256_broadcast_ss(bk + 2), ACC2);                                    \
        if (nre > 3) ACC3 = _mm256_fmadd_ps(av, _mm256_broadcast_ss(bk + 3), ACC3);                                    \
    } while (0)
    if (nre == 1) {
        for (; k + 4 <= kc; k += 4) {
            _mm_prefetch((const char *)(a + k * MR + 6 * 64), _MM_HINT_T0);
            NX_STEP(c0, c1, c2, c3, k);
            NX_STEP(d0, d1, d2, d3, k + 1);
            NX_STEP(c1, c2, c3, c0, k + 2); /* with nre == 1 only the first accumulator moves */
            NX_STEP(d1, d2, d3, d0, k + 3);
        }
    } else {
        for (; k + 2 <= kc; k += 2) {
            _mm_prefetch((const char *)(a + k * MR + 6 * 64), _MM_HINT_T0);
            NX_STEP(c0, c1, c2, c3, k);
            NX_STEP(d0, d1, d2, d3, k + 1);
        }
    }
    for (; k < kc; k++) NX_STEP(c0, c1, c2, c3, k);
#undef NX_STEP
    if (nre == 1) {
        c0 = _mm256_add_ps(_mm256_add_ps(c0, d0), _mm256_add_ps(c1, d1));
    } else {
        c0 = _mm256_add_ps(c0, d0);
        c1 = _mm256_add_ps(c1, d1);
        c2 = _mm256_add_ps(c2, d2);
        c3 = _mm256_add_ps(c3, d3);
    }
    _Alignas(32) float r[4][8];
    _mm256_store_ps(r[0], c0);
    _mm256_store_ps(r[1], c1);
    _mm256_store_ps(r[2], c2);
    _mm256_store_ps(r[3], c3);
    for (int j = 0; j < nre; j++)
        for (int i = 0; i < MR; i++) t[i * NR + j] = r[j][i];
}

static void kernel_6xn(int64_t kc, const float *a, const float *b, int nr, float *t) {
    switch (nr) {
    case 1: kernel_6xn_impl(kc, a, b, t, 1); break;
    default: kernel_6xn_impl(kc, a, b, t, 2); break;
    }
}

/* Bottom-edge tiles with 1-5 valid rows and all 16 columns (BERT at batch 1: M = 128 =
 * 21*6 + 2; 64- and 128-channel convs: 4 rows left over). kernel_6x16 would do the 6 rows'
 * FMAs for the 2 or 4 real ones (BERT's 22nd panel: 3% of the GEMM's FMAs wasted); this
 * does the rows that exist. The packed panel keeps its 6-float k-stride, zero rows unread.
 * Up to 3 rows run two accumulator sets (even and odd k) so at least 8 chains are in
 * flight for the two 4-cycle FMA pipes; 4 and 5 rows have 8 and 10 chains in one set.
 * The result lands in t's first mr rows, as store_tile expects. */
static inline __attribute__((always_inline)) void kernel_rx16_impl(int64_t kc, const float *a, const float *b,
                                                                   float *t, const int mr) {
    const bool two_sets = mr <= 3;
    __m256 e00 = _mm256_setzero_ps(), e01 = _mm256_setzero_ps(), e10 = _mm256_setzero_ps(),
           e11 = _mm256_setzero_ps(), e20 = _mm256_setzero_ps(), e21 = _mm256_setzero_ps(),
           e30 = _mm256_setzero_ps(), e31 = _mm256_setzero_ps(), e40 = _mm256_setzero_ps(),
           e41 = _mm256_setzero_ps();
    /* the odd-k set: rows 3-4 never run in it (two_sets needs mr <= 3), declared so the
     * one step macro serves both sets */
    __m256 o00 = _mm256_setzero_ps(), o01 = _mm256_setzero_ps(), o10 = _mm256_setzero_ps(),
           o11 = _mm256_setzero_ps(), o20 = _mm256_setzero_ps(), o21 = _mm256_setzero_ps(),
           o30 = _mm256_setzero_ps(), o31 = _mm256_setzero_ps(), o40 = _mm256_setzero_ps(),
           o41 = _mm256_setzero_ps();
#define RX_ROW(I, ACC0, ACC1, AK, B0, B1)                                                                              \
    do {                                                                                                               \
        if (mr > (I)) {                                                                                                \
            __m256 x = _mm256_broadcast_ss((AK) + (I));                                                                \
            ACC0 = _mm256_fmadd_ps(x, B0, ACC0);                                                                       \
            ACC1 = _mm256_fmadd_ps(x, B1, ACC1);                                                                       \
        }                                                                                                              \
    } while (0)
#define RX_STEP(S, AK, BK)                                                                                             \
    do {                                                                                                               \
        __m256 b0 = _mm256_load_ps(BK), b1 = _mm256_load_ps((BK) + 8);                                                 \
        RX_ROW(0, S##00, S##01, AK, b0, b1);                                                                           \
        RX_ROW(1, S##10, S##11, AK, b0, b1);                                                                           \
        RX_ROW(2, S##20, S##21, AK, b0, b1);                                                                           \
        RX_ROW(3, S##30, S##31, AK, b0, b1);                                                                           \
        RX_ROW(4, S##40, S##41, AK, b0, b1);                                                                           \
    } while (0)
    int64_t k = 0;
    for (; k + 2 <= kc; k += 2) {
        _mm_prefetch((const char *)(a + 6 * 64), _MM_HINT_T0);
        RX_STEP(e, a, b);
        if (two_sets) RX_STEP(o, a + MR, b + NR);
        else RX_STEP(e, a + MR, b + NR);
        a += 2 * MR;
        b += 2 * NR;
    }
    if (k < kc) RX_STEP(e, a, b);
#undef RX_STEP
#undef RX_ROW
    if (two_sets) {
        e00 = _mm256_add_ps(e00, o00);
        e01 = _mm256_add_ps(e01, o01);
        e10 = _mm256_add_ps(e10, o10);
        e11 = _mm256_add_ps(e11, o11);
        e20 = _mm256_add_ps(e20, o20);
        e21 = _mm256_add_ps(e21, o21);
    }
    _mm256_store_ps(t + 0, e00);
    _mm256_store_ps(t + 8, e01);
    if (mr > 1) {
        _mm256_store_ps(t + 16, e10);
        _mm256_store_ps(t + 24, e11);
    }
    if (mr > 2) {
        _mm256_store_ps(t + 32, e20);
        _mm256_store_ps(t + 40, e21);
    }
    if (mr > 3) {
        _mm256_store_ps(t + 48, e30);
        _mm256_store_ps(t + 56, e31);
    }
    if (mr > 4) {
        _mm256_store_ps(t + 64, e40);
        _mm256_store_ps(t + 72, e41);
    }
}

static void kernel_rx16(int64_t kc, const float *a, const float *b, int mr, float *t) {
    switch (mr) {
    case 1: kernel_rx16_impl(kc, a, b, t, 1); break;
    case 2: kernel_rx16_impl(kc, a, b, t, 2); break;
    case 3: kernel_rx16_impl(kc, a, b, t, 3); break;
    case 4: kernel_rx16_impl(kc, a, b, t, 4); break;
    default: kernel_rx16_impl(kc, a, b, t, 5); break;
    }
}

/* Writes (or adds, when accumulate) the mr x nr corner of tile t into C at (m0, n0); on
 * the last k-block also applies the epilogue to that region. */
static void store_tile(const float *t, int mr, int nr, float *C, int64_t ldc, int64_t m0, int64_t n0,
                       bool accumulate, bool last, const cpu_epilogue *ep) {
    bool full = nr == NR;
    bool fuse = last && ep && act_in_tile(ep->act.kind);
    for (int i = 0; i < mr; i++) {
        float *c = C + (m0 + i) * ldc + n0;
        const float *ti = t + i * NR;
        if (full) {
            __m256 v0 = _mm256_load_ps(ti), v1 = _mm256_load_ps(ti + 8);
            if (accumulate) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(c));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(c + 8));
            }
            if (fuse) {
                if (ep->bias_mode == CPU_BIAS_ROW) {
                    __m256 b = _mm256_set1_ps(ep->bias[m0 + i]);
                    v0 = _mm256_add_ps(v0, b);
                    v1 = _mm256_add_ps(v1, b);
                } else if (ep->bias_mode == CPU_BIAS_COL) {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ep->bias + n0));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ep->bias + n0 + 8));
                }
                if (ep->residual) {
                    const float *r = ep->residual + (m0 + i) * ep->ld_res + n0;
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));
                }
                if (ep->act.kind == CPU_ACT_RELU) {
                    v0 = _mm256_max_ps(v0, _mm256_setzero_ps());
                    v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
                } else if (ep->act.kind == CPU_ACT_CLIP) {
                    v0 = clip8(v0, ep);
                    v1 = clip8(v1, ep);
                }
            }
            _mm256_storeu_ps(c, v0);
            _mm256_storeu_ps(c + 8, v1);
        } else {
            for (int j = 0; j < nr; j++) c[j] = accumulate ? c[j] + ti[j] : ti[j];
        }
    }
    if (fuse && full && (ep->act.kind == CPU_ACT_GELU || ep->act.kind == CPU_ACT_GELU_TANH))
        gelu_tile(C + m0 * ldc + n0, ldc, mr, ep->act.kind);
    if (last && ep && !cpu_epilogue_is_empty(ep) && (!fuse || !full))
        cpu_epilogue_apply(ep, C, ldc, m0, m0 + mr, n0, n0 + nr);
}

/* ---- driver -------------------------------------------------------------------------- */

typedef struct gemm_task_job {
    int64_t M, N, K, Mpad, Npad, m_blocks, n_blocks;
    int64_t mc; /* A panels per m-block */
    const float *pa, *pb;
    float *C;
    int64_t ldc;
    const cpu_epilogue *ep;
    cpu_gemm_io io; /* io.b_p16: pb is B itself in the P16 layout, read in place */
} gemm_task_job;

/* One 6x16 output tile of a k-block: a full tile is stored by the kernel itself (with the
 * epilogue when its activation is fusable, the rest applied after); edge tiles go through
 * `tile` and store_tile. first/last: whether this is the first/last k-block. */
static inline void gemm_tile(int64_t kc, const float *a, const float *b, float *tile, int mr, int nr, float *C,
                             int64_t ldc, int64_t m0, int64_t n0, bool first, bool last, const cpu_epilogue *ep,
                             bool has_ep, bool fusable, bool nt) {
    if (mr == MR && nr == NR) {
        kernel_6x16(kc, a, b, NULL, C, ldc, m0, n0, !first, last && fusable, ep, nt);
        if (last && has_ep && !fusable) cpu_epilogue_apply(ep, C, ldc, m0, m0 + MR, n0, n0 + NR);
    } else {
        if (nr <= 2) kernel_6xn(kc, a, b, nr, tile);
        else if (nr <= 8) kernel_6x8(kc, a, b, tile);
        else if (mr < MR) kernel_rx16(kc, a, b, mr, tile);
        else kernel_6x16(kc, a, b, tile, NULL, 0, 0, 0, false, false, NULL, false);
        store_tile(tile, mr, nr, C, ldc, m0, n0, !first, last, ep);
    }
}

bool cpu_gemm_avx512_usable(void) {
    static _Atomic int cached = -1; /* decided once, as cpu_gemm_packed_supported */
    int c = cached;
    if (c < 0) {
        c = (cpu_features() & CPU_FEATURE_AVX512F) != 0;
        cached = c;
    }
    return c == 1;
}

/* Two neighbouring full B panels (32 columns: b0, then b1) against one A panel: the
 * AVX-512 6x32 kernel, or for the partial last A panel (mr < 6) its rx32 form. Each
 * 16-column half is written through its own view (h0 for columns n0.., h1 for n0+16..):
 * one shared view in the row-major layout, one per P16 block in P16. The partial A panel
 * used to run as two AVX2 6x16-style tiles through the tile buffer, at half the vector
 * width: on the GPU host's Xeon, ResNet-50's M = 64 convs (64 = 10 x 6 + 4 rows) were
 * 3.0-3.2% faster with rx32 (in-process A/B, 1 thread, 41 interleaved calls, faster in
 * 28-29 of 41; docs/BENCHMARKS.md "Session 9"). */
static inline void gemm_tile_pair(int64_t kc, const float *a, const float *b0, const float *b1, int mr,
                                  const cpu_half_out *h0, const cpu_half_out *h1, int64_t m0, int64_t n0, bool first,
                                  bool last, bool has_ep, bool fusable, bool nt) {
    if (mr == MR) cpu_gemm_kernel_6x32_avx512(kc, a, b0, b1, h0, h1, m0, n0, !first, last && fusable, nt);
    else cpu_gemm_kernel_rx32_avx512(kc, a, b0, b1, mr, h0, h1, m0, n0, !first, last && fusable, nt);
    if (last && fusable && (h0->ep->act.kind == CPU_ACT_GELU || h0->ep->act.kind == CPU_ACT_GELU_TANH)) {
        gelu_tile(h0->c + m0 * h0->ldc + n0, h0->ldc, mr, h0->ep->act.kind);
        gelu_tile(h1->c + m0 * h1->ldc + n0 + NR, h1->ldc, mr, h1->ep->act.kind);
    }
    if (last && has_ep && !fusable) {
        cpu_epilogue_apply(h0->ep, h0->c, h0->ldc, m0, m0 + mr, n0, n0 + NR);
        cpu_epilogue_apply(h1->ep, h1->c, h1->ldc, m0, m0 + mr, n0 + NR, n0 + 2 * NR);
    }
}

/* One B panel without a partner (a lone full panel, or the partial last one) against one
 * A panel: with AVX-512 the x16 kernel (zmm, masked to nr columns), else gemm_tile. Why:
 * these ran on the AVX2 tiles at half the vector width, and where N is small that is a
 * large share: at 7x7 (N = 49: a pair, a lone panel and 1 column) the lone panel and the
 * column took as long as the pair. On the Xeon, with rx32 above, 2048 x 49 x 512 4.6%
 * faster (52 of 61 calls), 512 x 49 x 2048 1.3% (41 of 61); in ResNet-50 the 7x7 1x1
 * convs and the 14x14/2 downsample 5-6% (9-10 of 10 rounds). A GELU with a partial panel
 * goes through cpu_epilogue_apply: gelu_tile works on whole 16-column rows.
 * A tail of 1-2 columns stays on kernel_6xn (gemm_tile), with AVX-512 too: x16 spends 6
 * zmm FMAs per k on it (15 of 16 lanes idle at N = 49), kernel_6xn one ymm FMA per column.
 * On the Xeon (session 12, in the network, 1 thread, alternating runs): the seven 7x7 GEMM
 * layers of ResNet-50 1.5-12% faster at batch 1 (11-13 of 14 rounds each; the 1x1 convs
 * 10-12%), 8.7-12.4% at batch 8 (4-5 of 5); an isolated 512 x 49 x 2048 conv 0.93 and
 * 0.95 ms against 1.11 and 1.37 in two of three alternating rounds (1.28 against 1.02 in
 * the third). */
static inline void gemm_tile_one(bool use512, int64_t kc, const float *a, const float *b, float *tile, int mr, int nr,
                                 float *C, int64_t ldc, int64_t m0, int64_t n0, bool first, bool last,
                                 const cpu_epilogue *ep, bool has_ep, bool fusable, bool nt) {
    if (use512 && nr > 2) {
        bool gelu = ep && (ep->act.kind == CPU_ACT_GELU || ep->act.kind == CPU_ACT_GELU_TANH);
        bool fuse = last && fusable && !(gelu && nr != NR);
        const cpu_half_out h = {C, ldc, ep};
        cpu_gemm_kernel_x16_avx512(kc, a, b, mr, nr, &h, m0, n0, !first, fuse, nt);
        if (fuse && gelu) gelu_tile(C + m0 * ldc + n0, ldc, mr, ep->act.kind);
        if (last && has_ep && !fuse) cpu_epilogue_apply(ep, C, ldc, m0, m0 + mr, n0, n0 + nr);
        return;
    }
    gemm_tile(kc, a, b, tile, mr, nr, C, ldc, m0, n0, first, last, ep, has_ep, fusable, nt);
}

/* Whether panels np and np+1 (of [np, np1)) are both full and the AVX-512 kernel runs. */
static inline bool pair_panels(bool use512, int64_t np, int64_t np1, int64_t N) {
    return use512 && np + 1 < np1 && N - (np + 1) * NR >= NR;
}

/* Prefetch of the B panel(s) the block loop uses next into L2, a slice per A panel
 * (run_panels says when and why). */
typedef struct next_panels {
    const char *p; /* NULL: nothing to fetch */
    int64_t bytes, step, off;
} next_panels;

static inline next_panels next_panels_init(const float *next, int64_t floats, int64_t a_panels) {
    next_panels n = {(const char *)next, floats * (int64_t)sizeof(float), 0, 0};
    if (next) n.step = (n.bytes / a_panels + 63) & ~(int64_t)63;
    return n;
}

static inline void next_panels_step(next_panels *n) {
    for (int64_t e = n->off + n->step; n->step && n->off < e && n->off < n->bytes; n->off += 64)
        _mm_prefetch(n->p + n->off, _MM_HINT_T1);
}

/* Tiles ahead whose C (first k-block) and residual (last k-block) lines are prefetched. */
#define OUT_PF_TILES 4

/* PREFETCHW: the line comes in owned, ready to be written. (_mm_prefetch with
 * _MM_HINT_ET0 compiles to a plain prefetcht0 without -mprfchw; CPUs without the
 * instruction execute it as a no-op.) */
static inline void prefetch_for_write(const char *p) { __asm__ volatile("prefetchw %0" ::"m"(*p)); }

/* Prefetches the lines of rows [m, m+6) x columns [n0, n0+w) of C (for writing, on the
 * first k-block) and of the residual (on the last), OUT_PF_TILES tiles ahead. Why: the
 * tiles of a panel loop walk down the rows of one 16/32-column strip, so consecutive
 * tiles write rows a whole output row apart (12.5 KB in a 56x56 conv), which no hardware
 * prefetcher follows, and each store of a tile waited for its line to be read for
 * ownership from memory. ResNet-50, batch 8, 1 thread, in the network (kiln exec, one
 * engine, two binaries with and without the prefetch, 6 ABBA rounds of 2 inferences,
 * per-class sums of layer medians): 773.2 -> 716.3 ms (faster in 5 of 6), pointwise convs
 * 420.7 -> 386.9 ms; with the order reversed 897.7 -> 818.1 ms (5 of 6), 486.9 -> 446.8.
 * The output prefetch gave most of it, the residual one alone nothing measurable (an
 * environment-switch A/B). 2 and 8 tiles ahead measured the same as 4. A
 * plain prefetcht0 of the same lines (session 4) gained nothing, presumably because a
 * line fetched for reading still needs its ownership request when the store comes. */
static inline void prefetch_tile_out(const float *C, int64_t ldc, const float *res, int64_t ld_res, int64_t M,
                                     int64_t m, int64_t n0, int64_t w) {
    for (int64_t i = m; i < m + MR && i < M; i++) {
        if (C) {
            const char *c = (const char *)(C + i * ldc + n0);
            for (int64_t j = 0; j < w; j += 16) prefetch_for_write(c + j * 4);
            prefetch_for_write(c + (w - 1) * 4);
        }
        if (res) {
            const char *r = (const char *)(res + i * ld_res + n0);
            for (int64_t j = 0; j < w; j += 16) _mm_prefetch(r + j * 4, _MM_HINT_T0);
            _mm_prefetch(r + (w - 1) * 4, _MM_HINT_T0);
        }
    }
}

/* What every tile of one task shares. */
typedef struct tile_args {
    int64_t M, N;
    float *C;
    int64_t ldc;
    const cpu_epilogue *ep;
    bool has_ep, fusable, use512;
    float *tile;  /* 6x16 scratch for edge tiles */
    bool m_outer; /* small K: A panels outermost (run_panels) */
    bool nt;      /* full tiles of a single k-block stored non-temporally (local_task) */
    bool c_p16;   /* C, and the residual when res_p16, in the P16 layout (cpu_gemm_packed.h) */
    bool res_p16;
} tile_args;

static tile_args tile_args_make(int64_t M, int64_t N, float *C, int64_t ldc, const cpu_epilogue *ep, float *tile,
                                cpu_gemm_io io) {
    bool has_ep = ep && !cpu_epilogue_is_empty(ep);
    return (tile_args){M,    N,     C,     ldc,     ep,       has_ep, has_ep && act_in_tile(ep->act.kind),
                       cpu_gemm_avx512_usable(), tile, false, false, io.c_p16, io.res_p16 && ep && ep->residual};
}

/* The P16 layouts, for the 16 columns of B panel np: a C (or residual) pointer and row
 * stride under which the tile code's usual addressing, base + m * ld + n for n in
 * [np*16, np*16+16), lands on element (m, n) of the [N/16][M][16] block layout. So every
 * tile routine (the kernels' own stores, store_tile, the epilogue) writes P16 unchanged. */
static void p16_panel_view(const tile_args *t, int64_t np, float **C, int64_t *ldc, cpu_epilogue *ep_copy,
                           const cpu_epilogue **ep) {
    int64_t shift = np * NR * t->M - np * NR; /* block np starts at np*16*M; column n0 = np*16 is subtracted back */
    *C = t->c_p16 ? t->C + shift : t->C;
    *ldc = t->c_p16 ? NR : t->ldc;
    *ep = t->ep;
    if (t->res_p16) {
        *ep_copy = *t->ep;
        ep_copy->residual = t->ep->residual + shift;
        ep_copy->ld_res = NR;
        *ep = ep_copy;
    }
}

/* One k-block of B panels [np0, np1) (panel np at bpanels + (np - np0) * NR * kc) against
 * A panels [mp0, mp1) (panel mp at abase + mp * MR * kc): two full panels at a time through
 * the AVX-512 kernel where it runs, else one. With prefetch_b (short M: at most two
 * m-blocks, BERT's 128 rows) each B panel is used by few A panels, so the stream of B
 * from memory shows: the next panel(s) are fetched into L2 a slice per A panel while
 * these are in use. Interleaved A/B runs, 1 thread: 128x3072x768 and 128x768x3072 4-7%
 * faster, 128x768x768 unchanged; 1024x768x768 2-5% slower (B is reused from cache there),
 * hence the condition. */
static void run_panels(const tile_args *t, int64_t kc, bool first, bool last, const float *abase, int64_t mp0,
                       int64_t mp1, const float *bpanels, int64_t bstride, int64_t np0, int64_t np1, bool prefetch_b) {
    if (t->c_p16 || t->res_p16) {
        /* P16 output or residual: B panels outermost, so the tiles of one panel walk down
         * one contiguous [M][16] block (384 bytes per tile) and no output prefetch is
         * needed; the hardware prefetchers follow it. With AVX-512, two panels at a time,
         * each half of the 6x32 tile in its own block. */
        for (int64_t np = np0, step; np < np1; np += step) {
            const float *b = bpanels + (np - np0) * bstride;
            int64_t n0 = np * NR;
            step = pair_panels(t->use512, np, np1, t->N) ? 2 : 1;
            cpu_epilogue ep_copy[2];
            cpu_half_out h[2];
            for (int i = 0; i < step; i++) p16_panel_view(t, np + i, &h[i].c, &h[i].ldc, &ep_copy[i], &h[i].ep);
            int nr = (int)(t->N - n0 < NR ? t->N - n0 : NR);
            next_panels pf = next_panels_init(prefetch_b && np + step < np1 ? b + step * bstride : NULL, NR * kc,
                                              mp1 - mp0);
            bool nt = t->nt && first && last;
            for (int64_t mp = mp0; mp < mp1; mp++) {
                int64_t m0 = mp * MR;
                int mr = (int)(t->M - m0 < MR ? t->M - m0 : MR);
                next_panels_step(&pf);
                if (step == 2)
                    gemm_tile_pair(kc, abase + mp * MR * kc, b, b + bstride, mr, &h[0], &h[1], m0, n0, first,
                                   last, t->has_ep, t->fusable, nt);
                else
                    gemm_tile_one(t->use512, kc, abase + mp * MR * kc, b, t->tile, mr, nr, h[0].c, h[0].ldc, m0, n0,
                                  first, last, h[0].ep, t->has_ep, t->fusable, nt);
            }
        }
        return;
    }
    const float *pf_c = first && !t->nt ? t->C : NULL, *pf_res = last && t->has_ep ? t->ep->residual : NULL;
    int64_t ld_res = pf_res ? t->ep->ld_res : 0;
    if (t->m_outer && !t->use512) {
        /* Small K (local_task sets m_outer for K <= 64): a 6x16 tile is at most 64
         * k-steps, so its stores, epilogue and output traffic weigh about as much as its
         * FMAs. A panels outermost, each against all of the task's B panels (at most
         * 8 x 16 x 64 floats, 32 KiB): the tiles of one A panel write 6 rows x 128
         * contiguous columns instead of one 16-column strip down all M rows, and the lines
         * of the next A panel's rows are prefetched one tile's columns at a time, a panel
         * row ahead. (Prefetching a whole panel row at once at its start: conv3 with its
         * residual 2.6% slower, 8 of 8 rounds; the layers without one 3% faster.) */
        for (int64_t mp = mp0; mp < mp1; mp++) {
            int64_t m0 = mp * MR;
            int mr = (int)(t->M - m0 < MR ? t->M - m0 : MR);
            for (int64_t np = np0; np < np1; np++) {
                int64_t n0 = np * NR;
                int nr = (int)(t->N - n0 < NR ? t->N - n0 : NR);
                if ((pf_c || pf_res) && mp + 1 < mp1)
                    prefetch_tile_out(pf_c, t->ldc, pf_res, ld_res, t->M, m0 + MR, n0, nr);
                gemm_tile(kc, abase + mp * MR * kc, bpanels + (np - np0) * bstride, t->tile, mr, nr, t->C,
                             t->ldc, m0, n0, first, last, t->ep, t->has_ep, t->fusable, t->nt);
            }
        }
        return;
    }
    for (int64_t np = np0, step; np < np1; np += step) {
        const float *b = bpanels + (np - np0) * bstride;
        int64_t n0 = np * NR;
        step = pair_panels(t->use512, np, np1, t->N) ? 2 : 1;
        /* the next panels' k-block slices: contiguous when the panels are packed per
         * k-block (bstride NR * kc); a P16 B (stride NR * K) gets its first panel's slice */
        next_panels pf = next_panels_init(prefetch_b && np + step < np1 ? b + step * bstride : NULL,
                                          bstride == NR * kc ? step * NR * kc : NR * kc, mp1 - mp0);
        const cpu_half_out whole = {t->C, t->ldc, t->ep};
        int nr = (int)(t->N - n0 < NR ? t->N - n0 : NR);
        for (int64_t mp = mp0; mp < mp1; mp++) {
            int64_t m0 = mp * MR;
            int mr = (int)(t->M - m0 < MR ? t->M - m0 : MR);
            next_panels_step(&pf);
            if (pf_c || pf_res) {
                /* the tile OUT_PF_TILES ahead: further down this strip, or at the top of the next */
                int64_t tm = mp + OUT_PF_TILES, tn = n0;
                if (tm >= mp1) tm = mp0 + (tm - mp1), tn = n0 + step * NR;
                if (tm < mp1 && tn < t->N)
                    prefetch_tile_out(pf_c, t->ldc, pf_res, ld_res, t->M, tm * MR, tn,
                                      t->N - tn < NR * step ? t->N - tn : NR * step);
            }
            /* streaming stores as the AVX2 tiles get them (local_task says when): on the GPU
             * host's Xeon the AVX-512 pairs without them were 15-17% slower on 64 -> 256 at
             * 56x56 with the residual, 5-8% on the K = 256 convs there (docs/BENCHMARKS.md,
             * "Session 8") */
            if (step == 2)
                gemm_tile_pair(kc, abase + mp * MR * kc, b, b + bstride, mr, &whole, &whole, m0, n0, first,
                               last, t->has_ep, t->fusable, t->nt && first && last);
            else
                gemm_tile_one(t->use512, kc, abase + mp * MR * kc, b, t->tile, mr, nr, t->C, t->ldc, m0, n0, first,
                              last, t->ep, t->has_ep, t->fusable, t->nt && first && last);
        }
    }
}

/* One output block: A panels [mp0, mp1) x B panels [np0, np1), all k-blocks. */
static void gemm_block(const gemm_task_job *j, int64_t mp0, int64_t mp1, int64_t np0, int64_t np1, float *tile) {
    tile_args t = tile_args_make(j->M, j->N, j->C, j->ldc, j->ep, tile, j->io);
    for (int64_t k0 = 0, kb = kc_block(j->K); k0 < j->K; k0 += kb) {
        int64_t kc = j->K - k0 < kb ? j->K - k0 : kb;
        /* packed: k-block k0 of panel p at k0 * Npad + p * 16 * kc; P16: rows k0.. of panel
         * p at p * 16 * K + k0 * 16 (the same [kc][16] panel shape, a longer stride) */
        const float *b = j->io.b_p16 ? j->pb + np0 * NR * j->K + k0 * NR : j->pb + k0 * j->Npad + np0 * NR * kc;
        run_panels(&t, kc, k0 == 0, k0 + kc >= j->K, j->pa + k0 * j->Mpad, mp0, mp1, b,
                   j->io.b_p16 ? NR * j->K : NR * kc, np0, np1, j->m_blocks <= 2);
    }
}

static void gemm_tasks_run(void *user, int64_t t0, int64_t t1) {
    const gemm_task_job *j = user;
    _Alignas(64) float tile[MR * NR];
    for (int64_t t = t0; t < t1; t++) {
        int64_t mb = t % j->m_blocks, nb = t / j->m_blocks;
        int64_t mp0 = mb * j->mc, mp1 = mp0 + j->mc;
        int64_t np0 = nb * NC_PANELS, np1 = np0 + NC_PANELS;
        if (mp1 * MR > j->Mpad) mp1 = j->Mpad / MR;
        if (np1 * NR > j->Npad) np1 = j->Npad / NR;
        gemm_block(j, mp0, mp1, np0, np1, tile);
    }
}

int64_t cpu_sgemm_inline_scratch(int64_t M, int64_t N, int64_t K) {
    if (!size_ok(round_up(M, MR) + round_up(N, NR), K)) return -1;
    return round_up(round_up(M, MR) * K, 16) + round_up(N, NR) * K;
}

/* cpu_sgemm_inline and _bt: B given as [K, N] rows (b_trans false) or as its transpose
 * [N, K] (b_trans true). */
static void sgemm_inline(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                         bool b_trans, float *C, int64_t ldc, const cpu_epilogue *ep, float *scratch) {
    int64_t Mpad = round_up(M, MR), Npad = round_up(N, NR);
    float *pa = scratch, *pb = scratch + round_up(Mpad * K, 16); /* both 64-byte aligned */
    pack_job ja = {A, lda, M, K, Mpad, pa}, jb = {B, ldb, N, K, Npad, pb};
    pack_a_run(&ja, 0, Mpad / MR);
    if (!b_trans) pack_b_run(&jb, 0, Npad / NR);
    else
        for (int64_t k0 = 0, kb = kc_block(K); k0 < K; k0 += kb) {
            int64_t kc = K - k0 < kb ? K - k0 : kb;
            for (int64_t p = 0; p < Npad / NR; p++)
                pack_bt_panel(B + p * NR * ldb + k0, ldb, N - p * NR < NR ? N - p * NR : NR, kc,
                              pb + k0 * Npad + p * NR * kc);
        }
    gemm_task_job j = {M, N, K, Mpad, Npad, 1, 1, MC_PANELS, pa, pb, C, ldc, ep, {0}};
    _Alignas(64) float tile[MR * NR];
    for (int64_t mp0 = 0; mp0 < Mpad / MR; mp0 += MC_PANELS)
        for (int64_t np0 = 0; np0 < Npad / NR; np0 += NC_PANELS)
            gemm_block(&j, mp0, mp0 + MC_PANELS < Mpad / MR ? mp0 + MC_PANELS : Mpad / MR, np0,
                       np0 + NC_PANELS < Npad / NR ? np0 + NC_PANELS : Npad / NR, tile);
}

void cpu_sgemm_inline(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, const cpu_epilogue *ep, float *scratch) {
    sgemm_inline(M, N, K, A, lda, B, ldb, false, C, ldc, ep, scratch);
}

void cpu_sgemm_inline_bt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bt,
                         int64_t ldbt, float *C, int64_t ldc, const cpu_epilogue *ep, float *scratch) {
    sgemm_inline(M, N, K, A, lda, Bt, ldbt, true, C, ldc, ep, scratch);
}

static float *scratch_get(cpu_gemm_scratch *s, int64_t n) {
    if ((size_t)n > s->cap) {
        free(s->data);
        s->data = alloc_floats(n);
        s->cap = s->data ? (size_t)n : 0;
    }
    return s->data;
}

static kiln_status run_tasks(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *PA,
                             const float *PB, float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_io io) {
    int64_t Mpad = round_up(M, MR), Npad = round_up(N, NR);
    gemm_task_job j = {M, N, K, Mpad, Npad, 0, 0, MC_PANELS, PA, PB, C, ldc, ep, io};
    j.n_blocks = (Npad / NR + NC_PANELS - 1) / NC_PANELS;
    /* Up to 24 A panels (BERT's 128 rows: 22) make one m-block when the column blocks
     * alone give each thread 4 or more tasks: every B panel, streamed from memory
     * (BERT-base's 340 MB of weights), then meets all rows once instead of once per
     * 72-row block, and the 132 x kc A block (132 KiB) still fits L2. bench_layers, BERT's
     * four GEMM shapes, A/B alternating: 1 thread (6 rounds, cold, thread clock) 17.73 ->
     * 17.33 ms, faster in 19 of 24 layer-rounds (the FFN GEMMs 6 of 6); at 2 threads the
     * 768-column GEMMs (6 column blocks) lost 11% (1 of 8) with the larger tasks. */
    if (Mpad / MR <= 2 * MC_PANELS && j.n_blocks >= 4 * (int64_t)cpu_threadpool_size(pool)) j.mc = Mpad / MR;
    j.m_blocks = (Mpad / MR + j.mc - 1) / j.mc;
    /* one task per hand-out: a GEMM has tens to hundreds of ~0.1-2 ms tasks, and whole
     * chunks of them (cpu_parallel_for) left a thread idle at the end of every GEMM */
    cpu_parallel_for_each(pool, j.m_blocks * j.n_blocks, gemm_tasks_run, &j);
    return KILN_OK;
}

typedef struct fn_pack_job {
    cpu_gemm_pack_b_fn fn;
    void *user;
    int64_t K, Npad;
    float *dst;
} fn_pack_job;

static void fn_pack_run(void *user, int64_t p0, int64_t p1) {
    const fn_pack_job *j = user;
    for (int64_t p = p0; p < p1; p++)
        for (int64_t k0 = 0, kb = kc_block(j->K); k0 < j->K; k0 += kb) {
            int64_t kc = j->K - k0 < kb ? j->K - k0 : kb;
            j->fn(j->user, p, k0, kc, j->dst + k0 * j->Npad + p * NR * kc);
        }
}

/* Whether pa is a packed A of M x K (else the error says so). */
static bool packed_a_matches(const cpu_gemm_packed *pa, int64_t M, int64_t K, kiln_error *err) {
    if (pa && !pa->is_b && pa->rows == M && pa->K == K) return true;
    kiln_err_set(err, KILN_ERR_INTERNAL, "packed A does not match the GEMM (%lldx%lld)", (long long)M, (long long)K);
    return false;
}

/* Packs all of row-major B [K, N] (row stride ldb) into scratch, in parallel; *out gets it. */
static kiln_status pack_b_whole(cpu_threadpool *pool, const float *B, int64_t ldb, int64_t N, int64_t K,
                                cpu_gemm_scratch *scratch, float **out, kiln_error *err) {
    int64_t Npad = round_up(N, NR);
    if (!size_ok(Npad, K)) return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM operand too large to pack");
    float *d = scratch_get(scratch, Npad * K);
    if (!d) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM operand");
    pack_job j = {B, ldb, N, K, Npad, d};
    cpu_parallel_for(pool, Npad / NR, 4, pack_b_run, &j);
    *out = d;
    return KILN_OK;
}

kiln_status cpu_sgemm_packed_a_fn(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                                  cpu_gemm_pack_b_fn pack_b, void *pack_user, float *C, int64_t ldc,
                                  const cpu_epilogue *ep, cpu_gemm_scratch *scratch, kiln_error *err) {
    int64_t Npad = round_up(N, NR);
    if (!packed_a_matches(pa, M, K, err)) return KILN_ERR_INTERNAL;
    if (!size_ok(Npad, K)) return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM operand too large to pack");
    float *d = scratch_get(scratch, Npad * K);
    if (!d) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM operand");
    fn_pack_job j = {pack_b, pack_user, K, Npad, d};
    cpu_parallel_for(pool, Npad / NR, 2, fn_pack_run, &j);
    return run_tasks(pool, M, N, K, pa->data, d, C, ldc, ep, (cpu_gemm_io){0});
}

kiln_status cpu_sgemm_packed(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                             const float *A, int64_t lda, const cpu_gemm_packed *pb, const float *B, int64_t ldb,
                             float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                             kiln_error *err) {
    int64_t Mpad = round_up(M, MR);
    const float *PA, *PB;
    if (pa) {
        if (pa->is_b || pa->rows != M || pa->K != K)
            return kiln_err_set(err, KILN_ERR_INTERNAL, "packed A is %lldx%lld, GEMM wants %lldx%lld",
                                (long long)pa->rows, (long long)pa->K, (long long)M, (long long)K);
        float *d = NULL;
        kiln_status st = pack_b_whole(pool, B, ldb, N, K, scratch, &d, err);
        if (st != KILN_OK) return st;
        PA = pa->data;
        PB = d;
    } else {
        if (!pb || !pb->is_b || pb->rows != N || pb->K != K)
            return kiln_err_set(err, KILN_ERR_INTERNAL, "packed B does not match the GEMM (%lldx%lld)",
                                (long long)K, (long long)N);
        if (!size_ok(Mpad, K)) return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM operand too large to pack");
        float *d = scratch_get(scratch, Mpad * K);
        if (!d) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM operand");

        pack_job j = {A, lda, M, K, Mpad, d};
        cpu_parallel_for(pool, Mpad / MR, 4, pack_a_run, &j);
        PA = d;
        PB = pb->data;
    }
    return run_tasks(pool, M, N, K, PA, PB, C, ldc, ep, (cpu_gemm_io){0});
}

/* ---- B packed inside each task (added for Conv; s2-conv) ------------------------------ */

/* cpu_sgemm_packed_a_fn packs all of B before the first tile. When B is large (ResNet's
 * 56x56 1x1 convs: 256 x 3136 floats = 3.2 MB; the 7x7/2 stem: 147 x 12544 = 7.4 MB) the
 * packed copy goes out to memory and comes back, costing about as much as the copy
 * itself. Here one task owns 128 columns (NC_PANELS panels) and all M rows: per k-block it
 * packs its 128 x kc slice of B into its thread's buffer (at most 160 KiB, stays in L2)
 * and runs every A panel against it, so B is read once from the source and never written
 * to memory. Worth it when A (the packed weights, read once per task from L2/L3) is
 * small next to B and there are enough column blocks to share among the threads. */

typedef struct local_job {
    int64_t M, N, K, Mpad;
    const float *pa;
    cpu_gemm_pack_b_fn pack_b;
    void *pack_user;
    float *C;
    int64_t ldc;
    const cpu_epilogue *ep;
    float *bufs;      /* one per slot: NC_PANELS * NR * kc_block(K) floats */
    int64_t buf_floats, n_tasks;
    _Atomic int64_t next;
    const float *rows_b; /* non-NULL: B is row-major [K, N] (row stride rows_ld), packed by rows */
    int64_t rows_ld;
    bool nt_ok; /* C may be stored non-temporally (local_task) */
    cpu_gemm_io io;
} local_job;

static void local_task(const local_job *j, int64_t nb, float *buf) {
    _Alignas(64) float tile[MR * NR];
    tile_args t = tile_args_make(j->M, j->N, j->C, j->ldc, j->ep, tile, j->io);
    int64_t np0 = nb * NC_PANELS, np1 = np0 + NC_PANELS, Np = round_up(j->N, NR) / NR;
    if (np1 > Np) np1 = Np;
    /* K <= 64: the small-K tile order of run_panels (one k-block). K = 128 (ResNet-50's
     * stage-2 conv3, 128 -> 512 at 28x28) measured no better in it (base vs this: 0 of 10
     * rounds won, +1% on minima with a clean flush; 4 of 10, +6% on medians with a dirty
     * one), its 64 KiB B block no longer fitting L1 in this order. MobileNetV2's K = 16-32
     * convs at 112x112 gain from it too (in the network, 8 rounds: expand_1 16 -> 96
     * 1.42 -> 1.32 ms and project_1 32 -> 16 0.31 -> 0.26 ms, faster in 8 of 8).
     * 64 <= K <= 256 (one k-block) and nt_ok: non-temporal stores of C, in either order. Why:
     * ResNet-50's 56x56 1x1 convs write 0.8-3.2 MB of C per image, and inside the network
     * the caches are full of dirty activations, so every C line read for ownership also
     * costs a writeback; streamed, C goes out without being read. Its consumer (the next
     * block's conv1 or the next conv3's residual) then reads it from memory, which its
     * row-wise B packing and the residual prefetch mostly cover (2-5% slower there).
     * In the network, 1 thread, thread CPU time, 8 ABBA rounds: the 64 -> 256 convs
     * -11..-15%, 64 -> 64 -10%; at K = 256 (256 -> 64, 256 -> 128 at 56x56) -1..-3% (5-8 of
     * 8 rounds). Not below K = 64: a tile of 16 k-steps emits its 6 output lines 4x as
     * often, and MobileNetV2's expand_1 (K = 16, 4.8 MB of C, read next by a depthwise
     * conv) measured 14-25% slower on medians with streaming stores.
     * docs/BENCHMARKS.md, "Session 5: small-K pointwise convs", has the rest. */
    t.m_outer = j->K <= 64;
    t.nt = j->nt_ok && j->K >= 64 && j->K <= 256;
    for (int64_t k0 = 0, kb = kc_block(j->K); k0 < j->K; k0 += kb) {
        int64_t kc = j->K - k0 < kb ? j->K - k0 : kb;
        if (j->rows_b) pack_b_rows(j->rows_b, j->rows_ld, j->N, np0, np1, k0, kc, buf);
        else
            for (int64_t np = np0; np < np1; np++) j->pack_b(j->pack_user, np, k0, kc, buf + (np - np0) * NR * kc);
        run_panels(&t, kc, k0 == 0, k0 + kc >= j->K, j->pa + k0 * j->Mpad, 0, j->Mpad / MR, buf, NR * kc, np0, np1,
                   false);
    }
    /* streaming stores are weakly ordered: make them visible before the task is reported done */
    if (t.nt) _mm_sfence();
}

static void local_slots_run(void *user, int64_t s0, int64_t s1) {
    local_job *j = user;
    for (int64_t s = s0; s < s1; s++)
        for (;;) {
            int64_t t = atomic_fetch_add(&j->next, 1);
            if (t >= j->n_tasks) break;
            local_task(j, t, j->bufs + s * j->buf_floats);
        }
}

bool cpu_sgemm_local_b_preferred(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K) {
    int64_t n_blocks = (round_up(N, NR) / NR + NC_PANELS - 1) / NC_PANELS;
    uint64_t b_bytes = (uint64_t)N * (uint64_t)K * 4, a_bytes = (uint64_t)M * (uint64_t)K * 4;
    /* enough column blocks for the threads, and a B worth not writing out (> L2) that is
     * larger than the A each task re-reads. */
    /* At least 2 column blocks per thread: with 4 (the first rule), ResNet-50's 28x28
     * layers (N = 784: 7 blocks) took the pack-all-of-B path at 2 threads only, and ran
     * 7-20% slower per layer there than with per-task B (bench_layers, 2 threads, batch 1,
     * per-layer minima of 15 x 3 rounds, two runs at load 0.8-0.9: layer2.x.conv1 0.64-0.73
     * -> 0.58 ms, layer2.0's 3x3/2 1.64-1.86 -> 1.61-1.63 ms, layer2.0.downsample 1.34 ->
     * 1.21 ms). At 1 thread nothing changes for ResNet-50 (those layers had 7 >= 4). */
    return n_blocks >= 2 * (int64_t)cpu_threadpool_size(pool) && b_bytes > (512u << 10) && b_bytes > a_bytes;
}

/* The smallest C the GEMM streams past the caches: at least 512 KiB, and never a C that
 * fits the core's L2, where its consumer (the next layer, usually) would have found it.
 * Why: on the Zen 3 dev machine (512 KiB L2) streaming every C of 512 KiB or more paid
 * (local_task), but on the Sapphire Rapids-class VM (2 MiB L2) it sent the 0.8 MiB outputs
 * of ResNet-50's 56x56 conv1s to memory just before the Winograd conv2 read them back
 * (docs/BENCHMARKS.md "Session 13"). KILN_GEMM_NT_MIN=BYTES overrides it (A/B runs). */
static uint64_t nt_min_bytes(void) {
    static _Atomic int64_t cached = -1;
    int64_t c = cached;
    if (c < 0) {
        const char *e = getenv("KILN_GEMM_NT_MIN");
        int64_t l2 = cpu_l2_bytes();
        c = e && *e ? atoll(e) : l2 > (512 << 10) ? l2 : (512 << 10);
        cached = c;
    }
    return (uint64_t)c;
}

/* KILN_GEMM_NT=0 in the environment keeps C's stores ordinary (A/B measurements). */
static bool nt_enabled(void) {
    static _Atomic int cached = -1;
    return cpu_env_switch("KILN_GEMM_NT", &cached);
}

static kiln_status run_local(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                             cpu_gemm_pack_b_fn pack_b, void *pack_user, const float *rows_b, int64_t rows_ld,
                             float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_io io, cpu_gemm_scratch *scratch,
                             kiln_error *err) {
    if (!packed_a_matches(pa, M, K, err)) return KILN_ERR_INTERNAL;
    int64_t threads = cpu_threadpool_size(pool);
    int64_t n_tasks = (round_up(N, NR) / NR + NC_PANELS - 1) / NC_PANELS;
    int64_t n_slots = threads < n_tasks ? threads : n_tasks;
    int64_t buf_floats = NC_PANELS * NR * kc_block(K);
    float *d = scratch_get(scratch, n_slots * buf_floats);
    if (!d) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM operand");
    /* Non-temporal C only where nothing reads it back during the GEMM (an epilogue applied
     * after the tile store, GELU over the stored tile) and where it would not stay in L2
     * for its consumer anyway (nt_min_bytes). */
    bool has_ep = ep && !cpu_epilogue_is_empty(ep);
    bool nt_ok = (!has_ep || act_in_tile(ep->act.kind)) &&
                 !(has_ep && (ep->act.kind == CPU_ACT_GELU || ep->act.kind == CPU_ACT_GELU_TANH)) &&
                 (uint64_t)M * (uint64_t)N * sizeof(float) >= nt_min_bytes() && nt_enabled();
    local_job j = {M,  N,          K,       round_up(M, MR), pa->data, pack_b, pack_user, C, ldc, ep, d,
                   buf_floats, n_tasks, 0, rows_b, rows_ld, nt_ok, io};
    cpu_parallel_for(pool, n_slots, 1, local_slots_run, &j);
    return KILN_OK;
}

kiln_status cpu_sgemm_packed_a_fn_local(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K,
                                        const cpu_gemm_packed *pa, cpu_gemm_pack_b_fn pack_b, void *pack_user,
                                        float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                                        kiln_error *err) {
    return run_local(pool, M, N, K, pa, pack_b, pack_user, NULL, 0, C, ldc, ep, (cpu_gemm_io){0}, scratch, err);
}

kiln_status cpu_sgemm_packed_a_rows_local(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K,
                                          const cpu_gemm_packed *pa, const float *B, int64_t ldb, float *C,
                                          int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                                          kiln_error *err) {
    return run_local(pool, M, N, K, pa, NULL, NULL, B, ldb, C, ldc, ep, (cpu_gemm_io){0}, scratch, err);
}

kiln_status cpu_sgemm_conv1x1(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                              const float *B, float *C, const cpu_epilogue *ep, cpu_gemm_io io,
                              cpu_gemm_scratch *scratch, kiln_error *err) {
    if (!packed_a_matches(pa, M, K, err)) return KILN_ERR_INTERNAL;
    io.res_p16 = io.res_p16 && ep && ep->residual;
    if ((io.b_p16 || io.c_p16 || io.res_p16) && N % NR != 0)
        return kiln_err_set(err, KILN_ERR_INTERNAL, "P16 layout needs a multiple of 16 columns (got %lld)",
                            (long long)N);
    if (io.b_p16) {
        /* the kernels load B panels with aligned loads */
        if (((uintptr_t)B & 31) != 0)
            return kiln_err_set(err, KILN_ERR_INTERNAL, "P16 operand is not 32-byte aligned");
        return run_tasks(pool, M, N, K, pa->data, B, C, N, ep, io);
    }
    if (cpu_sgemm_local_b_preferred(pool, M, N, K))
        return run_local(pool, M, N, K, pa, NULL, NULL, B, N, C, N, ep, io, scratch, err);
    float *d = NULL;
    kiln_status st = pack_b_whole(pool, B, N, N, K, scratch, &d, err);
    return st != KILN_OK ? st : run_tasks(pool, M, N, K, pa->data, d, C, N, ep, io);
}
