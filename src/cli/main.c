/* main.c - the `kiln` command: dispatches to subcommands listed in commands.def. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/kiln.h"

typedef struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static const command commands[] = {
#define X(name, fn, summary) {name, fn, summary},
#include "cli/commands.def"
#undef X
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void print_usage(FILE *f) {
    fprintf(f, "kiln %s - ONNX models to fast inference engines\n\n", kiln_version_string());
    fprintf(f, "usage: kiln <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'kiln <command> --help' for a command's options.\n");
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: error: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 254 || lb > 254) return 255;
    unsigned char prev[256], cur[256];
    for (size_t j = 0; j <= lb; j++) prev[j] = (unsigned char)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (unsigned char)i;
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int v = prev[j] + 1;
            if (cur[j - 1] + 1 < v) v = cur[j - 1] + 1;
            if (prev[j - 1] + cost < v) v = prev[j - 1] + cost;
            cur[j] = (unsigned char)(v > 255 ? 255 : v);
        }
        memcpy(prev, cur, lb + 1);
    }
    return prev[lb];
}

const char *cli_closest(const char *word, const char *const *cands, int n) {
    const char *best = NULL;
    int bestd = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = cli_edit_distance(word, cands[i]);
        if (d < bestd) {
            bestd = d;
            best = cands[i];
        }
    }
    size_t len = strlen(word);
    int limit = len <= 4 ? 1 : (len <= 8 ? 2 : 3);
    return (best && bestd <= limit) ? best : NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kiln %s\n", kiln_version_string());
        return CLI_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);

    const char *names[N_COMMANDS];
    for (int i = 0; i < N_COMMANDS; i++) names[i] = commands[i].name;
    const char *guess = cli_closest(argv[1], names, N_COMMANDS);
    fprintf(stderr, "kiln: error: unknown command '%s'", argv[1]);
    if (guess) fprintf(stderr, "; did you mean '%s'?", guess);
    fprintf(stderr, "\nRun 'kiln --help' for the list of commands.\n");
    return CLI_EXIT_USAGE;
}
