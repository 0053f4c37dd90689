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
 * the client reconnects by itself (retrying every 0.1-1 s) once a server
 * listens on the URL again. Sessions do not survive a restart: calls on an
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
    SALUS_EPERM = 5,         /* wrong token / not the owner */
    SALUS_EPROTO = 6,        /* protocol error or version mismatch */
    SALUS_EDEVICE = 7,       /* the device failed the request */
    SALUS_ENODEV = 8,        /* the server has no usable device */
    SALUS_ESHUTDOWN = 9,     /* the server is draining */
    SALUS_EUNSUPPORTED = 10, /* not supported by this server or backend */
    SALUS_ETIMEDOUT = 11,    /* no reply in time */
    SALUS_ECONN = 12,        /* cannot reach the server / connection lost */
    SALUS_EINTERNAL = 13,    /* a bug in salus */
    SALUS_ESESSIONLOST = 14, /* the session is gone (server restarted) */
    SALUS_EDEVICERESET = 15, /* device reset: tensor contents lost, re-upload them */
    SALUS_EBUSY = 16,        /* resource in use (e.g. tensor used by a graph) */
};

enum salus_dtype { SALUS_F32 = 0, SALUS_I32 = 1 };

#define SALUS_MAX_DIMS 6

/* Static text for a code (never NULL). */
const char *salus_strerror(int code);

typedef struct salus_client salus_client;
typedef struct salus_session salus_session;
typedef struct salus_graph salus_graph;

/* The URL of the salusd to use by default: $SALUS_URL when set, else
 * ipc://$XDG_RUNTIME_DIR/salus/salus.sock when that socket exists (a salusd
 * of your own), else ipc:///run/salus/salus.sock (the system's). Returns a
 * static buffer. */
const char *salus_default_url(void);

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
int salus_connect(const char *url, salus_client **out);

/* Closes the connection. Sessions still open are closed by the server when it
 * sees the connection go; their salus_session handles must still be passed to
 * salus_session_close (which then only frees them). NULL is fine. */
void salus_disconnect(salus_client *c);

/* The server's message for the last failed call on c ("" if none). Valid until
 * the next call on c. With c NULL: why the calling thread's last salus_connect
 * failed. */
const char *salus_last_error(const salus_client *c);

/* A description of the server's device and policy, from the handshake. */
const char *salus_server_device(const salus_client *c);

typedef struct salus_session_opts {
    const char *name;             /* shown in status; NULL = "" */
    int priority;                 /* larger = more important */
    double weight;                /* fair-share weight; 0 = 1 */
    uint64_t persistent_bytes;    /* persistent quota; 0 = no quota */
    uint64_t ephemeral_bytes;     /* expected per-iteration peak; 0 = unknown */
    double expected_total_s;      /* declared device time; 0 = unknown */
    uint64_t expected_iterations; /* declared iterations; 0 = unknown */
    int wait_for_admission;       /* nonzero: wait until it fits */
} salus_session_opts;

/* Opens a session (opts may be NULL for defaults). *out is owned by the caller
 * and must be passed to salus_session_close.
 * Errors: SALUS_EEXHAUSTED (does not fit and not waiting), SALUS_ESHUTDOWN,
 * SALUS_ECONN, SALUS_ENOMEM. */
int salus_session_open(salus_client *c, const salus_session_opts *opts, salus_session **out);

/* Closes the session on the server (freeing every tensor and graph of it) and
 * frees s, whatever the result. Returns the server's answer. NULL is fine. */
int salus_session_close(salus_session *s);

/* The server-side id of the session. */
uint64_t salus_session_id(const salus_session *s);

/* Bytes of shared memory the session's runs move their feeds and fetches
 * through (0: they travel inside the messages). Over ipc:// a session
 * hands salusd a sealed memfd (over the descriptor socket next to the ipc
 * path, as SCM_RIGHTS) the first time a run moves 16 KiB or more, and grows
 * it as needed, within salusd's per-session budget (--shm-session-bytes;
 * runs needing more stay inline). Where salusd refuses it (no descriptor
 * socket, or a session opened over another transport) runs stay inline.
 * Set SALUS_SHM=0 before salus_connect to keep everything inline. */
size_t salus_session_shm_bytes(salus_session *s);

/* Creates a persistent tensor of the given shape. init: NULL = zeros, else
 * exactly elems * 4 bytes (larger than one message: created zeroed, then
 * written in chunks). Writes its id to *id.
 * Errors: SALUS_EINVAL (bad shape), SALUS_EEXHAUSTED (quota or capacity;
 * the session's host-memory budget, salusd --session-metadata). */
int salus_tensor_create(salus_session *s, int dtype, int ndim, const int64_t *dims,
                        const void *init, uint64_t *id);
/* Overwrites a tensor; bytes must equal its size. A tensor larger than
 * salusd's message limit (--max-message) moves in chunks of at most half
 * of it (16 MiB at most), one request each; a call that fails part-way
 * leaves the tensor partly written. */
int salus_tensor_write(salus_session *s, uint64_t id, const void *data, size_t bytes);
/* Reads a tensor into buf; bytes must equal its size. Chunked like
 * salus_tensor_write. */
int salus_tensor_read(salus_session *s, uint64_t id, void *buf, size_t bytes);
/* Frees a tensor. Errors: SALUS_EBUSY while a registered graph uses it. */
int salus_tensor_free(salus_session *s, uint64_t id);

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
salus_graph *salus_graph_new(void);
/* Frees the builder. If registered, the server-side graph is freed too (best
 * effort; it also goes when its session closes). NULL is fine. */
void salus_graph_free(salus_graph *g);
/* The first builder error, or NULL when there is none. */
const char *salus_graph_error(const salus_graph *g);

/* An input fed at every run. */
salus_value salus_graph_input(salus_graph *g, int dtype, int ndim, const int64_t *dims);
/* A persistent tensor of the session the graph will be registered with;
 * dtype/ndim/dims must be the tensor's (checked by the server). */
salus_value salus_graph_param(salus_graph *g, uint64_t tensor_id, int dtype, int ndim,
                              const int64_t *dims);
/* Adds an op; returns its first output (outputs are consecutive handles). Ops
 * without outputs (sgd_update) return the handle of their first input.
 * type, inputs and attributes are as docs/ops.md lists them; iattrs and
 * fattrs are positional, and n_iattrs / n_fattrs say how many are sent: an
 * optional attribute may be left out, a required one may not (the op fails,
 * naming the attribute). Attribute arrays may be NULL when their count is 0. */
salus_value salus_graph_op(salus_graph *g, const char *type, unsigned n_in,
                           const salus_value *inputs, unsigned n_iattrs, const int64_t *iattrs,
                           unsigned n_fattrs, const float *fattrs);

/* Shape of a value: writes dtype, ndim and up to SALUS_MAX_DIMS dims.
 * Errors: SALUS_EINVAL (no such value). */
int salus_graph_shape(const salus_graph *g, salus_value v, int *dtype, int *ndim, int64_t *dims);
/* Bytes of a value's tensor (0 for no such value). */
size_t salus_graph_bytes(const salus_graph *g, salus_value v);

/* Registers the graph with s (at most once per builder). The server validates
 * and plans it; planned_peak (may be NULL) receives the ephemeral bytes one
 * iteration needs. Errors: SALUS_EINVAL (invalid graph; a builder error),
 * SALUS_EEXHAUSTED (the plan does not fit). */
int salus_graph_register(salus_session *s, salus_graph *g, uint64_t *planned_peak);

/* Ephemeral memory of a registered graph, as the server planned it: the
 * bytes one iteration needs (planned peak) and the sum of all its ephemeral
 * tensors (what allocating each separately, without reuse, would take).
 * Errors: SALUS_EINVAL (not registered). */
int salus_graph_memory(const salus_graph *g, uint64_t *planned_peak, uint64_t *naive_bytes);

/* The server-side id of a registered graph (0 before registration). */
uint64_t salus_graph_id(const salus_graph *g);

/* Runs one iteration of a registered graph: feeds[i] holds the bytes of the
 * i-th input (in the order salus_graph_input was called; exact sizes), and
 * the values fetch[0..n_fetch) are copied into out[j] (each
 * salus_graph_bytes(g, fetch[j]) bytes). Blocks until the iteration is done.
 * Feeds and fetches travel inline unless the run uses shared memory (local
 * ipc:// clients, from 16 KiB moved): inline, a run whose request or reply
 * would pass salusd's --max-message fails with SALUS_EINVAL saying so.
 * Errors: SALUS_EINVAL, SALUS_ENOTFOUND, SALUS_EDEVICE, SALUS_EEXHAUSTED (a
 * device allocation failed), SALUS_EDEVICERESET (see "Device faults" above),
 * SALUS_ESHUTDOWN (salusd is draining: the iteration did not start),
 * SALUS_ECONN, SALUS_ESESSIONLOST. */
int salus_run(salus_session *s, const salus_graph *g, const void *const *feeds, unsigned n_fetch,
              const salus_value *fetch, void *const *out);

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

typedef struct salus_optimizer {
    int kind;                /* enum salus_optimizer_kind */
    float lr;                /* learning rate (> 0) */
    float momentum;          /* SALUS_MOMENTUM (e.g. 0.9) */
    float weight_decay;      /* SALUS_MOMENTUM; 0 = none */
    float beta1, beta2, eps; /* SALUS_ADAM; 0 = 0.9, 0.999, 1e-8 */
} salus_optimizer;

/* A model whose samples have shape dims[0..ndim) (no batch dimension), e.g.
 * {784} or {1, 28, 28}. NULL on bad arguments or out of memory. */
salus_model *salus_model_new(int ndim, const int64_t *sample_dims);
/* Frees the model (its graphs too; its tensors go with the session). */
void salus_model_free(salus_model *m);
const char *salus_model_error(const salus_model *m);

/* Fully connected: [.., in] -> [.., units] (input must be 1-D per sample). */
int salus_model_dense(salus_model *m, int64_t units);
/* 2-D convolution with bias, square kernel, symmetric padding (NCHW). */
int salus_model_conv2d(salus_model *m, int64_t filters, int64_t kernel, int64_t stride,
                       int64_t pad);
int salus_model_maxpool(salus_model *m, int64_t kernel, int64_t stride);
int salus_model_avgpool(salus_model *m, int64_t kernel, int64_t stride);
/* Batch normalisation over channels (C of [C] or [C,H,W] samples). */
int salus_model_batchnorm(salus_model *m);
int salus_model_relu(salus_model *m);
int salus_model_sigmoid(salus_model *m);
int salus_model_tanh(salus_model *m);
/* [C,H,W] -> [C*H*W] (a view: no copy). */
int salus_model_flatten(salus_model *m);

/* Creates parameters in s (He-uniform weights from seed, zero biases),
 * builds and registers the training graph for `batch` samples and the
 * inference graph for `infer_batch` samples. The last layer must produce
 * [classes] per sample. Errors: SALUS_EINVAL (model or optimizer invalid;
 * see salus_model_error), SALUS_EEXHAUSTED, transport errors. */
int salus_model_compile(salus_model *m, salus_session *s, const salus_optimizer *opt, int64_t batch,
                        int64_t infer_batch, uint64_t seed);
/* One training iteration on x[batch, sample...] and labels[batch]; writes the
 * batch's mean loss (before the update) to *loss (may be NULL). */
int salus_model_train_step(salus_model *m, const float *x, const int32_t *labels, float *loss);
/* Predicted classes of x[infer_batch, sample...] into classes[infer_batch]. */
int salus_model_predict(salus_model *m, const float *x, int32_t *classes);
/* The model's compiled graphs (NULL before compile); owned by the model. */
const salus_graph *salus_model_training_graph(const salus_model *m);
const salus_graph *salus_model_inference_graph(const salus_model *m);
/* Number of trainable parameters (after compile). */
int64_t salus_model_param_count(const salus_model *m);

/* Operator calls (what salusctl does). Changes the scheduling policy at run
 * time; it applies from the next iteration boundary. Errors: SALUS_EINVAL
 * (unknown policy). */
int salus_set_policy(salus_client *c, const char *policy, int strict);
/* Changes a session's priority and/or weight (set_* nonzero to change).
 * Errors: SALUS_ENOTFOUND, SALUS_EINVAL (weight not in (0, 1e6)). */
int salus_set_session(salus_client *c, uint64_t session_id, int set_priority, int priority,
                      int set_weight, double weight);

/* Fetches the server status as human-readable text (what `salusctl status`
 * prints). *text is owned by the caller: release with salus_free. */
int salus_status_text(salus_client *c, char **text);
void salus_free(void *p);

/* Operator tools (salusctl). Every *json is a NUL-terminated UTF-8 JSON
 * document owned by the caller (salus_free); strings from the server are
 * escaped for JSON and were escaped by salusd for terminals already.
 *
 * The status reply as JSON: the fields of proto/salus.proto StatusReply
 * under their proto names. */
int salus_status_json(salus_client *c, char **json);
/* One line per session the caller may see, admitted or waiting for
 * admission (with why), as text for people (`salusctl sessions`). */
int salus_sessions_text(salus_client *c, char **text);
/* Asks salusd to drain and exit as on SIGTERM (operators). Errors:
 * SALUS_EPERM, SALUS_EUNSUPPORTED. */
int salus_drain(salus_client *c);
/* Closes a session as if its connection had gone (operators, or the
 * session's owner). Errors: SALUS_ENOTFOUND, SALUS_EPERM. */
int salus_kill_session(salus_client *c, uint64_t session_id);
/* Starts recording salusd's timeline (operators); a later
 * salus_trace_stop_json ends it. Starting again clears what was recorded.
 * Errors: SALUS_EPERM. */
int salus_trace_start(salus_client *c);
/* Stops recording and returns the events in the Chrome trace event format
 * (JSON object form: traceEvents, times in microseconds from the start;
 * lanes are threads of process 1, sessions' waits threads of process 2).
 * *n_events (may be NULL) gets how many events salusd returned. */
int salus_trace_stop_json(salus_client *c, char **json, size_t *n_events);

#ifdef __cplusplus
}
#endif

#endif
