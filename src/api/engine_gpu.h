/* engine_gpu.h - how the public engine loaders (src/api/engine.c) learn the GPU they run
 * on, for the check a cuda engine gets at load (engine_read_options.gpu / gpu_missing,
 * compared through cuda_info_compat as kiln exec does). Normally cuda_info_query on
 * device 0 (CUDA builds), or why there is none; tests set a fabricated answer so the
 * check is exercised without a GPU (tests/unit/test_api_engine_gpu.c). */
#ifndef KILN_API_ENGINE_GPU_H
#define KILN_API_ENGINE_GPU_H

#include <stddef.h>

#include "backends/cuda/cuda_info.h"
#include "core/status.h"

/* Fills *info (KILN_OK) or writes into missing[size] why there is no usable GPU (any
 * other status). */
typedef kiln_status (*kiln_api_gpu_probe_fn)(cuda_device_info *info, char *missing, size_t size);

/* Replaces the probe (NULL: the real one). Not thread-safe; for tests. */
void kiln_api_set_gpu_probe(kiln_api_gpu_probe_fn probe);

#endif
