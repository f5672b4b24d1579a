/* cpu_rows.c - portable row kernels and the run-time choice of the AVX2 ones (cpu_rows.h). */
#include "backends/cpu/cpu_rows.h"

#include <math.h>

#include "backends/cpu/cpu_kernel.h"

static void s_norm_row(const float *x, const float *scale, const float *bias, float *y, int64_t n, float eps,
                       bool rms, float *mean_out, float *inv_out) {
    double s = 0;
    if (!rms)
        for (int64_t i = 0; i < n; i++) s += x[i];
    double mean = rms ? 0.0 : s / (double)n, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - mean;
        s2 += d * d;
    }
    float inv = (float)(1.0 / sqrt(s2 / (double)n + eps)), m = (float)mean;
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - m) * inv * scale[i];
        y[i] = bias ? v + bias[i] : v;
    }
    *mean_out = m;
    *inv_out = inv;
}

static float s_max(const float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    return mx;
}

static const cpu_rows scalar_rows = {s_norm_row, s_max};

const cpu_rows *cpu_rows_scalar(void) { return &scalar_rows; }

const cpu_rows *cpu_rows_get(void) {
    uint32_t f = cpu_features();
    if ((f & CPU_FEATURE_AVX2) && (f & CPU_FEATURE_FMA)) return cpu_rows_avx2();
    return &scalar_rows;
}
