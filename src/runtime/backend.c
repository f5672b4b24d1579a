/* backend.c - finding a backend by name. Backends compiled into this build are listed
 * here; a CUDA build adds its table when src/backends/cuda lands. */
#include <string.h>

#include "runtime/backend.h"

const rt_backend *rt_backend_find(const char *name) {
    if (!name || !strcmp(name, "cpu")) return rt_backend_cpu();
    return NULL;
}
