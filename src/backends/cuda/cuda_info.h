/* cuda_info.h - what CUDA device and libraries kiln runs on, for engines and messages.
 *
 * The engine format records these fields when it builds for the cuda backend and
 * compares them when it loads (cuda_info_compat): an engine tuned for one GPU
 * architecture or built against other library versions is refused with a message that
 * names both sides and says to rebuild. cuda_info_query needs a GPU (cuda_info.c, CUDA
 * builds only); the comparison, formatting and META encoding are plain host code in
 * src/engine/engine_gpu_info.c, compiled in every build and unit-tested without a GPU.
 */
#ifndef KILN_BACKENDS_CUDA_CUDA_INFO_H
#define KILN_BACKENDS_CUDA_CUDA_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct cuda_device_info {
    char name[256];        /* "NVIDIA H200" */
    int cc_major, cc_minor; /* compute capability (9, 0) */
    int sm_count;
    uint64_t total_mem;     /* bytes */
    uint64_t l2_bytes;
    int runtime_version;    /* cudaRuntimeGetVersion: 13000 = 13.0 */
    int driver_version;     /* cudaDriverGetVersion */
    int cublas_version;     /* cublasLtGetVersion: major*10000 + minor*100 + patch */
    int cudnn_version;      /* cudnnGetVersion (0 when built without cuDNN): major*10000 + minor*100 + patch */
} cuda_device_info;

/* Fills *info for device `device`. KILN_ERR_UNSUPPORTED with the CUDA error text when
 * there is no usable GPU (no driver, no device, device index out of range). */
kiln_status cuda_info_query(int device, cuda_device_info *info, kiln_error *err);

/* Number of CUDA devices (0 when there is no driver or no GPU; never fails). */
int cuda_device_count(void);

/* "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB), CUDA runtime 13.0, driver 13.0, cuBLAS 13.0.0, cuDNN 9.13.0" */
const char *cuda_info_describe(const cuda_device_info *info, char *buf, size_t size);

/* Whether an engine built on `built` can run on `here`: same compute capability and the
 * same major versions of the CUDA runtime, cuBLAS and cuDNN. On a mismatch returns
 * KILN_ERR_UNSUPPORTED with a message naming the field, both values and the fix
 * (rebuild the engine on this machine). */
kiln_status cuda_info_compat(const cuda_device_info *built, const cuda_device_info *here, kiln_error *err);

/* The info as an engine's META strings (src/engine/format.h) and back. describe, compat
 * and these live in src/engine/engine_gpu_info.c, compiled in every build. */
typedef struct cuda_info_meta {
    char gpu_arch[300], cuda_version[32], cublas_version[16], cudnn_version[16];
} cuda_info_meta;
void cuda_info_to_meta(const cuda_device_info *info, cuda_info_meta *m);
/* KILN_ERR_UNSUPPORTED when gpu_arch is empty (a CPU engine), KILN_ERR_FORMAT when a
 * string does not parse. */
kiln_status cuda_info_from_meta(const char *gpu_arch, const char *cuda_version, const char *cublas_version,
                                const char *cudnn_version, cuda_device_info *info, kiln_error *err);

#endif
