/* tensor.h - runtime values: dense tensors, sequences and optionals with concrete shapes.
 *
 * This is what kernels consume and produce. Unlike the IR (symbolic, per-graph), a
 * runtime tensor has concrete dims and a data pointer. Data is 64-byte aligned when
 * kiln allocated it (SIMD loads), and may instead borrow read-only memory (weights in
 * the mapped model file) with RT_TENSOR_BORROWED, which kernels must never write.
 * Strings are stored as an array of ir_bytes whose bytes are owned by the tensor.
 */
#ifndef KILN_RUNTIME_TENSOR_H
#define KILN_RUNTIME_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "ir/graph.h"

#define RT_MAX_RANK 16

enum rt_tensor_flags {
    RT_TENSOR_BORROWED = 1u << 0 /* data not owned (weights, caller buffers): read-only */
};

typedef struct rt_tensor {
    kiln_dtype dtype;
    int32_t rank;
    int64_t dims[RT_MAX_RANK];
    uint64_t count;  /* product of dims */
    uint64_t nbytes; /* packed bytes; for STRING: count * sizeof(ir_bytes) */
    void *data;      /* elements, or ir_bytes[count] for STRING; NULL when count == 0 */
    uint32_t flags;
    /* Where data lives: RT_MEM_HOST (kiln's heap, or borrowed host memory) or device
     * memory owned by a backend (RT_MEM_CUDA). Kernels of a backend only ever see
     * inputs in the locations the executor arranged for them. */
    uint8_t device;
    /* Frees data when it is not host memory from rt_tensor_alloc (device memory): set by
     * the backend that allocated it, called by rt_tensor_release instead of free(). */
    void (*free_fn)(void *free_ctx, void *data);
    void *free_ctx;
} rt_tensor;

enum rt_mem_location { RT_MEM_HOST = 0, RT_MEM_CUDA = 1 };

typedef struct rt_value {
    ir_type_kind kind;      /* IR_TYPE_TENSOR, IR_TYPE_SEQUENCE, IR_TYPE_OPTIONAL; UNKNOWN = empty */
    rt_tensor t;            /* TENSOR, or the OPTIONAL's content when it holds a tensor */
    struct rt_value *items; /* SEQUENCE elements (heap array of n_items) */
    int32_t n_items;
    bool has_value;         /* OPTIONAL: false = None */
    ir_type_kind elem_kind; /* SEQUENCE/OPTIONAL: kind of the element (TENSOR or SEQUENCE) */
    kiln_dtype elem_dtype;  /* SEQUENCE/OPTIONAL: element dtype, kept for empty ones */
} rt_value;

/* Allocates (64-byte aligned, uninitialised) storage for a tensor of this shape. Checks
 * rank <= RT_MAX_RANK, dims >= 0 and byte-size overflow; a STRING tensor gets zeroed
 * ir_bytes entries. Any previous contents of *t are released first. */
kiln_status rt_tensor_alloc(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims,
                            kiln_error *err);
/* Same, zero-filled. */
kiln_status rt_tensor_alloc_zero(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims,
                                 kiln_error *err);
/* dst = a tensor of like's dtype and shape over `data` (no copy), located at `device`,
 * released through free_fn(free_ctx, data) (NULL: never freed by the tensor). dst is
 * overwritten, not released first. */
void rt_tensor_adopt(rt_tensor *dst, const rt_tensor *like, void *data, uint8_t device,
                     void (*free_fn)(void *free_ctx, void *data), void *free_ctx);
/* A read-only view of someone else's memory (no copy). */
void rt_tensor_borrow(rt_tensor *t, kiln_dtype dtype, int32_t rank, const int64_t *dims, const void *data);
/* Deep copy (strings included) of a host tensor; a device tensor is refused with
 * KILN_ERR_INTERNAL (the executor copies those through their backend). */
kiln_status rt_tensor_copy(rt_tensor *dst, const rt_tensor *src, kiln_error *err);
/* Releases owned storage (through free_fn for device memory) and resets to an empty tensor. */
void rt_tensor_release(rt_tensor *t);
/* Sets a string element (copies the bytes; frees any previous string). */
kiln_status rt_tensor_set_string(rt_tensor *t, uint64_t index, const char *s, uint64_t len, kiln_error *err);

/* Wraps an IR tensor (initializer) as a borrowed runtime tensor. External-data tensors
 * must be mapped first. Decodes nothing: same packed little-endian layout. Mapped data
 * that is not aligned for its element type (protobuf places raw_data anywhere) is copied
 * once into an aligned owned buffer instead. */
kiln_status rt_tensor_from_ir(rt_tensor *t, const ir_tensor *src, kiln_error *err);

/* Allocation hook (per thread). While set, rt_tensor_alloc of a tensor whose address is
 * one of `targets` takes its storage from alloc(ctx, nbytes) and releases it through
 * free_fn = release (with free_ctx = ctx); any other tensor, a STRING tensor, or a NULL
 * from alloc falls back to the heap. The executor uses it to put a node's outputs in its
 * buffer pool (bufpool.h) without the kernels knowing. NULL clears it. */
typedef struct rt_alloc_hook {
    void *(*alloc)(void *ctx, uint64_t nbytes);
    void (*release)(void *ctx, void *data);
    void *ctx;
    rt_tensor *const *targets;
    int32_t n_targets;
    /* Optional: when set, used instead of alloc, with the index of the target in
     * `targets` (so a planner can give each output its own place). NULL = heap. */
    void *(*alloc_at)(void *ctx, int32_t target, uint64_t nbytes);
} rt_alloc_hook;
void rt_tensor_set_alloc_hook(const rt_alloc_hook *hook);
const rt_alloc_hook *rt_tensor_alloc_hook(void);

void rt_value_init(rt_value *v);
void rt_value_release(rt_value *v);
kiln_status rt_value_copy(rt_value *dst, const rt_value *src, kiln_error *err);
/* Makes v a TENSOR value and returns its tensor (releasing previous content). */
rt_tensor *rt_value_as_tensor(rt_value *v);

/* A cap on the bytes of any one tensor rt_tensor_alloc makes on the calling thread
 * (0 = none, the default). Sessions set it while running so a hostile or mistaken shape
 * (a ConstantOfShape of [1e6, 1e6]) fails with a clear KILN_ERR_LIMIT instead of taking
 * the machine's memory. Per thread, because kernels allocate outputs on the thread that
 * runs the graph. */
void rt_tensor_set_alloc_limit(uint64_t max_bytes);
uint64_t rt_tensor_alloc_limit(void);

/* "float32[1, 3, 224, 224]" into buf. */
const char *rt_tensor_desc(const rt_tensor *t, char *buf, size_t size);

#endif
