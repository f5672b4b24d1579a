/* timing_cache.h - saved kernel timings, so rebuilding an engine skips re-timing tactics.
 *
 * Keyed by a node signature (build_tactic_key_threads: op, opset, attributes, input shapes
 * and dtypes, CPU features, timing thread count) and the tactic name; the value is the
 * measured time in ms. The file is JSON:
 *   {"format": "kiln-timing-cache", "version": 2, "kiln": "0.2.0",
 *    "entries": [{"key": "...", "tactic": "conv_im2col_gemm", "ms": 0.123}, ...]}
 * A missing file starts an empty cache; an unreadable, corrupt, foreign or other-version
 * file is not an error: the caller gets a warning saying so and the cache is rebuilt
 * (and overwritten on save). Version 1 files (keys without the thread count, so a time
 * taken at 1 thread was reused at 2) are ignored the same way, with a warning that says so.
 */
#ifndef KILN_BUILD_TIMING_CACHE_H
#define KILN_BUILD_TIMING_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/hashmap.h"
#include "core/status.h"
#include "core/strbuf.h"

#define BUILD_TIMING_CACHE_VERSION 2

typedef struct build_timing_entry {
    const char *key; /* "signature\ttactic" */
    double ms;
} build_timing_entry;

typedef struct build_timing_cache {
    arena arena;
    hashmap index; /* key -> entry index */
    build_timing_entry *entries;
    int32_t n, cap;
    int32_t hits, misses;
    bool dirty;
} build_timing_cache;

void build_timing_cache_init(build_timing_cache *c);
void build_timing_cache_free(build_timing_cache *c);

/* Loads the file into the cache. Returns false and a warning in *warning (for the user)
 * when the file exists but cannot be used; a missing file returns true, empty. */
bool build_timing_cache_load(build_timing_cache *c, const char *path, strbuf *warning);
kiln_status build_timing_cache_save(const build_timing_cache *c, const char *path, kiln_error *err);

bool build_timing_cache_get(build_timing_cache *c, const char *sig, const char *tactic, double *ms);
bool build_timing_cache_put(build_timing_cache *c, const char *sig, const char *tactic, double ms);

#endif
