/* The cuda device: cudaMalloc memory, one CUDA stream (with its own cuBLAS
 * handle) per salus stream, and host callbacks.
 *
 * Sticky errors. A CUDA stream has no per-stream error state, so the contract
 * of device.h is kept here: a failure detected while enqueueing (a kernel
 * launch or cuBLAS call refused, an asynchronous fault surfacing in a later
 * call) becomes the stream's sticky error and the submission still returns
 * SL_OK; later submissions are skipped until a host callback takes the error.
 * Only contract errors (SL_EUNSUPPORTED, SL_EINVAL, SL_ENOMEM) come back
 * synchronously. A context fault (SL_EDEVICERESET) leaves CUDA unable to run
 * any host function: host_callback then fails synchronously, and a callback
 * already enqueued before the fault never runs.
 *
 * Host callbacks. CUDA forbids CUDA calls inside a cudaLaunchHostFunc
 * function, but salus callbacks may submit work. So the host function only
 * hands the callback to the device's dispatcher thread, which runs it. */
#include "cuda.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

struct cb_node {
    struct cb_node *next;
    struct cuda_dev *dev;
    sl_stream *stream;
    sl_host_fn fn;
    void *arg;
    int status;
};

struct cuda_dev {
    int ordinal;
    int prio_least, prio_greatest; /* numerically: greatest <= least */
    bool cb_ready;                 /* lock and condvars initialised */
    bool cb_thread_running;
    pthread_mutex_t cb_lock;   /* guards the queue, cb_stop and every stream's cb counters */
    pthread_cond_t cb_work_cv; /* dispatcher: callbacks arrived or stopping */
    pthread_cond_t cb_done_cv; /* synchronize: a callback finished */
    struct cb_node *cb_head, *cb_tail;
    bool cb_stop;
    pthread_t cb_thread;
};

struct sl_stream {
    cudaStream_t stream;
    cublasHandle_t blas;
    atomic_int sticky;              /* first error since the last callback */
    uint64_t cb_submitted, cb_done; /* under cuda_dev.cb_lock */
};

/* ---- callback dispatch ---- */

static void *dispatcher_main(void *arg)
{
    struct cuda_dev *d = arg;
    pthread_mutex_lock(&d->cb_lock);
    for (;;) {
        while (!d->cb_head && !d->cb_stop)
            pthread_cond_wait(&d->cb_work_cv, &d->cb_lock);
        struct cb_node *n = d->cb_head;
        if (!n)
            break;
        d->cb_head = n->next;
        if (!d->cb_head)
            d->cb_tail = NULL;
        pthread_mutex_unlock(&d->cb_lock);
        n->fn(n->arg, n->status);
        pthread_mutex_lock(&d->cb_lock);
        n->stream->cb_done++;
        pthread_cond_broadcast(&d->cb_done_cv);
        sl_free(n);
    }
    pthread_mutex_unlock(&d->cb_lock);
    return NULL;
}

/* Runs on a CUDA-internal thread: no CUDA calls allowed, only the hand-off. */
static void CUDART_CB host_fn_trampoline(void *p)
{
    struct cb_node *n = p;
    struct cuda_dev *d = n->dev;
    pthread_mutex_lock(&d->cb_lock);
    n->next = NULL;
    if (d->cb_tail)
        d->cb_tail->next = n;
    else
        d->cb_head = n;
    d->cb_tail = n;
    pthread_cond_signal(&d->cb_work_cv);
    pthread_mutex_unlock(&d->cb_lock);
}

/* ---- open / close / memory ---- */

static int use_device(const struct cuda_dev *d)
{
    return SL_CUDA_RT("cuda.setdev", cudaSetDevice(d->ordinal));
}

static int cuda_open(sl_device *dev, int index, const char *arg)
{
    struct cuda_dev *d = dev->priv;
    if (arg[0] != '\0') {
        sl_log_err("cuda.open.arg", "the cuda backend takes no argument, got \"%s\"", arg);
        return SL_EINVAL;
    }
    int count = 0;
    int rc = SL_CUDA_RT("cuda.open", cudaGetDeviceCount(&count));
    if (rc != SL_OK) {
        sl_log_err(
            "cuda.nodev",
            "no usable CUDA device (driver missing or no GPU): the cuda backend is unavailable");
        return SL_ENODEV;
    }
    if (index >= count) {
        sl_log_err("cuda.nodev", "cuda:%d requested but %d CUDA device(s) present", index, count);
        return SL_ENODEV;
    }
    d->ordinal = index;
    if ((rc = use_device(d)) != SL_OK)
        return rc;

    struct cudaDeviceProp prop;
    if ((rc = SL_CUDA_RT("cuda.open", cudaGetDeviceProperties(&prop, index))) != SL_OK)
        return rc;
    if ((rc = SL_CUDA_RT("cuda.open", cudaDeviceGetStreamPriorityRange(
                                          &d->prio_least, &d->prio_greatest))) != SL_OK)
        return rc;
    dev->total_bytes = prop.totalGlobalMem;
    snprintf(dev->description, sizeof dev->description, "cuda:%d (%.64s, %.1f GiB, sm_%d%d)", index,
             prop.name, (double) prop.totalGlobalMem / (1 << 30), prop.major, prop.minor);

    if (pthread_mutex_init(&d->cb_lock, NULL) != 0)
        return SL_ENOMEM;
    if (pthread_cond_init(&d->cb_work_cv, NULL) != 0)
        goto out_destroy_lock;
    if (pthread_cond_init(&d->cb_done_cv, NULL) != 0)
        goto out_destroy_work_cv;
    d->cb_ready = true;
    if (pthread_create(&d->cb_thread, NULL, dispatcher_main, d) != 0)
        return SL_ENOMEM; /* close() undoes the rest */
    d->cb_thread_running = true;
    return SL_OK;

out_destroy_work_cv:
    pthread_cond_destroy(&d->cb_work_cv);
out_destroy_lock:
    pthread_mutex_destroy(&d->cb_lock);
    return SL_ENOMEM;
}

static void cuda_close(sl_device *dev)
{
    struct cuda_dev *d = dev->priv;
    if (d->cb_thread_running) {
        pthread_mutex_lock(&d->cb_lock);
        d->cb_stop = true;
        pthread_cond_signal(&d->cb_work_cv);
        pthread_mutex_unlock(&d->cb_lock);
        pthread_join(d->cb_thread, NULL);
        d->cb_thread_running = false;
    }
    if (d->cb_ready) {
        pthread_cond_destroy(&d->cb_done_cv);
        pthread_cond_destroy(&d->cb_work_cv);
        pthread_mutex_destroy(&d->cb_lock);
        d->cb_ready = false;
    }
}

static int cuda_mem_alloc(sl_device *dev, size_t bytes, void **out)
{
    struct cuda_dev *d = dev->priv;
    if (bytes == 0)
        return SL_EINVAL;
    int rc = use_device(d);
    void *p = NULL;
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.malloc", cudaMalloc(&p, bytes));
    if (rc == SL_OK)
        *out = p;
    return rc;
}

static void cuda_mem_free(sl_device *dev, void *ptr)
{
    if (ptr && use_device(dev->priv) == SL_OK)
        (void) SL_CUDA_RT("cuda.free", cudaFree(ptr));
}

/* ---- streams ---- */

static void set_sticky(sl_stream *s, int rc)
{
    int none = SL_OK;
    (void) atomic_compare_exchange_strong(&s->sticky, &none, rc);
}

/* Waits for the stream's device work, then for the callbacks submitted to it
 * before this call. Returns the device status (not the sticky error). */
static int drain(struct cuda_dev *d, sl_stream *s)
{
    pthread_mutex_lock(&d->cb_lock);
    uint64_t target = s->cb_submitted;
    pthread_mutex_unlock(&d->cb_lock);
    int rc = SL_CUDA_RT("cuda.sync", cudaStreamSynchronize(s->stream));
    if (rc != SL_OK)
        return rc; /* a faulted context runs no host functions: do not wait */
    pthread_mutex_lock(&d->cb_lock);
    while (s->cb_done < target)
        pthread_cond_wait(&d->cb_done_cv, &d->cb_lock);
    pthread_mutex_unlock(&d->cb_lock);
    return SL_OK;
}

static int cuda_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    struct cuda_dev *d = dev->priv;
    int rc = use_device(d);
    if (rc != SL_OK)
        return rc;
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    atomic_init(&s->sticky, SL_OK);

    /* Higher salus priority = numerically lower CUDA priority, clamped. */
    int prio = d->prio_least - (priority > 0 ? priority : 0);
    if (prio < d->prio_greatest)
        prio = d->prio_greatest;
    rc = SL_CUDA_RT("cuda.stream",
                    cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, prio));
    if (rc != SL_OK)
        goto out_free_stream;
    if ((rc = SL_CUBLAS("cuda.blas", cublasCreate(&s->blas))) != SL_OK)
        goto out_destroy_cuda_stream;
    if ((rc = SL_CUBLAS("cuda.blas", cublasSetStream(s->blas, s->stream))) != SL_OK)
        goto out_destroy_blas;
    *out = s;
    return SL_OK;

out_destroy_blas:
    (void) SL_CUBLAS("cuda.blas", cublasDestroy(s->blas));
out_destroy_cuda_stream:
    (void) SL_CUDA_RT("cuda.stream", cudaStreamDestroy(s->stream));
out_free_stream:
    sl_free(s);
    return rc;
}

static void cuda_stream_destroy(sl_device *dev, sl_stream *s)
{
    struct cuda_dev *d = dev->priv;
    if (!s)
        return;
    (void) use_device(d);
    if (drain(d, s) != SL_OK)
        sl_log_err("cuda.stream.lost",
                   "destroying a stream whose device work failed; pending callbacks will not run");
    int sticky = atomic_load(&s->sticky);
    if (sticky != SL_OK)
        sl_log_warn("cuda.stream.lost", "stream destroyed with an unreported error: %s",
                    sl_strerror(sticky));
    (void) SL_CUBLAS("cuda.blas", cublasDestroy(s->blas));
    (void) SL_CUDA_RT("cuda.stream", cudaStreamDestroy(s->stream));
    sl_free(s);
}

static int copy_async(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n,
                      enum cudaMemcpyKind kind)
{
    if (n == 0)
        return SL_OK;
    if (!dst || !src)
        return SL_EINVAL;
    if (atomic_load(&s->sticky) != SL_OK)
        return SL_OK; /* skipped until the next callback */
    int rc = use_device(dev->priv);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.memcpy", cudaMemcpyAsync(dst, src, n, kind, s->stream));
    if (rc != SL_OK)
        set_sticky(s, rc);
    return SL_OK;
}

static int cuda_memcpy_h2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyHostToDevice);
}

static int cuda_memcpy_d2h(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyDeviceToHost);
}

static int cuda_memcpy_d2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyDeviceToDevice);
}

/* Row-major C[M,N] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap
 * the operands and keep each one's transpose flag and leading dimension. */
static int matmul(sl_stream *s, const sl_op_call *c)
{
    static const float one = 1.0f, zero = 0.0f;
    bool ta = c->attrs.i[0], tb = c->attrs.i[1];
    const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
    int m = (int) c->out[0].shape.dims[0], n = (int) c->out[0].shape.dims[1];
    int k = (int) a[ta ? 0 : 1];
    return SL_CUBLAS("cuda.gemm",
                     cublasSgemm(s->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, c->in[1].data,
                                 (int) b[1], c->in[0].data, (int) a[1], &zero, c->out[0].data, n));
}

/* Contract checks done before anything is enqueued. */
static int check_call(const sl_op_call *c)
{
    const sl_op_def *def = sl_op_get(c->op);
    if (!def)
        return SL_EUNSUPPORTED;
    if (c->op != SL_OP_COPY && c->op != SL_OP_MATMUL && !sl_cuda_has_kernel(c->op))
        return SL_EUNSUPPORTED;
    if (c->n_in != def->n_in || c->n_out != def->n_out)
        return SL_EINVAL;
    if (c->op == SL_OP_MATMUL) { /* cuBLAS takes int dimensions */
        const int64_t *a = c->in[0].shape.dims, *b = c->in[1].shape.dims;
        if (a[0] > INT_MAX || a[1] > INT_MAX || b[0] > INT_MAX || b[1] > INT_MAX)
            return SL_EUNSUPPORTED;
    }
    return SL_OK;
}

static int cuda_launch(sl_device *dev, sl_stream *s, const sl_op_call *c)
{
    int rc = check_call(c);
    if (rc != SL_OK)
        return rc;
    if (atomic_load(&s->sticky) != SL_OK)
        return SL_OK; /* skipped until the next callback */
    if ((rc = use_device(dev->priv)) != SL_OK)
        goto out_sticky;
    switch (c->op) {
    case SL_OP_COPY:
        rc = SL_CUDA_RT("cuda.copy", cudaMemcpyAsync(c->out[0].data, c->in[0].data,
                                                     sl_shape_bytes(&c->out[0].shape),
                                                     cudaMemcpyDeviceToDevice, s->stream));
        break;
    case SL_OP_MATMUL:
        rc = matmul(s, c);
        break;
    default:
        rc = SL_CUDA_RT("cuda.kernel", sl_cuda_launch_kernel(c, s->stream));
        break;
    }
out_sticky:
    if (rc != SL_OK)
        set_sticky(s, rc);
    return SL_OK;
}

static int cuda_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
{
    struct cuda_dev *d = dev->priv;
    if (!fn)
        return SL_EINVAL;
    struct cb_node *n = sl_malloc(sizeof *n);
    if (!n)
        return SL_ENOMEM;
    *n = (struct cb_node){.dev = d, .stream = s, .fn = fn, .arg = arg};
    n->status = atomic_exchange(&s->sticky, SL_OK); /* the callback takes the error */

    pthread_mutex_lock(&d->cb_lock);
    s->cb_submitted++;
    pthread_mutex_unlock(&d->cb_lock);
    int rc = use_device(d);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.callback", cudaLaunchHostFunc(s->stream, host_fn_trampoline, n));
    if (rc != SL_OK) { /* fn will never run: give the error back to the stream */
        pthread_mutex_lock(&d->cb_lock);
        s->cb_submitted--;
        pthread_mutex_unlock(&d->cb_lock);
        if (n->status != SL_OK)
            set_sticky(s, n->status);
        sl_free(n);
    }
    return rc;
}

static int cuda_synchronize(sl_device *dev, sl_stream *s)
{
    struct cuda_dev *d = dev->priv;
    int rc = use_device(d);
    if (rc == SL_OK)
        rc = drain(d, s);
    int sticky = atomic_exchange(&s->sticky, SL_OK);
    return sticky != SL_OK ? sticky : rc;
}

static const sl_device_ops cuda_device_ops = {
    .name = "cuda",
    .priv_size = sizeof(struct cuda_dev),
    .open = cuda_open,
    .close = cuda_close,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .memcpy_h2d = cuda_memcpy_h2d,
    .memcpy_d2h = cuda_memcpy_d2h,
    .memcpy_d2d = cuda_memcpy_d2d,
    .launch = cuda_launch,
    .host_callback = cuda_host_callback,
    .synchronize = cuda_synchronize,
};

const sl_device_ops *const sl_cuda_device_ops_ptr = &cuda_device_ops;
