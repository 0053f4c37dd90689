/* The NNG side of salusd: one REP socket, a fixed pool of contexts (each one
 * request in flight), one aio per context that alternates receive and send.
 * Callbacks only hand the bytes over; replies are sent from whichever thread
 * completes the request. Listeners are started in listen.c; their watchdog
 * and the connection deadlines are in watchdog.c.
 *
 * Security (docs/security.md). ipc:// sockets live in a directory that
 * only salusd's user (or root) can write, checked up the whole path before
 * anything is bound, and are born with --ipc-mode permissions; every request
 * carries the peer uid of its connection, which the gate checks against the
 * session owner's, and clients check the server's uid in turn (client.c).
 * tls+tcp:// listeners use --tls-cert/--tls-key and require client
 * certificates signed by --tls-ca unless --tls-allow-anonymous. Plain
 * tcp:// (or ws://) needs --allow-plain-tcp.
 *
 * Deaf listeners. NNG 1.5.2 (nanomsg/nng#1518, fixed in 1.6) hands a peer's
 * hang-up before the listener has written its SP header (EPIPE, reported as
 * NNG_ECLOSED) to the core listener, which takes it for its own close and
 * never asks the transport for another connection. The transport still
 * accepts and negotiates connections, then parks them forever: clients hang
 * and each parked connection keeps a descriptor, even after the listener is
 * closed (closing shuts parked connections down but never frees them).
 * No NNG call restarts the accept loop, so:
 *  - detection is immediate and costs nothing per connection: NNG counts
 *    the fatal error in the listener's "other" statistic, which the watchdog
 *    reads every SL_WATCH_TICK_MS. The kernel's view (the listening socket's
 *    queue, UNIX_DIAG_RQLEN or ss's Recv-Q) shows nothing: NNG keeps
 *    accepting; and a once-a-second probe took seconds and parked its own
 *    connection in every deaf listener it found (3 descriptors per cycle
 *    with the listening socket);
 *  - "other" also counts errors after which NNG does go on accepting (a peer
 *    hanging up later in the handshake). An ipc:// listener is replaced at
 *    once either way: replacing is atomic and costs connected clients
 *    nothing. A tcp:// or tls+tcp:// listener must be closed before its port
 *    is bound again, dropping its connections, so it is first confirmed deaf
 *    by a probe that fails its handshake on purpose (a bad SP header, or no
 *    TLS at all): a listening listener counts that failure, a deaf one cannot
 *    (only the core listener counts errors), and the probe's connection is
 *    never parked;
 *  - an ipc:// listener is replaced by binding a fresh one at a temporary
 *    name in the same directory and rename()-ing it over the public path:
 *    there is never a moment without a socket there and no unlink window for
 *    another user (none can write that directory anyway). Every listener is
 *    bound at a temporary name, because NNG unlinks the name it bound when a
 *    listener closes;
 *  - the retired listener keeps its connected clients and is closed as soon
 *    as it has none left (pipes are counted per listener in the pipe
 *    callbacks). Closing a listener with no pipes does not hang NNG 1.5.2:
 *    its reaper only waits for the listener's own pipes (over ten thousand
 *    closed in one attack test, none hung). There is no limit on
 *    replacements;
 *  - what NNG never frees of a closed ipc:// listener (its parked
 *    connections and, while they exist, its listening socket: two
 *    descriptors per client caught in the window) is closed by salusd a few
 *    seconds later, found by getsockname: every listener is bound at a
 *    name of its own, which its accepted connections carry too.
 *
 * Connections that hold memory. NNG allocates a message's announced size
 * (up to --max-message) when its header arrives and keeps it until the rest
 * comes; nothing in its API shows a partial message, so a stalled one
 * cannot be told from an idle client that holds a session (whose session
 * would go with its connection). What bounds them is the count: each uid
 * other than root and salusd's own may hold at most
 * --max-connections-per-user ipc:// connections, and at most
 * --max-receiving-per-user / --max-message of them (refused as they join;
 * the budget defaults to an eighth of salusd's memory, its cgroup's limit
 * where one is set), with a session or without. A connection that holds
 * no session, has no request in hand and completed no request for
 * --idle-timeout is also closed (a stalled partial message, an idle or a
 * half-open peer: a client library reconnects by itself). The watchdog also
 * watches salusd's own descriptors: above three quarters of RLIMIT_NOFILE
 * it closes idle sessionless connections after a second, not the timeout. */
#include "transport_internal.h"
#include "sl_alloc.h"
#include "sl_cgroup.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_nng.h"
#include "sl_time.h"

#include <nng/protocol/reqrep0/rep.h>
#include <nng/transport/ipc/ipc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long the stop waits after the latest reply was handed to NNG. A REP
 * context's send completes as soon as its message is queued on the pipe,
 * before the pipe has written it, and closing the socket drops what a pipe
 * has not written; NNG 1.5 neither lingers nor tells when a pipe is done.
 * Writes normally take microseconds; this covers a loaded host. */
#define SL_LINGER_NS (200 * 1000 * 1000ull)

/* Whether pipe p came through an operator listener and, for TLS, its
 * client presented a certificate the operator CA signed (the listener
 * requires one; asking the pipe as well costs nothing and keeps a
 * misconfigured listener from granting rights), or through an inproc://
 * listener (only salusd's own process can reach one). */
static bool operator_pipe(sl_transport *t, nng_pipe p)
{
    uint32_t from = (uint32_t) nng_listener_id(nng_pipe_listener(p));
    for (int i = 0; i < t->cfg->n_listen && from; i++) {
        if (atomic_load(&t->listener_ids[i]) != from)
            continue;
        if (strncmp(t->cfg->listen[i], "inproc://", 9) == 0)
            return true; /* salusd's own process: an embedding program */
        if (!t->cfg->listen_operator[i])
            return false;
        if (!sl_url_is_tls(t->cfg->listen[i]))
            return true; /* plain tcp, named an operator listener explicitly */
        bool verified = false;
        return nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &verified) == 0 && verified;
    }
    return false;
}

/* The identity of p into r: its uid over ipc:// (SO_PEERCRED), whether it
 * is an operator listener's verified client; and notes that p completed a
 * request now. A pipe whose join callback has not run yet is asked
 * directly. */
static void peer_seen(sl_transport *t, nng_pipe p, sl_req *r)
{
    pthread_mutex_lock(&t->peers_lock);
    sl_conn *peer = sl_map_get(&t->peers, nng_pipe_id(p));
    r->has_uid = r->is_operator = false;
    r->uid = 0;
    if (peer) {
        atomic_store(&peer->last_ns, sl_now_ns());
        r->has_uid = peer->has_uid;
        r->uid = peer->uid;
        r->is_operator = peer->is_operator;
    }
    pthread_mutex_unlock(&t->peers_lock);
    if (!peer)
        r->has_uid = nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &r->uid) == 0;
    /* a pipe can join before its listener's id is recorded (at start, or
     * as the watchdog replaces a listener): ask again rather than keep a
     * refusal that was never meant */
    if (!r->has_uid && !r->is_operator && t->has_operator_listener)
        r->is_operator = operator_pipe(t, p);
}

static uint64_t count_add(sl_map *m, uint64_t key, int delta)
{
    uint64_t n = (uint64_t) (uintptr_t) sl_map_get(m, key) + (uint64_t) (int64_t) delta;
    if (n == 0)
        (void) sl_map_del(m, key);
    else if (sl_map_put(m, key, (void *) (uintptr_t) n) != SL_OK)
        return 0; /* out of memory: the count is lost, never wrong upward */
    return n;
}

uint64_t sl_transport_listener_pipes(sl_transport *t, uint32_t listener_id)
{
    pthread_mutex_lock(&t->peers_lock);
    uint64_t n = (uint64_t) (uintptr_t) sl_map_get(&t->per_listener, listener_id);
    pthread_mutex_unlock(&t->peers_lock);
    return n;
}

/* Whether uid may hold another connection (root and salusd's own user
 * always may). */
static bool under_cap(const sl_transport *t, uint64_t uid, uint64_t held)
{
    return uid == 0 || uid == (uint64_t) geteuid() || !t->conns_per_uid || held < t->conns_per_uid;
}

/* The connections one uid may hold: each can hold one message of up to
 * max_message while it arrives, NNG having allocated it whole from its
 * header, and nothing in NNG's API shows such a message; so the count is
 * what bounds the bytes, whether or not the connections hold sessions. */
static void size_conn_cap(sl_transport *t)
{
    const sl_config *cfg = t->cfg;
    uint64_t budget = cfg->max_receiving_per_user;
    if (!budget) {
        uint64_t host = sl_host_memory();
        budget = host ? host / 8 : 0;
    }
    t->conns_per_uid = cfg->max_conns_per_user;
    if (!budget)
        return;
    uint64_t by_memory = budget / (cfg->max_message ? cfg->max_message : 1);
    if (by_memory < 1)
        by_memory = 1;
    if (!t->conns_per_uid || by_memory < t->conns_per_uid) {
        t->conns_per_uid = by_memory;
        t->conns_by_memory = true;
    }
}

static void pipe_joins(sl_transport *t, nng_pipe p)
{
    sl_conn *peer = sl_calloc(1, sizeof *peer);
    uint64_t uid = 0;
    bool has_uid = nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) == 0;
    uint32_t listener = (uint32_t) nng_listener_id(nng_pipe_listener(p));
    bool refused = false;
    pthread_mutex_lock(&t->peers_lock);
    if (has_uid && !under_cap(t, uid, (uint64_t) (uintptr_t) sl_map_get(&t->per_uid, uid + 1))) {
        refused = true;
    } else if (peer) {
        peer->pipe = p;
        peer->has_uid = has_uid;
        peer->uid = uid;
        peer->is_operator = !has_uid && t->has_operator_listener && operator_pipe(t, p);
        peer->listener = listener;
        atomic_store(&peer->last_ns, sl_now_ns());
        if (sl_map_put(&t->peers, nng_pipe_id(p), peer) == SL_OK) {
            if (has_uid)
                (void) count_add(&t->per_uid, uid + 1, 1);
            if (listener)
                (void) count_add(&t->per_listener, listener, 1);
            peer = NULL; /* the map holds it */
        }
    }
    pthread_mutex_unlock(&t->peers_lock);
    /* one line a second at most: the refused peer decides how often */
    static _Atomic uint64_t cap_logged_ns;
    uint64_t now = sl_now_ns(), logged = atomic_load(&cap_logged_ns);
    if (refused && now - logged >= 1000000000ull &&
        atomic_compare_exchange_strong(&cap_logged_ns, &logged, now))
        sl_log_warn("net.cap", "uid %llu already holds %llu connections (%s); refusing another",
                    (unsigned long long) uid, (unsigned long long) t->conns_per_uid,
                    t->conns_by_memory ? "--max-receiving-per-user / --max-message"
                                       : "--max-connections-per-user");
    if (refused) {
        (void) nng_pipe_close(p);
    } else if (peer) {
        /* no memory to track it: it could never be held to a deadline */
        sl_log_err("net.oom", "no memory to track a new connection; closing it");
        (void) nng_pipe_close(p);
    }
    sl_free(peer);
}

static void pipe_leaves(sl_transport *t, nng_pipe p)
{
    pthread_mutex_lock(&t->peers_lock);
    sl_conn *peer = sl_map_del(&t->peers, nng_pipe_id(p));
    if (peer && peer->has_uid)
        (void) count_add(&t->per_uid, peer->uid + 1, -1);
    if (peer && peer->listener)
        (void) count_add(&t->per_listener, peer->listener, -1);
    pthread_mutex_unlock(&t->peers_lock);
    sl_free(peer);
}

static void rearm(sl_req *r)
{
    r->state = REQ_RECV;
    nng_ctx_recv(r->ctx, r->aio);
}

static bool hook_enter(sl_transport *t)
{
    return sl_transport_hook_enter(t);
}

static void hook_leave(sl_transport *t)
{
    sl_transport_hook_leave(t);
}

static void req_cb(void *arg)
{
    sl_req *r = arg;
    sl_transport *t = r->t;
    int rv = nng_aio_result(r->aio);

    if (r->state == REQ_SEND) {
        if (rv) {
            /* the requester went away; the message is still ours */
            nng_msg_free(nng_aio_get_msg(r->aio));
        }
        if (rv != NNG_ECLOSED && !atomic_load(&t->mute))
            rearm(r);
        return;
    }
    if (rv) {
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !atomic_load(&t->mute))
            rearm(r);
        return;
    }
    nng_msg *msg = nng_aio_get_msg(r->aio);
    if (atomic_load(&t->mute)) {
        nng_msg_free(msg);
        return;
    }
    nng_pipe pipe = nng_msg_get_pipe(msg);
    /* a uid over ipc:// (SO_PEERCRED); elsewhere only the listener's kind */
    peer_seen(t, pipe, r);
    r->pipe = pipe;
    atomic_store(&r->pipe_id, (uint32_t) nng_pipe_id(pipe));
    /* set before handing over: the reply may be sent (and this context
     * re-armed) by another thread before the hook returns */
    r->state = REQ_WAIT;
    if (hook_enter(t))
        t->hooks.request(t->hooks.arg, r, nng_msg_body(msg), nng_msg_len(msg));
    hook_leave(t);
    nng_msg_free(msg);
}

void sl_transport_send(sl_req *r, sl_reply *reply, sl_send_tap tap, void *tap_arg)
{
    nng_msg *msg;
    if (!r || !reply) {
        if (reply && tap)
            tap(tap_arg, reply, NULL, 0);
        sl_reply_free(reply);
        if (r)
            rearm(r);
        return;
    }
    Salus__Reply *m = sl_reply_msg(reply);
    size_t len = salus__reply__get_packed_size(m);
    if (nng_msg_alloc(&msg, len) != 0) {
        sl_log_err("net.oom", "cannot allocate a %zu-byte reply", len);
        if (tap)
            tap(tap_arg, reply, NULL, 0);
        sl_reply_free(reply);
        rearm(r);
        return;
    }
    salus__reply__pack(m, nng_msg_body(msg));
    if (tap)
        tap(tap_arg, reply, nng_msg_body(msg), len);
    sl_reply_free(reply);
    atomic_store(&r->t->last_send_ns, sl_now_ns());
    r->state = REQ_SEND;
    nng_aio_set_msg(r->aio, msg);
    nng_ctx_send(r->ctx, r->aio);
}

void sl_transport_send_bytes(sl_req *r, const void *bytes, size_t len)
{
    nng_msg *msg;
    if (!r)
        return;
    if (nng_msg_alloc(&msg, len) != 0) {
        sl_log_err("net.oom", "cannot allocate a %zu-byte reply", len);
        rearm(r);
        return;
    }
    memcpy(nng_msg_body(msg), bytes, len);
    atomic_store(&r->t->last_send_ns, sl_now_ns());
    r->state = REQ_SEND;
    nng_aio_set_msg(r->aio, msg);
    nng_ctx_send(r->ctx, r->aio);
}

uint32_t sl_req_pipe(const sl_req *req)
{
    return (uint32_t) nng_pipe_id(req->pipe);
}

bool sl_req_peer_uid(const sl_req *req, uint64_t *uid)
{
    if (!req || !req->has_uid)
        return false;
    *uid = req->uid;
    return true;
}

bool sl_req_is_operator(const sl_req *req)
{
    if (!req)
        return true; /* salusd's own callers (tests), not a peer */
    if (req->has_uid)
        return req->uid == 0 || req->uid == (uint64_t) geteuid();
    return req->is_operator;
}

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    sl_transport *t = arg;
    if (atomic_load(&t->mute))
        return;
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        pipe_joins(t, p);
        return;
    }
    /* REM_POST, also for pipes refused as they joined */
    pipe_leaves(t, p);
    if (hook_enter(t))
        t->hooks.pipe_gone(t->hooks.arg, (uint32_t) nng_pipe_id(p));
    hook_leave(t);
}

static void free_peers(sl_transport *t)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&t->peers, &i, NULL, &v))
        sl_free(v);
    sl_map_fini(&t->peers);
    sl_map_fini(&t->per_listener);
    sl_map_fini(&t->per_uid);
}

int sl_transport_start(const sl_config *cfg, const sl_transport_hooks *hooks, sl_transport **out)
{
    sl_transport *t = sl_calloc(1, sizeof *t);
    if (!t)
        return SL_ENOMEM;
    t->cfg = cfg;
    t->hooks = *hooks;
    size_conn_cap(t);
    for (int i = 0; i < cfg->n_listen; i++)
        t->has_operator_listener |=
            cfg->listen_operator[i] || strncmp(cfg->listen[i], "inproc://", 9) == 0;
    int rc = SL_ECONN;
    if (pthread_mutex_init(&t->peers_lock, NULL) != 0)
        goto out_free_t;
    int rv = nng_rep0_open(&t->sock);
    if (rv) {
        sl_log_err("net.open", "cannot open socket: %s", nng_strerror(rv));
        goto out_free;
    }
    /* before any listener starts, so no message over the limit gets in */
    (void) nng_socket_set_size(t->sock, NNG_OPT_RECVMAXSZ, cfg->max_message);
    (void) nng_pipe_notify(t->sock, NNG_PIPE_EV_REM_POST, pipe_cb, t);
    (void) nng_pipe_notify(t->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, t);

    t->reqs = sl_calloc((size_t) cfg->contexts, sizeof *t->reqs);
    if (!t->reqs) {
        rc = SL_ENOMEM;
        goto out_close;
    }
    for (int i = 0; i < cfg->contexts; i++) {
        sl_req *r = &t->reqs[i];
        r->t = t;
        if (nng_ctx_open(&r->ctx, t->sock) != 0 || nng_aio_alloc(&r->aio, req_cb, r) != 0) {
            rc = SL_ENOMEM;
            goto out_close;
        }
        t->n_reqs++;
    }
    if ((rc = sl_listen_start(t)) != SL_OK)
        goto out_close;
    for (int i = 0; i < t->n_reqs; i++)
        rearm(&t->reqs[i]);
    sl_listen_watch_start(t); /* a server without it still serves: not fatal */
    *out = t;
    return SL_OK;

out_close:
    nng_close(t->sock);
    sl_listen_fini(t);
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_free(t->reqs[i].aio);
        nng_ctx_close(t->reqs[i].ctx);
    }
    sl_free(t->reqs);
    free_peers(t);
out_free:
    pthread_mutex_destroy(&t->peers_lock);
out_free_t:
    sl_free(t);
    return rc;
}

bool sl_transport_stop(sl_transport *t)
{
    if (!t)
        return true;
    sl_listen_watch_stop(t); /* before the socket: it replaces listeners */
    /* replies on their way out leave first (a client must get its answer
     * even when salusd exits right after, as on an unrecoverable device) */
    uint64_t flush_until = sl_now_ns() + 2000000000ull;
    struct timespec nap = {0, 100 * 1000};
    for (int i = 0; i < t->n_reqs && sl_now_ns() < flush_until; i++)
        while (atomic_load(&t->reqs[i].state) == REQ_SEND && sl_now_ns() < flush_until)
            nanosleep(&nap, NULL);
    while (sl_now_ns() - atomic_load(&t->last_send_ns) < SL_LINGER_NS && sl_now_ns() < flush_until)
        nanosleep(&nap, NULL);
    /* no hook runs from here on: the server may free their state even if
     * NNG cannot close (hooks never block, so this wait is short) */
    atomic_store(&t->mute, true);
    while (atomic_load(&t->in_hook) > 0)
        nanosleep(&nap, NULL);
    /* closing the socket closes its listeners, pipes and contexts and
     * aborts every pending aio (callbacks then see NNG_ECLOSED and do not
     * re-arm); stopping each aio afterwards waits for running callbacks */
    if (!sl_nng_close_bounded(t->sock, 3)) {
        sl_log_warn("net.close", "the NNG socket did not close within 3 s (a known NNG 1.5 bug); "
                                 "its callbacks are muted and its memory is left to the exit");
        sl_listen_fini(t);
        return false;
    }
    sl_listen_fini(t);
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_stop(t->reqs[i].aio);
        nng_aio_free(t->reqs[i].aio);
    }
    sl_free(t->reqs);
    free_peers(t);
    pthread_mutex_destroy(&t->peers_lock);
    sl_free(t);
    return true;
}
