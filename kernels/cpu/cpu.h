/* The cpu backend's internal interface: device memory and streams
 * (device.c, stream.c), the kernels (ops.c, loss.c, norm.c, pool.c, conv.c,
 * matmul_dnnl.c; bf16 and f16 in half.c) and the oneDNN primitive cache
 * (dnnl.c). Device addresses are host
 * addresses. Only the test hooks at the end are meant for use outside
 * kernels/cpu/.
 *
 * Threads: every stream is one worker thread that runs its ops in order.
 * The plain C kernels run on that thread alone. oneDNN (Debian builds it on
 * GNU OpenMP) and GEMM may fan one op out: an op gets threads = max(1,
 * cores / streams running an op right now), so one busy lane uses both
 * cores of this 2-core machine for a big convolution or matmul and two busy
 * lanes get one thread each instead of 2x2; ops under 16 Mflop stay on one
 * thread. The OpenMP team size is a per-thread setting (omp_set_num_threads
 * on the worker), so lanes never change each other's. Every GEMM call runs
 * on one thread (gemm.c): a big GEMM is cut into row bands, one call per
 * thread of the worker's own team (team.c), whose helpers
 * spin between the ops of an iteration instead of sleeping between them as
 * OpenMP's do under OMP_WAIT_POLICY=PASSIVE; those GEMMs split from
 * SL_CPU_TEAM_MIN_FLOPS, where waking a sleeping helper still pays off.
 *
 * Measured here (conv 128x32x14x14 -> 64, 5x5, pad 2, idle machine): 20.2
 * ms forward, 20.0 backward data, 21.8 backward weights on one thread;
 * 11.5, 10.4, 11.2 on two. Two lanes with one thread each ran the same conv
 * in 20-29 ms per lane. With another process busy on a core, two threads
 * lose (GNU OpenMP's idle threads spin): run salusd with
 * GOMP_SPINCOUNT=10000 on a machine it does not own (PASSIVE, sleeping at
 * once, slows a CNN's step by a fifth). The thread teams
 * do not read it: their helpers spin at most SPIN_NS (team.c) and stop
 * as soon as another thread runs an op. */
#ifndef SL_CPU_H
#define SL_CPU_H

#include "device.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

/* Ops with less work than this run on one thread whatever their share of
 * the cores: waking a second thread and splitting (tens of microseconds)
 * would cost about what it saves. Pooling always stays below it. */
#define SL_CPU_PARALLEL_MIN_FLOPS (16ull << 20)
/* The same for work split on a thread team (team.c): a spinning helper
 * takes a part within a microsecond and a sleeping one within tens, so an
 * op of 4 Mflop (some 70 microseconds on one core here) gains from a second
 * thread even when the helper must be woken. */
#define SL_CPU_TEAM_MIN_FLOPS (4ull << 20)
/* And for the optimizer updates, which stream a parameter and its state
 * through memory: from 64 Ki elements (a quarter MiB per array, tens of
 * microseconds) the second core's cache and memory bandwidth pay off. */
#define SL_CPU_TEAM_MIN_ELEMS (64ull << 10)

/* What every stream of one cpu device shares. */
typedef struct sl_cpu_shared {
    int cores;                 /* online cores when the device was opened */
    atomic_int running;        /* streams executing an op right now */
    atomic_int forced_threads; /* > 0: sl_cpu_force_threads's override */
    /* compute partitions (partition.c): the cores salusd may use and
     * those live partitions hold, under part_lock */
    pthread_mutex_t part_lock;
    cpu_set_t usable, taken;
    /* the cores of lending partitions (partition_lend), which every
     * normal-priority partitioned stream may also run on; lent_gen moves
     * whenever the set does; lent under part_lock */
    cpu_set_t lent;
    atomic_uint lent_gen;
} sl_cpu_shared;

/* A cpu compute partition (device.h): a set of cores. A stream bound to
 * it applies the set to its worker and OpenMP team before its next op
 * (when gen moved), and its ops share the set's cores, not the device's. */
struct sl_partition {
    sl_cpu_shared *shared;
    /* references: its creator's until partition_destroy, and each stream
     * worker's that runs on it (partitions change live, so a worker may
     * still be inside an op on it when it is destroyed: the last reference
     * frees it); under shared->part_lock */
    int refs;
    cpu_set_t cores;    /* under shared->part_lock */
    atomic_int n_cores; /* CPU_COUNT(cores) */
    atomic_uint gen;    /* bumped by every resize */
    atomic_int running; /* its streams executing an op right now */
    bool lends;         /* its cores are in shared->lent; under shared->part_lock */
};

/* Partition functions of sl_cpu_device_ops (partition.c); contracts in
 * device.h. Units are cores of the process's affinity mask at open. */
int sl_cpu_partition_caps(sl_device *dev, sl_partition_caps *caps);
int sl_cpu_partition_create(sl_device *dev, unsigned units, sl_partition **out);
int sl_cpu_partition_resize(sl_device *dev, sl_partition *p, unsigned units);
void sl_cpu_partition_destroy(sl_device *dev, sl_partition *p);
unsigned sl_cpu_partition_units(sl_device *dev, const sl_partition *p);
int sl_cpu_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p);
int sl_cpu_partition_lend(sl_device *dev, sl_partition *p, bool lend);
/* Sets up the shared partition state at open; fini at close (safe on a
 * zeroed one). Errors: SL_ENOMEM. */
int sl_cpu_partitions_init(sl_cpu_shared *sh);
void sl_cpu_partitions_fini(sl_cpu_shared *sh);
/* A stream worker moves from partition *held (a reference it holds, or
 * NULL) to the one its stream is bound to now (*bound, read under the
 * lock): takes a reference on the new one, drops the old, copies the new
 * one's cores into *cores and returns its generation (0 and *held NULL
 * when bound to none). borrow (a normal-priority stream): *lent gets the
 * lent cores that are not the new one's own (empty when bound to none),
 * *lent_gen the generation of the loans read with them. */
unsigned sl_cpu_partition_follow(sl_cpu_shared *sh, _Atomic(sl_partition *) *bound,
                                 sl_partition **held, cpu_set_t *cores, bool borrow,
                                 cpu_set_t *lent, unsigned *lent_gen);
/* Drops a worker's reference (stream destroyed); NULL is fine. */
void sl_cpu_partition_unref(sl_cpu_shared *sh, sl_partition *p);
/* Binds under the partitions' lock (stream.c's stream_bind). */
void sl_cpu_partition_bind(sl_cpu_shared *sh, _Atomic(sl_partition *) *bound, sl_partition *p);
/* Moves the calling worker, its thread team (team.c) and every thread of
 * its OpenMP team to `cores` (team threads keep the affinity of the thread
 * that started them, so they are moved explicitly). Returns the number of
 * cores. */
int sl_cpu_apply_cores(const cpu_set_t *cores, int team);

/* oneDNN state of one stream (dnnl.c); opaque outside it. */
typedef struct sl_cpu_dnnl sl_cpu_dnnl;

/* What a kernel may use beyond its call: the stream worker's context. Only
 * that worker thread touches it. */
typedef struct sl_cpu_trims sl_cpu_trims;
void sl_cpu_trims_free(sl_cpu_trims *t);

typedef struct sl_cpu_exec {
    sl_cpu_shared *shared;
    sl_cpu_dnnl *dnnl; /* NULL until the first oneDNN op on this stream */
    int threads;       /* threads the current op may use (>= 1) */
    int max_threads;   /* at most this many (the stream's cores); 0 = no cap */
    /* the stream's workspace (stream_set_workspace): oneDNN's scratch comes
     * from it when set; NULL = the stream's own, grown on demand */
    void *workspace;
    size_t workspace_bytes;
    /* why the last op that failed failed, beyond its code ("": nothing
     * more); read by sl_cpu_stream_failure, cleared after each host
     * callback (stream.c) */
    char failure[192];
    /* f32 copies of a half-precision op's tensors (half.c) when the stream
     * has no workspace: grown on demand, freed with the stream */
    void *half_buf;
    size_t half_bytes;
    /* trimmed convolution kernels (conv_trim.c): those kept per version,
     * and the buffer for one that is not when the stream has no workspace;
     * both made on demand, freed with the stream */
    sl_cpu_trims *trims;
    void *trim_buf;
    size_t trim_bytes;
} sl_cpu_exec;

/* Runs one op synchronously on the calling (worker) thread. The call must
 * have passed sl_cpu_op_check. Returns SL_OK, SL_EINVAL (bad data found at
 * run time: a label out of range, a bad Adam step count), SL_ENOMEM,
 * SL_EEXHAUSTED (its oneDNN scratch does not fit x->workspace; logged) or
 * SL_EDEVICE (oneDNN failed; logged). */
int sl_cpu_run_op(sl_cpu_exec *x, const sl_op_call *call);

/* sl_cpu_run_op for a call whose float tensors are all f32 (and for the
 * ops that move elements of any size: fill, copy, reshape, transpose,
 * slice, concat, gather). half.c runs bf16 and f16 calls through it. */
int sl_cpu_run_op_f32(sl_cpu_exec *x, const sl_op_call *call);

/* Half precision (half.c). True when a float tensor of c is bf16 or f16. */
bool sl_cpu_call_half(const sl_op_call *c);
/* Runs a call with bf16 or f16 tensors: the ops that move elements as they
 * are; bf16 matmuls and convolutions on oneDNN's bf16 kernels where the
 * processor has them (sl_cpu_bf16_native); every other one, f16 always,
 * through f32: its half inputs are widened into f32 copies, the f32 kernel
 * runs on them, and its half outputs (and inputs it updates in place) are
 * rounded back once. The copies come from the stream's workspace when it
 * has one (SL_EEXHAUSTED, with x->failure set, when they and the kernel's
 * own scratch do not fit), else from x->half_buf. Contract otherwise as
 * sl_cpu_run_op. */
int sl_cpu_half_op(sl_cpu_exec *x, const sl_op_call *c);
/* cast: converts between f32, bf16 and f16 (half.h's rounding), split
 * across the team (x->threads) from SL_CPU_TEAM_MIN_ELEMS elements. */
int sl_cpu_cast(sl_cpu_exec *x, const sl_op_call *c);
/* The op_dtypes of sl_cpu_device_ops (device.h): the registry's dtypes for
 * every op the cpu backend runs. */
unsigned sl_cpu_op_dtypes(sl_device *dev, unsigned op);
/* Whether bf16 matmuls and convolutions run on oneDNN's bf16 kernels
 * (half.c): the processor has AVX512-BF16 (as oneDNN sees it, so
 * DNNL_MAX_CPU_ISA can turn it off), and SALUS_CPU_BF16 (or
 * sl_cpu_force_bf16_path) says native, or auto (the default) with AMX. */
bool sl_cpu_bf16_native(void);
/* Whether the processor has oneDNN's bf16 kernels at all. */
bool sl_cpu_bf16_capable(void);
/* Whether call c runs on the stream's worker thread, which owns the oneDNN
 * state: sl_cpu_op_uses_dnnl, and the bf16 matmuls on oneDNN. */
bool sl_cpu_call_uses_dnnl(const sl_op_call *c);
/* bf16 matmul, matmul_acc and batch_matmul on oneDNN's matmul primitive
 * (matmul_dnnl.c), f32 accumulation, bf16 output rounded once. Contract as
 * sl_cpu_dnnl_op. */
int sl_cpu_dnnl_matmul(sl_cpu_exec *x, const sl_op_call *c);

/* Whether the cpu kernels can run this call: a known op with the registry's
 * arity, and dimensions that fit the libraries' integer types.
 * Returns SL_OK, SL_EUNSUPPORTED or SL_EINVAL (wrong arity). Never blocks. */
int sl_cpu_op_check(const sl_op_call *call);

/* Thread teams (team.c): sl_cpu_parallel runs fn(arg, part, parts) for
 * every part in [0, parts), on the calling thread and its team's helpers,
 * and returns when all have run. Parts must be independent. The helpers
 * are the calling thread's own (started on first use, ended with it) and
 * inherit its affinity and scheduling class; they spin briefly after a
 * job, then sleep. Never fails: without helpers the caller runs every
 * part. Not reentrant from inside fn. */
typedef void (*sl_cpu_part_fn)(void *arg, int part, int parts);
void sl_cpu_parallel(int parts, sl_cpu_part_fn fn, void *arg);
/* A kernel over units [u0, u1) of op c: rows, planes, columns, as the
 * kernel counts them. */
typedef void (*sl_cpu_units_fn)(const sl_op_call *c, uint64_t u0, uint64_t u1);
/* Runs fn over units [0, n) of c: in up to `threads` contiguous parts on
 * the team (sl_cpu_parallel) when `work` (the op's elements or flops)
 * reaches `min_work`, enough to pay for waking it; else on the calling
 * thread. */
void sl_cpu_run_units(const sl_op_call *c, sl_cpu_units_fn fn, uint64_t n, uint64_t work,
                      uint64_t min_work, int threads);
/* Moves the calling thread's helpers to `cores` (sl_cpu_apply_cores). */
void sl_cpu_team_set_cores(const cpu_set_t *cores);
/* Around every op a stream runs (stream.c): idle helpers stop spinning
 * while another thread runs an op. */
void sl_cpu_op_begin(void);
void sl_cpu_op_end(void);

/* GEMM (gemm.c): C[m, n] = alpha op(A) op(B) + beta C, row-major, on the
 * calling thread alone; C is not read when beta is 0. Through oneDNN, or
 * through OpenBLAS when the environment says SALUS_CPU_GEMM=openblas (read
 * once per process). sl_cpu_op_check made sure every dimension fits. */
typedef enum { SL_CPU_GEMM_ONEDNN, SL_CPU_GEMM_OPENBLAS } sl_cpu_gemm_lib;
void sl_cpu_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc);
/* The same through a given library (tests compare the two). */
void sl_cpu_sgemm_with(sl_cpu_gemm_lib lib, bool ta, bool tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc);
sl_cpu_gemm_lib sl_cpu_gemm_chosen(void);
/* GEMMs oneDNN refused that OpenBLAS then computed, since start (tests). */
unsigned long sl_cpu_gemm_fallbacks(void);
const char *sl_cpu_gemm_name(sl_cpu_gemm_lib lib);

/* Kernels outside ops.c, each for the op its name says; contracts as
 * sl_cpu_run_op. loss.c: */
/* The ops along axes of any rank (axes.c, ops_axes.h): one entry for all.
 * The element-wise ops, where, masked_fill, compare, transpose,
 * reduce_axes and batch_matmul split across up to `threads` threads of
 * the caller's team (sl_cpu_parallel) when big enough; the results do not
 * depend on the split. */
int sl_cpu_axes_op(const sl_op_call *c, int threads);
/* The transformer training ops (train.c): layer_norm, layer_norm_grad,
 * ew_unary_grad, softmax_axis, softmax_axis_grad, embedding_grad, dropout,
 * dropout_grad, split across x->threads from SL_CPU_TEAM_MIN_ELEMS
 * elements. SL_EINVAL (x->failure says which) for an id outside the
 * table. */
int sl_cpu_train_op(sl_cpu_exec *x, const sl_op_call *c);
/* Whether op is one of sl_cpu_train_op's. */
bool sl_cpu_is_train_op(unsigned op);
/* softmax's rows split across up to `threads` threads of the caller's
 * team (sl_cpu_parallel) when there is enough work; each row is computed
 * as on one thread. */
int sl_cpu_softmax(const sl_op_call *c, int threads);
int sl_cpu_softmax_xent(const sl_op_call *c);
int sl_cpu_softmax_xent_grad(const sl_op_call *c);
int sl_cpu_reduce_sum(const sl_op_call *c);
int sl_cpu_reduce_mean(const sl_op_call *c);
int sl_cpu_argmax(const sl_op_call *c);
/* norm.c: */
int sl_cpu_channel_bias_add(const sl_op_call *c);
int sl_cpu_channel_bias_grad(const sl_op_call *c);
/* batchnorm, batchnorm_infer and batchnorm_grad, their channels split
 * across up to `threads` threads of the team from SL_CPU_TEAM_MIN_ELEMS
 * elements (each channel's arithmetic as on one thread). */
int sl_cpu_batchnorm_op(const sl_op_call *c, int threads);
/* pool.c (maxpool_grad in plain C, ties to the first max): */
int sl_cpu_maxpool_grad(const sl_op_call *c, int threads);
/* amp.c (loss scaling): */
/* sigmoid and tanh of n floats, vectorised (vmath.c); y may be x. */
void sl_cpu_vsigmoid(const float *x, float *y, uint64_t n);
void sl_cpu_vtanh(const float *x, float *y, uint64_t n);
/* erf, and GELU (0.5 x (1 + erf(x / sqrt 2))), of n floats, vectorised
 * (vmath.c: within 1.5e-7 of the exact erf); y may be x. */
void sl_cpu_verf(const float *x, float *y, uint64_t n);
void sl_cpu_vgelu(const float *x, float *y, uint64_t n);
/* y = e^(x - m) for x <= m (a row's max), vectorised as sigmoid's e^x:
 * within 2 ulp; 0 where x - m < -87.3 (the exact value is below 1.2e-38),
 * NaN where x - m is NaN. y may be x. */
void sl_cpu_vexp_shifted(const float *x, float *y, uint64_t n, float m);
/* adam_update of n elements with these constants, vectorised (optim.c). */
typedef struct {
    float lr, beta1, beta2, eps, bc1, bc2, decay;
} sl_cpu_adam_k;
void sl_cpu_vadam(float *p, const float *g, float *m, float *v, uint64_t n, const sl_cpu_adam_k *k);
int sl_cpu_amp_unscale(const sl_op_call *c);
int sl_cpu_amp_commit(const sl_op_call *c);
int sl_cpu_amp_scale_update(const sl_op_call *c);
/* Whether maxpool call c's windows tile the plane (stride = kernel, no
 * padding, no dilation): sl_cpu_maxpool_tiled then runs it. */
bool sl_cpu_maxpool_tiles(const sl_op_call *c);
/* maxpool in plain C for windows that tile (sl_cpu_maxpool_tiles); a NaN
 * in a window is its max. Returns SL_OK. */
int sl_cpu_maxpool_tiled(const sl_op_call *c, int threads);
/* Whether maxpool call c has windows sl_cpu_maxpool_by_rows runs: no
 * dilation, pads below the kernel, rows of at most SL_CPU_POOL_ROW_MAX. */
#define SL_CPU_POOL_ROW_MAX 4096
bool sl_cpu_maxpool_rows(const sl_op_call *c);
/* maxpool in plain C for any such window (overlapping, padded; padding
 * never holds the max); a NaN in a window is its max. Returns SL_OK. */
int sl_cpu_maxpool_by_rows(const sl_op_call *c, int threads);
/* conv.c, through oneDNN: conv2d and its gradients, maxpool, avgpool and
 * avgpool_grad. */
int sl_cpu_dnnl_op(sl_cpu_exec *x, const sl_op_call *c);
/* conv2d and its gradients on the taps of the kernel that meet the input,
 * when some meet only padding at every output (conv_trim.c): *done tells
 * whether it ran c (the result is then sl_cpu_dnnl_op's on the trimmed
 * call); when not, it changed nothing and returns SL_OK. */
int sl_cpu_conv_trimmed(sl_cpu_exec *x, const sl_op_call *c, bool *done);
/* The attributes of a trimmed call beyond conv2d's own: i[9] and i[10] the
 * first used tap along H and W plus one (0: not trimmed), i[11] the full
 * kernel's extents (H << 32 | W). Set only by sl_cpu_conv_trimmed: conv.c
 * then views the weights (or their gradient) as the used taps of the full
 * kernel in place. */
#define SL_CPU_TRIM_LO_H 9
#define SL_CPU_TRIM_LO_W 10
#define SL_CPU_TRIM_FULL 11

/* Whether op runs through oneDNN (it then needs its stream's worker thread,
 * which owns the oneDNN state and OpenMP team). */
bool sl_cpu_op_uses_dnnl(unsigned op);
/* Frees a stream's oneDNN state; NULL is fine. Called by the worker thread
 * as it exits. */
void sl_cpu_dnnl_free(sl_cpu_dnnl *d);
/* The number of primitives in d's cache (0 for NULL). */
unsigned sl_cpu_dnnl_count(const sl_cpu_dnnl *d);

/* Stream functions of sl_cpu_device_ops; contracts in device.h. */
int sl_cpu_stream_create(sl_device *dev, int priority, sl_stream **out);
void sl_cpu_stream_destroy(sl_device *dev, sl_stream *s);
int sl_cpu_memcpy(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
/* The same for copies in and out of the device, whose host side may be a
 * client's memory: guarded (guard.h), a fault fails the copy with
 * SL_EINVAL. */
int sl_cpu_memcpy_host(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
int sl_cpu_launch(sl_device *dev, sl_stream *s, const sl_op_call *call);
int sl_cpu_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg);
size_t sl_cpu_stream_failure(sl_device *dev, sl_stream *s, char *buf, size_t len);
int sl_cpu_stream_set_workspace(sl_device *dev, sl_stream *s, void *ptr, size_t bytes);
int sl_cpu_synchronize(sl_device *dev, sl_stream *s);
void sl_cpu_stream_hold(sl_device *dev, sl_stream *s);
void sl_cpu_stream_release(sl_device *dev, sl_stream *s, bool run_here);

/* The shared state of an open cpu device (dev->ops must be sl_cpu_device_ops). */
sl_cpu_shared *sl_cpu_shared_of(sl_device *dev);

/* Test hook: enqueues on s a command that fails with `code` (an SL_E* code
 * other than SL_OK) when it executes, exactly as a failing kernel would: the
 * error becomes s's sticky error. Errors: SL_EINVAL (code is SL_OK or out of
 * range), SL_ENOMEM. Never blocks on device work. */
int sl_cpu_inject_error(sl_stream *s, int code);

/* Test hook: the number of oneDNN primitives cached by stream s (waits for
 * nothing: call it after synchronize). */
unsigned sl_cpu_cached_prims(sl_stream *s);

/* Test / benchmark hook: overrides SALUS_CPU_BF16 process-wide: 0 auto,
 * 1 native (where the processor has the kernels), 2 convert; -1 goes back
 * to the environment's choice. */
void sl_cpu_force_bf16_path(int path);

/* Test / benchmark hook: when threads > 0, every op on this device uses
 * exactly that many threads instead of cores / running streams; 0 restores
 * the default. */
void sl_cpu_force_threads(sl_device *dev, int threads);

#endif
