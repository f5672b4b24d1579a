/* hashmap.c - see hashmap.h. Linear probing at <= 50% load keeps probes short. */
#include "core/hashmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t kiln_fnv1a64(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

void hashmap_init(hashmap *m) { memset(m, 0, sizeof *m); }

void hashmap_free(hashmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static bool grow(hashmap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    if (ncap < m->cap) return false;
    hashmap_entry *ns = calloc(ncap, sizeof *ns);
    if (!ns) return false;
    for (size_t i = 0; i < m->cap; i++) {
        hashmap_entry *e = &m->slots[i];
        if (!e->key) continue;
        size_t j = (size_t)e->hash & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = *e;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return true;
}

bool hashmap_put(hashmap *m, const char *key, int32_t value) {
    if ((m->count + 1) * 2 > m->cap && !grow(m)) return false;
    uint64_t h = kiln_fnv1a64(key, strlen(key));
    size_t j = (size_t)h & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].hash == h && strcmp(m->slots[j].key, key) == 0) {
            m->slots[j].value = value;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j].key = key;
    m->slots[j].hash = h;
    m->slots[j].value = value;
    m->count++;
    return true;
}

bool hashmap_get(const hashmap *m, const char *key, int32_t *value) {
    if (!m->cap) return false;
    uint64_t h = kiln_fnv1a64(key, strlen(key));
    size_t j = (size_t)h & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].hash == h && strcmp(m->slots[j].key, key) == 0) {
            if (value) *value = m->slots[j].value;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}
