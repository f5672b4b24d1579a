/* dtype.h - element types, numbered exactly as ONNX's TensorProto.DataType.
 *
 * The numbers are ONNX's and are also written into engine files, so they never change;
 * new types are only appended. Sub-byte types (int4, uint4, float4, int2, uint2) are
 * stored packed, so byte sizes are computed with kiln_dtype_nbytes(), never with
 * count * size. fp16/bf16 conversions live here because every module needs them.
 */
#ifndef KILN_CORE_DTYPE_H
#define KILN_CORE_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

/* X(enum suffix, onnx number, name as ONNX spells it, bits per element) */
#define KILN_DTYPE_LIST(X)                     \
    X(UNDEFINED, 0, "undefined", 0)            \
    X(FLOAT, 1, "float32", 32)                 \
    X(UINT8, 2, "uint8", 8)                    \
    X(INT8, 3, "int8", 8)                      \
    X(UINT16, 4, "uint16", 16)                 \
    X(INT16, 5, "int16", 16)                   \
    X(INT32, 6, "int32", 32)                   \
    X(INT64, 7, "int64", 64)                   \
    X(STRING, 8, "string", 0)                  \
    X(BOOL, 9, "bool", 8)                      \
    X(FLOAT16, 10, "float16", 16)              \
    X(DOUBLE, 11, "float64", 64)               \
    X(UINT32, 12, "uint32", 32)                \
    X(UINT64, 13, "uint64", 64)                \
    X(COMPLEX64, 14, "complex64", 64)          \
    X(COMPLEX128, 15, "complex128", 128)       \
    X(BFLOAT16, 16, "bfloat16", 16)            \
    X(FLOAT8E4M3FN, 17, "float8e4m3fn", 8)     \
    X(FLOAT8E4M3FNUZ, 18, "float8e4m3fnuz", 8) \
    X(FLOAT8E5M2, 19, "float8e5m2", 8)         \
    X(FLOAT8E5M2FNUZ, 20, "float8e5m2fnuz", 8) \
    X(UINT4, 21, "uint4", 4)                   \
    X(INT4, 22, "int4", 4)                     \
    X(FLOAT4E2M1, 23, "float4e2m1", 4)         \
    X(FLOAT8E8M0, 24, "float8e8m0", 8)         \
    X(UINT2, 25, "uint2", 2)                   \
    X(INT2, 26, "int2", 2)

typedef enum kiln_dtype {
#define KILN_DTYPE_ENUM(suffix, num, name, bits) KILN_DTYPE_##suffix = num,
    KILN_DTYPE_LIST(KILN_DTYPE_ENUM)
#undef KILN_DTYPE_ENUM
    KILN_DTYPE_COUNT
} kiln_dtype;

/* True for the numbers listed above. */
bool kiln_dtype_valid(int dtype);
/* "float32", "int64", ...; "dtype(N)" style text is the caller's job for invalid ones. */
const char *kiln_dtype_name(kiln_dtype dtype);
/* Bits per element (0 for strings and undefined). */
int kiln_dtype_bits(kiln_dtype dtype);
/* Bytes to hold `count` packed elements; false on overflow or for string/undefined. */
bool kiln_dtype_nbytes(kiln_dtype dtype, uint64_t count, uint64_t *out_bytes);
bool kiln_dtype_is_float(kiln_dtype dtype);   /* any floating type incl. fp8/fp4 */
bool kiln_dtype_is_integer(kiln_dtype dtype); /* signed or unsigned ints incl. 2/4-bit */
bool kiln_dtype_is_signed(kiln_dtype dtype);

/* IEEE half and bfloat16 conversions (round to nearest even, NaN preserved). */
float kiln_fp16_to_fp32(uint16_t h);
uint16_t kiln_fp32_to_fp16(float f);
float kiln_bf16_to_fp32(uint16_t b);
uint16_t kiln_fp32_to_bf16(float f);

#endif
