/* engine_gpu_info.c - formatting and compatibility checks of cuda_device_info (see
 * backends/cuda/cuda_info.h), and its encoding in an engine's META strings (gpu_arch,
 * cuda_version, cublas_version, cudnn_version; src/engine/format.h).
 *
 * Always compiled (no CUDA calls), so a kiln built without CUDA still explains why a GPU
 * engine cannot run here, and CPU-only unit tests (tests/unit/test_cuda_compat.c) check
 * the comparison with fabricated device info.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* META strings: gpu_arch "sm_90 NVIDIA H200", cuda_version "13000 13000" (runtime,
 * driver; cudaRuntimeGetVersion numbering), cublas/cudnn "130001" / "91300" (major*10000
 * + minor*100 + patch). Numbers first so they parse back exactly. */
void cuda_info_to_meta(const cuda_device_info *info, cuda_info_meta *m) {
    snprintf(m->gpu_arch, sizeof m->gpu_arch, "sm_%d%d %s", info->cc_major, info->cc_minor, info->name);
    snprintf(m->cuda_version, sizeof m->cuda_version, "%d %d", info->runtime_version, info->driver_version);
    snprintf(m->cublas_version, sizeof m->cublas_version, "%d", info->cublas_version);
    snprintf(m->cudnn_version, sizeof m->cudnn_version, "%d", info->cudnn_version);
}

static bool parse_int(const char *s, int *v, const char **end) {
    char *e = NULL;
    long x = strtol(s, &e, 10);
    if (e == s || x < 0 || x > 100000000) return false;
    *v = (int)x;
    if (end) *end = e;
    return true;
}

kiln_status cuda_info_from_meta(const char *gpu_arch, const char *cuda_version, const char *cublas_version,
                                const char *cudnn_version, cuda_device_info *info, kiln_error *err) {
    memset(info, 0, sizeof *info);
    if (!gpu_arch || !gpu_arch[0])
        return kiln_err_set(err, KILN_ERR_UNSUPPORTED,
                            "the engine records no GPU (it was built for the cpu backend)\n"
                            "hint: build it with --backend=cuda to run it on the GPU");
    const char *e = NULL;
    int cc = 0;
    if (strncmp(gpu_arch, "sm_", 3) != 0 || !parse_int(gpu_arch + 3, &cc, &e) || cc < 10 || (*e && *e != ' '))
        return kiln_err_set(err, KILN_ERR_FORMAT, "engine META: GPU architecture '%.64s' is not 'sm_<cc> <name>'",
                            gpu_arch);
    info->cc_major = cc / 10, info->cc_minor = cc % 10;
    snprintf(info->name, sizeof info->name, "%s", *e ? e + 1 : "");
    if (!cuda_version || !parse_int(cuda_version, &info->runtime_version, &e) || *e != ' ' ||
        !parse_int(e + 1, &info->driver_version, NULL))
        return kiln_err_set(err, KILN_ERR_FORMAT, "engine META: CUDA version '%.64s' is not '<runtime> <driver>'",
                            cuda_version ? cuda_version : "");
    if (!cublas_version || !parse_int(cublas_version, &info->cublas_version, NULL))
        return kiln_err_set(err, KILN_ERR_FORMAT, "engine META: cuBLAS version '%.64s' is not a number",
                            cublas_version ? cublas_version : "");
    if (!cudnn_version || !parse_int(cudnn_version, &info->cudnn_version, NULL))
        return kiln_err_set(err, KILN_ERR_FORMAT, "engine META: cuDNN version '%.64s' is not a number",
                            cudnn_version ? cudnn_version : "");
    return KILN_OK;
}
