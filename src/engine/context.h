/* context.h - an execution context over a loaded engine: runs the engine's graph on the
 * runtime (rt_session) after checking the inputs against the engine's profiles.
 *
 * Several contexts may share one engine_plan (the weights are the mapped file, read
 * only); each has its own executor, thread pool and per-node state, so contexts run in
 * parallel threads (kiln exec --infStreams=N). Create them one after another.
 */
#ifndef KILN_ENGINE_CONTEXT_H
#define KILN_ENGINE_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"
#include "runtime/executor.h"
#include "runtime/tensor.h"

typedef struct engine_context engine_context;

typedef struct engine_context_options {
    int threads;      /* CPU worker threads (0 = all online CPUs) */
    bool profile;     /* per-node timing */
    int32_t profile_index; /* which optimization profile inputs must fit (default 0) */
    /* Appended, for cuda engines (the backend comes from the engine's header; precision
     * and workspace from its META): */
    bool no_device_graph;  /* run node by node instead of recording/replaying CUDA graphs */
    bool quiet_fallback;   /* do not print the CPU-fallback warning (second and later contexts) */
} engine_context_options;

kiln_status engine_context_create(engine_plan *plan, const engine_context_options *o, engine_context **out,
                                  kiln_error *err);
void engine_context_free(engine_context *c);

/* Checks every given input against the selected profile: each dynamic dimension within
 * [min, max]. The message names the input, the dimension, the range and the flags that
 * would rebuild the engine for the shape. */
kiln_status engine_check_profile(const engine_plan *plan, int32_t profile, const char *const *names,
                                 const rt_value *const *inputs, int32_t n, kiln_error *err);

/* Runs once; outputs receive the engine's outputs in order (owned; release them). */
kiln_status engine_context_run(engine_context *c, const char *const *names, const rt_value *const *inputs, int32_t n,
                               rt_value *outputs, kiln_error *err);

int32_t engine_context_n_outputs(const engine_context *c);
const char *engine_context_output_name(const engine_context *c, int32_t i);
/* The executor, for per-node profiles (rt_executor_foreach_profile). */
rt_executor *engine_context_executor(engine_context *c);
/* The session (backend, device memory report). */
struct rt_session *engine_context_session(engine_context *c);

#endif
