/* cpu_broadcast.h - ONNX multidirectional (numpy) broadcasting for CPU kernels.
 *
 * cpu_bcast_init() computes the output shape of up to CPU_BCAST_MAX_IN inputs and a
 * collapsed iteration plan: dims of size 1 are dropped and adjacent dims merge whenever
 * every input is either contiguous or broadcast across both, so "same shape" becomes one
 * flat loop, "tensor + scalar" a flat loop with a 0-stride operand, and "[N,C,H,W] +
 * [C,1,1]" a 3-level loop whose inner segment is H*W long.
 *
 * cpu_bcast_run() splits the output into chunks (in parallel) and calls a segment
 * function for each run of the innermost collapsed dim. The segment function gets byte
 * pointers and per-input increments that are 0 (broadcast: read element 0 n times) or
 * 1 (contiguous), so it can keep separate loops for each case that the compiler
 * vectorises. The output is always contiguous.
 */
#ifndef KILN_BACKENDS_CPU_CPU_BROADCAST_H
#define KILN_BACKENDS_CPU_CPU_BROADCAST_H

#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernel.h"

#define CPU_BCAST_MAX_IN 3

typedef struct cpu_bcast {
    int32_t n_in;
    int32_t out_rank; /* the broadcast output shape */
    int64_t out_dims[RT_MAX_RANK];
    uint64_t count;   /* output elements */
    int32_t rank;     /* collapsed iteration rank, >= 1 */
    int64_t dims[RT_MAX_RANK];
    int64_t strides[CPU_BCAST_MAX_IN][RT_MAX_RANK]; /* element strides per input, 0 = broadcast */
} cpu_bcast;

/* Processes n output elements: out[k] = f(in[0][k*inc[0]], in[1][k*inc[1]], ...). */
typedef void (*cpu_bcast_seg_fn)(void *user, char *out, const char *const *in, const int64_t *inc, int64_t n);

/* Broadcast shape of tensors ins[0..n_in) (1..CPU_BCAST_MAX_IN); fails with a message
 * naming both shapes when they don't broadcast. */
kiln_status cpu_bcast_init(cpu_bcast *b, cpu_kernel_ctx *ctx, const rt_tensor *const *ins, int32_t n_in);

/* Only the broadcast shape of two shapes (used by Expand and others). */
kiln_status cpu_bcast_shape(cpu_kernel_ctx *ctx, int32_t ra, const int64_t *da, int32_t rb, const int64_t *db,
                            int32_t *r_out, int64_t *d_out);

/* Runs fn over every output element. out_esize / in_esize are element sizes in bytes. */
void cpu_bcast_run(const cpu_bcast *b, cpu_threadpool *pool, void *out, size_t out_esize, const void *const *in,
                   const size_t *in_esize, cpu_bcast_seg_fn fn, void *user);

#endif
