/* cuda_lazy_cublaslt.c - cuBLASLt, loaded on first use instead of at program start.
 *
 * libcublasLt is a 540 MB shared library. Linked normally, every kiln command, even
 * `kiln --version` on a machine without a GPU, paid for mapping and relocating it: about
 * 0.35 s and 216 MB of resident memory per process (measured on a 2-core CPU machine with
 * `/usr/bin/time -f "%e s %M KB" build/kiln --version`). So kiln does not link it:
 * this file defines the cuBLASLt functions the CUDA backend calls, with the header's own
 * signatures, as forwarders that dlopen the library the first time one is called. Only
 * `--backend cuda` ever loads it. A missing library turns into an error status from the
 * call (and cuda_cublaslt_load() gives the reason for messages), never a crash.
 *
 * Adding a cuBLASLt call to the backend means adding its forwarder here; the link fails
 * with "undefined reference" until then.
 */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "backends/cuda/cuda_lazy.h"

static void *lib;
static char lib_error[512];
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void open_lib(void) {
    char name[64];
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(lib_error, sizeof lib_error,
                 "cannot load %s (%s): install the CUDA toolkit's cuBLAS libraries or add their folder to "
                 "LD_LIBRARY_PATH",
                 name, why ? why : "not found");
    }
}

const char *cuda_cublaslt_load(void) {
    pthread_once(&lib_once, open_lib);
    return lib ? NULL : lib_error;
}

static void *sym(const char *name) {
    if (cuda_cublaslt_load()) return NULL;
    return dlsym(lib, name);
}

/* Resolves the real function once (a benign race: every thread stores the same value). */
#define FORWARD(name, fail, ...)                               \
    static __typeof__(&name) real;                             \
    if (!real) real = (__typeof__(&name))sym(#name);           \
    if (!real) return fail;                                    \
    return real(__VA_ARGS__)

#define NOT_LOADED CUBLAS_STATUS_NOT_INITIALIZED

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) { FORWARD(cublasLtCreate, NOT_LOADED, lightHandle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) { FORWARD(cublasLtDestroy, NOT_LOADED, lightHandle); }

size_t cublasLtGetVersion(void) { FORWARD(cublasLtGetVersion, 0); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    FORWARD(cublasLtMatmul, NOT_LOADED, lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
            algo, workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
    FORWARD(cublasLtMatmulAlgoGetHeuristic, NOT_LOADED, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc,
            preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    FORWARD(cublasLtMatmulDescCreate, NOT_LOADED, matmulDesc, computeType, scaleType);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    FORWARD(cublasLtMatmulDescDestroy, NOT_LOADED, matmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    FORWARD(cublasLtMatmulDescSetAttribute, NOT_LOADED, matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    FORWARD(cublasLtMatmulPreferenceCreate, NOT_LOADED, pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    FORWARD(cublasLtMatmulPreferenceDestroy, NOT_LOADED, pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes) {
    FORWARD(cublasLtMatmulPreferenceSetAttribute, NOT_LOADED, pref, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    FORWARD(cublasLtMatrixLayoutCreate, NOT_LOADED, matLayout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    FORWARD(cublasLtMatrixLayoutDestroy, NOT_LOADED, matLayout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
    FORWARD(cublasLtMatrixLayoutSetAttribute, NOT_LOADED, matLayout, attr, buf, sizeInBytes);
}
