/* cuda_lazy.h - CUDA libraries kiln loads on first use (see cuda_lazy_cublaslt.c). */
#ifndef KILN_BACKENDS_CUDA_CUDA_LAZY_H
#define KILN_BACKENDS_CUDA_CUDA_LAZY_H

/* Loads libcublasLt if not loaded yet. NULL on success, otherwise why it failed (a
 * sentence with the fix), valid for the life of the process. Thread-safe. */
const char *cuda_cublaslt_load(void);

#endif
