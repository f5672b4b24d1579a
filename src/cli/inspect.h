/* inspect.h - `kiln inspect`: options shared by its front-ends.
 *
 * cli_inspect.c parses the command line and picks a front-end by looking at the file;
 * each front-end (inspect_onnx.c for ONNX models) prints the file's contents as text or
 * JSON. Engine files get their own front-end once the engine format exists.
 */
#ifndef KILN_CLI_INSPECT_H
#define KILN_CLI_INSPECT_H

#include <stdbool.h>

typedef struct inspect_opts {
    const char *path;
    bool json;         /* one JSON object on stdout instead of text */
    bool show_nodes;   /* list every node (text) / include the node arrays (JSON) */
    bool show_weights; /* list every initializer with its location and hash */
    bool time_load;    /* hidden, for bench/bench_load.py: print the in-process load time, exit */
} inspect_opts;

/* Inspects an ONNX model; returns the process exit status (0 ok, 1 bad or invalid file). */
int inspect_onnx(const inspect_opts *o);

#endif
