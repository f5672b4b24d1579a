/* timing_cache.c - the timing cache file (see timing_cache.h). JSON is read with cJSON
 * and written with sb_json_string, so keys with any bytes round-trip. */
#include "build/timing_cache.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kiln/kiln.h"

void build_timing_cache_init(build_timing_cache *c) {
    memset(c, 0, sizeof *c);
    arena_init(&c->arena);
    hashmap_init(&c->index);
}

void build_timing_cache_free(build_timing_cache *c) {
    hashmap_free(&c->index);
    free(c->entries);
    arena_free(&c->arena);
    memset(c, 0, sizeof *c);
}

static char *make_key(build_timing_cache *c, const char *sig, const char *tactic) {
    return arena_printf(&c->arena, "%s\t%s", sig, tactic);
}

static bool put_key(build_timing_cache *c, const char *key, double ms) {
    int32_t idx;
    if (hashmap_get(&c->index, key, &idx)) {
        c->entries[idx].ms = ms;
        return true;
    }
    if (c->n == c->cap) {
        int32_t nc = c->cap ? c->cap * 2 : 64;
        build_timing_entry *ne = kiln_realloc_array(c->entries, (size_t)nc, sizeof *ne);
        if (!ne) return false;
        c->entries = ne;
        c->cap = nc;
    }
    c->entries[c->n] = (build_timing_entry){key, ms};
    if (!hashmap_put(&c->index, key, c->n)) return false;
    c->n++;
    return true;
}

bool build_timing_cache_put(build_timing_cache *c, const char *sig, const char *tactic, double ms) {
    char *key = make_key(c, sig, tactic);
    if (!key) return false;
    c->dirty = true;
    return put_key(c, key, ms);
}

bool build_timing_cache_get(build_timing_cache *c, const char *sig, const char *tactic, double *ms) {
    char *key = make_key(c, sig, tactic); /* small; lives with the cache */
    int32_t idx;
    if (key && hashmap_get(&c->index, key, &idx)) {
        *ms = c->entries[idx].ms;
        c->hits++;
        return true;
    }
    c->misses++;
    return false;
}

bool build_timing_cache_load(build_timing_cache *c, const char *path, strbuf *warning) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return true;
        sb_printf(warning, "timing cache '%s' cannot be read (%s): timing every tactic again", path, strerror(errno));
        return false;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap > (256u << 20)) break; /* a cache is small; refuse giant files */
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, nc + 1);
            if (!nb) break;
            buf = nb;
            cap = nc;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) break;
    }
    fclose(f);
    if (!buf) {
        sb_printf(warning, "timing cache '%s' could not be loaded: timing every tactic again", path);
        return false;
    }
    buf[len] = 0;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    const char *why = NULL;
    const cJSON *fmt = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    const cJSON *ver = root ? cJSON_GetObjectItemCaseSensitive(root, "version") : NULL;
    const cJSON *entries = root ? cJSON_GetObjectItemCaseSensitive(root, "entries") : NULL;
    if (!root) why = "it is not valid JSON (corrupt or truncated)";
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "kiln-timing-cache")) why = "it is not a kiln timing cache";
    else if (cJSON_IsNumber(ver) && ver->valuedouble == 1)
        why = "it was written by an older kiln (format version 1, whose keys lack the CPU thread count the "
              "tactics were timed with)";
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != BUILD_TIMING_CACHE_VERSION)
        why = "it has another timing-cache format version";
    else if (!cJSON_IsArray(entries)) why = "it has no entries list";
    int32_t loaded = 0;
    if (!why) {
        const cJSON *e;
        cJSON_ArrayForEach(e, entries) {
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "key");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tactic");
            const cJSON *ms = cJSON_GetObjectItemCaseSensitive(e, "ms");
            if (!cJSON_IsString(k) || !cJSON_IsString(t) || !cJSON_IsNumber(ms) || !isfinite(ms->valuedouble) ||
                ms->valuedouble < 0) {
                why = "an entry is malformed";
                break;
            }
            char *key = make_key(c, k->valuestring, t->valuestring);
            if (!key || !put_key(c, key, ms->valuedouble)) {
                why = "out of memory";
                break;
            }
            loaded++;
        }
    }
    cJSON_Delete(root);
    if (why) {
        /* start over: a half-loaded cache could mix good and bad timings */
        build_timing_cache_free(c);
        build_timing_cache_init(c);
        sb_printf(warning, "timing cache '%s' is ignored because %s: timing every tactic again (the file will be rewritten)",
                  path, why);
        return false;
    }
    (void)loaded;
    return true;
}

kiln_status build_timing_cache_save(const build_timing_cache *c, const char *path, kiln_error *err) {
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"format\": \"kiln-timing-cache\", \"version\": %d, \"kiln\": \"%s\",\n \"entries\": [",
              BUILD_TIMING_CACHE_VERSION, KILN_VERSION_STRING);
    for (int32_t i = 0; i < c->n; i++) {
        const char *key = c->entries[i].key;
        const char *tab = strrchr(key, '\t');
        sb_append(&sb, i ? ",\n  {\"key\": " : "\n  {\"key\": ");
        sb_json_string(&sb, key, tab ? (size_t)(tab - key) : strlen(key));
        sb_append(&sb, ", \"tactic\": ");
        sb_json_string(&sb, tab ? tab + 1 : "", tab ? strlen(tab + 1) : 0);
        sb_printf(&sb, ", \"ms\": %.9g}", c->entries[i].ms);
    }
    sb_append(&sb, "\n ]}\n");
    kiln_status st = KILN_OK;
    FILE *f = sb.failed ? NULL : fopen(path, "w");
    if (!f) st = kiln_err_set(err, KILN_ERR_IO, "cannot write the timing cache '%s': %s", path, strerror(errno));
    else {
        bool ok = fwrite(sb.data, 1, sb.len, f) == sb.len;
        if (fclose(f) != 0 || !ok)
            st = kiln_err_set(err, KILN_ERR_IO, "writing the timing cache '%s' failed", path);
    }
    sb_free(&sb);
    return st;
}
