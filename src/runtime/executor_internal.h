/* executor_internal.h - what executor.c (node-by-node runs, frames, host/device copies)
 * and executor_dgraph.c (device graphs: per-signature host shape nodes, recording and
 * replaying whole runs) share: the executor's structs and the internal functions each
 * calls in the other. Not part of the runtime's API (executor.h is).
 */
#ifndef KILN_RUNTIME_EXECUTOR_INTERNAL_H
#define KILN_RUNTIME_EXECUTOR_INTERNAL_H

#include "runtime/bufpool.h"
#include "runtime/executor.h"

typedef struct rt_graph_plan {
    const ir_graph *g;
    bool prepared;
    void **kernels;          /* per node */
    void **state;            /* per node */
    void (**state_free)(void *);
    int32_t *free_start;     /* CSR over nodes: values released after node i */
    int32_t *free_ids;
    /* Zero-copy reshapes (host executors, executor.c plan_views): view_node[i] = node i's
     * output is a view of its input 0; view_root[v] = the value whose storage view v
     * shows (-1: v is not a view). NULL when views are off. */
    uint8_t *view_node;
    int32_t *view_root;
    rt_value *consts;        /* per value id: initializers (borrowed) and densified sparse ones */
    bool *is_const;
    bool *is_outer;          /* resolved by name in enclosing frames */
    bool *is_input;
    uint64_t *calls, *time_ns;
    uint8_t *on_fb;          /* per node: runs on the fallback (host) backend */
    rt_value *dconsts;       /* per value id: device copies of consts device nodes read */
    /* Device executors, main graph only (NULL otherwise): per-signature host nodes (see
     * "device graphs"): sn[i] = node i runs on the host and its outputs depend only on
     * input shapes and constants; sv[v] = value v is such an output; sv_dev[v] = some
     * device node reads v in device memory. */
    uint8_t *sn, *sv, *sv_dev;
} rt_graph_plan;

struct rt_executor {
    ir_model *model;
    const rt_backend *be;
    void *bctx;
    rt_exec_options opts;
    rt_graph_plan *plans; /* parallel to model->graphs */
    int32_t n_plans;
    uint64_t live_bytes, peak_bytes;
    uint64_t *main_sizes;
    int depth;
    const rt_backend *fb; /* host fallback backend when be is a device backend */
    void *fbctx;
    bool device;          /* be keeps tensors in device memory */
    char *fallback_report;
    int32_t n_fallback;
    /* Device-graph replay (device backends with capture hooks; see rt_exec_options). */
    struct {
        int state;           /* 0 learning shapes, 1 shapes seen once, 2 graph recorded, -1 off */
        char why[256];       /* why it is off */
        int32_t n_in, n_out; /* main-graph inputs / outputs */
        rt_tensor *in_sig;   /* per input: dtype and dims of the last run (data unused); rank -1 = not given */
        rt_tensor *out_sig;  /* per output: dtype and dims of the last run */
        rt_value *din;       /* per input: the fixed device buffer the graph reads */
        rt_value *dout;      /* per output: the fixed device buffer the graph writes */
        void *graph;
        uint64_t phase_ns[3];
        /* Per-signature host nodes (plan->sn): their outputs from the last node-by-node
         * run (shost, per main-graph value id), and device copies of the ones device
         * nodes read (sdev), uploaded before recording; the recorded graph reads sdev, so
         * they live as long as the graph. */
        rt_value *shost, *sdev;
        int32_t n_vals;
        int32_t n_host_nodes;
        const ir_node *first_other; /* the first host node that is not one of them */
        struct rt_pinned_pool **hout; /* per output: page-locked buffers the D2H copy writes and the
                                        * caller gets as the output tensor (pinned_pool.h), or NULL */
        bool no_transfers; /* replays skip the input and output copies (rt_executor_set_transfers) */
        bool collect;   /* this run keeps the sn outputs in shost */
        bool capturing; /* this run is being recorded */
    } dg;
    rt_bufpool *bufpool; /* host executors: recycles main-graph intermediates across runs */
    /* The activation arena (host executors): after a run, the main graph's intermediates
     * are planned by lifetime into one block (build/memplan.c) from that run's sizes; the
     * next runs place every node output whose size matches its plan at its offset. A
     * size that differs (new input shapes) falls back to the buffer pool, and the plan is
     * redone after that run. Offsets never overlap while both tensors are alive, so a
     * tensor at its planned place is safe whatever the other tensors' sizes are. */
    struct {
        uint8_t *base;
        uint64_t bytes;
        uint64_t *offset;  /* per main-graph value id; BUILD_MEMPLAN_NONE = not placed */
        uint64_t *size;    /* per value id: the size the offset was planned for */
        bool ready;
        const ir_node *node; /* the main-graph node running now (its outputs are the targets) */
        uint64_t hits, misses;
    } arena;
};

typedef struct rt_frame {
    rt_executor *ex;
    rt_graph_plan *plan;
    struct rt_frame *parent;
    rt_value *vals;
    const rt_value **ref;
    rt_value *xvals; /* device executors: each value's copy in the other memory (host <-> device) */
} rt_frame;

/* ---- executor.c ---- */
rt_graph_plan *rt_exec_plan_for(rt_executor *ex, const ir_graph *g);
kiln_status rt_exec_frame_bind(rt_frame *f, const rt_value *const *inputs, int32_t n_in, kiln_error *err);
kiln_status rt_exec_run_frame(rt_frame *f, kiln_error *err);
void rt_exec_frame_uncount(rt_frame *f);
void rt_exec_frame_release(rt_frame *f);
/* A device copy of a host tensor (backend alloc + H2D copy), freed through rt_exec_dev_free. */
kiln_status rt_exec_dev_from_host(rt_executor *ex, const rt_tensor *src, rt_tensor *dst, kiln_error *err);
void rt_exec_dev_free(void *ctx, void *data);
bool rt_exec_value_on_device(const rt_value *v);
/* One node-by-node run of the main graph. */
kiln_status rt_exec_run_plain(rt_executor *ex, const rt_value *const *inputs, rt_value *outputs, kiln_error *err);

/* ---- executor_dgraph.c ---- */
/* Shape/Size input 0: only its header is read. */
bool rt_exec_reads_only_shape(const ir_node *n, int32_t k);
/* Marks the main graph's per-signature host nodes (plan->sn/sv/sv_dev) and moves host
 * nodes the device can run when that lets the run be recorded. */
kiln_status rt_exec_plan_shape_nodes(rt_executor *ex, rt_graph_plan *p, const ir_node **first_other,
                                     kiln_error *err);
/* Why device graphs cannot be used by this executor at all (NULL: they may be). */
const char *rt_exec_dg_impossible(const rt_executor *ex);
void rt_exec_dg_off(rt_executor *ex, const char *why);
void rt_exec_dg_drop(rt_executor *ex);
/* After a per-signature host node ran: keep (learning run) or check (recording) its outputs. */
kiln_status rt_exec_dg_shape_node_done(rt_executor *ex, const ir_node *n, const rt_value *outs, kiln_error *err);

#endif
