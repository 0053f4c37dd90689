/* bf16 and f16 on cpu: the cast kernel, the conversion path that runs any
 * half-capable op on its f32 kernel, and the choice of oneDNN's native bf16
 * kernels (cpu.h, sl_cpu_half_op).
 *
 * The conversion path is exact up to the one rounding the registry asks
 * for (sl_op_def.accum = f32): widening bf16 or f16 to f32 loses nothing,
 * the f32 kernel accumulates in f32 (or double), and each half output is
 * rounded once, to nearest even (half.h). It is what every x86-64 runs,
 * and what f16 always runs: no x86 unit multiplies f16 with f32 sums
 * short of AVX512-FP16, which oneDNN 2.6 does not use for these ops.
 *
 * bf16 matmuls and convolutions can run on oneDNN's bf16 kernels where the
 * processor has AVX512-BF16 or AMX: they read bf16 (half the bytes),
 * multiply in bf16 with f32 sums and round the output once, which is the
 * same contract; the sums' order differs from the f32 kernel's, as it does
 * between two f32 kernels. Which path runs (SALUS_CPU_BF16, read once):
 *   native   oneDNN's bf16 kernels wherever the processor has them;
 *   convert  the conversion path everywhere;
 *   auto     (the default) native where the processor has AMX, else
 *            convert.
 * Why AVX512-BF16 alone is not enough by default: on the development VM
 * (an AVX512-BF16 Xeon, AMX not exposed) one vdpbf16ps retires at a
 * quarter of the rate of an f32 FMA, so its two multiply-adds per lane
 * give half the f32 rate, and oneDNN 2.6's bf16 kernels measured slower
 * than its f32 ones, one thread: matmul 512^3 3.2-8 ms against 2.1-2.3,
 * conv2d 32x64x28x28 by 64 3x3 46-50 ms against 33. AMX tiles multiply
 * bf16 an order of magnitude faster than f32 FMAs. Without either oneDNN
 * would emulate bf16, slower still. */
#include "cpu.h"
#include "dnnl_cache.h"

#include "half.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Alignment of each f32 copy, and of what is left of a workspace after
 * them: the device contract's workspace alignment. */
#define COPY_ALIGN 256
/* Elements converted per step when neither side is f32 (bf16 <-> f16):
 * through an f32 buffer on the stack. */
#define CHUNK 512

/* SALUS_CPU_BF16's values, and what the processor has (oneDNN's view, so
 * that DNNL_MAX_CPU_ISA, which caps what its kernels use, caps this too). */
enum { PATH_AUTO, PATH_NATIVE, PATH_CONVERT };
static atomic_int forced = -1; /* sl_cpu_force_bf16_path; -1: none */
static int env_path;
static bool isa_bf16, isa_amx;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void probe(void)
{
    unsigned isa = (unsigned) dnnl_get_effective_cpu_isa();
    unsigned bf16 = (unsigned) dnnl_cpu_isa_avx512_core_bf16;
    unsigned amx = (unsigned) dnnl_cpu_isa_avx512_core_amx;
    isa_bf16 = (isa & bf16) == bf16;
    isa_amx = (isa & amx) == amx;
    const char *v = getenv("SALUS_CPU_BF16");
    if (!v || !*v || !strcmp(v, "auto"))
        env_path = PATH_AUTO;
    else if (!strcmp(v, "native"))
        env_path = PATH_NATIVE;
    else if (!strcmp(v, "convert"))
        env_path = PATH_CONVERT;
    else
        sl_log_warn("cpu.half.env", "SALUS_CPU_BF16=%s is not auto, native or convert: using auto",
                    v);
}

bool sl_cpu_bf16_native(void)
{
    pthread_once(&once, probe);
    int f = atomic_load(&forced);
    int path = f >= 0 ? f : env_path;
    return isa_bf16 && (path == PATH_NATIVE || (path == PATH_AUTO && isa_amx));
}

bool sl_cpu_bf16_capable(void)
{
    pthread_once(&once, probe);
    return isa_bf16;
}

void sl_cpu_force_bf16_path(int path)
{
    atomic_store(&forced, path >= 0 && path <= PATH_CONVERT ? path : -1);
}

static bool is_half(unsigned dtype)
{
    return dtype == SL_BF16 || dtype == SL_F16;
}

bool sl_cpu_call_half(const sl_op_call *c)
{
    for (unsigned i = 0; i < c->n_in; i++)
        if (is_half(c->in[i].shape.dtype))
            return true;
    for (unsigned i = 0; i < c->n_out; i++)
        if (is_half(c->out[i].shape.dtype))
            return true;
    return false;
}

static bool is_matmul(unsigned op)
{
    return op == SL_OP_MATMUL || op == SL_OP_MATMUL_ACC || op == SL_OP_BATCH_MATMUL;
}

static bool is_conv(unsigned op)
{
    return op == SL_OP_CONV2D || op == SL_OP_CONV2D_GRAD_INPUT || op == SL_OP_CONV2D_GRAD_FILTER;
}

/* The bf16 calls that run on oneDNN's bf16 kernels. The weight gradient
 * over few input channels stays on the conversion path: conv_gemm.c's
 * im2col route, which oneDNN's blocked kernels lose to there, is f32. */
static bool runs_native(const sl_op_call *c)
{
    if (c->in[0].shape.dtype != SL_BF16 || !sl_cpu_bf16_native())
        return false;
    if (is_matmul(c->op))
        return true;
    return is_conv(c->op) &&
           !(c->op == SL_OP_CONV2D_GRAD_FILTER && sl_cpu_conv_grad_filter_by_gemm(c));
}

bool sl_cpu_call_uses_dnnl(const sl_op_call *c)
{
    if (sl_cpu_op_uses_dnnl(c->op))
        return true;
    return is_matmul(c->op) && c->n_in > 0 && runs_native(c);
}

unsigned sl_cpu_op_dtypes(sl_device *dev, unsigned op)
{
    (void) dev;
    const sl_op_def *d = sl_op_get(op);
    if (!d)
        return 0;
    sl_op_call probe = {.op = (uint16_t) op, .n_in = d->n_in, .n_out = d->n_out};
    return sl_cpu_op_check(&probe) == SL_OK ? d->dtypes | SL_DTS(SL_F32) : SL_DTS(SL_F32);
}

/* ---- conversions, split across the team ---- */

struct convert_job {
    unsigned from, to; /* dtypes */
    const void *src;
    void *dst;
    uint64_t n;
};

/* Elements [i0, i1) of j: bulk conversions to or from f32, or through an
 * f32 chunk between the two halves (widening is exact, so the result is
 * the one rounding of the source value). */
static void convert_range(const struct convert_job *j, uint64_t i0, uint64_t i1)
{
    size_t fs = sl_dtype_size(j->from), ts = sl_dtype_size(j->to);
    const char *src = (const char *) j->src + i0 * fs;
    char *dst = (char *) j->dst + i0 * ts;
    size_t n = (size_t) (i1 - i0);
    if (j->from == j->to) {
        memmove(dst, src, n * fs);
    } else if (j->to == SL_F32) {
        sl_half_to_f32(j->from, src, (float *) dst, n);
    } else if (j->from == SL_F32) {
        sl_half_from_f32(j->to, (const float *) src, dst, n);
    } else {
        float buf[CHUNK];
        for (size_t k = 0; k < n; k += CHUNK) {
            size_t m = n - k < CHUNK ? n - k : CHUNK;
            sl_half_to_f32(j->from, src + k * fs, buf, m);
            sl_half_from_f32(j->to, buf, dst + k * ts, m);
        }
    }
}

/* Part `part`, cut on 64-element boundaries: 128 bytes of a half tensor,
 * so two threads never write one cache line. */
static void convert_part(void *arg, int part, int parts)
{
    const struct convert_job *j = arg;
    uint64_t blocks = (j->n + 63) / 64;
    uint64_t i0 = blocks * (uint64_t) part / (uint64_t) parts * 64;
    uint64_t i1 = blocks * (uint64_t) (part + 1) / (uint64_t) parts * 64;
    convert_range(j, i0, i1 < j->n ? i1 : j->n);
}

static void convert(const sl_cpu_exec *x, unsigned from, unsigned to, const void *src, void *dst,
                    uint64_t n)
{
    struct convert_job j = {from, to, src, dst, n};
    if (x->threads > 1 && n >= SL_CPU_TEAM_MIN_ELEMS)
        sl_cpu_parallel(x->threads, convert_part, &j);
    else
        convert_range(&j, 0, n);
}

int sl_cpu_cast(sl_cpu_exec *x, const sl_op_call *c)
{
    convert(x, c->in[0].shape.dtype, c->out[0].shape.dtype, c->in[0].data, c->out[0].data,
            sl_shape_elems(&c->in[0].shape));
    return SL_OK;
}

/* ---- the conversion path ---- */

/* Inputs an op reads for their shape alone (the registry's docs say "not
 * read"): no f32 copy is made of them. */
static bool reads_input(unsigned op, unsigned i)
{
    switch (op) {
    case SL_OP_FILL:
        return false;
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
        return i != 2;
    case SL_OP_AVGPOOL_GRAD:
        return i != 1;
    default:
        return true;
    }
}

/* Where each tensor's f32 copy lies in the copies' region: an offset, or
 * -1 for a tensor used as it is (f32, i32, or not read). */
struct plan {
    int64_t in[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
    bool widen[SL_OP_MAX_IN]; /* copy in[i] into its offset (not a shared one) */
    size_t bytes;
};

static size_t f32_bytes(const sl_shape *s)
{
    return sl_align_up((size_t) sl_shape_elems(s) * sizeof(float), COPY_ALIGN);
}

static void make_plan(const sl_op_call *c, struct plan *p)
{
    const sl_op_def *def = sl_op_get(c->op);
    memset(p, 0, sizeof *p);
    for (unsigned i = 0; i < c->n_in; i++) {
        p->in[i] = -1;
        const sl_tensor_ref *t = &c->in[i];
        if (!is_half(t->shape.dtype) || !reads_input(c->op, i))
            continue;
        /* the same tensor twice (add(a, a)) is widened once, unless the
         * op writes it */
        for (unsigned k = 0; k < i && p->in[i] < 0; k++)
            if (p->widen[k] && c->in[k].data == t->data &&
                sl_shape_equal(&c->in[k].shape, &t->shape) && !(def->mutates & (1u << i)) &&
                !(def->mutates & (1u << k)))
                p->in[i] = p->in[k];
        if (p->in[i] >= 0)
            continue;
        p->in[i] = (int64_t) p->bytes;
        p->widen[i] = true;
        p->bytes += f32_bytes(&t->shape);
    }
    for (unsigned o = 0; o < c->n_out; o++) {
        p->out[o] = -1;
        const sl_tensor_ref *t = &c->out[o];
        if (!is_half(t->shape.dtype))
            continue;
        /* in-place execution (salusd aliased out0 to an input): the f32
         * kernel, correct in place, runs in place on the input's copy */
        for (unsigned i = 0; o == 0 && i < c->n_in && p->out[o] < 0; i++)
            if ((def->inplace & (1u << i)) && p->in[i] >= 0 && c->in[i].data == t->data &&
                c->in[i].shape.dtype == t->shape.dtype)
                p->out[o] = p->in[i];
        if (p->out[o] >= 0)
            continue;
        p->out[o] = (int64_t) p->bytes;
        p->bytes += f32_bytes(&t->shape);
    }
}

static int run_through_f32(sl_cpu_exec *x, const sl_op_call *c)
{
    const sl_op_def *def = sl_op_get(c->op);
    struct plan p;
    make_plan(c, &p);
    char *base = NULL;
    int rc = p.bytes ? sl_cpu_front_region(x, c, "f32 copies of its half-precision tensors",
                                           p.bytes, &x->half_buf, &x->half_bytes, &base)
                     : SL_OK;
    if (rc)
        return rc;
    sl_op_call f = *c;
    for (unsigned i = 0; i < c->n_in; i++) {
        if (is_half(c->in[i].shape.dtype))
            f.in[i].shape.dtype = SL_F32; /* not read when it has no copy */
        if (p.in[i] < 0)
            continue;
        f.in[i].data = base + p.in[i];
        /* a copy in the workspace is not the tensor in_version speaks of:
         * the next op's copy may sit at the same address, so nothing may be
         * kept from it (oneDNN's reordered weights) */
        f.in_version[i] = 0;
        if (p.widen[i])
            convert(x, c->in[i].shape.dtype, SL_F32, c->in[i].data, f.in[i].data,
                    sl_shape_elems(&c->in[i].shape));
    }
    for (unsigned o = 0; o < c->n_out; o++)
        if (p.out[o] >= 0) {
            f.out[o].shape.dtype = SL_F32;
            f.out[o].data = base + p.out[o];
        }
    /* the kernel's own scratch (oneDNN's) comes after the copies */
    void *ws = x->workspace;
    size_t ws_bytes = x->workspace_bytes;
    if (ws) {
        x->workspace = (char *) ws + p.bytes;
        x->workspace_bytes = ws_bytes - p.bytes;
    }
    rc = sl_cpu_run_op_f32(x, &f);
    x->workspace = ws;
    x->workspace_bytes = ws_bytes;
    if (rc)
        return rc; /* the op's outputs stay as they were */
    for (unsigned i = 0; i < c->n_in; i++)
        if ((def->mutates & (1u << i)) && p.in[i] >= 0)
            convert(x, SL_F32, c->in[i].shape.dtype, f.in[i].data, c->in[i].data,
                    sl_shape_elems(&c->in[i].shape));
    for (unsigned o = 0; o < c->n_out; o++)
        if (p.out[o] >= 0)
            convert(x, SL_F32, c->out[o].shape.dtype, f.out[o].data, c->out[o].data,
                    sl_shape_elems(&c->out[o].shape));
    return SL_OK;
}

int sl_cpu_half_op(sl_cpu_exec *x, const sl_op_call *c)
{
    switch (c->op) {
    /* these move elements of any size as they are */
    case SL_OP_FILL:
    case SL_OP_COPY:
    case SL_OP_RESHAPE:
    case SL_OP_TRANSPOSE:
    case SL_OP_SLICE:
    case SL_OP_CONCAT:
    case SL_OP_GATHER:
    case SL_OP_INDEX_WRITE:
        return sl_cpu_run_op_f32(x, c);
    default:
        break;
    }
    if (runs_native(c)) {
        int rc = is_matmul(c->op) ? sl_cpu_dnnl_matmul(x, c) : sl_cpu_dnnl_op(x, c);
        /* oneDNN without a bf16 kernel for these shapes: the conversion
         * path computes the same (it logged the refusal) */
        if (rc != SL_EUNSUPPORTED)
            return rc;
    }
    return run_through_f32(x, c);
}
