/* bigalloc.c - see bigalloc.h. */
#include "core/bigalloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

bool kiln_bigalloc_huge_enabled(void) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* decided once: allocation paths are hot and may run on several threads (all of them
     * compute the same answer, so a race only repeats the getenv) */
    static _Atomic int cached = -1;
    int c = cached;
    if (c < 0) {
        const char *env = getenv("KILN_HUGEPAGES");
        c = !(env && (!strcmp(env, "0") || !strcmp(env, "off") || !strcmp(env, "no")));
        cached = c;
    }
    return c == 1;
#else
    return false;
#endif
}

void *kiln_alloc_aligned(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes > SIZE_MAX - KILN_BIGALLOC_HUGE_MIN) return NULL;
    if (bytes < KILN_BIGALLOC_HUGE_MIN || !kiln_bigalloc_huge_enabled())
        return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    /* 2 MiB aligned so that every whole 2 MiB page of the block can be a huge page; only
     * those whole pages get the advice: a partly used huge page at the end would hold up
     * to 2 MiB of physical memory nobody asked for (ResNet-50 has ~60 such blocks) */
    size_t size = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, KILN_BIGALLOC_HUGE_MIN, size) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* advice only: where THP is off the call fails and the block stays on 4 KiB pages */
    (void)madvise(p, size & ~(KILN_BIGALLOC_HUGE_MIN - 1), MADV_HUGEPAGE);
#endif
    return p;
}
