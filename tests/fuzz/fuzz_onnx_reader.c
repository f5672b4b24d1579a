/* fuzz_onnx_reader.c - libFuzzer target for the ONNX reader: model bytes (without a
 * folder, so external data stays on paper) and standalone value files. Any crash, leak,
 * sanitizer report or hang is a bug; a clean error is the expected outcome for junk. */
#include <stddef.h>
#include <stdint.h>

#include "onnx/onnx_load.h"
#include "onnx/onnx_value_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model_options opts = kiln_model_options_default();
    ir_model *m = NULL;
    kiln_error err = {0};
    if (onnx_load_bytes(data, size, "fuzz.onnx", NULL, &opts, &m, &err) == KILN_OK) {
        /* touch what consumers read */
        for (int32_t g = 0; g < m->n_graphs; g++) {
            const ir_graph *gr = m->graphs[g];
            for (int32_t i = 0; i < gr->n_values; i++) (void)ir_type_str(m, &gr->values[i].type);
        }
        ir_model_free(m);
    }
    kiln_err_clear(&err);
    /* lazily recorded external data must also be safe */
    opts.check_external_data = 0;
    if (onnx_load_bytes(data, size, "fuzz.onnx", NULL, &opts, &m, &err) == KILN_OK) ir_model_free(m);
    kiln_err_clear(&err);

    arena a;
    arena_init(&a);
    onnx_value v;
    (void)onnx_read_value_bytes(data, size, "fuzz.pb", IR_TYPE_UNKNOWN, &a, &v, &err);
    kiln_err_clear(&err);
    (void)onnx_read_value_bytes(data, size, "fuzz.pb", IR_TYPE_OPTIONAL, &a, &v, &err);
    kiln_err_clear(&err);
    arena_free(&a);
    return 0;
}
