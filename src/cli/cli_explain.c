/* cli_explain.c - `kiln explain CODE`: the long explanation of a diagnostic code (what it
 * means, causes, fixes, an example), and `kiln explain --list` for the whole catalogue.
 * The text comes from src/diag/codes.def, so docs, explain and the code never drift.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "diag/codes.h"

static void explain_usage(FILE *f) {
    fprintf(f, "usage: kiln explain CODE        explain a diagnostic code, e.g. kiln explain shape-matmul-inner\n"
               "       kiln explain --list      list every code with its severity and summary\n");
}

/* Accepts a pasted "error[shape-matmul-inner]" or "[code]" as well as the bare code. */
static const char *strip_code(const char *arg, char *buf, size_t n) {
    const char *lb = strchr(arg, '[');
    const char *rb = lb ? strchr(lb, ']') : NULL;
    if (!lb || !rb || (size_t)(rb - lb - 1) >= n) return arg;
    memcpy(buf, lb + 1, (size_t)(rb - lb - 1));
    buf[rb - lb - 1] = '\0';
    return buf;
}

int cli_explain(int argc, char **argv) {
    if (argc < 2) {
        explain_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int32_t n = 0;
    const diag_code_info *all = diag_code_all(&n);
    const char *arg = argv[1];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
        explain_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(arg, "--list")) {
        size_t w = 0;
        for (int32_t i = 0; i < n; i++)
            if (strlen(all[i].code) > w) w = strlen(all[i].code);
        for (int32_t i = 0; i < n; i++)
            printf("%-*s  %-7s  %s\n", (int)w, all[i].code, diag_severity_name(all[i].severity), all[i].summary);
        return CLI_EXIT_OK;
    }
    if (arg[0] == '-') return cli_usage_error("explain", "unknown option '%s' (expected a code or --list)", arg);
    if (argc > 2) return cli_usage_error("explain", "expected one code, got %d arguments", argc - 1);
    char buf[128];
    const char *code = strip_code(arg, buf, sizeof buf);
    const diag_code_info *info = diag_code_find(code);
    if (!info) {
        const char *names[256];
        int32_t k = n < 256 ? n : 256;
        for (int32_t i = 0; i < k; i++) names[i] = all[i].code;
        const char *guess = cli_closest(code, names, k);
        fprintf(stderr, "kiln explain: error: unknown diagnostic code '%s'", code);
        if (guess) fprintf(stderr, "; did you mean '%s'?", guess);
        fprintf(stderr, "\nRun 'kiln explain --list' to see every code.\n");
        return CLI_EXIT_USAGE;
    }
    printf("%s (%s): %s\n\n%s\n\nMore: docs/CHECK.md, section '%s'.\n", info->code, diag_severity_name(info->severity),
           info->summary, info->explanation, info->code);
    return CLI_EXIT_OK;
}
