/* backend.c - finding a backend by name. Backends compiled into this build are listed
 * here; the CUDA table exists only when CMake found nvcc (KILN_HAVE_CUDA). */
#include <string.h>

#include "runtime/backend.h"

const rt_backend *rt_backend_find(const char *name) {
    if (!name || !strcmp(name, "cpu")) return rt_backend_cpu();
    if (!strcmp(name, "cuda")) return rt_backend_cuda();
    return NULL;
}

#if !KILN_HAVE_CUDA
const rt_backend *rt_backend_cuda(void) { return NULL; }
#endif
