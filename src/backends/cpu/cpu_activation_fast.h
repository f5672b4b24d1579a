/* cpu_activation_fast.h - vectorised exp/tanh/erf/sigmoid/GELU over float arrays.
 *
 * Softmax, LayerNorm-adjacent GELU, sigmoid epilogues and RNN gates all spend their time
 * in transcendental functions; libm's scalar expf is 5-10x slower than an 8-wide
 * polynomial. These entry points pick the AVX2+FMA version (cpu_activation_fast_avx2.c)
 * when the CPU has it and fall back to libm otherwise. In-place use (y == x) is allowed.
 * Accuracy of the AVX2 versions: exp/sigmoid/tanh within 2 ulp-ish relative (~3e-7),
 * erf within 2e-7 absolute — well inside the 1e-4 tolerances models are checked with.
 *
 * cpu_features() executes cpuid (a VM exit under a hypervisor), so the choice is made once
 * per kernel call: fetch the table with cpu_vmath_get() and call through it.
 */
#ifndef KILN_BACKENDS_CPU_CPU_ACTIVATION_FAST_H
#define KILN_BACKENDS_CPU_CPU_ACTIVATION_FAST_H

#include <stdint.h>

typedef void (*cpu_vfn)(const float *x, float *y, int64_t n);

typedef struct cpu_vmath {
    cpu_vfn exp;
    cpu_vfn tanh;
    cpu_vfn erf;
    cpu_vfn sigmoid;
    cpu_vfn gelu;      /* 0.5 x (1 + erf(x / sqrt 2)) */
    cpu_vfn gelu_tanh; /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    /* y[i] = exp(x[i] - max) and returns the sum (softmax's inner loop) */
    float (*exp_shift_sum)(const float *x, float *y, int64_t n, float max);
    const char *isa;
} cpu_vmath;

/* The best table for this CPU (honours KILN_CPU_ISA). */
const cpu_vmath *cpu_vmath_get(void);
/* The portable libm table, and the AVX2 one (call only when the CPU has AVX2+FMA). */
const cpu_vmath *cpu_vmath_scalar(void);
const cpu_vmath *cpu_vmath_avx2(void);

/* Convenience wrappers (one cpuid each): for code outside hot loops. */
void cpu_vsigmoid(const float *x, float *y, int64_t n);
void cpu_vtanh(const float *x, float *y, int64_t n);

#endif
