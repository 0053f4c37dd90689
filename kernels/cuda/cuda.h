/* The cuda backend's internal interface. kernels/cuda/ is the only place in
 * salus that may name CUDA, cuBLAS or cuDNN types: include this header from
 * there alone. Included by both C (gcc) and CUDA C++ (nvcc) translation units.
 *
 * Layout of the backend:
 *   status.c            the one translation of cudart/cuBLAS/cuDNN statuses
 *   device.c            the sl_device_ops table: memory, streams, callbacks
 *   exec.c              per-stream execution context, workspace, op dispatch,
 *                       the dtypes each op runs in, copy and matmul (cuBLAS)
 *   dnn_conv.c          conv2d and both gradients (cuDNN, cached plans)
 *   dnn_norm.c          batchnorm, batchnorm_infer, batchnorm_grad (cuDNN)
 *   ops_elementwise.cu  element-wise ops, bias adds, optimisers, cast, pad/crop
 *   ops_reduce.cu       bias_grad, channel_bias_grad, mse_loss, reduce_*
 *   ops_softmax.cu      softmax, softmax_xent(_grad), argmax
 *   ops_pool.cu         maxpool, avgpool and their gradients
 *   ops_axes.cu         the ops along axes of any rank
 *
 * Precision. The ops of the registry's half set run in bf16 and f16 too
 * (sl_cuda_op_dtypes): storage in the half type, arithmetic in f32 (cuBLAS
 * and cuDNN with f32 compute on tensor cores; custom kernels load into f32
 * registers and round once on store). bf16 needs sm_80 or later. f32
 * matmuls and convolutions use TF32 tensor cores only when the call's math
 * bits (sl_op_call.math) allow it; otherwise they are exact f32. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include "device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <pthread.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sl_cuda_lib { SL_CUDA_LIB_RT, SL_CUDA_LIB_CUBLAS, SL_CUDA_LIB_CUDNN };

/* Translates a cudart (cudaError_t), cuBLAS (cublasStatus_t) or cuDNN
 * (cudnnStatus_t) status into an SL_E* code, through one table. On any status
 * but success it logs one error line under log id `id`: `what` (the failing
 * call), the library's status name and the library's own description. Never
 * blocks. */
int sl_cuda_status(enum sl_cuda_lib lib, int status, const char *id, const char *what);

/* Evaluate a library call and translate its status at the call site. */
#define SL_CUDA_RT(id, call) sl_cuda_status(SL_CUDA_LIB_RT, (int) (call), id, #call)
#define SL_CUBLAS(id, call) sl_cuda_status(SL_CUDA_LIB_CUBLAS, (int) (call), id, #call)
#define SL_CUDNN(id, call) sl_cuda_status(SL_CUDA_LIB_CUDNN, (int) (call), id, #call)

/* Errors a kernel finds on the device (in data the registry cannot see),
 * raised into the stream's flag word (see sl_cuda_exec.flag_dev). */
#define SL_CUDA_FLAG_BAD_LABEL 1 /* softmax_xent(_grad): a label outside [0, C) */
#define SL_CUDA_FLAG_BAD_STEP 2  /* adam_update: step count t < 1 or not finite */
#define SL_CUDA_FLAG_BAD_INDEX 3 /* gather: an index outside [-dim, dim) */

/* Initial size of a stream's workspace: room for every custom kernel's
 * scratch (reduction partials); cuDNN grows it on demand. */
#define SL_CUDA_WORKSPACE_INITIAL (1u << 20)

struct sl_cuda_conv_cache; /* dnn_conv.c */

/* What the op implementations need of one salus stream. Owned by the stream
 * (device.c); every field is used only under the stream's launch lock, on
 * the submitting thread, except flag_host (see below). */
typedef struct sl_cuda_exec {
    cudaStream_t stream;
    int ordinal;  /* the CUDA device */
    int sm_count; /* multiprocessors: sizes reduction grids */
    bool bf16;    /* sm_80 or later: the device computes in bf16 */
    cublasHandle_t blas;
    cudnnHandle_t dnn; /* NULL when cuDNN could not be set up: its ops are refused */
    cudnnTensorDescriptor_t bn_x, bn_param; /* batchnorm scratch descriptors */
    struct sl_cuda_conv_cache *conv;        /* cuDNN convolution plans */
    /* Framework memory outside the arena, used in stream order: one launch
     * at a time may use it, and it is freed and reallocated stream-ordered
     * (cudaFreeAsync / cudaMallocAsync) when a launch needs more. */
    void *ws;
    size_t ws_bytes;
    bool ws_stream_ordered; /* false: the device has no memory pools (growth syncs) */
    /* The lane's framework block (stream_set_workspace), or NULL: when set,
     * every workspace (cuBLAS's included) comes from it and ws is freed. */
    void *lane_ws;
    size_t lane_ws_bytes;
    /* the stream is being captured (device.c graph_begin .. graph_end):
     * the workspace cannot grow, since an allocation captured would
     * belong to the graph and a free of the old block would be replayed */
    bool recording;
    /* Device-raised errors. A kernel that finds bad data stores an
     * SL_CUDA_FLAG_* value into flag_dev (device memory; the first one
     * wins), and every custom kernel returns at once while it is set: the
     * work after a failure, up to the next host callback, is skipped on the
     * device (cuBLAS, cuDNN and copies still run, on void data). Before each
     * host callback and in synchronize, a one-thread kernel moves the value
     * into flag_host (mapped pinned host memory; written only when set) and
     * clears flag_dev; the host then reads and clears flag_host without a
     * CUDA call. */
    int *flag_dev;
    int *flag_host;        /* host address of the mapped word */
    int *flag_host_mapped; /* its device address */
} sl_cuda_exec;

/* Sets up x for the CUDA stream `stream` (created by the caller) on device
 * `ordinal`, the calling thread's current device: cuBLAS handle, cuDNN handle
 * and descriptors (a cuDNN failure is logged and leaves x->dnn NULL rather
 * than failing), workspace, flag word. Errors: SL_ENOMEM, SL_EEXHAUSTED,
 * SL_EDEVICE and the other translated statuses; x is then torn down again.
 * May block briefly (allocations). */
int sl_cuda_exec_init(sl_cuda_exec *x, cudaStream_t stream, int ordinal);

/* Releases everything sl_cuda_exec_init set up; safe on a zeroed or
 * half-built x. The stream's work must have finished (the caller drains it);
 * the stream itself stays the caller's. */
void sl_cuda_exec_fini(sl_cuda_exec *x);

/* Enqueues the move of the device flag into the host word (see
 * sl_cuda_exec.flag_dev). Returns the launch status. Never waits. */
int sl_cuda_exec_collect_flag(sl_cuda_exec *x);
/* The same into another mapped word (its device address), e.g. one per
 * host callback, read with sl_cuda_flag_take. */
int sl_cuda_exec_collect_flag_into(sl_cuda_exec *x, int *mapped);
/* Reads and clears a mapped flag word (host address): SL_OK, or SL_EINVAL
 * (logged) when a kernel raised an error. Makes no CUDA call. */
int sl_cuda_flag_take(int *word);

/* Reads and clears the host word: SL_OK if no kernel raised an error before
 * the last collect that has run, SL_EINVAL (logged) otherwise. Meaningful
 * once the stream has run past a collect. Makes no CUDA call: safe on a CUDA
 * callback thread. */
int sl_cuda_exec_take_flag(sl_cuda_exec *x);

/* Makes the stream's workspace at least `bytes` long and points *out at it
 * (valid for the current launch only). Growing frees the old block and
 * allocates the new one in stream order. With a lane workspace set
 * (x->lane_ws) nothing is allocated: *out is the lane's block, or
 * SL_EEXHAUSTED when it is smaller than bytes. Errors: SL_EEXHAUSTED (the
 * own workspace is then empty, the stream stays usable). Never waits for
 * the device, except where the device lacks memory pools. */
int sl_cuda_workspace(sl_cuda_exec *x, size_t bytes, void **out);

/* Current size of the stream's workspace in bytes (framework memory outside
 * the arena, for accounting). */
size_t sl_cuda_workspace_bytes(const sl_cuda_exec *x);

/* Points x's workspaces at the lane block [ptr, ptr + bytes) (cuBLAS through
 * cublasSetWorkspace, everything else through sl_cuda_workspace) and frees
 * x's own block in stream order; ptr NULL goes back to x's own memory
 * (cuBLAS's default pool). Contract of stream_set_workspace (device.h);
 * caller holds the stream's launch lock. Errors: translated statuses. */
int sl_cuda_set_lane_workspace(sl_cuda_exec *x, void *ptr, size_t bytes);

/* The float dtypes (SL_DTS bits) this backend runs op in on a device that
 * has bf16 arithmetic (sm_80+) or not: f32, plus bf16 and f16 for the ops
 * of the registry's half set (bf16 dropped without it); for cast, the
 * dtypes it converts between; 0 for an op with no kernel here (the f16
 * loss-scaling ops). Never blocks. */
unsigned sl_cuda_op_dtypes(unsigned op, bool bf16);

/* Contract checks of one call before anything is enqueued: the op exists,
 * its arity matches the registry, its float tensors are in a dtype
 * sl_cuda_op_dtypes gives it, and this backend can run it with these shapes
 * and attributes. Returns SL_OK, SL_EINVAL (arity) or SL_EUNSUPPORTED (not
 * implemented here or not in that dtype, cuDNN unavailable, sizes beyond
 * what cuBLAS/cuDNN index). Never blocks. */
int sl_cuda_check(const sl_cuda_exec *x, const sl_op_call *c);

/* Enqueues a checked, registry-validated call on x's stream. Returns SL_OK,
 * or the translated status of the first failing library call. SL_ENOMEM and
 * SL_EUNSUPPORTED mean the op was refused: none of its outputs is written
 * (at most the stream's workspace was); the caller reports them to the
 * submitter. Any other error may come after part of the op was enqueued and
 * belongs to the stream (a sticky error). Never waits for the device, except
 * to grow the workspace on a device without memory pools. */
int sl_cuda_run(sl_cuda_exec *x, const sl_op_call *c);

/* Moves x (its cuBLAS and cuDNN handles, and the lane workspace cuBLAS
 * uses) onto `stream`, a stream of the same device (a green context's).
 * Precondition: no work of x is pending (the caller drained it). Errors:
 * translated statuses; x then stays on its old stream. */
int sl_cuda_exec_set_stream(sl_cuda_exec *x, cudaStream_t stream);

/* ---- compute partitions through green contexts (green.c) ----
 *
 * The driver API is reached through cudaGetDriverEntryPointByVersion, never
 * linked: salusd must start where no driver (libcuda.so.1) exists, and the
 * runtime loads the driver itself when a device is opened. Green contexts
 * need driver 12.4, their streams (cuGreenCtxStreamCreate) 12.5; with an
 * older driver the device has no partitions (partition_caps says why, as
 * salusd's status does) and lanes keep their priority streams. */
typedef struct sl_cuda_green {
    bool ready;         /* entry points found, driver new enough, SM resource read */
    int ordinal;        /* the CUDA device */
    int driver_version; /* cudaDriverGetVersion's */
    unsigned sm_count;  /* SMs in whole groups: what partitions can have */
    void *groups;       /* CUdevResource[n_groups]: init's one split of the device */
    unsigned n_groups, group_sms;
    char note[96];        /* how partitions work here, or why they do not */
    pthread_mutex_t lock; /* guards parts and every partition's streams */
    bool lock_ready;
    struct sl_partition *parts; /* live partitions, in creation order (the split order) */
    void *fn[8];                /* driver entry points (green.c) */
} sl_cuda_green;

/* Looks the driver up and reads the device's SM resource; never fails: an
 * unusable driver leaves g->ready false with the reason in g->note. */
void sl_cuda_green_init(sl_cuda_green *g, int ordinal);
/* Frees what init set up; every partition must be destroyed. Safe on zeroed. */
void sl_cuda_green_fini(sl_cuda_green *g);

/* device.c's side, for green.c: the device's green state; a stream's CUDA
 * priority as created; and the swap of a stream's CUstream for `fresh`
 * (taking ownership of it; the old one is destroyed), under the stream's
 * launch lock. swap's precondition: the stream is idle. Errors: as
 * sl_cuda_exec_set_stream (fresh is then destroyed). */
sl_cuda_green *sl_cuda_green_of(sl_device *dev);
int sl_cuda_stream_cuda_priority(const sl_stream *s);
int sl_cuda_stream_swap(sl_device *dev, sl_stream *s, cudaStream_t fresh);
/* The partition a stream is bound to (green.c keeps it; NULL = none). */
sl_partition **sl_cuda_stream_partition(sl_stream *s);
/* Forgets s in its partition's list, as it is destroyed. */
void sl_cuda_stream_unbind_dying(sl_device *dev, sl_stream *s);

/* Partition functions of the ops table (green.c); contracts in device.h.
 * cuda adds to them: a create, resize or destroy re-splits every partition
 * created after the one it changes (split order is creation order, each
 * split taking from what the earlier ones left), so their streams are
 * re-created too: salusd changes partitions only while all partitioned
 * streams are idle. */
int sl_cuda_partition_caps(sl_device *dev, sl_partition_caps *caps);
int sl_cuda_partition_create(sl_device *dev, unsigned units, sl_partition **out);
int sl_cuda_partition_resize(sl_device *dev, sl_partition *p, unsigned units);
void sl_cuda_partition_destroy(sl_device *dev, sl_partition *p);
unsigned sl_cuda_partition_units(sl_device *dev, const sl_partition *p);
int sl_cuda_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p);

/* ---- per family; same contract as sl_cuda_run, for the ops named ---- */

/* fill, scale, mul_scalar, add, mul, axpy, add_scalar, relu(_grad), sigmoid(_grad),
 * tanh(_grad), mse_grad, bias_add, channel_bias_add, sgd_update,
 * momentum_update, adam_update. */
int sl_cuda_run_elementwise(sl_cuda_exec *x, const sl_op_call *c);
/* cast between f32, bf16 and f16 (ops_elementwise.cu). */
int sl_cuda_run_cast(sl_cuda_exec *x, const sl_op_call *c);
/* bias_grad, channel_bias_grad, mse_loss, reduce_sum, reduce_mean. */
int sl_cuda_run_reduce(sl_cuda_exec *x, const sl_op_call *c);
/* softmax, softmax_xent, softmax_xent_grad, argmax. */
int sl_cuda_run_softmax(sl_cuda_exec *x, const sl_op_call *c);
/* maxpool, maxpool_grad, avgpool, avgpool_grad. */
int sl_cuda_run_pool(sl_cuda_exec *x, const sl_op_call *c);
/* conv2d, conv2d_grad_input, conv2d_grad_filter (needs x->dnn). */
int sl_cuda_run_conv(sl_cuda_exec *x, const sl_op_call *c);
/* batchnorm, batchnorm_infer, batchnorm_grad (needs x->dnn). */
int sl_cuda_run_norm(sl_cuda_exec *x, const sl_op_call *c);
/* batchnorm's training forward (ops_norm.cu), for sl_cuda_run_norm. */
int sl_cuda_run_bn_train(sl_cuda_exec *x, const sl_op_call *c);
/* The ops along axes of any rank but batch_matmul (ops_axes.cu). */
int sl_cuda_run_axes(sl_cuda_exec *x, const sl_op_call *c);
/* layer_norm(_grad), ew_unary_grad, softmax_axis(_grad), embedding_grad,
 * dropout(_grad) (ops_train.cu). */
int sl_cuda_run_train(sl_cuda_exec *x, const sl_op_call *c);

/* SL_OK when the conv call's tensors fit cuDNN's int indexing, else
 * SL_EUNSUPPORTED. */
int sl_cuda_conv_check(const sl_op_call *c);
/* A new, empty convolution plan cache (host memory); NULL when out of memory. */
struct sl_cuda_conv_cache *sl_cuda_conv_cache_new(void);
/* Frees every cached convolution plan and the cache; safe on NULL. */
void sl_cuda_conv_cache_free(struct sl_cuda_conv_cache *cache);

/* Zero-padded copy on x's stream: dst[n][c][h + pad_h][w + pad_w] = src
 * [n][c][h][w], dst being [planes, dst_h, dst_w] and zero outside the copy;
 * elements of `elem` bytes (2 or 4: any float dtype). Returns the launch
 * status. */
int sl_cuda_pad_planes(sl_cuda_exec *x, size_t elem, void *dst, const void *src, uint64_t planes,
                       int64_t h, int64_t w, int64_t dst_h, int64_t dst_w, int64_t pad_h,
                       int64_t pad_w);
/* The inverse crop: dst[p][h][w] = src[p][h + pad_h][w + pad_w] for dst of
 * [planes, h, w] and src of [planes, src_h, src_w]. Returns the launch status. */
int sl_cuda_crop_planes(sl_cuda_exec *x, size_t elem, void *dst, const void *src, uint64_t planes,
                        int64_t h, int64_t w, int64_t src_h, int64_t src_w, int64_t pad_h,
                        int64_t pad_w);

#ifdef __cplusplus
}
#endif

#endif
