/* cli_inspect.c - `kiln inspect MODEL.onnx`: placeholder until the inspect work lands. */
#include <stdio.h>

#include "api/model_internal.h"
#include "cli/cli.h"

int cli_inspect(int argc, char **argv) {
    if (argc < 2) return cli_usage_error("inspect", "expected a model path: kiln inspect MODEL.onnx");
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_file(argv[1], NULL, &m);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln inspect: error: %s\n", kiln_model_errmsg(m));
        kiln_model_free(m);
        return CLI_EXIT_FAILED;
    }
    printf("model: %s\n", argv[1]);
    kiln_model_free(m);
    return CLI_EXIT_OK;
}
