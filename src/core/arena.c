/* arena.c - see arena.h. */
#include "core/arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct arena_block {
    arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define ARENA_MIN_BLOCK (64u * 1024u)
#define ARENA_MAX_BLOCK (16u * 1024u * 1024u)

void arena_init(arena *a) {
    a->head = NULL;
    a->block_size = ARENA_MIN_BLOCK;
    a->total = 0;
}

void arena_free(arena *a) {
    arena_block *b = a->head;
    while (b) {
        arena_block *n = b->next;
        free(b);
        b = n;
    }
    arena_init(a);
}

void *arena_alloc(arena *a, size_t size) {
    if (size > SIZE_MAX - 15) return NULL;
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    arena_block *b = a->head;
    if (b && b->size - b->used >= size) {
        void *p = b->data + b->used;
        b->used += size;
        return p;
    }
    size_t bsize = a->block_size;
    if (size > bsize / 4) {
        bsize = size; /* big request: own block, keep current block in front */
    } else if (a->block_size < ARENA_MAX_BLOCK) {
        a->block_size *= 2;
    }
    if (bsize > SIZE_MAX - sizeof(arena_block)) return NULL;
    arena_block *nb = malloc(sizeof(arena_block) + bsize);
    if (!nb) return NULL;
    nb->size = bsize;
    nb->used = size;
    a->total += bsize;
    if (bsize == size && b) { /* dedicated block goes behind the current one */
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        a->head = nb;
    }
    return nb->data;
}

void *arena_calloc(arena *a, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = arena_alloc(a, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

char *arena_strndup(arena *a, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = arena_alloc(a, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = 0;
    return p;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void *arena_memdup(arena *a, const void *p, size_t size) {
    void *q = arena_alloc(a, size);
    if (q && size) memcpy(q, p, size);
    return q;
}

char *arena_printf(arena *a, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = NULL;
    if (n >= 0 && (p = arena_alloc(a, (size_t)n + 1)) != NULL) vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}
