/* cli_exec_inputs.c - input tensors for `kiln exec`: generated (as trtexec: pseudo-random
 * floats, zero integers so index inputs stay in range) or loaded with --loadInputs from
 * raw binary (trtexec's format: the bytes of the tensor, nothing else), NumPy .npy, or an
 * ONNX TensorProto .pb (the ONNX reader's onnx_read_value_file). Every file is checked
 * against the input's dtype and shape, and a mismatch says what the file holds and what
 * the input needs. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_exec.h"
#include "core/alloc.h"
#include "onnx/onnx_value_file.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static kiln_status read_file(const char *path, uint8_t **out, size_t *size, kiln_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_err_set(err, KILN_ERR_IO, "--loadInputs: cannot open '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return kiln_err_set(err, KILN_ERR_IO, "--loadInputs: cannot read '%s'", path);
    }
    long n = ftell(f);
    rewind(f);
    if (n < 0) {
        fclose(f);
        return kiln_err_set(err, KILN_ERR_IO, "--loadInputs: cannot read '%s'", path);
    }
    uint8_t *buf = malloc((size_t)n ? (size_t)n : 1);
    if (!buf) {
        fclose(f);
        return kiln_err_set(err, KILN_ERR_NOMEM, "--loadInputs: '%s' (%ld bytes) does not fit in memory", path, n);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return kiln_err_set(err, KILN_ERR_IO, "--loadInputs: short read on '%s'", path);
    }
    *out = buf;
    *size = (size_t)n;
    return KILN_OK;
}

static void shape_str(char *buf, size_t n, kiln_dtype dt, int32_t rank, const int64_t *dims) {
    size_t len = (size_t)snprintf(buf, n, "%s[", kiln_dtype_name(dt));
    for (int32_t i = 0; i < rank && len < n; i++) len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", dims[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* .npy: magic, version, header dict {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), } */
static kiln_status parse_npy(const uint8_t *d, size_t n, const char *path, kiln_dtype *dt, int32_t *rank,
                             int64_t *dims, const uint8_t **data, uint64_t *nbytes, kiln_error *err) {
    if (n < 10 || memcmp(d, "\x93NUMPY", 6) != 0)
        return kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s' is not a NumPy .npy file (bad magic)", path);
    size_t hlen, hoff;
    if (d[6] == 1) {
        hlen = (size_t)d[8] | ((size_t)d[9] << 8);
        hoff = 10;
    } else if (d[6] == 2 || d[6] == 3) {
        if (n < 12) return kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s' is truncated", path);
        hlen = (size_t)d[8] | ((size_t)d[9] << 8) | ((size_t)d[10] << 16) | ((size_t)d[11] << 24);
        hoff = 12;
    } else {
        return kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s' has .npy version %u, not 1..3", path, d[6]);
    }
    if (hlen > n - hoff) return kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s' is truncated (header)", path);
    char *h = malloc(hlen + 1);
    if (!h) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    memcpy(h, d + hoff, hlen);
    h[hlen] = 0;
    kiln_status st = KILN_OK;
    const char *descr = strstr(h, "'descr'");
    const char *fo = strstr(h, "'fortran_order'");
    const char *shape = strstr(h, "'shape'");
    if (!descr || !fo || !shape) {
        st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s': .npy header lacks descr/fortran_order/shape", path);
        goto out;
    }
    const char *q = strchr(descr + 7, '\'');
    static const struct {
        const char *descr;
        kiln_dtype dt;
    } types[] = {{"<f4", KILN_DTYPE_FLOAT}, {"<f8", KILN_DTYPE_DOUBLE}, {"<f2", KILN_DTYPE_FLOAT16},
                 {"<i8", KILN_DTYPE_INT64}, {"<i4", KILN_DTYPE_INT32}, {"<i2", KILN_DTYPE_INT16},
                 {"|i1", KILN_DTYPE_INT8},  {"|u1", KILN_DTYPE_UINT8}, {"|b1", KILN_DTYPE_BOOL},
                 {"<u2", KILN_DTYPE_UINT16}, {"<u4", KILN_DTYPE_UINT32}, {"<u8", KILN_DTYPE_UINT64}};
    *dt = KILN_DTYPE_UNDEFINED;
    for (size_t i = 0; q && i < sizeof types / sizeof types[0]; i++)
        if (!strncmp(q + 1, types[i].descr, 3) && q[4] == '\'') *dt = types[i].dt;
    if (*dt == KILN_DTYPE_UNDEFINED) {
        st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "--loadInputs: '%s': unsupported .npy dtype (little-endian numbers and bool only)", path);
        goto out;
    }
    if (strstr(fo, "True") && strstr(fo, "True") < shape) {
        st = kiln_err_set(err, KILN_ERR_UNSUPPORTED, "--loadInputs: '%s' is Fortran-ordered: save it with np.ascontiguousarray", path);
        goto out;
    }
    const char *p = strchr(shape, '(');
    *rank = 0;
    if (!p) {
        st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s': bad .npy shape", path);
        goto out;
    }
    p++;
    uint64_t count = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || *rank >= RT_MAX_RANK) {
            st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s': bad .npy shape", path);
            goto out;
        }
        dims[(*rank)++] = v;
        if (kiln_mul_overflow_u64(count, (uint64_t)v, &count)) {
            st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s': shape too large", path);
            goto out;
        }
        p = end;
    }
    if (!kiln_dtype_nbytes(*dt, count, nbytes) || *nbytes != n - hoff - hlen) {
        st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s': the header's shape needs %" PRIu64 " bytes of data, the file has %zu",
                          path, *nbytes, n - hoff - hlen);
        goto out;
    }
    *data = d + hoff + hlen;
out:
    free(h);
    return st;
}

kiln_status exec_load_input(const char *path, const char *name, kiln_dtype want_dt, int32_t want_rank,
                            const int64_t *want_dims, bool dims_fixed, rt_tensor *out, kiln_error *err) {
    char want[256];
    shape_str(want, sizeof want, want_dt, want_rank, want_dims);
    kiln_dtype dt = want_dt;
    int32_t rank = want_rank;
    int64_t dims[RT_MAX_RANK];
    memcpy(dims, want_dims, sizeof(int64_t) * (size_t)want_rank);
    const uint8_t *data = NULL;
    uint64_t nbytes = 0;
    uint8_t *buf = NULL;
    size_t size = 0;
    kiln_status st = KILN_OK;
    arena a;
    arena_init(&a);
    if (ends_with(path, ".pb")) {
        onnx_value v;
        st = onnx_read_value_file(path, IR_TYPE_TENSOR, &a, &v, err);
        if (st == KILN_OK && (v.kind != IR_TYPE_TENSOR || !v.tensor))
            st = kiln_err_set(err, KILN_ERR_FORMAT, "--loadInputs: '%s' holds a %s, input '%s' needs a tensor", path,
                              v.kind == IR_TYPE_SEQUENCE ? "sequence" : "non-tensor value", name);
        if (st == KILN_OK) {
            dt = v.tensor->dtype;
            rank = v.tensor->rank;
            if (rank > RT_MAX_RANK) st = kiln_err_set(err, KILN_ERR_LIMIT, "--loadInputs: '%s': rank %d too large", path, rank);
            else memcpy(dims, v.tensor->dims, sizeof(int64_t) * (size_t)rank);
            data = v.tensor->data;
            nbytes = v.tensor->nbytes;
        }
    } else {
        st = read_file(path, &buf, &size, err);
        if (st == KILN_OK && ends_with(path, ".npy")) st = parse_npy(buf, size, path, &dt, &rank, dims, &data, &nbytes, err);
        else if (st == KILN_OK) {
            /* raw, as trtexec: exactly the bytes of the tensor at the run shape */
            uint64_t count = 1, need = 0;
            for (int32_t i = 0; i < want_rank; i++) count *= (uint64_t)want_dims[i];
            kiln_dtype_nbytes(want_dt, count, &need);
            if (size != need)
                st = kiln_err_set(err, KILN_ERR_SHAPE,
                                  "--loadInputs: '%s' has %zu bytes but input '%s' %s needs %" PRIu64
                                  " (raw files hold exactly the tensor's bytes; a .npy or .pb file carries its own "
                                  "shape and dtype)",
                                  path, size, name, want, need);
            data = buf;
            nbytes = size;
        }
    }
    if (st == KILN_OK) {
        char got[256];
        shape_str(got, sizeof got, dt, rank, dims);
        bool same = dt == want_dt && rank == want_rank;
        for (int32_t i = 0; same && i < rank && dims_fixed; i++) same = dims[i] == want_dims[i];
        if (!same)
            st = kiln_err_set(err, KILN_ERR_SHAPE, "--loadInputs: '%s' holds %s but input '%s' is %s%s", path, got, name,
                              want, dims_fixed ? " at the run shape" : "");
    }
    if (st == KILN_OK) st = rt_tensor_alloc(out, dt, rank, dims, err);
    if (st == KILN_OK && nbytes) memcpy(out->data, data, (size_t)nbytes);
    free(buf);
    arena_free(&a);
    return st;
}

void exec_fill_random(rt_tensor *t, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    if (t->dtype == KILN_DTYPE_FLOAT) {
        float *f = t->data;
        for (uint64_t i = 0; i < t->count; i++) f[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    } else if (t->dtype == KILN_DTYPE_FLOAT16) {
        uint16_t *h = t->data;
        for (uint64_t i = 0; i < t->count; i++)
            h[i] = kiln_fp32_to_fp16((float)((s = s * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f);
    } else if (t->dtype == KILN_DTYPE_DOUBLE) {
        double *d = t->data;
        for (uint64_t i = 0; i < t->count; i++) d[i] = (double)((s = s * 1664525u + 1013904223u) >> 8) / 8388608.0 - 1.0;
    } else if (t->data && t->nbytes) {
        memset(t->data, 0, (size_t)t->nbytes); /* integers and bools: 0 is always a valid index */
    }
}
