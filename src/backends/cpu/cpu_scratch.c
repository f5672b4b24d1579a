/* cpu_scratch.c - the context-wide kernel scratch (cpu_scratch.h). */
#include "backends/cpu/cpu_scratch.h"

#include <stdlib.h>

#include "core/bigalloc.h"

float *cpu_scratch_grow(float **buf, size_t *cap, uint64_t n) {
    if (n <= *cap && *buf) return *buf;
    free(*buf);
    *buf = NULL;
    *cap = 0;
    if (n > (uint64_t)SIZE_MAX / sizeof(float)) return NULL;
    *buf = kiln_alloc_aligned((size_t)n * sizeof(float)); /* huge pages when large */
    if (*buf) *cap = (size_t)n;
    return *buf;
}

uint64_t cpu_scratch_bytes(const cpu_scratch *s) {
    if (!s) return 0;
    return ((uint64_t)s->gemm.cap + s->winograd.cap + s->col_cap + s->phase_cap) * sizeof(float);
}

void cpu_scratch_release(cpu_scratch *s) {
    if (!s) return;
    cpu_gemm_scratch_free(&s->gemm);
    cpu_winograd_scratch_free(&s->winograd);
    free(s->col);
    free(s->phase);
    s->col = s->phase = NULL;
    s->col_cap = s->phase_cap = 0;
}
