/* json_out.c - the streaming JSON writer (see json_out.h). */
#include "cli/json_out.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void jw_init(jw *w, strbuf *out, bool pretty) {
    memset(w, 0, sizeof *w);
    w->out = out;
    w->pretty = pretty;
}

static void newline(jw *w) {
    if (!w->pretty) return;
    sb_putc(w->out, '\n');
    for (int i = 0; i < w->depth; i++) sb_append(w->out, "  ");
}

/* Called before every value and key: separates it from its predecessor. */
static void before_item(jw *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0 && w->depth <= JW_MAX_DEPTH) {
        if (w->need_comma[w->depth - 1]) sb_putc(w->out, ',');
        w->need_comma[w->depth - 1] = true;
        newline(w);
    }
}

static void open_container(jw *w, char c) {
    before_item(w);
    sb_putc(w->out, c);
    if (w->depth >= JW_MAX_DEPTH) w->overflow = true;
    else w->need_comma[w->depth] = false;
    w->depth++;
}

static void close_container(jw *w, char c) {
    bool had = w->depth > 0 && w->depth <= JW_MAX_DEPTH && w->need_comma[w->depth - 1];
    if (w->depth > 0) w->depth--;
    if (had) newline(w);
    sb_putc(w->out, c);
}

void jw_obj_begin(jw *w) { open_container(w, '{'); }
void jw_obj_end(jw *w) { close_container(w, '}'); }
void jw_arr_begin(jw *w) { open_container(w, '['); }
void jw_arr_end(jw *w) { close_container(w, ']'); }

void jw_key(jw *w, const char *key) {
    before_item(w);
    sb_json_string(w->out, key, strlen(key));
    sb_append(w->out, w->pretty ? ": " : ":");
    w->after_key = true;
}

void jw_strn(jw *w, const char *s, size_t n) {
    before_item(w);
    if (!s) sb_append(w->out, "null");
    else sb_json_string(w->out, s, n);
}

void jw_str(jw *w, const char *s) { jw_strn(w, s, s ? strlen(s) : 0); }

void jw_int(jw *w, int64_t v) {
    before_item(w);
    sb_printf(w->out, "%" PRId64, v);
}

void jw_uint(jw *w, uint64_t v) {
    before_item(w);
    sb_printf(w->out, "%" PRIu64, v);
}

static bool nonfinite(jw *w, double v) {
    if (isnan(v)) sb_append(w->out, "\"nan\"");
    else if (isinf(v)) sb_append(w->out, v > 0 ? "\"inf\"" : "\"-inf\"");
    else return false;
    return true;
}

void jw_float(jw *w, float v) {
    before_item(w);
    if (!nonfinite(w, v)) sb_printf(w->out, "%.9g", (double)v);
}

void jw_double(jw *w, double v) {
    before_item(w);
    if (!nonfinite(w, v)) sb_printf(w->out, "%.17g", v);
}

void jw_bool(jw *w, bool v) {
    before_item(w);
    sb_append(w->out, v ? "true" : "false");
}

void jw_null(jw *w) {
    before_item(w);
    sb_append(w->out, "null");
}

void jw_hex64(jw *w, uint64_t v) {
    before_item(w);
    sb_printf(w->out, "\"%016" PRIx64 "\"", v);
}

void jw_kstr(jw *w, const char *key, const char *s) {
    jw_key(w, key);
    jw_str(w, s);
}
void jw_kint(jw *w, const char *key, int64_t v) {
    jw_key(w, key);
    jw_int(w, v);
}
void jw_kuint(jw *w, const char *key, uint64_t v) {
    jw_key(w, key);
    jw_uint(w, v);
}
void jw_kbool(jw *w, const char *key, bool v) {
    jw_key(w, key);
    jw_bool(w, v);
}
