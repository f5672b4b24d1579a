/* codes.h - the catalogue of stable diagnostic codes (codes.def), for `kiln explain`,
 * `kiln check --json` consumers and documentation.
 *
 * Every diagnostic kiln emits carries one of these codes; the catalogue gives each a
 * default severity, a one-line summary and a long explanation (causes, fixes, example).
 */
#ifndef KILN_DIAG_CODES_H
#define KILN_DIAG_CODES_H

#include <stdint.h>

#include "diag/diag.h"

typedef struct diag_code_info {
    const char *code;
    diag_severity severity; /* default severity */
    const char *summary;    /* one line */
    const char *explanation;
} diag_code_info;

/* The entry for `code`, or NULL when it is not a known code. */
const diag_code_info *diag_code_find(const char *code);

/* All entries in catalogue order; *n receives the count. */
const diag_code_info *diag_code_all(int32_t *n);

#endif
