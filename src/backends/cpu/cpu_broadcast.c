/* cpu_broadcast.c - broadcast shapes and the collapsed, parallel iteration (see cpu_broadcast.h). */
#include "backends/cpu/cpu_broadcast.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_elem_util.h"

static const char *shape_text(int32_t r, const int64_t *d, char *buf, size_t size) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int32_t i = 0; i < r && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? ", " : "", d[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

kiln_status cpu_bcast_shape(cpu_kernel_ctx *ctx, int32_t ra, const int64_t *da, int32_t rb, const int64_t *db,
                            int32_t *r_out, int64_t *d_out) {
    int32_t r = ra > rb ? ra : rb;
    if (r > RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_LIMIT, "broadcast rank %d is too large", (int)r);
    int64_t tmp[RT_MAX_RANK];
    for (int32_t i = 0; i < r; i++) {
        int32_t ia = i - (r - ra), ib = i - (r - rb);
        int64_t a = ia >= 0 ? da[ia] : 1, b = ib >= 0 ? db[ib] : 1;
        if (a == b || b == 1) tmp[i] = a;
        else if (a == 1) tmp[i] = b;
        else {
            char s1[160], s2[160];
            return cpu_kernel_fail(ctx, KILN_ERR_SHAPE,
                                   "shapes %s and %s do not broadcast (dimension %d: %" PRId64 " vs %" PRId64 ")",
                                   shape_text(ra, da, s1, sizeof s1), shape_text(rb, db, s2, sizeof s2), (int)i, a,
                                   b);
        }
    }
    memcpy(d_out, tmp, sizeof(int64_t) * (size_t)r);
    *r_out = r;
    return KILN_OK;
}

kiln_status cpu_bcast_init(cpu_bcast *b, cpu_kernel_ctx *ctx, const rt_tensor *const *ins, int32_t n_in) {
    memset(b, 0, sizeof *b);
    b->n_in = n_in;
    b->out_rank = 0;
    for (int32_t k = 0; k < n_in; k++) {
        kiln_status st = cpu_bcast_shape(ctx, b->out_rank, b->out_dims, ins[k]->rank, ins[k]->dims, &b->out_rank,
                                         b->out_dims);
        if (st != KILN_OK) return st;
    }
    int32_t r = b->out_rank;
    uint64_t count = 1;
    for (int32_t i = 0; i < r; i++) count *= (uint64_t)b->out_dims[i];
    b->count = count;
    /* full-rank strides per input */
    int64_t st_full[CPU_BCAST_MAX_IN][RT_MAX_RANK];
    for (int32_t k = 0; k < n_in; k++) {
        int64_t s = 1;
        for (int32_t i = r - 1; i >= 0; i--) {
            int32_t ii = i - (r - ins[k]->rank);
            int64_t d = ii >= 0 ? ins[k]->dims[ii] : 1;
            st_full[k][i] = d == 1 ? 0 : s;
            s *= d;
        }
    }
    /* collapse */
    int32_t cr = 0;
    for (int32_t i = 0; i < r; i++) {
        int64_t d = b->out_dims[i];
        if (d == 1) continue;
        bool merge = cr > 0;
        for (int32_t k = 0; k < n_in && merge; k++)
            merge = b->strides[k][cr - 1] == st_full[k][i] * d;
        if (merge) {
            b->dims[cr - 1] *= d;
            for (int32_t k = 0; k < n_in; k++) b->strides[k][cr - 1] = st_full[k][i];
            continue;
        }
        b->dims[cr] = d;
        for (int32_t k = 0; k < n_in; k++) b->strides[k][cr] = st_full[k][i];
        cr++;
    }
    if (cr == 0) {
        b->dims[0] = 1;
        for (int32_t k = 0; k < n_in; k++) b->strides[k][0] = 1;
        cr = 1;
    }
    b->rank = cr;
    return KILN_OK;
}

typedef struct bcast_job {
    const cpu_bcast *b;
    char *out;
    size_t out_esize;
    const char *in[CPU_BCAST_MAX_IN];
    size_t in_esize[CPU_BCAST_MAX_IN];
    cpu_bcast_seg_fn fn;
    void *user;
} bcast_job;

static void bcast_chunk(void *user, int64_t begin, int64_t end) {
    const bcast_job *j = user;
    const cpu_bcast *b = j->b;
    int32_t r = b->rank, n_in = b->n_in;
    int64_t idx[RT_MAX_RANK];
    int64_t off[CPU_BCAST_MAX_IN] = {0};
    int64_t rem = begin;
    for (int32_t i = r - 1; i >= 0; i--) {
        idx[i] = rem % b->dims[i];
        rem /= b->dims[i];
        for (int32_t k = 0; k < n_in; k++) off[k] += idx[i] * b->strides[k][i];
    }
    int64_t inc[CPU_BCAST_MAX_IN];
    for (int32_t k = 0; k < n_in; k++) inc[k] = b->strides[k][r - 1];
    int64_t inner = b->dims[r - 1];
    int64_t pos = begin;
    while (pos < end) {
        int64_t n = inner - idx[r - 1];
        if (n > end - pos) n = end - pos;
        const char *p[CPU_BCAST_MAX_IN];
        for (int32_t k = 0; k < n_in; k++) p[k] = j->in[k] + off[k] * (int64_t)j->in_esize[k];
        j->fn(j->user, j->out + pos * (int64_t)j->out_esize, p, inc, n);
        pos += n;
        /* advance the odometer by n along the last dim, carrying into outer dims */
        for (int32_t k = 0; k < n_in; k++) off[k] += n * inc[k];
        idx[r - 1] += n;
        for (int32_t i = r - 1; i > 0 && idx[i] == b->dims[i]; i--) {
            for (int32_t k = 0; k < n_in; k++) off[k] += b->strides[k][i - 1] - b->strides[k][i] * b->dims[i];
            idx[i] = 0;
            idx[i - 1]++;
        }
    }
}

void cpu_bcast_run(const cpu_bcast *b, cpu_threadpool *pool, void *out, size_t out_esize, const void *const *in,
                   const size_t *in_esize, cpu_bcast_seg_fn fn, void *user) {
    if (b->count == 0) return;
    bcast_job j = {.b = b, .out = out, .out_esize = out_esize, .fn = fn, .user = user};
    for (int32_t k = 0; k < b->n_in; k++) {
        j.in[k] = in[k];
        j.in_esize[k] = in_esize[k];
    }
    if (b->count < CPU_ELEM_GRAIN) bcast_chunk(&j, 0, (int64_t)b->count);
    else cpu_parallel_for(pool, (int64_t)b->count, CPU_ELEM_GRAIN, bcast_chunk, &j);
}
