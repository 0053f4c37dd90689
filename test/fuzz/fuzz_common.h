/* Shared by the fuzz targets and the corpus generator: the tensors that the
 * fuzzed session holds (ids 1..FG_N_TENSORS, in this order), so seeds can
 * name real params. */
#ifndef SL_FUZZ_COMMON_H
#define SL_FUZZ_COMMON_H

#include "tensor.h"

#define FG_N_TENSORS 8

static const sl_shape fg_tensors[FG_N_TENSORS] = {
    {.dtype = SL_F32, .ndim = 1, .dims = {4}},          /* 1: vector */
    {.dtype = SL_F32, .ndim = 2, .dims = {2, 3}},       /* 2: matrix */
    {.dtype = SL_F32, .ndim = 2, .dims = {3, 2}},       /* 3: matrix */
    {.dtype = SL_I32, .ndim = 1, .dims = {2}},          /* 4: labels */
    {.dtype = SL_F32, .ndim = 4, .dims = {1, 2, 4, 4}}, /* 5: NCHW image */
    {.dtype = SL_F32, .ndim = 4, .dims = {3, 2, 3, 3}}, /* 6: conv filter */
    {.dtype = SL_F32, .ndim = 1, .dims = {2}},          /* 7: per channel */
    {.dtype = SL_F32, .ndim = 0, .dims = {0}},          /* 8: scalar */
};

/* Record kinds of fuzz_request's input: [kind, arg, len lo, len hi, payload]. */
enum fr_kind {
    FR_RAW = 0,        /* the request as decoded */
    FR_STAMP = 1,      /* session id and token of slot arg & 3 */
    FR_CROSS = 2,      /* id of slot arg & 3, token of slot (arg >> 2) & 3 */
    FR_OOM = 3,        /* stamped, with host allocation (arg >> 2) + 1 failing */
    FR_PIPE_GONE = 4,  /* connection (arg & 1) + 1 drops (no payload needed) */
    FR_BAD_TOKEN = 5,  /* id of slot arg & 3, its token + 1 */
    FR_KIND_COUNT = 8, /* kinds 6, 7 act as FR_RAW */
};
/* Kind bit 3 picks the connection a request arrives on: 0 -> 1, 1 -> 2. */
#define FR_PIPE_BIT 0x08

#endif
