/* cpu_gemm_bf16x3.c - the parts of the bf16x3 AMX GEMM that need no AMX or AVX-512
 * instruction (cpu_gemm_bf16x3.h): may this process use AMX, and packing a constant B
 * into hi/lo bfloat16 tiles (once per node, at the first run). The kernel itself is in
 * cpu_gemm_bf16x3_amx.c, compiled for AMX.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm_bf16x3.h"
#include "core/bigalloc.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

/* Linux (5.16+) hands out the tile data state only to processes that ask: without the
 * permission the first tile instruction raises SIGILL. Asked once per process; the
 * permission covers every thread, present and future. */
static bool tile_permission(void) {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

bool cpu_bf16x3_usable(void) {
    static _Atomic int cached = -1;
    int c = cached;
    if (c < 0) {
        const char *off = getenv("KILN_NO_AMX");
        uint32_t need = CPU_FEATURE_AMX | CPU_FEATURE_AVX512F | CPU_FEATURE_AVX512BW;
        c = KILN_HAVE_AMX && !(off && off[0] == '1') && (cpu_features() & need) == need && tile_permission();
        cached = c;
    }
    return c == 1;
}

/* x = hi + lo: hi rounded to nearest, lo the rounded remainder (exact in float). A float
 * whose rounding would overflow to infinity is truncated instead, so hi stays finite;
 * infinities and NaNs keep lo = 0, so hi alone carries them through the products. */
static void split(float x, uint16_t *hi, uint16_t *lo) {
    uint16_t h = cpu_bf16_round(x);
    float hf = cpu_bf16_to_float(h);
    bool x_finite = x - x == 0.f;
    if (x_finite && hf - hf != 0.f) {
        union {
            float f;
            uint32_t u;
        } v = {x};
        h = (uint16_t)(v.u >> 16);
        hf = cpu_bf16_to_float(h);
    }
    *hi = h;
    *lo = x_finite ? cpu_bf16_round(x - hf) : 0;
}

void cpu_bf16x3_b_free(cpu_bf16x3_b *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

kiln_status cpu_bf16x3_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, bool trans, cpu_bf16x3_b *out,
                              kiln_error *err) {
    memset(out, 0, sizeof *out);
    if (K <= 0 || N <= 0 || K > (1ll << 24) || N > (1ll << 24))
        return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM weight %lldx%lld too large to pack", (long long)K, (long long)N);
    int64_t chunks = (K + 31) / 32, strips = (N + 15) / 16;
    strips += strips & 1;
    uint64_t elems = (uint64_t)strips * (uint64_t)chunks * 1024u;
    if (elems > (1ull << 34)) return kiln_err_set(err, KILN_ERR_LIMIT, "GEMM weight too large to pack");
    uint16_t *d = kiln_alloc_aligned(elems * sizeof(uint16_t));
    if (!d) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory packing a GEMM weight (bf16x3)");
    memset(d, 0, elems * sizeof(uint16_t));
    /* tile (strip s, chunk c): hi at ((s * chunks + c) * 2) * 512, lo 512 after; element
     * (k, j) of the chunk at row k / 2, column 2 * j + k % 2 */
    for (int64_t k = 0; k < K; k++) {
        int64_t c = k / 32, r = (k % 32) / 2, e = k % 2;
        for (int64_t n = 0; n < N; n++) {
            uint16_t *t = d + ((n / 16) * chunks + c) * 1024 + r * 32 + (n % 16) * 2 + e;
            split(trans ? B[n * ldb + k] : B[k * ldb + n], &t[0], &t[512]);
        }
    }
    out->K = K;
    out->N = N;
    out->n_chunks = chunks;
    out->n_strips = strips;
    out->data = d;
    return KILN_OK;
}

#if !KILN_HAVE_AMX
/* built by a compiler without AMX support: cpu_bf16x3_usable() is false, so no caller
 * gets here */
kiln_status cpu_sgemm_bf16x3(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const cpu_bf16x3_b *pb, float *C, int64_t ldc, const cpu_epilogue *ep,
                             cpu_gemm_scratch *scratch, kiln_error *err) {
    (void)pool, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)pb, (void)C, (void)ldc, (void)ep, (void)scratch;
    return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "this kiln was built without AMX support");
}
kiln_status cpu_conv_bf16x3(cpu_threadpool *pool, const cpu_conv_geom *g, int64_t N, int64_t C, int64_t M,
                            const float *x, const cpu_bf16x3_b *w, float *y, const cpu_epilogue *ep, unsigned layout,
                            cpu_gemm_scratch *scratch, kiln_error *err) {
    (void)pool, (void)g, (void)N, (void)C, (void)M, (void)x, (void)w, (void)y, (void)ep, (void)layout, (void)scratch;
    return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "this kiln was built without AMX support");
}
#endif
