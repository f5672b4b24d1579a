/* cli_inspect_engine.h - the engine front-end of `kiln inspect` (cli_inspect_engine.c). */
#ifndef KILN_CLI_CLI_INSPECT_ENGINE_H
#define KILN_CLI_CLI_INSPECT_ENGINE_H

#include <stdbool.h>

/* Prints an engine file's metadata, profiles, layers and memory sizes (text or JSON)
 * without loading its graph or weights; returns the process exit status. */
int cli_inspect_engine(const char *path, bool json);

#endif
