/* salus client API.
 *
 * A process talks to one salusd through a salus_client (one NNG REQ socket).
 * It opens sessions; a session owns persistent tensors (weights, optimizer
 * state) that stay resident in the server between iterations, and graphs
 * registered once and then run once per iteration with fresh feeds.
 *
 *   salus_client *c;   salus_connect(NULL, &c);           // default URL
 *   salus_session *s;  salus_session_open(c, &opts, &s);
 *   salus_tensor_create(s, SALUS_F32, 2, dims, init, &w);
 *   salus_graph *g = salus_graph_new();  ... build ...
 *   salus_graph_register(s, g);
 *   salus_run(s, g, feeds, n_fetch, fetch, out);           // per iteration
 *   salus_graph_free(g); salus_session_close(s); salus_disconnect(c);
 *
 * Errors: every fallible function returns SALUS_OK (0) or a SALUS_E* code.
 * salus_last_error(c) gives the server's message for the last failure on
 * that client. Out-parameters are written only on success.
 *
 * Connection and restarts: a salus_client stays usable across salusd
 * restarts. While no server answers, calls fail at once with SALUS_ECONN
 * (a call in flight when the connection drops fails too; nothing is re-sent);
 * the client reconnects by itself (retrying every 0.1-1 s, and starting
 * afresh when calls have failed for 2 s) once a server listens on the URL
 * again. Sessions do not survive a restart: calls on an
 * old salus_session then fail with SALUS_ESESSIONLOST; pass it to
 * salus_session_close (which then just frees it) and open a new one.
 *
 * Security: a session belongs to the client that opened it (its token), and
 * over ipc:// also to that process's user: other users get SALUS_EPERM even
 * with the session's id and token. salusd's ipc:// socket is private to its
 * user unless started with --ipc-mode. For tls+tcp:// see salus_connect.
 *
 * Device faults: a sticky device error (the GPU context is lost) fails every
 * running iteration with SALUS_EDEVICERESET and salusd resets the device.
 * Every session's tensors keep their ids and shapes, but their contents are
 * lost: each session gets SALUS_EDEVICERESET once (from its failed run or
 * copy, else from its next request that uses device data), must write its
 * tensors again (re-upload persistent state) and may then retry; registered
 * graphs stay valid. Other device errors (SALUS_EDEVICE, SALUS_EEXHAUSTED for
 * a failed device allocation) fail only the request they belong to.
 *
 * Threads: one salus_client may be shared by threads; its requests are
 * serialised. A salus_graph builder is not thread-safe.
 * Blocking: every call that talks to the server blocks until its reply
 * (salus_run waits for the iteration, including time queued behind others). */
#ifndef SALUS_H
#define SALUS_H

#include <stddef.h>
#include <stdint.h>

/* libsalusclient is built with hidden visibility: what this header declares
 * is exported, marked SALUS_EXPORT, and nothing else, so the library's
 * internals stay free to change without breaking a program linked to it. */
#if defined(__GNUC__) || defined(__clang__)
#define SALUS_EXPORT __attribute__((visibility("default")))
#else
#define SALUS_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SALUS_PROTOCOL_VERSION 1

/* Status codes (same numbers as the wire protocol's enum Code). */
enum salus_code {
    SALUS_OK = 0,
    SALUS_EINVAL = 1,        /* invalid argument or malformed request */
    SALUS_ENOMEM = 2,        /* host memory exhausted */
    SALUS_EEXHAUSTED = 3,    /* device memory quota or capacity exhausted */
    SALUS_ENOTFOUND = 4,     /* unknown session, tensor or graph */
    SALUS_EPERM = 5,         /* not the owner, or not allowed */
    SALUS_EPROTO = 6,        /* protocol error or version mismatch */
    SALUS_EDEVICE = 7,       /* the device failed the request */
    SALUS_ENODEV = 8,        /* the server has no usable device */
    SALUS_ESHUTDOWN = 9,     /* the server is draining */
    SALUS_EUNSUPPORTED = 10, /* not supported by this server or backend */
    SALUS_ETIMEDOUT = 11,    /* no reply in time */
    SALUS_ECONN = 12,        /* cannot reach the server / connection lost */
    SALUS_EINTERNAL = 13,    /* a bug in salus */
    SALUS_ESESSIONLOST = 14, /* no such session with that token (gone, or never was) */
    SALUS_EDEVICERESET = 15, /* device reset: tensor contents lost, re-upload them */
    SALUS_EBUSY = 16,        /* resource in use (e.g. tensor used by a graph) */
};

/* Element types. SALUS_BF16 and SALUS_F16 are 16-bit floats whose elements
 * are passed as uint16_t bit patterns: bfloat16 (the upper half of an f32)
 * and IEEE 754 binary16. Tensors, graph inputs, feeds and fetches of these
 * types take 2 bytes per element; convert with the functions below. */
enum salus_dtype { SALUS_F32 = 0, SALUS_I32 = 1, SALUS_BF16 = 2, SALUS_F16 = 3 };

/* Conversions between f32 and the 16-bit types, the same as salusd's
 * kernels do them: narrowing rounds to nearest, ties to even (as IEEE 754
 * and PyTorch's .to() do); NaN stays NaN (quiet), a value beyond the
 * type's range becomes infinity, f16's subnormals are exact both ways.
 * Widening is exact. */
SALUS_EXPORT uint16_t salus_bf16_from_f32(float f);
SALUS_EXPORT float salus_f32_from_bf16(uint16_t h);
SALUS_EXPORT uint16_t salus_f16_from_f32(float f);
SALUS_EXPORT float salus_f32_from_f16(uint16_t h);
/* The same for n elements: dtype SALUS_BF16 or SALUS_F16 (src and dst must
 * not overlap). Errors: SALUS_EINVAL (another dtype). */
SALUS_EXPORT int salus_half_from_f32(int dtype, const float *src, uint16_t *dst, size_t n);
SALUS_EXPORT int salus_half_to_f32(int dtype, const uint16_t *src, float *dst, size_t n);

/* How f32 matmuls and convolutions may round their products
 * (salus_session_opts). */
enum salus_math {
    SALUS_MATH_DEFAULT = 0, /* PyTorch's: matmul exact, convolution TF32 */
    SALUS_MATH_EXACT = 1,   /* f32 products */
    SALUS_MATH_TF32 = 2     /* TF32 tensor cores where the device has them */
};

#define SALUS_MAX_DIMS 6

/* Static text for a code (never NULL). */
SALUS_EXPORT const char *salus_strerror(int code);

typedef struct salus_client salus_client;
typedef struct salus_session salus_session;
typedef struct salus_graph salus_graph;

/* The URL of the salusd to use by default: $SALUS_URL when set, else
 * ipc://$XDG_RUNTIME_DIR/salus/salus.sock when that socket exists (a salusd
 * of your own), else ipc:///run/salus/salus.sock (the system's). Returns a
 * static buffer. */
SALUS_EXPORT const char *salus_default_url(void);

/* Connects to the server at url (NULL = salus_default_url()) and checks the
 * protocol version. On success *out is owned by the caller. url is
 * ipc:///path, tcp://host:port (trusted networks only) or tls+tcp://host:port.
 *
 * tls+tcp:// is configured from the environment:
 *   SALUS_TLS_CA           PEM file of the CA(s) that signed salusd's
 *                          certificate (required: the server is verified)
 *   SALUS_TLS_SERVER_NAME  name the certificate must carry (default: the
 *                          URL's host, e.g. 127.0.0.1)
 *   SALUS_TLS_CERT, SALUS_TLS_KEY  PEM client certificate and key, for a
 *                          salusd started with --tls-ca (client auth)
 *
 * Over ipc:// the server must run as root, as the caller's own user, or as
 * the uid in SALUS_SERVER_UID (environment): a socket answered by anyone
 * else (who took the path first) is refused with SALUS_EPERM before any
 * request is sent. Reconnections are checked the same way.
 *
 * Bounded: where nobody listens it fails at once; a server that takes the
 * connection but does not answer the protocol check within
 * SALUS_CONNECT_TIMEOUT_MS milliseconds (environment; default 15000; a value
 * that is not a positive integer means the default) fails it then. A peer
 * that accepts but never completes NNG's own handshake is cut off by NNG
 * after 10 s. Only connecting is bounded: later calls wait as long as their
 * request takes.
 *
 * Errors: SALUS_ECONN (nobody listening, or the connection failed),
 * SALUS_ETIMEDOUT (no answer within SALUS_CONNECT_TIMEOUT_MS), SALUS_EPROTO
 * (version mismatch), SALUS_EINVAL (bad URL; tls+tcp:// without SALUS_TLS_CA or with unreadable
 * files), SALUS_EPERM (TLS: a certificate was refused, by either side; ipc://:
 * the server runs as a user not trusted),
 * SALUS_ENOMEM. salus_last_error(NULL) then says why. */
SALUS_EXPORT int salus_connect(const char *url, salus_client **out);

/* Closes the connection. Sessions still open are closed by the server when it
 * sees the connection go; their salus_session handles must still be passed to
 * salus_session_close (which then only frees them). NULL is fine. */
SALUS_EXPORT void salus_disconnect(salus_client *c);

/* The server's message for the last failed call on c ("" if none). Valid until
 * the next call on c. With c NULL: why the calling thread's last salus_connect
 * failed. */
SALUS_EXPORT const char *salus_last_error(const salus_client *c);

/* A description of the server's device and policy, from the handshake. */
SALUS_EXPORT const char *salus_server_device(const salus_client *c);

typedef struct salus_session_opts {
    const char *name;             /* shown in status; NULL = "" */
    int priority;                 /* larger = more important */
    double weight;                /* fair-share weight; 0 = 1 */
    uint64_t persistent_bytes;    /* persistent quota; 0 = no quota */
    uint64_t ephemeral_bytes;     /* expected per-iteration peak; 0 = unknown */
    double expected_total_s;      /* declared device time; 0 = unknown */
    uint64_t expected_iterations; /* declared iterations; 0 = unknown */
    int wait_for_admission;       /* nonzero: wait until it fits */
    /* compute units (SMs, cores) its iterations need to run about as fast
     * as on the whole device; 0 = unknown. Sizes the high-priority
     * partition when salusd runs --partitions auto. */
    unsigned compute_units;
    /* enum salus_math for the session's f32 matmuls (matmul, matmul_acc,
     * batch_matmul) and convolutions (conv2d and its gradients). 0 is
     * PyTorch's default for each: matmul exact (torch.backends.cuda.
     * matmul.allow_tf32 = False), convolution TF32 (torch.backends.cudnn.
     * allow_tf32 = True). SALUS_MATH_TF32 lets a device with TF32 tensor
     * cores (cuda, Ampere and later) multiply with 10-bit mantissas and
     * sum in f32; other devices compute exact f32 whatever the choice.
     * bf16 and f16 ops are not affected. Status shows the choice. */
    int math_matmul;
    int math_conv;
} salus_session_opts;

/* Opens a session (opts may be NULL for defaults). *out is owned by the caller
 * and must be passed to salus_session_close. Inside a cluster job, $SALUS_JOB
 * ("JOB.STEP", set by the Slurm plugin) names the job step the session
 * belongs to: it then lives under the step's quota and ends with it.
 * Errors: SALUS_EEXHAUSTED (does not fit and not waiting), SALUS_ESHUTDOWN,
 * SALUS_ECONN, SALUS_ENOMEM, SALUS_EPERM (the step is not running there),
 * SALUS_EINVAL ($SALUS_JOB is not JOB.STEP). */
SALUS_EXPORT int salus_session_open(salus_client *c, const salus_session_opts *opts,
                                    salus_session **out);

/* Closes the session on the server (freeing every tensor and graph of it) and
 * frees s, whatever the result. Returns the server's answer. NULL is fine. */
SALUS_EXPORT int salus_session_close(salus_session *s);

/* The server-side id of the session. */
SALUS_EXPORT uint64_t salus_session_id(const salus_session *s);

/* Bytes of shared memory the session's runs move their feeds and fetches
 * through (0: they travel inside the messages). Over ipc:// a session
 * hands salusd a sealed memfd (over the descriptor socket next to the ipc
 * path, as SCM_RIGHTS) the first time a run moves 16 KiB or more, and grows
 * it as needed, within salusd's per-session budget (--shm-session-bytes;
 * runs needing more stay inline). Where salusd refuses it (no descriptor
 * socket, or a session opened over another transport) runs stay inline.
 * Set SALUS_SHM=0 before salus_connect to keep everything inline. */
SALUS_EXPORT size_t salus_session_shm_bytes(salus_session *s);

/* Creates a persistent tensor of the given shape. init: NULL = zeros, else
 * exactly elems * 4 bytes (larger than one message: created zeroed, then
 * written in chunks). Writes its id to *id.
 * Errors: SALUS_EINVAL (bad shape), SALUS_EEXHAUSTED (quota or capacity;
 * the session's host-memory budget, salusd --session-metadata). */
SALUS_EXPORT int salus_tensor_create(salus_session *s, int dtype, int ndim, const int64_t *dims,
                                     const void *init, uint64_t *id);
/* Overwrites a tensor; bytes must equal its size. A tensor larger than
 * salusd's message limit (--max-message) moves in chunks of at most half
 * of it (16 MiB at most), one request each; a call that fails part-way
 * leaves the tensor partly written. */
SALUS_EXPORT int salus_tensor_write(salus_session *s, uint64_t id, const void *data, size_t bytes);
/* Reads a tensor into buf; bytes must equal its size. Chunked like
 * salus_tensor_write. */
SALUS_EXPORT int salus_tensor_read(salus_session *s, uint64_t id, void *buf, size_t bytes);
/* Frees a tensor. Errors: SALUS_EBUSY while a registered graph uses it. */
SALUS_EXPORT int salus_tensor_free(salus_session *s, uint64_t id);

/* ---- graph builder ------------------------------------------------------
 * A graph is built on the client and validated as it is built (shapes are
 * inferred with the same op registry the server uses), then registered with
 * one session. Values are identified by salus_value handles. Builder calls
 * that fail return SALUS_NO_VALUE and record the reason (salus_graph_error);
 * later calls on a failed builder also fail, so a whole graph can be built
 * and checked once at the end. */
typedef uint32_t salus_value;
#define SALUS_NO_VALUE UINT32_MAX

/* A new, empty builder (NULL on out of memory). */
SALUS_EXPORT salus_graph *salus_graph_new(void);
/* Frees the builder. If registered, the server-side graph is freed too (best
 * effort; it also goes when its session closes). NULL is fine. */
SALUS_EXPORT void salus_graph_free(salus_graph *g);
/* The first builder error, or NULL when there is none. */
SALUS_EXPORT const char *salus_graph_error(const salus_graph *g);

/* An input fed at every run. */
SALUS_EXPORT salus_value salus_graph_input(salus_graph *g, int dtype, int ndim,
                                           const int64_t *dims);
/* A persistent tensor of the session the graph will be registered with;
 * dtype/ndim/dims must be the tensor's (checked by the server). */
SALUS_EXPORT salus_value salus_graph_param(salus_graph *g, uint64_t tensor_id, int dtype, int ndim,
                                           const int64_t *dims);
/* Adds an op; returns its first output (outputs are consecutive handles). Ops
 * without outputs (sgd_update) return the handle of their first input.
 * type, inputs and attributes are as docs/ops.md lists them; iattrs and
 * fattrs are positional, and n_iattrs / n_fattrs say how many are sent: an
 * optional attribute may be left out, a required one may not (the op fails,
 * naming the attribute). Attribute arrays may be NULL when their count is 0. */
SALUS_EXPORT salus_value salus_graph_op(salus_graph *g, const char *type, unsigned n_in,
                                        const salus_value *inputs, unsigned n_iattrs,
                                        const int64_t *iattrs, unsigned n_fattrs,
                                        const float *fattrs);

/* Shape of a value: writes dtype, ndim and up to SALUS_MAX_DIMS dims.
 * Errors: SALUS_EINVAL (no such value). */
SALUS_EXPORT int salus_graph_shape(const salus_graph *g, salus_value v, int *dtype, int *ndim,
                                   int64_t *dims);
/* Bytes of a value's tensor (0 for no such value). */
SALUS_EXPORT size_t salus_graph_bytes(const salus_graph *g, salus_value v);
/* The inputs of g in feed order (the order salus_run's feeds follow): how
 * many there are, and the value of input i (SALUS_NO_VALUE when i is out of
 * range). For graphs built elsewhere: a trainer's, an ONNX model's. */
SALUS_EXPORT unsigned salus_graph_n_inputs(const salus_graph *g);
SALUS_EXPORT salus_value salus_graph_input_value(const salus_graph *g, unsigned i);

/* Registers the graph with s (at most once per builder). The server validates
 * and plans it; planned_peak (may be NULL) receives the ephemeral bytes one
 * iteration needs. Errors: SALUS_EINVAL (invalid graph; a builder error),
 * SALUS_EEXHAUSTED (the plan does not fit). */
SALUS_EXPORT int salus_graph_register(salus_session *s, salus_graph *g, uint64_t *planned_peak);

/* Ephemeral memory of a registered graph, as the server planned it: the
 * bytes one iteration needs (planned peak) and the sum of all its ephemeral
 * tensors (what allocating each separately, without reuse, would take).
 * Errors: SALUS_EINVAL (not registered). */
SALUS_EXPORT int salus_graph_memory(const salus_graph *g, uint64_t *planned_peak,
                                    uint64_t *naive_bytes);

/* The server-side id of a registered graph (0 before registration). */
SALUS_EXPORT uint64_t salus_graph_id(const salus_graph *g);

/* Runs one iteration of a registered graph: feeds[i] holds the bytes of the
 * i-th input (in the order salus_graph_input was called; exact sizes), and
 * the values fetch[0..n_fetch) are copied into out[j] (each
 * salus_graph_bytes(g, fetch[j]) bytes). Blocks until the iteration is done.
 * Feeds and fetches travel inline unless the run uses shared memory (local
 * ipc:// clients, from 16 KiB moved): inline, a run whose request or reply
 * would pass salusd's --max-message fails with SALUS_EINVAL saying so.
 * Reproducibility: under the priority policy salusd may split a long
 * matmul into parts to fill idle gaps; a split along K sums in another
 * order, so the same iteration can differ in the last bits between runs.
 * Errors: SALUS_EINVAL, SALUS_ENOTFOUND, SALUS_EDEVICE, SALUS_EEXHAUSTED (a
 * device allocation failed; the message names the op and the bytes it
 * needed where the backend says), SALUS_EDEVICERESET (see "Device faults" above),
 * SALUS_ESHUTDOWN (salusd is draining: the iteration did not start),
 * SALUS_ECONN, SALUS_ESESSIONLOST. */
SALUS_EXPORT int salus_run(salus_session *s, const salus_graph *g, const void *const *feeds,
                           unsigned n_fetch, const salus_value *fetch, void *const *out);

/* A write of a whole small tensor of the session, made with a run. */
typedef struct salus_run_write {
    uint64_t tensor;  /* from salus_tensor_create */
    const void *data; /* its new contents */
    size_t bytes;     /* exactly the tensor's size, at most 256 */
} salus_run_write;
/* salus_run, with writes[0..n_writes) made on the device, in order, before
 * the iteration's first op, in the same request: per-step scalars (a
 * learning rate, a loss scale, a step count) at no extra round trip. At
 * most 16 writes. Errors as salus_run's; SALUS_ENOTFOUND names a tensor
 * the session does not have, SALUS_EINVAL a size that does not match. */
SALUS_EXPORT int salus_run_ex(salus_session *s, const salus_graph *g, const void *const *feeds,
                              unsigned n_fetch, const salus_value *fetch, void *const *out,
                              unsigned n_writes, const salus_run_write *writes);

/* ---- nn: models of layers, compiled to a training and an inference graph --
 * A model is a stack of layers on one sample's shape. Compiling it with a
 * session creates its parameters (and optimizer state) as persistent tensors,
 * emits forward, backward and update ops into one training graph (loss:
 * softmax cross-entropy over the last layer's [batch, classes] output, i32
 * labels) and the forward pass into an inference graph (argmax per sample),
 * and registers both. Layer calls record the first error (salus_model_error)
 * and return SALUS_EINVAL from then on. */
typedef struct salus_model salus_model;

enum salus_optimizer_kind { SALUS_SGD = 0, SALUS_MOMENTUM = 1, SALUS_ADAM = 2 };

/* Optimisers, with PyTorch's semantics (torch.optim):
 *   SALUS_SGD       g += weight_decay * p; p -= lr * g
 *   SALUS_MOMENTUM  g += weight_decay * p; v = momentum * v + g; p -= lr * v
 *                   (SGD(momentum=m), dampening 0, not Nesterov)
 *   SALUS_ADAM      g += weight_decay * p (Adam's L2, as torch.optim.Adam), or
 *                   with SALUS_OPT_DECOUPLED_WD p -= lr * weight_decay * p
 *                   first (torch.optim.AdamW); then m = b1 m + (1 - b1) g,
 *                   v = b2 v + (1 - b2) g^2, p -= lr * (m / (1 - b1^t)) /
 *                   (sqrt(v / (1 - b2^t)) + eps).
 * weight_decay is applied by every optimiser (never ignored). Adam's beta1,
 * beta2 and eps read 0 as their defaults (0.9, 0.999, 1e-8) unless flags
 * has SALUS_OPT_EXACT: then they are taken as written, so beta1 = 0 is
 * expressible. Invalid values (lr <= 0, a beta outside [0, 1), negative
 * weight_decay or momentum, unknown flags) are refused with SALUS_EINVAL
 * and a message naming the field. */
enum salus_optimizer_flags {
    SALUS_OPT_EXACT = 1,        /* beta1, beta2, eps as written (0 is 0) */
    SALUS_OPT_DECOUPLED_WD = 2, /* SALUS_ADAM: AdamW's decoupled weight decay */
    /* the learning rate lives in a persistent [1] tensor, so it can be set
     * before any step (salus_model_set_lr, salus_trainer_set_lr: schedules);
     * costs one more element-wise pass per parameter and step (two with
     * Adam). Without it the rate is fixed when the graph is built. */
    SALUS_OPT_LR_PER_STEP = 4,
};

typedef struct salus_optimizer {
    int kind;                /* enum salus_optimizer_kind */
    float lr;                /* learning rate (> 0) */
    float momentum;          /* SALUS_MOMENTUM (e.g. 0.9) */
    float weight_decay;      /* every kind, see above; 0 = none */
    float beta1, beta2, eps; /* SALUS_ADAM; 0 = 0.9, 0.999, 1e-8 unless SALUS_OPT_EXACT */
    unsigned flags;          /* enum salus_optimizer_flags */
    /* Mixed-precision training: SALUS_F32 (0: none), SALUS_BF16 or
     * SALUS_F16. With PyTorch autocast's rules (torch.autocast): master
     * weights, optimizer state and updates stay f32; the training graph
     * casts the weights and the activations to the half type for matmuls
     * and convolutions (the biases follow the activations), element-wise
     * ops run in what they are given, and losses, softmax, batch norm and
     * reductions run in f32 (cast up before them). The backward pass
     * mirrors it (a cast's gradient is a cast back), so every weight's
     * gradient reaches the f32 update. SALUS_F16 adds dynamic loss scaling
     * with torch.cuda.amp.GradScaler's defaults, inside the graph: the
     * loss's gradient is multiplied by a scale (initially 65536); a step
     * whose gradients hold an inf or NaN leaves weights and optimizer state
     * untouched and halves the scale, and 2000 clean steps in a row double
     * it (salus_model_amp_state, salus_trainer_amp_state). Every iteration
     * stays one request. */
    int precision;
} salus_optimizer;

/* A model whose samples have shape dims[0..ndim) (no batch dimension), e.g.
 * {784} or {1, 28, 28}. NULL on bad arguments or out of memory. */
SALUS_EXPORT salus_model *salus_model_new(int ndim, const int64_t *sample_dims);
/* Frees the model (its graphs too; its tensors go with the session). */
SALUS_EXPORT void salus_model_free(salus_model *m);
SALUS_EXPORT const char *salus_model_error(const salus_model *m);

/* Fully connected: [.., in] -> [.., units] (input must be 1-D per sample). */
SALUS_EXPORT int salus_model_dense(salus_model *m, int64_t units);
/* 2-D convolution with bias, square kernel, symmetric padding (NCHW). */
SALUS_EXPORT int salus_model_conv2d(salus_model *m, int64_t filters, int64_t kernel, int64_t stride,
                                    int64_t pad);
/* The same, with flags: SALUS_CONV_NO_BIAS leaves the bias out (as before a
 * batchnorm, whose shift makes it redundant: PyTorch's bias=False). Other
 * flags fail the model. */
enum salus_conv_flags { SALUS_CONV_NO_BIAS = 1u << 0 };
SALUS_EXPORT int salus_model_conv2d_ex(salus_model *m, int64_t filters, int64_t kernel,
                                       int64_t stride, int64_t pad, unsigned flags);
SALUS_EXPORT int salus_model_maxpool(salus_model *m, int64_t kernel, int64_t stride);
SALUS_EXPORT int salus_model_avgpool(salus_model *m, int64_t kernel, int64_t stride);
/* Batch normalisation over channels (C of [C] or [C,H,W] samples). */
SALUS_EXPORT int salus_model_batchnorm(salus_model *m);
SALUS_EXPORT int salus_model_relu(salus_model *m);
SALUS_EXPORT int salus_model_sigmoid(salus_model *m);
SALUS_EXPORT int salus_model_tanh(salus_model *m);
/* [C,H,W] -> [C*H*W] (a view: no copy). */
SALUS_EXPORT int salus_model_flatten(salus_model *m);
/* A residual block (He et al. 2016): y = main(x) + shortcut(x).
 * salus_model_residual_begin starts one at the current output x; the
 * layers added next are its main path. salus_model_residual_shortcut
 * (optional) ends the main path: the layers added after it transform x
 * for the shortcut (a projection, e.g. a 1x1 convolution with stride and
 * a batchnorm); without it the shortcut is x itself. salus_model_residual_end
 * adds the two, which must have the same shape (else the model fails,
 * naming both shapes). Blocks nest up to 8 deep; an activation after the
 * sum is a layer of its own (salus_model_relu). Exported to ONNX as Add. */
SALUS_EXPORT int salus_model_residual_begin(salus_model *m);
SALUS_EXPORT int salus_model_residual_shortcut(salus_model *m);
SALUS_EXPORT int salus_model_residual_end(salus_model *m);

/* Creates parameters in s (He-uniform weights from seed, zero biases),
 * builds and registers the training graph for `batch` samples and the
 * inference graph for `infer_batch` samples. The last layer must produce
 * [classes] per sample. Errors: SALUS_EINVAL (model or optimizer invalid;
 * see salus_model_error), SALUS_EEXHAUSTED, transport errors. */
SALUS_EXPORT int salus_model_compile(salus_model *m, salus_session *s, const salus_optimizer *opt,
                                     int64_t batch, int64_t infer_batch, uint64_t seed);
/* One training iteration on x[batch, sample...] and labels[batch]; writes the
 * batch's mean loss (before the update) to *loss (may be NULL). */
SALUS_EXPORT int salus_model_train_step(salus_model *m, const float *x, const int32_t *labels,
                                        float *loss);
/* f16 mixed precision's loss scaling (salus_optimizer.precision): the
 * scale the next step uses and the steps skipped so far for an inf or NaN
 * gradient (either may be NULL). SALUS_EINVAL when the model is not
 * compiled for SALUS_F16; transport errors. Two reads of session tensors. */
SALUS_EXPORT int salus_model_amp_state(salus_model *m, float *scale, int64_t *skipped);
/* Predicted classes of x[infer_batch, sample...] into classes[infer_batch].
 * When one iteration of the whole batch needs more lane workspace than
 * salusd gives its lanes (a convolution's scratch grows with the batch;
 * salusd --framework-per-lane), the batch runs in parts, halved until they
 * fit (the part's graph is registered once and kept); only when a single
 * sample does not fit does it fail with SALUS_EEXHAUSTED, and
 * salus_last_error then names the op, the bytes it needs and the lane's
 * workspace. */
SALUS_EXPORT int salus_model_predict(salus_model *m, const float *x, int32_t *classes);
/* The model's compiled graphs (NULL before compile); owned by the model. */
SALUS_EXPORT const salus_graph *salus_model_training_graph(const salus_model *m);
SALUS_EXPORT const salus_graph *salus_model_inference_graph(const salus_model *m);
/* Number of trainable parameters (after compile). */
SALUS_EXPORT int64_t salus_model_param_count(const salus_model *m);

/* ---- a compiled model's tensors, by name --------------------------------
 * After salus_model_compile every tensor of the model has a name, as
 * PyTorch's state_dict and optimizer state name them, layers counted from
 * 0 in the order they were added (the three residual block calls count as
 * layers too):
 *   "<i>.weight", "<i>.bias"            parameters (SALUS_TENSOR_PARAM)
 *   "<i>.running_mean", "<i>.running_var"  batchnorm's (SALUS_TENSOR_BUFFER)
 *   "<i>.weight.momentum_buffer"        SALUS_MOMENTUM's velocity
 *   "<i>.weight.exp_avg", ".exp_avg_sq" SALUS_ADAM's moments
 *   "optimizer.step"                    Adam's step count ([1])
 *   "optimizer.lr"                      the learning rate (SALUS_OPT_LR_PER_STEP)
 * (SALUS_TENSOR_OPTIMIZER for the last four).
 *
 * Layouts (differences from PyTorch to mind when moving weights):
 *   - tensors are NCHW, samples [C,H,W]; flatten keeps C,H,W order.
 *   - a dense layer's weight is [in, out] (y = x W + b): PyTorch's
 *     nn.Linear weight is [out, in], its transpose.
 *   - a conv2d weight is [filters, in_channels, k, k], as PyTorch's.
 *   - batchnorm: epsilon 1e-5; momentum in the ONNX form, the weight of
 *     the old running statistic: running = 0.9 * running + 0.1 * batch
 *     (PyTorch's momentum=0.1); the running variance takes the unbiased
 *     batch variance, normalisation the biased one (as PyTorch).
 *   - avgpool: padding is not counted in the divisor (the nn layers have
 *     none; the op's count_include_pad attribute, 0 by default, is ONNX's
 *     and PyTorch's count_include_pad=False).
 *   - the loss is softmax cross-entropy averaged over the batch
 *     (CrossEntropyLoss, reduction "mean").
 *   - reproducibility: salusd may split a large matmul into parts to fill
 *     idle gaps (the priority policy, ops.h sl_op_split): a split along K
 *     sums in a different order, so two runs may differ in the last bits.
 * Errors of these calls are reported by salus_last_error of the session's
 * client; they do not mark the model failed. */
enum salus_tensor_kind {
    SALUS_TENSOR_PARAM = 0,
    SALUS_TENSOR_BUFFER = 1,
    SALUS_TENSOR_OPTIMIZER = 2
};
/* Number of named tensors (0 before compile). */
SALUS_EXPORT int salus_model_tensor_count(const salus_model *m);
/* Name of tensor i (NULL when out of range); valid while m lives. */
SALUS_EXPORT const char *salus_model_tensor_name(const salus_model *m, int i);
/* Index of the tensor named name, or -1. */
SALUS_EXPORT int salus_model_tensor_find(const salus_model *m, const char *name);
/* Kind, shape (up to SALUS_MAX_DIMS dims) and session tensor id of tensor
 * i; any out-pointer may be NULL. Errors: SALUS_EINVAL (no such index). */
SALUS_EXPORT int salus_model_tensor_info(const salus_model *m, int i, int *kind, int *ndim,
                                         int64_t *dims, uint64_t *tensor_id);
/* Copies tensor i out of / into the server; bytes must be its size. A
 * write takes effect from the next step or prediction. */
SALUS_EXPORT int salus_model_tensor_read(salus_model *m, int i, float *buf, size_t bytes);
SALUS_EXPORT int salus_model_tensor_write(salus_model *m, int i, const float *buf, size_t bytes);
/* Checkpoints: every named tensor (parameters, buffers and optimizer state,
 * so training resumes where it stopped) to a file, and back. The file is
 * replaced at once (written beside it, then renamed). Format, little-endian:
 *   "SALUSCK1"  8 bytes of magic ("SALUSCK2" when a tensor is not f32)
 *   u32         number of entries
 *   per entry:  u16 name length, the name (UTF-8, no NUL), u8 kind (enum
 *               salus_tensor_kind), in SALUSCK2 only u8 dtype (enum
 *               salus_dtype), u8 rank, rank x i64 dims, then the values
 *               in row-major order (f32 in SALUSCK1; bf16 and f16 as
 *               their uint16_t bit patterns)
 * Loading needs exactly the model's names with the same dtypes and shapes (a file of
 * another architecture or optimizer is refused, naming the first tensor
 * that differs) and writes nothing unless the whole file fits. */
SALUS_EXPORT int salus_model_save(salus_model *m, const char *path);
SALUS_EXPORT int salus_model_load(salus_model *m, const char *path);
/* Sets the learning rate of the following steps: a model compiled with
 * SALUS_OPT_LR_PER_STEP in its optimizer's flags (else SALUS_EINVAL, as
 * for lr not finite or negative). A schedule calls it before each step. */
SALUS_EXPORT int salus_model_set_lr(salus_model *m, float lr);
/* Writes the model's inference forward pass, with its current weights and
 * batchnorm statistics, as an ONNX model file (opset 13): input "input"
 * [N, sample...], output "logits" [N, classes] (no softmax), N symbolic.
 * Dense layers become Gemm with the [in, out] weight as B (no transB),
 * conv2d Conv (with its bias, if any), pooling MaxPool / AveragePool, batchnorm
 * BatchNormalization (epsilon 1e-5, momentum 0.9), flatten Flatten, the
 * end of a residual block Add (main path, shortcut).
 * Errors: SALUS_EINVAL (not compiled, I/O), SALUS_EUNSUPPORTED (built
 * without onnx.proto), transport errors reading the weights. */
SALUS_EXPORT int salus_model_export_onnx(salus_model *m, const char *path);

/* Operator calls (what salusctl does). Changes the scheduling policy at run
 * time; it applies from the next iteration boundary. Errors: SALUS_EINVAL
 * (unknown policy). */
SALUS_EXPORT int salus_set_policy(salus_client *c, const char *policy, int strict);
/* Changes the compute partitions at run time: mode "off", "demand" (auto
 * while a high-priority job runs under the priority policy), "auto",
 * "auto:N" or "N" (units of the high-priority lanes' partition: SMs,
 * cores; the other lanes share the rest). Errors: SALUS_EINVAL (malformed, no room
 * left), SALUS_EUNSUPPORTED (the device has none), SALUS_EBUSY (the device
 * changes them only while no lane runs: retry). */
SALUS_EXPORT int salus_set_partitions(salus_client *c, const char *mode);
/* Changes a session's priority and/or weight (set_* nonzero to change).
 * Errors: SALUS_ENOTFOUND, SALUS_EINVAL (weight not in (0, 1e6)). */
SALUS_EXPORT int salus_set_session(salus_client *c, uint64_t session_id, int set_priority,
                                   int priority, int set_weight, double weight);

/* Operator calls for a cluster manager (the Slurm plugin, as root on the
 * node). salus_job_register: sessions that uid opens for job step
 * job_id.step_id from now on share memory bytes (0 = the user's own limits)
 * and run at priority at most (and by default). salus_job_close: the step
 * (all_steps: every step of the job) ended: its sessions are closed and
 * the step forgotten; *sessions_closed (may be NULL) says how many.
 * Errors: SALUS_EPERM (not an operator), SALUS_EINVAL (the step belongs to
 * another uid), SALUS_EEXHAUSTED (too many steps registered), SALUS_ECONN. */
SALUS_EXPORT int salus_job_register(salus_client *c, uint32_t job_id, uint32_t step_id,
                                    uint32_t uid, uint64_t memory, int32_t priority);
SALUS_EXPORT int salus_job_close(salus_client *c, uint32_t job_id, uint32_t step_id, int all_steps,
                                 uint32_t *sessions_closed);

/* Fetches the server status as human-readable text (what `salusctl status`
 * prints). *text is owned by the caller: release with salus_free. */
SALUS_EXPORT int salus_status_text(salus_client *c, char **text);
SALUS_EXPORT void salus_free(void *p);

/* ---- automatic differentiation and training graphs ----------------------
 * Reverse-mode automatic differentiation over the op registry: every
 * differentiable op declares its gradient as salus ops (kernels/ops/
 * ops_grad.c), so a backward pass is built from the forward graph alone.
 * The nn models' training graphs are built this way too. Differentiable:
 * add, mul, scale, axpy, copy, matmul, bias_add, relu, relu_mask, sigmoid,
 * tanh, conv2d, channel_bias_add, maxpool, avgpool, batchnorm (training
 * form), reshape, and as the loss: softmax_xent, mse_loss, reduce_sum,
 * reduce_mean. Another op between the loss and a value differentiated
 * fails with SALUS_EUNSUPPORTED, naming it. */

/* Appends to g the ops computing the gradient of the scalar f32 value loss
 * with respect to each wrt[i] (values of g: inputs, params or op outputs),
 * and writes their handles to grads[i] (a value the loss does not depend
 * on gets zeros). Gradients reaching a value along several paths are
 * summed. Errors: SALUS_EINVAL (bad values, or g has a builder error),
 * SALUS_EUNSUPPORTED (an op on the way has no gradient); the reason, naming
 * the op, is then g's builder error (salus_graph_error). */
SALUS_EXPORT int salus_graph_gradients(salus_graph *g, salus_value loss, unsigned n,
                                       const salus_value *wrt, salus_value *grads);

enum salus_loss_kind {
    /* softmax cross-entropy of [N, C] logits against i32 labels [N],
     * averaged over the N rows (PyTorch's CrossEntropyLoss, reduction
     * "mean") */
    SALUS_LOSS_SOFTMAX_XENT = 0,
    /* mean over every element of (output - target)^2 (MSELoss, "mean") */
    SALUS_LOSS_MSE = 1,
    /* output already is the scalar loss */
    SALUS_LOSS_SCALAR = 2,
};

/* A training graph: one salus_trainer_step runs forward, loss, backward
 * and the optimiser's updates of every parameter once. */
typedef struct salus_trainer salus_trainer;

/* Builds a training graph from `forward` (a builder, registered or not; it
 * is copied, not changed): appends the loss of `output` (a new input
 * follows the forward graph's inputs: the labels, or the target shaped as
 * output, except for SALUS_LOSS_SCALAR), the gradients of every trainable
 * parameter (each f32 salus_graph_param that no op writes in place) and
 * their updates, creates the optimiser's state tensors in s (zeros; they
 * go with the session) and registers the graph with s. As for the nn
 * models, the planner reuses ephemeral memory, element-wise gradients run
 * in place and each update follows its gradient at once, so gradients die
 * early. Errors: SALUS_EINVAL (bad arguments, optimiser or graph),
 * SALUS_EUNSUPPORTED (an op without a gradient), SALUS_EEXHAUSTED and
 * transport errors; salus_last_error says why. *out is the caller's. */
SALUS_EXPORT int salus_graph_train(salus_session *s, const salus_graph *forward, int loss_kind,
                                   salus_value output, const salus_optimizer *opt,
                                   salus_trainer **out);
/* One iteration: feeds as salus_run's for the training graph (the forward
 * graph's inputs, then the labels or target). Writes the loss computed
 * before the update to *loss (may be NULL). */
SALUS_EXPORT int salus_trainer_step(salus_trainer *t, const void *const *feeds, float *loss);
/* The registered training graph and its loss value (owned by t). */
SALUS_EXPORT const salus_graph *salus_trainer_graph(const salus_trainer *t);
SALUS_EXPORT salus_value salus_trainer_loss(const salus_trainer *t);
/* The parameters trained, in the order of their values in the graph. */
SALUS_EXPORT unsigned salus_trainer_param_count(const salus_trainer *t);
SALUS_EXPORT uint64_t salus_trainer_param_tensor(const salus_trainer *t, unsigned i);
/* Sets the learning rate of the following steps (graphs built with
 * SALUS_OPT_LR_PER_STEP; else SALUS_EINVAL). lr finite and >= 0. */
SALUS_EXPORT int salus_trainer_set_lr(salus_trainer *t, float lr);
/* As salus_model_amp_state, for a trainer built with SALUS_F16. */
SALUS_EXPORT int salus_trainer_amp_state(salus_trainer *t, float *scale, int64_t *skipped);
/* Frees the trainer and its graph (state tensors stay with the session).
 * NULL is fine. */
SALUS_EXPORT void salus_trainer_free(salus_trainer *t);

/* ---- ONNX import ----------------------------------------------------------
 * Loads an ONNX model (a protobuf file, e.g. from torch.onnx.export) as an
 * inference graph of session s: every initialiser becomes a persistent
 * tensor of s (uploaded once, when an op uses it), constants and shape
 * arithmetic (Shape, Gather, Concat, Unsqueeze, ... as PyTorch's exporter
 * emits around Reshape and Flatten) are folded at import, and every other
 * node becomes salus ops (docs/ops.md; the README lists the ONNX ops and
 * opsets read). The graph is registered with s before salus_onnx_load
 * returns.
 *
 * What salus cannot compute exactly as ONNX defines it is refused, never
 * approximated: SALUS_EUNSUPPORTED, with salus_last_error naming the node,
 * its op and what is missing (an op, an attribute value, an opset outside
 * 6 to 17, a data type other than float (int64/int32 inputs are fed as
 * i32), a dynamic shape, an empty tensor). Other errors: SALUS_EINVAL (not
 * a model, malformed: the file is untrusted input and every index and size
 * in it is checked), SALUS_ENOMEM, and those of salus_tensor_create and
 * salus_graph_register. Out-parameters are written only on success; on
 * failure every tensor made for the model is freed again.
 *
 * Built only where libonnx-dev was found (meson -Donnx=auto|enabled|
 * disabled); without it salus_onnx_load returns SALUS_EUNSUPPORTED. */
typedef struct salus_onnx_model salus_onnx_model;

typedef struct salus_onnx_options {
    /* the size of a symbolic leading input dim (a batch exported as
     * dynamic); 0: refuse symbolic dims */
    int64_t batch;
} salus_onnx_options;

/* opts may be NULL (all zero). Reads at most 2 GiB from path. Blocks while
 * it uploads tensors and registers the graph. */
SALUS_EXPORT int salus_onnx_load(salus_session *s, const char *path, const salus_onnx_options *opts,
                                 salus_onnx_model **out);
/* As salus_onnx_load from a model already in memory (len bytes, not kept). */
SALUS_EXPORT int salus_onnx_load_buffer(salus_session *s, const void *data, size_t len,
                                        const salus_onnx_options *opts, salus_onnx_model **out);
/* Checks, without a server, whether salus_onnx_load would import the model
 * in data: parsing, folding and the mapping of every node, with the same
 * refusals. why (may be NULL) receives the reason of a refusal ("" on
 * success). Returns what salus_onnx_load would, but never an error of the
 * server's. Blocks only to compute. */
SALUS_EXPORT int salus_onnx_check_buffer(const void *data, size_t len,
                                         const salus_onnx_options *opts, char *why, size_t why_len);
/* Frees the model, its graph and its tensors in the session. NULL is fine. */
SALUS_EXPORT void salus_onnx_free(salus_onnx_model *m);
/* The graph inputs fed at each run (initialisers excluded) and the outputs,
 * in the model's order. */
SALUS_EXPORT unsigned salus_onnx_n_inputs(const salus_onnx_model *m);
SALUS_EXPORT unsigned salus_onnx_n_outputs(const salus_onnx_model *m);
/* Input or output i: its ONNX name (owned by m), salus dtype (SALUS_F32,
 * SALUS_F16 or SALUS_BF16 for float, float16 and bfloat16, SALUS_I32 for
 * an int64/int32 input), rank and dims (up to 6). Any
 * out-pointer may be NULL. Errors: SALUS_EINVAL (i out of range). */
SALUS_EXPORT int salus_onnx_input(const salus_onnx_model *m, unsigned i, const char **name,
                                  int *dtype, int *ndim, int64_t *dims);
SALUS_EXPORT int salus_onnx_output(const salus_onnx_model *m, unsigned i, const char **name,
                                   int *dtype, int *ndim, int64_t *dims);
/* The registered inference graph (owned by m). */
SALUS_EXPORT const salus_graph *salus_onnx_graph(const salus_onnx_model *m);
/* The value of output i in salus_onnx_graph(m) (SALUS_NO_VALUE if i is out
 * of range): what salus_graph_train takes as its output, to train the
 * imported forward graph (every initialiser is then a trained parameter;
 * a graph with an inference-form op that has no gradient, such as
 * BatchNormalization exported in eval mode, is refused by
 * salus_graph_train naming it).
 *
 * BatchNormalization in its training form (training_mode 1 from opset 14;
 * before it, the form with the extra outputs: what torch.onnx.export with
 * training=TrainingMode.TRAINING emits) imports as the batchnorm op: batch
 * statistics, a gradient, and the running statistics (initialisers read by
 * that node alone; its extra outputs must be unused) updated in place on
 * every run of the graph, salus_onnx_run's included, with ONNX's momentum
 * (0.9 from PyTorch's 0.1). They are batch-norm state, not trained
 * parameters. */
SALUS_EXPORT salus_value salus_onnx_output_value(const salus_onnx_model *m, unsigned i);
/* One inference: inputs[i] holds input i (dense, row-major, its exact
 * size), outputs[j] receives output j. As salus_run otherwise. */
SALUS_EXPORT int salus_onnx_run(salus_onnx_model *m, const void *const *inputs,
                                void *const *outputs);

/* Operator tools (salusctl). Every *json is a NUL-terminated UTF-8 JSON
 * document owned by the caller (salus_free); strings from the server are
 * escaped for JSON and were escaped by salusd for terminals already.
 *
 * The status reply as JSON: the fields of proto/salus.proto StatusReply
 * under their proto names. */
SALUS_EXPORT int salus_status_json(salus_client *c, char **json);
/* One line per session the caller may see, admitted or waiting for
 * admission (with why), as text for people (`salusctl sessions`). */
SALUS_EXPORT int salus_sessions_text(salus_client *c, char **text);
/* The compute partitions in force (`salusctl partitions`), read from the
 * status reply (no rights needed): as text for people, a line per figure;
 * or as JSON {"description": the one-line summary, "detail": the fields of
 * proto/salus.proto PartitionsStatus} ("detail" absent from a salusd that
 * does not send them). Errors: those of any call (SALUS_ECONN, ...). */
SALUS_EXPORT int salus_partitions_text(salus_client *c, char **text);
SALUS_EXPORT int salus_partitions_json(salus_client *c, char **json);
/* Asks salusd to drain and exit as on SIGTERM (operators). Errors:
 * SALUS_EPERM, SALUS_EUNSUPPORTED. */
SALUS_EXPORT int salus_drain(salus_client *c);
/* Closes a session as if its connection had gone (operators, or the
 * session's owner). Errors: SALUS_ENOTFOUND, SALUS_EPERM. */
SALUS_EXPORT int salus_kill_session(salus_client *c, uint64_t session_id);
/* Starts recording salusd's timeline (operators); a later
 * salus_trace_stop_json ends it. Starting again clears what was recorded.
 * Errors: SALUS_EPERM. */
SALUS_EXPORT int salus_trace_start(salus_client *c);
/* Stops recording and returns the events in the Chrome trace event format
 * (JSON object form: traceEvents, times in microseconds from the start;
 * lanes are threads of process 1, sessions' waits threads of process 2).
 * *n_events (may be NULL) gets how many events salusd returned. */
SALUS_EXPORT int salus_trace_stop_json(salus_client *c, char **json, size_t *n_events);

#ifdef __cplusplus
}
#endif

#endif
