/* strbuf.h - a growable string used to build messages, reports and JSON.
 *
 * Appends never fail loudly: on allocation failure the buffer is marked failed and
 * further appends are ignored, so report code stays linear; callers check sb.failed
 * once at the end where it matters.
 */
#ifndef KILN_CORE_STRBUF_H
#define KILN_CORE_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
    char *data; /* always NUL-terminated once anything was appended; may be NULL when empty */
    size_t len;
    size_t cap;
    bool failed;
} strbuf;

void sb_init(strbuf *sb);
void sb_free(strbuf *sb);
void sb_reset(strbuf *sb); /* len = 0, keeps memory */
void sb_append(strbuf *sb, const char *s);
void sb_append_n(strbuf *sb, const char *s, size_t n);
void sb_putc(strbuf *sb, char c);
void sb_printf(strbuf *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void sb_vprintf(strbuf *sb, const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 0)))
#endif
    ;
/* Appends s as a JSON string literal, quotes included, escaping as RFC 8259 requires;
 * bytes that are not valid UTF-8 are written as \u00XX so output is always valid JSON. */
void sb_json_string(strbuf *sb, const char *s, size_t n);
/* "" when empty, never NULL. */
const char *sb_cstr(const strbuf *sb);
/* Hands the heap string to the caller (NULL if empty) and resets the buffer. */
char *sb_take(strbuf *sb);

#endif
