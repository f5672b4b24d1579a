/* cli.h - shared declarations for the kiln command's subcommands and helpers. */
#ifndef KILN_CLI_CLI_H
#define KILN_CLI_CLI_H

#include <stdbool.h>
#include <stdio.h>

#define X(name, fn, summary) int fn(int argc, char **argv);
#include "cli/commands.def"
#undef X

/* Exit codes shared by every subcommand. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2 };

/* Prints "kiln <cmd>: error: <msg>" style usage errors to stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The closest candidate to `word` by edit distance, or NULL if nothing is close enough.
 * Used for "did you mean" hints on flags, subcommands and input names. */
const char *cli_closest(const char *word, const char *const *candidates, int n);

/* Levenshtein distance, capped at 255. */
int cli_edit_distance(const char *a, const char *b);

/* Moves a host tensor's data into page-locked memory (CUDA builds with a GPU); false when
 * it stays as it was. cli_pinned.c. */
struct rt_tensor;
bool cli_pin_host_tensor(struct rt_tensor *t);

#endif
