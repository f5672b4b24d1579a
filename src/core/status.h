/* status.h - error status and human-readable error messages shared by every module.
 *
 * Every internal call that can fail returns a kiln_status and, when it fails, writes a
 * message into a kiln_error owned by the caller (SQLite's errmsg, but without globals).
 * Messages are full sentences that say what was wrong and how to fix it; they are built
 * with printf-style formatting and may span several lines (a fact line, then "hint: ...").
 * Library code never exits or aborts on user input: it returns a status.
 */
#ifndef KILN_CORE_STATUS_H
#define KILN_CORE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#include "kiln/kiln.h"

/* An error slot. Zero-initialise it (kiln_error e = {0};), pass it down, free it once. */
typedef struct kiln_error {
    kiln_status code; /* KILN_OK while nothing failed */
    char *msg;        /* heap string, NULL while nothing failed */
} kiln_error;

/* Records the first error only: later calls on a slot that already holds an error are
 * ignored, so the root cause is what the user sees. Returns `code` for tail calls:
 *     return kiln_err_set(err, KILN_ERR_FORMAT, "bad %s", what);
 * err may be NULL (the message is dropped). */
kiln_status kiln_err_set(kiln_error *err, kiln_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
kiln_status kiln_err_setv(kiln_error *err, kiln_status code, const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 0)))
#endif
    ;

/* Prepends context to an existing message ("while reading X: <old message>"). */
void kiln_err_prefix(kiln_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void kiln_err_clear(kiln_error *err);
/* Moves the error out of src into dst (dst cleared first); src is left empty. */
void kiln_err_move(kiln_error *dst, kiln_error *src);

/* The message, or "" when there is none. Never NULL. */
const char *kiln_err_msg(const kiln_error *err);

#endif
