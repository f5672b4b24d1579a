/* codec.c - see codec.h. Byte order is written explicitly (shifts), so the format is the
 * same on any host and no unaligned loads happen. */
#include "engine/codec.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/strbuf.h"

void wb_free(wbuf *w) {
    free(w->data);
    memset(w, 0, sizeof *w);
}

static bool wb_reserve(wbuf *w, size_t n) {
    if (w->failed) return false;
    if (n > SIZE_MAX - w->len) {
        w->failed = true;
        return false;
    }
    size_t need = w->len + n;
    if (need <= w->cap) return true;
    size_t ncap = w->cap ? w->cap : 256;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            ncap = need;
            break;
        }
        ncap *= 2;
    }
    uint8_t *nd = realloc(w->data, ncap);
    if (!nd) {
        w->failed = true;
        return false;
    }
    w->data = nd;
    w->cap = ncap;
    return true;
}

void wb_bytes(wbuf *w, const void *p, size_t n) {
    if (!n || !wb_reserve(w, n)) return;
    memcpy(w->data + w->len, p, n);
    w->len += n;
}

void wb_zeros(wbuf *w, size_t n) {
    if (!n || !wb_reserve(w, n)) return;
    memset(w->data + w->len, 0, n);
    w->len += n;
}

void le_put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
void le_put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
void le_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
uint16_t le_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
uint32_t le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
uint64_t le_u64(const uint8_t *p) { return (uint64_t)le_u32(p) | ((uint64_t)le_u32(p + 4) << 32); }

void wb_u8(wbuf *w, uint8_t v) { wb_bytes(w, &v, 1); }
void wb_u16(wbuf *w, uint16_t v) {
    uint8_t b[2];
    le_put_u16(b, v);
    wb_bytes(w, b, 2);
}
void wb_u32(wbuf *w, uint32_t v) {
    uint8_t b[4];
    le_put_u32(b, v);
    wb_bytes(w, b, 4);
}
void wb_u64(wbuf *w, uint64_t v) {
    uint8_t b[8];
    le_put_u64(b, v);
    wb_bytes(w, b, 8);
}
void wb_f32(wbuf *w, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    wb_u32(w, u);
}
void wb_f64(wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    wb_u64(w, u);
}
void wb_strn(wbuf *w, const char *s, size_t n) {
    if (n > UINT32_MAX) {
        w->failed = true;
        return;
    }
    wb_u32(w, (uint32_t)n);
    wb_bytes(w, s, n);
}
void wb_str(wbuf *w, const char *s) {
    if (!s) s = "";
    wb_strn(w, s, strlen(s));
}
void wb_align(wbuf *w, size_t align) {
    size_t r = w->len % align;
    if (r) wb_zeros(w, align - r);
}

/* ---- reader ------------------------------------------------------------------- */

void rb_init(rbuf *r, const uint8_t *p, size_t len, uint64_t base, const char *section, arena *a,
             kiln_error *err) {
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->base = base;
    r->section = section;
    r->arena = a;
    r->err = err;
    r->failed = false;
}

bool rb_fail(rbuf *r, const char *fmt, ...) {
    if (r->failed) return false;
    r->failed = true;
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    kiln_err_set(r->err, KILN_ERR_FORMAT, "%s section at file byte %" PRIu64 ": %s", r->section,
                 r->base + (uint64_t)r->pos, sb_cstr(&sb));
    sb_free(&sb);
    r->pos = r->len; /* every later get fails quietly */
    return false;
}

static const uint8_t *rb_take(rbuf *r, size_t n, const char *what) {
    if (r->failed) return NULL;
    if (n > r->len - r->pos) {
        rb_fail(r, "%s needs %zu bytes but the section has only %zu left (truncated or corrupt)", what, n,
                r->len - r->pos);
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

uint8_t rb_u8(rbuf *r) {
    const uint8_t *p = rb_take(r, 1, "a byte");
    return p ? p[0] : 0;
}
uint16_t rb_u16(rbuf *r) {
    const uint8_t *p = rb_take(r, 2, "a 16-bit field");
    return p ? le_u16(p) : 0;
}
uint32_t rb_u32(rbuf *r) {
    const uint8_t *p = rb_take(r, 4, "a 32-bit field");
    return p ? le_u32(p) : 0;
}
uint64_t rb_u64(rbuf *r) {
    const uint8_t *p = rb_take(r, 8, "a 64-bit field");
    return p ? le_u64(p) : 0;
}
float rb_f32(rbuf *r) {
    uint32_t u = rb_u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
double rb_f64(rbuf *r) {
    uint64_t u = rb_u64(r);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

const char *rb_str(rbuf *r, const char *what) {
    size_t at = r->pos;
    uint32_t n = rb_u32(r);
    if (r->failed) return "";
    if (n > r->len - r->pos) {
        r->pos = at;
        rb_fail(r, "%s: string length %u exceeds the %zu bytes left in the section", what, n, r->len - r->pos - 4);
        return "";
    }
    const uint8_t *p = r->p + r->pos;
    if (memchr(p, 0, n)) {
        rb_fail(r, "%s: string contains a NUL byte", what);
        return "";
    }
    r->pos += n;
    char *s = arena_strndup(r->arena, (const char *)p, n);
    if (!s) {
        kiln_err_set(r->err, KILN_ERR_NOMEM, "out of memory reading %s", what);
        r->failed = true;
        r->pos = r->len;
        return "";
    }
    return s;
}

const uint8_t *rb_bytes(rbuf *r, uint64_t n, const char *what) {
    if (r->failed) return NULL;
    if (n > (uint64_t)(r->len - r->pos)) {
        rb_fail(r, "%s: %" PRIu64 " bytes exceed the %zu bytes left in the section", what, n, r->len - r->pos);
        return NULL;
    }
    return rb_take(r, (size_t)n, what);
}

uint32_t rb_count(rbuf *r, uint32_t min_item_bytes, const char *what) {
    uint32_t n = rb_u32(r);
    if (r->failed) return 0;
    uint64_t need = (uint64_t)n * (min_item_bytes ? min_item_bytes : 1);
    if (need > (uint64_t)(r->len - r->pos)) {
        r->pos -= 4;
        rb_fail(r, "%s: count %u cannot fit in the %zu bytes left in the section", what, n, r->len - r->pos - 4);
        return 0;
    }
    return n;
}
