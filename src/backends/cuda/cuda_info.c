/* cuda_info.c - querying the CUDA device and library versions (see cuda_info.h). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#if KILN_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "backends/cuda/cuda_info.h"

int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

kiln_status cuda_info_query(int device, cuda_device_info *info, kiln_error *err) {
    memset(info, 0, sizeof *info);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "no usable CUDA GPU: %s (%s)", cudaGetErrorString(e),
                            cudaGetErrorName(e));
    }
    if (device < 0 || device >= n)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "CUDA device %d does not exist (this machine has %d)", device,
                            n);
    struct cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED, "cannot read CUDA device %d: %s", device, cudaGetErrorString(e));
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->total_mem = (uint64_t)p.totalGlobalMem;
    info->l2_bytes = (uint64_t)p.l2CacheSize;
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    size_t lv = cublasLtGetVersion();
    info->cublas_version = (int)lv; /* already major*10000 + minor*100 + patch */
#if KILN_HAVE_CUDNN
    size_t dv = cudnnGetVersion(); /* cuDNN 9: major*10000 + minor*100 + patch */
    info->cudnn_version = (int)dv;
#endif
    return KILN_OK;
}
