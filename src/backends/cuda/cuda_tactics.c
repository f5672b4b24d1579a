/* cuda_tactics.c - cuBLASLt / cuDNN algorithm choices through the tactic cache.
 *
 * cuda_gemm.c and cuda_conv.c time the library's candidate algorithms on a node's first
 * run with new shapes (the GEMM heuristic's list, cuDNN's algorithm search). Each timing
 * is recorded here under a signature (the GPU architecture, the library versions, TF32
 * and the shapes) and a tactic name ("lt#2", "algo#6"), and a later search with the same
 * signature takes the fastest recorded one instead of timing again. Where the timings
 * live is the session's business (rt_tactic_cache in runtime/backend.h): a GPU engine
 * carries the ones measured when it was built, and a build with --timingCacheFile keeps
 * them across builds. The signature names the GPU and library versions, so a cache file
 * moved to another machine misses instead of choosing blindly.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

void cuda_tactic_sig(const cuda_ctx *c, char *buf, size_t size, const char *fmt, ...) {
    int n = snprintf(buf, size, "sm_%d%d lt%d dnn%d %s|", c->info.cc_major, c->info.cc_minor, c->info.cublas_version,
                     c->info.cudnn_version, c->fp16 ? "fp16" : c->tf32 ? "tf32" : "fp32");
    if (n < 0 || (size_t)n >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, size - (size_t)n, fmt, ap);
    va_end(ap);
}

bool cuda_tactic_best(const cuda_ctx *c, const ir_node *node, const char *sig, const char *prefix, int n,
                      bool need_all, int *best) {
    if (!c->tactics || !c->tactics->get || n <= 0) return false;
    double best_ms = 0;
    int found = -1;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s#%d", prefix, i);
        double ms = 0;
        if (!c->tactics->get(c->tactics->user, node, sig, name, &ms) || ms < 0) {
            if (need_all) return false;
            continue;
        }
        if (found < 0 || ms < best_ms) best_ms = ms, found = i;
    }
    if (found < 0) return false;
    *best = found;
    return true;
}

void cuda_tactic_put(const cuda_ctx *c, const ir_node *node, const char *sig, const char *prefix, int i, double ms) {
    if (!c->tactics || !c->tactics->put) return;
    char name[32];
    snprintf(name, sizeof name, "%s#%d", prefix, i);
    c->tactics->put(c->tactics->user, node, sig, name, ms);
}
