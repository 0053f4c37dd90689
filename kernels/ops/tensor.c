#include "tensor.h"

#include <stdio.h>

bool sl_shape_valid(const sl_shape *s)
{
    if (!s || sl_dtype_size(s->dtype) == 0 || s->ndim > SL_MAX_DIMS)
        return false;
    uint64_t elems = 1;
    for (unsigned i = 0; i < s->ndim; i++) {
        /* Divide instead of multiply: the product could wrap 64 bits. */
        if (s->dims[i] < 1 || (uint64_t) s->dims[i] > SL_MAX_ELEMS / elems)
            return false;
        elems *= (uint64_t) s->dims[i];
    }
    return true;
}

bool sl_shape_equal(const sl_shape *a, const sl_shape *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (unsigned i = 0; i < a->ndim && i < SL_MAX_DIMS; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

const char *sl_dtype_name(unsigned dtype)
{
    static const char *const names[SL_DTYPE_COUNT] = {
        [SL_F32] = "f32", [SL_I32] = "i32", [SL_BF16] = "bf16", [SL_F16] = "f16"};
    return dtype < SL_DTYPE_COUNT ? names[dtype] : "dtype?";
}

char *sl_dtypes_str(unsigned mask, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    buf[0] = '\0';
    size_t at = 0;
    for (unsigned d = 0; d < SL_DTYPE_COUNT && at < len; d++)
        if (mask & SL_DTS(d))
            at += (size_t) snprintf(buf + at, len - at, "%s%s", at ? ", " : "", sl_dtype_name(d));
    return buf;
}

char *sl_shape_str(const sl_shape *s, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    const char *dt = sl_dtype_name(s->dtype);
    size_t at = (size_t) snprintf(buf, len, "%s[", dt);
    unsigned ndim = s->ndim <= SL_MAX_DIMS ? s->ndim : SL_MAX_DIMS;
    for (unsigned i = 0; i < ndim && at < len; i++)
        at += (size_t) snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long) s->dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "%s", s->ndim <= SL_MAX_DIMS ? "]" : ",...]");
    return buf;
}
