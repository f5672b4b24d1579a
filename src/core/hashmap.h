/* hashmap.h - string -> int32 map (open addressing, FNV-1a), for name lookups.
 *
 * Keys are not copied: they must outlive the map (they live in a model arena).
 * Used for value names, symbol names and op lookups, where models have up to
 * hundreds of thousands of names and lookups must stay O(1).
 */
#ifndef KILN_CORE_HASHMAP_H
#define KILN_CORE_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hashmap_entry {
    const char *key; /* NULL = empty slot */
    uint64_t hash;
    int32_t value;
} hashmap_entry;

typedef struct hashmap {
    hashmap_entry *slots;
    size_t cap; /* power of two, or 0 */
    size_t count;
} hashmap;

void hashmap_init(hashmap *m);
void hashmap_free(hashmap *m);
/* Inserts or overwrites. false on out-of-memory. */
bool hashmap_put(hashmap *m, const char *key, int32_t value);
/* true and *value set when found. */
bool hashmap_get(const hashmap *m, const char *key, int32_t *value);

uint64_t kiln_fnv1a64(const void *data, size_t len);

#endif
