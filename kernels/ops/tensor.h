/* Shapes and tensor references shared by the op registry and every backend. */
#ifndef SL_TENSOR_H
#define SL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_MAX_DIMS 6
/* Largest element count of one tensor (2^40): keeps every byte size far from
 * uint64 overflow, so sizes computed from validated shapes never wrap. */
#define SL_MAX_ELEMS (1ull << 40)

/* Element types. bf16 and f16 are 16-bit floats stored as their bit
 * patterns (uint16_t): bf16 is f32's upper half (8 exponent bits, 7
 * mantissa bits), f16 IEEE 754 binary16. Values equal the wire's DType. */
enum sl_dtype { SL_F32 = 0, SL_I32 = 1, SL_BF16 = 2, SL_F16 = 3, SL_DTYPE_COUNT };

/* Sets of dtypes, as bit masks (1 << dtype): what an op accepts. */
#define SL_DTS(dt) (1u << (dt))
#define SL_DTS_HALF (SL_DTS(SL_BF16) | SL_DTS(SL_F16))
#define SL_DTS_FLOAT (SL_DTS(SL_F32) | SL_DTS_HALF)

typedef struct sl_shape {
    uint8_t dtype; /* enum sl_dtype */
    uint8_t ndim;  /* 0 = scalar (one element) */
    int64_t dims[SL_MAX_DIMS];
} sl_shape;

/* A tensor as a kernel sees it: device address + shape (dense, row-major). */
typedef struct sl_tensor_ref {
    void *data;
    sl_shape shape;
} sl_tensor_ref;

/* Size in bytes of one element of dtype (0 for an unknown dtype). */
static inline size_t sl_dtype_size(unsigned dtype)
{
    return dtype == SL_F32 || dtype == SL_I32 ? 4 : dtype == SL_BF16 || dtype == SL_F16 ? 2 : 0;
}

/* True for the floating-point dtypes (f32, bf16, f16). */
static inline bool sl_dtype_is_float(unsigned dtype)
{
    return dtype < SL_DTYPE_COUNT && (SL_DTS(dtype) & SL_DTS_FLOAT);
}

/* "f32", "i32", "bf16", "f16"; "dtype?" for an unknown one. */
const char *sl_dtype_name(unsigned dtype);

/* Writes the names of the dtypes in mask (SL_DTS bits), separated by ", ",
 * into buf (always terminated when len > 0); returns buf. */
char *sl_dtypes_str(unsigned mask, char *buf, size_t len);

/* Element count of s. Only meaningful for a shape sl_shape_valid accepted. */
static inline uint64_t sl_shape_elems(const sl_shape *s)
{
    uint64_t n = 1;
    for (unsigned i = 0; i < s->ndim; i++)
        n *= (uint64_t) s->dims[i];
    return n;
}

/* Bytes of a tensor of shape s. Only meaningful for a valid shape. */
static inline uint64_t sl_shape_bytes(const sl_shape *s)
{
    return sl_shape_elems(s) * sl_dtype_size(s->dtype);
}

/* True when dtype is known, ndim <= SL_MAX_DIMS, every dim >= 1 and the
 * element count is at most SL_MAX_ELEMS (checked without overflow). */
bool sl_shape_valid(const sl_shape *s);

/* True when a and b have the same dtype, rank and dims. */
bool sl_shape_equal(const sl_shape *a, const sl_shape *b);

/* Writes "f32[128,784]" into buf (always NUL-terminated); returns buf. */
char *sl_shape_str(const sl_shape *s, char *buf, size_t len);

#endif
