/* cpu_attention_fast_avx2.c - fused float32 attention (cpu_attention_fast.h), AVX2 + FMA.
 *
 * Work items are (batch, head, block of up to 128 query rows). Each item:
 *   1. P = Q_blk K^T        cpu_sgemm_inline_bt: K is read as stored ([T, D] rows), no
 *                           transposed copy of K is made;
 *   2. per row of P: x = scale * x + bias, max, exp(x - max) and its sum (the vector exp
 *      of cpu_activation_fast.h, as the Softmax kernel uses), times 1 / sum: the block of
 *      scores (128 x T floats, 64 KiB at T = 128) stays in L2 from the GEMM to here;
 *   3. Y_blk = P V          cpu_sgemm_inline, written straight into the output rows of
 *                           this head (row stride y_ss), so no head-merge transpose.
 * Why fused: BERT-base's unfused attention per layer is 4 transposes, 2 batched MatMuls,
 * Div, Add and Softmax, each a pass over memory; the [B, 12, 128, 128] scores alone are
 * written and read three times.
 *
 * Threading: one worker per pool thread pulls items from an atomic counter, so each
 * worker allocates its scratch (packed operands, the score block, a bias row) once and
 * a slow worker never holds a fixed share of the items.
 */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_activation_fast.h"
#include "backends/cpu/cpu_attention_fast.h"
#include "backends/cpu/cpu_gemm_packed.h"
#include "core/alloc.h"

#define QBLOCK 128 /* query rows per item: the 6x16 kernel's A panels of one block stay in L2 */
/* Score block cap per worker (16 MiB): long key sequences get fewer query rows per item,
 * so a 1M-key attention needs 4 rows x 1M floats per thread, not 128 x 1M (512 MiB). */
#define SCORE_CAP_FLOATS (1 << 22)

typedef struct att_fast_job {
    const cpu_att_problem *p;
    const cpu_vmath *vm;
    int64_t qb, n_qb, n_items;
    int64_t gemm_floats, score_floats; /* per worker */
    atomic_llong next;
    atomic_int failed;
} att_fast_job;

/* The additive bias of query row i of (b, h), or NULL when there is none. Points into the
 * mask when it is a contiguous float row already; otherwise built into buf by the same
 * rules as the reference loop (cpu_attention.c). */
static const float *row_bias(const cpu_att_problem *p, int64_t b, int64_t h, int64_t i, float *buf) {
    bool mask = p->maskf || p->maskb;
    if (!mask && !p->causal) return NULL;
    int64_t base = b * p->mstr[0] + h * p->mstr[1] + i * p->mstr[2];
    if (p->maskf && !p->causal && p->mstr[3] == 1 && p->mlen == p->T) return p->maskf + base;
    for (int64_t t = 0; t < p->T; t++) {
        float v = 0.f;
        if (mask) {
            if (t >= p->mlen) v = -INFINITY;
            else {
                int64_t mi = base + t * p->mstr[3];
                v = p->maskb ? (p->maskb[mi] ? 0.f : -INFINITY) : p->maskf[mi];
            }
        }
        if (p->causal && t > i) v = -INFINITY;
        buf[t] = v;
    }
    return buf;
}

/* x = softmax(scale * x + bias) in place over n floats. A row whose every entry is -inf
 * (fully masked) becomes zeros. */
static void softmax_row(const cpu_vmath *vm, float *x, int64_t n, float scale, const float *bias) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t t = 0;
    if (bias)
        for (; t + 8 <= n; t += 8) {
            __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + t), vs, _mm256_loadu_ps(bias + t));
            _mm256_storeu_ps(x + t, v);
            vmax = _mm256_max_ps(vmax, v);
        }
    else
        for (; t + 8 <= n; t += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + t), vs);
            _mm256_storeu_ps(x + t, v);
            vmax = _mm256_max_ps(vmax, v);
        }
    _Alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = -INFINITY;
    for (int i = 0; i < 8; i++) mx = lanes[i] > mx ? lanes[i] : mx;
    for (; t < n; t++) {
        x[t] = bias ? x[t] * scale + bias[t] : x[t] * scale;
        if (x[t] > mx) mx = x[t];
    }
    if (mx == -INFINITY) {
        memset(x, 0, sizeof(float) * (size_t)n);
        return;
    }
    float sum = vm->exp_shift_sum(x, x, n, mx);
    const __m256 inv = _mm256_set1_ps(sum > 0.f ? 1.f / sum : 1.f);
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(x + t, _mm256_mul_ps(_mm256_loadu_ps(x + t), inv));
    for (; t < n; t++) x[t] *= sum > 0.f ? 1.f / sum : 1.f;
}

static void att_item(const att_fast_job *j, int64_t item, float *gemm, float *scores, float *bias_buf) {
    const cpu_att_problem *p = j->p;
    int64_t blk = item % j->n_qb, bh = item / j->n_qb;
    int64_t b = bh / p->Hq, h = bh % p->Hq, hk = h / (p->Hq / p->Hkv);
    int64_t i0 = blk * j->qb, m = p->S - i0 < j->qb ? p->S - i0 : j->qb;
    const float *q = p->q.p + b * p->q.sb + h * p->q.sh + i0 * p->q.ss;
    const float *k = p->k.p + b * p->k.sb + hk * p->k.sh;
    const float *v = p->v.p + b * p->v.sb + hk * p->v.sh;
    cpu_sgemm_inline_bt(m, p->T, p->Dq, q, p->q.ss, k, p->k.ss, scores, p->T, NULL, gemm);
    for (int64_t r = 0; r < m; r++)
        softmax_row(j->vm, scores + r * p->T, p->T, p->scale, row_bias(p, b, h, i0 + r, bias_buf));
    cpu_sgemm_inline(m, p->Dv, p->T, scores, p->T, v, p->v.ss, p->y + b * p->y_sb + h * p->y_sh + i0 * p->y_ss,
                     p->y_ss, NULL, gemm);
}

static void att_worker(void *user, int64_t w0, int64_t w1) {
    (void)w0, (void)w1;
    att_fast_job *j = user;
    /* gemm scratch, then the score block, then a bias row; each part 64-byte aligned */
    size_t g = (size_t)(j->gemm_floats + 15) & ~(size_t)15, s = (size_t)(j->score_floats + 15) & ~(size_t)15;
    size_t bytes = ((g + s + (size_t)j->p->T + 16) * sizeof(float) + 63) & ~(size_t)63; /* C11: a multiple of 64 */
    float *buf = aligned_alloc(64, bytes);
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    for (;;) {
        int64_t item = atomic_fetch_add(&j->next, 1);
        if (item >= j->n_items) break;
        att_item(j, item, buf, buf + g, buf + g + s);
    }
    free(buf);
}

kiln_status cpu_attention_fast(cpu_threadpool *pool, const cpu_att_problem *p, kiln_error *err) {
    if (p->B <= 0 || p->Hq <= 0 || p->S <= 0) return KILN_OK;
    int64_t n_qb = (p->S + QBLOCK - 1) / QBLOCK;
    int64_t qb = (p->S + n_qb - 1) / n_qb;
    if (qb * p->T > SCORE_CAP_FLOATS) {
        qb = SCORE_CAP_FLOATS / p->T > 0 ? SCORE_CAP_FLOATS / p->T : 1;
        n_qb = (p->S + qb - 1) / qb;
    }
    int64_t g1 = cpu_sgemm_inline_scratch(qb, p->T, p->Dq), g2 = cpu_sgemm_inline_scratch(qb, p->Dv, p->T);
    uint64_t items, scores;
    if (g1 < 0 || g2 < 0 || kiln_mul_overflow_u64((uint64_t)(p->B * p->Hq), (uint64_t)n_qb, &items) ||
        kiln_mul_overflow_u64((uint64_t)qb, (uint64_t)p->T, &scores) || scores > (1ull << 32))
        return kiln_err_set(err, KILN_ERR_LIMIT, "attention of %lld queries x %lld keys is too large",
                            (long long)p->S, (long long)p->T);
    att_fast_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.vm = cpu_vmath_get();
    j.qb = qb;
    j.n_qb = n_qb;
    j.n_items = (int64_t)items;
    j.gemm_floats = g1 > g2 ? g1 : g2;
    j.score_floats = (int64_t)scores;
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    int64_t workers = cpu_threadpool_size(pool);
    if (workers < 1) workers = 1;
    if (workers > j.n_items) workers = j.n_items;
    cpu_parallel_for_each(pool, workers, att_worker, &j);
    /* a worker that could not allocate did no items; the others did all of them, unless
     * every worker failed */
    if (atomic_load(&j.failed) && atomic_load(&j.next) < j.n_items)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory for attention scratch (%lld floats per thread)",
                            (long long)(j.gemm_floats + j.score_floats));
    return KILN_OK;
}
