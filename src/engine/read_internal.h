/* read_internal.h - pieces shared by the engine reader's files (engine_read*.c). */
#ifndef KILN_ENGINE_READ_INTERNAL_H
#define KILN_ENGINE_READ_INTERNAL_H

#include "engine/codec.h"
#include "engine/engine.h"

/* Decodes the GRAPH section; large tensors point into `weights`. On failure the error is
 * in r->err and *out is NULL. */
kiln_status engine_read_graph(rbuf *r, const uint8_t *weights, uint64_t weights_size, ir_model **out);

/* Hands the file mapping to the model, so ir_model_free unmaps it. */
void engine_model_adopt_mapping(ir_model *m, void *map, uint64_t size);

/* munmap wrapper (no-op for NULL / size 0). */
void engine_unmap(void *map, uint64_t size);

#endif
