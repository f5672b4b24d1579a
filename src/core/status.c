/* status.c - see status.h. */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
__attribute__((format(printf, 1, 0)))
#endif
static char *vformat(const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

kiln_status kiln_err_setv(kiln_error *err, kiln_status code, const char *fmt, va_list ap) {
    if (!err || err->code != KILN_OK) return code;
    err->code = code;
    err->msg = vformat(fmt, ap);
    return code;
}

kiln_status kiln_err_set(kiln_error *err, kiln_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void kiln_err_prefix(kiln_error *err, const char *fmt, ...) {
    if (!err || err->code == KILN_OK) return;
    va_list ap;
    va_start(ap, fmt);
    char *pre = vformat(fmt, ap);
    va_end(ap);
    if (!pre) return;
    const char *old = err->msg ? err->msg : "";
    size_t n = strlen(pre) + strlen(old) + 1;
    char *s = malloc(n);
    if (s) {
        snprintf(s, n, "%s%s", pre, old);
        free(err->msg);
        err->msg = s;
    }
    free(pre);
}

void kiln_err_clear(kiln_error *err) {
    if (!err) return;
    free(err->msg);
    err->msg = NULL;
    err->code = KILN_OK;
}

void kiln_err_move(kiln_error *dst, kiln_error *src) {
    kiln_err_clear(dst);
    *dst = *src;
    src->msg = NULL;
    src->code = KILN_OK;
}

const char *kiln_err_msg(const kiln_error *err) { return (err && err->msg) ? err->msg : ""; }

const char *kiln_status_name(kiln_status status) {
    switch (status) {
    case KILN_OK: return "ok";
    case KILN_ERR_IO: return "io";
    case KILN_ERR_FORMAT: return "format";
    case KILN_ERR_LIMIT: return "limit";
    case KILN_ERR_NOMEM: return "out-of-memory";
    case KILN_ERR_INVALID_ARG: return "invalid-argument";
    case KILN_ERR_INVALID_MODEL: return "invalid-model";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_INTERNAL: return "internal";
    case KILN_ERR_SHAPE: return "shape";
    case KILN_ERR_RUNTIME: return "runtime";
    case KILN_ERR_INCOMPATIBLE: return "incompatible";
    }
    return "unknown";
}

const char *kiln_version_string(void) { return KILN_VERSION_STRING; }
