/* strbuf.c - see strbuf.h. */
#include "core/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_init(strbuf *sb) { memset(sb, 0, sizeof *sb); }

void sb_free(strbuf *sb) {
    free(sb->data);
    sb_init(sb);
}

void sb_reset(strbuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = 0;
}

static bool reserve(strbuf *sb, size_t extra) {
    if (sb->failed) return false;
    if (extra > SIZE_MAX - sb->len - 1) {
        sb->failed = true;
        return false;
    }
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap) return true;
    size_t ncap = sb->cap ? sb->cap : 64;
    while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    char *nd = realloc(sb->data, ncap);
    if (!nd) {
        sb->failed = true;
        return false;
    }
    sb->data = nd;
    sb->cap = ncap;
    return true;
}

void sb_append_n(strbuf *sb, const char *s, size_t n) {
    if (!reserve(sb, n)) return;
    if (n) memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = 0;
}

void sb_append(strbuf *sb, const char *s) { sb_append_n(sb, s, strlen(s)); }

void sb_putc(strbuf *sb, char c) { sb_append_n(sb, &c, 1); }

void sb_vprintf(strbuf *sb, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !reserve(sb, (size_t)n)) return;
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void sb_printf(strbuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(sb, fmt, ap);
    va_end(ap);
}

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

void sb_json_string(strbuf *sb, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    sb_putc(sb, '"');
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            sb_putc(sb, '\\');
            sb_putc(sb, (char)c);
            i++;
        } else if (c == '\n') { sb_append(sb, "\\n"); i++; }
        else if (c == '\t') { sb_append(sb, "\\t"); i++; }
        else if (c == '\r') { sb_append(sb, "\\r"); i++; }
        else if (c < 0x20 || c == 0x7F) { sb_printf(sb, "\\u%04x", c); i++; }
        else {
            size_t l = utf8_len(p + i, n - i);
            if (l == 0) { sb_printf(sb, "\\u%04x", c); i++; }
            else { sb_append_n(sb, s + i, l); i += l; }
        }
    }
    sb_putc(sb, '"');
}

const char *sb_cstr(const strbuf *sb) { return sb->data ? sb->data : ""; }

char *sb_take(strbuf *sb) {
    char *d = sb->data;
    sb_init(sb);
    return d;
}
