/* onnx_load.c - the entry points of onnx_load.h: open and map the model file, sniff what
 * it is, decode it into a new ir_model.
 *
 * The model file is mapped read-only and stays mapped for the model's life (weights
 * point into it); only the pages the decoder touches are read, so loading a model is
 * proportional to its graph, not its weights. File-system problems (missing, a directory,
 * no permission, not a regular file) are explained before any decoding.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx_internal.h"
#include "onnx/onnx_load.h"

static char *dir_of(arena *a, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return arena_strdup(a, ".");
    if (slash == path) return arena_strdup(a, "/");
    return arena_strndup(a, path, (size_t)(slash - path));
}

/* Decodes the bytes already attached to m (file_data/file_size). Frees m on failure. */
static kiln_status import(ir_model *m, onnx_owner *owner, const char *display, const kiln_model_options *opts,
                          ir_model **out, kiln_error *err) {
    kiln_status st = onnx_sniff(m->file_data, m->file_size, display, err);
    if (st == KILN_OK) {
        onnx_rd *rd = calloc(1, sizeof *rd); /* large (frame stack): keep it off the C stack */
        if (!rd) {
            st = kiln_err_set(err, KILN_ERR_NOMEM, "%s: out of memory", display);
        } else {
            rd->buf = m->file_data;
            rd->size = m->file_size;
            rd->display = display;
            rd->a = &m->arena;
            rd->model = m;
            rd->owner = owner;
            rd->check_external = !opts || opts->check_external_data;
            rd->err = err;
            st = onnx_decode_model(rd);
            free(rd->scratch);
            free(rd);
        }
    }
    if (st != KILN_OK) {
        ir_model_free(m);
        *out = NULL;
        return st;
    }
    *out = m;
    return KILN_OK;
}

static ir_model *new_model(onnx_owner **owner) {
    ir_model *m = ir_model_new();
    onnx_owner *o = calloc(1, sizeof *o);
    if (!m || !o) {
        ir_model_free(m);
        free(o);
        return NULL;
    }
    hashmap_init(&o->ext_index);
    m->file_mapping = o;
    m->release_mapping = onnx_release_mapping;
    *owner = o;
    return m;
}

kiln_status onnx_load_bytes(const void *data, size_t size, const char *display_name, const char *base_dir,
                            const kiln_model_options *opts, ir_model **out, kiln_error *err) {
    *out = NULL;
    if (!data && size) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "no model bytes given");
    onnx_owner *o;
    ir_model *m = new_model(&o);
    if (!m) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    const char *display = arena_strdup(&m->arena, display_name ? display_name : "<memory>");
    m->path = display;
    m->base_dir = base_dir ? arena_strdup(&m->arena, base_dir) : NULL;
    if (!display || (base_dir && !m->base_dir)) {
        ir_model_free(m);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    m->file_data = data ? data : (const uint8_t *)"";
    m->file_size = size;
    return import(m, o, display, opts, out, err);
}

/* A directory given as the model: say what is inside that could be meant. */
kiln_status onnx_directory_error(const char *path, kiln_error *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/saved_model.pb", path);
    struct stat sb;
    if (stat(buf, &sb) == 0)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "%s: this is a TensorFlow SavedModel directory, not an ONNX model: convert it with "
                            "tf2onnx: python -m tf2onnx.convert --saved-model %s --output model.onnx",
                            path, path);
    char found[1024] = "";
    size_t pos = 0;
    int n = 0;
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < 5) {
            size_t len = strlen(e->d_name);
            if (len > 5 && strcmp(e->d_name + len - 5, ".onnx") == 0 && pos + len + 8 < sizeof found) {
                pos += (size_t)snprintf(found + pos, sizeof found - pos, "%s%s/%s", n ? ", " : "", path, e->d_name);
                n++;
            }
        }
        closedir(d);
    }
    if (n)
        return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                            "%s: is a directory, not an ONNX model file: pass the model file inside it (found: %s)",
                            path, found);
    return kiln_err_set(err, KILN_ERR_INVALID_ARG,
                        "%s: is a directory, not an ONNX model file (and has no .onnx file in it): pass the path of "
                        "the .onnx file",
                        path);
}

kiln_status onnx_open_error(const char *path, int e, kiln_error *err) {
    switch (e) {
    case ENOENT:
        return kiln_err_set(err, KILN_ERR_IO, "%s: no such file: check the path (and the current directory)", path);
    case EACCES:
    case EPERM:
        return kiln_err_set(err, KILN_ERR_IO,
                            "%s: permission denied: kiln cannot read this file; check its permissions (ls -l) and "
                            "those of its folders, or run as a user who can read it",
                            path);
    case ENOTDIR:
        return kiln_err_set(err, KILN_ERR_IO, "%s: a part of this path is not a directory: check the path", path);
    case ELOOP:
        return kiln_err_set(err, KILN_ERR_IO, "%s: too many symbolic links (a link loop?): check the path", path);
    default: return kiln_err_set(err, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
}

kiln_status onnx_load_file(const char *path, const kiln_model_options *opts, ir_model **out, kiln_error *err) {
    *out = NULL;
    if (!path || !path[0]) return kiln_err_set(err, KILN_ERR_INVALID_ARG, "no model path given");
    struct stat sb;
    if (stat(path, &sb) != 0) return onnx_open_error(path, errno, err);
    if (S_ISDIR(sb.st_mode)) return onnx_directory_error(path, err);
    if (!S_ISREG(sb.st_mode))
        return kiln_err_set(err, KILN_ERR_IO,
                            "%s: is not a regular file (a device, pipe or socket): pass the path of the .onnx file "
                            "itself (kiln maps the file, so it cannot read from a pipe)",
                            path);
    /* O_NONBLOCK: should the path be swapped for a FIFO meanwhile, open must not hang. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return onnx_open_error(path, errno, err);
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_IO, "%s: is not a regular file: pass the path of the .onnx file", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_LIMIT, "%s: the file is too large to map on this machine", path);
    }
    onnx_owner *o;
    ir_model *m = new_model(&o);
    if (!m) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    if (sb.st_size > 0) {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            ir_model_free(m);
            return kiln_err_set(err, KILN_ERR_IO, "%s: cannot map the file: %s", path, strerror(e));
        }
        o->main.addr = p;
        o->main.size = (uint64_t)sb.st_size;
        m->file_data = p;
    } else {
        m->file_data = (const uint8_t *)"";
    }
    close(fd);
    m->file_size = (uint64_t)sb.st_size;
    m->path = arena_strdup(&m->arena, path);
    m->base_dir = dir_of(&m->arena, path);
    if (!m->path || !m->base_dir) {
        ir_model_free(m);
        return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    }
    return import(m, o, m->path, opts, out, err);
}
