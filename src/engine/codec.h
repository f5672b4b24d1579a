/* codec.h - little-endian byte writer and bounds-checked reader for engine sections.
 *
 * The writer grows a heap buffer and latches failure (out of memory) so serialization
 * code stays linear. The reader never reads past its end: every get checks the bytes
 * left first, and the first failure is latched with the section name and byte offset,
 * so one message says where a corrupt file went wrong ("GRAPH section at byte 1234:
 * string length 4294967295 exceeds the 80 bytes left"). Later gets then return zeros.
 */
#ifndef KILN_ENGINE_CODEC_H
#define KILN_ENGINE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/arena.h"
#include "core/status.h"

typedef struct wbuf {
    uint8_t *data;
    size_t len, cap;
    bool failed;
} wbuf;

void wb_free(wbuf *w);
void wb_bytes(wbuf *w, const void *p, size_t n);
void wb_zeros(wbuf *w, size_t n);
void wb_u8(wbuf *w, uint8_t v);
void wb_u16(wbuf *w, uint16_t v);
void wb_u32(wbuf *w, uint32_t v);
void wb_u64(wbuf *w, uint64_t v);
static inline void wb_i32(wbuf *w, int32_t v) { wb_u32(w, (uint32_t)v); }
static inline void wb_i64(wbuf *w, int64_t v) { wb_u64(w, (uint64_t)v); }
void wb_f32(wbuf *w, float v);
void wb_f64(wbuf *w, double v);
void wb_str(wbuf *w, const char *s); /* NULL writes "" */
void wb_strn(wbuf *w, const char *s, size_t n);
void wb_align(wbuf *w, size_t align);

/* Raw little-endian stores/loads on a byte array (header fields). */
void le_put_u16(uint8_t *p, uint16_t v);
void le_put_u32(uint8_t *p, uint32_t v);
void le_put_u64(uint8_t *p, uint64_t v);
uint16_t le_u16(const uint8_t *p);
uint32_t le_u32(const uint8_t *p);
uint64_t le_u64(const uint8_t *p);

typedef struct rbuf {
    const uint8_t *p;
    size_t len, pos;
    const char *section; /* for messages */
    uint64_t base;       /* file offset of p[0], for messages */
    arena *arena;        /* where strings are copied */
    kiln_error *err;
    bool failed;
} rbuf;

void rb_init(rbuf *r, const uint8_t *p, size_t len, uint64_t base, const char *section, arena *a,
             kiln_error *err);
/* Latches an error "SECTION section at file byte N: <msg>"; returns false. */
bool rb_fail(rbuf *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
uint8_t rb_u8(rbuf *r);
uint16_t rb_u16(rbuf *r);
uint32_t rb_u32(rbuf *r);
uint64_t rb_u64(rbuf *r);
static inline int32_t rb_i32(rbuf *r) { return (int32_t)rb_u32(r); }
static inline int64_t rb_i64(rbuf *r) { return (int64_t)rb_u64(r); }
float rb_f32(rbuf *r);
double rb_f64(rbuf *r);
/* A NUL-terminated arena copy; "" on failure. `what` names the field in messages. */
const char *rb_str(rbuf *r, const char *what);
/* A pointer to n bytes inside the buffer (no copy), NULL on failure. */
const uint8_t *rb_bytes(rbuf *r, uint64_t n, const char *what);
/* A list count that must fit: each item needs at least min_item_bytes, so a count larger
 * than the bytes left can hold is rejected before anything is allocated. */
uint32_t rb_count(rbuf *r, uint32_t min_item_bytes, const char *what);
static inline size_t rb_left(const rbuf *r) { return r->len - r->pos; }

#endif
