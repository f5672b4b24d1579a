/* cpu_winograd.c - the geometry test and the task blocking of Winograd F(4x4, 3x3) Conv
 * (cpu_winograd.h). Kept out of cpu_winograd_avx2.c because the builder calls them on any
 * CPU, and that file is compiled for AVX2. */
#include "backends/cpu/cpu_winograd.h"

#include "core/alloc.h"

/* Target size of one task's V + M buffers: big blocks stream the transformed weights U
 * (4x the weights) fewer times; a few MiB stays in L3 with per-transform-point slices in
 * L2. */
#define WG_SLOT_BYTES (3u << 20)
#define WG_MAX_TB 120
/* Cap on the tiles per block when input and output have at most 64 channels each (Cp + Mp
 * <= 128). Their slots are small, so the slot target alone let a block grow to WG_MAX_TB:
 * ResNet-50's 56x56 layers (64 -> 64) ran 2 blocks of 102 tiles at batch 1. With at most
 * 60 (4 blocks of 54) those layers ran, in the network, alternating runs (session 12):
 * this VM 15-21% faster at 1 thread and 6-11% at 2 (5-7 of 8 rounds); the GPU host's Xeon
 * 15-24% and 15-19% (9-10 of 10). At batch 8 (114 -> 60 tiles) -9% to +1.5% on either
 * machine. The same cap on 128-channel layers (84 -> 60 tiles at batch 8) was 8-12%
 * faster on this VM but 5-15% slower on the Xeon at 1 thread, so they keep the old cap. */
#define WG_SMALL_MAX_TB 60
#define WG_SMALL_CHANNELS 128
/* Shared-V mode (below): output-channel groups per thread, and the narrowest group. */
#define WG_TASKS_PER_THREAD 2
#define WG_MIN_GROUP_PANELS 2

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Whether `tasks` handed out one at a time leave threads idle: fewer than 4 per thread
 * and not a multiple of the thread count (never on one thread). */
static bool tasks_uneven(int64_t tasks, int64_t threads) { return tasks % threads != 0 && tasks < 4 * threads; }

bool cpu_winograd_plan(int tile, int64_t N, int64_t C, int64_t M, int64_t OH, int64_t OW, int64_t threads,
                       cpu_winograd_blocking *b) {
    *b = (cpu_winograd_blocking){0};
    if (tile != CPU_WINOGRAD_F23 && tile != CPU_WINOGRAD_F43) return false;
    int64_t pts = (tile + 2) * (tile + 2);
    if (N < 1 || C < 1 || M < 1 || OH < 1 || OW < 1 || threads < 1) return false;
    if (N > (1ll << 24) || C > (1ll << 24) || M > (1ll << 24) || OH > (1ll << 24) || OW > (1ll << 24)) return false;
    int64_t Cp = round_up(C, 8), Mp = round_up(M, 16);
    b->tiles_h = (OH + tile - 1) / tile;
    b->tiles_w = (OW + tile - 1) / tile;
    uint64_t total;
    if (kiln_mul_overflow_u64((uint64_t)N, (uint64_t)(b->tiles_h * b->tiles_w), &total) || total > (1ull << 34))
        return false;
    int64_t tb = (int64_t)(WG_SLOT_BYTES / 4) / (pts * (Cp + Mp)) / 6 * 6;
    if (tb < 6) tb = 6;
    if (tb > WG_MAX_TB) tb = WG_MAX_TB;
    if (tb > round_up((int64_t)total, 6)) tb = round_up((int64_t)total, 6);
    int64_t nb = ((int64_t)total + tb - 1) / tb;
    if (Cp + Mp <= WG_SMALL_CHANNELS) {
        /* blocks of at most WG_SMALL_MAX_TB tiles; a few of them come in a multiple of the
         * threads, so the blocks alone share out evenly (two 56x56 images on 2 threads:
         * 8 blocks of 54 rather than 7 of 60, which would take the shared-V mode below) */
        int64_t nbs = ((int64_t)total + WG_SMALL_MAX_TB - 1) / WG_SMALL_MAX_TB;
        if (tasks_uneven(nbs, threads)) nbs = round_up(nbs, threads);
        if (nbs > nb) nb = nbs;
    }
    b->TB = round_up(((int64_t)total + nb - 1) / nb, 6); /* equal blocks */
    b->n_blocks = ((int64_t)total + b->TB - 1) / b->TB;
    /* output-channel groups only when the blocks alone cannot keep the threads busy */
    int64_t panels = Mp / 16, ng = 1;
    while (ng < panels && tasks_uneven(b->n_blocks * ng, threads)) ng++;
    /* Shared V (batch 1 on more than one thread: ResNet-50's 28x28, 14x14 and 7x7 layers
     * are one tile block). With one private V per task every thread transformed the same
     * input tiles, and the block's channels were cut into exactly one group per thread,
     * so a thread that started late or was descheduled held the whole layer. Now the
     * threads first make the block's V together (one pool loop over channel blocks),
     * then take output-channel groups one at a time: at least threads * WG_TASKS_PER_THREAD
     * groups where the channels allow, none narrower than WG_MIN_GROUP_PANELS panels
     * (every group re-reads V). */
    b->shared_v = ng > 1;
    if (b->shared_v) {
        int64_t want = threads * WG_TASKS_PER_THREAD, cap = panels / WG_MIN_GROUP_PANELS;
        if (want > cap) want = cap;
        if (want < threads) want = threads;
        if (want > panels) want = panels;
        ng = want;
    }
    b->Mg = (panels + ng - 1) / ng * 16;
    b->n_groups = (Mp + b->Mg - 1) / b->Mg;
    int64_t tasks = b->shared_v ? b->n_groups : b->n_blocks * b->n_groups;
    b->n_slots = threads < tasks ? threads : tasks;
    uint64_t xb, slots;
    if (kiln_mul_overflow_u64((uint64_t)(N * (Cp / 8)), (uint64_t)((b->tiles_h * tile + 2) * (b->tiles_w * tile + 2) * 8),
                              &xb) ||
        xb > (1ull << 34))
        return false;
    b->xb_floats = (xb + 15) & ~(uint64_t)15;
    b->v_floats = b->shared_v ? (uint64_t)round_up(pts * b->TB * Cp, 16) : 0;
    b->slot_floats = (uint64_t)round_up(pts * b->TB * ((b->shared_v ? 0 : Cp) + b->Mg), 16);
    if (b->v_floats > (1ull << 34) || kiln_mul_overflow_u64((uint64_t)b->n_slots, b->slot_floats, &slots) ||
        slots > (1ull << 34))
        return false;
    b->scratch_floats = b->xb_floats + b->v_floats + slots;
    return true;
}

bool cpu_winograd_applies_dims(int32_t nsp, const int64_t *k, const int64_t *stride, const int64_t *dil,
                               int64_t group, int64_t C, int64_t M) {
    if (nsp != 2 || group != 1 || C < CPU_WINOGRAD_MIN_CHANNELS || M < CPU_WINOGRAD_MIN_CHANNELS) return false;
    for (int32_t i = 0; i < 2; i++)
        if (k[i] != 3 || stride[i] != 1 || dil[i] != 1) return false;
    return true;
}

bool cpu_winograd_applies(const cpu_conv_geom *g, int64_t group, int64_t C, int64_t M) {
    return cpu_winograd_applies_dims(g->nsp, g->k, g->stride, g->dil, group, C, M);
}
