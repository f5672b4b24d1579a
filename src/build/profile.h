/* profile.h - optimization profiles: trtexec-style shape flags, parsed and checked.
 *
 * A model with dynamic inputs (symbolic dims like [batch, seq_len]) needs, per profile, a
 * min, opt and max shape for each dynamic input. Users give them as trtexec does:
 *     --minShapes=input_ids:1x1,mask:1x1 --optShapes=... --maxShapes=...
 *     --shapes=x:4x3x224x224          (min = opt = max, unless a profile is also given)
 *     --profile=1 --minShapes=...     (further profiles)
 * This module turns such flag values into a build_profile_set, checks it against a model
 * (unknown input names with a suggestion, ranks, fixed dimensions, min <= opt <= max,
 * missing partners, shared symbols, dynamic inputs without a profile) and hands out the
 * input shapes of each profile point for shape inference. `kiln check` and the engine
 * builder share it, so it knows nothing about the command line beyond the flag names.
 *
 * Spec grammar (one flag value):
 *     spec  := entry (',' entry)*
 *     entry := name ':' dims            spaces around tokens are ignored
 *     name  := 'quoted name' | plain    a plain name ends at the entry's last ':'
 *     dims  := int ('x' int)* | 'scalar' | (nothing: a scalar, rank 0)
 * Dimensions are integers 1..2147483647. Malformed values are rejected with the
 * position (1-based column) and a caret line.
 */
#ifndef KILN_BUILD_PROFILE_H
#define KILN_BUILD_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/status.h"
#include "core/strbuf.h"
#include "diag/diag.h"
#include "ir/graph.h"
#include "ir/infer.h"

#define BUILD_PROFILE_MAX_DIM 2147483647LL
#define BUILD_MAX_PROFILES 64

/* The three points of a profile. */
typedef enum build_point { BUILD_POINT_MIN = 0, BUILD_POINT_OPT = 1, BUILD_POINT_MAX = 2 } build_point;
#define BUILD_N_POINTS 3

/* Which flag a spec came from (also used to name it in messages). */
typedef enum build_shape_flag {
    BUILD_FLAG_MIN = 0,    /* --minShapes */
    BUILD_FLAG_OPT = 1,    /* --optShapes */
    BUILD_FLAG_MAX = 2,    /* --maxShapes */
    BUILD_FLAG_SHAPES = 3  /* --shapes */
} build_shape_flag;

/* One "name:dims" entry of a spec. */
typedef struct build_shape_entry {
    const char *name;
    int32_t rank; /* 0 for a scalar */
    int64_t *dims;
    int32_t column; /* 1-based column of the entry in the spec, for messages */
} build_shape_entry;

/* One input's shapes in one profile. */
typedef struct build_profile_input {
    const char *name;
    bool given[BUILD_N_POINTS]; /* set by a flag (or filled from opt/--shapes) */
    build_shape_flag source[BUILD_N_POINTS];
    int32_t rank[BUILD_N_POINTS];
    int64_t *dims[BUILD_N_POINTS];
    bool explicit_point[BUILD_N_POINTS]; /* given by its own flag, not filled */
    bool invalid; /* set by build_profiles_check: unknown input or wrong rank; not used for
                     inference */
} build_profile_input;

typedef struct build_profile {
    build_profile_input *inputs;
    int32_t n_inputs, cap_inputs;
} build_profile;

typedef struct build_profile_set {
    arena arena; /* names and dims */
    build_profile *profiles;
    int32_t n_profiles, cap_profiles;
    int32_t current; /* profile that the next min/opt/max flags go to (--profile=N) */
    build_shape_entry *shapes; /* --shapes entries, applied by build_profiles_finish */
    int32_t n_shapes, cap_shapes;
    bool finished;
} build_profile_set;

/* Human name of a flag ("--minShapes") and of a point ("min"). */
const char *build_shape_flag_name(build_shape_flag f);
const char *build_point_name(build_point p);

/* Parses one flag value into entries allocated in `a`. On error returns
 * KILN_ERR_INVALID_ARG with a message giving the column and a caret line. A name given
 * twice in one spec is an error. */
kiln_status build_shape_spec_parse(const char *spec, arena *a, build_shape_entry **out,
                                   int32_t *n_out, kiln_error *err);

void build_profiles_init(build_profile_set *s);
void build_profiles_free(build_profile_set *s);

/* Adds a flag's value to the current profile (--shapes goes to a separate list, see
 * build_profiles_finish). Errors (KILN_ERR_INVALID_ARG): malformed spec, or the same
 * input given twice by the same kind of flag in one profile. The message starts with the
 * flag's name. */
kiln_status build_profiles_add(build_profile_set *s, build_shape_flag flag, const char *spec,
                               kiln_error *err);

/* --profile=N: later min/opt/max flags go to profile N. N may be an existing profile or
 * the next new one (profiles are numbered in order from 0). */
kiln_status build_profiles_select(build_profile_set *s, int64_t index, kiln_error *err);

/* Completes the set after all flags: an input with only --optShapes gets min = max = opt
 * (as trtexec does); a --shapes entry for an input that profile 0 does not mention gives
 * it min = opt = max. Called by build_profiles_check if not called before. */
void build_profiles_finish(build_profile_set *s);

/* Checks the set against the model's graph inputs and adds diagnostics (codes
 * profile-*). Dynamic inputs that a profile does not cover are warnings with a ready to
 * paste flag line. Entries that cannot be used (unknown input, wrong rank) are marked
 * invalid. Returns the number of errors added. */
int32_t build_profiles_check(build_profile_set *s, ir_model *model, diag_list *diags);

/* True when any of the model's graph inputs has a dynamic (non-constant) dimension or an
 * unknown rank. */
bool build_model_has_dynamic_inputs(const ir_model *model);

/* The input shapes of profile `p` at `point`, for ir_infer_options.inputs: writes up to
 * `cap` entries (valid inputs with a shape at that point) and returns how many. The
 * pointers stay valid while the set lives. */
int32_t build_profile_point_shapes(const build_profile_set *s, int32_t p, build_point point,
                                   ir_input_shape *out, int32_t cap);

/* "x=[1, 3, 224, 224], mask=[1, 128]" for messages; uses the arena of `a`. */
const char *build_point_shapes_str(arena *a, const ir_input_shape *shapes, int32_t n);

/* The set as JSON: [{"index": 0, "inputs": [{"name": "x", "min": [..], "opt": [..],
 * "max": [..]}]}], a point that was not given is null. */
void build_profiles_json(const build_profile_set *s, strbuf *out);

#endif
