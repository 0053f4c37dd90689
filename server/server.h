/* salusd internals shared by the server's files.
 *
 * Threads and locks. NNG's callback threads decode requests and hand them to
 * a session; device stream threads run host callbacks when work completes.
 * One mutex, srv->lock, guards every table below (sessions, tensors, graphs,
 * the scheduler, the memory pool, lane state, counters). It is held only for
 * bookkeeping and for *submitting* device work (which never waits), never
 * across a device wait or an NNG call that may block. Lock order:
 * srv->lock, then a backend's internal stream locks. */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include "device.h"
#include "planner.h"
#include "manager.h"
#include "salus.pb-c.h"
#include "gaps.h"
#include "scheduler.h"
#include "sl_map.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_SERVER_VERSION "0.1.0"
#define SL_PROTOCOL_VERSION 1
#define SL_MAX_LISTEN 8

typedef struct sl_server sl_server;
typedef struct sl_session sl_session;

/* Defaults for every field; fill cfg.listen before starting. */
#define SL_CONFIG_DEFAULTS                                                                         \
    {                                                                                              \
        .device = "cpu", .policy = "fair", .contexts = 256, .max_message = 1ull << 30,             \
        .ipc_mode = 0600                                                                           \
    }

typedef struct sl_config {
    const char *listen[SL_MAX_LISTEN];
    int n_listen;
    const char *device;          /* "cpu", "cuda:0", ... */
    uint64_t memory_limit;       /* 0 = what the device reports minus a reserve */
    uint64_t lane_bytes;         /* ephemeral need of a session that declares none */
    uint64_t spread_limit;       /* lanes of their own below this much held memory */
    bool spread_set;             /* spread_limit given (default: half the memory) */
    uint64_t session_quota;      /* max persistent + ephemeral of one session; 0 = all */
    uint64_t framework_per_lane; /* workspace bytes per lane (device workspaces) */
    bool framework_set;          /* framework_per_lane given (default: the device's
                                    workspace_hint, at most a 16th of the memory) */
    bool no_inplace;             /* graphs never run element-wise ops in place */
    /* op by op (low priority beside high priority), an op predicted longer
     * than this runs in parts of about this much (kernels/ops.h: matmuls);
     * 0 = SL_DEFAULT_OP_PART_NS */
    uint64_t op_part_ns;
    const char *policy;
    bool strict;
    int contexts;         /* NNG contexts = requests in flight */
    uint64_t max_message; /* NNG_OPT_RECVMAXSZ */
    int ipc_mode;         /* permissions of ipc:// socket files */
    /* what one client can make the server hold (0 = the SL_DEFAULT_ value);
     * over the limit a request fails with RESOURCE_EXHAUSTED */
    uint32_t max_sessions;            /* open sessions, waiting ones included */
    uint32_t max_tensors_per_session; /* tensors of one session; as many graphs */
    /* network security (transport.c) */
    bool allow_plain_tcp;   /* tcp:// and ws:// listeners allowed (trusted networks) */
    const char *tls_cert;   /* PEM certificate (chain) of tls+tcp:// listeners */
    const char *tls_key;    /* its PEM private key */
    const char *tls_ca;     /* PEM CAs: when set, clients must present a cert they sign */
    const char *fault_file; /* sim only: fault commands read on SIGUSR1 (fault.c) */
    /* called once (fault thread, lock held; must not block) when a lost
     * device cannot be reset; NULL: session requests get NO_DEVICE from then
     * on. salusd's asks for a drain and exits 3, for a supervisor to restart
     * it (CUDA's sticky errors are unrecoverable in-process) */
    void (*device_dead)(void);
} sl_config;

/* Half of a high-priority job's idle gap in bench/priority (2 ms period):
 * measured with 250, 400, 600 and 800 us parts, 600 kept the most
 * low-priority throughput with the tail still within 1.1x. */
#define SL_DEFAULT_OP_PART_NS (600 * 1000ull)
#define SL_DEFAULT_MAX_SESSIONS 1024
#define SL_GONE_PIPES 256
#define SL_DEFAULT_MAX_TENSORS 65536

/* A persistent tensor of a session. */
typedef struct sl_tensor {
    uint64_t id;
    sl_shape shape;
    uint64_t addr;       /* offset in the device arena */
    uint64_t bytes;      /* as allocated (rounded) */
    uint32_t graph_refs; /* registered graphs that use it; free refused while > 0 */
} sl_tensor;

/* A value of a registered graph: where it lives during an iteration. */
typedef struct sl_value {
    sl_shape shape;
    uint8_t kind;       /* SL_VALUE_* */
    uint32_t last_step; /* last step reading or writing it (0 = the feed copies) */
    /* the value whose memory it is: itself, what it views (reshape), or the
     * dying input an in-place op wrote it over (graph.c) */
    uint32_t root;
    uint64_t addr;     /* ephemeral: offset inside the iteration's block */
    sl_tensor *tensor; /* params */
} sl_value;

enum { SL_VALUE_INPUT, SL_VALUE_PARAM, SL_VALUE_OUTPUT };

typedef struct sl_graph_op {
    uint16_t op;
    uint8_t n_in, n_out;
    uint32_t in[SL_OP_MAX_IN];
    uint32_t out[SL_OP_MAX_OUT];
    sl_op_attrs attrs;
    /* in-place execution: the input whose memory out[0] is written over, or
     * -1. Values sharing that memory whose last step is this op are fetched
     * before it runs (executor.c). */
    int8_t inplace_in;
} sl_graph_op;

/* A validated, planned graph. Immutable once registered. */
typedef struct sl_graph {
    uint64_t id;
    uint32_t n_inputs, n_params, n_values, n_ops;
    sl_value *values;
    sl_graph_op *ops;
    sl_plan_result plan;
    uint64_t flops;
    sl_gaps_lp lp;         /* per-op duration predictions (gap filling) */
    sl_gaps_ewma *op_ewma; /* n_ops of them */
    uint64_t iter_ewma_ns; /* its iterations' device time, smoothed (0: none yet) */
} sl_graph;

/* One request waiting for, or being given, a reply. */
typedef struct sl_req sl_req;

/* A reply under construction: the envelope plus an arena that every part of
 * it (bodies, strings, fetched tensor data) is allocated from, so it is
 * freed in one call. */
typedef struct sl_reply sl_reply;
typedef struct sl_outbox sl_outbox;

/* Work queued on a session: requests of one session run in order. */
typedef struct sl_work {
    struct sl_work *next;
    sl_session *session;
    sl_req *req;         /* NULL for a close from a lost connection */
    Salus__Request *msg; /* decoded request, owned */
    sl_sched_item item;  /* runs: queued in the scheduler */
    /* run state */
    sl_graph *graph;
    uint64_t ephemeral_base; /* arena offset of the iteration's block */
    uint32_t lane;           /* the lane it runs on */
    sl_reply *reply;         /* built while running, sent on completion */
    const void **feed_src;   /* per input: its bytes (request or shared memory) */
    void **fetch_dst;        /* per fetch: where its bytes go (reply or shared memory) */
    uint64_t arrival_ns;     /* when the request was received */
    uint64_t start_ns;
    int status;
    /* op by op (low priority while high-priority sessions exist) */
    bool stepwise;
    uint32_t next_op;             /* first op not yet submitted whole */
    uint32_t part, parts;         /* next_op's next part of its parts; 0 parts = not begun */
    uint32_t step_op, step_parts; /* the step in flight: its op, and that op's parts */
    uint64_t op_start_ns;         /* when the step in flight was submitted */
    struct sl_work *parked_next;  /* in srv->parked while waiting for a gap */
    uint64_t parked_ns;           /* when it was parked */
} sl_work;

struct sl_session {
    sl_server *srv;
    uint64_t id;
    uint64_t token;
    uint32_t pipe_id; /* connection that opened it */
    bool has_uid;     /* opened over ipc://: only peers of uid may use it */
    uint64_t uid;
    bool reset_pending; /* the device was reset: its next request gets DEVICE_RESET */
    char name[64];
    sl_sched_job job;
    sl_map tensors; /* id -> sl_tensor */
    sl_map graphs;  /* id -> sl_graph */
    uint64_t next_object_id;
    uint64_t persistent_bytes;
    uint64_t declared_persistent, declared_ephemeral;
    uint64_t ephemeral_peak; /* largest planned peak of its graphs */
    sl_work *head, *tail;    /* pending work, head is executing when busy */
    bool busy;
    bool closing;
    bool admitted;      /* false while it waits in the admission queue */
    bool high_priority; /* in srv->gaps (priority > 0 under the priority policy) */
    sl_gaps_hp hp;
    bool blocked;      /* its head waits for its lane to go idle (lane move) */
    sl_req *admit_req; /* the open request answered at admission */
    sl_reply *admit_reply;
    uint64_t open_ns;
    void *shm;         /* the attached shared-memory segment (shm.c), or NULL */
    uint64_t shm_size; /* its mapped bytes */
};

/* The server side of a memory-manager lane: the stream its iterations run on.
 * Lanes come and go with the manager; their streams are kept and reused.
 * Manager lane ids are reused too: a record whose serial differs from the
 * manager's lane under its id belongs to a reclaimed lane. */
typedef struct sl_lane {
    uint32_t id;
    uint64_t serial; /* the manager's: ids are reused, serials are not */
    sl_stream *stream;
    int priority; /* its stream's (device.h): the class of what it runs */
    bool busy;
    uint64_t last_job_id; /* whose iteration ran last (switch accounting), 0 = none */
    /* the workspace its stream was given (the lane's framework block; it
     * moves with the lane); workspace_bytes UINT64_MAX = none given yet */
    void *workspace;
    uint64_t workspace_bytes;
} sl_lane;

/* An idle stream kept for the next lane that needs one of its priority. */
typedef struct sl_spare_stream {
    sl_stream *stream;
    int priority;
} sl_spare_stream;

/* Device faults (fault.c), guarded by srv->lock. Zeroed = no fault. */
typedef struct sl_fault_state {
    bool lost;           /* a device-lost error: no device work starts until the reset */
    bool dead;           /* the reset failed: session requests get NO_DEVICE */
    bool thread_started; /* the reset thread (and cond) exist */
    bool thread_stop;
    pthread_t thread;
    pthread_cond_t cond;              /* the reset thread: a fault, or stop */
    struct sl_held *held, *held_tail; /* session requests held during a reset */
    uint64_t resets;                  /* device resets done */
} sl_fault_state;

struct sl_server {
    sl_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t idle_cond; /* signalled when work drains (shutdown) */
    sl_device *dev;
    void *arena;       /* device address of offset 0 */
    uint64_t capacity; /* arena bytes */
    sl_mem_mgr *mem;
    sl_map lanes;                   /* manager lane id -> sl_lane */
    sl_spare_stream *spare_streams; /* streams of reclaimed lanes (or classes left) */
    size_t n_spare, cap_spare;
    uint32_t lanes_busy;
    sl_stream *copy_stream; /* control requests' copies */
    sl_sched *sched;
    sl_map sessions;
    uint64_t next_session_id;
    uint64_t start_ns;
    uint64_t requests_total, errors_total, iterations_total;
    uint64_t ops_split; /* stepwise ops run in parts (executor.c) */
    uint32_t control_in_flight;
    sl_gaps gaps;    /* high-priority sessions' idle-gap predictions */
    sl_work *parked; /* low-priority iterations waiting for a gap */
    pthread_t timer; /* re-checks parked iterations when a gap may open */
    pthread_cond_t timer_cond;
    uint64_t timer_deadline; /* 0 = none */
    bool timer_running, timer_stop;
    /* replies of finished work not sent yet (sl_complete_unlock_and_flush);
     * atomic so the sender need not take the lock again after sending.
     * draining is written under the lock, read anywhere. */
    _Atomic uint32_t completing;
    _Atomic bool draining;
    bool stopped; /* transport closing: connection events are ignored */
    struct sl_transport *transport;
    sl_fault_state fault;
    /* connections that went away most recently (ring; guarded by lock): an
     * open-session request read before its connection closed but handled
     * after must not make a session nobody can ever close */
    uint32_t gone_pipes[SL_GONE_PIPES];
    uint32_t gone_next;
};

/* ---- server.c ---- */

/* Starts a server from srv->cfg (srv zeroed apart from cfg): device, memory,
 * scheduler, transport. On failure call sl_server_fini. Errors: those of the
 * device, memory and transport steps. */
int sl_server_start(sl_server *srv);
/* Drains (running iterations finish, queued ones fail) and frees. */
void sl_server_stop(sl_server *srv);
/* Frees everything; safe on a half-started server. */
void sl_server_fini(sl_server *srv);

/* ---- transport.c ---- */

/* Opens the REP socket, the context pool and every listener. Errors:
 * SL_EINVAL (bad URL), SL_ECONN (listen failed), SL_ENOMEM. */
int sl_transport_start(sl_server *srv);
/* Stops receiving, closes the socket and waits for every callback. Returns
 * false when NNG could not close the socket in time: callbacks may still
 * run, so the caller must not free anything they use (it should _exit). */
bool sl_transport_stop(sl_server *srv);
/* Sends reply for req (takes ownership of reply) and re-arms req's context.
 * req NULL (the requester is gone) just frees the reply. Never blocks. Must
 * be called without srv->lock held. */
void sl_transport_reply(sl_server *srv, sl_req *req, sl_reply *reply);
/* Whether url is a network transport without encryption or authentication
 * (tcp://, ws://, and their 4/6 variants): refused without
 * cfg.allow_plain_tcp. */
bool sl_url_is_plain_network(const char *url);
/* Whether url is a TLS transport (tls+tcp://, wss://): needs cfg.tls_cert
 * and cfg.tls_key. */
bool sl_url_is_tls(const char *url);
/* The peer uid of the connection req arrived on: true and *uid for ipc://,
 * false for other transports (no peer identity). Never blocks. */
bool sl_req_peer_uid(const sl_req *req, uint64_t *uid);
/* The peer process id of an ipc:// connection (SO_PEERCRED, as of connect);
 * false for other transports or when the connection is gone. */
bool sl_req_peer_pid(const sl_req *req, uint64_t *pid);
/* Whether req may use session s: s was not opened over ipc://, or req comes
 * from a peer with the same uid (DESIGN.md section 8). */
bool sl_req_same_user(const sl_req *req, const sl_session *s);
/* Whether req may make operator requests (policy, other sessions' shares):
 * it does not come over ipc://, or its peer is root or salusd's own user. */
bool sl_req_is_operator(const sl_req *req);

/* ---- dispatch.c ---- */

/* Handles one decoded request from connection pipe_id; takes ownership of
 * msg. The reply is sent now or from a completion path. Never blocks. */
void sl_dispatch(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id);
/* Closes every session opened over connection pipe_id (it went away). */
void sl_dispatch_pipe_gone(sl_server *srv, uint32_t pipe_id);
/* Completes s's head work (its reply goes to box) and starts what follows.
 * Lock held; may free s. */
void sl_session_work_done(sl_server *srv, sl_session *s, sl_outbox *box);
/* Admits the sessions the memory manager let in from its queue and retries
 * work blocked on a lane move; their replies go to box. Lock held. Call after
 * anything that frees device memory or idles a lane. */
void sl_dispatch_memory_changed(sl_server *srv, sl_outbox *box);
/* Frees s with its tensors, graphs and any work still queued on it (no
 * replies are sent). Does not touch the session table or the scheduler. */
void sl_dispatch_session_free(sl_server *srv, sl_session *s);
/* Ends a device-completion callback: releases srv->lock (held on entry),
 * sends box's replies, and lets a drain know when they are out. */
void sl_complete_unlock_and_flush(sl_server *srv, sl_outbox *box);
/* Starts draining: new runs are refused, queued ones fail with
 * SL_ESHUTDOWN; returns once nothing runs on the device. Lock not held. */
void sl_dispatch_drain(sl_server *srv);

/* ---- reply.c ---- */

/* A new reply for request seq with code OK. NULL on OOM. */
sl_reply *sl_reply_new(uint64_t seq);
/* Zeroed, 16-byte aligned memory that lives as long as r. NULL on OOM. */
void *sl_reply_alloc(sl_reply *r, size_t bytes);
/* Sets the code and a formatted message (the body, if any, is dropped). */
void sl_reply_error(sl_reply *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The envelope, to fill in a body. */
Salus__Reply *sl_reply_msg(sl_reply *r);
void sl_reply_free(sl_reply *r);

/* Replies are sent after srv->lock is released: handlers collect them here
 * (linked through the replies, so queueing never allocates). */
struct sl_outbox {
    sl_reply *head, *tail;
    sl_stream *run_here; /* held with a small iteration the flushing thread runs */
    uint32_t completing; /* srv->completing counts it holds, dropped once sent */
};
/* Queues reply for req (req NULL: nobody to send to; just freed on flush). */
void sl_outbox_put(sl_outbox *box, sl_req *req, sl_reply *reply);
/* Sends everything queued, then runs box->run_here's iteration on the
 * calling thread (device.h stream_release). Call without srv->lock. */
void sl_outbox_flush(sl_server *srv, sl_outbox *box);

/* ---- shm.c: the shared-memory data plane (ipc:// clients) ---- */

/* Maps the client's segment m names into session s (replacing any earlier
 * one) after checking it (shm.c explains what and why). Errors go into r:
 * SL_EUNSUPPORTED (not ipc://), SL_EPERM (cannot open it, or it fails a
 * check), SL_EINVAL (size), SL_ENOMEM (mmap). Lock held; does not block on
 * anything but the open and mmap system calls. */
void sl_shm_attach(sl_session *s, const sl_req *req, const Salus__AttachShm *m, sl_reply *r);
/* Unmaps s's segment, if any. */
void sl_shm_detach(sl_session *s);
/* The bytes slice names inside s's segment when it lies within it and is
 * exactly `bytes` long; NULL otherwise. */
void *sl_shm_slice(const sl_session *s, const Salus__ShmSlice *slice, uint64_t bytes);

/* ---- graph.c ---- */

/* Validates msg against session s's tensors, infers shapes and plans the
 * ephemeral memory; with inplace, element-wise ops write their output over
 * an ephemeral input that dies at them (sl_graph_op.inplace_in). On success
 * *out is owned by the caller (sl_graph_free) and param tensors' graph_refs
 * are incremented. Errors: SL_EINVAL (reason in err), SL_ENOTFOUND (unknown
 * param tensor), SL_ENOMEM. */
int sl_graph_build(sl_session *s, const Salus__Graph *msg, bool inplace, sl_graph **out, char *err,
                   size_t errlen);
/* Drops the graph's references on its tensors and frees it. */
void sl_graph_free(sl_graph *g);

/* ---- executor.c ---- */

/* Starts the next iteration on every idle lane whose policy picks one.
 * Called with srv->lock held; replies of iterations that could not even be
 * submitted go to box. */
void sl_exec_kick(sl_server *srv, sl_outbox *box);
/* Frees every lane's stream (shutdown; nothing may run). */
void sl_exec_lanes_fini(sl_server *srv);
/* Gap filling: a session's priority class may have changed (open, close,
 * set_session, set_policy). Lock held. */
void sl_exec_update_class(sl_server *srv, sl_session *s, bool leaving);
/* A high-priority session submitted an iteration. Lock held. */
void sl_exec_hp_arrival(sl_server *srv, sl_session *s);
/* Resumes parked low-priority iterations that may run now (all of them when
 * force). Lock held. */
void sl_exec_resume(sl_server *srv, bool force, sl_outbox *box);
/* Starts and stops the gap timer thread. */
int sl_exec_timer_start(sl_server *srv);
void sl_exec_timer_stop(sl_server *srv);

/* ---- fault.c: device faults (DESIGN.md section 8) ---- */

enum { SL_FAULT_PASS, SL_FAULT_HELD, SL_FAULT_ANSWERED };

/* Completion hook: work of session s (NULL: none) finished with status, its
 * reply being r (may be NULL). SL_EDEVICERESET (the device is lost) rewrites
 * r's message and, the first time, stops new device work, tells every other
 * session to re-upload (its next request, or its queued run, gets
 * DEVICE_RESET once; replies go to box) and has the fault thread reset the
 * device once nothing runs. Any other status: nothing. Lock held; never
 * blocks. */
void sl_fault_handle(sl_server *srv, sl_session *s, int status, sl_reply *r, sl_outbox *box);
/* Gate of a session request whose token and owner were checked. Returns
 * SL_FAULT_PASS (go on), SL_FAULT_HELD (the device is being reset: req and
 * msg are kept and dispatched again afterwards; the caller frees r and
 * returns) or SL_FAULT_ANSWERED (r holds the answer: the DEVICE_RESET notice
 * of a session that must re-upload, or NO_DEVICE when the reset failed).
 * Lock held; never blocks. */
int sl_fault_gate(sl_server *srv, sl_session *s, sl_req *req, Salus__Request *msg, uint32_t pipe_id,
                  sl_reply *r);
/* Reads srv->cfg.fault_file, applies its commands to the sim device and
 * removes the file (the acknowledgement). Called by salusd's main thread on
 * SIGUSR1. Errors: SL_EINVAL (no file, bad command), SL_ENOTFOUND. */
int sl_fault_inject_file(sl_server *srv);
/* Stops and joins the fault thread; requests still held get SHUTTING_DOWN.
 * Call before the transport stops. Safe on a zeroed state. */
void sl_fault_fini(sl_server *srv);

/* ---- status.c ---- */

/* Builds the status reply body inside r. Called with srv->lock held.
 * Errors: SL_ENOMEM. */
int sl_status_build(sl_server *srv, sl_reply *r);

#endif
