/* onnx_external.c - external tensor data (TensorProto.data_location = EXTERNAL).
 *
 * Models over 2 GB keep their weights in side files next to the .onnx file. A file from
 * the internet must not be able to make kiln read arbitrary files, so a location must be a
 * relative path without ".." whose real path (symlinks resolved) stays inside the model's
 * folder. Each data file is mapped once, read-only, and shared by all tensors in it;
 * tensors point into the mapping. Offsets and lengths are 64-bit throughout. Checksums
 * are not verified: that would read every weight at load.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "onnx/onnx_internal.h"
#include "onnx/onnx_load.h"

static const uint8_t empty_data[1];

void onnx_owner_free(onnx_owner *o) {
    if (!o) return;
    if (o->main.addr) munmap(o->main.addr, (size_t)o->main.size);
    for (int32_t i = 0; i < o->n_ext; i++)
        if (o->ext_maps[i].addr) munmap(o->ext_maps[i].addr, (size_t)o->ext_maps[i].size);
    free(o->ext_maps);
    free(o->ext);
    hashmap_free(&o->ext_index);
    free(o->base_real);
    free(o);
}

/* Checks a location string without touching the file system. NULL if fine, else why. */
static const char *bad_location(const char *loc) {
    if (!loc || !loc[0]) return "is empty";
    if (loc[0] == '/' || loc[0] == '\\') return "is an absolute path";
    if (strlen(loc) >= 2 && loc[1] == ':') return "is an absolute (drive letter) path";
    const char *p = loc;
    while (*p) {
        const char *q = p;
        while (*q && *q != '/' && *q != '\\') q++;
        if (q - p == 2 && p[0] == '.' && p[1] == '.') return "contains a '..' component";
        p = *q ? q + 1 : q;
    }
    return NULL;
}

static int32_t ext_index(onnx_owner *o, ir_model *m, const char *loc) {
    int32_t id;
    if (hashmap_get(&o->ext_index, loc, &id)) return id;
    if (o->n_ext == o->cap_ext) {
        int32_t ncap = o->cap_ext ? o->cap_ext * 2 : 8;
        ir_external_file *ne = kiln_realloc_array(o->ext, (size_t)ncap, sizeof *ne);
        if (!ne) return IR_NONE;
        o->ext = ne;
        onnx_map *nm = kiln_realloc_array(o->ext_maps, (size_t)ncap, sizeof *nm);
        if (!nm) return IR_NONE;
        o->ext_maps = nm;
        o->cap_ext = ncap;
    }
    id = o->n_ext;
    memset(&o->ext[id], 0, sizeof o->ext[id]);
    memset(&o->ext_maps[id], 0, sizeof o->ext_maps[id]);
    o->ext[id].location = loc;
    if (!hashmap_put(&o->ext_index, loc, id)) return IR_NONE;
    o->n_ext++;
    m->ext_files = o->ext;
    m->n_ext_files = o->n_ext;
    return id;
}

/* Maps external file `id` if not yet mapped. `pre` starts messages ("model.onnx: field
 * graph.initializer[3] 'w' at byte 120: "). */
static kiln_status map_ext(ir_model *m, onnx_owner *o, int32_t id, const char *pre, kiln_error *err) {
    ir_external_file *ef = &o->ext[id];
    if (ef->map || o->ext_maps[id].size == UINT64_MAX) return KILN_OK; /* mapped (or empty) already */
    if (!m->base_dir)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                            "%sthe tensor's data is in the external file '%s', but the model was loaded from "
                            "memory without a folder: load it from its file, or pass the model's folder as base_dir",
                            pre, ef->location);
    if (!o->base_real) {
        o->base_real = realpath(m->base_dir, NULL);
        if (!o->base_real)
            return kiln_err_set(err, KILN_ERR_IO, "%scannot resolve the model's folder '%s': %s", pre, m->base_dir,
                                strerror(errno));
    }
    size_t plen = strlen(m->base_dir) + strlen(ef->location) + 2;
    char *joined = malloc(plen);
    if (!joined) return kiln_err_set(err, KILN_ERR_NOMEM, "%sout of memory", pre);
    snprintf(joined, plen, "%s/%s", m->base_dir, ef->location);
    char *real = realpath(joined, NULL);
    if (!real) {
        int e = errno;
        kiln_status st;
        if (e == ENOENT)
            st = kiln_err_set(err, KILN_ERR_IO,
                              "%sthe external data file '%s' is missing (looked for %s): copy it next to the model "
                              "with the same name; weights of large models live in such side files and must travel "
                              "with the .onnx file",
                              pre, ef->location, joined);
        else
            st = kiln_err_set(err, KILN_ERR_IO, "%scannot open the external data file '%s' (%s): %s", pre,
                              ef->location, joined, strerror(e));
        free(joined);
        return st;
    }
    size_t bl = strlen(o->base_real);
    bool inside = strncmp(real, o->base_real, bl) == 0 && (real[bl] == '/' || (bl == 1 && o->base_real[0] == '/'));
    if (!inside) {
        kiln_status st = kiln_err_set(err, KILN_ERR_FORMAT,
                                      "%sthe external data file '%s' resolves to %s, outside the model's folder %s "
                                      "(through a symbolic link?): kiln refuses to read files outside the model's "
                                      "folder; copy the data file into the folder",
                                      pre, ef->location, real, o->base_real);
        free(joined);
        free(real);
        return st;
    }
    int fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    kiln_status st = KILN_OK;
    if (fd < 0) {
        st = kiln_err_set(err, KILN_ERR_IO, "%scannot open the external data file %s: %s%s", pre, joined,
                          strerror(errno), errno == EACCES ? " (check its permissions)" : "");
    } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = kiln_err_set(err, KILN_ERR_IO, "%sthe external data path %s is not a regular file", pre, joined);
    } else {
        ef->file_size = (uint64_t)sb.st_size;
        if (sb.st_size > 0) {
            void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                st = kiln_err_set(err, KILN_ERR_IO, "%scannot map the external data file %s: %s", pre, joined,
                                  strerror(errno));
            } else {
                o->ext_maps[id].addr = p;
                o->ext_maps[id].size = (uint64_t)sb.st_size;
                ef->map = p;
            }
        } else {
            o->ext_maps[id].size = UINT64_MAX; /* marks "checked, empty" */
        }
    }
    if (fd >= 0) close(fd);
    free(joined);
    free(real);
    return st;
}

/* Points t at its bytes in mapped file `id`, after checking the range. */
static kiln_status bind(onnx_owner *o, int32_t id, ir_tensor *t, const char *pre, kiln_error *err) {
    ir_external_file *ef = &o->ext[id];
    uint64_t size = ef->file_size, last;
    if (kiln_add_overflow_u64(t->ext_offset, t->ext_length, &last)) last = UINT64_MAX;
    if (t->ext_offset > size || t->ext_length > size - t->ext_offset)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%sthe tensor reads bytes %" PRIu64 "..%" PRIu64 " of external data file '%s', but that "
                            "file has only %" PRIu64 " bytes: the data file is truncated or belongs to another "
                            "export; copy the complete file or re-export the model",
                            pre, t->ext_offset, last, ef->location, size);
    t->data = ef->map ? (const void *)(ef->map + t->ext_offset) : (const void *)empty_data;
    return KILN_OK;
}

kiln_status onnx_external_resolve(onnx_rd *rd, ir_tensor *t, uint64_t tensor_pos) {
    const char *why = bad_location(t->ext_location);
    if (why)
        return onnx_fail(rd, KILN_ERR_FORMAT, tensor_pos, "external_data",
                         "location '%s' %s: external data must be a relative path inside the model's folder; "
                         "move the data file next to the model and re-save it with a relative location",
                         t->ext_location ? t->ext_location : "", why);
    if (!rd->owner) /* value files: external data is not allowed there */
        return onnx_fail(rd, KILN_ERR_UNSUPPORTED, tensor_pos, "external_data",
                         "tensors in value files cannot use external data: save the tensor with its data inline");
    if (rd->n_clamped > 0) return KILN_OK; /* the file is cut short: that gets reported instead */
    int32_t id = ext_index(rd->owner, rd->model, t->ext_location);
    if (id == IR_NONE) return onnx_nomem(rd);
    ir_external_file *ef = &rd->owner->ext[id];
    ef->n_tensors++;
    ef->bytes_referenced += t->ext_length;
    if (!rd->check_external) return KILN_OK;
    char path[1024], pre[1200];
    onnx_path(rd, NULL, path, sizeof path);
    snprintf(pre, sizeof pre, "%s: field %s at byte %" PRIu64 ": ", rd->display, path, tensor_pos);
    kiln_status st = map_ext(rd->model, rd->owner, id, pre, rd->err);
    if (!st) st = bind(rd->owner, id, t, pre, rd->err);
    return st;
}

void onnx_release_mapping(ir_model *m) {
    onnx_owner_free(m->file_mapping);
    m->file_mapping = NULL;
    m->ext_files = NULL;
    m->n_ext_files = 0;
}

kiln_status onnx_tensor_load_external(ir_model *m, ir_tensor *t, kiln_error *err) {
    if (!t || t->where != IR_DATA_EXTERNAL || t->data) return KILN_OK;
    char pre[512];
    snprintf(pre, sizeof pre, "%s: tensor '%s' (TensorProto at byte %" PRIu64 "): ", m && m->path ? m->path : "<model>",
             t->name ? t->name : "", t->file_offset);
    if (!m || m->release_mapping != onnx_release_mapping || !m->file_mapping)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG, "%sthe model was not read by kiln's ONNX reader", pre);
    const char *why = bad_location(t->ext_location);
    if (why)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%sexternal data location '%s' %s: it must be a relative path inside the model's folder",
                            pre, t->ext_location ? t->ext_location : "", why);
    onnx_owner *o = m->file_mapping;
    int32_t id = ext_index(o, m, t->ext_location);
    if (id == IR_NONE) return kiln_err_set(err, KILN_ERR_NOMEM, "%sout of memory", pre);
    kiln_status st = map_ext(m, o, id, pre, err);
    if (!st) st = bind(o, id, t, pre, err);
    return st;
}

kiln_status onnx_tensor_align(ir_model *m, ir_tensor *t, kiln_error *err) {
    if (!t || t->dtype == KILN_DTYPE_STRING) return KILN_OK;
    kiln_status st = onnx_tensor_load_external(m, t, err);
    if (st != KILN_OK || !t->data || t->nbytes == 0) return st;
    int bits = kiln_dtype_bits(t->dtype);
    uintptr_t align = bits >= 8 ? (uintptr_t)bits / 8 : 1;
    if (t->dtype == KILN_DTYPE_COMPLEX64) align = 4;
    if (align > 8) align = 8;
    if (((uintptr_t)t->data & (align - 1)) == 0) return KILN_OK;
    if (t->nbytes > SIZE_MAX) return kiln_err_set(err, KILN_ERR_LIMIT, "tensor '%s' is too large", t->name);
    void *copy = arena_memdup(&m->arena, t->data, (size_t)t->nbytes);
    if (!copy)
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory copying tensor '%s' (%" PRIu64 " bytes)", t->name,
                            t->nbytes);
    t->data = copy;
    t->where = IR_DATA_OWNED;
    return KILN_OK;
}
