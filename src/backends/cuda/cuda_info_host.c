/* cuda_info_host.c - formatting and compatibility checks of cuda_device_info (see
 * cuda_info.h). No CUDA calls here, so unit tests exercise it on machines without a GPU. */
#include <stdio.h>

#include "backends/cuda/cuda_info.h"

static const char *ver3(int v, char *buf, size_t size) {
    if (v <= 0) snprintf(buf, size, "none");
    else snprintf(buf, size, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    return buf;
}

static const char *ver_rt(int v, char *buf, size_t size) {
    snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
    return buf;
}

const char *cuda_info_describe(const cuda_device_info *info, char *buf, size_t size) {
    char a[32], b[32], c[32], d[32];
    snprintf(buf, size, "%s (sm_%d%d, %d SMs, %.1f GiB), CUDA runtime %s, driver %s, cuBLAS %s, cuDNN %s",
             info->name, info->cc_major, info->cc_minor, info->sm_count, (double)info->total_mem / (1u << 30),
             ver_rt(info->runtime_version, a, sizeof a), ver_rt(info->driver_version, b, sizeof b),
             ver3(info->cublas_version, c, sizeof c), ver3(info->cudnn_version, d, sizeof d));
    return buf;
}

kiln_status cuda_info_compat(const cuda_device_info *built, const cuda_device_info *here, kiln_error *err) {
    char x[32], y[32];
    if (built->cc_major != here->cc_major || built->cc_minor != here->cc_minor)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                            "the engine was built for GPU architecture sm_%d%d (%s) but this GPU is sm_%d%d (%s)\n"
                            "hint: tactics and kernels are chosen per architecture; rebuild the engine on this machine",
                            built->cc_major, built->cc_minor, built->name, here->cc_major, here->cc_minor, here->name);
    if (built->runtime_version / 1000 != here->runtime_version / 1000)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                            "the engine was built with CUDA runtime %s but this kiln uses %s\n"
                            "hint: rebuild the engine with this kiln",
                            ver_rt(built->runtime_version, x, sizeof x), ver_rt(here->runtime_version, y, sizeof y));
    if (built->cublas_version / 10000 != here->cublas_version / 10000)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                            "the engine was built with cuBLAS %s but this kiln uses cuBLAS %s\n"
                            "hint: rebuild the engine with this kiln",
                            ver3(built->cublas_version, x, sizeof x), ver3(here->cublas_version, y, sizeof y));
    if (built->cudnn_version / 10000 != here->cudnn_version / 10000)
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                            "the engine was built with cuDNN %s but this kiln uses cuDNN %s\n"
                            "hint: rebuild the engine with this kiln",
                            ver3(built->cudnn_version, x, sizeof x), ver3(here->cudnn_version, y, sizeof y));
    return KILN_OK;
}
