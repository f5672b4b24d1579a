/* cuda_layout_host.c - host-side choice of the layout kernels (cuda_layout.h): which
 * transpositions are a plain copy or a batched 2-D transpose. Pure index logic, no CUDA
 * calls, unit-tested in tests/unit/test_cuda_layout.c without a GPU.
 */
#include "backends/cuda/cuda_layout.h"

int cuda_perm_classify(int32_t rank, const int64_t *dims, const int64_t *perm, int64_t *nb, int64_t *rows,
                       int64_t *cols) {
    if (rank < 1 || rank > 8) return CUDA_PERM_GENERAL;
    /* input axes of size 1 carry no data: drop them, renumbering the rest */
    int32_t keep[8], newid[8], r = 0;
    bool seen[8] = {false};
    for (int32_t i = 0; i < rank; i++) {
        if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) return CUDA_PERM_GENERAL;
        seen[perm[i]] = true;
    }
    for (int32_t a = 0; a < rank; a++) {
        newid[a] = -1;
        if (dims[a] < 0) return CUDA_PERM_GENERAL;
        if (dims[a] != 1) newid[a] = r, keep[r++] = a;
    }
    int64_t d[8];
    int32_t p[8], q = 0;
    for (int32_t i = 0; i < r; i++) d[i] = dims[keep[i]];
    for (int32_t i = 0; i < rank; i++)
        if (newid[perm[i]] >= 0) p[q++] = newid[perm[i]];
    /* merge output neighbours that are input neighbours in the same order: groups */
    int32_t gstart[8], ng = 0; /* first input axis of each group, in output order */
    int64_t gsize[8];
    for (int32_t i = 0; i < q; i++) {
        if (i > 0 && p[i] == p[i - 1] + 1) {
            gsize[ng - 1] *= d[p[i]];
            continue;
        }
        gstart[ng] = p[i];
        gsize[ng++] = d[p[i]];
    }
    if (ng <= 1) return CUDA_PERM_COPY;
    /* the groups' order in the input: rank of each group's first axis */
    int32_t in_order[8];
    for (int32_t g = 0; g < ng; g++) {
        in_order[g] = 0;
        for (int32_t h = 0; h < ng; h++)
            if (gstart[h] < gstart[g]) in_order[g]++;
    }
    if (ng == 2 && in_order[0] == 1 && in_order[1] == 0) { /* [A, B] -> [B, A] */
        *nb = 1, *rows = gsize[1], *cols = gsize[0];
        return CUDA_PERM_BATCHED;
    }
    if (ng == 3 && in_order[0] == 0 && in_order[1] == 2 && in_order[2] == 1) { /* [A, B, C] -> [A, C, B] */
        *nb = gsize[0], *rows = gsize[2], *cols = gsize[1];
        return CUDA_PERM_BATCHED;
    }
    return CUDA_PERM_GENERAL;
}
