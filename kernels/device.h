/* The device contract: what every backend (cpu, cuda, sim) implements.
 *
 * A device owns memory (addresses handed out here are *device* addresses:
 * host memory on cpu and sim, cudaMalloc memory on cuda) and streams. A
 * stream executes what is submitted to it strictly in order, asynchronously
 * to the caller; salus gives each lane one stream. Submission functions
 * (memcpy_*, launch, host_callback) never wait for device work: they enqueue
 * and return. They may take a short internal lock.
 *
 * Errors: every function returns SL_OK or an SL_E* code. Errors raised while
 * a stream executes (a kernel failing) are *sticky per stream until the next
 * host callback*: later work on that stream up to the callback is skipped,
 * and the callback receives the first error. Backend-specific statuses are
 * translated to SL_E* codes inside the backend; none escape it.
 *
 * Error classes (docs/architecture.md, "Devices"). SL_EDEVICERESET, and only it, means
 * the *device is lost*: a fault that corrupts the device context (CUDA's
 * illegal address, launch failure, uncorrectable ECC). From then on work on
 * every stream may fail with SL_EDEVICERESET, every host callback already
 * enqueued, and every one enqueued later, still runs exactly once (with
 * SL_EDEVICERESET where its work did not complete), and nothing works again
 * until reset(). Every other code is a *per-request* error (bad input, a
 * failed workspace allocation = SL_EEXHAUSTED, SL_EDEVICE): the work it
 * belongs to failed; memory, other work and other streams are unaffected.
 *
 * Threads: a device and its streams may be used from any thread. Host
 * callbacks run on a backend thread; they may submit more work (to any
 * stream) but must not call synchronize or stream_destroy. */
#ifndef SL_DEVICE_H
#define SL_DEVICE_H

#include "ops.h"
#include "tensor.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sl_device sl_device;
typedef struct sl_stream sl_stream;
typedef struct sl_partition sl_partition;           /* a compute partition (below) */
typedef struct sl_partition_caps sl_partition_caps; /* its granularity (below) */
typedef struct sl_dev_graph sl_dev_graph;           /* a recorded iteration (below) */

/* Called on a backend thread once all work submitted to the stream before it
 * has finished. status is SL_OK or the first error since the previous
 * callback on that stream. */
typedef void (*sl_host_fn)(void *arg, int status);

typedef struct sl_device_ops {
    const char *name; /* "cpu", "cuda", "sim" */
    size_t priv_size; /* bytes of backend state allocated after struct sl_device */

    /* Opens device `index` of this backend. arg is the text after "name:" in
     * the spec minus the index (e.g. "v100" for "sim:v100"; "" if none).
     * Fills dev->total_bytes and dev->description. dev->priv is zeroed.
     * Errors: SL_ENODEV (no driver / no such device), SL_EINVAL (bad arg). */
    int (*open)(sl_device *dev, int index, const char *arg);
    /* Releases everything; safe on a half-opened device. Streams must be gone. */
    void (*close)(sl_device *dev);

    /* Allocates `bytes` of device memory, aligned to at least 256 bytes. This
     * is for large regions (the arena), not per-tensor use.
     * Errors: SL_EEXHAUSTED. */
    int (*mem_alloc)(sl_device *dev, size_t bytes, void **out);
    void (*mem_free)(sl_device *dev, void *ptr);

    /* priority: 0 = normal, > 0 = more urgent, < 0 = less, fixed for the
     * stream's life. cuda: stream priorities (> 0 above the default, the
     * default being CUDA's lowest); cpu: < 0 runs the stream's threads under
     * SCHED_IDLE, so they take only the cores normal threads leave, and off
     * the first core (kept for high-priority work and the transport); sim:
     * as cuda (kernels/sim sim.h, sl_sim_psc's classes). salusd gives a
     * lane a stream of its session's class (executor.c) and swaps streams
     * when the class changes. */
    int (*stream_create)(sl_device *dev, int priority, sl_stream **out);
    /* Waits for the stream's pending work, then frees it. */
    void (*stream_destroy)(sl_device *dev, sl_stream *s);

    /* Asynchronous copies. Host buffers must stay valid (and unmodified, for
     * sources) until a later host callback on the same stream has run. The
     * host side of h2d and d2h may be a client's shared memory (mapped by
     * salusd, registered with host_register when the backend has it) that
     * the client can make fault: the backend must turn a fault into an error
     * of that copy (SL_EINVAL, sticky as any stream error), never a signal
     * that kills the process (guard.h), and must not let such memory be
     * touched by code it cannot guard (a driver's own staging copy). */
    int (*memcpy_h2d)(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
    int (*memcpy_d2h)(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
    int (*memcpy_d2d)(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);

    /* Enqueues one op. *call is copied; its tensors must have been validated
     * by the op registry (sl_op_infer) and point into device memory that stays
     * allocated until the op has run. Errors at submission: SL_EUNSUPPORTED
     * (op not implemented by this backend), SL_ENOMEM. */
    int (*launch)(sl_device *dev, sl_stream *s, const sl_op_call *call);
    /* Optional: the float dtypes (SL_DTS bits) this backend runs op in, a
     * subset of the op's own (sl_op_def.dtypes); for cast, those it converts
     * between; 0 when the backend has no kernel for op. NULL: every op, in
     * f32 only. salusd refuses, at graph registration, an op
     * in a dtype its device does not run (sl_dev_op_dtypes), so launch never
     * sees one. Never blocks. */
    unsigned (*op_dtypes)(sl_device *dev, unsigned op);

    /* Gives stream s a workspace, in stream order: ops launched on s after
     * this call take every scratch buffer they need (oneDNN scratchpads and
     * layout copies, the cuBLAS workspace, cuDNN convolution workspaces,
     * reduction partials) from [ptr, ptr + bytes) and none from the backend;
     * an op needing more than bytes fails with SL_EEXHAUSTED (the sizes are
     * logged; cuda first falls back to convolution algorithms needing less)
     * rather than using memory outside it. ptr NULL with bytes 0 goes back
     * to the backend's own memory, grown on demand (the state of a new
     * stream). Ownership: ptr is device memory, 256-byte aligned, owned by
     * the caller, who must keep it allocated and unused by anything else
     * until all work launched on s before the next stream_set_workspace (or
     * stream_destroy) has finished; the backend never frees it. salusd gives
     * each lane's stream the lane's framework block (docs/architecture.md, "Memory").
     * Errors: SL_EINVAL (ptr NULL with bytes > 0, or misaligned), SL_ENOMEM.
     * Never waits for device work. */
    int (*stream_set_workspace)(sl_device *dev, sl_stream *s, void *ptr, size_t bytes);

    /* Optional set (NULL: ops launch one by one): an iteration recorded
     * once and replayed in one launch (a CUDA Graph).
     * graph_begin: from now until graph_end, launch on s records the op
     * instead of running it; nothing else may be submitted to s meanwhile
     * (copies and callbacks are refused), and s must be idle when it
     * starts. graph_end: stops recording and instantiates the ops recorded
     * as one executable, *out, holding *bytes of device memory. On an error
     * nothing is kept, s launches normally again, and reason says why in
     * words an operator can act on. graph_launch: enqueues the executable on
     * s; it runs as its ops launched one by one would, with the same
     * addresses, so the caller replays it only while those addresses hold
     * the same tensors (salusd keys it on every call's pointers, shapes and
     * attributes). graph_destroy: frees it; launches already enqueued still
     * run (cuda frees it when they have). */
    int (*graph_begin)(sl_device *dev, sl_stream *s);
    int (*graph_end)(sl_device *dev, sl_stream *s, sl_dev_graph **out, size_t *bytes, char *reason,
                     size_t len);
    int (*graph_launch)(sl_device *dev, sl_stream *s, sl_dev_graph *g);
    void (*graph_destroy)(sl_device *dev, sl_dev_graph *g);

    /* Enqueues fn(arg, status) to run after all prior work on s. */
    int (*host_callback)(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg);

    /* Blocks until all work submitted to s has finished; returns the pending
     * sticky error (and clears it), or SL_OK. */
    int (*synchronize)(sl_device *dev, sl_stream *s);

    /* Optional pair (NULL on backends whose streams run elsewhere, cuda).
     * stream_hold: once the command running on s (if any) is done, nothing
     * more starts until the matching stream_release (holds nest; every hold
     * must be released, and synchronize on a held stream would wait for
     * ever).
     * stream_release(run_here): when s's own thread is idle, the caller
     * runs what s holds itself, host callbacks included, before returning;
     * so it must hold no lock those callbacks take. That saves the thread
     * hand-off (microseconds) that dominates a small iteration; the backend
     * leaves to its thread whatever cannot run elsewhere. */
    void (*stream_hold)(sl_device *dev, sl_stream *s);
    void (*stream_release)(sl_device *dev, sl_stream *s, bool run_here);

    /* Recovers a lost device (after SL_EDEVICERESET). Preconditions: every
     * host callback has run, every stream is destroyed and all memory is
     * freed (a CUDA device reset destroys both). Afterwards the device is as
     * freshly opened. May block. Errors: SL_ENODEV (not recoverable: stop
     * using the device). */
    int (*reset)(sl_device *dev);

    /* Optional (NULL: the backend injects no faults; sim injects them all,
     * cuda only GRAPH and CLEAR, SL_EUNSUPPORTED for the rest). Makes the
     * device misbehave on purpose, for tests of the fault paths:
     *   SL_FAULT_ALLOC n    the next n ops fail with SL_EEXHAUSTED
     *   SL_FAULT_STICKY     the next op loses the device (SL_EDEVICERESET)
     *   SL_FAULT_FATAL      as STICKY, and the reset that follows fails
     *   SL_FAULT_SLOW n     every op and copy takes n times as long
     *   SL_FAULT_GRAPH n    the next n graph_end calls fail (the
     *                       iteration's recording is refused)
     *   SL_FAULT_CLEAR      none of the above
     * Thread-safe; never blocks. Errors: SL_EINVAL (kind or n out of range:
     * n in [1, 1000000] for ALLOC, SLOW and GRAPH), SL_EUNSUPPORTED. */
    int (*inject_fault)(sl_device *dev, int kind, unsigned n);

    /* Optional pair (NULL: copies of host memory need no preparation; cpu
     * and sim guard each copy instead). host_register prepares [ptr, ptr +
     * n), a client's shared memory that salusd mapped, for copies in and
     * out of the device, before any copy names it; host_unregister undoes
     * it before the memory is unmapped, once no copy uses it. cuda pins it:
     * copies are then DMA the CPU never performs, so nothing in salusd can
     * fault on the client's pages, and the client's later changes to the
     * file cannot take pinned pages away. May block (pinning faults every
     * page in): never under the server lock. Errors: SL_EEXHAUSTED (cannot
     * pin), SL_EINVAL. */
    int (*host_register)(sl_device *dev, void *ptr, size_t n);
    void (*host_unregister)(sl_device *dev, void *ptr);
    /* Optional (NULL: the backend never knows more than the code). Why the
     * last failed op on s failed, when the backend knows more than its
     * code, e.g. "conv2d needs 50176576 bytes of oneDNN scratch; the
     * stream's workspace has 33554432": copies it into buf (terminated;
     * "" when there is none), forgets it, returns its length. Call it from
     * the first host callback of s that follows the failure (the reason is
     * forgotten after that callback), where no op of s runs. */
    size_t (*stream_failure)(sl_device *dev, sl_stream *s, char *buf, size_t len);

    /* ---- compute partitions (optional: all NULL where the backend has
     * none) ----
     *
     * A partition is a share of the device's compute units that streams
     * bound to it run on, alone: SMs through CUDA green contexts on cuda, a
     * set of cores on cpu, a number of SMs of the modelled device on sim.
     * Live partitions never overlap: their units sum to at most the
     * device's. A stream bound to none runs on the whole device (on cuda
     * that is the primary context, whose kernels are NOT kept off green
     * contexts' SMs: salusd binds every lane's stream once partitions are
     * on). Memory is not partitioned, nor (on every backend) memory
     * bandwidth. Partitions change between iterations only: resize and
     * bind require the streams concerned to be idle (synchronized, or
     * their last host callback ran), so no op ever sees its units change.
     * Threads: any thread, serialised by the caller per partition; never
     * waits for device work, but cuda's create and resize build green
     * contexts (milliseconds): never under a lock the request path takes.
     *
     * partition_caps: the granularity. Errors: none but SL_EUNSUPPORTED
     * (the device cannot partition after all, e.g. a cuda driver older
     * than green contexts: caps->note says so, and partition_create fails
     * with SL_EUNSUPPORTED). */
    int (*partition_caps)(sl_device *dev, sl_partition_caps *caps);
    /* A partition of `units` units, rounded up to the granularity
     * (min_units, then a multiple of align). Errors: SL_EINVAL (units 0 or
     * above the device's), SL_EEXHAUSTED (the free units do not suffice),
     * SL_EUNSUPPORTED, SL_ENOMEM, SL_EDEVICE. On success *out is the
     * caller's until partition_destroy. */
    int (*partition_create)(sl_device *dev, unsigned units, sl_partition **out);
    /* Gives p `units` units (rounded as above); shrinking first frees
     * units that another partition's growth can then take. Precondition:
     * every stream bound to p is idle. Errors: as partition_create; on
     * error p keeps its units and its streams stay usable. */
    int (*partition_resize)(sl_device *dev, sl_partition *p, unsigned units);
    /* Frees p. Precondition: no stream is bound to it. NULL is fine. */
    void (*partition_destroy)(sl_device *dev, sl_partition *p);
    /* The units p has now (after rounding). */
    unsigned (*partition_units)(sl_device *dev, const sl_partition *p);
    /* Runs s's later work on p (NULL: the whole device again). Precondition:
     * s is idle. cuda re-creates s's CUstream in p's green context and
     * rebinds its cuBLAS/cuDNN handles; cpu moves s's worker and its OpenMP
     * team to p's cores and sizes their thread count to them. Errors:
     * SL_EUNSUPPORTED, SL_ENOMEM, SL_EDEVICE; on error s stays as it was. */
    int (*stream_bind)(sl_device *dev, sl_stream *s, sl_partition *p);
    /* Optional (NULL: partitions are strict). lend true: p's units also
     * serve the normal-priority streams (created with priority >= 0) bound
     * to every other partition, whenever those have work; p's own streams
     * stay on p's units, and p's below-normal streams yield a lent unit at
     * once, mid-op (cpu: they run SCHED_IDLE, so the kernel hands the core
     * over at its next scheduling decision; normal-priority streams of p
     * share it as equals). The point: a partition guarantees the streams
     * bound to it their units, without keeping them off units the others
     * leave idle or fill with below-normal work. Offered only where the
     * hand-over is immediate: a cuda kernel keeps its SMs until it ends,
     * so green contexts stay strict. A loan follows p's resizes and ends
     * with lend false or partition_destroy. Threads and timing as
     * partition_resize (live on cpu). Errors: SL_EINVAL (p NULL). */
    int (*partition_lend)(sl_device *dev, sl_partition *p, bool lend);
} sl_device_ops;

/* What partitions a device supports (sl_device_ops.partition_caps). */
struct sl_partition_caps {
    unsigned units;     /* compute units of the device: SMs (cuda, sim), cores (cpu) */
    unsigned min_units; /* the smallest partition (cuda: minSmPartitionSize) */
    unsigned align;     /* sizes above min_units step by this (cuda: smCoscheduledAlignment) */
    /* resize and stream_bind may also be called while the streams
     * concerned run: the change takes effect between their ops (cpu);
     * false: only while they are idle, as stated above (cuda) */
    bool live;
    char unit[8];  /* "SM", "core" */
    char note[96]; /* how: "green contexts", "core sets", or why not */
};

/* Fault kinds of sl_device_ops.inject_fault. */
enum sl_fault_kind {
    SL_FAULT_ALLOC,
    SL_FAULT_STICKY,
    SL_FAULT_FATAL,
    SL_FAULT_SLOW,
    SL_FAULT_CLEAR,
    SL_FAULT_GRAPH, /* the next n graph instantiations fail (graph_end) */
};

struct sl_device {
    const sl_device_ops *ops;
    int index;
    uint64_t total_bytes; /* memory the device reports */
    /* framework bytes per lane that comfortably hold the workspaces of this
     * backend's ops (stream_set_workspace); salusd's default */
    uint64_t workspace_hint;
    /* its work runs on the host's own cores (cpu), competing with the
     * server's and its clients' threads for them */
    bool host_cores;
    char description[128]; /* e.g. "cpu (2 cores; GEMM: oneDNN, convolutions: oneDNN)" */
    void *priv;            /* backend state, ops->priv_size bytes */
};

/* Opens a device from a spec "cpu", "cuda", "cuda:1", "sim:v100", "sim:v100:0".
 * On success *out owns the device (release with sl_dev_close).
 * Errors: SL_EINVAL (unknown backend or malformed spec), SL_ENODEV,
 * SL_EUNSUPPORTED (backend not built), SL_ENOMEM. */
int sl_dev_open(const char *spec, sl_device **out);
/* Closes and frees; NULL is fine. */
void sl_dev_close(sl_device *dev);
/* The float dtypes (SL_DTS bits) dev runs op in, within what the op itself
 * accepts: the backend's op_dtypes, or f32 when it has none. 0: the backend
 * has no kernel for op at all. */
unsigned sl_dev_op_dtypes(sl_device *dev, unsigned op);

/* Backend tables (sl_dev_open picks by name). cuda's is NULL when not built. */
extern const sl_device_ops sl_cpu_device_ops;
extern const sl_device_ops *const sl_cuda_device_ops_ptr;

#endif
