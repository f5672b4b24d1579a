/* cpu_registry.c - the table of CPU kernels built from kernels.def, and lookup by op. */
#include <stdarg.h>
#include <string.h>

#include "backends/cpu/cpu_kernel.h"
#include "core/strbuf.h"

typedef struct kernel_entry {
    const char *domain;
    const char *op_type;
    int64_t since;
    cpu_kernel_fn fn;
} kernel_entry;

static const kernel_entry kernel_table[] = {
#define K(domain, op_type, since_opset, fn) {domain, op_type, since_opset, fn},
#include "backends/cpu/kernels.def"
#undef K
    {NULL, NULL, 0, NULL} /* keeps the array non-empty while kernels.def is */
};
#define N_KERNELS ((int)(sizeof kernel_table / sizeof kernel_table[0]) - 1)

cpu_kernel_fn cpu_kernel_find(const char *domain, const char *op_type, int64_t opset) {
    const kernel_entry *best = NULL;
    for (int i = 0; i < N_KERNELS; i++) {
        const kernel_entry *e = &kernel_table[i];
        if (strcmp(e->op_type, op_type) != 0 || strcmp(e->domain, domain) != 0) continue;
        if (e->since <= opset && (!best || e->since > best->since)) best = e;
    }
    return best ? best->fn : NULL;
}

bool cpu_kernel_exists(const char *domain, const char *op_type) {
    for (int i = 0; i < N_KERNELS; i++)
        if (!strcmp(kernel_table[i].op_type, op_type) && !strcmp(kernel_table[i].domain, domain)) return true;
    return false;
}

void cpu_kernel_foreach(void (*fn)(const char *domain, const char *op_type, void *user), void *user) {
    for (int i = 0; i < N_KERNELS; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(kernel_table[j].op_type, kernel_table[i].op_type) &&
                   !strcmp(kernel_table[j].domain, kernel_table[i].domain);
        if (!seen) fn(kernel_table[i].domain, kernel_table[i].op_type, user);
    }
}

kiln_status cpu_kernel_fail(cpu_kernel_ctx *ctx, kiln_status code, const char *fmt, ...) {
    strbuf sb;
    sb_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&sb, fmt, ap);
    va_end(ap);
    const ir_node *n = ctx ? ctx->node : NULL;
    if (n) kiln_err_set(ctx->err, code, "node '%s' (%s): %s", n->name, n->op_type, sb_cstr(&sb));
    else kiln_err_set(ctx ? ctx->err : NULL, code, "%s", sb_cstr(&sb));
    sb_free(&sb);
    return code;
}
