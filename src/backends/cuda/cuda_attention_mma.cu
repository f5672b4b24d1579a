// cuda_attention_mma.cu - the tensor-core attention kernel for float16 Q/K/V (the CUDA
// backend's Attention and kiln QkvAttention nodes, cuda_attention.c).
//
// Why a second kernel: cuda_attention.cu scores one key per lane with CUDA-core dot
// products; for BERT-base (S = 128, D = 64) that was slower than the unfused cuBLASLt
// path. Here both products run on tensor cores with mma.sync m16n8k16 (half operands,
// float32 accumulation), flash-attention style:
//   - one block = NW warps x 16 query rows of one (batch, head); its Q rows are staged in
//     shared memory once and each warp keeps its 16 x D slice as A fragments;
//   - keys and values stream through shared memory in tiles of BC keys, both row-major
//     as in memory, copied with cp.async (16 bytes, no register round trip) into two
//     buffers, so the next tile loads while this one computes and a block's whole
//     K/V for 128 keys is requested at once; the B operands come from ldmatrix (K as
//     stored: K[key][dim] pairs; V with .trans: V[key][dim] pairs along keys); rows are
//     padded by 8 halves so the 8 row addresses of an ldmatrix hit different banks;
//   - rows per block (16, 32 or 64) are chosen so that the grid still covers every SM
//     (batch 1 BERT: 12 heads x 8 blocks of 16 rows);
//   - the scores of a tile stay in registers: scale, the additive mask (float32 or
//     float16, any broadcast through strides; staged per tile in shared memory when it
//     does not depend on the query row, as BERT's [B, 1, 1, L] mask), causal masking,
//     then an online softmax (running max and sum per row, in the log2 domain for exp2f);
//   - the probabilities are rounded to half and reused directly as the A fragments of
//     P V (the accumulator layout of two adjacent 8-key tiles is the A layout of one
//     16-key step), so they never touch shared memory.
// Q, K, V and Y are addressed by (batch, head, row) strides with the head dim contiguous:
// [B, S, H*D] tensors, 4-D [B, H, S, D], or the three thirds of one packed [B, S, 3*H*D]
// projection (QkvAttention) all work without copies. The head dims must be equal and one
// of 32, 64, 128; pointers and strides must allow 16-byte loads. Anything else returns
// cudaErrorNotSupported before launching, and the caller uses cuda_attention.cu.
// Rows whose keys are all masked (-inf) produce zeros, like the CPU kernel.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ldm(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ldm(const __half *p, int64_t i) { return __half2float(p[i]); }

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

// d += a (16x16, row) * b (16x8, col), half operands, float accumulators.
__device__ __forceinline__ void mma16816(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t lds32(const __half *p) { return *reinterpret_cast<const uint32_t *>(p); }

// Four 8x8 half matrices from shared memory, transposed (lane l gives the row address of
// matrix l / 8): the B fragments of two 8-column tiles of a row-major [k][n] tile.
__device__ __forceinline__ void ldsm4t(uint32_t r[4], const __half *p) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// 16 bytes global -> shared without a register round trip (zero-filled when !valid),
// so a thread has all its copies of a tile in flight at once.
__device__ __forceinline__ void cp16(void *smem, const void *gmem, bool valid) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp4(void *smem, const void *gmem, bool valid) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Four 8x8 half matrices from shared memory (lane l gives the row address of matrix l/8).
__device__ __forceinline__ void ldsm4(uint32_t r[4], const __half *p) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// D: head dim (Q/K and V), BC: keys per tile, NW: warps per block (16 query rows each).
// Two tile buffers: tile j + 2 streams in while tile j + 1 waits and tile j computes
// (for BERT's 128 keys both tiles are requested up front: one memory latency per block).
template <int D, int BC, int NW, typename M>
__global__ void __launch_bounds__(NW * 32) k_att_mma(const __half *__restrict__ q, const __half *__restrict__ k,
                                                      const __half *__restrict__ v, const M *__restrict__ mask,
                                                      __half *__restrict__ y, cuda_att_args a) {
    constexpr int QP = D + 8; // padded row (halves) of Qs, Ks and Vs
    constexpr int ROWS = NW * 16;
    constexpr int C8 = D / 8; // 16-byte chunks per row
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *qs = reinterpret_cast<__half *>(smem_raw);      // [ROWS][QP]
    __half *kvs = qs + ROWS * QP;                            // [2 stages][K, V][BC][QP]
    float *ms = reinterpret_cast<float *>(kvs + 4 * BC * QP); // [2 stages][BC] per-key mask

    const int64_t b = blockIdx.y / a.Hq, h = blockIdx.y % a.Hq, hk = h / (a.Hq / a.Hkv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * ROWS;
    const __half *qb = q + b * a.q_sb + h * a.q_sh;
    const __half *kb = k + b * a.k_sb + hk * a.k_sh;
    const __half *vb = v + b * a.v_sb + hk * a.v_sh;
    const bool mask_row_free = mask && a.m_si == 0;
    const M *mb = mask ? mask + b * a.m_sb + h * a.m_sh : nullptr;
    const int ntiles = (int)((a.L + BC - 1) / BC);

    // copies: each thread moves the same 16-byte column of rows lr, lr + RSTEP, ... (pointer
    // increments only; the load phase is a block's critical path at small batch)
    constexpr int NT = NW * 32, RSTEP = NT / C8;
    static_assert(NT % C8 == 0 && BC % RSTEP == 0 && ROWS % RSTEP == 0, "tile shapes");
    const int lr = threadIdx.x / C8, lc = threadIdx.x % C8;
    auto load_tile = [&](int j, int buf) {
        __half *sk = kvs + buf * 2 * BC * QP + lr * QP + lc * 8, *sv = sk + BC * QP;
        const int64_t j0 = (int64_t)j * BC;
        const __half *gk = kb + (j0 + lr) * a.k_ss + lc * 8, *gv = vb + (j0 + lr) * a.v_ss + lc * 8;
#pragma unroll
        for (int r = lr; r < BC; r += RSTEP) {
            const bool ok = j0 + r < a.L;
            cp16(sk, ok ? gk : kb, ok);
            cp16(sv, ok ? gv : vb, ok);
            gk += RSTEP * a.k_ss, gv += RSTEP * a.v_ss, sk += RSTEP * QP, sv += RSTEP * QP;
        }
        // the per-key mask, unscaled (out-of-range keys are -inf'ed where used)
        if (mask_row_free)
            for (int idx = threadIdx.x; idx < BC; idx += NT) {
                const bool ok = j0 + idx < a.L;
                if constexpr (sizeof(M) == 4)
                    cp4(ms + buf * BC + idx, ok ? mb + (j0 + idx) * a.m_sj : mb, ok);
                else
                    ms[buf * BC + idx] = ok ? ldm(mb, (j0 + idx) * a.m_sj) : 0.f;
            }
    };
    {
        __half *sq = qs + lr * QP + lc * 8;
        const __half *gq = qb + (row0 + lr) * a.q_ss + lc * 8;
#pragma unroll
        for (int r = lr; r < ROWS; r += RSTEP) {
            const bool ok = row0 + r < a.S;
            cp16(sq, ok ? gq : qb, ok);
            gq += RSTEP * a.q_ss, sq += RSTEP * QP;
        }
    }
    load_tile(0, 0);
    cp_commit();
    if (ntiles > 1) load_tile(1, 1);
    cp_commit();

    uint32_t qa[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    const int64_t qi[2] = {row0 + warp * 16 + g, row0 + warp * 16 + g + 8};
    const float sc2 = a.scale * kLog2e;

    for (int j = 0; j < ntiles; j++) {
        const int buf = j & 1;
        const int64_t j0 = (int64_t)j * BC;
        const float *mt = ms + buf * BC;
        cp_wait1(); // this thread's copies of tile j (and Q) have landed
        __syncthreads(); // ... and everyone else's
        if (j == 0) { // this warp's Q rows as A fragments, D / 16 k-steps
            const __half *qw = qs + warp * 16 * QP;
#pragma unroll
            for (int ks16 = 0; ks16 < D / 16; ks16++) {
                qa[ks16][0] = lds32(qw + g * QP + ks16 * 16 + 2 * t);
                qa[ks16][1] = lds32(qw + (g + 8) * QP + ks16 * 16 + 2 * t);
                qa[ks16][2] = lds32(qw + g * QP + ks16 * 16 + 2 * t + 8);
                qa[ks16][3] = lds32(qw + (g + 8) * QP + ks16 * 16 + 2 * t + 8);
            }
        }
        const __half *ks = kvs + buf * 2 * BC * QP, *vs = ks + BC * QP;

        // scores S = Q K^T for this warp's 16 rows x BC keys; K's B fragments by ldmatrix,
        // two k-steps (32 dims) per load
        float s[BC / 8][4];
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int ks16 = 0; ks16 < D / 16; ks16 += 2) {
                uint32_t bf[4];
                ldsm4(bf, ks + (nt * 8 + (lane & 7)) * QP + ks16 * 16 + (lane >> 3) * 8);
                mma16816(s[nt], qa[ks16][0], qa[ks16][1], qa[ks16][2], qa[ks16][3], bf[0], bf[1]);
                mma16816(s[nt], qa[ks16 + 1][0], qa[ks16 + 1][1], qa[ks16 + 1][2], qa[ks16 + 1][3], bf[2], bf[3]);
            }
        }
        // scale, mask, causal, in the log2 domain; new row maxima
        float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const int jl = nt * 8 + 2 * t + (e & 1);
                const int64_t jj = j0 + jl;
                float val = s[nt][e] * sc2;
                if (jj >= a.L || (a.causal && jj > qi[r])) {
                    val = -INFINITY;
                } else if (mask_row_free) {
                    val += mt[jl] * kLog2e;
                } else if (mask) {
                    const int64_t i = qi[r] < a.S ? qi[r] : a.S - 1;
                    val += ldm(mb, i * a.m_si + jj * a.m_sj) * kLog2e;
                }
                s[nt][e] = val;
                mx[r] = fmaxf(mx[r], val);
            }
        }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // all -inf so far: subtract 0 instead (exp2f(-inf) = 0, no inf - inf)
            const float base = mx[r] == -INFINITY ? 0.f : mx[r];
            corr[r] = exp2f(mrow[r] - base);
            mrow[r] = mx[r];
            mx[r] = base;
        }
        float ls[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(s[nt][e] - mx[e >> 1]);
                s[nt][e] = p;
                ls[e >> 1] += p;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) lrow[r] = lrow[r] * corr[r] + ls[r]; // per-thread partial sums
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[dt][0] *= corr[0], o[dt][1] *= corr[0];
            o[dt][2] *= corr[1], o[dt][3] *= corr[1];
        }
        // O += P V: P's accumulators are A fragments, 16 keys per step
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            const uint32_t a0 = pack2(s[2 * kk][0], s[2 * kk][1]), a1 = pack2(s[2 * kk][2], s[2 * kk][3]);
            const uint32_t a2 = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]), a3 = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t bf[4];
                ldsm4t(bf, vs + (kk * 16 + (lane & 15)) * QP + dt * 8 + (lane >> 4) * 8);
                mma16816(o[dt], a0, a1, a2, a3, bf[0], bf[1]);
                mma16816(o[dt + 1], a0, a1, a2, a3, bf[2], bf[3]);
            }
        }
        __syncthreads(); // every warp is done with this buffer
        if (j + 2 < ntiles) load_tile(j + 2, buf);
        cp_commit(); // possibly empty: keeps one group per tile for cp_wait1
    }
    // the row sums are spread over the 4 threads of a group
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
    const float inv[2] = {lrow[0] > 0.f ? 1.f / lrow[0] : 0.f, lrow[1] > 0.f ? 1.f / lrow[1] : 0.f};
    __half *yb = y + b * a.y_sb + h * a.y_sh;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (qi[r] >= a.S) continue;
        __half *yr = yb + qi[r] * a.y_ss + 2 * t;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *reinterpret_cast<__half2 *>(yr + dt * 8) =
                __floats2half2_rn(o[dt][2 * r] * inv[r], o[dt][2 * r + 1] * inv[r]);
    }
}

template <int D, int BC, int NW>
int launch(const void *q, const void *k, const void *v, const void *mask, void *y, const cuda_att_args *a,
           cudaStream_t s) {
    constexpr int ROWS = NW * 16;
    const size_t sm = sizeof(__half) * (size_t)(ROWS + 4 * BC) * (D + 8) + sizeof(float) * 2 * BC;
    static_assert(sizeof(__half) * (ROWS + 4 * BC) * (D + 8) + sizeof(float) * 2 * BC <= 48 * 1024,
                  "over the default dynamic shared memory");
    dim3 grid((unsigned)((a->S + ROWS - 1) / ROWS), (unsigned)(a->B * a->Hq));
    if (a->mask_half)
        k_att_mma<D, BC, NW, __half><<<grid, NW * 32, sm, s>>>((const __half *)q, (const __half *)k,
                                                                (const __half *)v, (const __half *)mask,
                                                                (__half *)y, *a);
    else
        k_att_mma<D, BC, NW, float><<<grid, NW * 32, sm, s>>>((const __half *)q, (const __half *)k,
                                                               (const __half *)v, (const float *)mask, (__half *)y,
                                                               *a);
    return (int)cudaGetLastError();
}

bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

extern "C" int cuda_k_attention_mma(const void *q, const void *k, const void *v, const void *mask, void *y,
                                    const cuda_att_args *a, int n_sm, void *stream) {
    if (a->D != a->Dv || (a->D != 32 && a->D != 64 && a->D != 128) || a->Hkv < 1 || a->Hq % a->Hkv != 0 ||
        a->B * a->Hq > 65535 || a->B <= 0 || a->S <= 0 || a->L <= 0)
        return (int)cudaErrorNotSupported;
    if (!al16(q) || !al16(k) || !al16(v) || (a->q_ss | a->k_ss | a->v_ss | a->q_sh | a->k_sh | a->v_sh | a->q_sb |
                                             a->k_sb | a->v_sb) % 8 != 0 ||
        (a->y_ss | a->y_sh | a->y_sb) % 2 != 0 || ((uintptr_t)y & 3u))
        return (int)cudaErrorNotSupported;
    cudaStream_t s = (cudaStream_t)stream;
    // rows per block: the largest of 64 / 32 / 16 that still gives every SM a block (BERT
    // batch 8: 64; batch 1: 16, 96 blocks); fewer rows per block reread K/V (from L2)
    const int64_t bh = a->B * a->Hq, sms = n_sm > 0 ? n_sm : 132;
    const int nw = (a->S + 63) / 64 * bh >= sms ? 4 : (a->S + 31) / 32 * bh >= sms ? 2 : 1;
    switch (a->D) {
    case 32: return nw == 4 ? launch<32, 64, 4>(q, k, v, mask, y, a, s)
                  : nw == 2 ? launch<32, 64, 2>(q, k, v, mask, y, a, s) : launch<32, 64, 1>(q, k, v, mask, y, a, s);
    case 64: return nw == 4 ? launch<64, 64, 4>(q, k, v, mask, y, a, s)
                  : nw == 2 ? launch<64, 64, 2>(q, k, v, mask, y, a, s) : launch<64, 64, 1>(q, k, v, mask, y, a, s);
    default: return nw == 1 ? launch<128, 32, 1>(q, k, v, mask, y, a, s) : launch<128, 32, 2>(q, k, v, mask, y, a, s);
    }
}
