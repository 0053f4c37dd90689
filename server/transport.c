/* The NNG side of salusd: one REP socket, a fixed pool of contexts (each one
 * request in flight), one aio per context that alternates receive and send.
 * Callbacks only decode and hand over; replies are sent from whichever thread
 * completes the request.
 *
 * Security (DESIGN.md section 8). ipc:// socket files are created with
 * --ipc-mode permissions (0600: salusd's user only), with no window at other
 * permissions; every request carries the peer uid of its connection, which
 * dispatch checks against the session owner's. tls+tcp:// listeners use
 * --tls-cert/--tls-key, and require client certificates signed by --tls-ca
 * when given. Plain tcp:// (or ws://) needs --allow-plain-tcp. */
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_nng.h"

#include <errno.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum req_state { REQ_RECV, REQ_WAIT, REQ_SEND };

struct sl_req {
    sl_server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    enum req_state state;
    bool has_uid; /* the request in hand came over ipc:// from uid */
    uint64_t uid;
    nng_pipe pipe; /* the connection it came on */
};

struct sl_transport {
    nng_socket sock;
    nng_listener listeners[SL_MAX_LISTEN];
    int n_listeners;
    sl_req *reqs;
    int n_reqs;
};

static void rearm(sl_req *r)
{
    r->state = REQ_RECV;
    nng_ctx_recv(r->ctx, r->aio);
}

static void req_cb(void *arg)
{
    sl_req *r = arg;
    int rv = nng_aio_result(r->aio);

    if (r->state == REQ_SEND) {
        if (rv) {
            /* the requester went away; the message is still ours */
            nng_msg_free(nng_aio_get_msg(r->aio));
        }
        if (rv != NNG_ECLOSED)
            rearm(r);
        return;
    }
    if (rv) {
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED)
            rearm(r);
        return;
    }
    nng_msg *msg = nng_aio_get_msg(r->aio);
    nng_pipe pipe = nng_msg_get_pipe(msg);
    uint32_t pipe_id = nng_pipe_id(pipe);
    /* ipc:// only (SO_PEERCRED); other transports answer NNG_ENOTSUP */
    uint64_t uid = 0;
    r->has_uid = nng_pipe_get_uint64(pipe, NNG_OPT_IPC_PEER_UID, &uid) == 0;
    r->uid = uid;
    r->pipe = pipe;
    Salus__Request *req = salus__request__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    /* set before handing over: the reply may be sent (and this context
     * re-armed) by another thread before sl_dispatch returns */
    r->state = REQ_WAIT;
    if (!req) {
        sl_reply *reply = sl_reply_new(0);
        if (reply)
            sl_reply_error(reply, SL_EPROTO, "undecodable request");
        pthread_mutex_lock(&r->srv->lock);
        r->srv->requests_total++;
        r->srv->errors_total++;
        pthread_mutex_unlock(&r->srv->lock);
        sl_log_debug("net.decode", "undecodable request from pipe %u", pipe_id);
        sl_transport_reply(r->srv, r, reply);
        return;
    }
    sl_dispatch(r->srv, r, req, pipe_id);
}

void sl_transport_reply(sl_server *srv, sl_req *r, sl_reply *reply)
{
    (void) srv;
    if (!r) {
        sl_reply_free(reply);
        return;
    }
    nng_msg *msg;
    if (!reply) {
        rearm(r);
        return;
    }
    Salus__Reply *m = sl_reply_msg(reply);
    size_t len = salus__reply__get_packed_size(m);
    if (nng_msg_alloc(&msg, len) != 0) {
        sl_log_err("net.oom", "cannot allocate a %zu-byte reply", len);
        sl_reply_free(reply);
        rearm(r);
        return;
    }
    salus__reply__pack(m, nng_msg_body(msg));
    sl_reply_free(reply);
    r->state = REQ_SEND;
    nng_aio_set_msg(r->aio, msg);
    nng_ctx_send(r->ctx, r->aio);
}

bool sl_req_peer_uid(const sl_req *req, uint64_t *uid)
{
    if (!req || !req->has_uid)
        return false;
    *uid = req->uid;
    return true;
}

bool sl_req_peer_pid(const sl_req *req, uint64_t *pid)
{
    /* asked when needed, not per request: only attaching shared memory does */
    return req && req->has_uid && nng_pipe_get_uint64(req->pipe, NNG_OPT_IPC_PEER_PID, pid) == 0;
}

bool sl_req_same_user(const sl_req *req, const sl_session *s)
{
    uint64_t uid;
    return !s->has_uid || (sl_req_peer_uid(req, &uid) && uid == s->uid);
}

bool sl_req_is_operator(const sl_req *req)
{
    uint64_t uid;
    return !sl_req_peer_uid(req, &uid) || uid == 0 || uid == (uint64_t) geteuid();
}

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    if (ev == NNG_PIPE_EV_REM_POST)
        sl_dispatch_pipe_gone(arg, nng_pipe_id(p));
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

/* The server's TLS configuration from --tls-cert/--tls-key[/--tls-ca]. */
static int tls_config(const sl_config *cfg, nng_tls_config **out)
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
    if (cfg->tls_ca) {
        if ((rv = nng_tls_config_ca_file(tc, cfg->tls_ca)) != 0) {
            sl_log_err("net.tls", "bad CA file %s: %s", cfg->tls_ca, nng_strerror(rv));
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

/* Options of one listener before it starts. */
static int configure_listener(sl_server *srv, nng_listener l, const char *url)
{
    int rv;
    if (sl_url_is_plain_network(url)) {
        if (!srv->cfg.allow_plain_tcp) {
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
        int rc = tls_config(&srv->cfg, &tc);
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
        rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, srv->cfg.ipc_mode);
        if (rv) {
            sl_log_err("net.perm", "cannot set permissions %o on %s: %s", srv->cfg.ipc_mode, url,
                       nng_strerror(rv));
            return SL_EINVAL;
        }
    }
    return SL_OK;
}

static int start_listener(sl_server *srv, struct sl_transport *t, const char *url)
{
    nng_listener *l = &t->listeners[t->n_listeners];
    int rv = nng_listener_create(l, t->sock, url);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        return rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? SL_EINVAL : SL_ECONN;
    }
    int rc = configure_listener(srv, *l, url);
    if (rc) {
        nng_listener_close(*l);
        return rc;
    }
    /* NNG binds, then chmods: the umask makes the socket file born with the
     * final permissions, so it is never connectable by others meanwhile */
    bool ipc = strncmp(url, "ipc://", 6) == 0;
    mode_t old_mask = ipc ? umask((mode_t) (~srv->cfg.ipc_mode & 0777)) : 0;
    rv = nng_listener_start(*l, 0);
    if (ipc)
        umask(old_mask);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        nng_listener_close(*l);
        return rv == NNG_EADDRINVAL ? SL_EINVAL : SL_ECONN;
    }
    t->n_listeners++;
    int port = 0;
    size_t len = strlen(url);
    if (len > 2 && strcmp(url + len - 2, ":0") == 0 &&
        nng_listener_get_int(*l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        sl_log_info("net.listen", "listening on %.*s:%d", (int) (len - 2), url, port);
    else
        sl_log_info("net.listen", "listening on %s", url);
    return SL_OK;
}

int sl_transport_start(sl_server *srv)
{
    struct sl_transport *t = sl_calloc(1, sizeof *t);
    if (!t)
        return SL_ENOMEM;
    int rc = SL_ECONN;
    int rv = nng_rep0_open(&t->sock);
    if (rv) {
        sl_log_err("net.open", "cannot open socket: %s", nng_strerror(rv));
        goto out_free;
    }
    /* before any listener starts, so no message over the limit gets in */
    (void) nng_socket_set_size(t->sock, NNG_OPT_RECVMAXSZ, srv->cfg.max_message);
    (void) nng_pipe_notify(t->sock, NNG_PIPE_EV_REM_POST, pipe_cb, srv);

    t->reqs = sl_calloc((size_t) srv->cfg.contexts, sizeof *t->reqs);
    if (!t->reqs) {
        rc = SL_ENOMEM;
        goto out_close;
    }
    for (int i = 0; i < srv->cfg.contexts; i++) {
        sl_req *r = &t->reqs[i];
        r->srv = srv;
        if (nng_ctx_open(&r->ctx, t->sock) != 0 || nng_aio_alloc(&r->aio, req_cb, r) != 0) {
            rc = SL_ENOMEM;
            goto out_close;
        }
        t->n_reqs++;
    }
    srv->transport = t;
    for (int i = 0; i < srv->cfg.n_listen; i++) {
        if ((rc = start_listener(srv, t, srv->cfg.listen[i])) != SL_OK)
            goto out_close;
    }
    for (int i = 0; i < t->n_reqs; i++)
        rearm(&t->reqs[i]);
    return SL_OK;

out_close:
    srv->transport = NULL;
    nng_close(t->sock);
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_free(t->reqs[i].aio);
        nng_ctx_close(t->reqs[i].ctx);
    }
    sl_free(t->reqs);
out_free:
    sl_free(t);
    return rc;
}

bool sl_transport_stop(sl_server *srv)
{
    struct sl_transport *t = srv->transport;
    if (!t)
        return true;
    /* closing the socket closes its listeners, pipes and contexts and
     * aborts every pending aio (callbacks then see NNG_ECLOSED and do not
     * re-arm); stopping each aio afterwards waits for running callbacks */
    if (!sl_nng_close_bounded(t->sock, 3)) {
        sl_log_warn("net.close", "the NNG socket did not close within 3 s (a known NNG 1.5 bug); "
                                 "leaving it to the exit");
        return false;
    }
    for (int i = 0; i < t->n_reqs; i++) {
        nng_aio_stop(t->reqs[i].aio);
        nng_aio_free(t->reqs[i].aio);
    }
    sl_free(t->reqs);
    sl_free(t);
    srv->transport = NULL;
    return true;
}
