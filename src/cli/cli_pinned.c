/* cli_pinned.c - moves a host input tensor into page-locked memory through the CUDA
 * backend's host_alloc hook, so host-to-device copies run at full PCIe speed (pageable
 * memory is staged through a driver bounce buffer: measured on the H200, a 77 MB batch
 * of 128 images took 10.8 ms from pageable memory). Shared by `kiln exec` and `kiln run`.
 * Without the CUDA backend, or when pinning fails, the tensor stays as it is. */
#include <string.h>

#include "cli/cli.h"
#include "runtime/backend.h"

bool cli_pin_host_tensor(rt_tensor *t) {
    const rt_backend *be = rt_backend_cuda();
    if (!be || !be->host_alloc || !be->host_free) return false;
    if (!t->data || !t->nbytes || t->dtype == KILN_DTYPE_STRING || t->device != RT_MEM_HOST) return false;
    void *p = NULL;
    kiln_error e = {0};
    if (be->host_alloc(NULL, t->nbytes, &p, &e) != KILN_OK) {
        kiln_err_clear(&e);
        return false;
    }
    memcpy(p, t->data, (size_t)t->nbytes);
    rt_tensor pinned = *t;
    t->free_fn = NULL; /* release the heap copy only */
    rt_tensor_release(t);
    *t = pinned;
    t->data = p;
    t->flags = 0;
    t->free_fn = be->host_free; /* host_free takes a NULL context (backend.h) */
    t->free_ctx = NULL;
    return true;
}
