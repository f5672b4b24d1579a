/* arena.h - bump allocator for everything that lives as long as a graph or a model.
 *
 * The importer, the IR and the diagnostics allocate many small objects (names, dims,
 * attribute arrays) that all die together; an arena makes that one free() and removes
 * per-object ownership bugs. Blocks grow geometrically; large requests get their own
 * block. All size arithmetic is overflow-checked: a hostile size returns NULL.
 */
#ifndef KILN_CORE_ARENA_H
#define KILN_CORE_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct arena_block arena_block;

typedef struct arena {
    arena_block *head;
    size_t block_size; /* next block's size */
    size_t total;      /* bytes requested from malloc so far */
} arena;

void arena_init(arena *a);
void arena_free(arena *a);

/* 16-byte aligned, uninitialised; NULL on overflow or out of memory. */
void *arena_alloc(arena *a, size_t size);
/* Zeroed array of n elements of `size` bytes each; NULL on overflow/oom. */
void *arena_calloc(arena *a, size_t n, size_t size);
/* Copies len bytes and appends a NUL. */
char *arena_strndup(arena *a, const char *s, size_t len);
char *arena_strdup(arena *a, const char *s);
/* printf into the arena. */
char *arena_printf(arena *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void *arena_memdup(arena *a, const void *p, size_t size);

#define ARENA_NEW(a, type) ((type *)arena_calloc((a), 1, sizeof(type)))
#define ARENA_ARRAY(a, type, n) ((type *)arena_calloc((a), (size_t)(n), sizeof(type)))

#endif
