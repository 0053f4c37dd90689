/* Internals of the transport shared by transport.c (socket, contexts,
 * requests, pipe bookkeeping), listen.c (starting listeners) and
 * watchdog.c (replacing them, connection deadlines), like nng's
 * sockimpl.h. Nothing outside these files includes it. */
#ifndef SL_TRANSPORT_INTERNAL_H
#define SL_TRANSPORT_INTERNAL_H

#include "sl_map.h"
#include "transport.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

enum req_state { REQ_RECV, REQ_WAIT, REQ_SEND };

struct sl_req {
    sl_transport *t;
    nng_ctx ctx;
    nng_aio *aio;
    _Atomic int state; /* enum req_state; read by stop and the watchdog */
    bool has_uid;      /* the request in hand came over ipc:// from uid */
    uint64_t uid;
    bool is_operator;         /* ... from a verified client of an operator listener */
    _Atomic uint32_t pipe_id; /* the connection it came on */
    nng_pipe pipe;
};

/* One live connection, from NNG_PIPE_EV_ADD_PRE to NNG_PIPE_EV_REM_POST. */
typedef struct sl_conn {
    nng_pipe pipe;
    bool has_uid; /* over ipc:// (SO_PEERCRED) */
    uint64_t uid;
    bool is_operator;         /* a verified client of an operator listener */
    uint32_t listener;        /* id of the listener that accepted it */
    _Atomic uint64_t last_ns; /* when it joined or last completed a request */
} sl_conn;

/* The longest ipc:// socket name (struct sockaddr_un's sun_path). */
#define SL_SUN_PATH_MAX 108

/* A listener taken out of service: closed once no connection uses it, then
 * (ipc://) swept of the descriptors NNG 1.5.2 never frees. */
typedef struct sl_retired {
    nng_listener l;
    bool closed, swept;
    uint64_t since_ns;           /* retired, then closed */
    char bound[SL_SUN_PATH_MAX]; /* ipc://: the name it was bound at */
} sl_retired;

struct sl_transport {
    const sl_config *cfg;
    sl_transport_hooks hooks;
    /* set as the transport stops: from then on callbacks do not reach the
     * hooks (whose state the server frees next); in_hook counts callbacks
     * inside a hook, which stop waits out */
    _Atomic bool mute;
    _Atomic int in_hook;
    _Atomic uint64_t last_send_ns; /* when the latest reply was handed to NNG */
    nng_socket sock;
    sl_req *reqs;
    int n_reqs;

    /* listeners (listen.c); they change only on the watchdog's thread once
     * it runs */
    nng_listener listeners[SL_MAX_LISTEN]; /* listeners[i] serves cfg.listen[i] */
    int n_listeners;
    ino_t ipc_inode[SL_MAX_LISTEN];                 /* the socket file we put at an ipc:// path */
    char ipc_bound[SL_MAX_LISTEN][SL_SUN_PATH_MAX]; /* the name it was bound at */
    uint64_t bind_seq;                              /* makes temporary socket names unique */
    int tcp_port[SL_MAX_LISTEN]; /* the port a tcp listener got (kept on a restart) */
    /* nng_listener_id of listeners[i], read by pipe callbacks to tell an
     * operator listener's clients */
    _Atomic uint32_t listener_ids[SL_MAX_LISTEN];
    bool has_operator_listener; /* any operator or inproc:// listener */
    /* ipc:// connections one uid other than root and salusd's may hold
     * (0: no limit): --max-connections-per-user, lowered so that they hold
     * at most --max-receiving-per-user of messages being received */
    uint64_t conns_per_uid;
    bool conns_by_memory; /* the receiving budget set it, not the flag */
    uint64_t other_seen[SL_MAX_LISTEN];
    /* after a failed replacement (a folder made unwritable, no descriptors
     * left): no new try before retry_at_ns, waiting twice as long each time */
    uint64_t retry_at_ns[SL_MAX_LISTEN], retry_ms[SL_MAX_LISTEN];
    sl_retired *retired;
    int n_retired, cap_retired;
    uint64_t replaced;
    uint64_t pressure_logged_ns;
    /* replacements of listener i since deaf_window_ns[i] (watchdog.c) */
    uint64_t deaf_window_ns[SL_MAX_LISTEN];
    int deaf_in_window[SL_MAX_LISTEN];
    pthread_t watch_thread;
    bool watch_started;
    bool watch_stop; /* guarded by watch_lock */
    pthread_mutex_t watch_lock;
    pthread_cond_t watch_cond;

    /* guards peers (pipe id -> sl_conn), per_listener (listener id -> live
     * connections) and per_uid (uid + 1 -> live ipc:// connections); held
     * only for map operations, never across an NNG call */
    pthread_mutex_t peers_lock;
    sl_map peers, per_listener, per_uid;
};

/* Whether a callback may call a hook (always pair with
 * sl_transport_hook_leave, even when this returns false). */
static inline bool sl_transport_hook_enter(sl_transport *t)
{
    atomic_fetch_add(&t->in_hook, 1);
    return !atomic_load(&t->mute);
}

static inline void sl_transport_hook_leave(sl_transport *t)
{
    atomic_fetch_sub(&t->in_hook, 1);
}

/* listen.c */

/* Starts every listener of cfg (t->sock open). Errors as sl_transport_start;
 * on error the listeners started are closed by closing the socket. */
int sl_listen_start(sl_transport *t);
/* Starts listener i of cfg.listen into *out: first at start-up (checks the
 * ipc:// directory and that no server uses the path), else as a replacement
 * (a tcp port the system chose is kept). Errors as sl_transport_start. */
int sl_listen_start_one(sl_transport *t, int i, bool first, nng_listener *out);

/* watchdog.c */

/* Starts the watchdog thread (failure is logged, not fatal). */
void sl_listen_watch_start(sl_transport *t);
/* Stops the watchdog thread (before the socket closes). */
void sl_listen_watch_stop(sl_transport *t);
/* After the socket closed: removes the socket files this server put in
 * place (when they are still its own) and frees listener bookkeeping. */
void sl_listen_fini(sl_transport *t);

/* For watchdog.c, in transport.c: live connections of
 * listener id (peers_lock taken inside). */
uint64_t sl_transport_listener_pipes(sl_transport *t, uint32_t listener_id);

#endif
