/* cli_inspect.c - `kiln inspect FILE`: command-line parsing and the choice of front-end.
 *
 * Options are parsed here once; the file's first bytes decide which front-end prints it.
 * Today there is one, ONNX models (inspect_onnx.c). Engine files will be a second entry
 * in `frontends` below whose probe compares the leading bytes with KILN_ENGINE_MAGIC
 * (src/engine/magic.h); it must come before the ONNX entry, because the ONNX front-end
 * accepts anything (protobuf has no magic number, so its reader is the judge).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/inspect.h"
#include "cli/cli_inspect_engine.h"
#include "engine/magic.h"

static const char *const usage_text =
    "usage: kiln inspect MODEL.onnx [--json] [--show nodes|weights[,...]]\n"
    "\n"
    "Prints what is inside an ONNX model: producer, IR and opset versions, inputs and\n"
    "outputs with their types and (symbolic) shapes, an operator histogram, parameter\n"
    "counts and bytes per dtype, external data files, metadata, local functions, and the\n"
    "problems structural validation found.\n"
    "\n"
    "options:\n"
    "  --show nodes      also list every node: name, op, inputs -> outputs, attributes\n"
    "  --show weights    also list every initializer: dtype, shape, bytes, where it is stored\n"
    "                    (--show may repeat, or take a list: --show=nodes,weights)\n"
    "  --json            print one JSON object instead of text (schema: docs/CLI.md)\n"
    "  -h, --help        print this help\n"
    "\n"
    "exit status: 0 the model was read and is structurally valid, 1 it could not be read\n"
    "or has structural errors (printed), 2 usage error.\n";

typedef struct frontend {
    const char *name;
    /* true when this front-end handles a file starting with `head` (n bytes read) */
    bool (*probe)(const unsigned char *head, size_t n);
    int (*run)(const inspect_opts *o);
} frontend;

static bool probe_onnx(const unsigned char *head, size_t n) {
    (void)head;
    (void)n;
    return true;
}

static bool probe_engine(const unsigned char *head, size_t n) {
    return n >= KILN_ENGINE_MAGIC_LEN && !memcmp(head, KILN_ENGINE_MAGIC, KILN_ENGINE_MAGIC_LEN);
}
static int run_engine(const inspect_opts *o) { return cli_inspect_engine(o->path, o->json); }

static const frontend frontends[] = {
    {"engine", probe_engine, run_engine},
    {"onnx", probe_onnx, inspect_onnx},
};

static int parse_show(const char *list, inspect_opts *o) {
    static const char *const kinds[] = {"nodes", "weights"};
    char buf[256];
    if (strlen(list) >= sizeof buf) return cli_usage_error("inspect", "--show value too long");
    strcpy(buf, list);
    char *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        n++;
        if (!strcmp(tok, "nodes")) o->show_nodes = true;
        else if (!strcmp(tok, "weights")) o->show_weights = true;
        else {
            const char *guess = cli_closest(tok, kinds, 2);
            if (guess)
                return cli_usage_error("inspect", "unknown --show value '%s'; did you mean '%s'?", tok, guess);
            return cli_usage_error("inspect", "unknown --show value '%s'; expected nodes or weights", tok);
        }
    }
    if (n == 0) return cli_usage_error("inspect", "--show needs a value: nodes or weights");
    return CLI_EXIT_OK;
}

int cli_inspect(int argc, char **argv) {
    static const char *const flags[] = {"--json", "--show", "--help"};
    inspect_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "--time-load")) {
            o.time_load = true;
        } else if (!strcmp(a, "--show")) {
            if (i + 1 >= argc) return cli_usage_error("inspect", "--show needs a value: nodes or weights");
            int rc = parse_show(argv[++i], &o);
            if (rc != CLI_EXIT_OK) return rc;
        } else if (!strncmp(a, "--show=", 7)) {
            int rc = parse_show(a + 7, &o);
            if (rc != CLI_EXIT_OK) return rc;
        } else if (a[0] == '-' && a[1] != '\0') {
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)strcspn(a, "="), a);
            const char *guess = cli_closest(word, flags, 3);
            if (guess) return cli_usage_error("inspect", "unknown option '%s'; did you mean '%s'?", a, guess);
            return cli_usage_error("inspect", "unknown option '%s'; run 'kiln inspect --help'", a);
        } else if (o.path) {
            return cli_usage_error("inspect", "more than one file given ('%s' and '%s'); inspect one at a time",
                                   o.path, a);
        } else {
            o.path = a;
        }
    }
    if (!o.path) return cli_usage_error("inspect", "expected a model path: kiln inspect MODEL.onnx");

    /* Read the first bytes for the probes; a file that cannot be opened is reported by the
     * front-end's reader with its own wording, so failures here are not fatal. */
    unsigned char head[16] = {0};
    size_t n = 0;
    FILE *f = fopen(o.path, "rb");
    if (f) {
        n = fread(head, 1, sizeof head, f);
        fclose(f);
    }
    for (size_t i = 0; i < sizeof frontends / sizeof frontends[0]; i++)
        if (frontends[i].probe(head, n)) return frontends[i].run(&o);
    return CLI_EXIT_FAILED; /* unreachable: the ONNX front-end accepts everything */
}
