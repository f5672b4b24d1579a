/* codes.c - the diagnostic code catalogue as a table, built from codes.def. */
#include "diag/codes.h"

#include <string.h>

static const diag_code_info catalogue[] = {
#define X(code, sev, summary, explanation) {code, sev, summary, explanation},
#include "diag/codes.def"
#undef X
};
#define N_CODES ((int32_t)(sizeof catalogue / sizeof catalogue[0]))

const diag_code_info *diag_code_find(const char *code) {
    if (!code) return NULL;
    /* ~40 entries: a linear scan is simpler than a map and runs once per lookup */
    for (int32_t i = 0; i < N_CODES; i++)
        if (!strcmp(catalogue[i].code, code)) return &catalogue[i];
    return NULL;
}

const diag_code_info *diag_code_all(int32_t *n) {
    if (n) *n = N_CODES;
    return catalogue;
}
