/* cuda_conv_graph_host.c - the host-side parameter logic of the cuDNN graph-API
 * convolution path (cuda_conv_graph.h): strides for NCHW / channels-last, which
 * epilogues fuse, eligibility, signatures and tactic names. No cuDNN calls, so it is
 * unit-tested without a GPU; cuda_conv_graph.c does the cuDNN part.
 */
#include <stdio.h>

#include "backends/cuda/cuda_conv_graph.h"
#include "backends/cuda/cuda_internal.h"

void cuda_cg_strides(bool nhwc, const int64_t dims[4], int64_t strides[4]) {
    int64_t c = dims[1], h = dims[2], w = dims[3];
    if (nhwc) {
        strides[1] = 1;
        strides[3] = c;
        strides[2] = w * c;
        strides[0] = h * w * c;
    } else {
        strides[3] = 1;
        strides[2] = w;
        strides[1] = h * w;
        strides[0] = c * h * w;
    }
}

bool cuda_cg_epilogue_fusable(const cuda_cg_conv *cv, char *why, size_t why_size) {
    if (cv->act < 0 || cv->act == CU_RELU) return true;
    /* Clip(min, max) is a ReLU clipped above only when min is 0 (MobileNetV2's ReLU6);
     * cuDNN's lower clip of RELU_FWD is a threshold, not a general floor */
    if (cv->act == CU_CLIP && cv->fa == 0.0f && cv->fb > 0.0f) return true;
    if (why) snprintf(why, why_size, "activation %d does not fuse into the cuDNN graph (ReLU and Clip(0, hi) do)",
                      cv->act);
    return false;
}

bool cuda_cg_eligible(const cuda_cg_conv *cv, char *why, size_t why_size) {
    if (!cv->half) {
        if (why) snprintf(why, why_size, "float32 convolutions keep the legacy API (TF32/--noTF32 math modes)");
        return false;
    }
    const int64_t lim = (int64_t)1 << 31;
    int64_t sizes[] = {cv->n * cv->c * cv->h * cv->w, cv->n * cv->o * cv->oh * cv->ow, cv->o * cv->ci * cv->kh * cv->kw};
    for (int i = 0; i < 3; i++)
        if (sizes[i] <= 0 || sizes[i] >= lim) {
            if (why) snprintf(why, why_size, "tensor of %lld elements is empty or too large", (long long)sizes[i]);
            return false;
        }
    if (cv->group < 1 || cv->sh < 1 || cv->sw < 1 || cv->dh < 1 || cv->dw < 1 || cv->ph < 0 || cv->pw < 0) {
        if (why) snprintf(why, why_size, "invalid convolution parameters");
        return false;
    }
    if (why) {
        if ((cv->ci % 8) || (cv->o % 8))
            snprintf(why, why_size, "channels %lld/%lld not multiples of 8: runtime-fusion engines will not apply",
                     (long long)cv->ci, (long long)cv->o);
        else
            why[0] = 0;
    }
    return true;
}

int cuda_cg_signature(const cuda_cg_conv *cv, cuda_cg_fuse fuse, uint64_t workspace, char *buf, size_t size) {
    return snprintf(buf, size,
                    "convg x%lldx%lldx%lldx%lld w%lldx%lldx%lldx%lld s%lldx%lld p%lldx%lld d%lldx%lld g%lld %s %s "
                    "f%d b%d r%d a%d(%g,%g) ws%llu",
                    (long long)cv->n, (long long)cv->c, (long long)cv->h, (long long)cv->w, (long long)cv->o,
                    (long long)cv->ci, (long long)cv->kh, (long long)cv->kw, (long long)cv->sh, (long long)cv->sw,
                    (long long)cv->ph, (long long)cv->pw, (long long)cv->dh, (long long)cv->dw, (long long)cv->group,
                    cv->nhwc ? "nhwc" : "nchw", cv->half ? "f16" : "f32", (int)fuse,
                    fuse == CUDA_CG_FUSED && cv->bias, fuse == CUDA_CG_FUSED && cv->res,
                    fuse == CUDA_CG_FUSED ? cv->act : -1, fuse == CUDA_CG_FUSED ? (double)cv->fa : 0.0,
                    fuse == CUDA_CG_FUSED ? (double)cv->fb : 0.0, (unsigned long long)workspace);
}

int cuda_cg_check_prefix(int pos, char *buf, size_t size) { return snprintf(buf, size, CUDA_CG_PREFIX "%de", pos); }

void cuda_cg_record(const cuda_ctx *c, const ir_node *node, const char *sig, int pos, int64_t gidx, double ms) {
    char pre[32];
    cuda_cg_check_prefix(pos, pre, sizeof pre);
    cuda_tactic_put(c, node, sig, CUDA_CG_PREFIX, pos, ms);
    cuda_tactic_put(c, node, sig, pre, (int)gidx, ms);
}

int cuda_cg_cached_choice(const cuda_ctx *c, const ir_node *node, const char *sig, int n_pos,
                          int64_t (*engine_at)(void *user, int pos), void *user) {
    int pos = -1;
    if (!cuda_tactic_best(c, node, sig, CUDA_CG_PREFIX, n_pos, false, &pos)) return -1;
    int64_t gidx = engine_at(user, pos);
    if (gidx < 0 || gidx > 1000000) return -1;
    char pre[32], name[48];
    cuda_cg_check_prefix(pos, pre, sizeof pre);
    snprintf(name, sizeof name, "%s#%lld", pre, (long long)gidx);
    double ms = 0;
    /* the check entry: the same engine still sits at that position of the heuristic list */
    if (!c->tactics || !c->tactics->get || !c->tactics->get(c->tactics->user, node, sig, name, &ms)) return -1;
    return pos;
}

int cuda_cg_list_n(cuda_cg_lists *L, int l) {
    if (l < 0 || l > 1) return 0;
    if (!L->have[l]) {
        int n = L->query ? L->query(L->user, l, L->cfgs[l], CUDA_CG_HEUR_MAX) : 0;
        L->n[l] = n < 0 ? 0 : n > CUDA_CG_HEUR_MAX ? CUDA_CG_HEUR_MAX : n;
        L->have[l] = true;
        L->queries[l]++;
    }
    return L->n[l];
}

int64_t cuda_cg_lists_engine_at(void *lists, int pos) {
    cuda_cg_lists *L = lists;
    if (pos < 0 || pos >= 2 * CUDA_CG_HEUR_MAX) return -1;
    int l = pos / CUDA_CG_HEUR_MAX, i = pos % CUDA_CG_HEUR_MAX;
    int64_t gidx = -1;
    if (i >= cuda_cg_list_n(L, l) || !L->engine || !L->engine(L->cfgs[l][i], &gidx)) return -1;
    return gidx;
}
