/* gelu_ref.h - the double-precision GELU reference of the GELU unit tests
 * (test_kernels_gelu.c, test_fuse_gelu.c) and their check of a vector-math table's erf
 * GELU against it. Include after cmocka.h. */
#ifndef KILN_TESTS_UNIT_GELU_REF_H
#define KILN_TESTS_UNIT_GELU_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/cpu_activation_fast.h"

static inline double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

/* vm->gelu over x[0..n): relative error at most 1e-6 where the reference is above 1e-30 in
 * magnitude, absolute 1e-30 elsewhere (fails the test naming the value). Returns the worst
 * relative error, and in *worst_x (may be NULL) where it was. */
static inline double check_gelu_values(const cpu_vmath *vm, const float *x, int64_t n, double *worst_x) {
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(y);
    vm->gelu(x, y, n);
    double worst = 0, wx = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ref_gelu((double)x[i]), err = fabs((double)y[i] - r);
        if (fabs(r) > 1e-30) {
            if (err / fabs(r) > worst) {
                worst = err / fabs(r);
                wx = x[i];
            }
            if (!(err <= 1e-6 * fabs(r)))
                fail_msg("%s gelu(%.9g) = %.9g, reference %.9g (relative error %.3g)", vm->isa, (double)x[i],
                         (double)y[i], r, err / fabs(r));
        } else if (!(err <= 1e-30)) {
            fail_msg("%s gelu(%.9g) = %.9g, reference %.9g", vm->isa, (double)x[i], (double)y[i], r);
        }
    }
    free(y);
    if (worst_x) *worst_x = wx;
    return worst;
}

/* Runs check on the portable vector-math table, then on the one this CPU uses when that
 * is another (AVX2), saying so when there is none. */
static inline void check_each_gelu_table(void (*check)(const cpu_vmath *vm)) {
    check(cpu_vmath_scalar());
    const cpu_vmath *vm = cpu_vmath_get();
    if (vm == cpu_vmath_scalar()) printf("no AVX2+FMA here: only the portable GELU was checked\n");
    else check(vm);
}

#endif
