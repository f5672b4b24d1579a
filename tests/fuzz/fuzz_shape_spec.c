/* fuzz_shape_spec.c - libFuzzer target for the trtexec shape-flag parser
 * (--shapes/--minShapes/--optShapes/--maxShapes values) and profile assembly. The input is
 * split at NUL bytes into successive flag values, fed to a profile set in turn (cycling
 * through the flag kinds, with a --profile switch every fourth value), so both spec
 * parsing and the min/opt/max bookkeeping see hostile text. A crash, leak or sanitizer
 * report is a bug; a clean error is the expected outcome for junk. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "build/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;

    arena a;
    arena_init(&a);
    build_shape_entry *entries = NULL;
    int32_t n = 0;
    kiln_error err = {0};
    (void)build_shape_spec_parse(text, &a, &entries, &n, &err);
    kiln_err_clear(&err);
    arena_free(&a);

    static const build_shape_flag flags[] = {BUILD_FLAG_MIN, BUILD_FLAG_OPT, BUILD_FLAG_MAX, BUILD_FLAG_SHAPES};
    build_profile_set set;
    build_profiles_init(&set);
    size_t start = 0;
    int k = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && text[i] != 0) continue;
        if (k % 4 == 3) (void)build_profiles_select(&set, k / 4, &err);
        kiln_err_clear(&err);
        (void)build_profiles_add(&set, flags[k % 4], text + start, &err);
        kiln_err_clear(&err);
        start = i + 1;
        k++;
    }
    build_profiles_finish(&set);
    strbuf sb;
    sb_init(&sb);
    build_profiles_json(&set, &sb);
    sb_free(&sb);
    build_profiles_free(&set);
    free(text);
    return 0;
}
