/* json_out.h - a small streaming JSON writer for the CLI's --json outputs.
 *
 * Reading JSON uses cJSON; writing goes through this instead because the outputs can be
 * large (every node and weight of a model) and a tree of cJSON objects would cost several
 * times the memory of the text. The writer tracks nesting so callers never place commas
 * themselves: jw_key() then one value, or values inside an array. Floats are written with
 * %.9g (float32 round-trips exactly), doubles with %.17g; NaN and infinities, which JSON
 * cannot represent, are written as the strings "nan", "inf" and "-inf".
 */
#ifndef KILN_CLI_JSON_OUT_H
#define KILN_CLI_JSON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"

#define JW_MAX_DEPTH 512

typedef struct jw {
    strbuf *out;
    int depth;
    bool need_comma[JW_MAX_DEPTH]; /* per open container: a value was already written */
    bool after_key;                /* a key was written; the next value needs no comma */
    bool pretty;                   /* newline + indent before each member */
    bool overflow;                 /* nesting deeper than JW_MAX_DEPTH: output is truncated */
} jw;

void jw_init(jw *w, strbuf *out, bool pretty);
void jw_obj_begin(jw *w);
void jw_obj_end(jw *w);
void jw_arr_begin(jw *w);
void jw_arr_end(jw *w);
void jw_key(jw *w, const char *key);
void jw_str(jw *w, const char *s); /* NULL writes null */
void jw_strn(jw *w, const char *s, size_t n);
void jw_int(jw *w, int64_t v);
void jw_uint(jw *w, uint64_t v);
void jw_float(jw *w, float v);
void jw_double(jw *w, double v);
void jw_bool(jw *w, bool v);
void jw_null(jw *w);
/* 64-bit hash as a 16-digit lowercase hex string. */
void jw_hex64(jw *w, uint64_t v);

/* key + value shorthands */
void jw_kstr(jw *w, const char *key, const char *s);
void jw_kint(jw *w, const char *key, int64_t v);
void jw_kuint(jw *w, const char *key, uint64_t v);
void jw_kbool(jw *w, const char *key, bool v);

#endif
