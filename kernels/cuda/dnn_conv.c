/* conv2d, conv2d_grad_input and conv2d_grad_filter through cuDNN (NCHW,
 * f32, bf16 or f16, cross-correlation as ONNX defines Conv).
 *
 * Precision. bf16 and f16 tensors are convolved with f32 accumulation
 * (compute type FLOAT) on tensor cores (CUDNN_TENSOR_OP_MATH). f32 uses FMA
 * math unless the call allows TF32 (SL_MATH_CONV_TF32): then tensor-op math,
 * under which cuDNN rounds the operands to TF32 on Ampere and later.
 *
 * Plans. Descriptors and the algorithm of one (op, dtype, math, shapes,
 * attributes) are built once per stream and cached (CONV_CACHE_SIZE plans,
 * least recently used evicted): a training step launches the same
 * convolutions every iteration. The algorithm comes from cuDNN's heuristics
 * (cudnnGet*Algorithm_v7), restricted to direct and GEMM-based algorithms,
 * and in exact f32 to FMA math: FFT and Winograd transforms give up
 * accuracy (about 1e-3 relative; an FFT-tiled filter gradient was seen
 * 5.7e-4 off on an H100), which the cpu backend and the tests hold the op
 * to, and no mode takes an algorithm that converts f32 operands to f16
 * (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION). The first algorithm in the
 * heuristics' order that needs at most WS_PREFERRED_MAX bytes of workspace
 * is used; when the workspace cannot grow to it, the plan falls back to the
 * algorithm needing the least workspace.
 *
 * Asymmetric pads. cuDNN pads symmetrically. When a pad differs between the
 * beginning and the end of an axis, x is copied zero-padded into the head of
 * the stream workspace and cuDNN runs unpadded on that copy (for
 * conv2d_grad_input, cuDNN writes the padded gradient there and the interior
 * is cropped into dx). Costs one copy of x; no attribute combination is
 * refused. */
#include "cuda.h"

#include "ops_geom.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <limits.h>
#include <string.h>

#define CONV_CACHE_SIZE 32
#define WS_PREFERRED_MAX ((size_t) 1 << 30)
#define MAX_ALGOS 16

enum conv_kind { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };

/* Everything a plan depends on. Built zeroed (memcmp-compared). */
struct conv_key {
    int64_t kind;
    int64_t dtype, tensor_op; /* the tensors' sl_dtype; tensor-core math allowed */
    int64_t x[4], w[4];
    int64_t attrs[9];
};

struct conv_plan {
    bool used;
    uint64_t last_use;
    struct conv_key key;
    bool explicit_pad;
    int64_t xp[4];    /* x as cuDNN sees it: padded when explicit_pad */
    size_t pad_bytes; /* workspace head holding the padded x (256-aligned); 0 if none */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    int algo, fallback; /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    size_t algo_ws, fallback_ws;
};

struct sl_cuda_conv_cache {
    struct conv_plan plan[CONV_CACHE_SIZE];
    uint64_t clock;
};

/* What the heuristics offered, whatever the op. */
struct candidates {
    int n;
    int algo[MAX_ALGOS];
    cudnnStatus_t status[MAX_ALGOS];
    size_t memory[MAX_ALGOS];
    cudnnMathType_t math[MAX_ALGOS];
};

static enum conv_kind kind_of(unsigned op)
{
    return op == SL_OP_CONV2D              ? CONV_FWD
           : op == SL_OP_CONV2D_GRAD_INPUT ? CONV_BWD_DATA
                                           : CONV_BWD_FILTER;
}

/* The x, w and y shapes of a call, whichever input or output holds them. */
static void conv_shapes(const sl_op_call *c, const sl_shape **x, const sl_shape **w,
                        const sl_shape **y)
{
    switch (kind_of(c->op)) {
    case CONV_FWD: /* in0 x, in1 w -> y */
        *x = &c->in[0].shape, *w = &c->in[1].shape, *y = &c->out[0].shape;
        break;
    case CONV_BWD_DATA: /* in0 dy, in1 w, in2 x -> dx */
        *x = &c->in[2].shape, *w = &c->in[1].shape, *y = &c->in[0].shape;
        break;
    case CONV_BWD_FILTER: /* in0 dy, in1 x, in2 w -> dw */
        *x = &c->in[1].shape, *w = &c->in[2].shape, *y = &c->in[0].shape;
        break;
    }
}

static bool asymmetric(const sl_window2d *g)
{
    return g->pad_begin[0] != g->pad_end[0] || g->pad_begin[1] != g->pad_end[1];
}

static bool fits_int(const int64_t *d, unsigned n)
{
    uint64_t elems = 1;
    for (unsigned i = 0; i < n; i++) {
        if (d[i] > INT_MAX)
            return false;
        elems *= (uint64_t) d[i]; /* each dim <= INT_MAX and elems <= 2^40 before: no wrap */
        if (elems > INT_MAX)
            return false;
    }
    return true;
}

int sl_cuda_conv_check(const sl_op_call *c)
{
    const sl_shape *x, *w, *y;
    conv_shapes(c, &x, &w, &y);
    sl_window2d g = sl_conv_window(&c->attrs, w);
    int64_t xp[4] = {x->dims[0], x->dims[1], x->dims[2] + g.pad_begin[0] + g.pad_end[0],
                     x->dims[3] + g.pad_begin[1] + g.pad_end[1]};
    if (!fits_int(x->dims, 4) || !fits_int(w->dims, 4) || !fits_int(y->dims, 4) || !fits_int(xp, 4))
        return SL_EUNSUPPORTED; /* cuDNN's legacy API indexes tensors with int */
    return SL_OK;
}

/* ---- plans ---- */

static void plan_destroy(struct conv_plan *p)
{
    if (p->cd)
        (void) SL_CUDNN("cuda.conv", cudnnDestroyConvolutionDescriptor(p->cd));
    if (p->wd)
        (void) SL_CUDNN("cuda.conv", cudnnDestroyFilterDescriptor(p->wd));
    if (p->yd)
        (void) SL_CUDNN("cuda.conv", cudnnDestroyTensorDescriptor(p->yd));
    if (p->xd)
        (void) SL_CUDNN("cuda.conv", cudnnDestroyTensorDescriptor(p->xd));
    memset(p, 0, sizeof *p);
}

static int query_algos(sl_cuda_exec *x, const struct conv_plan *p, struct candidates *out)
{
    int rc = SL_OK, n = 0;
    switch ((enum conv_kind) p->key.kind) {
    case CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        rc = SL_CUDNN("cuda.conv.algo", cudnnGetConvolutionForwardAlgorithm_v7(
                                            x->dnn, p->xd, p->wd, p->cd, p->yd,
                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
        for (int i = 0; rc == SL_OK && i < n && i < MAX_ALGOS; i++) {
            out->algo[i] = (int) perf[i].algo, out->status[i] = perf[i].status;
            out->memory[i] = perf[i].memory, out->math[i] = perf[i].mathType;
        }
        break;
    }
    case CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        rc = SL_CUDNN("cuda.conv.algo", cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                            x->dnn, p->wd, p->yd, p->cd, p->xd,
                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
        for (int i = 0; rc == SL_OK && i < n && i < MAX_ALGOS; i++) {
            out->algo[i] = (int) perf[i].algo, out->status[i] = perf[i].status;
            out->memory[i] = perf[i].memory, out->math[i] = perf[i].mathType;
        }
        break;
    }
    case CONV_BWD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        rc = SL_CUDNN("cuda.conv.algo", cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                            x->dnn, p->xd, p->yd, p->cd, p->wd,
                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
        for (int i = 0; rc == SL_OK && i < n && i < MAX_ALGOS; i++) {
            out->algo[i] = (int) perf[i].algo, out->status[i] = perf[i].status;
            out->memory[i] = perf[i].memory, out->math[i] = perf[i].mathType;
        }
        break;
    }
    }
    out->n = n < MAX_ALGOS ? n : MAX_ALGOS;
    return rc;
}

static int workspace_size(sl_cuda_exec *x, const struct conv_plan *p, int algo, size_t *bytes)
{
    switch ((enum conv_kind) p->key.kind) {
    case CONV_FWD:
        return SL_CUDNN("cuda.conv.ws", cudnnGetConvolutionForwardWorkspaceSize(
                                            x->dnn, p->xd, p->wd, p->cd, p->yd,
                                            (cudnnConvolutionFwdAlgo_t) algo, bytes));
    case CONV_BWD_DATA:
        return SL_CUDNN("cuda.conv.ws", cudnnGetConvolutionBackwardDataWorkspaceSize(
                                            x->dnn, p->wd, p->yd, p->cd, p->xd,
                                            (cudnnConvolutionBwdDataAlgo_t) algo, bytes));
    case CONV_BWD_FILTER:
        return SL_CUDNN("cuda.conv.ws", cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                            x->dnn, p->xd, p->yd, p->cd, p->wd,
                                            (cudnnConvolutionBwdFilterAlgo_t) algo, bytes));
    }
    return SL_EINTERNAL;
}

/* Whether an algorithm may serve a plan: no FFT or Winograd transform of
 * the operands, never a conversion of f32 operands to f16, and FMA math
 * (a direct f32 sum) unless the plan allows tensor cores. */
static bool algo_allowed(enum conv_kind kind, bool tensor_op, int algo, cudnnMathType_t math)
{
    if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
        (!tensor_op && math == CUDNN_TENSOR_OP_MATH))
        return false;
    switch (kind) {
    case CONV_FWD:
        return algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT &&
               algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD &&
               algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case CONV_BWD_DATA:
        return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT &&
               algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
               algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case CONV_BWD_FILTER:
        return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT &&
               algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    }
    return false;
}

static int pick_algo(sl_cuda_exec *x, struct conv_plan *p)
{
    struct candidates cand = {0};
    int rc = query_algos(x, p, &cand);
    if (rc != SL_OK)
        return rc;
    int best = -1, smallest = -1;
    for (int i = 0; i < cand.n; i++) {
        if (cand.status[i] != CUDNN_STATUS_SUCCESS ||
            !algo_allowed((enum conv_kind) p->key.kind, p->key.tensor_op, cand.algo[i],
                          cand.math[i]))
            continue;
        if (best < 0 && cand.memory[i] <= WS_PREFERRED_MAX)
            best = i;
        if (smallest < 0 || cand.memory[i] < cand.memory[smallest])
            smallest = i;
    }
    if (smallest < 0) {
        sl_log_err("cuda.conv.algo", "cuDNN has no %s algorithm here (%d offered)",
                   sl_dtype_name((unsigned) p->key.dtype), cand.n);
        return SL_EUNSUPPORTED;
    }
    if (best < 0)
        best = smallest;
    p->algo = cand.algo[best];
    p->fallback = cand.algo[smallest];
    rc = workspace_size(x, p, p->algo, &p->algo_ws);
    if (rc == SL_OK)
        rc = workspace_size(x, p, p->fallback, &p->fallback_ws);
    return rc;
}

/* cuDNN's element type of a float dtype. */
static cudnnDataType_t dnn_type(unsigned dtype)
{
    return dtype == SL_BF16  ? CUDNN_DATA_BFLOAT16
           : dtype == SL_F16 ? CUDNN_DATA_HALF
                             : CUDNN_DATA_FLOAT;
}

static int plan_build(sl_cuda_exec *x, const sl_op_call *c, struct conv_plan *p)
{
    const sl_shape *xs, *ws, *ys;
    conv_shapes(c, &xs, &ws, &ys);
    cudnnDataType_t t = dnn_type((unsigned) p->key.dtype);
    sl_window2d g = sl_conv_window(&c->attrs, ws);
    const int64_t *xd = xs->dims, *wd = ws->dims, *yd = ys->dims;
    p->explicit_pad = asymmetric(&g);
    memcpy(p->xp, xd, sizeof p->xp);
    int pad_h = (int) g.pad_begin[0], pad_w = (int) g.pad_begin[1];
    if (p->explicit_pad) {
        p->xp[2] += g.pad_begin[0] + g.pad_end[0];
        p->xp[3] += g.pad_begin[1] + g.pad_end[1];
        /* sl_cuda_conv_check: the padded x has at most INT_MAX elements */
        p->pad_bytes = (size_t) sl_align_up(
            (uint64_t) (p->xp[0] * p->xp[1] * p->xp[2] * p->xp[3]) * sl_dtype_size(xs->dtype), 256);
        pad_h = pad_w = 0;
    }

    int rc = SL_CUDNN("cuda.conv", cudnnCreateTensorDescriptor(&p->xd));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv", cudnnCreateTensorDescriptor(&p->yd));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv", cudnnCreateFilterDescriptor(&p->wd));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv", cudnnCreateConvolutionDescriptor(&p->cd));
    if (rc != SL_OK)
        return rc; /* the caller destroys what was created */
    rc = SL_CUDNN("cuda.conv",
                  cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, t, (int) p->xp[0],
                                             (int) p->xp[1], (int) p->xp[2], (int) p->xp[3]));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv",
                      cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, t, (int) yd[0],
                                                 (int) yd[1], (int) yd[2], (int) yd[3]));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv",
                      cudnnSetFilter4dDescriptor(p->wd, t, CUDNN_TENSOR_NCHW, (int) wd[0],
                                                 (int) wd[1], (int) wd[2], (int) wd[3]));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv", cudnnSetConvolution2dDescriptor(
                                       p->cd, pad_h, pad_w, (int) g.stride[0], (int) g.stride[1],
                                       (int) g.dilation[0], (int) g.dilation[1],
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv", cudnnSetConvolutionGroupCount(p->cd, (int) g.group));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.conv",
                      cudnnSetConvolutionMathType(p->cd, p->key.tensor_op ? CUDNN_TENSOR_OP_MATH
                                                                          : CUDNN_FMA_MATH));
    if (rc != SL_OK)
        return rc;

    /* The registry and cuDNN must agree on y's shape; a mismatch is a bug. */
    int n, k, oh, ow;
    rc = SL_CUDNN("cuda.conv",
                  cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &n, &k, &oh, &ow));
    if (rc != SL_OK)
        return rc;
    if (n != yd[0] || k != yd[1] || oh != yd[2] || ow != yd[3]) {
        sl_log_err("cuda.conv", "cuDNN output %dx%dx%dx%d, registry %lldx%lldx%lldx%lld", n, k, oh,
                   ow, (long long) yd[0], (long long) yd[1], (long long) yd[2], (long long) yd[3]);
        return SL_EINTERNAL;
    }
    return pick_algo(x, p);
}

static void make_key(const sl_op_call *c, struct conv_key *key)
{
    const sl_shape *xs, *ws, *ys;
    conv_shapes(c, &xs, &ws, &ys);
    memset(key, 0, sizeof *key);
    key->kind = kind_of(c->op);
    key->dtype = xs->dtype;
    key->tensor_op = xs->dtype != SL_F32 || (c->math & SL_MATH_CONV_TF32);
    memcpy(key->x, xs->dims, sizeof key->x);
    memcpy(key->w, ws->dims, sizeof key->w);
    memcpy(key->attrs, c->attrs.i, sizeof key->attrs);
}

/* The cached plan of c, built (evicting the least recently used) if new. */
static int get_plan(sl_cuda_exec *x, const sl_op_call *c, struct conv_plan **out)
{
    struct sl_cuda_conv_cache *cache = x->conv;
    struct conv_key key;
    make_key(c, &key);
    struct conv_plan *victim = NULL;
    for (int i = 0; i < CONV_CACHE_SIZE; i++) {
        struct conv_plan *p = &cache->plan[i];
        if (p->used && memcmp(&p->key, &key, sizeof key) == 0) {
            p->last_use = ++cache->clock;
            *out = p;
            return SL_OK;
        }
        if (!victim || (victim->used && (!p->used || p->last_use < victim->last_use)))
            victim = p;
    }
    plan_destroy(victim);
    victim->key = key;
    int rc = plan_build(x, c, victim);
    if (rc != SL_OK) {
        plan_destroy(victim);
        return rc;
    }
    victim->used = true;
    victim->last_use = ++cache->clock;
    *out = victim;
    return SL_OK;
}

struct sl_cuda_conv_cache *sl_cuda_conv_cache_new(void)
{
    return sl_calloc(1, sizeof(struct sl_cuda_conv_cache));
}

void sl_cuda_conv_cache_free(struct sl_cuda_conv_cache *cache)
{
    if (!cache)
        return;
    for (int i = 0; i < CONV_CACHE_SIZE; i++)
        plan_destroy(&cache->plan[i]);
    sl_free(cache);
}

/* ---- launch ---- */

/* Copies x zero-padded into the workspace head (explicit pads only). */
static int pad_input(sl_cuda_exec *x, const struct conv_plan *p, void *dst, const void *src)
{
    const int64_t *d = p->key.x;
    return sl_cuda_pad_planes(x, sl_dtype_size((unsigned) p->key.dtype), dst, src,
                              (uint64_t) (d[0] * d[1]), d[2], d[3], p->xp[2], p->xp[3],
                              p->key.attrs[2], p->key.attrs[3]);
}

int sl_cuda_run_conv(sl_cuda_exec *x, const sl_op_call *c)
{
    static const float one = 1.0f, zero = 0.0f;
    struct conv_plan *p;
    int rc = get_plan(x, c, &p);
    if (rc != SL_OK)
        return rc;
    int algo = p->algo;
    size_t need = p->algo_ws;
    void *ws;
    rc = sl_cuda_workspace(x, p->pad_bytes + need, &ws);
    if (rc == SL_EEXHAUSTED && p->fallback_ws < need) {
        sl_log_warn("cuda.conv.ws", "no %zu-byte workspace: cuDNN algo %d (%zu bytes), not %d",
                    need, p->fallback, p->fallback_ws, p->algo);
        algo = p->fallback;
        need = p->fallback_ws;
        rc = sl_cuda_workspace(x, p->pad_bytes + need, &ws);
    }
    if (rc != SL_OK)
        return rc;
    void *padded = p->explicit_pad ? ws : NULL;
    void *scratch = need ? (char *) ws + p->pad_bytes : NULL;

    switch ((enum conv_kind) p->key.kind) {
    case CONV_FWD: {
        const void *src = c->in[0].data;
        if (padded && (rc = pad_input(x, p, padded, src)) != SL_OK)
            return rc;
        return SL_CUDNN("cuda.conv", cudnnConvolutionForward(
                                         x->dnn, &one, p->xd, padded ? padded : src, p->wd,
                                         c->in[1].data, p->cd, (cudnnConvolutionFwdAlgo_t) algo,
                                         scratch, need, &zero, p->yd, c->out[0].data));
    }
    case CONV_BWD_DATA: {
        rc = SL_CUDNN("cuda.conv", cudnnConvolutionBackwardData(
                                       x->dnn, &one, p->wd, c->in[1].data, p->yd, c->in[0].data,
                                       p->cd, (cudnnConvolutionBwdDataAlgo_t) algo, scratch, need,
                                       &zero, p->xd, padded ? padded : c->out[0].data));
        if (rc != SL_OK || !padded)
            return rc;
        const int64_t *d = p->key.x;
        return sl_cuda_crop_planes(x, sl_dtype_size((unsigned) p->key.dtype), c->out[0].data,
                                   padded, (uint64_t) (d[0] * d[1]), d[2], d[3], p->xp[2], p->xp[3],
                                   p->key.attrs[2], p->key.attrs[3]);
    }
    case CONV_BWD_FILTER: {
        const void *src = c->in[1].data;
        if (padded && (rc = pad_input(x, p, padded, src)) != SL_OK)
            return rc;
        return SL_CUDNN("cuda.conv",
                        cudnnConvolutionBackwardFilter(
                            x->dnn, &one, p->xd, padded ? padded : src, p->yd, c->in[0].data, p->cd,
                            (cudnnConvolutionBwdFilterAlgo_t) algo, scratch, need, &zero, p->wd,
                            c->out[0].data));
    }
    }
    return SL_EUNSUPPORTED;
}
