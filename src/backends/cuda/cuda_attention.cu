// cuda_attention.cu - the fused attention kernel behind the CUDA backend's Attention node
// (cuda_attention.c; the graph pass build/passes/fuse_attention.c turns a transformer's
// MatMul -> scale -> mask -> Softmax -> MatMul block into that node).
//
// One block = 8 warps x 2 query rows of one (batch, head); keys and values stream through
// shared memory in tiles of 32, and each row keeps a running max, sum and output
// (online softmax), so the scores never reach device memory and any key length works.
// Lane j of a warp scores key j of the tile (a dot product over the head dim against a
// padded K row: no bank conflicts); the probabilities are then broadcast with shuffles
// and each lane accumulates head dims lane, lane + 32, ... of the output. Storage is float
// or __half (FP16 activations); all math is float32. The additive mask has its own storage
// type (M): with FP16 activations it is normally float32, since the FP16 pass keeps mask
// arithmetic in float32 ((1 - m) * -10000 overflows half for m outside 0/1; an inf score
// turns the online softmax into inf - inf = NaN). Rows whose keys are all masked (-inf)
// produce zeros, as the CPU kernel does.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"

namespace {

constexpr int kWarps = 8, kRows = 2, kTile = 32, kDmax = CUDA_ATT_MAX_D;

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, int64_t i, float v) { p[i] = __float2half(v); }

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T, typename M>
__global__ void __launch_bounds__(kWarps * 32) k_attention(const T *__restrict__ q, const T *__restrict__ k,
                                                           const T *__restrict__ v, const M *__restrict__ mask,
                                                           T *__restrict__ y, cuda_att_args a) {
    extern __shared__ float smem[];
    const int D = (int)a.D, Dv = (int)a.Dv;
    float *ks = smem;                    // [kTile][D + 1] (padded: lane j reads row j)
    float *vs = ks + kTile * (D + 1);    // [kTile][Dv]
    float *qs = vs + kTile * Dv;         // [kWarps * kRows][D], pre-scaled
    const int64_t b = blockIdx.y / a.Hq, h = blockIdx.y % a.Hq, hk = h / (a.Hq / a.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row0 = (int64_t)blockIdx.x * kWarps * kRows;
    for (int idx = threadIdx.x; idx < kWarps * kRows * D; idx += blockDim.x) {
        int64_t i = row0 + idx / D;
        qs[idx] = i < a.S ? ld(q, b * a.q_sb + h * a.q_sh + i * a.q_ss + idx % D) * a.scale : 0.f;
    }
    float m[kRows], l[kRows], o[kRows][kDmax / 32];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int c = 0; c < kDmax / 32; c++) o[r][c] = 0.f;
    }
    const int64_t shift = 0; // causal: row i sees keys j <= i (no past key/values here)
    for (int64_t j0 = 0; j0 < a.L; j0 += kTile) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
            int64_t j = j0 + idx / D;
            ks[(idx / D) * (D + 1) + idx % D] = j < a.L ? ld(k, b * a.k_sb + hk * a.k_sh + j * a.k_ss + idx % D) : 0.f;
        }
        for (int idx = threadIdx.x; idx < kTile * Dv; idx += blockDim.x) {
            int64_t j = j0 + idx / Dv;
            vs[idx] = j < a.L ? ld(v, b * a.v_sb + hk * a.v_sh + j * a.v_ss + idx % Dv) : 0.f;
        }
        __syncthreads();
        const int nk = (int)(a.L - j0 < kTile ? a.L - j0 : kTile);
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            const int64_t i = row0 + warp * kRows + r;
            if (i >= a.S) continue; // uniform across the warp
            const int64_t j = j0 + lane;
            const float *qr = qs + (warp * kRows + r) * D;
            float s = -INFINITY;
            if (lane < nk && !(a.causal && j > i + shift)) {
                const float *kr = ks + lane * (D + 1);
                float acc = 0.f;
                for (int d = 0; d < D; d++) acc += qr[d] * kr[d];
                if (mask) acc += ld(mask, b * a.m_sb + h * a.m_sh + i * a.m_si + j * a.m_sj);
                s = acc;
            }
            const float mnew = fmaxf(m[r], warp_max(s));
            const float p = s == -INFINITY ? 0.f : __expf(s - mnew);
            const float corr = m[r] == -INFINITY ? 0.f : __expf(m[r] - mnew);
            l[r] = l[r] * corr + warp_sum(p);
#pragma unroll
            for (int c = 0; c < kDmax / 32; c++) o[r][c] *= corr;
            for (int jj = 0; jj < nk; jj++) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
                const float *vr = vs + jj * Dv;
#pragma unroll
                for (int c = 0; c < kDmax / 32; c++) {
                    const int d = lane + 32 * c;
                    if (d < Dv) o[r][c] += pj * vr[d];
                }
            }
            m[r] = mnew;
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        const int64_t i = row0 + warp * kRows + r;
        if (i >= a.S) continue;
        const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
        for (int c = 0; c < kDmax / 32; c++) {
            const int d = lane + 32 * c;
            if (d < Dv) st(y, b * a.y_sb + h * a.y_sh + i * a.y_ss + d, o[r][c] * inv);
        }
    }
}

}  // namespace

extern "C" int cuda_k_attention(int half, const void *q, const void *k, const void *v, const void *mask, void *y,
                                const cuda_att_args *a, void *stream) {
    if (a->B <= 0 || a->Hq <= 0 || a->S <= 0) return (int)cudaGetLastError();
    if (a->D < 1 || a->D > kDmax || a->Dv < 1 || a->Dv > kDmax || a->Hkv < 1 || a->Hq % a->Hkv != 0 ||
        a->B * a->Hq > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)((a->S + kWarps * kRows - 1) / (kWarps * kRows)), (unsigned)(a->B * a->Hq));
    size_t sm = sizeof(float) * (size_t)(kTile * (a->D + 1) + kTile * a->Dv + kWarps * kRows * a->D);
    cudaStream_t s = (cudaStream_t)stream;
    const int th = kWarps * 32;
    if (half && a->mask_half)
        k_attention<__half, __half><<<grid, th, sm, s>>>((const __half *)q, (const __half *)k, (const __half *)v,
                                                          (const __half *)mask, (__half *)y, *a);
    else if (half)
        k_attention<__half, float><<<grid, th, sm, s>>>((const __half *)q, (const __half *)k, (const __half *)v,
                                                         (const float *)mask, (__half *)y, *a);
    else if (a->mask_half)
        k_attention<float, __half><<<grid, th, sm, s>>>((const float *)q, (const float *)k, (const float *)v,
                                                         (const __half *)mask, (float *)y, *a);
    else
        k_attention<float, float><<<grid, th, sm, s>>>((const float *)q, (const float *)k, (const float *)v,
                                                        (const float *)mask, (float *)y, *a);
    return (int)cudaGetLastError();
}
