/* bigalloc.h - 64-byte aligned allocation that backs large blocks with transparent huge
 * pages where the OS offers them.
 *
 * kiln's hot memory is a few large blocks: the activation arena, packed GEMM weights,
 * Winograd-transformed weights (ResNet-50: ~150 MB read once per inference) and GEMM
 * packing scratch. With 4 KiB pages, streaming them costs a TLB miss every 4 KiB, and
 * under a hypervisor each miss is a two-level page walk. Linux distributions commonly set
 * transparent huge pages to "madvise" (only regions that ask get 2 MiB pages), so blocks
 * of at least KILN_BIGALLOC_HUGE_MIN bytes are 2 MiB aligned and their whole 2 MiB pages
 * are marked MADV_HUGEPAGE. docs/BENCHMARKS.md ("huge pages") has the measurements.
 *
 * KILN_HUGEPAGES=0 in the environment turns the advice off (A/B measurements, systems
 * where khugepaged compaction stalls hurt more than TLB misses). Memory from
 * kiln_alloc_aligned is released with free().
 */
#ifndef KILN_CORE_BIGALLOC_H
#define KILN_CORE_BIGALLOC_H

#include <stdbool.h>
#include <stddef.h>

#define KILN_BIGALLOC_HUGE_MIN ((size_t)2 << 20)

/* bytes (0 is treated as 1) aligned to 64 bytes, or to 2 MiB with huge-page advice when
 * large; NULL when out of memory. */
void *kiln_alloc_aligned(size_t bytes);

/* Whether large blocks get huge-page advice in this process (platform and KILN_HUGEPAGES). */
bool kiln_bigalloc_huge_enabled(void);

#endif
