/* cpu_lowp.c - encode/decode of float8/float4 and packed 4-/2-bit integers (see cpu_lowp.h).
 *
 * The small float formats are described by a table (exponent and mantissa bits, bias,
 * largest finite value, whether they have inf, and the "fnuz" flavour whose only NaN
 * is 0x80 and which has no negative zero); one encoder and one decoder serve them all.
 * Encoding rounds the magnitude to the format's quantum at its exponent with rint()
 * (ties to even), then checks overflow against the largest finite value.
 */
#include "backends/cpu/cpu_lowp.h"

#include <math.h>
#include <stddef.h>

typedef struct fmt {
    int ebits, mbits, bias;
    double maxv;
    bool has_inf, fnuz, has_nan;
} fmt;

static const fmt *fmt_of(kiln_dtype d) {
    static const fmt e4m3fn = {4, 3, 7, 448.0, false, false, true};
    static const fmt e4m3fnuz = {4, 3, 8, 240.0, false, true, true};
    static const fmt e5m2 = {5, 2, 15, 57344.0, true, false, true};
    static const fmt e5m2fnuz = {5, 2, 16, 57344.0, false, true, true};
    static const fmt e2m1 = {2, 1, 1, 6.0, false, false, false};
    switch (d) {
    case KILN_DTYPE_FLOAT8E4M3FN: return &e4m3fn;
    case KILN_DTYPE_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case KILN_DTYPE_FLOAT8E5M2: return &e5m2;
    case KILN_DTYPE_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    case KILN_DTYPE_FLOAT4E2M1: return &e2m1;
    default: return NULL;
    }
}

bool cpu_lowp_dtype(kiln_dtype d) {
    return fmt_of(d) || d == KILN_DTYPE_FLOAT8E8M0 || d == KILN_DTYPE_INT4 || d == KILN_DTYPE_UINT4 ||
           d == KILN_DTYPE_INT2 || d == KILN_DTYPE_UINT2;
}

static int bits_of(kiln_dtype d) { return kiln_dtype_bits(d); }

static unsigned get_code(const void *data, kiln_dtype d, uint64_t i) {
    const uint8_t *p = data;
    int b = bits_of(d);
    if (b == 8) return p[i];
    uint64_t per = (uint64_t)(8 / b);
    unsigned shift = (unsigned)((i % per) * (uint64_t)b);
    return (p[i / per] >> shift) & ((1u << b) - 1);
}

static void put_code(void *data, kiln_dtype d, uint64_t i, unsigned code) {
    uint8_t *p = data;
    int b = bits_of(d);
    if (b == 8) {
        p[i] = (uint8_t)code;
        return;
    }
    uint64_t per = (uint64_t)(8 / b);
    unsigned shift = (unsigned)((i % per) * (uint64_t)b), mask = (1u << b) - 1;
    p[i / per] = (uint8_t)((p[i / per] & ~(mask << shift)) | ((code & mask) << shift));
}

static double decode(const fmt *f, unsigned code) {
    int total = 1 + f->ebits + f->mbits;
    unsigned sign = (code >> (total - 1)) & 1;
    unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1);
    unsigned m = code & ((1u << f->mbits) - 1);
    if (f->fnuz && code == (1u << (total - 1))) return __builtin_nan("");
    if (f->has_nan && !f->fnuz) {
        unsigned emax = (1u << f->ebits) - 1;
        if (f->has_inf && e == emax) return m ? __builtin_nan("") : (sign ? -__builtin_inf() : __builtin_inf());
        if (!f->has_inf && e == emax && m == (1u << f->mbits) - 1) return __builtin_nan("");
    }
    double v = e == 0 ? ldexp((double)m, 1 - f->bias - f->mbits) : ldexp(1.0 + m / (double)(1u << f->mbits), (int)e - f->bias);
    return sign ? -v : v;
}

static unsigned encode(const fmt *f, double v, bool saturate) {
    int total = 1 + f->ebits + f->mbits;
    unsigned sbit = 1u << (total - 1);
    /* the reference's NaNs: e4m3fn 0x7F, e5m2 0x7E, fnuz 0x80 */
    unsigned nan_code = f->fnuz ? sbit : f->has_inf ? (sbit - 2) : (sbit - 1);
    if (v != v) return f->has_nan ? nan_code : sbit; /* float4 has no NaN: the reference writes -0 */
    unsigned sign = signbit(v) ? sbit : 0;
    unsigned ovf_nan = f->fnuz ? nan_code : (sign | nan_code); /* overflow without saturation keeps the sign */
    double a = fabs(v);
    int emin = 1 - f->bias;
    unsigned max_code;
    {
        /* largest finite: encode maxv exactly */
        int ex;
        double m = frexp(f->maxv, &ex);
        ex -= 1;
        unsigned mant = (unsigned)((m * 2 - 1) * (1u << f->mbits) + 0.5);
        max_code = ((unsigned)(ex + f->bias) << f->mbits) | mant;
    }
    unsigned inf_code = ((1u << f->ebits) - 1) << f->mbits;
    if (isinf(a)) {
        if (saturate) return sign | max_code;
        return f->has_inf ? (sign | inf_code) : f->has_nan ? ovf_nan : (sign | max_code);
    }
    int ex;
    frexp(a, &ex);
    ex -= 1; /* a = 1.x * 2^ex */
    int qexp = (ex < emin ? emin : ex) - f->mbits;
    double r = rint(ldexp(a, -qexp));
    double rv = ldexp(r, qexp);
    if (rv > f->maxv) {
        if (saturate) return sign | max_code;
        return f->has_inf ? (sign | inf_code) : f->has_nan ? ovf_nan : (sign | max_code);
    }
    if (rv == 0) return f->fnuz ? 0 : sign;
    if (rv < ldexp(1.0, emin)) return sign | (unsigned)r; /* subnormal: exponent field 0 */
    frexp(rv, &ex);
    ex -= 1;
    unsigned mant = (unsigned)((ldexp(rv, -ex) - 1.0) * (1u << f->mbits) + 0.5);
    return sign | ((unsigned)(ex + f->bias) << f->mbits) | mant;
}

double cpu_lowp_load(const void *data, kiln_dtype d, uint64_t i) {
    unsigned c = get_code(data, d, i);
    const fmt *f = fmt_of(d);
    if (f) return decode(f, c);
    switch (d) {
    case KILN_DTYPE_FLOAT8E8M0: return c == 0xFF ? __builtin_nan("") : ldexp(1.0, (int)c - 127);
    case KILN_DTYPE_INT4: return (double)((int)(c ^ 8u) - 8);
    case KILN_DTYPE_INT2: return (double)((int)(c ^ 2u) - 2);
    default: return (double)c; /* UINT4, UINT2 */
    }
}

static unsigned encode_e8m0(double v, bool saturate, cpu_round_mode rm) {
    if (v != v) return 0xFF;
    double a = fabs(v);
    if (isinf(a)) return saturate ? 0xFE : 0xFF;
    if (a == 0) return 0;
    int ex;
    double m = frexp(a, &ex); /* a = m * 2^ex, m in [0.5, 1) */
    ex -= 1;                  /* a = (2m) * 2^ex */
    bool exact = m == 0.5;
    if (!exact && (rm == CPU_ROUND_UP || (rm == CPU_ROUND_NEAREST && 2 * m >= 1.5))) ex += 1;
    int code = ex + 127;
    if (code < 0) return 0;
    if (code > 254) return saturate ? 0xFE : 0xFF;
    return (unsigned)code;
}

void cpu_lowp_store(void *data, kiln_dtype d, uint64_t i, double v, bool saturate, cpu_round_mode rm) {
    const fmt *f = fmt_of(d);
    unsigned code;
    if (f) {
        code = encode(f, v, saturate);
    } else if (d == KILN_DTYPE_FLOAT8E8M0) {
        code = encode_e8m0(v, saturate, rm);
    } else {
        /* integers wrap like a C cast through int64 */
        int64_t w = v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
        code = (unsigned)((uint64_t)w & 0xFu);
    }
    put_code(data, d, i, code);
}
