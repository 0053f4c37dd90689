/* The NNG side of salusd: one REP socket, a fixed pool of contexts (each one
 * request in flight), one aio per context that alternates receive and send.
 * Callbacks only hand the bytes over; replies are sent from whichever thread
 * completes the request.
 *
 * Security (DESIGN.md section 8). ipc:// socket files are created with
 * --ipc-mode permissions (0600: salusd's user only), with no window at other
 * permissions; every request carries the peer uid of its connection, which
 * the gate checks against the session owner's. tls+tcp:// listeners use
 * --tls-cert/--tls-key, and require client certificates signed by --tls-ca
 * when given. Plain tcp:// (or ws://) needs --allow-plain-tcp. Operator
 * listeners (--operator-listen) require certificates signed by
 * --operator-tls-ca instead, and mark their verified clients as operators:
 * NNG 1.5 tells whether a peer's certificate was verified, but not whose it
 * is, so the listener a pipe came through is what tells operators apart.
 *
 * Listener watchdog. NNG 1.5.2 (nanomsg/nng#1518, fixed in 1.6)
 * hands a peer's hang-up in the middle of the SP handshake to the listener as
 * NNG_ECLOSED, which the listener takes for its own close: it never accepts
 * again, and salusd is deaf to every new client while the kernel still queues
 * their connections. The transport still completes the SP handshake of
 * those connections; they just never join the socket. No NNG call restarts
 * that accept loop, so a thread probes every ipc:// and tcp:// listener once
 * a second: a raw SP handshake as a REQ peer (never hanging up before the
 * listener's header is in, which would itself trigger the bug), then it
 * waits for the listener
 * to hand a new pipe to the socket (NNG_PIPE_EV_ADD_POST; any pipe of that
 * listener counts: exactly what stops). After two failed probes in a row it
 * replaces the listener. An ipc:// path is unlinked and bound anew while the deaf
 * listener stays open, so connected clients keep their pipes (and sessions)
 * (at most SL_LISTEN_RETIRED_MAX times);
 * a tcp:// port cannot be bound twice, so there the old listener (and its
 * connections) is closed first. tls+tcp:// and ws:// are not probed (a probe
 * would need their handshakes). */
#include "transport.h"
#include "sl_map.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_nng.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Watchdog timing: a probe a second, a second and a half for the answer,
 * two failures in a row before a listener is replaced (a loaded server may
 * miss one). Deaf listeners are found within about five seconds. */
#define SL_LISTEN_PROBE_MS 1000
#define SL_LISTEN_PROBE_TIMEOUT_MS 1500
#define SL_LISTEN_PROBE_FAILURES 2
/* How long the stop waits after the latest reply was handed to NNG. A REP
 * context's send completes as soon as its message is queued on the pipe,
 * before the pipe has written it, and closing the socket drops what a pipe
 * has not written; NNG 1.5 neither lingers nor tells when a pipe is done.
 * Writes normally take microseconds; this covers a loaded host. */
#define SL_LINGER_NS (200 * 1000 * 1000ull)
/* How long a probe waits for the listener's SP header before it gives up
 * (past NNG's 10 s negotiation limit, so the listener hangs up first). */
#define SL_LISTEN_PROBE_HEADER_MS 12000
/* Deaf ipc:// listeners kept open for their connected clients (a few KiB
 * and one descriptor each). They are never closed before the socket:
 * closing a deaf listener can hang NNG 1.5. Past this many, the watchdog
 * stops replacing and logs it. */
#define SL_LISTEN_RETIRED_MAX 64

enum req_state { REQ_RECV, REQ_WAIT, REQ_SEND };

struct sl_req {
    sl_transport *t;
    nng_ctx ctx;
    nng_aio *aio;
    _Atomic int state; /* enum req_state; read by stop */
    bool has_uid;      /* the request in hand came over ipc:// from uid */
    uint64_t uid;
    bool is_operator; /* ... from a verified client of an operator listener */
    nng_pipe pipe;    /* the connection it came on */
};

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
    nng_listener listeners[SL_MAX_LISTEN]; /* listeners[i] serves cfg.listen[i] */
    int n_listeners;
    sl_req *reqs;
    int n_reqs;
    /* the watchdog; listeners and retired change only on its thread once
     * it runs */
    pthread_t watch_thread;
    bool watch_started;
    bool watch_stop; /* guarded by watch_lock */
    pthread_mutex_t watch_lock;
    pthread_cond_t watch_cond;
    int probe_failures[SL_MAX_LISTEN];
    nng_listener retired[SL_LISTEN_RETIRED_MAX]; /* deaf ipc:// listeners, oldest first */
    int n_retired;
    uint64_t replaced; /* listeners replaced so far */
    /* pipes each listener gave the socket, for the probes; written by
     * NNG's pipe callbacks */
    _Atomic uint32_t listener_ids[SL_MAX_LISTEN];
    _Atomic uint64_t pipes_added[SL_MAX_LISTEN];
    /* identity of each live pipe, filled as pipes join (SO_PEERCRED is
     * otherwise a system call per request): pipe id -> PEER_KNOWN, plus
     * uid + 1 over ipc://, plus PEER_OPERATOR for a verified client of an
     * operator listener */
    pthread_mutex_t peers_lock;
    sl_map peers;
    bool has_operator_listener;
};

#define PEER_KNOWN (1ull << 63)
#define PEER_OPERATOR (1ull << 62)
#define PEER_UID_MASK ((1ull << 40) - 1)
_Static_assert(sizeof(uintptr_t) == sizeof(uint64_t), "peer identities are kept in pointers");

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

static void *peer_lookup(sl_transport *t, nng_pipe p)
{
    uint64_t uid, v = PEER_KNOWN;
    if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) == 0)
        v |= (uid + 1) & PEER_UID_MASK;
    else if (operator_pipe(t, p))
        v |= PEER_OPERATOR;
    return (void *) (uintptr_t) v;
}

/* The identity of p: its uid over ipc:// (has_uid), whether it is an
 * operator listener's verified client. A pipe whose join callback has not
 * run yet is asked directly. */
static void peer_identity(sl_transport *t, nng_pipe p, sl_req *r)
{
    pthread_mutex_lock(&t->peers_lock);
    void *found = sl_map_get(&t->peers, nng_pipe_id(p));
    pthread_mutex_unlock(&t->peers_lock);
    uint64_t v = (uint64_t) (uintptr_t) (found ? found : peer_lookup(t, p));
    /* a pipe can join before its listener's id is recorded (at start, or
     * as the watchdog replaces a listener): ask again rather than keep a
     * refusal that was never meant */
    if (v == PEER_KNOWN && t->has_operator_listener && operator_pipe(t, p))
        v |= PEER_OPERATOR;
    r->has_uid = (v & PEER_UID_MASK) != 0;
    r->uid = r->has_uid ? (v & PEER_UID_MASK) - 1 : 0;
    r->is_operator = (v & PEER_OPERATOR) != 0;
}

static void rearm(sl_req *r)
{
    r->state = REQ_RECV;
    nng_ctx_recv(r->ctx, r->aio);
}

/* Whether a callback may call a hook (always pair with hook_leave). */
static bool hook_enter(sl_transport *t)
{
    atomic_fetch_add(&t->in_hook, 1);
    return !atomic_load(&t->mute);
}

static void hook_leave(sl_transport *t)
{
    atomic_fetch_sub(&t->in_hook, 1);
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
    peer_identity(t, pipe, r);
    r->pipe = pipe;
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
    if (ev == NNG_PIPE_EV_REM_POST) {
        pthread_mutex_lock(&t->peers_lock);
        (void) sl_map_del(&t->peers, nng_pipe_id(p));
        pthread_mutex_unlock(&t->peers_lock);
        if (hook_enter(t))
            t->hooks.pipe_gone(t->hooks.arg, (uint32_t) nng_pipe_id(p));
        hook_leave(t);
        return;
    }
    /* no room: its requests ask the system each time */
    void *peer = peer_lookup(t, p);
    pthread_mutex_lock(&t->peers_lock);
    (void) sl_map_put(&t->peers, nng_pipe_id(p), peer);
    pthread_mutex_unlock(&t->peers_lock);
    /* ADD_POST: the listener is alive (the watchdog's probe) */
    uint32_t from = nng_listener_id(nng_pipe_listener(p));
    for (int i = 0; i < SL_MAX_LISTEN; i++)
        if (atomic_load(&t->listener_ids[i]) == from)
            atomic_fetch_add(&t->pipes_added[i], 1);
}

bool sl_url_is_plain_network(const char *url)
{
    static const char *const plain[] = {"tcp://", "tcp4://", "tcp6://",
                                        "ws://",  "ws4://",  "ws6://"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strncmp(url, plain[i], strlen(plain[i])) == 0)
            return true;
    return false;
}

bool sl_url_is_tls(const char *url)
{
    return strncmp(url, "tls+tcp", 7) == 0 || strncmp(url, "wss", 3) == 0;
}

/* Reads a whole PEM file into a NUL-terminated buffer (caller frees). */
static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        sl_log_err("net.tls", "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1u << 20, n; /* certificate chains are kilobytes */
    char *buf = sl_malloc(cap);
    if (buf) {
        n = fread(buf, 1, cap - 1, f);
        if (n == cap - 1) {
            sl_log_err("net.tls", "%s is larger than 1 MiB: not a PEM file", path);
            sl_free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

/* The server's TLS configuration from --tls-cert/--tls-key, requiring
 * client certificates signed by ca when given (--tls-ca, or
 * --operator-tls-ca for operator listeners). */
static int tls_config(const sl_config *cfg, const char *ca, nng_tls_config **out)
{
    if (!cfg->tls_cert || !cfg->tls_key) {
        sl_log_err("net.tls", "tls+tcp:// needs --tls-cert FILE and --tls-key FILE");
        return SL_EINVAL;
    }
    struct stat st;
    if (stat(cfg->tls_key, &st) == 0 && (st.st_mode & 077))
        sl_log_warn("net.tls", "private key %s is readable by other users (mode %o)", cfg->tls_key,
                    (unsigned) (st.st_mode & 0777));
    char *cert = read_pem(cfg->tls_cert), *key = read_pem(cfg->tls_key);
    nng_tls_config *tc = NULL;
    int rv = NNG_EINVAL; /* unreadable (logged by read_pem) */
    if (!cert || !key)
        goto out_free;
    if ((rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_SERVER)) != 0)
        goto out_free;
    if ((rv = nng_tls_config_own_cert(tc, cert, key, NULL)) != 0) {
        sl_log_err("net.tls", "bad certificate %s or key %s: %s", cfg->tls_cert, cfg->tls_key,
                   nng_strerror(rv));
        goto out_free;
    }
    if (ca) {
        if ((rv = nng_tls_config_ca_file(tc, ca)) != 0) {
            sl_log_err("net.tls", "bad CA file %s: %s", ca, nng_strerror(rv));
            goto out_free;
        }
        rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED);
    } else {
        rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_NONE);
    }
out_free:
    sl_free(cert);
    if (key)
        explicit_bzero(key, strlen(key)); /* no private key left in freed memory */
    sl_free(key);
    if (rv) {
        if (tc)
            nng_tls_config_free(tc);
        return rv == NNG_ENOMEM ? SL_ENOMEM : SL_EINVAL;
    }
    *out = tc;
    return SL_OK;
}

/* Options of one listener before it starts (operator: an operator listener,
 * whose TLS clients must present a certificate --operator-tls-ca signs). */
static int configure_listener(const sl_config *cfg, nng_listener l, const char *url, bool operator)
{
    int rv;
    if (sl_url_is_plain_network(url)) {
        if (!cfg->allow_plain_tcp) {
            sl_log_err(
                "net.plain",
                "refusing to listen on %s: plain tcp is unauthenticated and unencrypted; use "
                "tls+tcp:// (--tls-cert, --tls-key), or --allow-plain-tcp on a trusted "
                "network",
                url);
            return SL_EINVAL;
        }
        sl_log_warn("net.plain",
                    "%s is unauthenticated and unencrypted (--allow-plain-tcp): anyone who can "
                    "reach it can use salusd; trusted networks only",
                    url);
    } else if (sl_url_is_tls(url)) {
        nng_tls_config *tc;
        int rc = tls_config(cfg, operator? cfg->operator_tls_ca : cfg->tls_ca, &tc);
        if (rc)
            return rc;
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tc);
        nng_tls_config_free(tc); /* the listener holds its own reference */
        if (rv) {
            sl_log_err("net.tls", "cannot use TLS on %s: %s (NNG TLS engine: %s)", url,
                       nng_strerror(rv), nng_tls_engine_name());
            return SL_EINVAL;
        }
    } else if (strncmp(url, "ipc://", 6) == 0) {
        rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, cfg->ipc_mode);
        if (rv) {
            sl_log_err("net.perm", "cannot set permissions %o on %s: %s", cfg->ipc_mode, url,
                       nng_strerror(rv));
            return SL_EINVAL;
        }
    }
    return SL_OK;
}

/* Creates, configures and starts the listener for url into *l. */
static int start_listener(sl_transport *t, const char *url, bool operator, nng_listener * l)
{
    int rv = nng_listener_create(l, t->sock, url);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        return rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? SL_EINVAL : SL_ECONN;
    }
    int rc = configure_listener(t->cfg, *l, url, operator);
    if (rc) {
        nng_listener_close(*l);
        return rc;
    }
    /* NNG binds, then chmods: the umask makes the socket file born with the
     * final permissions, so it is never connectable by others meanwhile */
    bool ipc = strncmp(url, "ipc://", 6) == 0;
    mode_t old_mask = ipc ? umask((mode_t) (~t->cfg->ipc_mode & 0777)) : 0;
    rv = nng_listener_start(*l, 0);
    if (ipc)
        umask(old_mask);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        nng_listener_close(*l);
        return rv == NNG_EADDRINVAL ? SL_EINVAL : SL_ECONN;
    }
    int port = 0;
    size_t len = strlen(url);
    if (len > 2 && strcmp(url + len - 2, ":0") == 0 &&
        nng_listener_get_int(*l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        sl_log_info("net.listen", "listening on %.*s:%d", (int) (len - 2), url, port);
    else
        sl_log_info("net.listen", "listening on %s", url);
    return SL_OK;
}

/* ---- listener watchdog (nanomsg/nng#1518) ---- */

static bool url_is_ipc(const char *url)
{
    return strncmp(url, "ipc://", 6) == 0;
}

/* Where a probe connects for listener l: the ipc:// path, or the bound tcp
 * address with a wildcard turned into loopback. False for transports the
 * watchdog does not probe. */
static bool probe_address(const char *url, nng_listener l, struct sockaddr_storage *ss,
                          socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (url_is_ipc(url)) {
        struct sockaddr_un *un = (struct sockaddr_un *) ss;
        const char *path = url + 6;
        if (strlen(path) >= sizeof un->sun_path)
            return false;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, path);
        *len = sizeof *un;
        return true;
    }
    if (!sl_url_is_plain_network(url) || strncmp(url, "ws", 2) == 0)
        return false;
    nng_sockaddr sa;
    if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return false;
    if (sa.s_family == NNG_AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *) ss;
        in->sin_family = AF_INET;
        in->sin_port = sa.s_in.sa_port; /* both in network order */
        in->sin_addr.s_addr = sa.s_in.sa_addr ? sa.s_in.sa_addr : htonl(INADDR_LOOPBACK);
        *len = sizeof *in;
        return true;
    }
    if (sa.s_family == NNG_AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = sa.s_in6.sa_port;
        memcpy(&in6->sin6_addr, sa.s_in6.sa_addr, sizeof in6->sin6_addr);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        *len = sizeof *in6;
        return true;
    }
    return false;
}

/* Waits for fd to be ready for events until deadline_ns. */
static bool wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = sl_now_ns();
        if (now >= deadline_ns)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int) ((deadline_ns - now) / 1000000 + 1));
        if (n > 0)
            return (p.revents & events) != 0;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

/* A raw SP handshake as a REQ peer, then waits, connection open, until
 * listener i gives the socket a pipe (this one or any other). True when
 * that happened in time. The whole REQ header is sent before anything is
 * awaited, so the probe never itself hangs up mid-handshake. */
static bool probe(sl_transport *t, int i, const struct sockaddr_storage *ss, socklen_t len)
{
    static const uint8_t req_header[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    uint64_t before = atomic_load(&t->pipes_added[i]);
    uint64_t deadline = sl_now_ns() + SL_LISTEN_PROBE_TIMEOUT_MS * 1000000ull;
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* out of descriptors: not the listener's fault */
    bool ok = false;
    if (connect(fd, (const struct sockaddr *) ss, len) != 0) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)
            goto out_close;
    }
    if (send(fd, req_header, sizeof req_header, MSG_NOSIGNAL) != (ssize_t) sizeof req_header)
        goto out_close;
    /* Hanging up before the listener has sent its header would be the very
     * hang-up that deafens it (a loaded server is slow, not deaf): read it
     * first, for as long as NNG's own 10 s negotiation limit lets it. */
    uint8_t got[8];
    size_t n = 0;
    uint64_t header_deadline = sl_now_ns() + SL_LISTEN_PROBE_HEADER_MS * 1000000ull;
    while (n < sizeof got && wait_fd(fd, POLLIN, header_deadline)) {
        ssize_t r = recv(fd, got + n, sizeof got - n, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            goto out_close; /* the listener hung up: its handshake is over */
        if (r > 0)
            n += (size_t) r;
    }
    if (n < sizeof got)
        goto out_close;
    if (sl_now_ns() > deadline)
        deadline = sl_now_ns() + SL_LISTEN_PROBE_TIMEOUT_MS * 1000000ull;
    struct timespec nap = {0, 5 * 1000 * 1000};
    while (!(ok = atomic_load(&t->pipes_added[i]) != before) && sl_now_ns() < deadline)
        nanosleep(&nap, NULL);
out_close:
    close(fd);
    return ok;
}

/* Replaces the deaf listener i by a new one on the same address. */
static void replace_listener(sl_transport *t, int i)
{
    const char *url = t->cfg->listen[i];
    nng_listener old = t->listeners[i];
    char bound[256];
    /* a tcp port chosen by the system (":0") must be kept: clients know it */
    size_t ulen = strlen(url);
    int port = 0;
    if (!url_is_ipc(url) && ulen > 2 && strcmp(url + ulen - 2, ":0") == 0 &&
        nng_listener_get_int(old, NNG_OPT_TCP_BOUND_PORT, &port) == 0 &&
        (size_t) snprintf(bound, sizeof bound, "%.*s:%d", (int) (ulen - 2), url, port) <
            sizeof bound)
        url = bound;
    bool already_retired = false; /* its replacement failed last time */
    for (int r = 0; r < t->n_retired; r++)
        already_retired |= nng_listener_id(t->retired[r]) == nng_listener_id(old);
    if (url_is_ipc(url) && already_retired) {
        (void) unlink(url + 6);
    } else if (url_is_ipc(url)) {
        /* the deaf listener keeps its connections; its path goes to the new one */
        if (t->n_retired == SL_LISTEN_RETIRED_MAX) {
            /* closing a deaf listener can hang NNG 1.5 (seen in the soak):
             * stop replacing rather than risk the whole socket */
            sl_log_err("net.watch",
                       "%d deaf listeners on %s already kept open; not replacing another",
                       t->n_retired, url);
            return;
        }
        t->retired[t->n_retired++] = old;
        (void) unlink(url + 6);
    } else {
        nng_listener_close(old);
    }
    t->replaced++;
    nng_listener fresh;
    int rc = start_listener(t, url, t->cfg->listen_operator[i], &fresh);
    if (rc != SL_OK) {
        /* logged by start_listener; the next probes fail and try again */
        sl_log_err("net.watch", "cannot replace the deaf listener on %s: %s", url, sl_strerror(rc));
        return;
    }
    t->listeners[i] = fresh;
    atomic_store(&t->listener_ids[i], (uint32_t) nng_listener_id(fresh));
}

static void *watch_main(void *arg)
{
    sl_transport *t = arg;
    pthread_mutex_lock(&t->watch_lock);
    while (!t->watch_stop) {
        uint64_t until = sl_now_ns() + SL_LISTEN_PROBE_MS * 1000000ull;
        while (!t->watch_stop &&
               sl_cond_wait_until(&t->watch_cond, &t->watch_lock, until) != ETIMEDOUT)
            ;
        if (t->watch_stop)
            break;
        pthread_mutex_unlock(&t->watch_lock);
        for (int i = 0; i < t->n_listeners; i++) {
            struct sockaddr_storage ss;
            socklen_t len;
            if (!probe_address(t->cfg->listen[i], t->listeners[i], &ss, &len))
                continue;
            if (probe(t, i, &ss, len)) {
                t->probe_failures[i] = 0;
                continue;
            }
            if (++t->probe_failures[i] < SL_LISTEN_PROBE_FAILURES)
                continue;
            t->probe_failures[i] = 0;
            sl_log_warn("net.deaf",
                        "listener on %s stopped accepting connections (a peer hung up mid-"
                        "handshake, nanomsg/nng#1518 in NNG %s); replacing it",
                        t->cfg->listen[i], nng_version());
            replace_listener(t, i);
        }
        pthread_mutex_lock(&t->watch_lock);
    }
    pthread_mutex_unlock(&t->watch_lock);
    return NULL;
}

static void watch_start(sl_transport *t)
{
    if (sl_cond_init_monotonic(&t->watch_cond) != 0)
        goto out_fail;
    if (pthread_mutex_init(&t->watch_lock, NULL) != 0)
        goto out_cond;
    if (pthread_create(&t->watch_thread, NULL, watch_main, t) != 0)
        goto out_lock;
    t->watch_started = true;
    return;

out_lock:
    pthread_mutex_destroy(&t->watch_lock);
out_cond:
    pthread_cond_destroy(&t->watch_cond);
out_fail:
    sl_log_warn("net.watch", "cannot start the listener watchdog: a listener that NNG stops "
                             "(nanomsg/nng#1518) will not be replaced");
}

static void watch_stop(sl_transport *t)
{
    if (!t->watch_started)
        return;
    pthread_mutex_lock(&t->watch_lock);
    t->watch_stop = true;
    pthread_cond_signal(&t->watch_cond);
    pthread_mutex_unlock(&t->watch_lock);
    (void) pthread_join(t->watch_thread, NULL);
    pthread_cond_destroy(&t->watch_cond);
    pthread_mutex_destroy(&t->watch_lock);
    t->watch_started = false;
}

int sl_transport_start(const sl_config *cfg, const sl_transport_hooks *hooks, sl_transport **out)
{
    sl_transport *t = sl_calloc(1, sizeof *t);
    if (!t)
        return SL_ENOMEM;
    t->cfg = cfg;
    t->hooks = *hooks;
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
    (void) nng_pipe_notify(t->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, t);

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
    for (int i = 0; i < cfg->n_listen; i++) {
        if ((rc = start_listener(t, cfg->listen[i], cfg->listen_operator[i], &t->listeners[i])) !=
            SL_OK)
            goto out_close;
        atomic_store(&t->listener_ids[i], (uint32_t) nng_listener_id(t->listeners[i]));
        t->n_listeners++;
    }
    for (int i = 0; i < t->n_reqs; i++)
        rearm(&t->reqs[i]);
    watch_start(t); /* a server without it still serves: not fatal */
    *out = t;
    return SL_OK;

out_close:
    nng_close(t->sock);
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_free(t->reqs[i].aio);
        nng_ctx_close(t->reqs[i].ctx);
    }
    sl_free(t->reqs);
    sl_map_fini(&t->peers);
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
    watch_stop(t); /* before the socket: it replaces listeners */
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
        return false;
    }
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_stop(t->reqs[i].aio);
        nng_aio_free(t->reqs[i].aio);
    }
    sl_free(t->reqs);
    sl_map_fini(&t->peers);
    pthread_mutex_destroy(&t->peers_lock);
    sl_free(t);
    return true;
}
