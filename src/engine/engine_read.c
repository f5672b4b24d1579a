/* engine_read.c - loads an engine file: header, section table, checksums, compatibility,
 * metadata sections; the graph itself is decoded by engine_read_graph.c.
 *
 * Order of checks, each before anything it guards is trusted:
 *   1. is it an engine at all (magic)? If not, say what it looks like (an ONNX model, a
 *      Git LFS pointer, text) and what to do;
 *   2. header checksum, format version, byte order, header size;
 *   3. file size against the header (truncated copies are the common failure);
 *   4. section table checksum, then every entry: in bounds, aligned, no overlaps, no
 *      duplicates, required sections present; then every section's checksum;
 *   5. compatibility (kiln version, backend, CPU features), reported with what differs
 *      and the command that rebuilds the engine;
 *   6. META, LAYERS, MEMPLAN, then (unless metadata_only) GRAPH, with cross-checks.
 * The WEIGHTS checksum (the one large section) is computed on several threads and
 * combined with crc32_combine. zlib's crc32 runs at about 1.2 GB/s per core, so for a
 * 100 MB engine it is most of the load time; with defer_weights_crc it runs on a
 * background thread while the caller goes on (engine_plan_weights_ready joins it; every
 * path that reads weight bytes calls that first). Weights are data, never offsets or
 * sizes, so nothing the reader parses depends on them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "backends/cpu/cpu_kernel.h"
#include "backends/cuda/cuda_info.h"
#include "core/cpu_count.h"
#include "engine/codec.h"
#include "engine/read_internal.h"

engine_plan *engine_plan_new(void) {
    engine_plan *p = calloc(1, sizeof *p);
    if (p) arena_init(&p->arena);
    return p;
}

void engine_unmap(void *map, uint64_t size) {
    if (map && size) munmap(map, (size_t)size);
}

static void weights_check_free(struct engine_weights_check *w);

void engine_plan_free(engine_plan *p) {
    if (!p) return;
    weights_check_free(p->wcheck); /* joins the thread before the bytes go away */
    ir_model_free(p->model);
    if (!p->model_owns_map) engine_unmap(p->map, p->map_size);
    arena_free(&p->arena);
    free(p);
}

bool engine_is_engine(const uint8_t *data, size_t size) {
    return size >= KILN_ENGINE_MAGIC_LEN && memcmp(data, KILN_ENGINE_MAGIC, KILN_ENGINE_MAGIC_LEN) == 0;
}

const char *engine_section_name(uint32_t id) {
    switch (id) {
    case ENGINE_SEC_META: return "META";
    case ENGINE_SEC_GRAPH: return "GRAPH";
    case ENGINE_SEC_LAYERS: return "LAYERS";
    case ENGINE_SEC_MEMPLAN: return "MEMPLAN";
    case ENGINE_SEC_WEIGHTS: return "WEIGHTS";
    default: return "unknown";
    }
}

const char *engine_precision_name(uint32_t p) {
    static const char *const names[] = {"fp32", "fp16", "bf16", "int8", "tf32", "fp8"};
    return p < ENGINE_PREC_COUNT ? names[p] : "unknown";
}

const char *engine_backend_name(uint32_t b) {
    return b == ENGINE_BACKEND_CPU ? "cpu" : b == ENGINE_BACKEND_CUDA ? "cuda" : "unknown";
}

static const struct {
    uint64_t bit;
    const char *name;
} feature_names[] = {
    {CPU_FEATURE_AVX512F, "avx512f"},   {CPU_FEATURE_AVX512BW, "avx512bw"},
    {CPU_FEATURE_AVX512VL, "avx512vl"}, {CPU_FEATURE_AVX512DQ, "avx512dq"},
    {CPU_FEATURE_AVX512_VNNI, "avx512vnni"}, {CPU_FEATURE_AVX512_BF16, "avx512bf16"},
    {CPU_FEATURE_AMX, "amx"},           {CPU_FEATURE_AVX2, "avx2"},
    {CPU_FEATURE_FMA, "fma"},           {CPU_FEATURE_F16C, "f16c"},
};

const char *engine_features_str(uint64_t f, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) {
        if (!(f & feature_names[i].bit)) continue;
        int n = snprintf(buf + len, size - len, "%s%s", len ? " " : "", feature_names[i].name);
        if (n < 0 || (size_t)n >= size - len) break;
        len += (size_t)n;
    }
    if (!len) snprintf(buf, size, "no SIMD extensions (scalar)");
    return buf;
}

uint64_t engine_isa_features(uint64_t host) {
    uint64_t known = 0;
    for (size_t i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) known |= feature_names[i].bit;
    return host & known;
}

static const char *isa_level(uint64_t f) {
    if (f & CPU_FEATURE_AVX512F) return "AVX-512";
    if (f & CPU_FEATURE_AVX2) return "AVX2";
    return "baseline x86-64";
}

/* ---- foreign files ---------------------------------------------------------------- */

static bool looks_like_onnx(const uint8_t *d, size_t n, const char *name) {
    size_t ln = name ? strlen(name) : 0;
    if (ln >= 5 && !strcmp(name + ln - 5, ".onnx")) return true;
    /* ModelProto starts with field 1 (ir_version, varint: 0x08) or another small field
     * tag, followed by a small version number; an engine never does. */
    return n >= 2 && d[0] == 0x08 && d[1] >= 3 && d[1] <= 20;
}

static kiln_status foreign(const uint8_t *d, size_t n, const char *name, kiln_error *err) {
    if (n > 0 && n < KILN_ENGINE_MAGIC_LEN && !memcmp(d, KILN_ENGINE_MAGIC, n))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "kiln engine file '%s' is truncated: only %zu bytes (an interrupted copy or download?): "
                            "copy it again, or rebuild it with kiln exec --onnx=MODEL --saveEngine=%s",
                            name, n, name);
    if (n >= 8 && !memcmp(d, "KILNENG", 7))
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "'%s' is a kiln engine of another format generation (magic '%.8s'); this kiln %s "
                            "reads '%s' engines: rebuild the engine with this kiln (kiln exec --onnx=MODEL "
                            "--saveEngine=%s)",
                            name, (const char *)d, KILN_VERSION_STRING, KILN_ENGINE_MAGIC, name);
    if (n >= 24 && !memcmp(d, "version https://git-lfs", 23))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "'%s' is a Git LFS pointer file, not the engine itself: run 'git lfs pull' to fetch "
                            "the real file",
                            name);
    if (n > 0 && looks_like_onnx(d, n, name))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "'%s' is an ONNX model, not a kiln engine: build from it with --onnx=%s (add "
                            "--saveEngine=FILE to keep the engine for --loadEngine)",
                            name, name);
    if (n == 0) return kiln_err_set(err, KILN_ERR_FORMAT, "'%s' is empty: it is not a kiln engine", name);
    char hex[64];
    size_t k = n < 8 ? n : 8, len = 0;
    for (size_t i = 0; i < k; i++) len += (size_t)snprintf(hex + len, sizeof hex - len, "%s%02x", i ? " " : "", d[i]);
    return kiln_err_set(err, KILN_ERR_FORMAT,
                        "'%s' is not a kiln engine: it starts with bytes %s, not the engine magic '%s'. Engine "
                        "files are written by 'kiln exec --onnx=MODEL --saveEngine=FILE'",
                        name, hex, KILN_ENGINE_MAGIC);
}

/* ---- parallel checksum of the weights ------------------------------------------ */

typedef struct crc_job {
    const uint8_t *p;
    uint64_t n;
    uLong crc;
} crc_job;

static uLong crc_big(uLong crc, const uint8_t *p, uint64_t n) {
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

static void *crc_thread(void *arg) {
    crc_job *j = arg;
    j->crc = crc_big(crc32(0L, Z_NULL, 0), j->p, j->n);
    return NULL;
}

static uint32_t crc_parallel(const uint8_t *p, uint64_t n) {
    enum { MAXT = 16 };
    int ncpu = kiln_usable_cpus();
    int nt = ncpu > MAXT ? MAXT : ncpu;
    if (n < (8u << 20) || nt == 1) return (uint32_t)crc_big(crc32(0L, Z_NULL, 0), p, n);
    crc_job jobs[MAXT];
    pthread_t th[MAXT];
    bool started[MAXT] = {0};
    uint64_t chunk = n / (uint64_t)nt;
    for (int i = 0; i < nt; i++) {
        jobs[i].p = p + chunk * (uint64_t)i;
        jobs[i].n = i == nt - 1 ? n - chunk * (uint64_t)i : chunk;
        if (i > 0) started[i] = pthread_create(&th[i], NULL, crc_thread, &jobs[i]) == 0;
    }
    crc_thread(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else crc_thread(&jobs[i]);
    }
    uLong crc = jobs[0].crc;
    for (int i = 1; i < nt; i++) crc = crc32_combine(crc, jobs[i].crc, (z_off_t)jobs[i].n);
    return (uint32_t)crc;
}

/* ---- metadata sections ---------------------------------------------------------- */

static bool r_io(rbuf *r, engine_io **out, int32_t *n_out, const char *what) {
    uint32_t n = rb_count(r, 12, what);
    if (r->failed) return false;
    *n_out = (int32_t)n;
    *out = ARENA_ARRAY(r->arena, engine_io, n ? n : 1);
    if (!*out) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        engine_io *io = &(*out)[i];
        io->name = rb_str(r, "I/O name");
        io->dtype = rb_u32(r);
        io->rank = rb_i32(r);
        if (r->failed) return false;
        if (io->dtype != 0 && !kiln_dtype_valid((int)io->dtype))
            return rb_fail(r, "%s '%s': unknown dtype %u", what, io->name, io->dtype);
        if (io->rank < -1 || io->rank > IR_MAX_RANK)
            return rb_fail(r, "%s '%s': rank %d out of range", what, io->name, io->rank);
        if (io->rank > 0 && (uint64_t)io->rank * 13 > rb_left(r))
            return rb_fail(r, "%s '%s': rank %d cannot fit", what, io->name, io->rank);
        io->dims = ARENA_ARRAY(r->arena, engine_dim, io->rank > 0 ? io->rank : 1);
        if (!io->dims) return rb_fail(r, "out of memory");
        for (int32_t d = 0; d < io->rank; d++) {
            io->dims[d].kind = rb_u8(r);
            io->dims[d].symbol = rb_str(r, "dimension symbol");
            io->dims[d].value = rb_i64(r);
            if (r->failed) return false;
            if (io->dims[d].kind > IR_DIM_SYM || io->dims[d].value < 0)
                return rb_fail(r, "%s '%s': bad dimension %d", what, io->name, d);
        }
    }
    return true;
}

static bool r_meta(rbuf *r, engine_plan *p) {
    engine_meta *m = &p->meta;
    m->kiln_version = rb_str(r, "kiln version");
    m->source_model = rb_str(r, "source model");
    m->source_size = rb_u64(r);
    m->build_unix_time = rb_u64(r);
    m->build_seconds = rb_f64(r);
    m->backend_name = rb_str(r, "backend name");
    m->gpu_arch = rb_str(r, "GPU architecture");
    m->cuda_version = rb_str(r, "CUDA version");
    m->cublas_version = rb_str(r, "cuBLAS version");
    m->cudnn_version = rb_str(r, "cuDNN version");
    m->precision_flags = rb_u32(r);
    m->workspace_limit = rb_u64(r);
    m->build_threads = rb_i32(r);
    m->build_flags = rb_u32(r);
    uint32_t np = rb_count(r, 4, "profile list");
    if (r->failed) return false;
    p->n_profiles = (int32_t)np;
    p->profiles = ARENA_ARRAY(r->arena, engine_profile, np ? np : 1);
    if (!p->profiles) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < np; i++) {
        engine_profile *pr = &p->profiles[i];
        uint32_t ni = rb_count(r, 8, "profile inputs");
        if (r->failed) return false;
        pr->n_inputs = (int32_t)ni;
        pr->inputs = ARENA_ARRAY(r->arena, engine_profile_input, ni ? ni : 1);
        if (!pr->inputs) return rb_fail(r, "out of memory");
        for (uint32_t k = 0; k < ni; k++) {
            engine_profile_input *in = &pr->inputs[k];
            in->name = rb_str(r, "profile input name");
            uint32_t rank = rb_count(r, 24, "profile rank");
            if (r->failed) return false;
            if (rank > IR_MAX_RANK) return rb_fail(r, "profile %u input '%s': rank %u too large", i, in->name, rank);
            in->rank = (int32_t)rank;
            in->min = ARENA_ARRAY(r->arena, int64_t, rank ? rank : 1);
            in->opt = ARENA_ARRAY(r->arena, int64_t, rank ? rank : 1);
            in->max = ARENA_ARRAY(r->arena, int64_t, rank ? rank : 1);
            if (!in->min || !in->opt || !in->max) return rb_fail(r, "out of memory");
            for (uint32_t d = 0; d < rank; d++) {
                in->min[d] = rb_i64(r);
                in->opt[d] = rb_i64(r);
                in->max[d] = rb_i64(r);
                if (r->failed) return false;
                if (in->min[d] < 0 || in->min[d] > in->opt[d] || in->opt[d] > in->max[d])
                    return rb_fail(r, "profile %u input '%s' dimension %u: min %" PRId64 " <= opt %" PRId64
                                      " <= max %" PRId64 " does not hold",
                                   i, in->name, d, in->min[d], in->opt[d], in->max[d]);
            }
        }
    }
    if (!r_io(r, &p->inputs, &p->n_inputs, "input")) return false;
    if (!r_io(r, &p->outputs, &p->n_outputs, "output")) return false;
    if (rb_left(r)) return rb_fail(r, "%zu unexpected bytes at the end", rb_left(r));
    return true;
}

static bool r_layers(rbuf *r, engine_plan *p) {
    uint32_t n = rb_count(r, 48, "layer list");
    if (r->failed) return false;
    p->n_layers = (int32_t)n;
    p->layers = ARENA_ARRAY(r->arena, engine_layer, n ? n : 1);
    if (!p->layers) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        engine_layer *l = &p->layers[i];
        l->node = rb_i32(r);
        l->name = rb_str(r, "layer name");
        l->op_type = rb_str(r, "layer op type");
        l->tactic = rb_str(r, "layer tactic");
        l->precision = rb_u32(r);
        l->flags = rb_u32(r);
        l->scratch_bytes = rb_u64(r);
        l->time_ms = rb_f64(r);
        uint32_t ns = rb_count(r, 4, "quantization scales");
        if (r->failed) return false;
        if (l->node < 0) return rb_fail(r, "layer %u: negative node index %d", i, l->node);
        if (l->precision >= ENGINE_PREC_COUNT)
            return rb_fail(r, "layer '%s': precision %u is not one this kiln knows", l->name, l->precision);
        l->n_scales = (int32_t)ns;
        l->scales = ARENA_ARRAY(r->arena, float, ns ? ns : 1);
        if (!l->scales) return rb_fail(r, "out of memory");
        for (uint32_t k = 0; k < ns; k++) l->scales[k] = rb_f32(r);
    }
    if (rb_left(r)) return rb_fail(r, "%zu unexpected bytes at the end", rb_left(r));
    return !r->failed;
}

static bool r_memplan(rbuf *r, engine_plan *p) {
    engine_memplan *mp = &p->mem;
    mp->weights_bytes = rb_u64(r);
    mp->workspace_limit = rb_u64(r);
    mp->max_scratch_bytes = rb_u64(r);
    uint32_t n = rb_count(r, 16, "memory plan profiles");
    if (r->failed) return false;
    mp->n_profiles = (int32_t)n;
    mp->activation_max = ARENA_ARRAY(r->arena, uint64_t, n ? n : 1);
    mp->activation_opt = ARENA_ARRAY(r->arena, uint64_t, n ? n : 1);
    if (!mp->activation_max || !mp->activation_opt) return rb_fail(r, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        mp->activation_max[i] = rb_u64(r);
        mp->activation_opt[i] = rb_u64(r);
    }
    if (rb_left(r)) return rb_fail(r, "%zu unexpected bytes at the end", rb_left(r));
    return !r->failed;
}

/* ---- header and sections ---------------------------------------------------------- */

static const engine_section_entry *find_section(const engine_plan *p, uint32_t id) {
    for (int32_t i = 0; i < p->n_sections; i++)
        if (p->sections[i].id == id) return &p->sections[i];
    return NULL;
}

static kiln_status read_header(const uint8_t *d, size_t size, const char *name, engine_plan *p, kiln_error *err) {
    engine_header *h = &p->header;
    if (size < ENGINE_HEADER_SIZE)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "kiln engine file '%s' is truncated: %zu bytes, shorter than the %u-byte header (an "
                            "interrupted copy or download?): copy it again, or rebuild it with kiln exec "
                            "--onnx=MODEL --saveEngine=%s and run it with --loadEngine=%s",
                            name, size, ENGINE_HEADER_SIZE, name, name);
    uint32_t hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), d, ENGINE_OFF_HEADER_CRC);
    if (hcrc != le_u32(d + ENGINE_OFF_HEADER_CRC))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s': the header is corrupt (checksum %08x, expected %08x): the file was "
                            "damaged; rebuild it or copy it again",
                            name, hcrc, le_u32(d + ENGINE_OFF_HEADER_CRC));
    h->format_version = le_u32(d + ENGINE_OFF_FORMAT);
    h->ver_major = le_u16(d + ENGINE_OFF_VERSION);
    h->ver_minor = le_u16(d + ENGINE_OFF_VERSION + 2);
    h->ver_patch = le_u16(d + ENGINE_OFF_VERSION + 4);
    if (h->format_version != ENGINE_FORMAT_VERSION)
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "engine '%s' uses engine format %u (written by kiln %u.%u.%u); this kiln %s reads "
                            "format %u only: rebuild the engine with this kiln (kiln exec --onnx=MODEL "
                            "--saveEngine=%s)",
                            name, h->format_version, h->ver_major, h->ver_minor, h->ver_patch, KILN_VERSION_STRING,
                            ENGINE_FORMAT_VERSION, name);
    if (le_u32(d + ENGINE_OFF_BOM) != ENGINE_BOM)
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "engine '%s' has byte-order mark %08x, expected %08x: it was not written by a "
                            "little-endian kiln",
                            name, le_u32(d + ENGINE_OFF_BOM), ENGINE_BOM);
    if (le_u32(d + ENGINE_OFF_HEADER_SIZE) != ENGINE_HEADER_SIZE)
        return kiln_err_set(err, KILN_ERR_FORMAT, "engine '%s': header size %u, expected %u", name,
                            le_u32(d + ENGINE_OFF_HEADER_SIZE), ENGINE_HEADER_SIZE);
    h->ptr_size = d[ENGINE_OFF_TYPE_SIZES];
    h->size_t_size = d[ENGINE_OFF_TYPE_SIZES + 1];
    h->float_size = d[ENGINE_OFF_TYPE_SIZES + 2];
    h->double_size = d[ENGINE_OFF_TYPE_SIZES + 3];
    if (h->float_size != 4 || h->double_size != 8)
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "engine '%s' was built where float is %u bytes and double %u; kiln needs IEEE 4/8",
                            name, h->float_size, h->double_size);
    h->backend = le_u32(d + ENGINE_OFF_BACKEND);
    h->flags = le_u32(d + ENGINE_OFF_FLAGS);
    h->required_features = le_u64(d + ENGINE_OFF_REQ_FEATURES);
    h->host_features = le_u64(d + ENGINE_OFF_HOST_FEATURES);
    h->file_size = le_u64(d + ENGINE_OFF_FILE_SIZE);
    h->table_offset = le_u64(d + ENGINE_OFF_TABLE);
    h->n_sections = le_u32(d + ENGINE_OFF_N_SECTIONS);
    if (h->file_size != size) {
        if (h->file_size > size)
            return kiln_err_set(err, KILN_ERR_FORMAT,
                                "engine '%s' is truncated: the file has %zu bytes but its header says %" PRIu64
                                " (an interrupted copy or download?): copy it again or rebuild it",
                                name, size, h->file_size);
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s' has %zu bytes but its header says %" PRIu64
                            ": extra bytes were appended; copy it again or rebuild it",
                            name, size, h->file_size);
    }
    if (h->table_offset != ENGINE_HEADER_SIZE || h->n_sections == 0 || h->n_sections > ENGINE_MAX_SECTIONS ||
        (uint64_t)h->n_sections * ENGINE_SECTION_ENTRY_SIZE > size - ENGINE_HEADER_SIZE)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s': section table (%u entries at byte %" PRIu64 ") does not fit the file", name,
                            h->n_sections, h->table_offset);
    const uint8_t *t = d + h->table_offset;
    uint32_t tcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), t, h->n_sections * ENGINE_SECTION_ENTRY_SIZE);
    if (tcrc != le_u32(d + ENGINE_OFF_TABLE_CRC))
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s': the section table is corrupt (checksum mismatch): rebuild the engine or "
                            "copy it again",
                            name);
    uint64_t table_end = h->table_offset + (uint64_t)h->n_sections * ENGINE_SECTION_ENTRY_SIZE;
    p->n_sections = (int32_t)h->n_sections;
    for (uint32_t i = 0; i < h->n_sections; i++) {
        const uint8_t *e = t + i * ENGINE_SECTION_ENTRY_SIZE;
        engine_section_entry *s = &p->sections[i];
        s->id = le_u32(e);
        s->flags = le_u32(e + 4);
        s->offset = le_u64(e + 8);
        s->size = le_u64(e + 16);
        s->crc = le_u32(e + 24);
        const char *sn = engine_section_name(s->id);
        uint64_t align = s->id == ENGINE_SEC_WEIGHTS ? ENGINE_WEIGHTS_ALIGN : ENGINE_SECTION_ALIGN;
        if (s->offset < table_end || s->offset > size || s->size > size - s->offset)
            return kiln_err_set(err, KILN_ERR_FORMAT,
                                "engine '%s': section %s [%" PRIu64 ", +%" PRIu64 ") lies outside the %zu-byte file",
                                name, sn, s->offset, s->size, size);
        if (s->offset % align)
            return kiln_err_set(err, KILN_ERR_FORMAT, "engine '%s': section %s at byte %" PRIu64 " is not %" PRIu64
                                "-byte aligned", name, sn, s->offset, align);
        for (uint32_t k = 0; k < i; k++) {
            const engine_section_entry *o = &p->sections[k];
            if (o->id == s->id)
                return kiln_err_set(err, KILN_ERR_FORMAT, "engine '%s': section %s appears twice", name, sn);
            if (s->offset < o->offset + o->size && o->offset < s->offset + s->size)
                return kiln_err_set(err, KILN_ERR_FORMAT, "engine '%s': sections %s and %s overlap", name, sn,
                                    engine_section_name(o->id));
        }
    }
    static const uint32_t required[] = {ENGINE_SEC_META, ENGINE_SEC_GRAPH, ENGINE_SEC_LAYERS, ENGINE_SEC_MEMPLAN,
                                        ENGINE_SEC_WEIGHTS};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!find_section(p, required[i]))
            return kiln_err_set(err, KILN_ERR_FORMAT, "engine '%s' has no %s section", name,
                                engine_section_name(required[i]));
    return KILN_OK;
}

/* ---- deferred WEIGHTS checksum --------------------------------------------------- */

struct engine_weights_check {
    pthread_mutex_t lock;
    pthread_t thread;
    bool started, joined;
    const uint8_t *data;
    uint64_t offset, size;
    uint32_t want, got;
    double ms;
    char *name;
};

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *weights_check_main(void *arg) {
    struct engine_weights_check *w = arg;
    double t0 = mono_ms();
    w->got = crc_parallel(w->data, w->size);
    w->ms = mono_ms() - t0;
    return NULL;
}

/* Starts the check; when no thread can be started it runs here (and the result is ready). */
static struct engine_weights_check *weights_check_start(const uint8_t *d, const engine_section_entry *s,
                                                        const char *name) {
    struct engine_weights_check *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->name = strdup(name);
    if (!w->name || pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w->name);
        free(w);
        return NULL;
    }
    w->data = d + s->offset;
    w->offset = s->offset;
    w->size = s->size;
    w->want = s->crc;
    w->started = pthread_create(&w->thread, NULL, weights_check_main, w) == 0;
    if (!w->started) weights_check_main(w);
    return w;
}

static void weights_check_join(struct engine_weights_check *w) {
    pthread_mutex_lock(&w->lock);
    if (w->started && !w->joined) pthread_join(w->thread, NULL);
    w->joined = true;
    pthread_mutex_unlock(&w->lock);
}

static void weights_check_free(struct engine_weights_check *w) {
    if (!w) return;
    weights_check_join(w);
    pthread_mutex_destroy(&w->lock);
    free(w->name);
    free(w);
}

kiln_status engine_plan_weights_ready(const engine_plan *p, double *check_ms, kiln_error *err) {
    if (check_ms) *check_ms = 0;
    if (!p || !p->wcheck) return KILN_OK;
    struct engine_weights_check *w = p->wcheck;
    weights_check_join(w);
    if (check_ms) *check_ms = w->ms;
    if (w->got != w->want)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s': the WEIGHTS section (bytes %" PRIu64 "..%" PRIu64 ") is corrupt: checksum "
                            "%08x, expected %08x. The file was damaged after it was written: copy it again or rebuild it",
                            w->name, w->offset, w->offset + w->size, w->got, w->want);
    return KILN_OK;
}

static kiln_status check_crc(const uint8_t *d, const engine_section_entry *s, bool parallel, const char *name,
                             kiln_error *err) {
    uint32_t crc = parallel ? crc_parallel(d + s->offset, s->size)
                            : (uint32_t)crc_big(crc32(0L, Z_NULL, 0), d + s->offset, s->size);
    if (crc != s->crc)
        return kiln_err_set(err, KILN_ERR_FORMAT,
                            "engine '%s': the %s section (bytes %" PRIu64 "..%" PRIu64 ") is corrupt: checksum %08x, "
                            "expected %08x. The file was damaged after it was written: copy it again or rebuild it",
                            name, engine_section_name(s->id), s->offset, s->offset + s->size, crc, s->crc);
    return KILN_OK;
}

/* Every node of a CPU engine (subgraphs included) must have a kernel in this build. An
 * engine written by a kiln with more kernels (same major.minor, a newer patch or a
 * build with extra ops) fails here, naming the op, instead of when a context is made or
 * a run reaches the node. The runtime resolves kernels the same way (cpu_backend.c). */
static kiln_status check_kernels(const engine_plan *p, const ir_graph *g, int depth, const char *name,
                                 kiln_error *err) {
    if (depth > 64) return kiln_err_set(err, KILN_ERR_LIMIT, "engine '%s': subgraphs nested deeper than 64", name);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        int64_t opset = n->opset > 0 ? n->opset : ir_model_opset(p->model, n->domain);
        if (!cpu_kernel_find(n->domain, n->op_type, opset)) {
            const char *dom = n->domain[0] ? n->domain : "ai.onnx";
            const char *model = p->meta.source_model && *p->meta.source_model ? p->meta.source_model : "MODEL.onnx";
            return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                                "engine '%s' needs a CPU kernel for %s (%s opset %lld, node '%s') that this kiln %s "
                                "does not have%s; it was built by kiln %u.%u.%u. Run it with a kiln that has the "
                                "kernel, or rebuild it with this one: kiln exec --onnx=%s --saveEngine=%s",
                                name, n->op_type, dom, (long long)opset, n->name, KILN_VERSION_STRING,
                                cpu_kernel_exists(n->domain, n->op_type) ? " at that opset" : "",
                                p->header.ver_major, p->header.ver_minor, p->header.ver_patch, model, name);
        }
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const ir_attr *at = &n->attrs[a];
            kiln_status st = KILN_OK;
            if (at->g) st = check_kernels(p, at->g, depth + 1, name, err);
            for (int32_t k = 0; st == KILN_OK && at->graphs && k < at->n; k++)
                if (at->graphs[k]) st = check_kernels(p, at->graphs[k], depth + 1, name, err);
            if (st != KILN_OK) return st;
        }
    }
    return KILN_OK;
}

/* A cuda engine: the GPU and library versions it records against the ones here. */
static kiln_status check_gpu(const engine_plan *p, const engine_read_options *o, const char *name, kiln_error *err) {
    const engine_meta *m = &p->meta;
    const char *model = m->source_model && *m->source_model ? m->source_model : "MODEL.onnx";
    cuda_device_info built;
    kiln_error e = {0};
    kiln_status st = cuda_info_from_meta(m->gpu_arch, m->cuda_version, m->cublas_version, m->cudnn_version, &built, &e);
    if (st != KILN_OK) {
        kiln_err_set(err, st == KILN_ERR_UNSUPPORTED ? KILN_ERR_FORMAT : st,
                     "engine '%s': the header says cuda but the META section's GPU fields do not parse: %s", name,
                     kiln_err_msg(&e));
        kiln_err_clear(&e);
        return err ? err->code : KILN_ERR_FORMAT;
    }
    if (o->gpu_missing)
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "engine '%s' was built for the cuda backend on %s, but %s\n"
                            "hint: run it on a machine with that GPU, or build an engine for this one: kiln exec "
                            "--onnx=%s --backend=cpu --saveEngine=%s",
                            name, m->gpu_arch, o->gpu_missing, model, name);
    if (!o->gpu) return KILN_OK;
    st = cuda_info_compat(&built, o->gpu, &e);
    if (st != KILN_OK) {
        /* cuda_info_compat's message is "...\nhint: ...": name the engine and the command */
        const char *msg = kiln_err_msg(&e);
        const char *hint = strstr(msg, "\nhint:");
        kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                     "engine '%s' cannot run on this GPU: %.*s\nhint: rebuild the engine here with: kiln exec "
                     "--onnx=%s --backend=cuda --saveEngine=%s%s%s",
                     name, hint ? (int)(hint - msg) : (int)strlen(msg), msg, model, name,
                     (m->precision_flags & ENGINE_PREC_FLAG_FP16) ? " --fp16" : "",
                     (m->precision_flags & ENGINE_PREC_FLAG_NO_TF32) ? " --noTF32" : "");
        kiln_err_clear(&e);
        return KILN_ERR_INCOMPATIBLE;
    }
    return KILN_OK;
}

/* Is this engine usable here? Says what differs and how to rebuild. */
static kiln_status check_compat(const engine_plan *p, const engine_read_options *o, const char *name,
                                kiln_error *err) {
    const engine_header *h = &p->header;
    const char *model = p->meta.source_model && *p->meta.source_model ? p->meta.source_model : "MODEL.onnx";
    bool version_ok = h->ver_major == KILN_VERSION_MAJOR && h->ver_minor == KILN_VERSION_MINOR;
    bool backend_ok = h->backend == ENGINE_BACKEND_CPU || (h->backend == ENGINE_BACKEND_CUDA && KILN_HAVE_CUDA);
    uint64_t missing = h->backend == ENGINE_BACKEND_CPU ? (h->required_features & ~o->cpu_features) : 0;
    if (version_ok && backend_ok && !missing && h->backend == ENGINE_BACKEND_CUDA) return check_gpu(p, o, name, err);
    if (version_ok && backend_ok && !missing) return KILN_OK;
    char built[256], here[256], miss[256];
    engine_features_str(h->required_features, built, sizeof built);
    engine_features_str(engine_isa_features(o->cpu_features), here, sizeof here);
    engine_features_str(missing, miss, sizeof miss);
    if (!backend_ok)
        return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                            "engine '%s' was built for the %s backend, which this kiln %s was built without: load it "
                            "with a kiln built with CUDA, or build a CPU engine with: kiln exec --onnx=%s "
                            "--backend=cpu --saveEngine=%s",
                            name, engine_backend_name(h->backend), KILN_VERSION_STRING, model, name);
    return kiln_err_set(err, KILN_ERR_INCOMPATIBLE,
                        "engine '%s' was built by kiln %u.%u.%u for %s (%s); this is kiln %s on a CPU with %s%s%s%s"
                        "%s: rebuild the engine on this machine with: kiln exec --onnx=%s --saveEngine=%s",
                        name, h->ver_major, h->ver_minor, h->ver_patch, isa_level(h->required_features), built,
                        KILN_VERSION_STRING, here, missing ? " (missing: " : "", missing ? miss : "",
                        missing ? ")" : "",
                        version_ok ? "" : "; engines are only valid for the kiln major.minor that built them",
                        model, name);
}

kiln_status engine_read_mem(const uint8_t *d, size_t size, const engine_read_options *opts, engine_plan **out,
                            kiln_error *err) {
    *out = NULL;
    engine_read_options dflt = {0};
    if (!opts) opts = &dflt;
    const char *name = opts->display_name ? opts->display_name : "<memory>";
    if (!engine_is_engine(d, size)) return foreign(d, size, name, err);
    engine_plan *p = engine_plan_new();
    if (!p) return kiln_err_set(err, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = read_header(d, size, name, p, err);
    const engine_section_entry *meta = find_section(p, ENGINE_SEC_META);
    const engine_section_entry *graph = find_section(p, ENGINE_SEC_GRAPH);
    const engine_section_entry *layers = find_section(p, ENGINE_SEC_LAYERS);
    const engine_section_entry *memplan = find_section(p, ENGINE_SEC_MEMPLAN);
    const engine_section_entry *weights = find_section(p, ENGINE_SEC_WEIGHTS);
    if (st == KILN_OK && !opts->skip_checksums) {
        st = check_crc(d, meta, false, name, err);
        if (st == KILN_OK) st = check_crc(d, layers, false, name, err);
        if (st == KILN_OK) st = check_crc(d, memplan, false, name, err);
    }
    rbuf r;
    if (st == KILN_OK) {
        rb_init(&r, d + meta->offset, (size_t)meta->size, meta->offset, "META", &p->arena, err);
        if (!r_meta(&r, p)) st = err && err->code ? err->code : KILN_ERR_FORMAT;
        if (st != KILN_OK) kiln_err_prefix(err, "engine '%s': ", name);
    }
    if (st == KILN_OK && !opts->skip_compat) st = check_compat(p, opts, name, err);
    if (st == KILN_OK) {
        rb_init(&r, d + layers->offset, (size_t)layers->size, layers->offset, "LAYERS", &p->arena, err);
        if (!r_layers(&r, p)) st = KILN_ERR_FORMAT;
        rb_init(&r, d + memplan->offset, (size_t)memplan->size, memplan->offset, "MEMPLAN", &p->arena, err);
        if (st == KILN_OK && !r_memplan(&r, p)) st = KILN_ERR_FORMAT;
        if (st == KILN_OK && p->mem.n_profiles != p->n_profiles)
            st = kiln_err_set(err, KILN_ERR_FORMAT, "MEMPLAN lists %d profiles but META lists %d", p->mem.n_profiles,
                              p->n_profiles);
        if (st == KILN_OK && p->mem.weights_bytes != weights->size)
            st = kiln_err_set(err, KILN_ERR_FORMAT, "MEMPLAN says %" PRIu64 " weight bytes, the WEIGHTS section has %" PRIu64,
                              p->mem.weights_bytes, weights->size);
        if (st != KILN_OK) kiln_err_prefix(err, "engine '%s': ", name);
    }
    if (st == KILN_OK && !opts->metadata_only) {
        if (!opts->skip_checksums) {
            st = check_crc(d, graph, false, name, err);
            if (st == KILN_OK && !opts->skip_weights_crc && !opts->defer_weights_crc)
                st = check_crc(d, weights, true, name, err);
        }
        if (st == KILN_OK) {
            rb_init(&r, d + graph->offset, (size_t)graph->size, graph->offset, "GRAPH", NULL, err);
            st = engine_read_graph(&r, d + weights->offset, weights->size, &p->model);
            if (st == KILN_OK) {
                const ir_graph *g = p->model->graph;
                for (int32_t i = 0; i < p->n_layers && st == KILN_OK; i++)
                    if (p->layers[i].node >= g->n_nodes)
                        st = kiln_err_set(err, KILN_ERR_FORMAT, "LAYERS: layer '%s' refers to node %d; the graph has %d",
                                          p->layers[i].name, p->layers[i].node, g->n_nodes);
                for (int32_t i = 0; i < p->n_inputs && st == KILN_OK; i++)
                    if (ir_graph_find(g, p->inputs[i].name) == IR_NONE)
                        st = kiln_err_set(err, KILN_ERR_FORMAT, "META lists input '%s', which the graph lacks",
                                          p->inputs[i].name);
                for (int32_t i = 0; i < p->n_outputs && st == KILN_OK; i++)
                    if (ir_graph_find(g, p->outputs[i].name) == IR_NONE)
                        st = kiln_err_set(err, KILN_ERR_FORMAT, "META lists output '%s', which the graph lacks",
                                          p->outputs[i].name);
            }
            if (st != KILN_OK) kiln_err_prefix(err, "engine '%s': ", name);
            if (st == KILN_OK && !opts->skip_compat && p->header.backend == ENGINE_BACKEND_CPU)
                st = check_kernels(p, p->model->graph, 0, name, err);
        }
        /* last, so a plan that failed above never starts a thread */
        if (st == KILN_OK && !opts->skip_checksums && !opts->skip_weights_crc && opts->defer_weights_crc) {
            p->wcheck = weights_check_start(d, weights, name);
            if (!p->wcheck) st = check_crc(d, weights, true, name, err); /* no memory for the state: check now */
        }
    }
    if (st != KILN_OK) {
        engine_plan_free(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}

kiln_status engine_read_file(const char *path, const engine_read_options *opts, engine_plan **out, kiln_error *err) {
    *out = NULL;
    engine_read_options o = opts ? *opts : (engine_read_options){0};
    if (!o.display_name) o.display_name = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kiln_err_set(err, KILN_ERR_IO, "cannot open engine '%s': %s", path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) != 0 || !S_ISREG(stt.st_mode)) {
        close(fd);
        return kiln_err_set(err, KILN_ERR_IO, "engine '%s' is not a regular file", path);
    }
    size_t size = (size_t)stt.st_size;
    void *map = NULL;
    if (size) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kiln_err_set(err, KILN_ERR_IO, "cannot map engine '%s': %s", path, strerror(e));
        }
    }
    close(fd);
    static const uint8_t empty[1];
    kiln_status st = engine_read_mem(map ? map : empty, size, &o, out, err);
    if (st != KILN_OK) {
        engine_unmap(map, size);
        return st;
    }
    engine_plan *p = *out;
    p->map = map;
    p->map_size = size;
    if (p->model) {
        engine_model_adopt_mapping(p->model, map, size);
        p->model_owns_map = true;
    }
    return KILN_OK;
}
