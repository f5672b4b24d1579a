// cuda_kernels.cu - kiln's own CUDA kernels: elementwise (unary, broadcast binary, Where),
// strided N-d copies (Transpose/Slice/Concat/Expand), Softmax, LayerNormalization,
// BatchNormalization, NCHW pooling (channels-last pooling and the fast transposes are in
// cuda_layout.cu), reductions, Gather, Cast and the bias+activation epilogue
// used after cuDNN convolutions. GEMMs and convolutions themselves go to cuBLASLt and
// cuDNN (cuda_gemm.c, cuda_conv.c). Launchers are extern "C" (cuda_kernels.h).
//
// Style: grid-stride loops with 64-bit indices; row kernels (softmax, layer norm) use one
// block per row with a shared-memory reduction, accumulating in float.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"

namespace {

constexpr int kBlock = 256;

// Float16 storage, float32 math: every kernel below is a template over the storage type
// T (float or __half); loads widen to float and stores round once (FP16 activations,
// docs/CUDA.md "FP16"). Accumulations (sums, means, variances) are float throughout.
__device__ __forceinline__ float ldf(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ldf(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void stf(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(__half *p, int64_t i, float v) { p[i] = __float2half(v); }

inline int grid_for(int64_t n) {
    int64_t g = (n + kBlock - 1) / kBlock;
    if (g > 65535LL * 16) g = 65535LL * 16;  // grid-stride loops cover the rest
    if (g < 1) g = 1;
    return (int)g;
}

__device__ __forceinline__ float unary_f(int op, float x, float a, float b) {
    switch (op) {
    case CU_RELU: return x > 0.f ? x : 0.f;
    case CU_SIGMOID: return 1.f / (1.f + expf(-x));
    case CU_TANH: return tanhf(x);
    case CU_ERF: return erff(x);
    case CU_SQRT: return sqrtf(x);
    case CU_EXP: return expf(x);
    case CU_LOG: return logf(x);
    case CU_NEG: return -x;
    case CU_ABS: return fabsf(x);
    case CU_RECIP: return 1.f / x;
    case CU_GELU_ERF: return 0.5f * x * erfcf(-x * 0.70710678118654752f);  // erfc: no cancellation for x < 0
    case CU_GELU_TANH: {
        float z = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return x / (1.f + expf(-2.f * z));  // x * sigmoid(2z) == 0.5 x (1 + tanh z)
    }
    case CU_CLIP: return fminf(fmaxf(x, a), b);
    case CU_LEAKY: return x >= 0.f ? x : a * x;
    case CU_HSIGMOID: return fminf(fmaxf(a * x + b, 0.f), 1.f);
    case CU_HSWISH: return x * fminf(fmaxf(x / 6.f + 0.5f, 0.f), 1.f);
    case CU_SOFTPLUS: return x > 20.f ? x : log1pf(expf(x));
    case CU_ELU: return x >= 0.f ? x : a * (expf(x) - 1.f);
    case CU_FLOOR: return floorf(x);
    case CU_CEIL: return ceilf(x);
    default: return x;
    }
}

template <typename T>
__device__ __forceinline__ T binary_op(int op, T a, T b) {
    switch (op) {
    case CB_ADD: return a + b;
    case CB_SUB: return a - b;
    case CB_MUL: return a * b;
    case CB_DIV: return a / b;
    case CB_MAX: return a > b ? a : b;
    case CB_MIN: return a < b ? a : b;
    default: return a;
    }
}

template <>
__device__ __forceinline__ float binary_op<float>(int op, float a, float b) {
    switch (op) {
    case CB_ADD: return a + b;
    case CB_SUB: return a - b;
    case CB_MUL: return a * b;
    case CB_DIV: return a / b;
    case CB_POW: return powf(a, b);
    case CB_MAX: return fmaxf(a, b);
    case CB_MIN: return fminf(a, b);
    default: return a;
    }
}

template <typename T>
__global__ void k_unary(int op, const T *__restrict__ x, T *__restrict__ y, int64_t n, float a, float b) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        stf(y, i, unary_f(op, ldf(x, i), a, b));
}

// offsets of output element i in each of k operands
template <int K>
__device__ __forceinline__ void bcast_offsets(const cuda_bcast &bc, int64_t i, int64_t *off) {
    for (int k = 0; k < K; k++) off[k] = 0;
    for (int d = bc.rank - 1; d >= 0; d--) {
        int64_t c = i % bc.dims[d];
        i /= bc.dims[d];
        for (int k = 0; k < K; k++) off[k] += c * bc.str[k][d];
    }
}

template <typename T>
__global__ void k_binary_h(int op, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y, int64_t n,
                           cuda_bcast bc, int contiguous) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (contiguous) {
            stf(y, i, binary_op<float>(op, ldf(a, i), ldf(b, i)));
        } else {
            int64_t off[2];
            bcast_offsets<2>(bc, i, off);
            stf(y, i, binary_op<float>(op, ldf(a, off[0]), ldf(b, off[1])));
        }
    }
}

template <typename T>
__global__ void k_binary(int op, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y, int64_t n,
                         cuda_bcast bc, int contiguous) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (contiguous) {
            y[i] = binary_op<T>(op, a[i], b[i]);
        } else {
            int64_t off[2];
            bcast_offsets<2>(bc, i, off);
            y[i] = binary_op<T>(op, a[off[0]], b[off[1]]);
        }
    }
}

template <typename T>
__global__ void k_where(const uint8_t *__restrict__ c, const T *__restrict__ x, const T *__restrict__ y,
                        T *__restrict__ out, int64_t n, cuda_bcast bc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets<3>(bc, i, off);
        out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <typename T>
__global__ void k_copy_nd(const T *__restrict__ in, T *__restrict__ out, int64_t n, cuda_nd nd) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, io = nd.in_off, oo = nd.out_off;
        for (int d = nd.rank - 1; d >= 0; d--) {
            int64_t c = r % nd.dims[d];
            r /= nd.dims[d];
            io += c * nd.in_str[d];
            oo += c * nd.out_str[d];
        }
        out[oo] = in[io];
    }
}

// Block-wide reductions over kBlock threads through shared memory.
__device__ __forceinline__ float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float t = (int)threadIdx.x < (int)(blockDim.x >> 5) ? sh[threadIdx.x] : 0.f;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) sh[0] = t;
    __syncthreads();
    return sh[0];
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float t = (int)threadIdx.x < (int)(blockDim.x >> 5) ? sh[threadIdx.x] : -INFINITY;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    if (threadIdx.x == 0) sh[0] = t;
    __syncthreads();
    return sh[0];
}

template <typename T>
__global__ void k_softmax(const T *__restrict__ x, T *__restrict__ y, int64_t cols, int log_sm) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * cols;
    T *yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, ldf(xr, j));
    m = block_max(m, sh);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(ldf(xr, j) - m);
    s = block_sum(s, sh);
    if (log_sm) {
        float ls = logf(s);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) stf(yr, j, ldf(xr, j) - m - ls);
    } else {
        float inv = 1.f / s;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) stf(yr, j, expf(ldf(xr, j) - m) * inv);
    }
}

template <typename T>
__global__ void k_layernorm(const T *__restrict__ x, const T *__restrict__ g, const T *__restrict__ b,
                            T *__restrict__ y, int64_t cols, float eps) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * cols;
    T *yr = y + blockIdx.x * cols;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += ldf(xr, j);
    float mean = block_sum(s, sh) / (float)cols;
    float v = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        float d = ldf(xr, j) - mean;
        v += d * d;
    }
    float rstd = rsqrtf(block_sum(v, sh) / (float)cols + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
        stf(yr, j, (ldf(xr, j) - mean) * rstd * ldf(g, j) + (b ? ldf(b, j) : 0.f));
}

template <typename T>
__global__ void k_batchnorm(const T *__restrict__ x, const T *__restrict__ sc, const T *__restrict__ bi,
                            const T *__restrict__ mu, const T *__restrict__ var, T *__restrict__ y,
                            int64_t total, int64_t c, int64_t hw, float eps) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = (i / hw) % c;
        stf(y, i, (ldf(x, i) - ldf(mu, ch)) * rsqrtf(ldf(var, ch) + eps) * ldf(sc, ch) + ldf(bi, ch));
    }
}

template <typename T>
__global__ void k_pool2d(const T *__restrict__ x, T *__restrict__ y, int64_t total, int64_t h, int64_t w,
                         int64_t oh, int64_t ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
                         int is_max, int incl_pad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % ow, oy = (i / ow) % oh, nc = i / (ow * oh);
        const T *xp = x + nc * h * w;
        float acc = is_max ? -INFINITY : 0.f;
        int cnt = 0;
        for (int ky = 0; ky < kh; ky++) {
            int64_t iy = oy * sh - ph + (int64_t)ky * dh;
            for (int kx = 0; kx < kw; kx++) {
                int64_t ix = ox * sw - pw + (int64_t)kx * dw;
                bool in = iy >= 0 && iy < h && ix >= 0 && ix < w;
                if (in) {
                    float v = ldf(xp, iy * w + ix);
                    acc = is_max ? fmaxf(acc, v) : acc + v;
                    cnt++;
                } else if (incl_pad && iy < h + ph && ix < w + pw) {
                    cnt++;  // padded cells inside the padded input count for the average
                }
            }
        }
        stf(y, i, is_max ? acc : (cnt ? acc / (float)cnt : 0.f));
    }
}

template <typename T>
__global__ void k_reduce_rows(const T *__restrict__ x, T *__restrict__ y, int64_t cols, int op) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * cols;
    if (op == 2) {
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, ldf(xr, j));
        m = block_max(m, sh);
        if (threadIdx.x == 0) stf(y, blockIdx.x, m);
    } else {
        float s = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += ldf(xr, j);
        s = block_sum(s, sh);
        if (threadIdx.x == 0) stf(y, blockIdx.x, op == 0 ? s / (float)cols : s);
    }
}

template <typename T>
__global__ void k_reduce_mid(const T *__restrict__ x, T *__restrict__ y, int64_t outer, int64_t r,
                             int64_t inner, int op) {
    int64_t total = outer * inner;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i / inner, in = i % inner;
        const T *p = x + o * r * inner + in;
        float acc = op == 2 ? -INFINITY : op == 3 ? INFINITY : 0.f;
        for (int64_t k = 0; k < r; k++) {
            float v = ldf(p, k * inner);
            acc = op == 2 ? fmaxf(acc, v) : op == 3 ? fminf(acc, v) : acc + v;
        }
        stf(y, i, op == 0 ? acc / (float)r : acc);
    }
}

template <typename T>
__global__ void k_gather(const T *__restrict__ data, const void *__restrict__ idx, int idx64, T *__restrict__ out,
                         int64_t outer, int64_t axis_len, int64_t n_idx, int64_t inner) {
    int64_t total = outer * n_idx * inner;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t in = i % inner, j = (i / inner) % n_idx, o = i / (inner * n_idx);
        int64_t k = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
        if (k < 0) k += axis_len;
        // out-of-range indices are a model error; the host cannot see device indices
        // cheaply, so they read as zero instead of faulting
        out[i] = (k >= 0 && k < axis_len) ? data[(o * axis_len + k) * inner + in] : T(0);
    }
}

template <typename S>
__device__ __forceinline__ double load_as_double(const S *p, int64_t i) { return (double)p[i]; }
template <>
__device__ __forceinline__ double load_as_double<__half>(const __half *p, int64_t i) {
    return (double)__half2float(p[i]);
}

template <typename S>
__global__ void k_cast(const S *__restrict__ x, void *__restrict__ y, int dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double v = load_as_double<S>(x, i);
        switch (dst) {
        case CD_F32: ((float *)y)[i] = (float)v; break;
        case CD_F16: ((__half *)y)[i] = __float2half((float)v); break;
        case CD_I64: ((int64_t *)y)[i] = (int64_t)v; break;
        case CD_I32: ((int32_t *)y)[i] = (int32_t)v; break;
        case CD_BOOL: ((uint8_t *)y)[i] = v != 0.0; break;
        case CD_F64: ((double *)y)[i] = v; break;
        }
    }
}

template <typename T>
__global__ void k_bias_act(T *__restrict__ y, const T *__restrict__ bias, const T *__restrict__ res, int64_t total,
                           int64_t c, int64_t hw, int act, float a, float b) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = ldf(y, i);
        if (bias) v += ldf(bias, (i / hw) % c);
        if (res) v += ldf(res, i);
        stf(y, i, act >= 0 ? unary_f(act, v, a, b) : v);
    }
}

/* FP16 GEMM/conv results back to float32 with the node's fused epilogue:
 * y = act(half(yh) + bias[c] + res) (bias/res optional; act -1 for none). */
__global__ void k_half_epilogue(const __half *__restrict__ yh, float *__restrict__ y, const float *__restrict__ res,
                                const float *__restrict__ bias, int64_t total, int64_t c, int64_t hw, int act, float a,
                                float b) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = __half2float(yh[i]);
        if (bias) v += bias[(i / hw) % c];
        if (res) v += res[i];
        y[i] = act >= 0 ? unary_f(act, v, a, b) : v;
    }
}

inline cudaStream_t S(void *s) { return (cudaStream_t)s; }

}  // namespace

#define H(p) ((__half *)(p))
#define CH(p) ((const __half *)(p))
#define F(p) ((float *)(p))
#define CF(p) ((const float *)(p))

extern "C" int cuda_k_unary(int half, int op, const void *x, void *y, int64_t n, float alpha, float beta,
                            void *stream) {
    if (n > 0) {
        if (half) k_unary<__half><<<grid_for(n), kBlock, 0, S(stream)>>>(op, CH(x), H(y), n, alpha, beta);
        else k_unary<float><<<grid_for(n), kBlock, 0, S(stream)>>>(op, CF(x), F(y), n, alpha, beta);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_binary(int half, int op, const void *a, const void *b, void *y, int64_t n, const cuda_bcast *bc,
                             int contiguous, void *stream) {
    if (n > 0) {
        if (half) k_binary_h<__half><<<grid_for(n), kBlock, 0, S(stream)>>>(op, CH(a), CH(b), H(y), n, *bc, contiguous);
        else k_binary<float><<<grid_for(n), kBlock, 0, S(stream)>>>(op, CF(a), CF(b), F(y), n, *bc, contiguous);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_binary_i64(int op, const int64_t *a, const int64_t *b, int64_t *y, int64_t n,
                                 const cuda_bcast *bc, void *stream) {
    if (n > 0) k_binary<int64_t><<<grid_for(n), kBlock, 0, S(stream)>>>(op, a, b, y, n, *bc, 0);
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_where(const uint8_t *c, const void *x, const void *y, void *out, int elem_size, int64_t n,
                            const cuda_bcast *bc, void *stream) {
    if (n <= 0) return (int)cudaGetLastError();
    switch (elem_size) {
    case 2: k_where<uint16_t><<<grid_for(n), kBlock, 0, S(stream)>>>(c, (const uint16_t *)x, (const uint16_t *)y, (uint16_t *)out, n, *bc); break;
    case 4: k_where<uint32_t><<<grid_for(n), kBlock, 0, S(stream)>>>(c, (const uint32_t *)x, (const uint32_t *)y, (uint32_t *)out, n, *bc); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_copy_nd(const void *in, void *out, int elem_size, int64_t n, const cuda_nd *nd, void *stream) {
    if (n <= 0) return (int)cudaGetLastError();
    switch (elem_size) {
    case 1: k_copy_nd<uint8_t><<<grid_for(n), kBlock, 0, S(stream)>>>((const uint8_t *)in, (uint8_t *)out, n, *nd); break;
    case 2: k_copy_nd<uint16_t><<<grid_for(n), kBlock, 0, S(stream)>>>((const uint16_t *)in, (uint16_t *)out, n, *nd); break;
    case 4: k_copy_nd<uint32_t><<<grid_for(n), kBlock, 0, S(stream)>>>((const uint32_t *)in, (uint32_t *)out, n, *nd); break;
    case 8: k_copy_nd<uint64_t><<<grid_for(n), kBlock, 0, S(stream)>>>((const uint64_t *)in, (uint64_t *)out, n, *nd); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_softmax(int half, const void *x, void *y, int64_t rows, int64_t cols, int log_softmax,
                              void *stream) {
    if (rows > 0 && cols > 0) {
        if (half) k_softmax<__half><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CH(x), H(y), cols, log_softmax);
        else k_softmax<float><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CF(x), F(y), cols, log_softmax);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_layernorm(int half, const void *x, const void *scale, const void *bias, void *y, int64_t rows,
                                int64_t cols, float eps, void *stream) {
    if (rows > 0 && cols > 0) {
        /* float16 rows of 256..2048 (BERT's 768): one warp per row in registers */
        if (half) {
            int e = cuda_k_layernorm_half_rows(x, scale, bias, y, rows, cols, eps, stream);
            if (e != (int)cudaErrorNotSupported) return e;
        }
        if (half) k_layernorm<__half><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CH(x), CH(scale), CH(bias), H(y), cols, eps);
        else k_layernorm<float><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CF(x), CF(scale), CF(bias), F(y), cols, eps);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_batchnorm(int half, const void *x, const void *scale, const void *bias, const void *mean,
                                const void *var, void *y, int64_t n, int64_t c, int64_t hw, float eps, void *stream) {
    int64_t total = n * c * hw;
    if (total > 0) {
        if (half)
            k_batchnorm<__half><<<grid_for(total), kBlock, 0, S(stream)>>>(CH(x), CH(scale), CH(bias), CH(mean), CH(var),
                                                                           H(y), total, c, hw, eps);
        else
            k_batchnorm<float><<<grid_for(total), kBlock, 0, S(stream)>>>(CF(x), CF(scale), CF(bias), CF(mean), CF(var),
                                                                          F(y), total, c, hw, eps);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_pool2d(int half, const void *x, void *y, int64_t nc, int64_t h, int64_t w, int64_t oh,
                             int64_t ow, int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw, int is_max,
                             int count_include_pad, void *stream) {
    int64_t total = nc * oh * ow;
    if (total > 0) {
        if (half)
            k_pool2d<__half><<<grid_for(total), kBlock, 0, S(stream)>>>(CH(x), H(y), total, h, w, oh, ow, kh, kw, sh, sw,
                                                                        ph, pw, dh, dw, is_max, count_include_pad);
        else
            k_pool2d<float><<<grid_for(total), kBlock, 0, S(stream)>>>(CF(x), F(y), total, h, w, oh, ow, kh, kw, sh, sw,
                                                                       ph, pw, dh, dw, is_max, count_include_pad);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_reduce_rows(int half, const void *x, void *y, int64_t rows, int64_t cols, int op, void *stream) {
    if (rows > 0) {
        if (half) k_reduce_rows<__half><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CH(x), H(y), cols, op);
        else k_reduce_rows<float><<<(unsigned)rows, kBlock, 0, S(stream)>>>(CF(x), F(y), cols, op);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_reduce_mid(int half, const void *x, void *y, int64_t outer, int64_t r, int64_t inner, int op,
                                 void *stream) {
    int64_t total = outer * inner;
    if (total > 0) {
        if (half) k_reduce_mid<__half><<<grid_for(total), kBlock, 0, S(stream)>>>(CH(x), H(y), outer, r, inner, op);
        else k_reduce_mid<float><<<grid_for(total), kBlock, 0, S(stream)>>>(CF(x), F(y), outer, r, inner, op);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_gather(const void *data, const void *idx, int idx_is_i64, void *out, int elem_size,
                             int64_t outer, int64_t axis_len, int64_t n_idx, int64_t inner, void *stream) {
    int64_t total = outer * n_idx * inner;
    if (total <= 0) return (int)cudaGetLastError();
    int g = grid_for(total);
    switch (elem_size) {
    case 1: k_gather<uint8_t><<<g, kBlock, 0, S(stream)>>>((const uint8_t *)data, idx, idx_is_i64, (uint8_t *)out, outer, axis_len, n_idx, inner); break;
    case 2: k_gather<uint16_t><<<g, kBlock, 0, S(stream)>>>((const uint16_t *)data, idx, idx_is_i64, (uint16_t *)out, outer, axis_len, n_idx, inner); break;
    case 4: k_gather<uint32_t><<<g, kBlock, 0, S(stream)>>>((const uint32_t *)data, idx, idx_is_i64, (uint32_t *)out, outer, axis_len, n_idx, inner); break;
    case 8: k_gather<uint64_t><<<g, kBlock, 0, S(stream)>>>((const uint64_t *)data, idx, idx_is_i64, (uint64_t *)out, outer, axis_len, n_idx, inner); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_cast(const void *x, int src, void *y, int dst, int64_t n, void *stream) {
    if (n <= 0) return (int)cudaGetLastError();
    int g = grid_for(n);
    switch (src) {
    case CD_F32: k_cast<float><<<g, kBlock, 0, S(stream)>>>((const float *)x, y, dst, n); break;
    case CD_F16: k_cast<__half><<<g, kBlock, 0, S(stream)>>>((const __half *)x, y, dst, n); break;
    case CD_I64: k_cast<int64_t><<<g, kBlock, 0, S(stream)>>>((const int64_t *)x, y, dst, n); break;
    case CD_I32: k_cast<int32_t><<<g, kBlock, 0, S(stream)>>>((const int32_t *)x, y, dst, n); break;
    case CD_BOOL: k_cast<uint8_t><<<g, kBlock, 0, S(stream)>>>((const uint8_t *)x, y, dst, n); break;
    case CD_F64: k_cast<double><<<g, kBlock, 0, S(stream)>>>((const double *)x, y, dst, n); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_bias_act(int half, void *y, const void *bias, const void *res, int64_t n, int64_t c, int64_t hw,
                               int act, float alpha, float beta, void *stream) {
    int64_t total = n * c * hw;
    if (total > 0) {
        if (half)
            k_bias_act<__half><<<grid_for(total), kBlock, 0, S(stream)>>>(H(y), CH(bias), CH(res), total, c, hw, act,
                                                                          alpha, beta);
        else
            k_bias_act<float><<<grid_for(total), kBlock, 0, S(stream)>>>(F(y), CF(bias), CF(res), total, c, hw, act,
                                                                         alpha, beta);
    }
    return (int)cudaGetLastError();
}

extern "C" int cuda_k_half_epilogue(const void *yh, float *y, const float *res, const float *bias, int64_t n,
                                    int64_t c, int64_t hw, int act, float alpha, float beta, void *stream) {
    int64_t total = n * c * hw;
    if (total > 0)
        k_half_epilogue<<<grid_for(total), kBlock, 0, S(stream)>>>((const __half *)yh, y, res, bias, total, c, hw, act,
                                                                    alpha, beta);
    return (int)cudaGetLastError();
}
