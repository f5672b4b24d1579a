// cuda_layout.cu - layout kernels: tiled batched transpose, the padded-stem NCHW -> NHWC
// entry (cast + transpose + zero channels in one pass) and channels-last pooling.
// Launchers are extern "C" (cuda_layout.h); why these exist is said there.
//
// Style: 64-bit sizes at the launcher, 32-bit tile coordinates inside a block; grid z
// (batch) loops when the batch passes the 65535 grid limit.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_layout.h"

namespace {

constexpr int kTile = 32, kRows = 8;  // 32x32 tiles, 32x8 threads: 4 elements per thread
constexpr int kBlock = 256;

inline cudaStream_t S(void *s) { return (cudaStream_t)s; }

inline int grid_1d(int64_t n) {
    int64_t g = (n + kBlock - 1) / kBlock;
    if (g > 65535LL * 16) g = 65535LL * 16;  // grid-stride loops cover the rest
    return g < 1 ? 1 : (int)g;
}

inline unsigned grid_z(int64_t n) { return (unsigned)(n < 65535 ? (n < 1 ? 1 : n) : 65535); }

__device__ __forceinline__ float ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, int64_t i, float v) { p[i] = __float2half(v); }

// y[b, c, r] = x[b, r, c]: a tile is read along c and written along r, both coalesced;
// the +1 column keeps the transposed reads of the tile free of bank conflicts.
template <typename T>
__global__ void k_transpose(const T *__restrict__ x, T *__restrict__ y, int64_t nb, int64_t rows, int64_t cols) {
    __shared__ T tile[kTile][kTile + 1];
    int64_t r0 = (int64_t)blockIdx.y * kTile, c0 = (int64_t)blockIdx.x * kTile;
    for (int64_t b = blockIdx.z; b < nb; b += gridDim.z) {
        const T *xb = x + b * rows * cols;
        T *yb = y + b * rows * cols;
        for (int i = threadIdx.y; i < kTile; i += kRows) {
            int64_t r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[i][threadIdx.x] = xb[r * cols + c];
        }
        __syncthreads();
        for (int i = threadIdx.y; i < kTile; i += kRows) {
            int64_t c = c0 + i, r = r0 + threadIdx.x;
            if (r < rows && c < cols) yb[c * rows + r] = tile[threadIdx.x][i];
        }
        __syncthreads();
    }
}

// NCHW -> NHWC with conversion and zero channels [c, cp): x [n, c, hw] -> y [n, hw, cp].
// Tiled like k_transpose over (channel, pixel); channels past c are written as zeros.
template <typename S_, typename D>
__global__ void k_to_nhwc_tiled(const S_ *__restrict__ x, D *__restrict__ y, int64_t n, int64_t c, int64_t hw,
                                int64_t cp) {
    __shared__ float tile[kTile][kTile + 1];
    int64_t p0 = (int64_t)blockIdx.x * kTile, ch0 = (int64_t)blockIdx.y * kTile;
    for (int64_t b = blockIdx.z; b < n; b += gridDim.z) {
        for (int i = threadIdx.y; i < kTile; i += kRows) {
            int64_t ch = ch0 + i, p = p0 + threadIdx.x;
            if (p < hw) tile[i][threadIdx.x] = ch < c ? ld(x, (b * c + ch) * hw + p) : 0.f;
        }
        __syncthreads();
        for (int i = threadIdx.y; i < kTile; i += kRows) {
            int64_t p = p0 + i, ch = ch0 + threadIdx.x;
            if (p < hw && ch < cp) st(y, (b * hw + p) * cp + ch, tile[threadIdx.x][i]);
        }
        __syncthreads();
    }
}

// Few channels (a padded RGB stem, cp <= 8) to half: one thread per pixel reads its c
// values (coalesced across the warp, one plane each) and writes cp halves at once.
template <typename S_, int CP>
__global__ void k_to_nhwc_small(const S_ *__restrict__ x, __half *__restrict__ y, int64_t n, int c, int64_t hw) {
    int64_t total = n * hw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / hw, p = i - b * hw;
        const S_ *xp = x + b * c * hw + p;
        __align__(16) __half v[CP];
#pragma unroll
        for (int k = 0; k < CP; k++) v[k] = __float2half(k < c ? ld(xp, (int64_t)k * hw) : 0.f);
        if constexpr (CP == 8) *(uint4 *)(y + i * CP) = *(const uint4 *)v;
        else if constexpr (CP == 4) *(uint2 *)(y + i * CP) = *(const uint2 *)v;
        else
            for (int k = 0; k < CP; k++) y[i * CP + k] = v[k];
    }
}

// Scalar channels-last pooling (any c, float or half): consecutive threads take
// consecutive channels, so loads and stores are coalesced.
template <typename T>
__global__ void k_pool_nhwc(const T *__restrict__ x, T *__restrict__ y, int64_t total, int64_t c, int64_t h, int64_t w,
                            int64_t oh, int64_t ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                            int is_max, int incl_pad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = i % c, ox = (i / c) % ow, oy = (i / (c * ow)) % oh, b = i / (c * ow * oh);
        const T *xp = x + b * h * w * c + ch;
        float acc = is_max ? -INFINITY : 0.f;
        int cnt = 0;
        for (int ky = 0; ky < kh; ky++) {
            int64_t iy = oy * sh - ph + (int64_t)ky * dh;
            for (int kx = 0; kx < kw; kx++) {
                int64_t ix = ox * sw - pw + (int64_t)kx * dw;
                if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
                    float v = ld(xp, (iy * w + ix) * c);
                    acc = is_max ? fmaxf(acc, v) : acc + v;
                    cnt++;
                } else if (incl_pad && iy < h + ph && ix < w + pw) {
                    cnt++;
                }
            }
        }
        st(y, i, is_max ? acc : (cnt ? acc / (float)cnt : 0.f));
    }
}

// Half channels-last pooling, 8 channels (16 bytes) per thread: c % 8 == 0. Max in half
// (__hmax2, exact; a NaN loses against a number as fmaxf's does), average in float.
// K > 0: a K x K window known at compile time (ResNet's 3x3 max pool), whose loads the
// compiler unrolls and issues together; K = 0 takes kh, kw at run time.
template <int K>
__global__ void k_pool_nhwc_h8(const __half *__restrict__ x, __half *__restrict__ y, int64_t total, int64_t c8,
                               int64_t h, int64_t w, int64_t oh, int64_t ow, int kh_, int kw_, int sh, int sw, int ph,
                               int pw, int dh, int dw, int is_max, int incl_pad) {
    const int kh = K > 0 ? K : kh_, kw = K > 0 ? K : kw_;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = i / c8, cg = i - q * c8;
        int64_t ox = q % ow, r = q / ow, oy = r % oh, b = r / oh;
        const uint4 *xp = (const uint4 *)x + b * h * w * c8 + cg;
        __half2 m[4];
        float s[8];
        const __half2 ninf = __halves2half2(__ushort_as_half(0xFC00), __ushort_as_half(0xFC00));
#pragma unroll
        for (int k = 0; k < 4; k++) m[k] = ninf;
#pragma unroll
        for (int k = 0; k < 8; k++) s[k] = 0.f;
        int cnt = 0;
#pragma unroll
        for (int ky = 0; ky < kh; ky++) {
            int64_t iy = oy * sh - ph + (int64_t)ky * dh;
#pragma unroll
            for (int kx = 0; kx < kw; kx++) {
                int64_t ix = ox * sw - pw + (int64_t)kx * dw;
                if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
                    uint4 u = __ldg(xp + (iy * w + ix) * c8);
                    const __half2 *v = (const __half2 *)&u;
                    if (is_max) {
#pragma unroll
                        for (int k = 0; k < 4; k++) m[k] = __hmax2(m[k], v[k]);
                    } else {
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            float2 f = __half22float2(v[k]);
                            s[2 * k] += f.x;
                            s[2 * k + 1] += f.y;
                        }
                    }
                    cnt++;
                } else if (incl_pad && iy < h + ph && ix < w + pw) {
                    cnt++;
                }
            }
        }
        uint4 out;
        __half2 *o = (__half2 *)&out;
        if (is_max) {
#pragma unroll
            for (int k = 0; k < 4; k++) o[k] = m[k];
        } else {
            float inv = cnt ? 1.f / (float)cnt : 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) o[k] = __floats2half2_rn(s[2 * k] * inv, s[2 * k + 1] * inv);
        }
        ((uint4 *)y)[i] = out;
    }
}

}  // namespace

extern "C" int cuda_k_transpose_batched(const void *x, void *y, int elem_size, int64_t nb, int64_t rows, int64_t cols,
                                        void *stream) {
    if (nb <= 0 || rows <= 0 || cols <= 0) return (int)cudaGetLastError();
    int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
    if (gx > 0x7fffffffLL || gy > 65535) return (int)cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)gx, (unsigned)gy, grid_z(nb)), block(kTile, kRows);
    switch (elem_size) {
    case 1: k_transpose<uint8_t><<<grid, block, 0, S(stream)>>>((const uint8_t *)x, (uint8_t *)y, nb, rows, cols); break;
    case 2: k_transpose<uint16_t><<<grid, block, 0, S(stream)>>>((const uint16_t *)x, (uint16_t *)y, nb, rows, cols); break;
    case 4: k_transpose<uint32_t><<<grid, block, 0, S(stream)>>>((const uint32_t *)x, (uint32_t *)y, nb, rows, cols); break;
    case 8: k_transpose<uint64_t><<<grid, block, 0, S(stream)>>>((const uint64_t *)x, (uint64_t *)y, nb, rows, cols); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_nchw_to_nhwc(const void *x, int x_half, void *y, int y_half, int64_t n, int64_t c, int64_t hw,
                                   int64_t cp, void *stream) {
    if (n <= 0 || hw <= 0 || cp <= 0) return (int)cudaGetLastError();
    if (c > cp) return (int)cudaErrorInvalidValue;
    if (y_half && (cp == 8 || cp == 4)) {
        int64_t total = n * hw;
        if (cp == 8) {
            if (x_half) k_to_nhwc_small<__half, 8><<<grid_1d(total), kBlock, 0, S(stream)>>>((const __half *)x, (__half *)y, n, (int)c, hw);
            else k_to_nhwc_small<float, 8><<<grid_1d(total), kBlock, 0, S(stream)>>>((const float *)x, (__half *)y, n, (int)c, hw);
        } else {
            if (x_half) k_to_nhwc_small<__half, 4><<<grid_1d(total), kBlock, 0, S(stream)>>>((const __half *)x, (__half *)y, n, (int)c, hw);
            else k_to_nhwc_small<float, 4><<<grid_1d(total), kBlock, 0, S(stream)>>>((const float *)x, (__half *)y, n, (int)c, hw);
        }
        return (int)cudaGetLastError();
    }
    int64_t gx = (hw + kTile - 1) / kTile, gy = (cp + kTile - 1) / kTile;
    if (gx > 0x7fffffffLL || gy > 65535) return (int)cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)gx, (unsigned)gy, grid_z(n)), block(kTile, kRows);
    if (x_half && y_half) k_to_nhwc_tiled<__half, __half><<<grid, block, 0, S(stream)>>>((const __half *)x, (__half *)y, n, c, hw, cp);
    else if (x_half) k_to_nhwc_tiled<__half, float><<<grid, block, 0, S(stream)>>>((const __half *)x, (float *)y, n, c, hw, cp);
    else if (y_half) k_to_nhwc_tiled<float, __half><<<grid, block, 0, S(stream)>>>((const float *)x, (__half *)y, n, c, hw, cp);
    else k_to_nhwc_tiled<float, float><<<grid, block, 0, S(stream)>>>((const float *)x, (float *)y, n, c, hw, cp);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_pool2d_nhwc(int half, const void *x, void *y, int64_t n, int64_t c, int64_t h, int64_t w,
                                  int64_t oh, int64_t ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                                  int is_max, int count_include_pad, void *stream) {
    int64_t total = n * oh * ow * c;
    if (total <= 0) return (int)cudaGetLastError();
    bool aligned = ((uintptr_t)x % 16) == 0 && ((uintptr_t)y % 16) == 0;
    if (half && c % 8 == 0 && aligned) {
        int64_t t8 = total / 8;
        if (kh == 3 && kw == 3)
            k_pool_nhwc_h8<3><<<grid_1d(t8), kBlock, 0, S(stream)>>>((const __half *)x, (__half *)y, t8, c / 8, h, w, oh,
                                                                     ow, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
                                                                     count_include_pad);
        else
            k_pool_nhwc_h8<0><<<grid_1d(t8), kBlock, 0, S(stream)>>>((const __half *)x, (__half *)y, t8, c / 8, h, w, oh,
                                                                     ow, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
                                                                     count_include_pad);
    } else if (half) {
        k_pool_nhwc<__half><<<grid_1d(total), kBlock, 0, S(stream)>>>((const __half *)x, (__half *)y, total, c, h, w,
                                                                      oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
                                                                      count_include_pad);
    } else {
        k_pool_nhwc<float><<<grid_1d(total), kBlock, 0, S(stream)>>>((const float *)x, (float *)y, total, c, h, w, oh,
                                                                     ow, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
                                                                     count_include_pad);
    }
    return (int)cudaGetLastError();
}
