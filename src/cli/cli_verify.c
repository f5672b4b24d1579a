/* cli_verify.c - `kiln verify DIR...`: runs ONNX backend-test folders and checks outputs.
 *
 * A case is a folder with model.onnx and test_data_set_N/input_K.pb, output_K.pb (the
 * ONNX backend-test layout); a DIR without model.onnx is treated as a folder of cases.
 * Inputs bind by position to the model's graph inputs that have no initializer, outputs
 * by position to its graph outputs. Each case runs in a forked child process so a crash,
 * a hang (--timeout) or runaway memory in one case is reported as that case's FAIL and
 * the run goes on; -j N runs N cases at once. Output: one PASS/FAIL/SKIP line per case,
 * grouped skip reasons, then exactly "N passed, N failed, N skipped". Exit 1 if any case
 * failed, 2 on usage errors.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "api/model_internal.h"
#include "build/memplan.h"
#include "cli/cli.h"
#include "core/strbuf.h"
#include "onnx/onnx_value_file.h"
#include "runtime/backend.h"
#include "runtime/compare.h"
#include "runtime/session.h"
#include "runtime/value_io.h"

typedef struct verify_opts {
    double rtol, atol;
    bool rtol_set, atol_set;
    int threads;
    int jobs;
    const char *backend;
    const char *filter;
    bool quiet;
    const char *json_path;
    bool memory;
    bool no_fork;
    bool no_passes;
    bool no_tf32;  /* cuda: FP32 without TF32 tensor cores */
    bool fp16;     /* cuda: FP16 GEMMs/convolutions (float accumulation) */
    bool gpu_only; /* cuda: skip cases where some node would run on the CPU fallback */
    int timeout_s;
    uint64_t max_tensor_bytes;
} verify_opts;

typedef enum { R_PASS = 'P', R_FAIL = 'F', R_SKIP = 'S' } result_kind;

typedef struct case_result {
    char kind;
    char *reason; /* one line */
    char *detail; /* full message, may be multi-line */
    char *ops;    /* space-separated op types of the main graph */
    char *memory; /* memory plan line (--memory) */
    double seconds;
} case_result;

typedef struct case_entry {
    char *dir;
    const char *name; /* basename of dir */
    case_result res;
    bool done;
    pid_t pid;
    int fd;
} case_entry;

/* ---- helpers ------------------------------------------------------------------------- */

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
static bool dir_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *path_join(const char *a, const char *b) {
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s/%s", a, b);
    return sb_take(&sb);
}

static char *first_line(const char *s) {
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t)(nl - s) : strlen(s);
    char *r = malloc(n + 1);
    if (!r) return NULL;
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted subfolder names of dir that satisfy pred (NULL = any); returns count. */
static int list_dirs(const char *dir, const char *prefix, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (prefix && strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char *p = path_join(dir, e->d_name);
        if (!p || !dir_exists(p)) {
            free(p);
            continue;
        }
        free(p);
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void set_result(case_result *r, char kind, const char *reason, const char *detail) {
    r->kind = kind;
    free(r->reason);
    free(r->detail);
    r->reason = first_line(reason ? reason : "");
    r->detail = strdup(detail ? detail : (reason ? reason : ""));
}

/* ---- running one case (in the child) ------------------------------------------------- */

static void read_tolerances(const char *dir, const verify_opts *o, double *rtol, double *atol) {
    *rtol = 1e-3;
    *atol = 1e-7;
    if (!strcmp(o->backend, "cuda")) {
        /* GPU math differs from the reference in rounding: expf/erff ulps and reordered
         * sums everywhere, and TF32 (10-bit mantissa) inputs to GEMMs/convolutions unless
         * --noTF32 (docs/CUDA.md, "Accuracy") */
        *rtol = o->no_tf32 ? 1e-3 : 5e-3;
        *atol = o->no_tf32 ? 1e-5 : 5e-3;
        if (o->fp16) /* 11-bit mantissa operands, float accumulation (docs/CUDA.md, "FP16") */
            *rtol = 1e-2, *atol = 1e-2;
    }
    char *p = path_join(dir, "data.json");
    FILE *f = p ? fopen(p, "rb") : NULL;
    free(p);
    if (f) {
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        cJSON *j = cJSON_Parse(buf);
        if (j) {
            cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "rtol");
            cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "atol");
            if (cJSON_IsNumber(r)) *rtol = r->valuedouble;
            if (cJSON_IsNumber(a)) *atol = a->valuedouble;
            cJSON_Delete(j);
        }
    }
    if (o->rtol_set) *rtol = o->rtol;
    if (o->atol_set) *atol = o->atol;
}

static void collect_ops(const ir_graph *g, strbuf *sb) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const char *op = g->nodes[i].op_type;
        bool seen = false;
        for (int32_t j = 0; j < i && !seen; j++) seen = !strcmp(g->nodes[j].op_type, op);
        if (!seen) sb_printf(sb, "%s%s", sb->len ? " " : "", op);
    }
}

typedef struct data_set {
    arena a;
    rt_value *vals;
    int n;
} data_set;

static void data_set_free(data_set *d) {
    for (int i = 0; i < d->n; i++) rt_value_release(&d->vals[i]);
    free(d->vals);
    arena_free(&d->a);
}

/* Reads <set>/<prefix>_0.pb, _1.pb, ... as long as they exist; hints[i] gives the kind. */
static kiln_status read_values(const char *set_dir, const char *prefix, const ir_type *const *decls, int n_decl,
                               data_set *d, kiln_error *err) {
    arena_init(&d->a);
    d->vals = NULL;
    d->n = 0;
    for (int k = 0;; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%d.pb", prefix, k);
        char *p = path_join(set_dir, name);
        if (!p) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        if (!file_exists(p)) {
            free(p);
            break;
        }
        rt_value *nv = realloc(d->vals, (size_t)(k + 1) * sizeof *nv);
        if (!nv) {
            free(p);
            return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
        }
        d->vals = nv;
        rt_value_init(&d->vals[k]);
        d->n = k + 1;
        const ir_type *decl = k < n_decl ? decls[k] : NULL;
        ir_type_kind hint = decl ? decl->kind : IR_TYPE_UNKNOWN;
        if (hint != IR_TYPE_TENSOR && hint != IR_TYPE_SEQUENCE && hint != IR_TYPE_OPTIONAL && hint != IR_TYPE_MAP)
            hint = IR_TYPE_UNKNOWN;
        onnx_value ov;
        memset(&ov, 0, sizeof ov);
        kiln_status st = onnx_read_value_file(p, hint, &d->a, &ov, err);
        if (st == KILN_OK) st = rt_value_from_onnx(&ov, decl, &d->vals[k], err);
        if (st != KILN_OK) {
            kiln_err_prefix(err, "%s: ", name);
            free(p);
            return st;
        }
        free(p);
    }
    return KILN_OK;
}

static void memory_line(rt_session *s, strbuf *out) {
    const ir_model *m = rt_session_model(s);
    const uint64_t *sizes = rt_executor_value_sizes(rt_session_executor(s));
    if (!sizes) return;
    build_memplan plan;
    kiln_error e = {0};
    if (build_memplan_graph(m->graph, sizes, &plan, &e) != KILN_OK) {
        sb_printf(out, "memory plan failed: %s", kiln_err_msg(&e));
        kiln_err_clear(&e);
        return;
    }
    sb_printf(out, "memory: arena %" PRIu64 " bytes for %d tensors (lower bound %" PRIu64 ", no reuse %" PRIu64
                   ", peak while running %" PRIu64 ")",
              plan.arena_bytes, (int)plan.n_tensors, plan.lower_bound, plan.total_bytes,
              rt_executor_peak_bytes(rt_session_executor(s)));
    build_memplan_free(&plan);
}

static void run_case(const char *dir, const verify_opts *o, case_result *r) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *model_path = path_join(dir, "model.onnx");
    kiln_model *km = NULL;
    kiln_status st = kiln_model_load_file(model_path, NULL, &km);
    free(model_path);
    rt_session *s = NULL;
    strbuf ops;
    sb_init(&ops);
    char **sets = NULL;
    int n_sets = 0;
    kiln_error e = {0};
    if (st != KILN_OK) {
        strbuf sb;
        sb_init(&sb);
        sb_printf(&sb, "%s: %s", st == KILN_ERR_INVALID_MODEL ? "invalid model" : "model load",
                  kiln_model_errmsg(km));
        set_result(r, R_SKIP, sb_cstr(&sb), sb_cstr(&sb));
        sb_free(&sb);
        goto done;
    }
    ir_model *m = kiln_model_ir(km);
    collect_ops(m->graph, &ops);
    double rtol, atol;
    read_tolerances(dir, o, &rtol, &atol);
    rt_session_options so = rt_session_options_default();
    so.backend = o->backend;
    so.threads = o->threads;
    so.max_tensor_bytes = o->max_tensor_bytes;
    so.max_live_bytes = o->max_tensor_bytes * 2;
    so.record_sizes = o->memory;
    so.run_passes = !o->no_passes;
    so.no_tf32 = o->no_tf32;
    so.fp16 = o->fp16;
    so.quiet_fallback = true;
    st = rt_session_create(m, &so, &s, &e);
    if (st != KILN_OK) {
        set_result(r, st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL, kiln_err_msg(&e), kiln_err_msg(&e));
        goto done;
    }
    if (o->gpu_only && rt_executor_fallback_report(rt_session_executor(s))) {
        const char *rep = rt_executor_fallback_report(rt_session_executor(s));
        set_result(r, R_SKIP, rep, rep);
        goto done;
    }
    const ir_graph *g = m->graph;
    /* the inputs a caller must feed: graph inputs without an initializer */
    int n_feed = 0;
    const char **feed_names = calloc((size_t)g->n_inputs + 1, sizeof *feed_names);
    const ir_type **feed_types = calloc((size_t)g->n_inputs + 1, sizeof *feed_types);
    const ir_type **out_types = calloc((size_t)g->n_outputs + 1, sizeof *out_types);
    if (!feed_names || !feed_types || !out_types) {
        set_result(r, R_FAIL, "out of memory", NULL);
        free(feed_names), free(feed_types), free(out_types);
        goto done;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->init) continue;
        feed_names[n_feed] = v->name;
        feed_types[n_feed++] = &v->type;
    }
    for (int32_t i = 0; i < g->n_outputs; i++) out_types[i] = &g->values[g->outputs[i]].type;
    n_sets = list_dirs(dir, "test_data_set_", &sets);
    if (n_sets == 0) set_result(r, R_SKIP, "no test_data_set_* folder", NULL);
    else set_result(r, R_PASS, "", "");
    for (int si = 0; si < n_sets && r->kind == R_PASS; si++) {
        char *set_dir = path_join(dir, sets[si]);
        strbuf where, why;
        sb_init(&where);
        sb_init(&why);
        if (n_sets > 1) sb_printf(&where, "%s: ", sets[si]);
        data_set in, exp;
        memset(&in, 0, sizeof in);
        memset(&exp, 0, sizeof exp);
        arena_init(&in.a);
        arena_init(&exp.a);
        rt_value *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
        if (read_values(set_dir, "input", feed_types, n_feed, &in, &e) != KILN_OK ||
            read_values(set_dir, "output", out_types, g->n_outputs, &exp, &e) != KILN_OK) {
            sb_printf(&why, "%sbad test data: %s", sb_cstr(&where), kiln_err_msg(&e));
            set_result(r, e.code == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL, sb_cstr(&why), NULL);
        } else if (in.n > n_feed) {
            sb_printf(&why, "%s%d input files but the model takes %d inputs (without initializers)", sb_cstr(&where),
                      in.n, n_feed);
            set_result(r, R_FAIL, sb_cstr(&why), NULL);
        } else if (exp.n != g->n_outputs) {
            sb_printf(&why, "%s%d output files but the model has %d outputs", sb_cstr(&where), exp.n,
                      (int)g->n_outputs);
            set_result(r, R_FAIL, sb_cstr(&why), NULL);
        } else {
            const rt_value **ins = calloc((size_t)in.n + 1, sizeof *ins);
            for (int k = 0; ins && k < in.n; k++) ins[k] = &in.vals[k];
            st = ins ? rt_session_run(s, feed_names, ins, in.n, outs, &e) : KILN_ERR_NOMEM;
            free(ins);
            if (st != KILN_OK) {
                sb_printf(&why, "%s%s", sb_cstr(&where), kiln_err_msg(&e));
                set_result(r, st == KILN_ERR_UNSUPPORTED ? R_SKIP : R_FAIL, sb_cstr(&why), sb_cstr(&why));
            } else {
                for (int32_t k = 0; k < g->n_outputs; k++) {
                    strbuf diff;
                    sb_init(&diff);
                    if (!rt_compare_value(&outs[k], &exp.vals[k], rtol, atol, &diff, NULL)) {
                        sb_printf(&why, "%soutput %d '%s' %s", sb_cstr(&where), (int)k, rt_session_output_name(s, k),
                                  sb_cstr(&diff));
                        set_result(r, R_FAIL, sb_cstr(&why), NULL);
                        sb_free(&diff);
                        break;
                    }
                    sb_free(&diff);
                }
                for (int32_t k = 0; k < g->n_outputs; k++) rt_value_release(&outs[k]);
            }
        }
        kiln_err_clear(&e);
        free(outs);
        data_set_free(&in);
        data_set_free(&exp);
        sb_free(&where);
        sb_free(&why);
        free(set_dir);
    }
    if (o->memory && r->kind == R_PASS) {
        strbuf mem;
        sb_init(&mem);
        memory_line(s, &mem);
        r->memory = sb_take(&mem);
    }
    free(feed_names), free(feed_types), free(out_types);
done:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    r->ops = sb_take(&ops);
    if (!r->ops) r->ops = strdup("");
    free_list(sets, n_sets);
    kiln_err_clear(&e);
    rt_session_free(s);
    kiln_model_free(km);
}

/* ---- child process protocol: kind byte, then 4 length-prefixed strings, then seconds -- */

#define FIELD_MAX 8192

static void write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        c += w;
        n -= (size_t)w;
    }
}

static void put_field(int fd, const char *s) {
    uint32_t n = s ? (uint32_t)strlen(s) : 0;
    if (n > FIELD_MAX) n = FIELD_MAX;
    write_all(fd, &n, sizeof n);
    if (n) write_all(fd, s, n);
}

static size_t read_all(int fd, char *buf, size_t cap) {
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

static bool parse_record(const char *buf, size_t n, case_result *r) {
    if (n < 1) return false;
    size_t pos = 1;
    char *fields[4] = {0};
    for (int i = 0; i < 4; i++) {
        uint32_t len;
        if (pos + sizeof len > n) goto bad;
        memcpy(&len, buf + pos, sizeof len);
        pos += sizeof len;
        if (len > FIELD_MAX || pos + len > n) goto bad;
        fields[i] = malloc(len + 1);
        if (!fields[i]) goto bad;
        memcpy(fields[i], buf + pos, len);
        fields[i][len] = 0;
        pos += len;
    }
    if (pos + sizeof(double) > n) goto bad;
    memcpy(&r->seconds, buf + pos, sizeof(double));
    r->kind = buf[0];
    r->reason = fields[0];
    r->detail = fields[1];
    r->ops = fields[2];
    r->memory = fields[3][0] ? fields[3] : NULL;
    if (!r->memory) free(fields[3]);
    return true;
bad:
    for (int i = 0; i < 4; i++) free(fields[i]);
    return false;
}

static void free_result(case_result *r) {
    free(r->reason), free(r->detail), free(r->ops), free(r->memory);
    memset(r, 0, sizeof *r);
}

static int start_case(case_entry *c, const verify_opts *o) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]), close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        if (o->timeout_s > 0) alarm((unsigned)o->timeout_s);
        case_result r;
        memset(&r, 0, sizeof r);
        run_case(c->dir, o, &r);
        char k = r.kind ? r.kind : R_FAIL;
        write_all(p[1], &k, 1);
        put_field(p[1], r.reason);
        put_field(p[1], r.detail);
        put_field(p[1], r.ops);
        put_field(p[1], r.memory);
        write_all(p[1], &r.seconds, sizeof r.seconds);
        close(p[1]);
        _exit(0);
    }
    close(p[1]);
    c->pid = pid;
    c->fd = p[0];
    return 0;
}

static void finish_case(case_entry *c, int status, const verify_opts *o) {
    static char buf[4 * FIELD_MAX + 64];
    size_t n = read_all(c->fd, buf, sizeof buf);
    close(c->fd);
    c->fd = -1;
    memset(&c->res, 0, sizeof c->res);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        char msg[256];
        if (sig == SIGALRM) snprintf(msg, sizeof msg, "timed out after %d s (--timeout)", o->timeout_s);
        else snprintf(msg, sizeof msg, "crashed with signal %d (%s)", sig, strsignal(sig));
        set_result(&c->res, R_FAIL, msg, NULL);
        c->res.ops = strdup("");
    } else if (!parse_record(buf, n, &c->res)) {
        char msg[128];
        snprintf(msg, sizeof msg, "the case's process exited (status %d) without a result",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        set_result(&c->res, R_FAIL, msg, NULL);
        c->res.ops = strdup("");
    }
    c->done = true;
}

/* ---- output ---------------------------------------------------------------------------- */

static void print_case(const case_entry *c, const verify_opts *o) {
    const case_result *r = &c->res;
    if (r->kind == R_PASS) {
        if (!o->quiet) printf("PASS %s\n", c->name);
    } else if (r->kind == R_SKIP) {
        if (!o->quiet) printf("SKIP %s: %s\n", c->name, r->reason);
    } else {
        printf("FAIL %s: %s\n", c->name, r->reason);
    }
    if (!o->quiet && r->memory) printf("  %s\n", r->memory);
    fflush(stdout);
}

typedef struct reason_count {
    char *reason;
    int count;
} reason_count;

static int cmp_reason(const void *a, const void *b) {
    const reason_count *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->reason, y->reason);
}

static void count_reason(reason_count *rc, int *nr, const char *key, size_t len) {
    for (int j = 0; j < *nr; j++)
        if (strlen(rc[j].reason) == len && !strncmp(rc[j].reason, key, len)) {
            rc[j].count++;
            return;
        }
    char *k = malloc(len + 1);
    if (!k) return;
    memcpy(k, key, len);
    k[len] = 0;
    rc[*nr].reason = k;
    rc[(*nr)++].count = 1;
}

/* Groups skip reasons: a case with "unsupported ops: A, B" counts once for each op (as
 * "unsupported op A"), so the summary says which kernels would unlock most cases;
 * other reasons are grouped by their text. */
static void print_skip_summary(case_entry *cases, int n) {
    int cap = 16;
    for (int i = 0; i < n; i++)
        if (cases[i].res.kind == R_SKIP && cases[i].res.reason) cap += 1 + (int)strlen(cases[i].res.reason) / 2;
    reason_count *rc = calloc((size_t)cap, sizeof *rc);
    int nr = 0;
    if (!rc) return;
    strbuf key;
    sb_init(&key);
    for (int i = 0; i < n; i++) {
        if (cases[i].res.kind != R_SKIP) continue;
        const char *r = cases[i].res.reason ? cases[i].res.reason : "";
        const char *list = !strncmp(r, "unsupported op: ", 16)    ? r + 16
                           : !strncmp(r, "unsupported ops: ", 17) ? r + 17
                                                                  : NULL;
        if (!list) {
            /* "node 'Conv_9' (Conv): msg" -> "Conv: msg", so the same reason on differently
             * named nodes groups together */
            if (!strncmp(r, "node '", 6)) {
                const char *q = strstr(r + 6, "' (");
                const char *e = q ? strstr(q + 3, "): ") : NULL;
                if (e) {
                    sb_reset(&key);
                    sb_append_n(&key, q + 3, (size_t)(e - (q + 3)));
                    sb_append(&key, ": ");
                    sb_append(&key, e + 3);
                    count_reason(rc, &nr, sb_cstr(&key), key.len);
                    continue;
                }
            }
            count_reason(rc, &nr, r, strlen(r));
            continue;
        }
        while (*list && nr < cap) {
            size_t len = strcspn(list, ",");
            sb_reset(&key);
            sb_append(&key, "unsupported op ");
            sb_append_n(&key, list, len);
            count_reason(rc, &nr, sb_cstr(&key), key.len);
            list += len;
            while (*list == ',' || *list == ' ') list++;
        }
    }
    sb_free(&key);
    if (nr) {
        qsort(rc, (size_t)nr, sizeof *rc, cmp_reason);
        printf("skip reasons: ");
        for (int j = 0; j < nr; j++) printf("%s%s (%d)", j ? ", " : "", rc[j].reason, rc[j].count);
        printf("\n");
    }
    for (int j = 0; j < nr; j++) free(rc[j].reason);
    free(rc);
}

static bool write_json(const char *path, case_entry *cases, int n, const verify_opts *o, int np, int nf, int ns) {
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"passed\": %d, \"failed\": %d, \"skipped\": %d, \"backend\": ", np, nf, ns);
    sb_json_string(&sb, o->backend, strlen(o->backend));
    sb_append(&sb, ", \"cases\": [\n");
    for (int i = 0; i < n; i++) {
        const case_result *r = &cases[i].res;
        const char *status = r->kind == R_PASS ? "pass" : r->kind == R_SKIP ? "skip" : "fail";
        sb_append(&sb, "  {\"name\": ");
        sb_json_string(&sb, cases[i].name, strlen(cases[i].name));
        sb_append(&sb, ", \"dir\": ");
        sb_json_string(&sb, cases[i].dir, strlen(cases[i].dir));
        sb_printf(&sb, ", \"status\": \"%s\", \"reason\": ", status);
        sb_json_string(&sb, r->reason ? r->reason : "", r->reason ? strlen(r->reason) : 0);
        sb_append(&sb, ", \"detail\": ");
        sb_json_string(&sb, r->detail ? r->detail : "", r->detail ? strlen(r->detail) : 0);
        sb_append(&sb, ", \"ops\": [");
        const char *p = r->ops ? r->ops : "";
        int k = 0;
        while (*p) {
            const char *sp = strchr(p, ' ');
            size_t len = sp ? (size_t)(sp - p) : strlen(p);
            if (k++) sb_append(&sb, ", ");
            sb_json_string(&sb, p, len);
            p += len;
            while (*p == ' ') p++;
        }
        sb_printf(&sb, "], \"seconds\": %.6f", r->seconds);
        if (r->memory) {
            sb_append(&sb, ", \"memory\": ");
            sb_json_string(&sb, r->memory, strlen(r->memory));
        }
        sb_printf(&sb, "}%s\n", i + 1 < n ? "," : "");
    }
    sb_append(&sb, "]}\n");
    FILE *f = fopen(path, "wb");
    bool ok = f && !sb.failed && fwrite(sb.data, 1, sb.len, f) == sb.len;
    if (f && fclose(f) != 0) ok = false;
    sb_free(&sb);
    return ok;
}

/* ---- arguments and main loop ------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln verify [options] DIR...\n\n"
            "Runs ONNX backend-test cases (DIR/model.onnx + DIR/test_data_set_*/input_K.pb, output_K.pb)\n"
            "and compares outputs: |got - expected| <= atol + rtol * |expected| for floats, exact otherwise.\n"
            "A DIR without model.onnx is a folder of cases.\n\n"
            "options:\n"
            "  --rtol X              relative tolerance (default 1e-3, or data.json's \"rtol\")\n"
            "  --atol X              absolute tolerance (default 1e-7, or data.json's \"atol\")\n"
            "  --threads N           threads per case (default 1)\n"
            "  -j, --jobs N          cases run at once, each in its own process (default 1)\n"
            "  --backend NAME        the backend to run on: cpu (default) or cuda (nodes the GPU does not run\n"
            "                        fall back to the CPU; default tolerances rtol 5e-3, atol 5e-3 with TF32)\n"
            "  --noTF32              cuda: FP32 GEMMs/convolutions without TF32 (rtol 1e-3, atol 1e-5)\n"
            "  --fp16                cuda: FP16 GEMMs/convolutions, float accumulation (rtol 1e-2, atol 1e-2)\n"
            "  --gpu-only            cuda: skip cases where any node would run on the CPU fallback\n"
            "  --filter SUBSTR       only cases whose name contains SUBSTR\n"
            "  --quiet               print only FAIL lines and the summary\n"
            "  --json FILE           write every case's result to FILE\n"
            "  --memory              print each passing case's memory plan (arena vs lower bound)\n"
            "  --timeout S           fail a case that runs longer than S seconds (default 120, 0 = none)\n"
            "  --max-tensor-mb N     fail a case that allocates a tensor over N MiB (default 4096)\n"
            "  --no-passes           run the model as written (no constant folding, Identity removal,\n"
            "                        Conv+BatchNormalization folding or activation fusion)\n"
            "  --no-fork             run cases in this process (for debuggers; a crash ends the run)\n\n"
            "Values may also be given as --name=value (--threads=2).\n");
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0)) return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static int add_cases(const char *dir, const verify_opts *o, case_entry **cases, int *n, int *cap) {
    char *model = path_join(dir, "model.onnx");
    bool single = model && file_exists(model);
    free(model);
    char **subs = NULL;
    int n_subs = 0;
    if (!single) {
        if (!dir_exists(dir)) return cli_usage_error("verify", "'%s' is not a folder", dir);
        n_subs = list_dirs(dir, NULL, &subs);
    }
    int added = 0;
    for (int i = single ? -1 : 0; i < n_subs; i++) {
        char *cdir = i < 0 ? strdup(dir) : path_join(dir, subs[i]);
        if (!cdir) continue;
        if (i >= 0) {
            char *mp = path_join(cdir, "model.onnx");
            bool ok = mp && file_exists(mp);
            free(mp);
            if (!ok) {
                free(cdir);
                continue;
            }
        }
        size_t L = strlen(cdir);
        while (L > 1 && cdir[L - 1] == '/') cdir[--L] = 0;
        const char *base = strrchr(cdir, '/');
        base = base ? base + 1 : cdir;
        added++;
        if (o->filter && !strstr(base, o->filter)) {
            free(cdir);
            continue;
        }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 256;
            case_entry *nc = realloc(*cases, (size_t)*cap * sizeof *nc);
            if (!nc) {
                free(cdir);
                break;
            }
            *cases = nc;
        }
        case_entry *c = &(*cases)[(*n)++];
        memset(c, 0, sizeof *c);
        c->dir = cdir;
        c->name = base;
        c->fd = -1;
    }
    free_list(subs, n_subs);
    if (!added)
        return cli_usage_error("verify", "no model.onnx in '%s' or in its subfolders; expected the ONNX backend-test "
                                         "layout (model.onnx + test_data_set_0/input_0.pb ...)",
                               dir);
    return 0;
}

int cli_verify(int argc, char **argv) {
    verify_opts o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    o.jobs = 1;
    o.backend = "cpu";
    o.timeout_s = 120;
    int max_mb = 4096;
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    int n_dirs = 0;
    if (!dirs) return CLI_EXIT_FAILED;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        /* --name=value as well as --name value (exec's trtexec flags take the first form) */
        char name[40];
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
        bool inline_val = eq && (size_t)(eq - a) < sizeof name;
        if (inline_val) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            a = name;
            val = eq + 1;
        }
#define NEED_VAL                                                                  \
    do {                                                                          \
        if (!val) {                                                               \
            free(dirs);                                                           \
            return cli_usage_error("verify", "option %s needs a value", a);     \
        }                                                                         \
        if (!inline_val) i++;                                                     \
    } while (0)
#define NO_VAL                                                                    \
    do {                                                                          \
        if (inline_val) {                                                         \
            free(dirs);                                                           \
            return cli_usage_error("verify", "option %s takes no value", a);    \
        }                                                                         \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(dirs);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--rtol") || !strcmp(a, "--atol")) {
            NEED_VAL;
            double v;
            if (!parse_double(val, &v)) {
                free(dirs);
                return cli_usage_error("verify", "%s expects a non-negative number, got '%s'", a, val);
            }
            if (a[2] == 'r') o.rtol = v, o.rtol_set = true;
            else o.atol = v, o.atol_set = true;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-j") || !strcmp(a, "--jobs") || !strcmp(a, "--timeout") ||
                   !strcmp(a, "--max-tensor-mb")) {
            NEED_VAL;
            int v;
            bool is_timeout = !strcmp(a, "--timeout");
            if (!parse_int(val, is_timeout ? 0 : 1, is_timeout ? 86400 : 1 << 20, &v)) {
                free(dirs);
                return cli_usage_error("verify", "%s expects a %s integer, got '%s'", a,
                                       is_timeout ? "non-negative" : "positive", val);
            }
            if (!strcmp(a, "--threads")) o.threads = v;
            else if (is_timeout) o.timeout_s = v;
            else if (!strcmp(a, "--max-tensor-mb")) max_mb = v;
            else o.jobs = v;
        } else if (!strcmp(a, "--backend")) {
            NEED_VAL;
            o.backend = val;
        } else if (!strcmp(a, "--filter")) {
            NEED_VAL;
            o.filter = val;
        } else if (!strcmp(a, "--json")) {
            NEED_VAL;
            o.json_path = val;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            NO_VAL;
            o.quiet = true;
        } else if (!strcmp(a, "--memory")) {
            NO_VAL;
            o.memory = true;
        } else if (!strcmp(a, "--no-fork")) {
            NO_VAL;
            o.no_fork = true;
        } else if (!strcmp(a, "--no-passes")) {
            NO_VAL;
            o.no_passes = true;
        } else if (!strcmp(a, "--noTF32")) {
            NO_VAL;
            o.no_tf32 = true;
        } else if (!strcmp(a, "--gpu-only")) {
            NO_VAL;
            o.gpu_only = true;
        } else if (!strcmp(a, "--fp16")) {
            NO_VAL;
            o.fp16 = true;
        } else if (a[0] == '-' && a[1]) {
            static const char *const flags[] = {"--rtol",   "--atol",  "--threads", "--jobs",   "--backend",
                                                "--filter", "--quiet", "--json",    "--memory", "--timeout",
                                                "--max-tensor-mb", "--no-fork", "--no-passes", "--help",
                                                "--noTF32", "--gpu-only", "--fp16"};
            const char *guess = cli_closest(a, flags, (int)(sizeof flags / sizeof flags[0]));
            free(dirs);
            if (guess) return cli_usage_error("verify", "unknown option '%s'; did you mean '%s'?", a, guess);
            return cli_usage_error("verify", "unknown option '%s' (see kiln verify --help)", a);
        } else {
            dirs[n_dirs++] = a;
        }
#undef NEED_VAL
#undef NO_VAL
    }
    if (!n_dirs) {
        free(dirs);
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(o.backend, "cpu") != 0) {
        int rc = 0;
        if (strcmp(o.backend, "cuda") != 0)
            rc = cli_usage_error("verify", "unknown backend '%s'; available: cpu%s", o.backend,
                                 rt_backend_cuda() ? ", cuda" : "");
        else if (!rt_backend_cuda())
            rc = cli_usage_error("verify", "backend 'cuda' is not in this build of kiln (CMake found no CUDA "
                                 "compiler); rebuild on a machine with nvcc, or use --backend cpu");
        else {
            /* no GPU is a usage problem for the whole run, not a skip per case */
            const rt_backend *be = rt_backend_cuda();
            rt_backend_options bo = {1, 0, o.fp16, o.no_tf32, 0};
            void *ctx = NULL;
            kiln_error e = {0};
            if (be->create(&bo, &ctx, &e) != KILN_OK) rc = cli_usage_error("verify", "%s", kiln_err_msg(&e));
            else be->destroy(ctx);
            kiln_err_clear(&e);
        }
        if (rc) {
            free(dirs);
            return rc;
        }
    }
    o.max_tensor_bytes = (uint64_t)max_mb << 20;

    case_entry *cases = NULL;
    int n = 0, cap = 0;
    for (int d = 0; d < n_dirs; d++) {
        int rc = add_cases(dirs[d], &o, &cases, &n, &cap);
        if (rc) {
            for (int i = 0; i < n; i++) free(cases[i].dir);
            free(cases);
            free(dirs);
            return rc;
        }
    }
    free(dirs);

    int next_print = 0, next_start = 0, running = 0;
    while (next_print < n) {
        if (o.no_fork) {
            case_entry *c = &cases[next_start++];
            run_case(c->dir, &o, &c->res);
            c->done = true;
        } else {
            while (running < o.jobs && next_start < n) {
                case_entry *c = &cases[next_start];
                if (start_case(c, &o) != 0) {
                    set_result(&c->res, R_FAIL, "could not start a process for the case", NULL);
                    c->res.ops = strdup("");
                    c->done = true;
                } else {
                    running++;
                }
                next_start++;
            }
            if (running > 0) {
                int status;
                pid_t pid = waitpid(-1, &status, 0);
                if (pid < 0) {
                    if (errno == EINTR) continue;
                    break;
                }
                for (int i = 0; i < n; i++)
                    if (cases[i].pid == pid && !cases[i].done) {
                        finish_case(&cases[i], status, &o);
                        running--;
                        break;
                    }
            }
        }
        while (next_print < n && cases[next_print].done) print_case(&cases[next_print++], &o);
    }

    int np = 0, nf = 0, ns = 0;
    for (int i = 0; i < n; i++) {
        if (cases[i].res.kind == R_PASS) np++;
        else if (cases[i].res.kind == R_SKIP) ns++;
        else nf++;
    }
    print_skip_summary(cases, n);
    printf("%d passed, %d failed, %d skipped\n", np, nf, ns);
    int rc = nf ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    if (o.json_path && !write_json(o.json_path, cases, n, &o, np, nf, ns)) {
        fprintf(stderr, "kiln verify: error: could not write '%s': %s\n", o.json_path, strerror(errno));
        rc = CLI_EXIT_FAILED;
    }
    for (int i = 0; i < n; i++) {
        free_result(&cases[i].res);
        free(cases[i].dir);
    }
    free(cases);
    return rc;
}
