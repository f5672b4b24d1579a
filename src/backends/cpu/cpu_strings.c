/* cpu_strings.c - string and text ops: StringConcat, StringSplit, StringNormalizer,
 * RegexFullMatch and TfIdfVectorizer.
 *
 * Strings are byte strings (UTF-8 passes through untouched). Case changes in
 * StringNormalizer act on ASCII letters only, which is what the "C" and "en_US" locales
 * give for the inputs ONNX models carry in practice; other locales are refused rather
 * than silently treated as C.
 *
 * RegexFullMatch uses POSIX extended regular expressions from libc (regcomp/regexec)
 * instead of RE2. The pattern is translated first: RE2's class escapes (\d \w \s \D \W
 * \S) become POSIX classes, also inside brackets ([\w.-] -> [[:alnum:]_.-]), and escaped
 * punctuation inside brackets becomes the literal character. RE2 features POSIX ERE
 * lacks (non-greedy quantifiers, (?:...) and (?i) groups, lookaround, \A \z, Unicode
 * classes \p{..}) are refused with KILN_ERR_UNSUPPORTED naming the construct, so a case
 * that needs them is skipped with a reason instead of matching differently. One
 * semantic difference remains: POSIX picks the leftmost-longest match while RE2 is
 * leftmost-first, which only matters for submatches; full-match answers are the same.
 * \b and \B rely on glibc's GNU extensions.
 */
#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_broadcast.h"
#include "backends/cpu/cpu_elem_util.h"
#include "core/strbuf.h"

#define KERNEL(Op)                                                                                              \
    kiln_status cpu_##Op(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, rt_value *outputs, \
                         int32_t n_out)

static kiln_status need_string(cpu_kernel_ctx *ctx, const rt_value *const *inputs, int32_t n_in, int32_t i,
                               const rt_tensor **out) {
    kiln_status st = cpu_need_input(ctx, inputs, n_in, i, out);
    if (st != KILN_OK) return st;
    if ((*out)->dtype != KILN_DTYPE_STRING)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input %d must be a string tensor (got %s)", (int)i,
                               kiln_dtype_name((*out)->dtype));
    return KILN_OK;
}

static const ir_bytes *str_at(const rt_tensor *t, uint64_t i) { return &((const ir_bytes *)t->data)[i]; }

static bool attr_str_is(const ir_node *n, const char *name, const char *value, const char *dflt) {
    const ir_attr *a = ir_node_attr(n, name);
    if (!a || a->type != IR_ATTR_STRING) return dflt && !strcmp(value, dflt);
    size_t l = strlen(value);
    return a->s.len == l && !memcmp(a->s.data, value, l);
}

/* ---- StringConcat ---------------------------------------------------------------------- */

KERNEL(StringConcat) {
    const rt_tensor *a, *b;
    kiln_status st = need_string(ctx, inputs, n_in, 0, &a);
    if (st == KILN_OK) st = need_string(ctx, inputs, n_in, 1, &b);
    if (st != KILN_OK) return st;
    int32_t r;
    int64_t d[RT_MAX_RANK];
    st = cpu_bcast_shape(ctx, a->rank, a->dims, b->rank, b->dims, &r, d);
    if (st != KILN_OK) return st;
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_STRING, r, d, &y);
    if (st != KILN_OK) return st;
    /* element strides of each input aligned to the output's rank (0 where broadcast) */
    int64_t sa[RT_MAX_RANK] = {0}, sb[RT_MAX_RANK] = {0}, idx[RT_MAX_RANK] = {0};
    int64_t acc = 1;
    for (int32_t k = a->rank - 1; k >= 0; k--) {
        sa[k + r - a->rank] = a->dims[k] == 1 ? 0 : acc;
        acc *= a->dims[k];
    }
    acc = 1;
    for (int32_t k = b->rank - 1; k >= 0; k--) {
        sb[k + r - b->rank] = b->dims[k] == 1 ? 0 : acc;
        acc *= b->dims[k];
    }
    strbuf sbuf;
    sb_init(&sbuf);
    for (uint64_t i = 0; i < y->count && st == KILN_OK; i++) {
        int64_t ia = 0, ib = 0;
        for (int32_t k = 0; k < r; k++) ia += idx[k] * sa[k], ib += idx[k] * sb[k];
        const ir_bytes *x = str_at(a, (uint64_t)ia), *z = str_at(b, (uint64_t)ib);
        sb_reset(&sbuf);
        sb_append_n(&sbuf, x->data ? x->data : "", (size_t)x->len);
        sb_append_n(&sbuf, z->data ? z->data : "", (size_t)z->len);
        st = rt_tensor_set_string(y, i, sb_cstr(&sbuf), sbuf.len, ctx->err);
        for (int32_t k = r - 1; k >= 0; k--) {
            if (++idx[k] < d[k]) break;
            idx[k] = 0;
        }
    }
    sb_free(&sbuf);
    return st;
}

/* ---- StringSplit ----------------------------------------------------------------------- */

typedef struct span {
    uint64_t off, len;
} span;

/* Splits s into pieces (at most maxsplit splits when maxsplit >= 0). Without a delimiter,
 * runs of whitespace separate pieces and leading/trailing whitespace yields none (Python's
 * str.split()); with one, every occurrence splits (empty pieces kept). */
static int64_t split_one(const ir_bytes *s, const char *delim, size_t dl, int64_t maxsplit, span *out,
                         int64_t cap) {
    int64_t n = 0;
    const char *p = s->data ? s->data : "";
    uint64_t len = s->len, i = 0;
    if (dl == 0) {
        while (i < len) {
            while (i < len && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r'))) i++;
            if (i >= len) break;
            uint64_t start = i;
            if (maxsplit >= 0 && n == maxsplit) {
                /* the rest, without trailing whitespace */
                uint64_t end = len;
                while (end > start && (p[end - 1] == ' ' || (p[end - 1] >= '\t' && p[end - 1] <= '\r'))) end--;
                if (out && n < cap) out[n] = (span){start, end - start};
                return n + 1;
            }
            while (i < len && !(p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r'))) i++;
            if (out && n < cap) out[n] = (span){start, i - start};
            n++;
        }
        return n;
    }
    uint64_t start = 0;
    while (i + dl <= len) {
        if ((maxsplit < 0 || n < maxsplit) && !memcmp(p + i, delim, dl)) {
            if (out && n < cap) out[n] = (span){start, i - start};
            n++;
            i += dl;
            start = i;
        } else {
            i++;
        }
    }
    if (out && n < cap) out[n] = (span){start, len - start};
    return n + 1;
}

KERNEL(StringSplit) {
    const rt_tensor *x;
    kiln_status st = need_string(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    if (x->rank >= RT_MAX_RANK) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input rank too large");
    const ir_attr *da = ir_node_attr(ctx->node, "delimiter");
    const char *delim = da && da->type == IR_ATTR_STRING && da->s.data ? da->s.data : "";
    size_t dl = da && da->type == IR_ATTR_STRING ? (size_t)da->s.len : 0;
    int64_t maxsplit = ir_node_attr_int(ctx->node, "maxsplit", -1);
    if (maxsplit < 0) maxsplit = -1;
    int64_t most = 0;
    for (uint64_t i = 0; i < x->count; i++) {
        int64_t k = split_one(str_at(x, i), delim, dl, maxsplit, NULL, 0);
        if (k > most) most = k;
    }
    int64_t d[RT_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank] = most;
    rt_tensor *y, *lens;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_STRING, x->rank + 1, d, &y);
    if (st == KILN_OK && n_out > 1) st = cpu_alloc_out(ctx, outputs, n_out, 1, KILN_DTYPE_INT64, x->rank, d, &lens);
    else lens = NULL;
    if (st != KILN_OK) return st;
    span *sp = malloc(sizeof(span) * (size_t)(most ? most : 1));
    if (!sp) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < x->count && st == KILN_OK; i++) {
        const ir_bytes *s = str_at(x, i);
        int64_t k = split_one(s, delim, dl, maxsplit, sp, most);
        if (lens) ((int64_t *)lens->data)[i] = k;
        for (int64_t j = 0; j < k && st == KILN_OK; j++)
            st = rt_tensor_set_string(y, i * (uint64_t)most + (uint64_t)j, s->data + sp[j].off, sp[j].len,
                                      ctx->err);
        for (int64_t j = k; j < most && st == KILN_OK; j++)
            st = rt_tensor_set_string(y, i * (uint64_t)most + (uint64_t)j, "", 0, ctx->err);
    }
    free(sp);
    return st;
}

/* ---- StringNormalizer ------------------------------------------------------------------ */

static bool bytes_eq(const ir_bytes *a, const ir_bytes *b, bool case_sensitive) {
    if (a->len != b->len) return false;
    for (uint64_t i = 0; i < a->len; i++) {
        unsigned char x = (unsigned char)a->data[i], y = (unsigned char)b->data[i];
        if (!case_sensitive) {
            if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
            if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
        }
        if (x != y) return false;
    }
    return true;
}

KERNEL(StringNormalizer) {
    const rt_tensor *x;
    kiln_status st = need_string(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    /* input is [C] or [1, C] */
    if (!(x->rank == 1 || (x->rank == 2 && x->dims[0] == 1)))
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "input must be [C] or [1, C] (got rank %d)", (int)x->rank);
    int mode = 0; /* 0 none, 1 lower, 2 upper */
    if (attr_str_is(ctx->node, "case_change_action", "LOWER", NULL)) mode = 1;
    else if (attr_str_is(ctx->node, "case_change_action", "UPPER", NULL)) mode = 2;
    else if (!attr_str_is(ctx->node, "case_change_action", "NONE", "NONE"))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "case_change_action must be LOWER, UPPER or NONE");
    const ir_attr *loc = ir_node_attr(ctx->node, "locale");
    if (loc && loc->type == IR_ATTR_STRING && loc->s.len &&
        !attr_str_is(ctx->node, "locale", "C", NULL) && !attr_str_is(ctx->node, "locale", "en_US", NULL) &&
        !attr_str_is(ctx->node, "locale", "en_US.UTF-8", NULL))
        return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "StringNormalizer: only the C and en_US locales are "
                                                          "supported (got '%.*s')", (int)loc->s.len, loc->s.data);
    bool cs = ir_node_attr_int(ctx->node, "is_case_sensitive", 0) != 0;
    const ir_attr *sw = ir_node_attr(ctx->node, "stopwords");
    int32_t n_sw = sw && sw->type == IR_ATTR_STRINGS ? sw->n : 0;
    uint8_t *keep = calloc((size_t)x->count + 1, 1);
    if (!keep) return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t kept = 0;
    for (uint64_t i = 0; i < x->count; i++) {
        bool stop = false;
        for (int32_t j = 0; j < n_sw && !stop; j++) stop = bytes_eq(str_at(x, i), &sw->strings[j], cs);
        keep[i] = !stop;
        kept += !stop;
    }
    /* everything filtered out: a single empty string, as ONNX Runtime returns */
    int64_t d[2];
    int32_t r = x->rank;
    if (r == 1) d[0] = kept ? kept : 1;
    else d[0] = 1, d[1] = kept ? kept : 1;
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_STRING, r, d, &y);
    uint64_t o = 0;
    char *buf = NULL;
    for (uint64_t i = 0; i < x->count && st == KILN_OK; i++) {
        if (!keep[i]) continue;
        const ir_bytes *s = str_at(x, i);
        char *nb = realloc(buf, (size_t)s->len + 1);
        if (!nb) {
            st = cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
            break;
        }
        buf = nb;
        for (uint64_t k = 0; k < s->len; k++) {
            char c = s->data[k];
            if (mode == 1 && c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            else if (mode == 2 && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
            buf[k] = c;
        }
        st = rt_tensor_set_string(y, o++, buf, s->len, ctx->err);
    }
    if (st == KILN_OK && !kept) st = rt_tensor_set_string(y, 0, "", 0, ctx->err);
    free(buf);
    free(keep);
    return st;
}

/* ---- RegexFullMatch -------------------------------------------------------------------- */

/* Appends the POSIX bracket-expression body for an RE2 class escape, or returns false. */
static bool class_body(char c, strbuf *out) {
    switch (c) {
    case 'd': sb_append(out, "0-9"); return true;
    case 'w': sb_append(out, "[:alnum:]_"); return true;
    case 's': sb_append(out, "[:space:]"); return true;
    default: return false;
    }
}

/* Translates an RE2 pattern to a POSIX ERE anchored at both ends. Returns NULL (with
 * *why set) for RE2 constructs POSIX ERE lacks. */
static bool re2_to_posix(const char *p, size_t n, strbuf *out, const char **why) {
    sb_append(out, "^(");
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\') {
            if (i + 1 >= n) return *why = "a trailing backslash", false;
            char e = p[++i];
            if (e == 'd' || e == 'w' || e == 's') {
                sb_append(out, "[");
                class_body(e, out);
                sb_append(out, "]");
            } else if (e == 'D' || e == 'W' || e == 'S') {
                sb_append(out, "[^");
                class_body((char)(e - 'A' + 'a'), out);
                sb_append(out, "]");
            } else if (e == 'b' || e == 'B') {
                sb_append_n(out, p + i - 1, 2); /* glibc GNU extension */
            } else if (e == 'A' || e == 'z' || e == 'p' || e == 'P' || e == 'Q' || e == 'E' || e == 'C' ||
                       (e >= '0' && e <= '9') || e == 'x') {
                *why = "RE2 escapes \\A \\z \\p \\Q \\C \\x and back-references";
                return false;
            } else if (e == 'n') sb_append(out, "\n");
            else if (e == 't') sb_append(out, "\t");
            else sb_append_n(out, p + i - 1, 2); /* escaped punctuation: same in ERE */
        } else if (c == '[') {
            /* bracket expression: rebuild with ']' first and '-' last when they are literal */
            size_t j = i + 1;
            bool neg = j < n && p[j] == '^';
            if (neg) j++;
            strbuf body;
            sb_init(&body);
            bool close_lit = false, dash_lit = false, ok = true;
            if (j < n && p[j] == ']') close_lit = true, j++;
            for (; j < n && p[j] != ']'; j++) {
                if (p[j] == '\\' && j + 1 < n) {
                    char e = p[++j];
                    if (class_body(e, &body)) continue;
                    if (e == ']') close_lit = true;
                    else if (e == '-') dash_lit = true;
                    else if (e == 'D' || e == 'W' || e == 'S' || e == 'p' || e == 'P') ok = false;
                    else if (e == 'n') sb_append(&body, "\n");
                    else if (e == 't') sb_append(&body, "\t");
                    else if (e == '\\') sb_append(&body, "\\");
                    else sb_append_n(&body, &e, 1);
                } else if (p[j] == '[' && j + 1 < n && p[j + 1] == ':') {
                    const char *end = strstr(p + j, ":]");
                    if (!end || (size_t)(end - p) >= n) ok = false;
                    else {
                        sb_append_n(&body, p + j, (size_t)(end - (p + j)) + 2);
                        j = (size_t)(end - p) + 1;
                    }
                } else if (p[j] == '-' && (j + 1 >= n || p[j + 1] == ']' || body.len == 0)) {
                    dash_lit = true;
                } else {
                    sb_append_n(&body, p + j, 1);
                }
            }
            if (j >= n || !ok) {
                sb_free(&body);
                *why = j >= n ? "an unterminated [...]" : "negated classes (\\D \\W \\S \\p) inside [...]";
                return false;
            }
            sb_append(out, neg ? "[^" : "[");
            if (close_lit) sb_append(out, "]");
            sb_append_n(out, sb_cstr(&body), body.len);
            if (dash_lit) sb_append(out, "-");
            sb_append(out, "]");
            sb_free(&body);
            i = j;
        } else if (c == '(' && i + 1 < n && p[i + 1] == '?') {
            *why = "RE2 groups (?:...), (?i) and named groups";
            return false;
        } else if ((c == '?' || c == '+' || c == '*' || c == '}') && i + 1 < n && p[i + 1] == '?') {
            *why = "non-greedy quantifiers";
            return false;
        } else {
            sb_append_n(out, &c, 1);
        }
    }
    sb_append(out, ")$");
    return true;
}

typedef struct regex_state {
    regex_t re;
} regex_state;

static void regex_state_free(void *p) {
    regex_state *s = p;
    regfree(&s->re);
    free(s);
}

KERNEL(RegexFullMatch) {
    const rt_tensor *x;
    kiln_status st = need_string(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    regex_state *rs = *ctx->state;
    if (!rs) {
        const ir_attr *pa = ir_node_attr(ctx->node, "pattern");
        if (!pa || pa->type != IR_ATTR_STRING)
            return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "attribute 'pattern' (a string) is required");
        strbuf pat;
        sb_init(&pat);
        const char *why = NULL;
        if (memchr(pa->s.data, 0, (size_t)pa->s.len) || !re2_to_posix(pa->s.data, (size_t)pa->s.len, &pat, &why)) {
            sb_free(&pat);
            return cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "RegexFullMatch: POSIX regex lacks %s",
                                   why ? why : "NUL bytes in patterns");
        }
        rs = calloc(1, sizeof *rs);
        if (!rs) {
            sb_free(&pat);
            return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        int rc = regcomp(&rs->re, sb_cstr(&pat), REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char msg[128];
            regerror(rc, &rs->re, msg, sizeof msg);
            free(rs);
            st = cpu_kernel_fail(ctx, KILN_ERR_UNSUPPORTED, "RegexFullMatch: POSIX regex rejects the pattern "
                                 "(translated to '%s'): %s", sb_cstr(&pat), msg);
            sb_free(&pat);
            return st;
        }
        sb_free(&pat);
        *ctx->state = rs;
        *ctx->state_free = regex_state_free;
    }
    rt_tensor *y;
    st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_BOOL, x->rank, x->dims, &y);
    if (st != KILN_OK) return st;
    char *buf = NULL;
    for (uint64_t i = 0; i < x->count; i++) {
        const ir_bytes *s = str_at(x, i);
        /* regexec needs a NUL-terminated string; a string with an embedded NUL can't match
         * a pattern without one */
        char *nb = realloc(buf, (size_t)s->len + 1);
        if (!nb) {
            free(buf);
            return cpu_kernel_fail(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        buf = nb;
        if (s->len) memcpy(buf, s->data, (size_t)s->len);
        buf[s->len] = 0;
        ((uint8_t *)y->data)[i] = strlen(buf) == s->len && regexec(&rs->re, buf, 0, NULL, 0) == 0;
    }
    free(buf);
    return KILN_OK;
}

/* ---- TfIdfVectorizer ------------------------------------------------------------------- */

/* Counts the pool's n-grams in each row of X (int or string tokens). An n-gram with skip
 * s takes tokens s+1 apart; every skip 0..max_skip_count is tried, except that unigrams
 * are counted once per position. The pool lists n-grams grouped by length (ngram_counts[i]
 * = where the (i+1)-grams start) and ngram_indexes maps each pooled n-gram to an output
 * column. mode TF gives counts, IDF the weight where the count is non-zero, TFIDF
 * count * weight (weights default to 1). */
static bool tok_eq(const rt_tensor *x, uint64_t i, const ir_attr *pool_s, const int64_t *pool_i, int64_t p) {
    if (pool_s) {
        const ir_bytes *a = str_at(x, i), *b = &pool_s->strings[p];
        return a->len == b->len && (!a->len || !memcmp(a->data, b->data, (size_t)a->len));
    }
    return cpu_load_i64(x->data, x->dtype, i) == pool_i[p];
}

KERNEL(TfIdfVectorizer) {
    const rt_tensor *x;
    kiln_status st = cpu_need_input(ctx, inputs, n_in, 0, &x);
    if (st != KILN_OK) return st;
    const ir_node *nd = ctx->node;
    if (x->rank != 1 && x->rank != 2) return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be [C] or [N, C]");
    bool is_str = x->dtype == KILN_DTYPE_STRING;
    if (!is_str && x->dtype != KILN_DTYPE_INT32 && x->dtype != KILN_DTYPE_INT64)
        return cpu_kernel_fail(ctx, KILN_ERR_SHAPE, "X must be string, int32 or int64");
    int64_t gmin = ir_node_attr_int(nd, "min_gram_length", 1), gmax = ir_node_attr_int(nd, "max_gram_length", 1);
    int64_t skips = ir_node_attr_int(nd, "max_skip_count", 0);
    int32_t n_counts, n_idx, n_pool = 0, n_w = 0;
    const int64_t *counts = cpu_attr_ints(nd, "ngram_counts", &n_counts);
    const int64_t *idx = cpu_attr_ints(nd, "ngram_indexes", &n_idx);
    const ir_attr *ps = ir_node_attr(nd, "pool_strings");
    const int64_t *pool_i = NULL;
    if (ps && ps->type == IR_ATTR_STRINGS) n_pool = ps->n;
    else {
        ps = NULL;
        pool_i = cpu_attr_ints(nd, "pool_int64s", &n_pool);
    }
    const ir_attr *wa = ir_node_attr(nd, "weights");
    if (wa && wa->type == IR_ATTR_FLOATS) n_w = wa->n;
    int mode = attr_str_is(nd, "mode", "IDF", NULL) ? 1 : attr_str_is(nd, "mode", "TFIDF", NULL) ? 2 : 0;
    if (!counts || !idx || (!ps && !pool_i) || (ps != NULL) != is_str || gmin < 1 || gmax < gmin ||
        gmax > n_counts || skips < 0 || (n_w && n_w != n_idx))
        return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad TfIdfVectorizer attributes (pool, ngram_counts, "
                                                            "ngram_indexes, weights or gram lengths)");
    int64_t n_out_cols = 0;
    for (int32_t i = 0; i < n_idx; i++) {
        if (idx[i] < 0 || idx[i] > (1 << 24)) return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "bad ngram_indexes");
        if (idx[i] + 1 > n_out_cols) n_out_cols = idx[i] + 1;
    }
    int64_t rows = x->rank == 2 ? x->dims[0] : 1, C = x->dims[x->rank - 1];
    int64_t od[2] = {rows, n_out_cols};
    rt_tensor *y;
    if (x->rank == 2) st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_FLOAT, 2, od, &y);
    else st = cpu_alloc_out(ctx, outputs, n_out, 0, KILN_DTYPE_FLOAT, 1, od + 1, &y);
    if (st != KILN_OK) return st;
    float *Y = y->data;
    if (y->count) memset(Y, 0, (size_t)y->nbytes);
    for (int64_t r = 0; r < rows; r++) {
        float *yr = Y + r * n_out_cols;
        for (int64_t n = gmin; n <= gmax; n++) {
            int64_t pb = counts[n - 1], pe = n < n_counts ? counts[n] : n_pool;
            if (pb < 0 || pe > n_pool || pb > pe || (pe - pb) % n)
                return cpu_kernel_fail(ctx, KILN_ERR_INVALID_MODEL, "ngram_counts does not split the pool");
            for (int64_t s = 0; s <= (n == 1 ? 0 : skips); s++)
                for (int64_t start = 0; start + (n - 1) * (s + 1) < C; start++)
                    for (int64_t g = pb; g < pe; g += n) {
                        bool m = true;
                        for (int64_t j = 0; j < n && m; j++)
                            m = tok_eq(x, (uint64_t)(r * C + start + j * (s + 1)), ps, pool_i, g + j);
                        if (!m) continue;
                        int64_t k = (g - pb) / n; /* k-th n-gram of this length */
                        int64_t ord = 0; /* its position among all pooled n-grams */
                        for (int64_t l = 1; l < n; l++) {
                            int64_t lb = counts[l - 1], le = l < n_counts ? counts[l] : n_pool;
                            ord += (le - lb) / l;
                        }
                        ord += k;
                        if (ord < n_idx) yr[idx[ord]] += 1.0f;
                    }
        }
        for (int32_t i = 0; i < n_idx; i++) {
            float w = n_w ? wa->floats[i] : 1.0f;
            float *c = &yr[idx[i]];
            if (mode == 1) *c = *c > 0 ? w : 0.0f;
            else if (mode == 2) *c *= w;
        }
    }
    return KILN_OK;
}
