/* fuzz_engine_reader.c - libFuzzer target for the engine file reader.
 *
 * Each input is read twice: once as-is (checksums on: exercises header, table and
 * foreign-file detection), and once with checksums skipped, so mutations reach the
 * section decoders (META, LAYERS, MEMPLAN, GRAPH) that a real file protects with crc32.
 * Whatever the bytes, the reader must return a status without crashing, leaking, or
 * reading outside the buffer (ASan/UBSan are on in fuzz builds). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size heap copy so any over-read is caught */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    for (int pass = 0; pass < 2; pass++) {
        engine_read_options o = {.display_name = "fuzz", .skip_checksums = pass == 1, .cpu_features = ~0ull};
        engine_plan *p = NULL;
        kiln_error err = {0};
        kiln_status st = engine_read_mem(copy, size, &o, &p, &err);
        if (st != KILN_OK && !err.msg) abort(); /* every failure must explain itself */
        engine_plan_free(p);
        kiln_err_clear(&err);
    }
    free(copy);
    return 0;
}
