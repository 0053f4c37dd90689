/* Internals of libsalusclient shared by its files. */
#ifndef SL_CLIENT_INTERNAL_H
#define SL_CLIENT_INTERNAL_H

#include "salus/salus.h"
#include "salus.pb-c.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "ops.h"
#include "tensor.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>

/* Largest reply the client accepts: salusd's replies carry at most its
 * --max-message of tensor data and never more than 2 GiB less 2 MiB
 * (server/handlers.h), so every reply of any salusd fits. */
#define SL_CLIENT_MAX_MSG (1ull << 31)
/* Largest tensor chunk the client moves in one request or reply; below the
 * server's --max-message it is half of that (room for the envelope). */
#define SL_CLIENT_CHUNK (16ull << 20)
/* How long salus_connect waits for the server's answer to its Hello when
 * SALUS_CONNECT_TIMEOUT_MS does not say (salus.h): longer than salusd's
 * listener watchdog takes to replace a listener NNG 1.5 stopped (about 5 s,
 * more under load), so a client arriving then waits instead of failing. */
#define SL_CLIENT_CONNECT_TIMEOUT_MS 15000
/* salus_connect retries a handshake whose connection dropped, every
 * SL_CLIENT_RETRY_MS for at most SL_CLIENT_RETRY_WINDOW_MS (the dialer
 * reconnects after 100 ms): long enough for salusd to replace a listener,
 * short enough that a server refusing us is reported soon. */
#define SL_CLIENT_RETRY_MS 50
#define SL_CLIENT_RETRY_WINDOW_MS 3000
/* A call finding no connection this long after the first such call
 * replaces the dialer: NNG 1.5 stops redialling for good when a peer hangs
 * up before the SP handshake (its header write fails with EPIPE, which it
 * takes for "closed"), as a salusd exiting with connections in its backlog
 * does. A healthy dialer retries at least every second (client.c). */
#define SL_CLIENT_REDIAL_MS 2000

struct salus_client {
    nng_socket sock;
    nng_ctx ctx;
    nng_aio *aio;                  /* the one request in flight */
    pthread_mutex_t lock;          /* serialises request/reply pairs on ctx */
    pthread_mutex_t sessions_lock; /* guards sessions */
    salus_session *sessions;       /* open session handles, detached on disconnect */
    atomic_int pipes;              /* live connections to the server */
    atomic_int lost;               /* a connection dropped while a request was out */
    atomic_uint refused_pipe;      /* the last pipe refused in ADD_PRE (client.c) */
    nng_dialer dialer;             /* replaced by redial (client.c) */
    char *url;                     /* what the dialer dials */
    int64_t down_ms; /* when a call first found no connection, 0: connected (under lock) */
    /* ipc://: the uids a server may run as besides root and ours, and the
     * uid of the last server refused (-1: none) */
    bool check_uid;
    uint64_t trusted_uid;
    int64_t dir_uid; /* owner of a socket directory root made (client.c), or -1 */
    _Atomic int64_t refused_uid;
    uint64_t seq;
    uint64_t max_message; /* the server's (HelloReply), 0: unknown, send anything */
    bool local;           /* over ipc:// with shared memory allowed (SALUS_SHM != 0) */
    char fd_path[108];    /* the descriptor socket next to the ipc:// path (shm.c) */
    char device[192];
    char last_error[512];
};

struct salus_session {
    salus_client *client; /* NULL once the client is disconnected */
    uint64_t id;
    uint64_t token;
    struct salus_session *prev, *next; /* the client's open sessions */
    /* shared-memory data plane (shm.c), guarded by shm_lock */
    pthread_mutex_t shm_lock;
    int shm_state;
    void *shm;
    size_t shm_size;
    size_t shm_refused; /* smallest size refused for the budget; 0: none */
};

/* Sends req (seq filled in) and waits for its reply. On SL_OK *out is the
 * decoded reply (free with salus__reply__free_unpacked); otherwise the
 * server's code, with its message in c->last_error. */
int sl_client_call(salus_client *c, Salus__Request *req, Salus__Reply **out);
/* sl_client_call with s's id and token filled in. */
int sl_client_session_call(salus_session *s, Salus__Request *req, Salus__Reply **out);
/* Fills a TensorDesc (dims copied to dims_store). SL_EINVAL on bad args. */
int sl_client_desc(int dtype, int ndim, const int64_t *dims, Salus__TensorDesc *desc,
                   int64_t *dims_store);

/* Session s's shared-memory segment when a run moving `need` bytes should
 * use one (creating or growing it, and attaching it to the server), or NULL:
 * send inline. Call with s->shm_lock held; may make a request. */
void *sl_client_shm_get(salus_session *s, size_t need);
/* Unmaps s's segment (the server keeps its own mapping until it lets go). */
void sl_client_shm_fini(salus_session *s);

/* The job step $SALUS_JOB names ("JOB.STEP" or "JOB", step 0): *has is
 * false when it is unset or empty. Errors: SL_EINVAL (malformed). */
int sl_client_job_from_env(protobuf_c_boolean *has, uint32_t *job_id, uint32_t *step_id);

/* Reading a graph builder (graph.c), for automatic differentiation. */
enum sl_graph_value_kind { SL_GRAPH_INPUT, SL_GRAPH_PARAM, SL_GRAPH_OUTPUT };
typedef struct sl_graph_op {
    unsigned id, n_in, n_out;
    salus_value in[SL_OP_MAX_IN];
    salus_value out0;         /* outputs are out0 .. out0 + n_out - 1 */
    const sl_op_attrs *attrs; /* valid until the next salus_graph_op */
    unsigned n_iattrs, n_fattrs;
} sl_graph_op;
typedef struct sl_graph_value {
    sl_shape shape;
    int kind;           /* enum sl_graph_value_kind */
    uint32_t index;     /* among the values of its kind */
    uint64_t tensor_id; /* SL_GRAPH_PARAM */
} sl_graph_value;
size_t sl_graph_n_ops(const salus_graph *g);
size_t sl_graph_n_values(const salus_graph *g);
/* Op i (< sl_graph_n_ops) in the order it was added. */
void sl_graph_op_info(const salus_graph *g, size_t i, sl_graph_op *out);
/* SL_EINVAL for no such value. */
int sl_graph_value_info(const salus_graph *g, salus_value v, sl_graph_value *out);
/* An unregistered copy of g (same values and handles), or NULL (no memory). */
salus_graph *sl_graph_clone(const salus_graph *g);

/* Records the builder's first error (kept if one is already recorded). */
__attribute__((format(printf, 2, 3))) void sl_graph_set_error(salus_graph *g, const char *fmt, ...);

/* Reverse-mode automatic differentiation (autodiff.c). */
typedef struct sl_autodiff_hooks {
    void *ctx;
    /* Offered for wrt[i] when one op alone reads it: a value its gradient
     * may accumulate into (`acc = beta * acc + gradient`, no gradient
     * tensor); return true and fill *acc and *beta to accept. May be NULL. */
    bool (*accumulate)(void *ctx, unsigned i, salus_value *acc, float *beta);
    /* Called once per wrt[i], as soon as its gradient is complete (so an
     * update may follow before the rest of the backward pass): grad is the
     * gradient, or SALUS_NO_VALUE with accumulated set when it went into
     * the accumulator, or SALUS_NO_VALUE alone when the loss does not
     * depend on wrt[i]. Returns SL_OK or an error that stops the pass. */
    int (*ready)(void *ctx, unsigned i, salus_value grad, bool accumulated);
    /* With scale_seed, the gradients leaving the loss op are multiplied by
     * seed_scale (an f32 [1] value: mul_scalar), so every gradient is that
     * many times the loss's (loss scaling for f16). */
    bool scale_seed;
    salus_value seed_scale;
} sl_autodiff_hooks;

/* Appends to g the ops computing the gradients of the scalar `loss` with
 * respect to wrt[0..n) (values of g), through the gradient rules of every
 * op between them (ops_grad.h). Errors: SL_EINVAL (bad values, a builder
 * error), SL_EUNSUPPORTED (an op on the way has no gradient), SL_ENOMEM;
 * the reason, naming the op, is written into err. */
int sl_autodiff(salus_graph *g, salus_value loss, unsigned n, const salus_value *wrt,
                const sl_autodiff_hooks *hooks, char *err, size_t errlen);

#endif
