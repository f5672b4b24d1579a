/* cpu_scratch.h - kernel scratch shared by every node of one execution context.
 *
 * Why: a context runs its nodes one at a time, so the buffers a kernel needs only during
 * its own run (a GEMM's packed B panels, Winograd's transformed tiles, im2col columns,
 * the phase-split input of strided convs) can be one set for the whole context, sized by
 * the largest user. Kept per node before, they added up while the engine reported the
 * workspace as the largest layer's need: max RSS of ResNet-50 batch 1 went 323.9 -> 284.1
 * MB with one shared set, BERT batch 8 1151 -> 829 MB (session 7, docs/RUNTIME.md).
 *
 * The CPU backend (cpu_backend.c) owns one per context and hands it to kernels in
 * cpu_kernel_ctx.scratch. Kernels run outside a context (the builder's tactic timing,
 * tests, bench/bench_layers.c) get NULL and keep their buffers in their node state, as
 * before. A kernel may hold one buffer of each kind at once; it must not keep pointers
 * into them past its run, and a kernel that runs other nodes (control flow) must not
 * hold any across that call.
 */
#ifndef KILN_BACKENDS_CPU_CPU_SCRATCH_H
#define KILN_BACKENDS_CPU_CPU_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_gemm_packed.h"
#include "backends/cpu/cpu_kernel.h"
#include "backends/cpu/cpu_winograd.h"

struct cpu_scratch {
    cpu_gemm_scratch gemm;         /* per-call GEMM operand packing (cpu_gemm_packed.h) */
    cpu_winograd_scratch winograd; /* Winograd's blocked input and tile buffers */
    float *col;                    /* im2col columns */
    size_t col_cap;                /* floats */
    float *phase;                  /* phase-split input of strided convs, 64-byte aligned */
    size_t phase_cap;              /* floats */
};

/* Buffer *buf of capacity *cap (floats) grown to at least n floats, 64-byte aligned (its
 * old contents are not kept); NULL on out-of-memory (the buffer is then empty). */
float *cpu_scratch_grow(float **buf, size_t *cap, uint64_t n);
/* The buffer a kernel uses for this run: the context's shared one when it runs in a
 * context, else `own`, the one in its node state. */
static inline cpu_gemm_scratch *cpu_scratch_gemm(const cpu_kernel_ctx *ctx, cpu_gemm_scratch *own) {
    return ctx->scratch ? &ctx->scratch->gemm : own;
}
static inline cpu_winograd_scratch *cpu_scratch_winograd(const cpu_kernel_ctx *ctx, cpu_winograd_scratch *own) {
    return ctx->scratch ? &ctx->scratch->winograd : own;
}
/* Bytes the scratch holds now. */
uint64_t cpu_scratch_bytes(const cpu_scratch *s);
/* Frees every buffer (s itself is the owner's). */
void cpu_scratch_release(cpu_scratch *s);

#endif
