/* dtype.c - see dtype.h. */
#include "core/dtype.h"

#include <string.h>

static const struct { const char *name; int bits; } dtype_info[KILN_DTYPE_COUNT] = {
#define KILN_DTYPE_INFO(suffix, num, name, bits) [num] = {name, bits},
    KILN_DTYPE_LIST(KILN_DTYPE_INFO)
#undef KILN_DTYPE_INFO
};

bool kiln_dtype_valid(int dtype) { return dtype > 0 && dtype < KILN_DTYPE_COUNT; }

const char *kiln_dtype_name(kiln_dtype dtype) {
    if ((int)dtype < 0 || dtype >= KILN_DTYPE_COUNT) return "invalid";
    return dtype_info[dtype].name;
}

int kiln_dtype_bits(kiln_dtype dtype) {
    if ((int)dtype < 0 || dtype >= KILN_DTYPE_COUNT) return 0;
    return dtype_info[dtype].bits;
}

bool kiln_dtype_nbytes(kiln_dtype dtype, uint64_t count, uint64_t *out_bytes) {
    int bits = kiln_dtype_bits(dtype);
    if (bits == 0) return false;
    if (bits >= 8) {
        uint64_t sz = (uint64_t)bits / 8;
        if (count > UINT64_MAX / sz) return false;
        *out_bytes = count * sz;
    } else {
        uint64_t per_byte = 8u / (uint64_t)bits;
        *out_bytes = count / per_byte + (count % per_byte ? 1 : 0);
    }
    return true;
}

bool kiln_dtype_is_float(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_DOUBLE:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_FLOAT8E4M3FN: case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2: case KILN_DTYPE_FLOAT8E5M2FNUZ: case KILN_DTYPE_FLOAT4E2M1:
    case KILN_DTYPE_FLOAT8E8M0:
        return true;
    default:
        return false;
    }
}

bool kiln_dtype_is_signed(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32: case KILN_DTYPE_INT64:
    case KILN_DTYPE_INT4: case KILN_DTYPE_INT2:
        return true;
    default:
        return false;
    }
}

bool kiln_dtype_is_integer(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
    case KILN_DTYPE_UINT4: case KILN_DTYPE_UINT2:
        return true;
    default:
        return kiln_dtype_is_signed(d);
    }
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kiln_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return u2f(sign | 0x7F800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t kiln_fp32_to_fp16(float f) {
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xFF;
    uint32_t man = u & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1F) return (uint16_t)(sign | 0x7C00); /* overflow -> inf */
    if (e <= 0) {
        if (e < -10) return sign; /* underflow -> signed zero */
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into inf: correct */
    return (uint16_t)(sign | half);
}

float kiln_bf16_to_fp32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t kiln_fp32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFF)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)((u + rounding) >> 16);
}
