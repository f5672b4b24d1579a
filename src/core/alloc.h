/* alloc.h - overflow-checked allocation helpers.
 *
 * Every count that comes from a file is multiplied through these, so a hostile size
 * becomes a clean NULL (reported as a limit error) rather than a wrapped small buffer.
 */
#ifndef KILN_CORE_ALLOC_H
#define KILN_CORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline bool kiln_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool kiln_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* realloc of n elements of size bytes; NULL on overflow (old block kept). */
static inline void *kiln_realloc_array(void *p, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) return NULL;
    return realloc(p, total ? total : 1);
}

#endif
