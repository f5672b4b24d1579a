/* kiln_step.c - runs a kiln engine on request, so a benchmark can interleave kiln and a
 * peer inference by inference.
 *
 * Why: on a shared VM the CPU's speed drifts by 10-50% within seconds (another tenant's
 * load moves the clock), and alternating whole `kiln exec` processes with ORT rounds still
 * leaves each round's ratio spread over 0.7-1.3. With kiln kept loaded in this process and
 * ORT in the Python driver (bench/bench_cpu.py), the two alternate every few inferences
 * and see the same machine.
 *
 * Usage: kiln_step ENGINE THREADS INPUT...
 *   INPUT is NAME:DTYPE:DIMS:FILE, DTYPE an ONNX TensorProto number (1 float, 7 int64),
 *   DIMS like 1x3x224x224, FILE the raw little-endian elements (numpy's tofile).
 * Then, on standard input, one command per line:
 *   run N   run N inferences; prints "ok T1 T2 ... TN" (milliseconds each, run only: the
 *           inputs are set once at start, as ORT's run reads them where they are)
 *   quit    exit
 * Errors print "error MESSAGE" and exit 1 (2 for bad arguments).
 *
 * Built by CMake with the rest (scripts/build.sh build -> build/kiln_step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

#define MAX_INPUTS 16
#define MAX_RANK 8

typedef struct step_input {
    char name[256];
    int dtype, rank;
    int64_t dims[MAX_RANK];
    void *data;
    size_t nbytes;
} step_input;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static size_t dtype_size(int dtype) {
    switch (dtype) {
    case 1: case 6: return 4;  /* float, int32 */
    case 7: case 11: return 8; /* int64, double */
    case 9: case 2: case 3: return 1; /* bool, uint8, int8 */
    case 10: case 16: return 2; /* float16, bfloat16 */
    default: return 0;
    }
}

/* NAME:DTYPE:DIMS:FILE -> *in, reading FILE; returns a message on error, NULL when fine. */
static const char *parse_input(char *spec, step_input *in) {
    char *name = spec, *dt = strchr(name, ':');
    if (!dt) return "an input is NAME:DTYPE:DIMS:FILE";
    *dt++ = 0;
    char *dims = strchr(dt, ':');
    if (!dims) return "an input is NAME:DTYPE:DIMS:FILE";
    *dims++ = 0;
    char *file = strchr(dims, ':');
    if (!file) return "an input is NAME:DTYPE:DIMS:FILE";
    *file++ = 0;
    if (strlen(name) >= sizeof in->name) return "input name too long";
    strcpy(in->name, name);
    in->dtype = atoi(dt);
    size_t es = dtype_size(in->dtype), count = 1;
    if (!es) return "unsupported DTYPE (use the ONNX TensorProto number: 1 float, 7 int64)";
    in->rank = 0;
    for (char *p = dims; *p;) {
        if (in->rank == MAX_RANK) return "too many dimensions";
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0) return "DIMS must be like 1x3x224x224";
        in->dims[in->rank++] = d;
        count *= (size_t)d;
        p = *end == 'x' ? end + 1 : end;
        if (*end && *end != 'x') return "DIMS must be like 1x3x224x224";
    }
    in->nbytes = count * es;
    in->data = malloc(in->nbytes ? in->nbytes : 1);
    FILE *f = fopen(file, "rb");
    if (!in->data || !f) {
        if (f) fclose(f);
        return "cannot read an input file";
    }
    size_t got = fread(in->data, 1, in->nbytes, f);
    fclose(f);
    return got == in->nbytes ? NULL : "an input file is shorter than its DIMS say";
}

int main(int argc, char **argv) {
    if (argc < 3 || argc - 3 > MAX_INPUTS) {
        fprintf(stderr, "usage: %s ENGINE THREADS NAME:DTYPE:DIMS:FILE...\n", argv[0]);
        return 2;
    }
    static step_input inputs[MAX_INPUTS];
    int n_inputs = argc - 3;
    for (int i = 0; i < n_inputs; i++) {
        const char *msg = parse_input(argv[3 + i], &inputs[i]);
        if (msg) {
            printf("error %s\n", msg);
            return 2;
        }
    }
    kiln_engine *e = NULL;
    if (kiln_engine_load_file(argv[1], &e) != KILN_OK) {
        printf("error loading %s: %s\n", argv[1], kiln_engine_errmsg(e));
        kiln_engine_free(e);
        return 1;
    }
    kiln_context *c = NULL;
    if (kiln_context_create(e, atoi(argv[2]), &c) != KILN_OK) {
        printf("error creating a context: %s\n", c ? kiln_context_errmsg(c) : kiln_engine_errmsg(e));
        return 1;
    }
    for (int i = 0; i < n_inputs; i++) {
        const step_input *in = &inputs[i];
        if (kiln_context_set_input(c, in->name, in->dtype, in->rank, in->dims, in->data, in->nbytes) != KILN_OK) {
            printf("error setting input '%s': %s\n", in->name, kiln_context_errmsg(c));
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "quit", 4) == 0) break;
        int n = 0;
        if (sscanf(line, "run %d", &n) != 1 || n < 1 || n > 100000) {
            printf("error unknown command (use 'run N' or 'quit')\n");
            return 1;
        }
        printf("ok");
        for (int r = 0; r < n; r++) {
            double t0 = now_ms();
            if (kiln_context_run(c) != KILN_OK) {
                printf("\nerror run failed: %s\n", kiln_context_errmsg(c));
                return 1;
            }
            printf(" %.4f", now_ms() - t0);
        }
        printf("\n");
        fflush(stdout);
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    for (int i = 0; i < n_inputs; i++) free(inputs[i].data);
    return 0;
}
