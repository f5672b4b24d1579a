/* cpu_features.c - which SIMD instruction sets this CPU (and its OS) lets kiln use.
 *
 * cpuid says what the core implements; xgetbv says whether the OS saves the wider
 * register state (YMM for AVX2, ZMM/opmask for AVX-512, tile state for AMX): both must
 * agree before a kernel may use the instructions. KILN_CPU_ISA=scalar|avx2|avx512 caps
 * the result so tests can exercise every code path on one machine (avx512: AVX-512
 * without AMX, as on CPUs before Sapphire Rapids; native, or anything else: all).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_kernel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static uint32_t detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    uint64_t xcr0 = read_xcr0();
    bool ymm_ok = (xcr0 & 0x6) == 0x6;     /* SSE + AVX state */
    bool zmm_ok = (xcr0 & 0xe6) == 0xe6;   /* + opmask, ZMM_Hi256, Hi16_ZMM */
    bool amx_ok = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */
    if (!ymm_ok) return 0;
    uint32_t f = 0;
    if (fma) f |= CPU_FEATURE_FMA;
    if (f16c) f |= CPU_FEATURE_F16C;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= CPU_FEATURE_AVX2;
    if (zmm_ok) {
        if ((b >> 16) & 1) f |= CPU_FEATURE_AVX512F;
        if ((b >> 17) & 1) f |= CPU_FEATURE_AVX512DQ;
        if ((b >> 30) & 1) f |= CPU_FEATURE_AVX512BW;
        if ((b >> 31) & 1) f |= CPU_FEATURE_AVX512VL;
        if ((c >> 11) & 1) f |= CPU_FEATURE_AVX512_VNNI;
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        (void)b1, (void)c1, (void)d1;
        if ((a1 >> 5) & 1) f |= CPU_FEATURE_AVX512_BF16;
    }
    if (amx_ok && ((d >> 24) & 1)) f |= CPU_FEATURE_AMX; /* AMX-TILE */
    return f;
}
#else
static uint32_t detect(void) { return 0; }
#endif

#define AVX2_SET (CPU_FEATURE_AVX2 | CPU_FEATURE_FMA | CPU_FEATURE_F16C)

/* cpuid is detected once: under a hypervisor every cpuid traps to it (microseconds), and
 * kernels ask per call (the AMX GEMM's GELU rows asked about 100000 times per BERT batch-8
 * FFN, 20x slower than the GEMM itself). KILN_CPU_ISA is still read on every call, so
 * tests can change the cap within one process. */
static uint32_t detect_once(void) {
    static _Atomic int64_t cached = -1;
    int64_t c = cached;
    if (c < 0) {
        c = detect();
        cached = c;
    }
    return (uint32_t)c;
}

uint32_t cpu_features(void) {
    uint32_t f = detect_once();
    const char *cap = getenv("KILN_CPU_ISA");
    if (cap && *cap) {
        if (!strcmp(cap, "scalar")) f = 0;
        else if (!strcmp(cap, "avx2")) f &= AVX2_SET;
        else if (!strcmp(cap, "avx512")) f &= ~(uint32_t)CPU_FEATURE_AMX;
        /* "native" (or anything else) leaves everything detected: a cap never adds features */
    }
    return f;
}

static int64_t l2_from_sysfs(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r");
    if (!f) return 0;
    long long v = 0;
    char unit = 0;
    int n = fscanf(f, "%lld%c", &v, &unit);
    fclose(f);
    if (n < 1 || v <= 0) return 0;
    if (unit == 'K') v *= 1024;
    else if (unit == 'M') v *= 1024 * 1024;
    return (int64_t)v;
}

int64_t cpu_l2_bytes(void) {
    static _Atomic int64_t cached = -1;
    int64_t c = cached;
    if (c < 0) {
        c = 0;
#ifdef _SC_LEVEL2_CACHE_SIZE
        long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (v > 0) c = v;
#endif
        if (c == 0) c = l2_from_sysfs();
        cached = c;
    }
    return c;
}

bool cpu_env_switch(const char *name, _Atomic int *cached) {
    int c = *cached;
    if (c < 0) {
        const char *e = getenv(name);
        c = !(e && e[0] == '0');
        *cached = c;
    }
    return c == 1;
}

const char *cpu_features_str(uint32_t f, char *buf, size_t size) {
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {{CPU_FEATURE_AVX2, "avx2"},         {CPU_FEATURE_FMA, "fma"},
                 {CPU_FEATURE_F16C, "f16c"},         {CPU_FEATURE_AVX512F, "avx512f"},
                 {CPU_FEATURE_AVX512BW, "avx512bw"}, {CPU_FEATURE_AVX512VL, "avx512vl"},
                 {CPU_FEATURE_AVX512DQ, "avx512dq"}, {CPU_FEATURE_AVX512_VNNI, "avx512_vnni"},
                 {CPU_FEATURE_AVX512_BF16, "avx512_bf16"}, {CPU_FEATURE_AMX, "amx"}};
    if (size == 0) return buf;
    buf[0] = 0;
    size_t off = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(f & names[i].bit)) continue;
        int w = snprintf(buf + off, size - off, "%s%s", off ? " " : "", names[i].name);
        if (w < 0 || (size_t)w >= size - off) break;
        off += (size_t)w;
    }
    if (off == 0) snprintf(buf, size, "scalar");
    return buf;
}
