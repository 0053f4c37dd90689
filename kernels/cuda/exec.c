/* Per-stream execution context of the cuda backend: library handles, the
 * stream-ordered workspace, the device-raised error flag, the dtypes each op
 * runs in, the contract checks of a launch and the dispatch of every op to
 * its family.
 *
 * Why a workspace per stream: cuDNN convolutions and the two-pass reductions
 * need scratch memory whose lifetime is one launch. Launches on one stream
 * run in order, so one block per stream, reused by every launch, is enough;
 * growing it frees the old block in stream order, after the launches that
 * use it. It is framework memory, outside the arena that memory/ manages. */
#include "cuda.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <limits.h>

/* Workspace sizes are rounded up to this, so that shapes differing a little
 * do not reallocate at every launch. */
#define WS_GRANULE (1u << 20)

/* ---- workspace ---- */

static int ws_release(sl_cuda_exec *x)
{
    if (!x->ws)
        return SL_OK;
    int rc;
    if (x->ws_stream_ordered) {
        rc = SL_CUDA_RT("cuda.ws", cudaFreeAsync(x->ws, x->stream));
    } else { /* no memory pools: the launches using the block must finish first */
        rc = SL_CUDA_RT("cuda.ws", cudaStreamSynchronize(x->stream));
        if (rc == SL_OK)
            rc = SL_CUDA_RT("cuda.ws", cudaFree(x->ws));
    }
    x->ws = NULL;
    x->ws_bytes = 0;
    return rc;
}

static int ws_alloc(sl_cuda_exec *x, size_t bytes)
{
    void *p = NULL;
    int rc = x->ws_stream_ordered ? SL_CUDA_RT("cuda.ws", cudaMallocAsync(&p, bytes, x->stream))
                                  : SL_CUDA_RT("cuda.ws", cudaMalloc(&p, bytes));
    if (rc != SL_OK) {
        /* Reported above; reset the thread's last-error state so that the
         * next kernel launch check does not see it again. */
        (void) cudaGetLastError();
        return rc;
    }
    x->ws = p;
    x->ws_bytes = bytes;
    return SL_OK;
}

int sl_cuda_workspace(sl_cuda_exec *x, size_t bytes, void **out)
{
    if (x->lane_ws) { /* framework memory of the lane: never more, never elsewhere */
        if (bytes > x->lane_ws_bytes) {
            sl_log_warn("cuda.ws.lane",
                        "an op needs %zu bytes of workspace; the lane's has %zu (salusd "
                        "--framework-per-lane)",
                        bytes, x->lane_ws_bytes);
            return SL_EEXHAUSTED;
        }
        *out = x->lane_ws;
        return SL_OK;
    }
    if (bytes <= x->ws_bytes) {
        *out = x->ws;
        return SL_OK;
    }
    if (x->recording) {
        /* refused before anything is enqueued: the op runs unrecorded */
        sl_log_info("cuda.ws",
                    "an op needs %zu bytes of workspace (the stream has %zu): not "
                    "grown while recording",
                    bytes, x->ws_bytes);
        return SL_EUNSUPPORTED;
    }
    if (bytes > SIZE_MAX - WS_GRANULE)
        return SL_EEXHAUSTED;
    size_t want = (size_t) sl_align_up(bytes, WS_GRANULE);
    int rc = ws_release(x);
    if (rc == SL_OK)
        rc = ws_alloc(x, want);
    if (rc != SL_OK)
        return rc;
    sl_log_debug("cuda.ws", "stream workspace grown to %zu bytes", want);
    *out = x->ws;
    return SL_OK;
}

size_t sl_cuda_workspace_bytes(const sl_cuda_exec *x)
{
    return x->lane_ws ? x->lane_ws_bytes : x->ws_bytes;
}

int sl_cuda_set_lane_workspace(sl_cuda_exec *x, void *ptr, size_t bytes)
{
    int rc;
    if (ptr) {
        rc = SL_CUBLAS("cuda.ws.lane", cublasSetWorkspace(x->blas, ptr, bytes));
        if (rc == SL_OK)
            rc = ws_release(x); /* stream-ordered: launches before still have it */
    } else {
        /* cublasSetStream puts cuBLAS back on its default workspace pool */
        rc = SL_CUBLAS("cuda.ws.lane", cublasSetStream(x->blas, x->stream));
    }
    if (rc != SL_OK)
        return rc;
    x->lane_ws = ptr;
    x->lane_ws_bytes = ptr ? bytes : 0;
    return SL_OK;
}

int sl_cuda_exec_set_stream(sl_cuda_exec *x, cudaStream_t stream)
{
    int rc = SL_CUBLAS("cuda.bind", cublasSetStream(x->blas, stream));
    /* cublasSetStream drops a workspace set with cublasSetWorkspace */
    if (rc == SL_OK && x->lane_ws)
        rc = SL_CUBLAS("cuda.bind", cublasSetWorkspace(x->blas, x->lane_ws, x->lane_ws_bytes));
    if (rc == SL_OK && x->dnn)
        rc = SL_CUDNN("cuda.bind", cudnnSetStream(x->dnn, stream));
    if (rc != SL_OK) {
        (void) SL_CUBLAS("cuda.bind", cublasSetStream(x->blas, x->stream));
        return rc;
    }
    x->stream = stream;
    return SL_OK;
}

/* ---- device-raised errors ---- */

int sl_cuda_exec_take_flag(sl_cuda_exec *x)
{
    return x->flag_host ? sl_cuda_flag_take(x->flag_host) : SL_OK;
}

int sl_cuda_flag_take(int *word)
{
    int flag = __atomic_exchange_n(word, 0, __ATOMIC_ACQ_REL);
    switch (flag) {
    case 0:
        return SL_OK;
    case SL_CUDA_FLAG_BAD_LABEL:
        /* the op and the work after it up to this callback failed */
        sl_log_err("cuda.badlabel", "softmax_xent(_grad): a label outside [0, C)");
        break;
    case SL_CUDA_FLAG_BAD_STEP:
        sl_log_err("cuda.badstep", "adam_update: step count t < 1 or not finite");
        break;
    case SL_CUDA_FLAG_BAD_INDEX:
        sl_log_err("cuda.badindex", "gather or index_write: an index outside [-dim, dim)");
        break;
    default:
        sl_log_err("cuda.flag", "a kernel raised device error flag %d", flag);
        break;
    }
    return SL_EINVAL;
}

/* ---- init / fini ---- */

/* cuDNN is optional per stream: without it conv2d and batchnorm are refused
 * and everything else still runs. */
static void dnn_init(sl_cuda_exec *x)
{
    if (SL_CUDNN("cuda.dnn", cudnnCreate(&x->dnn)) != SL_OK) {
        x->dnn = NULL;
        goto out_disabled;
    }
    if (SL_CUDNN("cuda.dnn", cudnnSetStream(x->dnn, x->stream)) != SL_OK)
        goto out_destroy_handle;
    if (SL_CUDNN("cuda.dnn", cudnnCreateTensorDescriptor(&x->bn_x)) != SL_OK)
        goto out_destroy_handle;
    if (SL_CUDNN("cuda.dnn", cudnnCreateTensorDescriptor(&x->bn_param)) != SL_OK)
        goto out_destroy_bn_x;
    if (!(x->conv = sl_cuda_conv_cache_new()))
        goto out_destroy_bn_param;
    return;

out_destroy_bn_param:
    (void) SL_CUDNN("cuda.dnn", cudnnDestroyTensorDescriptor(x->bn_param));
    x->bn_param = NULL;
out_destroy_bn_x:
    (void) SL_CUDNN("cuda.dnn", cudnnDestroyTensorDescriptor(x->bn_x));
    x->bn_x = NULL;
out_destroy_handle:
    (void) SL_CUDNN("cuda.dnn", cudnnDestroy(x->dnn));
    x->dnn = NULL;
out_disabled:
    sl_log_warn("cuda.dnn", "no cuDNN on this stream: conv2d and batchnorm are refused");
}

int sl_cuda_exec_init(sl_cuda_exec *x, cudaStream_t stream, int ordinal)
{
    *x = (sl_cuda_exec){.stream = stream, .ordinal = ordinal};
    int pools = 0;
    int rc = SL_CUDA_RT(
        "cuda.exec", cudaDeviceGetAttribute(&x->sm_count, cudaDevAttrMultiProcessorCount, ordinal));
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.exec",
                        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal));
    int major = 0;
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.exec",
                        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
    if (rc != SL_OK)
        return rc;
    x->bf16 = major >= 8;
    if (x->sm_count < 1)
        x->sm_count = 1;
    x->ws_stream_ordered = pools != 0;
    if (!x->ws_stream_ordered)
        sl_log_warn("cuda.ws", "device %d has no memory pools: workspace growth syncs", ordinal);

    void *host = NULL, *mapped = NULL, *dev = NULL;
    rc = SL_CUDA_RT("cuda.exec",
                    cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    if (rc != SL_OK)
        return rc;
    x->flag_host = host;
    *x->flag_host = 0;
    if ((rc = SL_CUDA_RT("cuda.exec", cudaHostGetDevicePointer(&mapped, host, 0))) != SL_OK)
        goto out_fini;
    x->flag_host_mapped = mapped;
    if ((rc = SL_CUDA_RT("cuda.exec", cudaMalloc(&dev, sizeof(int)))) != SL_OK)
        goto out_fini;
    x->flag_dev = dev;
    if ((rc = SL_CUDA_RT("cuda.exec", cudaMemsetAsync(dev, 0, sizeof(int), stream))) != SL_OK)
        goto out_fini;

    if ((rc = SL_CUBLAS("cuda.blas", cublasCreate(&x->blas))) != SL_OK) {
        x->blas = NULL;
        goto out_fini;
    }
    if ((rc = SL_CUBLAS("cuda.blas", cublasSetStream(x->blas, stream))) != SL_OK)
        goto out_fini;
    void *ws;
    if ((rc = sl_cuda_workspace(x, SL_CUDA_WORKSPACE_INITIAL, &ws)) != SL_OK)
        goto out_fini;
    dnn_init(x);
    return SL_OK;

out_fini:
    sl_cuda_exec_fini(x);
    return rc;
}

void sl_cuda_exec_fini(sl_cuda_exec *x)
{
    sl_cuda_conv_cache_free(x->conv);
    x->conv = NULL;
    if (x->bn_param)
        (void) SL_CUDNN("cuda.dnn", cudnnDestroyTensorDescriptor(x->bn_param));
    if (x->bn_x)
        (void) SL_CUDNN("cuda.dnn", cudnnDestroyTensorDescriptor(x->bn_x));
    if (x->dnn)
        (void) SL_CUDNN("cuda.dnn", cudnnDestroy(x->dnn));
    x->bn_param = x->bn_x = NULL;
    x->dnn = NULL;
    if (x->blas)
        (void) SL_CUBLAS("cuda.blas", cublasDestroy(x->blas));
    x->blas = NULL;
    /* Nothing may still use the memory below (a half-built x may have a
     * memset pending). */
    if (x->stream)
        (void) SL_CUDA_RT("cuda.exec", cudaStreamSynchronize(x->stream));
    if (x->ws) {
        (void) ws_release(x);
        (void) SL_CUDA_RT("cuda.ws", cudaStreamSynchronize(x->stream));
    }
    if (x->flag_dev)
        (void) SL_CUDA_RT("cuda.exec", cudaFree(x->flag_dev));
    if (x->flag_host)
        (void) SL_CUDA_RT("cuda.exec", cudaFreeHost(x->flag_host));
    x->flag_host = x->flag_host_mapped = x->flag_dev = NULL;
}

/* ---- contract checks and dispatch ---- */

typedef int (*family_fn)(sl_cuda_exec *x, const sl_op_call *c);

/* copy, and reshape (salusd aliases a reshape and never launches it; one
 * that arrives anyway is a copy unless it is already a view). */
static int run_copy(sl_cuda_exec *x, const sl_op_call *c)
{
    if (c->out[0].data == c->in[0].data)
        return SL_OK;
    return SL_CUDA_RT("cuda.copy", cudaMemcpyAsync(c->out[0].data, c->in[0].data,
                                                   sl_shape_bytes(&c->out[0].shape),
                                                   cudaMemcpyDeviceToDevice, x->stream));
}

/* cuBLAS's element type of a float dtype. */
static cudaDataType blas_type(unsigned dtype)
{
    return dtype == SL_BF16 ? CUDA_R_16BF : dtype == SL_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Exact f32 is cuBLAS's S routine with the handle's default math, which
 * never rounds operands to TF32. */
static bool exact_f32(const sl_op_call *c)
{
    return c->in[0].shape.dtype == SL_F32 && !(c->math & SL_MATH_MATMUL_TF32);
}

/* Everything else goes through the Ex routines with f32 accumulation: bf16
 * and f16 operands and results on tensor cores, or f32 with TF32 products
 * when the call allows it. alpha and beta are f32 in both cases. */
static cublasComputeType_t compute_type(const sl_op_call *c)
{
    return c->in[0].shape.dtype == SL_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* C[m,n] = alpha op(A) op(B) + beta C, row-major, in the call's dtype.
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
 * operands and keep each one's transpose flag and leading dimension (lda,
 * ldb: A's and B's row lengths). cuBLAS does not read C when beta is 0. */
static int gemm(sl_cuda_exec *x, const sl_op_call *c, const char *id, bool ta, bool tb, int m,
                int n, int k, const float *alpha, const void *a, int lda, const void *b, int ldb,
                const float *beta, void *y)
{
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (exact_f32(c))
        return SL_CUBLAS(
            id, cublasSgemm(x->blas, opb, opa, n, m, k, alpha, b, ldb, a, lda, beta, y, n));
    cudaDataType t = blas_type(c->in[0].shape.dtype);
    return SL_CUBLAS(id, cublasGemmEx(x->blas, opb, opa, n, m, k, alpha, b, t, ldb, a, t, lda, beta,
                                      y, t, n, compute_type(c), CUBLAS_GEMM_DEFAULT));
}

static int run_matmul(sl_cuda_exec *x, const sl_op_call *c)
{
    static const float one = 1.0f, zero = 0.0f;
    bool ta = c->attrs.i[0], tb = c->attrs.i[1];
    const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
    int m = (int) c->out[0].shape.dims[0], n = (int) c->out[0].shape.dims[1];
    int k = (int) a[ta ? 0 : 1];
    return gemm(x, c, "cuda.gemm", ta, tb, m, n, k, &one, c->in[0].data, (int) a[1], c->in[1].data,
                (int) b[1], &zero, c->out[0].data);
}

/* acc = beta * acc + alpha * op(A) op(B), in place: acc is GEMM's C. */
static int run_matmul_acc(sl_cuda_exec *x, const sl_op_call *c)
{
    const float alpha = c->attrs.f[0], beta = c->attrs.f[1];
    bool ta = c->attrs.i[0], tb = c->attrs.i[1];
    const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
    int m = (int) c->in[2].shape.dims[0], n = (int) c->in[2].shape.dims[1];
    int k = (int) a[ta ? 0 : 1];
    return gemm(x, c, "cuda.gemm_acc", ta, tb, m, n, k, &alpha, c->in[0].data, (int) a[1],
                c->in[1].data, (int) b[1], &beta, c->in[2].data);
}

/* batch_matmul: cuBLAS's strided batched GEMM, row-major as column-major
 * (y^T = b^T a^T); a batch of 1 broadcasts with stride 0. sl_cuda_check
 * made sure the dimensions fit in int. */
static int run_batch_matmul(sl_cuda_exec *x, const sl_op_call *c)
{
    const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
    int batch = (int) c->out[0].shape.dims[0], m = (int) a[1], k = (int) a[2], n = (int) b[2];
    const float alpha = 1.0f, beta = 0.0f;
    long long sa = a[0] == 1 ? 0 : (long long) m * k, sb = b[0] == 1 ? 0 : (long long) k * n;
    long long sy = (long long) m * n;
    if (exact_f32(c))
        return SL_CUBLAS("cuda.batch_gemm",
                         cublasSgemmStridedBatched(x->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                                                   &alpha, c->in[1].data, n, sb, c->in[0].data, k,
                                                   sa, &beta, c->out[0].data, n, sy, batch));
    cudaDataType t = blas_type(c->in[0].shape.dtype);
    return SL_CUBLAS("cuda.batch_gemm",
                     cublasGemmStridedBatchedEx(x->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                                c->in[1].data, t, n, sb, c->in[0].data, t, k, sa,
                                                &beta, c->out[0].data, t, n, sy, batch,
                                                compute_type(c), CUBLAS_GEMM_DEFAULT));
}

static family_fn family_of(unsigned op)
{
    switch (op) {
    case SL_OP_COPY:
    case SL_OP_RESHAPE:
        return run_copy;
    case SL_OP_MATMUL:
        return run_matmul;
    case SL_OP_MATMUL_ACC:
        return run_matmul_acc;
    case SL_OP_FILL:
    case SL_OP_ADD:
    case SL_OP_SCALE:
    case SL_OP_MUL_SCALAR:
    case SL_OP_BIAS_ADD:
    case SL_OP_RELU:
    case SL_OP_RELU_GRAD:
    case SL_OP_RELU_MASK:
    case SL_OP_RELU_GRAD_MASK:
    case SL_OP_MSE_GRAD:
    case SL_OP_SGD_UPDATE:
    case SL_OP_MUL:
    case SL_OP_AXPY:
    case SL_OP_ADD_SCALAR:
    case SL_OP_SIGMOID:
    case SL_OP_SIGMOID_GRAD:
    case SL_OP_TANH:
    case SL_OP_TANH_GRAD:
    case SL_OP_CHANNEL_BIAS_ADD:
    case SL_OP_MOMENTUM_UPDATE:
    case SL_OP_ADAM_UPDATE:
    case SL_OP_SGD_UPDATE_LR:
    case SL_OP_MOMENTUM_UPDATE_LR:
    case SL_OP_ADAM_UPDATE_LR:
    case SL_OP_AMP_UNSCALE:
    case SL_OP_AMP_COMMIT:
    case SL_OP_AMP_SCALE_UPDATE:
        return sl_cuda_run_elementwise;
    case SL_OP_BIAS_GRAD:
    case SL_OP_CHANNEL_BIAS_GRAD:
    case SL_OP_MSE_LOSS:
    case SL_OP_REDUCE_SUM:
    case SL_OP_REDUCE_MEAN:
        return sl_cuda_run_reduce;
    case SL_OP_SOFTMAX:
    case SL_OP_SOFTMAX_XENT:
    case SL_OP_SOFTMAX_XENT_GRAD:
    case SL_OP_ARGMAX:
        return sl_cuda_run_softmax;
    case SL_OP_MAXPOOL:
    case SL_OP_MAXPOOL_GRAD:
    case SL_OP_AVGPOOL:
    case SL_OP_AVGPOOL_GRAD:
        return sl_cuda_run_pool;
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
        return sl_cuda_run_conv;
    case SL_OP_BATCHNORM:
    case SL_OP_BATCHNORM_INFER:
    case SL_OP_BATCHNORM_GRAD:
        return sl_cuda_run_norm;
    case SL_OP_EW_BINARY:
    case SL_OP_EW_UNARY:
    case SL_OP_TRANSPOSE:
    case SL_OP_SLICE:
    case SL_OP_CONCAT:
    case SL_OP_GATHER:
    case SL_OP_INDEX_WRITE:
    case SL_OP_REDUCE_AXES:
    case SL_OP_LOG_SOFTMAX:
    case SL_OP_WHERE:
    case SL_OP_MASKED_FILL:
    case SL_OP_COMPARE:
        return sl_cuda_run_axes;
    case SL_OP_LAYER_NORM:
    case SL_OP_LAYER_NORM_GRAD:
    case SL_OP_EW_UNARY_GRAD:
    case SL_OP_SOFTMAX_AXIS:
    case SL_OP_SOFTMAX_AXIS_GRAD:
    case SL_OP_EMBEDDING_GRAD:
    case SL_OP_DROPOUT:
    case SL_OP_DROPOUT_GRAD:
        return sl_cuda_run_train;
    case SL_OP_BATCH_MATMUL:
        return run_batch_matmul;
    case SL_OP_CAST:
        return sl_cuda_run_cast;
    default:
        return NULL;
    }
}

unsigned sl_cuda_op_dtypes(unsigned op, bool bf16)
{
    unsigned half = bf16 ? SL_DTS_HALF : SL_DTS(SL_F16);
    switch (op) {
    /* the registry's half set: these kernels are templates over the
     * element type, or cuBLAS/cuDNN calls with f32 accumulation */
    case SL_OP_FILL:
    case SL_OP_COPY:
    case SL_OP_RESHAPE:
    case SL_OP_ADD:
    case SL_OP_MUL:
    case SL_OP_SCALE:
    case SL_OP_AXPY:
    case SL_OP_ADD_SCALAR:
    case SL_OP_MUL_SCALAR:
    case SL_OP_MATMUL:
    case SL_OP_MATMUL_ACC:
    case SL_OP_BATCH_MATMUL:
    case SL_OP_BIAS_ADD:
    case SL_OP_BIAS_GRAD:
    case SL_OP_CHANNEL_BIAS_ADD:
    case SL_OP_CHANNEL_BIAS_GRAD:
    case SL_OP_RELU:
    case SL_OP_RELU_GRAD:
    case SL_OP_RELU_MASK:
    case SL_OP_RELU_GRAD_MASK:
    case SL_OP_SIGMOID:
    case SL_OP_SIGMOID_GRAD:
    case SL_OP_TANH:
    case SL_OP_TANH_GRAD:
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
    case SL_OP_MAXPOOL:
    case SL_OP_MAXPOOL_GRAD:
    case SL_OP_AVGPOOL:
    case SL_OP_AVGPOOL_GRAD:
    case SL_OP_EW_BINARY:
    case SL_OP_EW_UNARY:
    case SL_OP_TRANSPOSE:
    case SL_OP_SLICE:
    case SL_OP_CONCAT:
    case SL_OP_GATHER:
    case SL_OP_INDEX_WRITE:
    case SL_OP_ARGMAX:
    case SL_OP_CAST:
    case SL_OP_WHERE:
    case SL_OP_MASKED_FILL:
    case SL_OP_COMPARE:
    case SL_OP_EW_UNARY_GRAD:
    case SL_OP_DROPOUT:
    case SL_OP_DROPOUT_GRAD:
        return SL_DTS(SL_F32) | half;
    default: /* f32 only; none at all for an op with no kernel here */
        return family_of(op) ? SL_DTS(SL_F32) : 0;
    }
}

/* Whether every float tensor of c is in a dtype the backend runs c->op in. */
static bool dtypes_ok(const sl_cuda_exec *x, const sl_op_call *c)
{
    unsigned runs = sl_cuda_op_dtypes(c->op, x->bf16);
    for (unsigned i = 0; i < c->n_in + c->n_out; i++) {
        unsigned dt = (i < c->n_in ? c->in[i] : c->out[i - c->n_in]).shape.dtype;
        if (sl_dtype_is_float(dt) && !(runs & SL_DTS(dt)))
            return false;
    }
    return true;
}

int sl_cuda_check(const sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_op_def *def = sl_op_get(c->op);
    if (!def || !def->name || !family_of(c->op))
        return SL_EUNSUPPORTED;
    if (c->n_in != def->n_in || c->n_out != def->n_out)
        return SL_EINVAL;
    if (!dtypes_ok(x, c))
        return SL_EUNSUPPORTED;
    switch (c->op) {
    case SL_OP_MATMUL:
    case SL_OP_MATMUL_ACC: { /* cuBLAS takes int dimensions */
        const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
        if (a[0] > INT_MAX || a[1] > INT_MAX || b[0] > INT_MAX || b[1] > INT_MAX)
            return SL_EUNSUPPORTED;
        return SL_OK;
    }
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
        return x->dnn ? sl_cuda_conv_check(c) : SL_EUNSUPPORTED;
    case SL_OP_BATCHNORM:
    case SL_OP_BATCHNORM_INFER:
    case SL_OP_BATCHNORM_GRAD: { /* cuDNN tensor descriptors take int sizes */
        const sl_shape *xs = &c->in[c->op == SL_OP_BATCHNORM_GRAD ? 1 : 0].shape;
        if (!x->dnn || sl_shape_elems(xs) > INT_MAX)
            return SL_EUNSUPPORTED;
        return SL_OK;
    }
    case SL_OP_BATCH_MATMUL: { /* cuBLAS takes int dimensions */
        const int64_t *o = c->out[0].shape.dims, *a = c->in[0].shape.dims;
        if (o[0] > INT_MAX || o[1] > INT_MAX || o[2] > INT_MAX || a[2] > INT_MAX)
            return SL_EUNSUPPORTED;
        return SL_OK;
    }
    case SL_OP_SOFTMAX:
    case SL_OP_SOFTMAX_XENT:
    case SL_OP_SOFTMAX_XENT_GRAD:
    case SL_OP_ARGMAX: /* a row's columns are indexed with int */
        return c->in[0].shape.dims[1] > INT_MAX ? SL_EUNSUPPORTED : SL_OK;
    default:
        return SL_OK;
    }
}

int sl_cuda_run(sl_cuda_exec *x, const sl_op_call *c)
{
    family_fn run = family_of(c->op);
    if (!run)
        return SL_EUNSUPPORTED;
    /* Every earlier failure of this thread was reported at its call site;
     * clear the last-error state so that the launch checks of this op see
     * only their own launches. A context fault is sticky and resurfaces. */
    (void) cudaGetLastError();
    return run(x, c);
}
