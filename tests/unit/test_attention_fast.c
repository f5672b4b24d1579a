/* test_attention_fast.c - the fused float32 attention (cpu_attention_fast.h) against a
 * direct double-precision reference: rank-3 ([B, S, H*D]), rank-4 ([B, H, S, D]) and
 * merged-Q/K/V ([B, S, 3*H*D]) layouts, grouped-query heads, causal, float masks
 * (per batch, per query row, narrower than the keys), bool masks, a fully masked row
 * (zeros), more queries than one 128-row block, key lengths and head sizes that are not
 * multiples of the 8/16-wide tiles, Dq != Dv, keys long enough that the per-thread score
 * block is capped (fewer query rows per item), on 1 and 3 pool threads. Also the
 * transposed-B inline GEMM it is built on (cpu_sgemm_inline_bt). Skips (with a printed
 * reason) without AVX2+FMA.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/cpu/cpu_attention_fast.h"
#include "backends/cpu/cpu_gemm_packed.h"

static uint32_t rng = 777;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.f - 1.f;
}

typedef enum { LAYOUT_3D, LAYOUT_4D, LAYOUT_QKV } layout;
typedef enum { MASK_NONE, MASK_BATCH, MASK_ROWS, MASK_NARROW, MASK_BOOL, MASK_ROW_DEAD } mask_kind;

typedef struct att_case {
    int64_t B, Hq, Hkv, S, T, Dq, Dv;
    layout lay;
    mask_kind mask;
    bool causal;
} att_case;

/* Element offset of (b, h, s, d) for an operand with H heads of size D in length N. */
static cpu_att_operand operand(const float *base, layout lay, int64_t H, int64_t N, int64_t D, int64_t row) {
    if (lay == LAYOUT_4D) return (cpu_att_operand){base, H * N * D, N * D, D};
    return (cpu_att_operand){base, N * row, D, row};
}

static double ref_at(const cpu_att_operand *o, int64_t b, int64_t h, int64_t s, int64_t d) {
    return o->p[b * o->sb + h * o->sh + s * o->ss + d];
}

/* Runs one case and returns the largest |fused - reference| over all outputs. */
static double run_case(const att_case *c, int threads) {
    if (c->lay == LAYOUT_QKV) assert_true(c->S == c->T && c->Hq == c->Hkv && c->Dq == c->Dv);
    int64_t qn = c->B * c->S * c->Hq * c->Dq, kn = c->B * c->T * c->Hkv * c->Dq, vn = c->B * c->T * c->Hkv * c->Dv;
    int64_t yn = c->B * c->S * c->Hq * c->Dv;
    float *buf = malloc(sizeof(float) * (size_t)(qn + kn + vn));
    for (int64_t i = 0; i < qn + kn + vn; i++) buf[i] = frand();
    cpu_att_problem p;
    memset(&p, 0, sizeof p);
    p.B = c->B, p.Hq = c->Hq, p.Hkv = c->Hkv, p.S = c->S, p.T = c->T, p.Dq = c->Dq, p.Dv = c->Dv;
    if (c->lay == LAYOUT_QKV) {
        int64_t row = 3 * c->Hq * c->Dq; /* q, k, v thirds of one packed row */
        p.q = operand(buf, LAYOUT_3D, c->Hq, c->S, c->Dq, row);
        p.k = operand(buf + c->Hq * c->Dq, LAYOUT_3D, c->Hq, c->S, c->Dq, row);
        p.v = operand(buf + 2 * c->Hq * c->Dq, LAYOUT_3D, c->Hq, c->S, c->Dq, row);
    } else {
        p.q = operand(buf, c->lay, c->Hq, c->S, c->Dq, c->Hq * c->Dq);
        p.k = operand(buf + qn, c->lay, c->Hkv, c->T, c->Dq, c->Hkv * c->Dq);
        p.v = operand(buf + qn + kn, c->lay, c->Hkv, c->T, c->Dv, c->Hkv * c->Dv);
    }
    float *y = malloc(sizeof(float) * (size_t)yn);
    for (int64_t i = 0; i < yn; i++) y[i] = NAN; /* every output must be written */
    p.y = y;
    if (c->lay == LAYOUT_4D) p.y_sb = c->Hq * c->S * c->Dv, p.y_sh = c->S * c->Dv, p.y_ss = c->Dv;
    else p.y_sb = c->S * c->Hq * c->Dv, p.y_sh = c->Dv, p.y_ss = c->Hq * c->Dv;
    p.scale = 1.f / sqrtf((float)c->Dq);
    p.causal = c->causal;
    float *mf = NULL;
    uint8_t *mb = NULL;
    p.mlen = c->T;
    switch (c->mask) {
    case MASK_NONE: break;
    case MASK_BATCH: /* [B, 1, 1, T]: BERT's padding mask */
        mf = malloc(sizeof(float) * (size_t)(c->B * c->T));
        for (int64_t i = 0; i < c->B * c->T; i++) mf[i] = i % 5 == 3 ? -10000.f : 0.f;
        p.mstr[0] = c->T, p.mstr[3] = 1;
        break;
    case MASK_ROWS: /* [S, T] broadcast over batch and heads */
    case MASK_ROW_DEAD:
        mf = malloc(sizeof(float) * (size_t)(c->S * c->T));
        for (int64_t i = 0; i < c->S * c->T; i++) mf[i] = frand() * 3.f;
        if (c->mask == MASK_ROW_DEAD)
            for (int64_t t = 0; t < c->T; t++) mf[1 * c->T + t] = -INFINITY; /* query row 1 sees nothing */
        p.mstr[2] = c->T, p.mstr[3] = 1;
        break;
    case MASK_NARROW: /* [B, Hq, S, T-3]: keys past the mask are -inf */
        p.mlen = c->T - 3;
        mf = malloc(sizeof(float) * (size_t)(c->B * c->Hq * c->S * p.mlen));
        for (int64_t i = 0; i < c->B * c->Hq * c->S * p.mlen; i++) mf[i] = frand();
        p.mstr[0] = c->Hq * c->S * p.mlen, p.mstr[1] = c->S * p.mlen, p.mstr[2] = p.mlen, p.mstr[3] = 1;
        break;
    case MASK_BOOL: /* [B, 1, S, T] */
        mb = malloc((size_t)(c->B * c->S * c->T));
        for (int64_t i = 0; i < c->B * c->S * c->T; i++) mb[i] = (uint8_t)(i % 7 != 2);
        p.mstr[0] = c->S * c->T, p.mstr[2] = c->T, p.mstr[3] = 1;
        break;
    }
    p.maskf = mf, p.maskb = mb;

    cpu_threadpool *pool = NULL;
    kiln_error e = {0};
    if (threads > 1) assert_int_equal(cpu_threadpool_create(threads, &pool, &e), KILN_OK);
    assert_int_equal(cpu_attention_fast(pool, &p, &e), KILN_OK);
    cpu_threadpool_free(pool);

    double worst = 0.0, *row = malloc(sizeof(double) * (size_t)c->T);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++) {
            int64_t hk = h / (c->Hq / c->Hkv);
            for (int64_t i = 0; i < c->S; i++) {
                double mx = -INFINITY;
                for (int64_t t = 0; t < c->T; t++) {
                    double s = 0.0;
                    for (int64_t d = 0; d < c->Dq; d++) s += ref_at(&p.q, b, h, i, d) * ref_at(&p.k, b, hk, t, d);
                    s *= p.scale;
                    int64_t mi = b * p.mstr[0] + h * p.mstr[1] + i * p.mstr[2] + t * p.mstr[3];
                    if (mf) s += t < p.mlen ? mf[mi] : -INFINITY;
                    if (mb && !mb[mi]) s = -INFINITY;
                    if (c->causal && t > i) s = -INFINITY;
                    row[t] = s;
                    if (s > mx) mx = s;
                }
                double sum = 0.0;
                for (int64_t t = 0; t < c->T; t++) sum += (row[t] = mx == -INFINITY ? 0.0 : exp(row[t] - mx));
                for (int64_t d = 0; d < c->Dv; d++) {
                    double acc = 0.0;
                    for (int64_t t = 0; t < c->T; t++) acc += row[t] * ref_at(&p.v, b, hk, t, d);
                    double want = sum > 0.0 ? acc / sum : 0.0;
                    double got = y[b * p.y_sb + h * p.y_sh + i * p.y_ss + d];
                    double err = isnan(got) ? INFINITY : fabs(got - want);
                    if (err > worst) worst = err;
                }
            }
        }
    free(row), free(buf), free(y), free(mf), free(mb);
    return worst;
}

static bool have_fast(void) {
    if (cpu_gemm_packed_supported()) return true;
    printf("skipped: no AVX2+FMA (the fused attention runs on the packed GEMM only)\n");
    return false;
}

static void test_fused_attention_matches_reference(void **state) {
    (void)state;
    if (!have_fast()) return;
    const att_case cases[] = {
        {1, 12, 12, 128, 128, 64, 64, LAYOUT_3D, MASK_BATCH, false}, /* BERT-base's shape */
        {2, 4, 4, 128, 128, 64, 64, LAYOUT_QKV, MASK_BATCH, false},  /* merged projections */
        {2, 3, 3, 17, 23, 20, 20, LAYOUT_4D, MASK_NONE, false},      /* odd sizes, tile edges */
        {1, 4, 2, 33, 40, 16, 24, LAYOUT_3D, MASK_ROWS, false},      /* GQA, Dq != Dv */
        {2, 2, 2, 300, 300, 32, 32, LAYOUT_3D, MASK_NONE, true},     /* 3 query blocks, causal */
        {1, 2, 1, 9, 37, 8, 8, LAYOUT_4D, MASK_NARROW, false},       /* mask narrower than keys */
        {2, 2, 2, 12, 19, 12, 12, LAYOUT_4D, MASK_BOOL, true},       /* bool mask and causal */
        {1, 2, 2, 6, 10, 8, 8, LAYOUT_3D, MASK_ROW_DEAD, false},     /* a fully masked row */
        {1, 1, 1, 1, 1, 1, 1, LAYOUT_4D, MASK_NONE, false},          /* one of everything */
        {1, 1, 1, 40, 120000, 4, 4, LAYOUT_3D, MASK_NONE, false},    /* long keys: capped query blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 3; threads += 2) {
            double worst = run_case(&cases[i], threads);
            if (worst > 2e-5) fail_msg("case %zu (%d threads): max error %g", i, threads, worst);
        }
}

/* C = A * Bt^T with Bt [N, K] rows, against a plain loop, over panel and k-block edges. */
static void test_sgemm_inline_bt(void **state) {
    (void)state;
    if (!have_fast()) return;
    const int64_t shapes[][3] = {{128, 128, 64}, {7, 17, 9}, {1, 1, 1}, {13, 33, 700}, {6, 16, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = K + 3, ldbt = K + 5, ldc = N + 2;
        float *A = malloc(sizeof(float) * (size_t)(M * lda)), *Bt = malloc(sizeof(float) * (size_t)(N * ldbt));
        float *C = malloc(sizeof(float) * (size_t)(M * ldc));
        float *scratch = aligned_alloc(64, sizeof(float) * (size_t)((cpu_sgemm_inline_scratch(M, N, K) + 15) & ~15));
        for (int64_t i = 0; i < M * lda; i++) A[i] = frand();
        for (int64_t i = 0; i < N * ldbt; i++) Bt[i] = frand();
        cpu_sgemm_inline_bt(M, N, K, A, lda, Bt, ldbt, C, ldc, NULL, scratch);
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double want = 0.0;
                for (int64_t k = 0; k < K; k++) want += (double)A[m * lda + k] * Bt[n * ldbt + k];
                if (fabs(C[m * ldc + n] - want) > 1e-4 * (1.0 + sqrt((double)K)))
                    fail_msg("%lldx%lldx%lld: C[%lld,%lld] = %g, want %g", (long long)M, (long long)N, (long long)K,
                             (long long)m, (long long)n, C[m * ldc + n], want);
            }
        free(A), free(Bt), free(C), free(scratch);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_attention_matches_reference),
        cmocka_unit_test(test_sgemm_inline_bt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
