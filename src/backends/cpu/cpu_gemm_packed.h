/* cpu_gemm_packed.h - kiln's own packed-operand SGEMM (AVX2 + FMA) for GEMMs with one
 * constant operand.
 *
 * Conv weights (A = W[M=Cout, K=Cin*kh*kw]) and MatMul weights (B = W[K, N]) never change
 * between runs, yet a BLAS call re-packs them into its panel layout on every call. Here the
 * constant operand is packed once per node (cpu_gemm_pack_a / _b, kept in the kernel's
 * per-node state), the activation operand is packed per call into a reusable scratch
 * buffer, and a 6x16 register-tile microkernel multiplies them with the fused epilogue
 * (bias, residual, activation) applied while each output tile is still in L1.
 * cpu_gemm_avx2.c holds the implementation and the measurements that justify it.
 *
 * Only call these when cpu_gemm_packed_supported() is true (AVX2 + FMA present and not
 * capped by KILN_CPU_ISA); otherwise use cpu_sgemm (OpenBLAS or the portable loop).
 */
#ifndef KILN_BACKENDS_CPU_CPU_GEMM_PACKED_H
#define KILN_BACKENDS_CPU_CPU_GEMM_PACKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_gemm.h"

typedef struct cpu_gemm_packed {
    int64_t rows; /* M for a packed A, N for a packed B */
    int64_t K;
    bool is_b;
    float *data; /* 64-byte aligned, owned */
} cpu_gemm_packed;

/* Reusable per-node buffer for packing the per-call operand. */
typedef struct cpu_gemm_scratch {
    float *data;
    size_t cap; /* floats */
} cpu_gemm_scratch;

/* True when the AVX2+FMA path may run on this CPU (honours KILN_CPU_ISA). */
bool cpu_gemm_packed_supported(void);

/* Packs row-major A[M,K] (row stride lda) / B[K,N] (row stride ldb) into *out.
 * Fails only on allocation failure or sizes that overflow. */
kiln_status cpu_gemm_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, cpu_gemm_packed *out,
                            kiln_error *err);
kiln_status cpu_gemm_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, cpu_gemm_packed *out,
                            kiln_error *err);
void cpu_gemm_packed_free(cpu_gemm_packed *p);
void cpu_gemm_scratch_free(cpu_gemm_scratch *s);

/* C[M,N] = A*B, then the epilogue (may be NULL); C is write-only. Exactly one of pa / pb is
 * given (packed, with matching M/K or K/N); the other operand is the raw row-major A
 * (lda) or B (ldb), packed here into *scratch. Runs over the pool's threads; call it from
 * the kernel's thread, never from a pool worker. M, N, K must be > 0. */
kiln_status cpu_sgemm_packed(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                             const float *A, int64_t lda, const cpu_gemm_packed *pb, const float *B, int64_t ldb,
                             float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                             kiln_error *err);

/* Packs the 16 columns [panel*16, panel*16+16) of rows [k0, k0+kc) of the implicit B
 * matrix into dst[kc][16] (columns past N zero). Called concurrently for different panels. */
typedef void (*cpu_gemm_pack_b_fn)(void *user, int64_t panel, int64_t k0, int64_t kc, float *dst);

/* As cpu_sgemm_packed with a packed A, but B is never materialised: pack_b produces its
 * panels (Conv: straight from the image, no im2col buffer). */
kiln_status cpu_sgemm_packed_a_fn(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                                  cpu_gemm_pack_b_fn pack_b, void *pack_user, float *C, int64_t ldc,
                                  const cpu_epilogue *ep, cpu_gemm_scratch *scratch, kiln_error *err);

/* As cpu_sgemm_packed_a_fn, but each task (128 columns, all rows) packs its own slice of
 * B per k-block into an L2-sized buffer instead of the whole B up front (cpu_gemm_avx2.c
 * says when that pays off; cpu_sgemm_local_b_preferred is that test). pack_b is called
 * from pool threads, concurrently for different panels. */
kiln_status cpu_sgemm_packed_a_fn_local(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K,
                                        const cpu_gemm_packed *pa, cpu_gemm_pack_b_fn pack_b, void *pack_user,
                                        float *C, int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                                        kiln_error *err);
/* As cpu_sgemm_packed_a_fn_local with B a plain row-major [K, N] matrix (row stride ldb),
 * packed by the GEMM itself reading whole rows (1x1 convs: B is the image). */
kiln_status cpu_sgemm_packed_a_rows_local(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K,
                                          const cpu_gemm_packed *pa, const float *B, int64_t ldb, float *C,
                                          int64_t ldc, const cpu_epilogue *ep, cpu_gemm_scratch *scratch,
                                          kiln_error *err);
bool cpu_sgemm_local_b_preferred(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K);

/* The P16 layout of a [rows, N] matrix with N a multiple of 16: blocks of 16 columns, each
 * block all rows x 16 contiguous, element (r, n) at (n / 16) * 16 * rows + r * 16 + n % 16.
 * For a 1x1 conv's activations [C, H*W] per image that is "16 positions x all channels"
 * blocks, which is exactly the packed-B panel this GEMM's kernels read (a consumer conv
 * reads it in place, no packing) and whose tiles a producer conv writes as whole
 * contiguous runs (6 rows x 64 bytes), in place of 64-byte pieces a whole image row apart.
 * The CPU layout pass (build/passes/layout_p16.c) decides which tensors use it. */
typedef struct cpu_gemm_io {
    bool b_p16;   /* B is [K, N] in P16 (else row-major, row stride N) */
    bool c_p16;   /* C is written in P16 (else row-major, row stride N) */
    bool res_p16; /* the epilogue's residual is in P16 (its ld_res is then ignored) */
} cpu_gemm_io;

/* A 1x1 convolution per image: C[M, N] = A * B + epilogue with the packed weights A, B the
 * image [K = channels, N = positions], each of B, C and the residual row-major (stride N)
 * or P16 as io says. Any P16 needs N % 16 == 0, and a P16 B 32-byte alignment. Picks the
 * per-task B packing (cpu_sgemm_local_b_preferred), packing B whole, or (P16 B) no
 * packing at all. */
kiln_status cpu_sgemm_conv1x1(cpu_threadpool *pool, int64_t M, int64_t N, int64_t K, const cpu_gemm_packed *pa,
                              const float *B, float *C, const cpu_epilogue *ep, cpu_gemm_io io,
                              cpu_gemm_scratch *scratch, kiln_error *err);

/* Small GEMMs with no constant operand (attention's per-head Q*K^T and P*V, 12 per layer
 * in BERT): C[M,N] = A*B then the epilogue, both operands packed into `scratch` and
 * computed on the calling thread only (callers run several of them in parallel, one per
 * pool task). scratch: cpu_sgemm_inline_scratch(M, N, K) floats, 64-byte aligned; that
 * function returns -1 when the sizes overflow. Measured against OpenBLAS per head
 * (128x128x64, 1 thread): see cpu_matmul.c. M, N, K must be > 0. */
int64_t cpu_sgemm_inline_scratch(int64_t M, int64_t N, int64_t K);
void cpu_sgemm_inline(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, const cpu_epilogue *ep, float *scratch);
/* As cpu_sgemm_inline with B given transposed: Bt is row-major [N, K] (row stride ldbt),
 * C = A * Bt^T (attention's Q K^T with K as stored). Same scratch size. */
void cpu_sgemm_inline_bt(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Bt,
                         int64_t ldbt, float *C, int64_t ldc, const cpu_epilogue *ep, float *scratch);

#endif
