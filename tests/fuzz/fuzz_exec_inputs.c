/* fuzz_exec_inputs.c - libFuzzer target for every parser behind `kiln exec --loadInputs`:
 * the name:file flag value (exec_flags_parse), .npy headers (exec_parse_npy), raw files'
 * size check (exec_check_raw), the whole loader (exec_load_input) on a real file
 * with a .npy, .pb (ONNX TensorProto, onnx_read_value_file) or raw name, and sequence /
 * optional inputs from .pb files (exec_load_value).
 *
 * Input layout: byte 0 picks the mode, byte 1 the expected dtype, byte 2 the expected
 * rank (mod 9), then rank little-endian int16 dims (negative and zero allowed: the
 * loader must refuse them cleanly), then the payload. A crash, leak, sanitizer report, or
 * a failure without a message is a bug; a clean error is the expected outcome for junk.
 *
 * The exec sources live in the `kiln` binary, not in libkiln, so they are compiled into
 * this target directly; cli_closest (main.c, the did-you-mean helper) is replaced by a
 * version that never suggests, which only changes message text. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/cli/cli_exec_inputs.c"
#include "../../src/cli/trtexec_flags.c"

const char *cli_closest(const char *word, const char *const *candidates, int n) {
    (void)word;
    (void)candidates;
    (void)n;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void need_message(kiln_status st, const kiln_error *err) {
    if (st != KILN_OK && (!err->msg || !*err->msg)) abort(); /* every failure explains itself */
}

static void fuzz_flags(const uint8_t *p, size_t n) {
    char *v = malloc(n + 16);
    if (!v) return;
    memcpy(v, "--loadInputs=", 13);
    memcpy(v + 13, p, n);
    v[13 + n] = 0;
    char prog[] = "exec", eng[] = "--loadEngine=x.engine";
    char *argv[] = {prog, v, eng, NULL};
    exec_flags f;
    exec_flags_init(&f);
    bool help = false;
    strbuf err;
    sb_init(&err);
    int rc = exec_flags_parse(3, argv, &f, &help, &err);
    if (rc && !help && !err.len) abort();
    for (int i = 0; !rc && i < f.n_inputs; i++) /* every entry has a name and a file */
        if (!f.inputs[i].name || !f.inputs[i].path || !*f.inputs[i].path) abort();
    sb_free(&err);
    exec_flags_free(&f);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int mode = data[0] % 6;
    kiln_dtype want_dt = (kiln_dtype)(data[1] % 24);
    int32_t want_rank = data[2] % 9;
    size_t off = 3;
    int64_t dims[RT_MAX_RANK + 1] = {0};
    for (int32_t i = 0; i < want_rank; i++) {
        if (off + 2 <= size) {
            dims[i] = (int16_t)(data[off] | (data[off + 1] << 8));
            off += 2;
        }
    }
    const uint8_t *payload = data + off;
    size_t plen = size - off;
    kiln_error err = {0};
    kiln_status st = KILN_OK;
    if (mode == 0) {
        fuzz_flags(payload, plen);
    } else if (mode == 1) {
        /* an exact-size heap copy so any over-read is caught */
        uint8_t *copy = malloc(plen ? plen : 1);
        if (!copy) return 0;
        memcpy(copy, payload, plen);
        kiln_dtype dt;
        int32_t rank = 0;
        int64_t got[RT_MAX_RANK];
        const uint8_t *d = NULL;
        uint64_t nb = 0;
        st = exec_parse_npy(copy, plen, "f.npy", &dt, &rank, got, &d, &nb, &err);
        need_message(st, &err);
        if (st == KILN_OK && (rank < 0 || rank > RT_MAX_RANK || d < copy || nb > plen || (size_t)(d - copy) > plen - nb))
            abort(); /* the payload must lie inside the file */
        free(copy);
    } else if (mode == 2) {
        st = exec_check_raw(plen, "f.bin", "x", want_dt, want_rank, dims, &err);
        need_message(st, &err);
    } else if (mode == 5) {
        /* a sequence or optional input from a .pb file (exec_load_value) */
        char path[64];
        snprintf(path, sizeof path, "/tmp/kiln_fuzz_exec_inputs_%d.pb", (int)getpid());
        FILE *f = fopen(path, "wb");
        if (!f) return 0;
        size_t w = fwrite(payload, 1, plen, f);
        fclose(f);
        if (w == plen) {
            ir_dim edims[RT_MAX_RANK];
            for (int32_t i = 0; i < want_rank; i++)
                edims[i] = dims[i] >= 0 ? (ir_dim){.kind = IR_DIM_CONST, .value = dims[i]} : (ir_dim){.kind = IR_DIM_UNKNOWN};
            ir_type elem = {.kind = IR_TYPE_TENSOR, .dtype = kiln_dtype_valid(want_dt) ? want_dt : KILN_DTYPE_FLOAT,
                            .rank = want_rank, .dims = edims};
            ir_type decl = {.kind = data[1] & 1 ? IR_TYPE_OPTIONAL : IR_TYPE_SEQUENCE, .elem = &elem};
            rt_value v;
            rt_value_init(&v);
            st = exec_load_value(path, "s", &decl, &v, &err);
            need_message(st, &err);
            rt_value_release(&v);
        }
        remove(path);
    } else {
        /* the whole loader on a file: .npy, .pb or raw by extension */
        static const char *const ext[] = {".npy", ".pb", ".bin"};
        char path[64];
        snprintf(path, sizeof path, "/tmp/kiln_fuzz_exec_inputs_%d%s", (int)getpid(), ext[(mode - 3 + data[1] / 24) % 3]);
        FILE *f = fopen(path, "wb");
        if (!f) return 0;
        size_t w = fwrite(payload, 1, plen, f);
        fclose(f);
        if (w == plen) {
            rt_tensor t;
            memset(&t, 0, sizeof t);
            if (!kiln_dtype_valid(want_dt)) want_dt = KILN_DTYPE_FLOAT;
            for (int32_t i = 0; i < want_rank; i++) /* exec passes shapes checked by the profile */
                if (dims[i] < 0) dims[i] = -dims[i] % 64;
            st = exec_load_input(path, "x", want_dt, want_rank, dims, data[1] & 1, &t, &err);
            need_message(st, &err);
            if (st == KILN_OK && (t.dtype != want_dt || t.rank != want_rank)) abort();
            rt_tensor_release(&t);
        }
        remove(path);
    }
    kiln_err_clear(&err);
    return 0;
}
