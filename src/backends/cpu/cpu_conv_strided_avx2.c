/* cpu_conv_strided_avx2.c - phase-split input and its B-panel packer for strided 2-D
 * convolutions (cpu_conv_strided.h says what the planes are). Everything here runs only
 * on the packed-GEMM path (cpu_gemm_packed_supported(), which implies AVX2), so the whole
 * file is compiled for AVX2.
 *
 * Why: perf (bench_layers, 1 thread, batch 1) had the old packer (conv_pack_b: stride-2
 * gathers from the image, per-segment scalar loops for panels crossing output rows or
 * touching the padding) at 13-30% of ResNet-50's strided layers: stem 20%, layer2.0's
 * 3x3/2 30%, layer3.0's 19%, layer4.0's 13%, the 1x1/2 downsample convs 7-16%. Now the
 * plane copy (one pass over the input) is 6-7% and this packer 3-7%. Interleaved A/B
 * against main (docs/BENCHMARKS.md, "Session 4: strided convolutions"): the seven strided
 * layers, bench_layers thread CPU time, batch 8: 191.3 -> 175.7 ms (sum of minima),
 * batch 1: 19.1 -> 18.4 ms; in the network at batch 8, 1 thread 208 -> 177 ms (ONNX
 * Runtime 172). Stride-1 convs on the GEMM (a padded copy): 10% less on ResNet's 3x3s. */
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_avx2_util.h"
#include "backends/cpu/cpu_conv_strided.h"

bool cpu_conv_phase_plan(const cpu_conv_geom *g, cpu_conv_phase *ph) {
    memset(ph, 0, sizeof *ph);
    if (g->nsp != 2) return false;
    int64_t KH = g->k[0], KW = g->k[1], sh = g->stride[0], sw = g->stride[1], dh = g->dil[0], dw = g->dil[1];
    if (KH < 1 || KW < 1 || KH > CPU_CONV_PHASE_MAX_K || KW > CPU_CONV_PHASE_MAX_K || sh < 1 || sw < 1 || dh < 1 ||
        dw < 1 || sh > (1 << 20) || sw > (1 << 20) || dh > (1 << 20) || dw > (1 << 20))
        return false;
    ph->g = g;
    ph->H2 = g->out[0] + ((KH - 1) * dh) / sh;
    ph->W2 = g->out[1] + ((KW - 1) * dw) / sw;
    /* the phases some tap uses, in first-use order; yoff/xoff hold the plane index first */
    int64_t yi[CPU_CONV_PHASE_MAX_K], xi[CPU_CONV_PHASE_MAX_K];
    for (int64_t kh = 0; kh < KH; kh++) {
        int64_t p = (kh * dh) % sh, i = 0;
        while (i < ph->ny && ph->py[i] != p) i++;
        if (i == ph->ny) ph->py[ph->ny++] = p;
        yi[kh] = i;
    }
    for (int64_t kw = 0; kw < KW; kw++) {
        int64_t p = (kw * dw) % sw, i = 0;
        while (i < ph->nx && ph->px[i] != p) i++;
        if (i == ph->nx) ph->px[ph->nx++] = p;
        xi[kw] = i;
    }
    /* sizes: H2, W2 are at most the padded input's, which cpu_conv_geom_init bounded */
    if (ph->H2 > (1 << 24) || ph->W2 > (1 << 24)) return false;
    ph->plane = ph->H2 * ph->W2;
    if (ph->plane > ((int64_t)1 << 40) / (ph->ny * ph->nx)) return false;
    ph->cstride = ph->ny * ph->nx * ph->plane;
    for (int64_t kh = 0; kh < KH; kh++) ph->yoff[kh] = yi[kh] * ph->nx * ph->plane + ((kh * dh) / sh) * ph->W2;
    for (int64_t kw = 0; kw < KW; kw++) ph->xoff[kw] = xi[kw] * ph->plane + (kw * dw) / sw;
    return true;
}

typedef struct build_job {
    const cpu_conv_phase *ph;
    const float *x;
    float *dst;
} build_job;

/* Items are (channel, phase plane) pairs, so that the stem's 3 channels (12 planes)
 * still spread over the threads. */
static void build_run(void *user, int64_t i0, int64_t i1) {
    const build_job *j = user;
    const cpu_conv_phase *ph = j->ph;
    const cpu_conv_geom *g = ph->g;
    int64_t H = g->in[0], W = g->in[1], sh = g->stride[0], sw = g->stride[1], pt = g->pad0[0], pl = g->pad0[1];
    int64_t H2 = ph->H2, W2 = ph->W2, planes = ph->ny * ph->nx;
    for (int64_t it = i0; it < i1; it++) {
        int64_t c = it / planes, yi = (it % planes) / ph->nx, xi = it % ph->nx;
        const float *xc = j->x + c * H * W;
        float *plane = j->dst + c * ph->cstride + (yi * ph->nx + xi) * ph->plane;
        int64_t px = ph->px[xi];
        /* plane columns j whose input column j*sw + px - pl lies in [0, W) */
        int64_t jlo = pl > px ? (pl - px + sw - 1) / sw : 0;
        int64_t jhi = W - 1 + pl - px < 0 ? 0 : (W - 1 + pl - px) / sw + 1;
        if (jhi > W2) jhi = W2;
        if (jlo > jhi) jlo = jhi;
        for (int64_t i = 0; i < H2; i++) {
            float *d = plane + i * W2;
            int64_t ih = i * sh + ph->py[yi] - pt;
            if (ih < 0 || ih >= H || jlo == jhi) {
                memset(d, 0, (size_t)W2 * sizeof(float));
                continue;
            }
            const float *src = xc + ih * W + jlo * sw + px - pl;
            for (int64_t t = 0; t < jlo; t++) d[t] = 0.f;
            /* rows are written in order, so all but a plane's last may spill into the next */
            if (sw == 1) memcpy(d + jlo, src, (size_t)(jhi - jlo) * sizeof(float));
            else if (sw == 2) cpu_extract_even(src, jhi - jlo, d + jlo, xc + H * W, i + 1 < H2);
            else
                for (int64_t t = 0; t < jhi - jlo; t++) d[jlo + t] = src[t * sw];
            for (int64_t t = jhi; t < W2; t++) d[t] = 0.f;
        }
    }
}

void cpu_conv_phase_build(cpu_threadpool *pool, const cpu_conv_phase *ph, const float *x, int64_t channels,
                          float *dst) {
    build_job j = {ph, x, dst};
    /* grain: about 4K floats of planes per chunk at least */
    int64_t grain = (4096 + ph->plane - 1) / ph->plane;
    cpu_parallel_for(pool, channels * ph->ny * ph->nx, grain, build_run, &j);
}

/* A panel row is the 16 positions' floats of one tap of one channel: position j of the
 * panel reads base[off[j]], off[j] = oh*W2 + ow. Each 8-lane half of the panel is one
 * contiguous run, or two when it crosses an output row (a row of >= 7 positions: then 8
 * consecutive positions span at most two rows). Two runs are two unaligned loads and a
 * blend: lanes before the row end from the first run, lanes after it from a load placed
 * so that its lane t is the second run's first float. Both loads stay inside the tap's
 * plane (the first overruns into the next plane row, which exists because the second run
 * is on it; the second starts in the previous row's tail). Halves of 3+ runs (outputs
 * narrower than 7) and the short last panel take the scalar loop. */
void cpu_conv_phase_pack_b(void *user, int64_t panel, int64_t k0, int64_t kc, float *dst) {
    const cpu_conv_phase_pack *pk = user;
    const cpu_conv_phase *ph = pk->ph;
    const cpu_conv_geom *g = ph->g;
    int64_t OW = g->out[1], OS = g->out_size, KW = g->k[1], KHW = g->k[0] * g->k[1], W2 = ph->W2;
    int64_t p0 = panel * 16, w = OS - p0 < 16 ? OS - p0 : 16;
    int64_t off[16];
    for (int64_t j = 0, oh = p0 / OW, ow = p0 % OW; j < w; j++) {
        off[j] = oh * W2 + ow;
        if (++ow == OW) {
            ow = 0;
            oh++;
        }
    }
    int64_t c = k0 / KHW, kh = (k0 % KHW) / KW, kw = k0 % KW;
    const float *pc = pk->p + c * ph->cstride;
    /* per half: first-run offset, second-run offset and the blend mask (all-ones lanes
     * from the second run); runs = number of runs (3 = give up) */
    int64_t oa[2] = {0, 0}, ob[2] = {0, 0};
    int runs = 1;
    __m256i m[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    if (w == 16)
        for (int h = 0; h < 2; h++) {
            const int64_t *o = off + 8 * h;
            int t = 0, breaks = 0;
            for (int l = 1; l < 8; l++)
                if (o[l] != o[l - 1] + 1) {
                    breaks++;
                    t = l;
                }
            oa[h] = ob[h] = o[0];
            if (breaks > 1) runs = 3;
            else if (breaks == 1) {
                if (runs < 2) runs = 2;
                ob[h] = o[t] - t;
                int32_t mk[8];
                for (int l = 0; l < 8; l++) mk[l] = l >= t ? -1 : 0;
                m[h] = _mm256_loadu_si256((const __m256i *)mk);
            }
        }
    else
        runs = 3;
    for (int64_t k = 0; k < kc; k++) {
        const float *base = pc + ph->yoff[kh] + ph->xoff[kw];
        float *d = dst + k * 16;
        if (runs == 1) {
            /* one output row segment per half: the common case for wide outputs */
            _mm256_storeu_ps(d, _mm256_loadu_ps(base + oa[0]));
            _mm256_storeu_ps(d + 8, _mm256_loadu_ps(base + oa[1]));
        } else if (runs == 2) {
            _mm256_storeu_ps(d, _mm256_blendv_ps(_mm256_loadu_ps(base + oa[0]), _mm256_loadu_ps(base + ob[0]),
                                                 _mm256_castsi256_ps(m[0])));
            _mm256_storeu_ps(d + 8, _mm256_blendv_ps(_mm256_loadu_ps(base + oa[1]), _mm256_loadu_ps(base + ob[1]),
                                                     _mm256_castsi256_ps(m[1])));
        } else {
            int64_t j = 0;
            for (; j < w; j++) d[j] = base[off[j]];
            for (; j < 16; j++) d[j] = 0.f;
        }
        if (++kw == KW) {
            kw = 0;
            if (++kh == g->k[0]) {
                kh = 0;
                pc += ph->cstride;
            }
        }
    }
}
